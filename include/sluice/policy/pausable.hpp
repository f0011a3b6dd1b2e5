// A policy that also refuses everything until a given instant: the pause a server asks
// for (429 or 503 with Retry-After), in front of any rate policy.
#pragma once

#include <sluice/decision.hpp>
#include <sluice/detail/base/arith.hpp>
#include <sluice/error.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <utility>

namespace sluice::policy {

/// Policy P, paused until pause_until(): before it, try_acquire refuses (retry_after: the
/// rest of the pause) and reserve() reserves from the end of the pause, as if the request
/// were made then. Outside a pause it decides as P. A pause moves no state of P: what P
/// holds at the end of the pause (a full bucket, say) is there to be used.
///
/// Changing the pause is a reconfiguration: the owner reschedules what was reserved before
/// it (rate_limiter::pause does). Thread-safety: as P; the instant is one atomic word.
template <class P>
class pausable {
public:
    /// As P: reservations are committed ahead when P commits them.
    static constexpr bool reserves_ahead = P::reserves_ahead;

    /// P built from `args`; not paused.
    template <class... Args>
    explicit pausable(Args&&... args) : p_(std::forward<Args>(args)...)
    {
    }

    pausable(const pausable&) = delete;
    pausable& operator=(const pausable&) = delete;

    /// P's decision at `now`, or a refusal while paused.
    decision try_acquire(std::uint64_t n, std::int64_t now) noexcept
    {
        const std::int64_t until = until_.load(std::memory_order_acquire);
        return now < until ? refusal(n, now, until) : p_.try_acquire(n, now);
    }

    /// try_acquire without consuming.
    decision check(std::uint64_t n, std::int64_t now) const noexcept
    {
        const std::int64_t until = until_.load(std::memory_order_acquire);
        return now < until ? refusal(n, now, until) : p_.check(n, now);
    }

    /// P's reservation, made at the end of the pause when `now` is within it.
    reservation reserve(std::uint64_t n, std::int64_t now, std::int64_t max_wait, std::uint64_t ahead = 0) noexcept
    {
        const std::int64_t until = until_.load(std::memory_order_acquire);
        if (now >= until)
            return p_.reserve(n, now, max_wait, ahead);
        const std::int64_t pause = until - now;
        if (pause > max_wait) {
            // The pause alone outlasts max_wait: nothing is reserved.
            reservation r;
            r.error = p_.check(n, until).error;
            if (r.error) {
                r.at = detail::max_ns;
                return r;
            }
            const std::int64_t at = p_.predict(n, until, ahead);
            r.at = at > until ? at : until;
            r.error = make_error_code(error::timed_out);
            return r;
        }
        return p_.reserve(n, until, max_wait - pause, ahead);
    }

    /// When n permits (after `ahead`) could be admitted: P's prediction from the end of the
    /// pause.
    std::int64_t predict(std::uint64_t n, std::int64_t now, std::uint64_t ahead = 0) const noexcept
    {
        const std::int64_t until = until_.load(std::memory_order_acquire);
        return p_.predict(n, now < until ? until : now, ahead);
    }

    /// P's settle: a pause refuses new requests, it does not change what was admitted.
    std::int64_t settle(std::uint64_t cost, std::uint64_t actual, std::int64_t at, std::int64_t now) noexcept
    {
        return p_.settle(cost, actual, at, now);
    }

    /// P's refund.
    std::int64_t refund(std::uint64_t n, std::int64_t now) noexcept
        requires P::reserves_ahead
    {
        return p_.refund(n, now);
    }

    /// P's idle instant, or the end of the pause.
    std::int64_t idle_at(std::int64_t now) const noexcept
    {
        const std::int64_t at = p_.idle_at(now);
        const std::int64_t until = until_.load(std::memory_order_relaxed);
        return at > until ? at : until;
    }

    /// Refuses everything before `until` (ns on the owner's clock); an instant in the past
    /// ends the pause.
    void pause_until(std::int64_t until) noexcept { until_.store(until, std::memory_order_release); }

    /// The end of the last pause (a time long past before any).
    std::int64_t paused_until() const noexcept { return until_.load(std::memory_order_acquire); }

    /// The policy paused.
    P& inner() noexcept { return p_; }
    const P& inner() const noexcept { return p_; }

    /// P's set_rate, through the pause (where P has one).
    auto set_rate(auto r, std::int64_t now) -> decltype(std::declval<P&>().set_rate(r, now)) { return p_.set_rate(r, now); }
    /// P's rate (where P has one).
    auto rate() const noexcept -> decltype(std::declval<const P&>().rate()) { return p_.rate(); }
    /// P's burst (where P has one).
    auto burst() const noexcept -> decltype(std::declval<const P&>().burst()) { return p_.burst(); }

private:
    decision refusal(std::uint64_t n, std::int64_t now, std::int64_t until) const noexcept
    {
        decision d = p_.check(n, until);
        if (d.error)
            return d;
        d.admitted = false;
        d.remaining = 0;
        d.retry_after = std::chrono::nanoseconds{until - now};
        d.reset_after = std::chrono::nanoseconds{detail::sat_add(d.reset_after.count(), until - now)};
        return d;
    }

    P p_;
    std::atomic<std::int64_t> until_{detail::min_ns};
};

} // namespace sluice::policy
