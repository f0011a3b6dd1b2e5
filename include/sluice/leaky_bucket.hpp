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
template <class Clock = std::chrono::steady_clock, class Executor = boost::asio::any_io_executor>
class leaky_bucket : public basic_limiter<policy::gcra, Clock, Executor> {
    using base = basic_limiter<policy::gcra, Clock, Executor>;

public:
    template <class OtherExecutor>
    struct rebind_executor {
        /// The same limiter on another executor type.
        using other = leaky_bucket<Clock, OtherExecutor>;
    };

    static constexpr std::chrono::nanoseconds default_slack = std::chrono::milliseconds(1);

    leaky_bucket(const std::type_identity_t<Executor>& ex, rate r, const limiter_options& opts = {})
        : base(ex, r, 1, default_slack, opts)
    {
    }

    leaky_bucket(const std::type_identity_t<Executor>& ex, rate r, std::chrono::nanoseconds slack,
                 const limiter_options& opts = {})
        : base(ex, r, 1, slack, opts)
    {
    }

    template <detail::execution_context_ref Context>
    leaky_bucket(Context& ctx, rate r, const limiter_options& opts = {})
        : base(Executor(ctx.get_executor()), r, 1, default_slack, opts)
    {
    }

    template <detail::execution_context_ref Context>
    leaky_bucket(Context& ctx, rate r, std::chrono::nanoseconds slack, const limiter_options& opts = {})
        : base(Executor(ctx.get_executor()), r, 1, slack, opts)
    {
    }

    /// Changes the rate, counting what was consumed in permits (the catch-up available now
    /// is kept, capped by the slack); queued waiters are rescheduled at it. Thread-safe.
    void set_rate(rate r)
    {
        this->reconfigure([r](policy::gcra& p, std::int64_t now) { return p.set_rate(r, now); });
    }

    rate get_rate() const noexcept { return this->policy().get_rate(); }
    std::chrono::nanoseconds slack() const noexcept { return this->policy().slack(); }

    /// One bucket's configuration, for keyed limiters: the policy's constructor arguments.
    using policy_config = std::tuple<rate, std::uint64_t, std::chrono::nanoseconds>;

    static policy_config policy_args(rate r, std::chrono::nanoseconds slack = default_slack) { return {r, 1, slack}; }

    /// Applies `c` to a live bucket, keeping what it has consumed, in permits (see set_rate).
    static std::pair<std::int64_t, std::int64_t> apply_config(policy::gcra& p, std::int64_t now, const policy_config& c)
    {
        p.set_slack(std::get<2>(c), now);
        return p.set_rate(std::get<0>(c), now);
    }
};

} // namespace sluice
