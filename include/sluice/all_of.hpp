// Asynchronous composite limiter: several limits granted together, all or nothing.
#pragma once

#include <sluice/basic_limiter.hpp>
#include <sluice/policy/composite.hpp>

#include <tuple>

namespace sluice {

/// Asynchronous composite (policy::composite): grants n permits only when every part grants
/// them, and never consumes from one part when another rejects. Waiters are retried when
/// the latest of the parts' predictions comes.
///
///     sluice::all_of<policy::gcra, policy::sliding_log> limit(io,
///         std::tuple{rate::per_second(10), 10}, std::tuple{1000, 1h});
///
/// basic_all_of takes the Clock and Executor first; all_of uses steady_clock and
/// any_io_executor. The operations (try_acquire, async_acquire, acquire, acquire_blocking,
/// close, stats) are those of basic_limiter.
///
/// Executor: completion handlers run on their associated executor (the limiter's when they
/// have none), never inside async_acquire or another completion, and never with the
/// limiter's lock held. The limiter's own executor runs its one timer.
///
/// Cancellation: async_acquire honours terminal, partial and total cancellation while it
/// waits: it completes with asio::error::operation_aborted, having consumed nothing from
/// any part (a waiter holds no reservation), and the waiters behind it move up. close()
/// and the destructor complete every waiter with error::closed.
///
/// Thread-safety: distinct objects safe; a shared limiter may be used from any number of
/// threads and io_contexts at once. Every decision takes the composite's mutex for a short
/// critical section over all parts; waiting requests and update() also take the limiter's.
template <class Clock, class Executor, class... P>
class basic_all_of : public basic_limiter<policy::composite<P...>, Clock, Executor> {
    using base = basic_limiter<policy::composite<P...>, Clock, Executor>;

public:
    /// The limiter's type on another executor type, as on Asio's I/O objects (what
    /// `use_awaitable_t<>::as_default_on_t` needs).
    template <class OtherExecutor>
    struct rebind_executor {
        /// The same limiter on another executor type.
        using other = basic_all_of<Clock, OtherExecutor, P...>;
    };

    /// Each part is built from a tuple of its constructor arguments, optionally followed by
    /// a limiter_options object: basic_all_of(ex, parts..., [options]). The options must be
    /// a named object or `sluice::limiter_options{...}` (a braced list cannot be deduced
    /// into the pack).
    template <class... Args>
        requires(sizeof...(Args) == sizeof...(P) + (detail::trailing_options_v<limiter_options, Args...> ? 1 : 0))
    explicit basic_all_of(const std::type_identity_t<Executor>& ex, Args&&... args)
        : base(ex, std::forward<Args>(args)...)
    {
    }

    /// The same, on the executor of an execution context (an io_context).
    template <detail::execution_context_ref Context, class... Args>
        requires(sizeof...(Args) == sizeof...(P) + (detail::trailing_options_v<limiter_options, Args...> ? 1 : 0))
    basic_all_of(Context& ctx, Args&&... args)
        : base(Executor(ctx.get_executor()), std::forward<Args>(args)...)
    {
    }

    /// Runs f(part) on the I-th part (e.g. [](auto& p, auto now) { p.set_rate(r, now); })
    /// under the limiter's lock, then reschedules the waiters. Thread-safe.
    template <std::size_t I, class F>
    void update(F&& f)
    {
        this->reconfigure([&](policy::composite<P...>& p, std::int64_t now) { f(p.template part<I>(), now); });
    }
};

/// basic_all_of on steady_clock and any_io_executor.
template <class... P>
using all_of = basic_all_of<std::chrono::steady_clock, boost::asio::any_io_executor, P...>;

} // namespace sluice
