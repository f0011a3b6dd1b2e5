// A policy that lives elsewhere (in a keyed limiter's entry), seen through a pointer, so
// that the waiting machinery of a single limiter can serve it.
#pragma once

#include <sluice/decision.hpp>

#include <atomic>
#include <cstdint>

namespace sluice::detail {

/// Forwards every call to *p. When `grants` is set, it counts the requests admitted
/// through this view, less those given back (a keyed limiter's overflow admissions).
template <class Policy>
class policy_ref {
public:
    static constexpr bool reserves_ahead = Policy::reserves_ahead;

    explicit policy_ref(Policy* p, std::atomic<std::uint64_t>* grants = nullptr) noexcept : p_(p), grants_(grants) {}

    Policy& get() const noexcept { return *p_; }

    decision try_acquire(std::uint64_t n, std::int64_t now) noexcept
    {
        decision d = p_->try_acquire(n, now);
        if (d.admitted) count(1);
        return d;
    }

    decision check(std::uint64_t n, std::int64_t now) const noexcept { return p_->check(n, now); }

    reservation reserve(std::uint64_t n, std::int64_t now, std::int64_t max_wait, std::uint64_t ahead = 0) noexcept
    {
        reservation r = p_->reserve(n, now, max_wait, ahead);
        if (r.admitted) count(1);
        return r;
    }

    std::int64_t predict(std::uint64_t n, std::int64_t now, std::uint64_t ahead = 0) const noexcept
    {
        return p_->predict(n, now, ahead);
    }

    std::int64_t settle(std::uint64_t cost, std::uint64_t actual, std::int64_t at, std::int64_t now) noexcept
    {
        return p_->settle(cost, actual, at, now);
    }

    std::int64_t refund(std::uint64_t n, std::int64_t now) noexcept
        requires Policy::reserves_ahead
    {
        count(-1);
        return p_->refund(n, now);
    }

private:
    void count(int d) noexcept
    {
        if (grants_) grants_->fetch_add(static_cast<std::uint64_t>(d), std::memory_order_relaxed);
    }

    Policy* p_;
    std::atomic<std::uint64_t>* grants_;
};

} // namespace sluice::detail
