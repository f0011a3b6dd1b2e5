// Asynchronous sliding window counter: approximate, cheap.
#pragma once

#include <sluice/basic_limiter.hpp>
#include <sluice/policy/weighted_counter.hpp>

#include <tuple>

namespace sluice {

/// Asynchronous sliding window counter (policy::weighted_counter): two fixed windows
/// weighted by overlap, one atomic word, approximate. Waiters are retried when the
/// estimate drops enough.
///
/// The operations (try_acquire, async_acquire, acquire, acquire_blocking, close, stats) are
/// those of basic_limiter.
///
/// Executor: completion handlers run on their associated executor (the limiter's when they
/// have none), never inside async_acquire or another completion, and never with the
/// limiter's lock held. The limiter's own executor runs its one timer, armed for the time
/// the head of the queue may be granted.
///
/// Cancellation: async_acquire honours terminal, partial and total cancellation while it
/// waits: it completes with asio::error::operation_aborted, having consumed nothing (a
/// waiter holds no reservation), and the waiters behind it move up. close() and the
/// destructor complete every waiter with error::closed.
///
/// Thread-safety: distinct objects safe; a shared limiter may be used from any number of
/// threads and io_contexts at once. try_acquire is lock-free (compare-and-swaps on the
/// policy's two words); waiting requests and set_limit take a short mutex.
template <class Clock = std::chrono::steady_clock, class Executor = boost::asio::any_io_executor>
class sliding_window_counter : public basic_limiter<policy::weighted_counter, Clock, Executor> {
    using base = basic_limiter<policy::weighted_counter, Clock, Executor>;

public:
    /// The limiter's type on another executor type, as on Asio's I/O objects (what
    /// `use_awaitable_t<>::as_default_on_t` needs).
    template <class OtherExecutor>
    struct rebind_executor {
        /// The same limiter on another executor type.
        using other = sliding_window_counter<Clock, OtherExecutor>;
    };

    /// At most `limit` permits per `window`. Throws system_error(error::invalid_limit) for a
    /// limit outside the policy's range, error::invalid_rate for a window <= 0.
    sliding_window_counter(const std::type_identity_t<Executor>& ex, std::uint64_t limit, std::chrono::nanoseconds window,
       const limiter_options& opts = {})
        : base(ex, limit, window, opts)
    {
    }

    /// The same, on the executor of an execution context (an io_context).
    template <detail::execution_context_ref Context>
    sliding_window_counter(Context& ctx, std::uint64_t limit, std::chrono::nanoseconds window, const limiter_options& opts = {})
        : base(Executor(ctx.get_executor()), limit, window, opts)
    {
    }

    /// Changes the limit; permits already counted stay counted and waiters are retried
    /// under the new limit. Thread-safe.
    void set_limit(std::uint64_t limit)
    {
        this->reconfigure([limit](policy::weighted_counter& p, std::int64_t) { p.set_limit(limit); });
    }

    /// The most permits granted per window.
    std::uint64_t limit() const noexcept { return this->policy().limit(); }
    /// The window's length.
    std::chrono::nanoseconds window() const noexcept { return this->policy().window(); }

    /// One window's configuration, for keyed limiters: the policy's constructor arguments.
    using policy_config = std::tuple<std::uint64_t, std::chrono::nanoseconds>;

    /// The policy_config of a window built with these arguments (keyed's constructor
    /// and set_override take them).
    static policy_config policy_args(std::uint64_t limit, std::chrono::nanoseconds window) { return {limit, window}; }

    /// Applies `c` to a live window: a new limit at once. The window length of a live
    /// window cannot change: system_error(error::invalid_option).
    static void apply_config(policy::weighted_counter& p, std::int64_t, const policy_config& c)
    {
        if (std::get<1>(c) != p.window())
            throw boost::system::system_error(make_error_code(error::invalid_option));
        p.set_limit(std::get<0>(c));
    }
};

} // namespace sluice
