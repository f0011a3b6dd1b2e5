// GCRA: the token bucket and the leaky bucket as one algorithm, on one atomic word.
#pragma once

#include <sluice/decision.hpp>
#include <sluice/detail/arith.hpp>
#include <sluice/rate.hpp>

#include <boost/system/system_error.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>

namespace sluice::policy {

/// Generic cell rate algorithm. The whole state is one atomic int64: the instant `z` at
/// which the bucket is (or was) empty, in integer nanoseconds. At `now` the bucket holds
/// min(burst, (now - z) / interval) permits, and consuming n moves z forward by
/// n * interval, so a decision is one compare-and-swap and never uses floating point.
///
/// A token bucket is gcra(rate, burst); a leaky bucket is gcra(rate, 1, slack): requests
/// spaced exactly one interval apart, and `slack` lets a caller that comes late catch up
/// on its schedule by at most that much (a burst of slack / interval permits).
///
/// z starts at the minimum of int64 ("empty long ago": full), so the first call is not a
/// special case; all arithmetic saturates. A clock that steps backwards never admits more:
/// z never moves back except through refund().
///
/// Thread-safe and lock-free for decisions. set_rate()/set_burst() publish the
/// configuration through a sequence lock (writers take it by setting its odd bit), so a
/// decision sees either the old or the new configuration, never a mix.
///
/// 48 bytes and no padding, so that keyed limiters can hold one per key; the asynchronous
/// limiters give their policy a cache line of its own.
class gcra {
public:
    /// This policy commits permits in the future: reserve() can grant a later slot.
    static constexpr bool reserves_ahead = true;

    /// Throws system_error(error::invalid_burst) when burst is 0 or burst * interval + slack
    /// exceeds the int64 nanosecond range (292 years), and error::invalid_rate for a
    /// negative slack.
    gcra(rate r, std::uint64_t burst, std::chrono::nanoseconds slack = {})
    {
        config c = make_config(r.interval().count(), burst, slack.count());
        store(c);
    }

    gcra(const gcra&) = delete;
    gcra& operator=(const gcra&) = delete;

    /// Grants n permits at `now` if the bucket holds them.
    decision try_acquire(std::uint64_t n, std::int64_t now) noexcept { return decide(n, now, true); }

    /// The decision try_acquire would take, without consuming anything.
    decision check(std::uint64_t n, std::int64_t now) const noexcept
    {
        return const_cast<gcra*>(this)->decide(n, now, false);
    }

    /// Commits n permits in the future when they become available within max_wait of now
    /// (FIFO: each reservation queues behind the previous ones). Otherwise consumes
    /// nothing and returns the predicted time with error::would_exceed_timeout.
    /// `ahead` is ignored: reservations already queued are part of the state.
    reservation reserve(std::uint64_t n, std::int64_t now, std::int64_t max_wait,
                        std::uint64_t /*ahead*/ = 0) noexcept
    {
        for (;;) {
            auto [c, z] = snapshot();
            if (n == 0) return detail::invalid_reservation(error::invalid_count);
            if (n > c.burst) return detail::invalid_reservation(error::exceeds_burst);
            std::int64_t nz = next_z(c, z, n, now);
            reservation r;
            r.at = nz;
            if (nz == detail::max_ns || detail::sat_sub(nz, now) > max_wait) {
                r.error = make_error_code(error::would_exceed_timeout);
                return r;
            }
            if (commit(z, nz)) {
                r.granted = true;
                if (r.at < now) r.at = now;   // granted from the bucket: usable now, not before
                return r;
            }
        }
    }

    /// Earliest time at which `ahead` permits and then n more could be granted if nothing
    /// else consumed (max_ns: never). Consumes nothing. Reservations already committed are
    /// part of the state; `ahead` counts requests queued elsewhere (a composite's queue).
    std::int64_t predict(std::uint64_t n, std::int64_t now, std::uint64_t ahead = 0) const noexcept
    {
        auto [c, z] = snapshot();
        return next_z(c, z, ahead + n, now);
    }

    /// Gives back n permits consumed earlier (a cancelled reservation). Returns how far z
    /// moved back, in ns: reservations queued after the refunded one may start that much
    /// earlier. The bucket never ends up fuller than its burst.
    std::int64_t refund(std::uint64_t n, std::int64_t now) noexcept
    {
        for (;;) {
            auto [c, z] = snapshot();
            std::int64_t floor = detail::sat_sub(now, c.tau);
            std::int64_t nz = detail::sat_sub(z, detail::sat_mul(n, c.interval));
            if (nz < floor) nz = floor;
            if (nz >= z) return 0;
            if (commit(z, nz)) return z - nz;
        }
    }

    /// Changes the rate. Permits already consumed stay consumed, counted in permits: a debt
    /// (reservations in the future) is rescaled around `now` to the new interval, so queued
    /// reservations are repaid at the new rate. Returns the factor applied to the debt as
    /// {new interval, old interval}. Throws like the constructor.
    std::pair<std::int64_t, std::int64_t> set_rate(rate r, std::int64_t now)
    {
        write_guard guard(*this);
        config old = current();
        config c = make_config(r.interval().count(), old.burst, old.slack);
        store(c);
        // Rescale the debt while the sequence is odd, so that no decision taken with the old
        // configuration can commit on the rescaled state (its CAS fails).
        for (std::int64_t z = z_.load(std::memory_order_acquire); z > now;) {
            detail::int128 debt = static_cast<detail::int128>(z - now) * c.interval / old.interval;
            std::int64_t nz = debt > detail::max_ns - now ? detail::max_ns : now + static_cast<std::int64_t>(debt);
            if (z_.compare_exchange_weak(z, nz, std::memory_order_acq_rel))
                break;
        }
        return {c.interval, old.interval};
    }

    /// Changes the burst. An idle bucket holds the new burst at once; a bucket in debt keeps
    /// its debt. Throws like the constructor.
    void set_burst(std::uint64_t burst)
    {
        write_guard guard(*this);
        config old = current();
        config c = make_config(old.interval, burst, old.slack);
        store(c);
    }

    /// Changes the slack (how far a late caller may catch up). Throws like the constructor.
    void set_slack(std::chrono::nanoseconds slack)
    {
        write_guard guard(*this);
        config old = current();
        config c = make_config(old.interval, old.burst, slack.count());
        store(c);
    }

    /// The earliest instant from which, if nothing more is consumed, this bucket decides
    /// exactly as a new one (full, nothing reserved); at or before `now` when it already does.
    std::int64_t idle_at(std::int64_t /*now*/) const noexcept
    {
        auto [c, z] = snapshot();
        return detail::sat_add(z, c.tau);
    }

    /// How long until the bucket is full again if nothing is taken (0 when it is).
    std::chrono::nanoseconds reset_after(std::int64_t now) const noexcept
    {
        auto [c, z] = snapshot();
        return std::chrono::nanoseconds{reset(c, z, now)};
    }

    rate get_rate() const noexcept { return rate::every(std::chrono::nanoseconds{interval_.load(std::memory_order_relaxed)}); }
    std::uint64_t burst() const noexcept { return burst_.load(std::memory_order_relaxed); }
    std::int64_t interval_ns() const noexcept { return interval_.load(std::memory_order_relaxed); }
    std::chrono::nanoseconds slack() const noexcept { return std::chrono::nanoseconds{slack_.load(std::memory_order_relaxed)}; }

    /// The raw state, for tests and the async layer: the instant the bucket is empty.
    std::int64_t empty_at() const noexcept { return z_.load(std::memory_order_acquire); }

private:
    struct config {
        std::int64_t interval;
        std::int64_t tau;   // how far z may lag behind now: burst * interval + slack
        std::uint64_t burst;
        std::int64_t slack;
    };

    static config make_config(std::int64_t interval, std::uint64_t burst, std::int64_t slack)
    {
        if (interval <= 0 || slack < 0)
            throw boost::system::system_error(make_error_code(error::invalid_rate));
        std::int64_t tau = detail::sat_mul(burst, interval);
        if (burst == 0 || tau == detail::max_ns || detail::sat_add(tau, slack) == detail::max_ns)
            throw boost::system::system_error(make_error_code(error::invalid_burst));
        return {interval, tau + slack, burst, slack};
    }

    // z_new = max(z, now - tau) + n * interval; max_ns means "never" (saturated).
    static std::int64_t next_z(const config& c, std::int64_t z, std::uint64_t n, std::int64_t now,
                               bool* overflow = nullptr) noexcept
    {
        std::int64_t start = detail::sat_sub(now, c.tau);
        if (z > start) start = z;
        std::int64_t r;
        if (__builtin_add_overflow(start, detail::sat_mul(n, c.interval), &r)) {
            if (overflow) *overflow = true;
            return detail::max_ns;
        }
        return r;
    }

    decision decide(std::uint64_t n, std::int64_t now, bool consume) noexcept
    {
        for (;;) {
            auto [c, z] = snapshot();
            if (n == 0) return detail::invalid_decision(error::invalid_count);
            if (n > c.burst) return detail::invalid_decision(error::exceeds_burst);
            bool never = false;
            std::int64_t nz = next_z(c, z, n, now, &never);
            decision d;
            // At now == max_ns a saturated nz is not <= now by luck: it is "never".
            if (never || nz > now) {
                d.retry_after = std::chrono::nanoseconds{nz == detail::max_ns ? detail::max_ns : nz - now};
                d.remaining = available(c, z, now);
                d.reset_after = std::chrono::nanoseconds{reset(c, z, now)};
                return d;
            }
            if (!consume || commit(z, nz)) {
                d.allowed = true;
                d.remaining = available(c, nz, now);
                d.reset_after = std::chrono::nanoseconds{reset(c, nz, now)};
                return d;
            }
        }
    }

    static std::uint64_t available(const config& c, std::int64_t z, std::int64_t now) noexcept
    {
        if (z >= now) return 0;
        std::int64_t lag = detail::sat_sub(now, z);
        std::int64_t full = c.tau - c.slack;
        std::uint64_t k = static_cast<std::uint64_t>((lag < full ? lag : full) / c.interval);
        return k < c.burst ? k : c.burst;
    }

    static std::int64_t reset(const config& c, std::int64_t z, std::int64_t now) noexcept
    {
        std::int64_t t = detail::sat_sub(detail::sat_add(z, c.tau - c.slack), now);
        return t > 0 ? t : 0;
    }

    bool commit(std::int64_t& expected, std::int64_t desired) noexcept
    {
        return z_.compare_exchange_weak(expected, desired, std::memory_order_acq_rel, std::memory_order_acquire);
    }

    struct snap { config c; std::int64_t z; };

    // Configuration and state read consistently: a sequence lock whose readers never write.
    // The configuration words are stored with release and loaded with acquire (plain moves on
    // x86), so a reader that sees any word of a new configuration also sees the odd sequence
    // number stored before it, and retries. No fences: ThreadSanitizer models this exactly.
    snap snapshot() const noexcept
    {
        for (;;) {
            std::uint64_t s = seq_.load(std::memory_order_acquire);
            if (s & 1) continue;
            config c{interval_.load(std::memory_order_acquire), tau_.load(std::memory_order_acquire),
                     burst_.load(std::memory_order_acquire), slack_.load(std::memory_order_acquire)};
            std::int64_t z = z_.load(std::memory_order_acquire);
            if (seq_.load(std::memory_order_relaxed) == s)
                return {c, z};
        }
    }

    config current() const noexcept
    {
        return {interval_.load(std::memory_order_relaxed), tau_.load(std::memory_order_relaxed),
                burst_.load(std::memory_order_relaxed), slack_.load(std::memory_order_relaxed)};
    }

    // A writer owns the sequence while it is odd: it makes it odd with a CAS from an even
    // value (waiting out another writer), and the release stores of store() publish that
    // odd number together with each configuration word. Readers retry while it is odd, also
    // while make_config validates (and maybe throws): a short wait, no wrong decision.
    class write_guard {
    public:
        explicit write_guard(gcra& g) noexcept : g_(g)
        {
            for (;;) {
                std::uint64_t s = g_.seq_.load(std::memory_order_relaxed);
                if (!(s & 1) && g_.seq_.compare_exchange_weak(s, s + 1, std::memory_order_acquire, std::memory_order_relaxed)) {
                    start_ = s;
                    return;
                }
            }
        }
        write_guard(const write_guard&) = delete;
        write_guard& operator=(const write_guard&) = delete;

        ~write_guard()
        {
            // Even again, and different from before: readers that started earlier retry.
            g_.seq_.store(start_ + 2, std::memory_order_release);
        }

    private:
        gcra& g_;
        std::uint64_t start_ = 0;
    };

    void store(const config& c) noexcept
    {
        interval_.store(c.interval, std::memory_order_release);
        tau_.store(c.tau, std::memory_order_release);
        burst_.store(c.burst, std::memory_order_release);
        slack_.store(c.slack, std::memory_order_release);
    }

    std::atomic<std::int64_t> z_{detail::min_ns};
    std::atomic<std::uint64_t> seq_{0};
    std::atomic<std::int64_t> interval_{1};
    std::atomic<std::int64_t> tau_{1};
    std::atomic<std::uint64_t> burst_{1};
    std::atomic<std::int64_t> slack_{0};
};

} // namespace sluice::policy
