// A leaky bucket shared by every process of a host, in a named shared-memory segment.
#pragma once

#include <sluice/leaky_bucket.hpp>
#include <sluice/rate_limiter.hpp>
#include <sluice/policy/shm_gcra.hpp>

#include <chrono>
#include <utility>

namespace sluice::shm {

/// sluice::leaky_bucket (admissions one interval apart, a late caller catching up by at
/// most `slack`) whose state is shared by every process that names the same segment: a
/// rate_limiter<policy::shm_gcra> with burst 1. The clock: as shm::token_bucket.
template <class Clock = default_clock, class Executor = boost::asio::any_io_executor>
class leaky_bucket : public rate_limiter<policy::shm_gcra, Clock, Executor> {
    using base = rate_limiter<policy::shm_gcra, Clock, Executor>;

public:
    /// The limiter's type on another executor type.
    template <class OtherExecutor>
    struct rebind_executor {
        /// The same limiter on another executor type.
        using other = leaky_bucket<Clock, OtherExecutor>;
    };

    /// The slack of the constructors that take none: sluice::leaky_bucket's, 1 ms.
    static constexpr std::chrono::nanoseconds default_slack = sluice::leaky_bucket<>::default_slack;

    /// Admissions spaced 1/r apart with default_slack: leaky_bucket(ex or io_context,
    /// segment name or segment_options, rate, [limiter_options]). Throws as policy::shm_gcra.
    template <class Target, class Where>
    leaky_bucket(Target&& target, Where&& where, sluice::rate r, const limiter_options& opts = {})
        : base(std::forward<Target>(target), std::forward<Where>(where), r, std::uint64_t{1}, default_slack, opts)
    {
    }

    /// Admissions spaced 1/r apart; a caller late by less than `slack` catches up.
    template <class Target, class Where>
    leaky_bucket(Target&& target, Where&& where, sluice::rate r, std::chrono::nanoseconds slack,
                 const limiter_options& opts = {})
        : base(std::forward<Target>(target), std::forward<Where>(where), r, std::uint64_t{1}, slack, opts)
    {
    }
};

/// A shared leaky bucket on default_clock and any_io_executor:
/// `sluice::shm::leaky_bucket pace(io, "/name", r)`.
template <class Target, class Where, class... Args>
leaky_bucket(Target&&, Where&&, rate, Args&&...) -> leaky_bucket<>;

} // namespace sluice::shm
