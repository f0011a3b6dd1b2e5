// Asynchronous sliding window counter: approximate, cheap.
#pragma once

#include <sluice/basic_limiter.hpp>
#include <sluice/policy/sliding_window_counter.hpp>

#include <tuple>

namespace sluice {

/// Asynchronous sliding window counter (policy::sliding_window_counter): two fixed windows
/// weighted by overlap, one atomic word, approximate. Waiters are retried when the
/// estimate drops enough.
template <class Clock = std::chrono::steady_clock, class Executor = boost::asio::any_io_executor>
class sliding_window_counter : public basic_limiter<policy::sliding_window_counter, Clock, Executor> {
    using base = basic_limiter<policy::sliding_window_counter, Clock, Executor>;

public:
    template <class OtherExecutor>
    struct rebind_executor {
        /// The same limiter on another executor type.
        using other = sliding_window_counter<Clock, OtherExecutor>;
    };

    /// At most `limit` permits per `window`. Throws system_error(error::invalid_burst) for a
    /// limit outside the policy's range, error::invalid_rate for a window <= 0.
    sliding_window_counter(const std::type_identity_t<Executor>& ex, std::uint64_t limit, std::chrono::nanoseconds window,
       const limiter_options& opts = {})
        : base(ex, limit, window, opts)
    {
    }

    template <detail::execution_context_ref Context>
    sliding_window_counter(Context& ctx, std::uint64_t limit, std::chrono::nanoseconds window, const limiter_options& opts = {})
        : base(Executor(ctx.get_executor()), limit, window, opts)
    {
    }

    /// Changes the limit; permits already counted stay counted and waiters are retried
    /// under the new limit. Thread-safe.
    void set_limit(std::uint64_t limit)
    {
        this->reconfigure([limit](policy::sliding_window_counter& p, std::int64_t) { p.set_limit(limit); });
    }

    std::uint64_t limit() const noexcept { return this->policy().limit(); }
    std::chrono::nanoseconds window() const noexcept { return this->policy().window(); }

    /// One window's configuration, for keyed limiters: the policy's constructor arguments.
    using policy_config = std::tuple<std::uint64_t, std::chrono::nanoseconds>;

    static policy_config policy_args(std::uint64_t limit, std::chrono::nanoseconds window) { return {limit, window}; }

    /// Applies `c` to a live window: a new limit at once. The window length of a live
    /// window cannot change: system_error(error::invalid_option).
    static void apply_config(policy::sliding_window_counter& p, std::int64_t, const policy_config& c)
    {
        if (std::get<1>(c) != p.window())
            throw boost::system::system_error(make_error_code(error::invalid_option));
        p.set_limit(std::get<0>(c));
    }
};

} // namespace sluice
