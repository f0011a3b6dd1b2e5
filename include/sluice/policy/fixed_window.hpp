// Fixed window: at most `limit` permits per window, the count reset at each boundary.
#pragma once

#include <sluice/decision.hpp>
#include <sluice/detail/arith.hpp>

#include <boost/system/system_error.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>

namespace sluice::policy {

/// Fixed window counter: time is cut into windows [k*window, (k+1)*window) and each
/// grants at most `limit` permits. The weak guarantee: up to 2*limit can pass within one
/// window length straddling a boundary (use sliding_log for the strong one).
///
/// The window number (low 32 bits) and the count share one atomic 64-bit word, so a reset
/// and an admission are one compare-and-swap: two threads can never both reset the window,
/// and no admission is lost or counted twice. Window numbers compare by serial-number
/// arithmetic; a clock stepping backwards keeps counting in the newest window seen (it
/// never reopens an old one). After exactly 2^31 windows of complete idleness the stale
/// count may be reused, which can only reject, never admit extra.
class fixed_window {
public:
    static constexpr bool reserves_ahead = false;
    static constexpr std::uint64_t max_limit = (1u << 31) - 1;

    /// Throws system_error(error::invalid_burst) unless 1 <= limit <= 2^31 - 1, and
    /// error::invalid_rate unless window > 0.
    fixed_window(std::uint64_t limit, std::chrono::nanoseconds window)
        : limit_(check_limit(limit)), window_(check_window(window))
    {
    }

    fixed_window(const fixed_window&) = delete;
    fixed_window& operator=(const fixed_window&) = delete;

    decision try_acquire(std::uint64_t n, std::int64_t now) noexcept { return decide(n, now, true); }

    decision check(std::uint64_t n, std::int64_t now) const noexcept
    {
        return const_cast<fixed_window*>(this)->decide(n, now, false);
    }

    /// Grants at once when n permits fit in the current window and nothing is `ahead`
    /// (permits of requests queued before this one); never commits in the future. Otherwise
    /// returns predict(n, now, ahead), with error::would_exceed_timeout beyond max_wait.
    reservation reserve(std::uint64_t n, std::int64_t now, std::int64_t max_wait, std::uint64_t ahead = 0) noexcept
    {
        std::uint64_t limit = limit_.load(std::memory_order_relaxed);
        if (n == 0) return detail::invalid_reservation(error::invalid_count);
        if (n > limit) return detail::invalid_reservation(error::exceeds_burst);
        if (ahead == 0 && try_acquire(n, now).allowed)
            return {true, now, {}};
        return detail::deferred_reservation(predict(n, now, ahead), now, max_wait);
    }

    /// Earliest time at which `ahead` queued permits and then n more could be granted,
    /// packing windows full: a lower bound when requests differ in size. Consumes nothing.
    std::int64_t predict(std::uint64_t n, std::int64_t now, std::uint64_t ahead = 0) const noexcept
    {
        std::uint64_t limit = limit_.load(std::memory_order_relaxed);
        state s = load(now);
        std::uint64_t need = ahead + n;
        std::uint64_t room = s.count < limit ? limit - s.count : 0;
        if (need <= room)
            return now;
        std::uint64_t windows = (need - room + limit - 1) / limit;
        std::int64_t at = window_start(s.window + static_cast<std::int64_t>(windows), window_);
        return at > now ? at : now;
    }

    /// Changes the limit; counts already taken in the current window stay counted.
    void set_limit(std::uint64_t limit) { limit_.store(check_limit(limit), std::memory_order_relaxed); }

    /// The earliest instant from which, if nothing more is consumed, this window decides
    /// exactly as a new one: the end of a window with a count; at or before `now` when the
    /// current window is empty.
    std::int64_t idle_at(std::int64_t now) const noexcept
    {
        state s = load(now);
        return s.count ? window_start(s.window + 1, window_) : detail::min_ns;
    }

    std::uint64_t limit() const noexcept { return limit_.load(std::memory_order_relaxed); }
    std::uint64_t burst() const noexcept { return limit(); }
    std::chrono::nanoseconds window() const noexcept { return std::chrono::nanoseconds{window_}; }

private:
    static constexpr std::uint64_t used_bit = 1u << 31;   // the word holds a real window
    static constexpr std::uint64_t count_mask = used_bit - 1;

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

    static std::int64_t window_start(std::int64_t k, std::int64_t w) noexcept
    {
        std::int64_t r;
        if (__builtin_mul_overflow(k, w, &r))
            return k > 0 ? detail::max_ns : detail::min_ns;
        return r;
    }

    struct state {
        std::int64_t window;    // full window number the count belongs to
        std::uint64_t count;
        std::uint64_t word;     // the raw word it was read from
    };

    // The window that counts at `now` and its count, from the raw word.
    state decode(std::uint64_t word, std::int64_t now) const noexcept
    {
        std::int64_t w = window_;
        std::int64_t cur = detail::floor_div(now, w);
        if (!(word & used_bit))
            return {cur, 0, word};
        auto stored = static_cast<std::uint32_t>(word >> 32);
        auto diff = static_cast<std::int32_t>(static_cast<std::uint32_t>(cur) - stored);
        if (diff > 0)
            return {cur, 0, word};
        return {cur - diff, word & count_mask, word};   // the stored window is cur - diff
    }

    state load(std::int64_t now) const noexcept { return decode(word_.load(std::memory_order_acquire), now); }

    decision decide(std::uint64_t n, std::int64_t now, bool consume) noexcept
    {
        std::uint64_t limit = limit_.load(std::memory_order_relaxed);
        if (n == 0) return detail::invalid_decision(error::invalid_count);
        if (n > limit) return detail::invalid_decision(error::exceeds_burst);
        std::uint64_t word = word_.load(std::memory_order_acquire);
        for (;;) {
            state s = decode(word, now);
            std::int64_t w = window_;
            std::int64_t end = window_start(s.window + 1, w);
            decision d;
            d.reset_after = std::chrono::nanoseconds{detail::sat_sub(end, now)};
            if (s.count + n > limit) {
                // A window that ends at or past the clock's end never ends: "never", not 0.
                d.retry_after = end == detail::max_ns ? std::chrono::nanoseconds::max() : d.reset_after;
                d.remaining = s.count < limit ? limit - s.count : 0;
                return d;
            }
            std::uint64_t next = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(s.window)) << 32)
                                 | used_bit | (s.count + n);
            if (!consume || word_.compare_exchange_weak(word, next, std::memory_order_acq_rel, std::memory_order_acquire)) {
                d.allowed = true;
                d.remaining = limit - s.count - n;
                return d;
            }
        }
    }

    alignas(64) std::atomic<std::uint64_t> word_{0};
    std::atomic<std::uint64_t> limit_;
    const std::int64_t window_;
};

} // namespace sluice::policy
