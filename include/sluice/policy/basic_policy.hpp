// The skeleton of the sans-io policies: try and check over one decision of their own
// (every policy but composite and pausable, which wrap others), and for the window policies
// (fixed_counter, weighted_counter, sliding_log, slot_ring) reserve and predict over one
// prediction of their own; under the policy's lock if it has one.
#pragma once

#include <sluice/decision.hpp>
#include <sluice/error.hpp>

#include <boost/system/system_error.hpp>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <type_traits>

namespace sluice {

namespace detail {

/// The lock of a lock-free window policy: none.
struct no_lock {
    void lock() noexcept {}
    void unlock() noexcept {}
};

} // namespace detail

namespace policy {

/// The skeleton of a policy whose state answers one decision: `Derived` takes it,
/// decide(n, now, consume), and this class makes try_acquire and check of it, under the
/// policy's mutex when `Locked` (a state updated in several words) and with no lock
/// otherwise (a state of one or a few atomic words, decided by compare-and-swap).
template <class Derived, bool Locked>
class basic_policy {
public:
    /// Admits n permits at `now` if the policy holds them; the decision says how long until
    /// they would be, otherwise. Inlined into the caller: left to GCC's heuristics it was a
    /// call, a large part of a lock-free policy's check.
    [[gnu::always_inline]] decision try_acquire(std::uint64_t n, std::int64_t now) noexcept
    {
        std::lock_guard lock(mutex_);
        return derived().decide(n, now, true);
    }

    /// The decision try_acquire would take, without consuming anything. Inlined as
    /// try_acquire is: it is a limiter's peek.
    [[gnu::always_inline]] decision check(std::uint64_t n, std::int64_t now) const noexcept
    {
        std::lock_guard lock(mutex_);
        return const_cast<Derived&>(derived()).decide(n, now, false);
    }

    basic_policy(const basic_policy&) = delete;
    basic_policy& operator=(const basic_policy&) = delete;

protected:
    basic_policy() = default;
    ~basic_policy() = default;

    /// Held by every call of the skeleton, and by the derived policy's own calls that read
    /// or change what its decisions read (a lock-free policy's is none).
    [[no_unique_address]] mutable std::conditional_t<Locked, std::mutex, detail::no_lock> mutex_;

    /// The policy this skeleton serves.
    Derived& derived() noexcept { return static_cast<Derived&>(*this); }
    /// The policy this skeleton serves.
    const Derived& derived() const noexcept { return static_cast<const Derived&>(*this); }
};

/// The skeleton of the window policies, which never commit permits in the future (a waiter
/// that cannot be admitted now is retried at the predicted time): `Derived` also predicts,
/// predict_locked(n, now, ahead), and knows its limit, limit_locked(); this class makes
/// reserve, predict, limit and burst of them.
template <class Derived, bool Locked>
class basic_window : public basic_policy<Derived, Locked> {
public:
    /// This policy never commits permits in the future: waiters are retried.
    static constexpr bool reserves_ahead = false;

    /// Admits at once when n permits fit now and nothing is `ahead` (permits of requests
    /// queued before this one); never commits in the future. Otherwise nothing is consumed
    /// and the reservation says when to retry, predict(n, now, ahead), with
    /// error::timed_out beyond max_wait; error::invalid_count and error::exceeds_limit for
    /// requests that can never be admitted.
    reservation reserve(std::uint64_t n, std::int64_t now, std::int64_t max_wait, std::uint64_t ahead = 0) noexcept
    {
        std::lock_guard lock(this->mutex_);
        if (n == 0) return detail::invalid_reservation(error::invalid_count);
        if (n > this->derived().limit_locked()) return detail::invalid_reservation(error::exceeds_limit);
        if (ahead == 0 && this->derived().decide(n, now, true).admitted)
            return {true, now, {}};
        return detail::deferred_reservation(this->derived().predict_locked(n, now, ahead), now, max_wait);
    }

    /// The earliest time at which `ahead` queued permits and then n more could be admitted,
    /// if nothing else is (see the policy's class comment for how exact). Consumes nothing.
    std::int64_t predict(std::uint64_t n, std::int64_t now, std::uint64_t ahead = 0) const noexcept
    {
        std::lock_guard lock(this->mutex_);
        return this->derived().predict_locked(n, now, ahead);
    }

    /// The most permits admitted per window.
    std::uint64_t limit() const noexcept
    {
        std::lock_guard lock(this->mutex_);
        return this->derived().limit_locked();
    }

    /// The largest admissible request: limit().
    std::uint64_t burst() const noexcept { return limit(); }

    /// `limit`, or system_error(error::invalid_limit) unless 1 <= limit <= Derived::max_limit.
    static std::uint64_t check_limit(std::uint64_t limit)
    {
        if (limit == 0 || limit > Derived::max_limit)
            throw boost::system::system_error(make_error_code(error::invalid_limit));
        return limit;
    }

    /// The window in ns, or system_error(error::invalid_duration) unless it is positive.
    static std::int64_t check_window(std::chrono::nanoseconds w)
    {
        if (w.count() <= 0)
            throw boost::system::system_error(make_error_code(error::invalid_duration));
        return w.count();
    }

protected:
    basic_window() = default;
    ~basic_window() = default;
};

} // namespace policy
} // namespace sluice
