// The asynchronous rate limiter: an Asio I/O object around a policy, on which coroutines
// and callbacks wait for capacity on a timer instead of a sleeping thread. Every named
// rate limiter (token_bucket, leaky_bucket, fixed_window, sliding_window,
// sliding_window_counter, time_wheel, all_of) is this template over its policy.
#pragma once

#include <sluice/basic_limiter.hpp>
#include <sluice/decision.hpp>
#include <sluice/default_clock.hpp>
#include <sluice/detail/wait/local_answers.hpp>
#include <sluice/detail/policy/policy_config.hpp>
#include <sluice/detail/base/trailing_options.hpp>
#include <sluice/detail/wait/rate_engine.hpp>
#include <sluice/error.hpp>
#include <sluice/limiter_options.hpp>
#include <sluice/limiter_stats.hpp>
#include <sluice/policy/rate_policy.hpp>
#include <sluice/rate.hpp>

#include <boost/asio/any_io_executor.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

namespace sluice {

/// An asynchronous rate limiter over a policy (sluice/policy/): the one class behind every
/// named rate limiter, which are this template with their policy (token_bucket =
/// rate_limiter<policy::gcra>, fixed_window = rate_limiter<policy::fixed_counter>, ...).
/// It keeps the contract of every sluice limiter (sluice::local_limiter). The rules below
/// (waiting, executor, cancellation, thread-safety) are written here once for every rate
/// limiter: the aliases, leaky_bucket, adaptive_rate, and each key of sluice::keyed.
///
/// Waiting: requests queue in FIFO order, so a large request is never starved by a
/// stream of small ones, and try_acquire never barges ahead of queued waiters. One timer
/// per limiter, armed for the earliest waiter, releases every waiter whose time has come
/// in one pass (coalesced: limiter_options::coalesce and coalesce_max say how late a
/// release may be). Reserving policies (GCRA) commit each waiter's slot when it queues: a
/// wake-up needs no re-check, and a late wake-up does not delay later slots. Window
/// policies retry the head of the queue when its window, or the oldest log entry, frees
/// enough capacity.
///
/// Executor: every completion handler runs on its associated executor (a strand, another
/// io_context), or on the limiter's executor when it has none. It is never invoked from
/// inside the initiating function: an answer known at once is posted there. A timer
/// wake-up runs at once the handlers whose executor is the one running the wake-up (as
/// Asio's dispatch does), and posts the others; cancellation, close() and
/// reconfiguration post. No lock of the limiter is held when a handler runs. The
/// limiter's own executor runs its timer.
///
/// Cancellation: async_acquire supports per-operation cancellation, terminal, partial
/// and total, while the request waits: it completes with asio::error::operation_aborted,
/// gives back what it had reserved, and the waiters behind it move up. Once a request is
/// answered (admitted, or failed fast) its result stands, even when a cancellation arrives
/// before its handler runs. As everywhere in Asio, emit the signal on the handler's
/// executor: on an io_context run by several threads, give the waiting coroutine (and its
/// `||` partner) a strand. close() completes every waiter, and every later request, with
/// error::closed.
///
/// Thread-safety: distinct objects safe; a shared limiter is safe to use from any number
/// of threads and io_contexts at once (try_acquire is lock-free for lock-free policies,
/// the waiter queue takes a short mutex). The limiter must be destroyed before the
/// execution contexts its handlers use. Destroying it completes pending waiters with
/// error::closed.
template <rate_policy Policy, class Clock = default_clock, class Executor = boost::asio::any_io_executor>
class rate_limiter : public basic_limiter<detail::rate_engine<Policy, Clock, Executor>, detail::local_answers<>> {
    using state_type = detail::rate_engine<Policy, Clock, Executor>;
    using base_type = basic_limiter<state_type, detail::local_answers<>>;

public:
    /// The policy that decides (a sans-io core of sluice/policy/).
    using policy_type = Policy;
    /// The clock `now` is read from.
    using clock_type = Clock;
    /// The executor of the limiter's timer, and the default one of completion handlers.
    using executor_type = Executor;

    /// The limiter's type on another executor type, as on Asio's I/O objects (what
    /// `use_awaitable_t<>::as_default_on_t` needs).
    template <class OtherExecutor>
    struct rebind_executor {
        /// The same limiter on another executor type.
        using other = rate_limiter<Policy, Clock, OtherExecutor>;
    };

    /// Builds the limiter and its policy from `args`, optionally followed by a
    /// limiter_options object: rate_limiter(ex or io_context, policy args..., [options]),
    /// e.g. token_bucket(io, rate, burst), fixed_window(io, limit, window,
    /// {.max_queued = 100}). Throws system_error for a bad configuration:
    /// error::invalid_rate, invalid_limit, invalid_duration (see the policy's constructor).
    template <class... Args>
        requires(!detail::trailing_options_v<limiter_options, Args...> || sizeof...(Args) > 4)
    explicit rate_limiter(const std::type_identity_t<Executor>& ex, Args&&... args)
        : base_type(detail::with_trailing_options<limiter_options>(
              [&ex](const limiter_options& opts, auto&&... policy_args) {
                  return std::make_shared<state_type>(ex, opts, std::forward<decltype(policy_args)>(policy_args)...);
              },
              std::forward<Args>(args)...))
    {
    }

    /// The same, on the executor of an execution context (an io_context).
    template <detail::execution_context_ref Context, class... Args>
        requires(!detail::trailing_options_v<limiter_options, Args...> || sizeof...(Args) > 4)
    explicit rate_limiter(Context& ctx, Args&&... args) : rate_limiter(Executor(ctx.get_executor()), std::forward<Args>(args)...)
    {
    }

    /// The same with the options last, where they may be a braced list (a pack cannot
    /// deduce one): policies of one, two or three arguments.
    template <class Target, class A1>
    rate_limiter(Target&& target, A1&& a1, const limiter_options& opts)
        : base_type(std::make_shared<state_type>(executor_of(target), opts, std::forward<A1>(a1)))
    {
    }

    /// See above.
    template <class Target, class A1, class A2>
    rate_limiter(Target&& target, A1&& a1, A2&& a2, const limiter_options& opts)
        : base_type(std::make_shared<state_type>(executor_of(target), opts, std::forward<A1>(a1), std::forward<A2>(a2)))
    {
    }

    /// See above.
    template <class Target, class A1, class A2, class A3>
    rate_limiter(Target&& target, A1&& a1, A2&& a2, A3&& a3, const limiter_options& opts)
        : base_type(std::make_shared<state_type>(executor_of(target), opts, std::forward<A1>(a1), std::forward<A2>(a2),
                                                 std::forward<A3>(a3)))
    {
    }

    /// Takes over `other`'s limiter, waiters included; `other` may then only be destroyed
    /// or assigned to.
    rate_limiter(rate_limiter&&) noexcept = default;
    /// Closes this limiter (its waiters complete with error::closed), then takes over
    /// `other`'s.
    rate_limiter& operator=(rate_limiter&&) noexcept = default;

    /// Waits on the calling thread (no event loop needed) for n permits. Returns the same
    /// errors as async_acquire; error::closed wakes it early. Reserving policies queue in
    /// the same FIFO as asynchronous waiters; others retry and let queued waiters go first.
    boost::system::error_code acquire_blocking(std::uint64_t n = 1, std::chrono::nanoseconds max_wait = wait_forever)
    {
        return this->state_->acquire_blocking(n, max_wait.count());
    }

    /// Requests waiting now.
    std::size_t queued() const { return this->state_->queued(); }

    /// The policy, for inspection. Its thread-safe queries may be called at any time; use
    /// the limiter's setters to change it, so that waiters are rescheduled.
    const Policy& policy() const noexcept { return this->state_->queue().policy(); }

    /// Changes the rate (GCRA), counting what was consumed in permits: the permits
    /// available now are kept (capped by the burst), and queued waiters are rescheduled
    /// under the new rate (their debt, the same number of permits, is repaid at it).
    /// Thread-safe. Throws like the constructor, and then changes nothing.
    void set_rate(sluice::rate r)
        requires requires(Policy& p, std::int64_t now) { p.set_rate(r, now); }
    {
        reconfigure([r](Policy& p, std::int64_t now) { return p.set_rate(r, now); });
    }

    /// Changes the burst (GCRA). The permits available now are kept, capped by the new
    /// burst: a bucket that grows refills to it at the rate; queued waiters keep their
    /// slots. Thread-safe.
    void set_burst(std::uint64_t burst)
        requires requires(Policy& p, std::int64_t now) { p.set_burst(burst, now); }
    {
        reconfigure([burst](Policy& p, std::int64_t now) { p.set_burst(burst, now); });
    }

    /// Changes how far a late caller may catch up on its schedule (GCRA; see leaky_bucket).
    /// Thread-safe.
    void set_slack(std::chrono::nanoseconds slack)
        requires requires(Policy& p, std::int64_t now) { p.set_slack(slack, now); }
    {
        reconfigure([slack](Policy& p, std::int64_t now) { p.set_slack(slack, now); });
    }

    /// Changes the limit (window policies); permits already counted stay counted and
    /// waiters are retried under the new limit. Thread-safe.
    void set_limit(std::uint64_t limit)
        requires requires(Policy& p) { p.set_limit(limit); }
    {
        reconfigure([limit](Policy& p, std::int64_t) { p.set_limit(limit); });
    }

    /// Refuses every request before `until` (ns on Clock; pausable policies, as
    /// adaptive_rate's): the queued waiters give back their slots and queue again behind
    /// the pause, in the same order; those it makes wait past their max_wait complete with
    /// error::timed_out. An instant in the past ends a pause. Thread-safe.
    void pause_until(std::int64_t until)
        requires requires(Policy& p) { p.pause_until(until); }
    {
        this->state_->update([until](auto& q, std::int64_t now, detail::completion_list& done) {
            q.reschedule([&](std::int64_t) { q.policy().pause_until(until); }, now, done);
        });
    }

    /// Runs f(part, now) on the I-th part of a composite (all_of), e.g.
    /// `[](auto& p, auto now) { p.set_rate(r, now); }`, under the limiter's lock, then
    /// reschedules the waiters. Thread-safe.
    template <std::size_t I, class F>
    void update(F&& f)
        requires requires(Policy& p) { p.template part<I>(); }
    {
        reconfigure([&](Policy& p, std::int64_t now) { f(p.template part<I>(), now); });
    }

    /// The rate the bucket refills at (GCRA).
    auto rate() const noexcept
        requires requires(const Policy& p) { p.rate(); }
    {
        return policy().rate();
    }

    /// The most permits admitted at once: the burst (GCRA) or the limit (window policies).
    std::uint64_t burst() const noexcept
        requires requires(const Policy& p) { p.burst(); }
    {
        return policy().burst();
    }

    /// How far a late caller may catch up on its schedule (GCRA).
    std::chrono::nanoseconds slack() const noexcept
        requires requires(const Policy& p) { p.slack(); }
    {
        return policy().slack();
    }

    /// The most permits admitted per window (window policies).
    std::uint64_t limit() const noexcept
        requires requires(const Policy& p) { p.limit(); }
    {
        return policy().limit();
    }

    /// The window's length (window policies; time_wheel: one turn of its slots).
    std::chrono::nanoseconds window() const noexcept
        requires requires(const Policy& p) { p.window(); }
    {
        return policy().window();
    }

    /// The length of one slot (time_wheel).
    std::chrono::nanoseconds slot_duration() const noexcept
        requires requires(const Policy& p) { p.slot_duration(); }
    {
        return policy().slot_duration();
    }

    /// Slots in one turn (time_wheel).
    std::uint32_t slots() const noexcept
        requires requires(const Policy& p) { p.slots(); }
    {
        return policy().slots();
    }

    /// One limiter's configuration as a value, for keyed limiters: that of a limiter built
    /// with `args` (after its executor); keyed's constructor and set_override take them.
    template <class... Args>
    static auto config(Args&&... args)
    {
        return detail::policy_config<Policy>::make(std::forward<Args>(args)...);
    }

private:
    static Executor executor_of(const Executor& ex) { return ex; }

    template <detail::execution_context_ref Context>
    static Executor executor_of(Context& ctx)
    {
        return Executor(ctx.get_executor());
    }

    // Runs f(policy, now) under the queue lock, then reschedules the waiters under the
    // policy's new state.
    template <class F>
    void reconfigure(F&& f)
    {
        this->state_->reconfigure([&](std::int64_t now) { return f(this->state_->queue().policy(), now); });
    }
};

} // namespace sluice
