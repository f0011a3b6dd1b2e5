// Fixed window: at most `limit` permits per window, the count reset at each boundary.
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

/// Fixed window counter: time is cut into windows [k*window, (k+1)*window) and each
/// admits at most `limit` permits. The weak guarantee: up to 2*limit can pass within one
/// window length straddling a boundary (use sliding_log for the strong one).
///
/// Lock-free, in two atomic words: the full number of the newest window, and the count
/// packed with the low 32 bits of the window it belongs to (the private part explains the
/// protocol). Two threads can never both reset a window, and no admission is lost or
/// counted twice. Window numbers are full int64 values, so the count is right after an
/// idle gap of any length, and a clock stepping backwards by any amount keeps counting in
/// the newest window seen (it never reopens an old one). One race remains in theory
/// (stale_rewrite in the private part): a thread stalled for a whole window and through
/// another idle gap of about a multiple of 2^32 windows.
///
/// predict() packs windows full: a lower bound when requests differ in size.
class fixed_counter : public basic_window<fixed_counter, false> {
    friend class basic_policy<fixed_counter, false>;
    friend class basic_window<fixed_counter, false>;

public:
    /// The largest limit: 2^31 - 1 (the count shares its word with a tag).
    static constexpr std::uint64_t max_limit = (1u << 31) - 1;

    /// Throws system_error(error::invalid_limit) unless 1 <= limit <= 2^31 - 1, and
    /// error::invalid_duration unless window > 0.
    fixed_counter(std::uint64_t limit, std::chrono::nanoseconds window)
        : limit_(check_limit(limit)), window_(check_window(window))
    {
    }


    /// Settles `cost` permits admitted at `at` with their `actual` cost: the count of the
    /// window of `at` moves by the difference, down (never below 0) or up (a debt: the
    /// window refuses until it ends, saturating at max_limit), exactly the count an
    /// admission of `actual` would have left there. A window already over, or one the
    /// admission was not counted in (the clock stepped back), changes nothing: its count
    /// no longer decides anything. Lock-free, one compare-and-swap. Returns 0.
    std::int64_t settle(std::uint64_t cost, std::uint64_t actual, std::int64_t at, std::int64_t /*now*/) noexcept
    {
        if (cost == actual) return 0;
        const std::int64_t k = detail::floor_div(at, window_);
        for (;;) {
            std::int64_t newest = newest_.load(std::memory_order_acquire);
            std::uint64_t word = word_.load(std::memory_order_acquire);
            if (newest != k || (word >> 32) != tag(k)) return 0;
            std::uint64_t count = word & count_mask;
            std::uint64_t next_count = actual < cost ? count - std::min(count, cost - actual)
                                                     : count + std::min(count_mask - count, actual - cost);
            std::uint64_t next = (word & ~count_mask) | next_count;
            if (word_.compare_exchange_strong(word, next, std::memory_order_acq_rel, std::memory_order_acquire))
                return 0;
        }
    }

    /// Changes the limit; counts already taken in the current window stay counted.
    void set_limit(std::uint64_t limit) { limit_.store(check_limit(limit), std::memory_order_relaxed); }

    /// The earliest instant from which, if nothing more is consumed, this window decides
    /// exactly as a new one: the end of a window with a count; at or before `now` when the
    /// current window is empty.
    std::int64_t idle_at(std::int64_t now) const noexcept
    {
        state s = load(now);
        return s.count ? window_start(detail::int128(s.window) + 1, window_) : detail::min_ns;
    }

    /// The window's length.
    std::chrono::nanoseconds window() const noexcept { return std::chrono::nanoseconds{window_}; }

private:
    std::uint64_t limit_locked() const noexcept { return limit_.load(std::memory_order_relaxed); }

    // Earliest time at which `ahead` queued permits and then n more could be admitted,
    // packing windows full: a lower bound when requests differ in size.
    std::int64_t predict_locked(std::uint64_t n, std::int64_t now, std::uint64_t ahead) const noexcept
    {
        std::uint64_t limit = limit_.load(std::memory_order_relaxed);
        state s = load(now);
        std::uint64_t need = ahead + n;
        std::uint64_t room = s.count < limit ? limit - s.count : 0;
        if (need <= room)
            return now;
        std::uint64_t windows = (need - room + limit - 1) / limit;
        std::int64_t at = window_start(detail::int128(s.window) + windows, window_);
        return at > now ? at : now;
    }


    // Start of window k, saturated to the int64 range (|k| < 2^65, so k * w fits 128 bits).
    static std::int64_t window_start(detail::int128 k, std::int64_t w) noexcept
    {
        detail::int128 r = k * w;
        return r > detail::max_ns ? detail::max_ns : r < detail::min_ns ? detail::min_ns : static_cast<std::int64_t>(r);
    }

    // The newest window, newest_, is a full window number. The count word holds a count,
    // a `closed` bit, and the low 32 bits (the tag) of the window it was taken in. While
    // the tag equals newest_'s, the count belongs to newest_; otherwise newest_ has just
    // been opened and its count is 0 (the word still holds an older window's). Moving to a
    // new window takes three compare-and-swaps that any thread may perform: close the word
    // (admissions into the newest window go on; only a closed word lets newest_ move),
    // move newest_ forward, and rewrite the word for it (usually with the first admission).
    // newest_ never moves back, and never by a multiple of 2^32 in one step (such a move
    // goes through the window before the target), so a closed word of the newest window
    // cannot be taken for a stale one. Readers take newest_, the word, and newest_ again,
    // and retry if it moved: since it only moves forward, the word was read while newest_
    // held that value. The step through the window before a target 2^32*m windows ahead
    // is seen only by a concurrent call whose `now` is that far behind: it counts in that
    // empty window instead of its own.
    //
    // stale_rewrite: a thread that read a stale word (a closed one) and stalls rewrites it
    // only if it finds the same 64 bits again: that needs a later window with the same tag
    // to fill to the same count and be closed in turn during the stall, that is a whole
    // window plus another idle gap of about 2^32*m windows. The rewrite re-reads newest_
    // right before it, which narrows even that; a double-width compare-and-swap would
    // close it.
    static constexpr std::uint64_t closed_bit = std::uint64_t{1} << 31;
    static constexpr std::uint64_t count_mask = closed_bit - 1;
    static constexpr std::uint64_t tag_mask = (std::uint64_t{1} << 32) - 1;

    static std::uint64_t tag(std::int64_t k) noexcept { return static_cast<std::uint64_t>(k) & tag_mask; }
    static std::uint64_t pack(std::int64_t k, std::uint64_t count) noexcept { return (tag(k) << 32) | count; }

    struct state {
        std::int64_t newest;    // newest_ as read
        std::uint64_t word;     // the count word as read
        std::int64_t window;    // the window that counts at `now`
        std::uint64_t count;    // its count
    };

    // A consistent view of both words, and the window that counts at `now`: its own, or
    // the newest if the clock is behind it.
    state load(std::int64_t now) const noexcept
    {
        std::int64_t cur = detail::floor_div(now, window_);
        for (;;) {
            std::int64_t k = newest_.load(std::memory_order_acquire);
            std::uint64_t word = word_.load(std::memory_order_acquire);
            if (newest_.load(std::memory_order_acquire) != k)
                continue;
            std::uint64_t count = (word >> 32) == tag(k) ? word & count_mask : 0;
            if (cur > k)
                return {k, word, cur, 0};
            return {k, word, k, count};
        }
    }

    decision decide(std::uint64_t n, std::int64_t now, bool consume) noexcept
    {
        std::uint64_t limit = limit_.load(std::memory_order_relaxed);
        if (n == 0) return detail::invalid_decision(error::invalid_count);
        if (n > limit) return detail::invalid_decision(error::exceeds_limit);
        for (;;) {
            state s = load(now);
            std::int64_t end = window_start(detail::int128(s.window) + 1, window_);
            decision d;
            d.reset_after = std::chrono::nanoseconds{detail::sat_sub(end, now)};
            if (s.count + n > limit) {
                // A window that ends at or past the clock's end never ends: "never", not 0.
                d.retry_after = end == detail::max_ns ? std::chrono::nanoseconds::max() : d.reset_after;
                d.remaining = s.count < limit ? limit - s.count : 0;
                return d;
            }
            d.admitted = true;
            d.remaining = limit - s.count - n;
            if (!consume)
                return d;
            // A word that does not belong to newest_ is rewritten for it only if newest_ has
            // not moved since it was read (see stale_rewrite).
            if ((s.word >> 32) != tag(s.newest) && newest_.load(std::memory_order_acquire) != s.newest)
                continue;
            bool own = (s.word >> 32) == tag(s.newest);
            if (s.window == s.newest) {
                // Count in the newest window (closed or not: count + n < 2^31 leaves the bit
                // alone); a word left by an older window is rewritten for this one.
                std::uint64_t expected = s.word;
                std::uint64_t next = own ? s.word + n : pack(s.newest, n);
                if (word_.compare_exchange_strong(expected, next, std::memory_order_acq_rel, std::memory_order_acquire))
                    return d;
                continue;
            }
            // A newer window: the word must belong to newest_ and be closed before it moves.
            if (!own || !(s.word & closed_bit)) {
                std::uint64_t expected = s.word;
                word_.compare_exchange_strong(expected, own ? s.word | closed_bit : pack(s.newest, 0),
                                              std::memory_order_acq_rel, std::memory_order_acquire);
                continue;
            }
            std::int64_t target = s.window;
            if (tag(target) == tag(s.newest))
                --target;   // a multiple of 2^32 windows ahead: step through the window before
            std::int64_t expected = s.newest;
            newest_.compare_exchange_strong(expected, target, std::memory_order_acq_rel, std::memory_order_acquire);
        }
    }

    // Window INT64_MIN with a count of 0: the state of a fresh instance.
    alignas(64) std::atomic<std::int64_t> newest_{detail::min_ns};
    std::atomic<std::uint64_t> word_{0};
    std::atomic<std::uint64_t> limit_;
    const std::int64_t window_;
};

} // namespace sluice::policy
