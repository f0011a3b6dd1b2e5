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
    /// Each part is built from a tuple of its constructor arguments.
    template <class... Args>
        requires(sizeof...(Args) == sizeof...(P))
    basic_all_of(const std::type_identity_t<Executor>& ex, Args&&... parts)
        : base(ex, limiter_options{}, std::forward<Args>(parts)...)
    {
    }

    template <class... Args>
        requires(sizeof...(Args) == sizeof...(P))
    basic_all_of(const std::type_identity_t<Executor>& ex, const limiter_options& opts, Args&&... parts)
        : base(ex, opts, std::forward<Args>(parts)...)
    {
    }

    template <detail::execution_context_ref Context, class... Args>
        requires(sizeof...(Args) == sizeof...(P))
    basic_all_of(Context& ctx, Args&&... parts)
        : base(Executor(ctx.get_executor()), limiter_options{}, std::forward<Args>(parts)...)
    {
    }

    template <detail::execution_context_ref Context, class... Args>
        requires(sizeof...(Args) == sizeof...(P))
    basic_all_of(Context& ctx, const limiter_options& opts, Args&&... parts)
        : base(Executor(ctx.get_executor()), opts, std::forward<Args>(parts)...)
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
