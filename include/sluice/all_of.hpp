// Asynchronous composite limiter: several limits granted together, all or nothing.
#pragma once

#include <sluice/basic_limiter.hpp>
#include <sluice/policy/all_of.hpp>

#include <tuple>

namespace sluice {

/// Asynchronous composite (policy::all_of): grants n permits only when every part grants
/// them, and never consumes from one part when another rejects. Waiters are retried when
/// the latest of the parts' predictions comes.
///
///     sluice::all_of<policy::gcra, policy::sliding_log> limit(io,
///         std::tuple{rate::per_second(10), 10}, std::tuple{1000, 1h});
///
/// basic_all_of takes the Clock and Executor first; all_of uses steady_clock and
/// any_io_executor.
template <class Clock, class Executor, class... P>
class basic_all_of : public basic_limiter<policy::all_of<P...>, Clock, Executor> {
    using base = basic_limiter<policy::all_of<P...>, Clock, Executor>;

public:
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
        this->reconfigure([&](policy::all_of<P...>& p, std::int64_t now) { f(p.template part<I>(), now); });
    }
};

template <class... P>
using all_of = basic_all_of<std::chrono::steady_clock, boost::asio::any_io_executor, P...>;

} // namespace sluice
