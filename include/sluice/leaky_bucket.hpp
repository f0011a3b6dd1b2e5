// Leaky bucket: permits spaced exactly one interval apart, as a queue.
#pragma once

#include <sluice/basic_limiter.hpp>
#include <sluice/policy/gcra.hpp>
#include <sluice/rate.hpp>

#include <tuple>
#include <utility>

namespace sluice {

/// Asynchronous leaky bucket: GCRA with burst 1, so grants are spaced 1/rate apart and
/// waiters are served as a queue, each at its own slot.
///
/// `slack` bounds catch-up: a caller that comes late on its schedule (a timer that woke
/// late, a slow loop) by less than `slack` keeps the schedule instead of losing the time:
/// the permits it missed are granted at once (up to slack * rate of them), and the next
/// ones fall on the schedule again. A caller later than that, or back from idleness,
/// starts a new schedule at its own instant: after idleness grants are spaced exactly one
/// interval apart at every rate, and slack never adds to the first permit. The default,
/// default_slack, is 1 ms: it absorbs timer lateness and wake-up coalescing
/// (limiter_options::coalesce) so that the achieved rate stays on target. Pass 0 for
/// exact spacing with no catch-up at all.
///
/// The operations (try_acquire, async_acquire, acquire, acquire_blocking, close, stats) are
/// those of basic_limiter.
///
/// Executor: completion handlers run on their associated executor (the limiter's when they
/// have none), never inside async_acquire or another completion, and never with the
/// limiter's lock held. The limiter's own executor runs its one timer; at high rates its
/// wake-ups are coalesced (limiter_options::coalesce), which the slack absorbs.
///
/// Cancellation: async_acquire honours terminal, partial and total cancellation while it
/// waits: it completes with asio::error::operation_aborted and its slot is given back, so
/// the waiters behind it move up. close() and the destructor complete every waiter with
/// error::closed.
///
/// Thread-safety: distinct objects safe; a shared bucket may be used from any number of
/// threads and io_contexts at once. try_acquire is lock-free (a compare-and-swap on the
/// bucket's one word); waiting requests and set_rate take a short mutex.
template <class Clock = std::chrono::steady_clock, class Executor = boost::asio::any_io_executor>
class leaky_bucket : public basic_limiter<policy::gcra, Clock, Executor> {
    using base = basic_limiter<policy::gcra, Clock, Executor>;

public:
    /// The limiter's type on another executor type, as on Asio's I/O objects (what
    /// `use_awaitable_t<>::as_default_on_t` needs).
    template <class OtherExecutor>
    struct rebind_executor {
        /// The same limiter on another executor type.
        using other = leaky_bucket<Clock, OtherExecutor>;
    };

    /// The slack of the constructors that take none: 1 ms.
    static constexpr std::chrono::nanoseconds default_slack = std::chrono::milliseconds(1);

    /// Grants spaced 1/r apart, with default_slack. Throws system_error(error::invalid_limit)
    /// when one interval plus the slack exceeds the int64 nanosecond range (292 years).
    leaky_bucket(const std::type_identity_t<Executor>& ex, sluice::rate r, const limiter_options& opts = {})
        : base(ex, r, 1, default_slack, opts)
    {
    }

    /// Grants spaced 1/r apart; a caller late by less than `slack` catches up (see the class
    /// comment). Throws system_error(error::invalid_rate) for a negative slack, and
    /// error::invalid_limit when one interval plus the slack exceeds 292 years.
    leaky_bucket(const std::type_identity_t<Executor>& ex, sluice::rate r, std::chrono::nanoseconds slack,
                 const limiter_options& opts = {})
        : base(ex, r, 1, slack, opts)
    {
    }

    /// The same, on the executor of an execution context (an io_context).
    template <detail::execution_context_ref Context>
    leaky_bucket(Context& ctx, sluice::rate r, const limiter_options& opts = {})
        : base(Executor(ctx.get_executor()), r, 1, default_slack, opts)
    {
    }

    /// The same, on the executor of an execution context (an io_context).
    template <detail::execution_context_ref Context>
    leaky_bucket(Context& ctx, sluice::rate r, std::chrono::nanoseconds slack, const limiter_options& opts = {})
        : base(Executor(ctx.get_executor()), r, 1, slack, opts)
    {
    }

    /// Changes the rate, counting what was consumed in permits (the catch-up available now
    /// is kept, capped by the slack); queued waiters are rescheduled at it. Thread-safe.
    void set_rate(sluice::rate r)
    {
        this->reconfigure([r](policy::gcra& p, std::int64_t now) { return p.set_rate(r, now); });
    }

    /// The rate grants are spaced at.
    sluice::rate rate() const noexcept { return this->policy().rate(); }
    /// How far a late caller may catch up on its schedule.
    std::chrono::nanoseconds slack() const noexcept { return this->policy().slack(); }

    /// One bucket's configuration, for keyed limiters: the policy's constructor arguments.
    using policy_config = std::tuple<sluice::rate, std::uint64_t, std::chrono::nanoseconds>;

    /// The policy_config of a bucket built with these arguments (keyed's constructor
    /// and set_override take them).
    static policy_config policy_args(sluice::rate r, std::chrono::nanoseconds slack = default_slack) { return {r, 1, slack}; }

    /// Applies `c` to a live bucket, keeping what it has consumed, in permits (see set_rate).
    static std::pair<std::int64_t, std::int64_t> apply_config(policy::gcra& p, std::int64_t now, const policy_config& c)
    {
        p.set_slack(std::get<2>(c), now);
        return p.set_rate(std::get<0>(c), now);
    }
};

} // namespace sluice
