// Leaky bucket: permits spaced exactly one interval apart, as a queue.
#pragma once

#include <sluice/policy/gcra.hpp>
#include <sluice/rate_limiter.hpp>

#include <chrono>
#include <utility>

namespace sluice {

/// Asynchronous leaky bucket: GCRA with burst 1, so admissions are spaced 1/rate apart and
/// waiters are served as a queue, each at its own slot. A rate_limiter<policy::gcra> built
/// from a rate and a slack instead of a burst; everything else is rate_limiter's.
///
/// `slack` bounds catch-up: a caller that comes late on its schedule (a timer that woke
/// late, a slow loop) by less than `slack` keeps the schedule instead of losing the time:
/// the permits it missed are admitted at once (up to slack * rate of them), and the next
/// ones fall on the schedule again. A caller later than that, or back from idleness,
/// starts a new schedule at its own instant: after idleness admissions are spaced exactly one
/// interval apart at every rate, and slack never adds to the first permit. The default,
/// default_slack, is 1 ms: it absorbs timer lateness and wake-up coalescing
/// (limiter_options::coalesce) so that the achieved rate stays on target. Pass 0 for
/// exact spacing with no catch-up at all.
template <class Clock = default_clock, class Executor = boost::asio::any_io_executor>
class leaky_bucket : public rate_limiter<policy::gcra, Clock, Executor> {
    using base = rate_limiter<policy::gcra, Clock, Executor>;

public:
    /// The limiter's type on another executor type.
    template <class OtherExecutor>
    struct rebind_executor {
        /// The same limiter on another executor type.
        using other = leaky_bucket<Clock, OtherExecutor>;
    };

    /// The slack of the constructors that take none: 1 ms.
    static constexpr std::chrono::nanoseconds default_slack = std::chrono::milliseconds(1);

    /// Admissions spaced 1/r apart, with default_slack: leaky_bucket(ex or io_context, rate,
    /// [limiter_options]). Throws system_error(error::invalid_rate) for a bad rate, and
    /// error::invalid_duration when one interval plus the slack exceeds the int64
    /// nanosecond range (292 years).
    template <class Target>
    leaky_bucket(Target&& target, sluice::rate r, const limiter_options& opts = {})
        : base(std::forward<Target>(target), r, std::uint64_t{1}, default_slack, opts)
    {
    }

    /// Admissions spaced 1/r apart; a caller late by less than `slack` catches up (see the class
    /// comment). Throws system_error(error::invalid_duration) for a negative slack, and as
    /// above.
    template <class Target>
    leaky_bucket(Target&& target, sluice::rate r, std::chrono::nanoseconds slack, const limiter_options& opts = {})
        : base(std::forward<Target>(target), r, std::uint64_t{1}, slack, opts)
    {
    }

    /// One bucket's configuration, for keyed limiters (keyed<leaky_bucket<>>(io, rate,
    /// [slack])).
    static auto config(sluice::rate r, std::chrono::nanoseconds slack = default_slack)
    {
        return base::config(r, std::uint64_t{1}, slack);
    }
};

/// A leaky bucket on default_clock and any_io_executor: `sluice::leaky_bucket pace(io, r)`.
template <class Target, class... Args>
leaky_bucket(Target&&, rate, Args&&...) -> leaky_bucket<>;

} // namespace sluice
