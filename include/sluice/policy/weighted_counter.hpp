// Sliding window counter: two adjacent fixed windows weighted by their overlap with the
// window that ends now. Approximate and cheap: one atomic word.
#pragma once

#include <sluice/decision.hpp>
#include <sluice/policy/basic_policy.hpp>
#include <sluice/detail/base/arith.hpp>

#include <boost/system/system_error.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace sluice::policy {

/// Estimates the permits in the last window as prev * (1 - elapsed / window) + cur, where
/// cur counts the current fixed window and prev the one before, and admits while the
/// estimate stays within `limit`. It smooths the boundary burst of a fixed window at the
/// cost of exactness (permits are assumed spread evenly over the previous window).
///
/// Lock-free, in two atomic words: the full number of the newest window, and both counts
/// (26 bits each) packed with the low 11 bits of the window they belong to (the private
/// part explains the protocol). Window numbers are full int64 values, so after an idle gap
/// of any length the counts are exactly those of the formula. A clock stepping backwards,
/// by any amount, keeps counting in the newest window seen, with the previous window at
/// full weight: it can only reject more. Integer arithmetic only. One race remains in
/// theory (stale_rewrite in the private part): a thread stalled for a whole window and
/// through another idle gap of about a multiple of 2048 windows.
///
/// predict() is exact when nothing is ahead (retry_after of a refusal). With `ahead` queued
/// permits it is an estimate that prices them and the n as one lump taken at one instant,
/// at most `limit` a window: it can come out earlier or later than admitting them one by
/// one would (no bound either way).
class weighted_counter : public basic_window<weighted_counter, false> {
    friend class basic_policy<weighted_counter, false>;
    friend class basic_window<weighted_counter, false>;

public:
    /// The largest limit: 2^26 - 1 (each count is 26 bits of the shared word).
    static constexpr std::uint64_t max_limit = (std::uint64_t{1} << 26) - 1;

    /// Throws system_error(error::invalid_limit) unless 1 <= limit <= 2^26 - 1, and
    /// error::invalid_duration unless window > 0.
    weighted_counter(std::uint64_t limit, std::chrono::nanoseconds window)
        : limit_(check_limit(limit)), window_(check_window(window))
    {
    }


    /// Changes the limit; counts already taken stay counted.
    void set_limit(std::uint64_t limit) { limit_.store(check_limit(limit), std::memory_order_relaxed); }

    /// The earliest instant from which, if nothing more is consumed, this counter decides
    /// exactly as a new one: both windows empty; at or before `now` when they already are.
    std::int64_t idle_at(std::int64_t now) const noexcept
    {
        state s = decode_now(now);
        return idle_time(s, s.cur);
    }

    /// Settles `cost` permits admitted at `at` with their `actual` cost: the count of the
    /// window of `at`, the current one (cur) or the one before it (prev), moves by the
    /// difference, down (never below 0) or up (a debt, saturating at max_limit), exactly
    /// the counts an admission of `actual` would have left; a window older than that no
    /// longer weighs and changes nothing. Lock-free, one compare-and-swap. Returns 0.
    std::int64_t settle(std::uint64_t cost, std::uint64_t actual, std::int64_t at, std::int64_t /*now*/) noexcept
    {
        if (cost == actual) return 0;
        const std::int64_t k = detail::floor_div(at, window_);
        auto moved = [&](std::uint64_t c) {
            return actual < cost ? c - std::min(c, cost - actual) : c + std::min(mask - c, actual - cost);
        };
        for (;;) {
            view v = load_view();
            // The window whose `cur` the word holds: newest_, or the one before it.
            std::int64_t kw;
            if (v.current)
                kw = v.newest;
            else if ((v.word & id_mask) == ((static_cast<std::uint64_t>(v.newest) - 1) & id_mask))
                kw = v.newest - 1;
            else
                return 0;
            std::uint64_t prev = (v.word >> 12) & mask, cur = (v.word >> 38) & mask;
            if (k == kw)
                cur = moved(cur);
            else if (v.current && k == kw - 1)
                prev = moved(prev);
            else
                return 0;
            std::uint64_t expected = v.word;
            if (word_.compare_exchange_strong(expected, pack(kw, prev, cur, v.word & closed_bit),
                                              std::memory_order_acq_rel, std::memory_order_acquire))
                return 0;
        }
    }

    /// The window's length.
    std::chrono::nanoseconds window() const noexcept { return std::chrono::nanoseconds{window_}; }

private:
    std::uint64_t limit_locked() const noexcept { return limit_.load(std::memory_order_relaxed); }

    // Earliest time at which `ahead` queued permits and then n more fit (see the class
    // comment for how exact).
    std::int64_t predict_locked(std::uint64_t n, std::int64_t now, std::uint64_t ahead) const noexcept
    {
        const std::uint64_t limit = limit_.load(std::memory_order_relaxed);
        state s = decode_now(now);
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

    static constexpr std::uint64_t mask = (std::uint64_t{1} << 26) - 1;
    static constexpr std::uint64_t id_mask = (std::uint64_t{1} << 11) - 1;
    static constexpr std::uint64_t closed_bit = std::uint64_t{1} << 11;


    struct state {
        std::int64_t window;     // full number of the current window
        std::int64_t start;      // its start (saturated)
        std::int64_t elapsed;    // now - start, clamped to [0, window)
        std::uint64_t prev, cur;
    };

    // The newest window, newest_, is a full window number. The count word holds both
    // counts, a `closed` bit, and the low 11 bits (the tag) of the window whose `cur` they
    // are. Tag equal to newest_'s: the counts are newest_'s. Tag equal to newest_ - 1's:
    // newest_ has just been opened right after the word's window (prev = the word's cur,
    // cur = 0). Any other tag: newest_ was opened later than that (both 0). Opening a
    // window takes three compare-and-swaps that any thread may perform: close the word
    // (admissions into the newest window go on; only a closed word lets newest_ move),
    // move newest_ forward, and rewrite the word for it (usually with the first
    // admission). newest_ never moves back, and a move of d >= 2 windows never has d = 0
    // or 1 modulo 2048 (such a move goes through the window two before the target), so a
    // tag never matches a word it does not belong to. Readers take newest_, the word, and
    // newest_ again, and retry if it moved: since it only moves forward, the word was read
    // while newest_ held that value. The step through the window two before a target is
    // seen only by a concurrent call whose `now` is 2046 or more windows behind: it
    // counts in that empty window instead of its own.
    //
    // stale_rewrite: a thread that read a stale word (a closed one) and stalls rewrites it
    // only if it finds the same 64 bits again: that needs a later window with the same tag
    // to reach the same counts and be closed in turn during the stall, that is a whole
    // window plus another idle gap of about 2048*m windows. The rewrite re-reads newest_
    // right before it, which narrows even that; a double-width compare-and-swap would
    // close it.
    static std::uint64_t tag(std::int64_t k) noexcept { return static_cast<std::uint64_t>(k) & id_mask; }
    static std::uint64_t pack(std::int64_t k, std::uint64_t prev, std::uint64_t cur, std::uint64_t closed = 0) noexcept
    {
        return (cur << 38) | (prev << 12) | closed | tag(k);
    }

    struct view {
        std::int64_t newest;       // newest_ as read
        std::uint64_t word;        // the count word as read
        std::uint64_t prev, cur;   // newest_'s counts
        bool current;              // the word belongs to newest_
    };

    view load_view() const noexcept
    {
        for (;;) {
            std::int64_t k = newest_.load(std::memory_order_acquire);
            std::uint64_t word = word_.load(std::memory_order_acquire);
            if (newest_.load(std::memory_order_acquire) != k)
                continue;
            std::uint64_t prev = (word >> 12) & mask, cur = (word >> 38) & mask;
            if ((word & id_mask) == tag(k))
                return {k, word, prev, cur, true};
            if ((word & id_mask) == ((static_cast<std::uint64_t>(k) - 1) & id_mask))
                return {k, word, cur, 0, false};
            return {k, word, 0, 0, false};
        }
    }

    // The window that counts at `now` (its own, or the newest if the clock is behind it),
    // with its counts.
    state decode(const view& v, std::int64_t now) const noexcept
    {
        std::int64_t k = detail::floor_div(now, window_);
        std::uint64_t prev = 0, cur = 0;
        if (k > v.newest && static_cast<std::uint64_t>(k) - static_cast<std::uint64_t>(v.newest) == 1) {
            prev = v.cur;
        } else if (k <= v.newest) {
            k = v.newest;
            prev = v.prev;
            cur = v.cur;
        }
        std::int64_t start = mul(k, window_);
        std::int64_t e = detail::sat_sub(now, start);
        if (e < 0) e = 0;               // the clock went back: previous window at full weight
        return {k, start, e, prev, cur};
    }

    state decode_now(std::int64_t now) const noexcept { return decode(load_view(), now); }

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

    // Earliest instant at which n more permits fit, if nothing else is admitted.
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
        if (n > limit) return detail::invalid_decision(error::exceeds_limit);
        for (;;) {
            view v = load_view();
            state s = decode(v, now);
            decision d;
            bool ok = fits(s, n, limit);
            std::uint64_t cur = s.cur + (ok ? n : 0);
            std::int64_t idle = idle_time(s, cur);
            d.reset_after = std::chrono::nanoseconds{idle > now ? detail::sat_sub(idle, now) : 0};
            detail::uint128 used = (detail::uint128(s.prev) * detail::uint128(window_ - s.elapsed) + detail::uint128(window_) - 1) / detail::uint128(window_) + cur;
            d.remaining = used >= limit ? 0 : static_cast<std::uint64_t>(limit - used);
            if (!ok) {
                std::int64_t t = free_at(s, n, limit);
                // Room only at or past the clock's end: "never", not a short wait.
                d.retry_after = t == detail::max_ns ? std::chrono::nanoseconds::max()
                                                    : std::chrono::nanoseconds{t > now ? detail::sat_sub(t, now) : 1};
                return d;
            }
            d.admitted = true;
            if (!consume)
                return d;
            // A word that does not belong to newest_ is rewritten for it only if newest_ has
            // not moved since it was read (see stale_rewrite).
            if (!v.current && newest_.load(std::memory_order_acquire) != v.newest)
                continue;
            std::uint64_t closed = v.current ? v.word & closed_bit : 0;
            if (s.window == v.newest) {
                // Count in the newest window (closed or not); this also rewrites a word left
                // by an older one.
                std::uint64_t expected = v.word;
                if (word_.compare_exchange_strong(expected, pack(v.newest, s.prev, cur, closed),
                                                  std::memory_order_acq_rel, std::memory_order_acquire))
                    return d;
                continue;
            }
            // A newer window: the word must belong to newest_ and be closed before it moves.
            if (!v.current || !closed) {
                std::uint64_t expected = v.word;
                word_.compare_exchange_strong(expected, pack(v.newest, v.prev, v.cur, v.current ? closed_bit : 0),
                                              std::memory_order_acq_rel, std::memory_order_acquire);
                continue;
            }
            std::int64_t target = s.window;
            std::uint64_t step = static_cast<std::uint64_t>(target) - static_cast<std::uint64_t>(v.newest);
            if (step >= 2 && (step & id_mask) <= 1)
                target -= 2;   // the tag would match the word: go through the window two before
            std::int64_t expected = v.newest;
            newest_.compare_exchange_strong(expected, target, std::memory_order_acq_rel, std::memory_order_acquire);
        }
    }

    // Window INT64_MIN with both counts 0: the state of a fresh instance.
    alignas(64) std::atomic<std::int64_t> newest_{detail::min_ns};
    std::atomic<std::uint64_t> word_{0};
    std::atomic<std::uint64_t> limit_;
    const std::int64_t window_;
};

} // namespace sluice::policy
