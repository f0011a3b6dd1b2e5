// Sliding window counter: two adjacent fixed windows weighted by their overlap with the
// window that ends now. Approximate and cheap: one atomic word.
#pragma once

#include <sluice/decision.hpp>
#include <sluice/detail/arith.hpp>

#include <boost/system/system_error.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>

namespace sluice::policy {

/// Estimates the permits in the last window as prev * (1 - elapsed / window) + cur, where
/// cur counts the current fixed window and prev the one before, and grants while the
/// estimate stays within `limit`. It smooths the boundary burst of a fixed window at the
/// cost of exactness (permits are assumed spread evenly over the previous window).
///
/// Lock-free: both counts (26 bits each) and the window number (low 12 bits, serial-number
/// arithmetic) share one atomic word. A clock stepping backwards by up to
/// `max_backward_windows` keeps counting in the newest window seen, with the previous
/// window at full weight: it can only reject more. Any other difference means the counts
/// are stale and start afresh (a step back of more than 8 windows is a new start). Only an idle gap within 8 windows below to 1 window above a
/// multiple of 4096 windows aliases, and may reject for up to 8 windows.
/// Integer arithmetic only.
class sliding_window_counter {
public:
    static constexpr bool reserves_ahead = false;
    static constexpr std::uint64_t max_limit = (std::uint64_t{1} << 26) - 1;
    static constexpr int max_backward_windows = 8;

    /// Throws system_error(error::invalid_burst) unless 1 <= limit <= 2^26 - 1, and
    /// error::invalid_rate unless window > 0.
    sliding_window_counter(std::uint64_t limit, std::chrono::nanoseconds window)
        : limit_(check_limit(limit)), window_(check_window(window))
    {
    }

    sliding_window_counter(const sliding_window_counter&) = delete;
    sliding_window_counter& operator=(const sliding_window_counter&) = delete;

    decision try_acquire(std::uint64_t n, std::int64_t now) noexcept { return decide(n, now, true); }

    decision check(std::uint64_t n, std::int64_t now) const noexcept
    {
        return const_cast<sliding_window_counter*>(this)->decide(n, now, false);
    }

    /// Grants at once when possible and nothing is `ahead`; never commits in the future.
    /// Otherwise returns predict(n, now, ahead), with error::would_exceed_timeout beyond
    /// max_wait.
    reservation reserve(std::uint64_t n, std::int64_t now, std::int64_t max_wait, std::uint64_t ahead = 0) noexcept
    {
        const std::uint64_t limit = limit_.load(std::memory_order_relaxed);
        if (n == 0) return detail::invalid_reservation(error::invalid_count);
        if (n > limit) return detail::invalid_reservation(error::exceeds_burst);
        if (ahead == 0 && decide(n, now, true).allowed)
            return {true, now, {}};
        return detail::deferred_reservation(predict(n, now, ahead), now, max_wait);
    }

    /// Earliest time at which `ahead` queued permits and then n more fit (a lower bound).
    /// Consumes nothing.
    std::int64_t predict(std::uint64_t n, std::int64_t now, std::uint64_t ahead = 0) const noexcept
    {
        const std::uint64_t limit = limit_.load(std::memory_order_relaxed);
        state s = decode(word_.load(std::memory_order_acquire), now);
        std::uint64_t need = ahead + n;
        std::int64_t at;
        if (need <= limit) {
            at = free_at(s, need, limit);
        } else {
            // At most `limit` a window: the queue needs at least that many more windows.
            std::uint64_t windows = (need - 1) / limit;
            at = detail::sat_add(free_at(s, need - windows * limit, limit), detail::sat_mul(windows, window_));
        }
        return at > now ? at : now;
    }

    /// Changes the limit; counts already taken stay counted.
    void set_limit(std::uint64_t limit) { limit_.store(check_limit(limit), std::memory_order_relaxed); }

    /// The earliest instant from which, if nothing more is consumed, this counter decides
    /// exactly as a new one: both windows empty; at or before `now` when they already are.
    std::int64_t idle_at(std::int64_t now) const noexcept
    {
        state s = decode(word_.load(std::memory_order_acquire), now);
        return idle_time(s, s.cur);
    }

    std::uint64_t limit() const noexcept { return limit_.load(std::memory_order_relaxed); }
    std::uint64_t burst() const noexcept { return limit(); }
    std::chrono::nanoseconds window() const noexcept { return std::chrono::nanoseconds{window_}; }

private:
    static constexpr std::uint64_t mask = (std::uint64_t{1} << 26) - 1;
    static constexpr std::uint64_t id_mask = (std::uint64_t{1} << 12) - 1;

    static std::uint64_t check_limit(std::uint64_t limit)
    {
        if (limit == 0 || limit > max_limit)
            throw boost::system::system_error(make_error_code(error::invalid_burst));
        return limit;
    }

    static std::int64_t check_window(std::chrono::nanoseconds w)
    {
        if (w.count() <= 0)
            throw boost::system::system_error(make_error_code(error::invalid_rate));
        return w.count();
    }

    struct state {
        std::int64_t window;     // full number of the current window
        std::int64_t start;      // its start (saturated)
        std::int64_t elapsed;    // now - start, clamped to [0, window)
        std::uint64_t prev, cur;
    };

    state decode(std::uint64_t word, std::int64_t now) const noexcept
    {
        std::int64_t k = detail::floor_div(now, window_);
        std::uint64_t id = word & id_mask;
        std::uint64_t prev = (word >> 12) & mask, cur = (word >> 38) & mask;
        // Serial-number difference of the 12-bit window numbers, in [-2048, 2047].
        auto diff = static_cast<std::int64_t>((static_cast<std::uint64_t>(k) - id + 2048) & id_mask) - 2048;
        if (diff < -max_backward_windows) diff = 2;   // stale counts, not a clock step
        if (diff == 1) { prev = cur; cur = 0; }
        else if (diff > 1 || (prev == 0 && cur == 0)) { prev = 0; cur = 0; }
        else if (diff < 0) k -= diff;   // the stored window is k - diff
        std::int64_t start = mul(k, window_);
        std::int64_t e = detail::sat_sub(now, start);
        if (e < 0) e = 0;               // the clock went back: previous window at full weight
        return {k, start, e, prev, cur};
    }

    static std::int64_t mul(std::int64_t k, std::int64_t w) noexcept
    {
        std::int64_t r;
        if (__builtin_mul_overflow(k, w, &r))
            return k > 0 ? detail::max_ns : detail::min_ns;
        return r;
    }

    // Counts leave two windows after the start of the one they were taken in.
    std::int64_t idle_time(const state& s, std::uint64_t cur) const noexcept
    {
        if (cur) return detail::sat_add(s.start, detail::sat_mul(2, window_));
        if (s.prev) return detail::sat_add(s.start, window_);
        return detail::min_ns;
    }

    // prev * (window - elapsed) + (cur + n) * window <= limit * window
    bool fits(const state& s, std::uint64_t n, std::uint64_t limit) const noexcept
    {
        detail::uint128 lhs = detail::uint128(s.prev) * detail::uint128(window_ - s.elapsed) + detail::uint128(s.cur + n) * detail::uint128(window_);
        return lhs <= detail::uint128(limit) * detail::uint128(window_);
    }

    // Earliest instant at which n more permits fit, if nothing else is granted.
    std::int64_t free_at(const state& s, std::uint64_t n, std::uint64_t limit) const noexcept
    {
        if (s.cur + n <= limit) {
            if (s.prev == 0) return s.start;
            // prev * (window - e) <= (limit - cur - n) * window
            detail::uint128 room = detail::uint128(limit - s.cur - n) * detail::uint128(window_) / s.prev;
            return detail::sat_add(s.start, window_ - static_cast<std::int64_t>(room < detail::uint128(window_) ? room : detail::uint128(window_)));
        }
        // Next window: cur becomes prev.
        std::int64_t next = detail::sat_add(s.start, window_);
        if (s.cur == 0) return next;
        detail::uint128 room = detail::uint128(limit - n) * detail::uint128(window_) / s.cur;
        return detail::sat_add(next, window_ - static_cast<std::int64_t>(room < detail::uint128(window_) ? room : detail::uint128(window_)));
    }

    decision decide(std::uint64_t n, std::int64_t now, bool consume) noexcept
    {
        const std::uint64_t limit = limit_.load(std::memory_order_relaxed);
        if (n == 0) return detail::invalid_decision(error::invalid_count);
        if (n > limit) return detail::invalid_decision(error::exceeds_burst);
        std::uint64_t word = word_.load(std::memory_order_acquire);
        for (;;) {
            state s = decode(word, now);
            decision d;
            bool ok = fits(s, n, limit);
            std::uint64_t cur = s.cur + (ok ? n : 0);
            std::int64_t idle = idle_time(s, cur);
            d.reset_after = std::chrono::nanoseconds{idle > now ? idle - now : 0};
            detail::uint128 used = (detail::uint128(s.prev) * detail::uint128(window_ - s.elapsed) + detail::uint128(window_) - 1) / detail::uint128(window_) + cur;
            d.remaining = used >= limit ? 0 : static_cast<std::uint64_t>(limit - used);
            if (!ok) {
                std::int64_t t = free_at(s, n, limit);
                d.retry_after = std::chrono::nanoseconds{t > now ? t - now : 1};
                return d;
            }
            std::uint64_t next = (cur << 38) | (s.prev << 12) | (static_cast<std::uint64_t>(s.window) & id_mask);
            if (!consume || word_.compare_exchange_weak(word, next, std::memory_order_acq_rel, std::memory_order_acquire)) {
                d.allowed = true;
                return d;
            }
        }
    }

    alignas(64) std::atomic<std::uint64_t> word_{0};
    std::atomic<std::uint64_t> limit_;
    const std::int64_t window_;
};

} // namespace sluice::policy
