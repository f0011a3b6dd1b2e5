// Time wheel: a ring of per-slot counters; at most `limit` permits in the last full turn.
#pragma once

#include <sluice/decision.hpp>
#include <sluice/policy/basic_policy.hpp>
#include <sluice/detail/base/arith.hpp>

#include <boost/system/system_error.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace sluice::policy {

/// Time wheel: time is cut into slots [k*slot_duration, (k+1)*slot_duration), and a request
/// in slot k is admitted while the slots k - slots + 1 .. k (one full turn of the wheel)
/// hold at most `limit` permits with it. A sliding window of slots * slot_duration measured
/// with slot granularity: never more than `limit` in any `slots` consecutive slots. Memory
/// is bounded by the ring (4 bytes a slot, allocated once), where sliding_log keeps one
/// timestamp per permit of the limit.
///
/// Thread-safe with a short critical section (a mutex): an admission may clear several slots
/// and must update the ring and its total together, which one compare-and-swap cannot do.
/// Slots left behind are cleared lazily by the next admission, so no call walks more than
/// `slots` slots whatever the idle gap (a rejection walks the ring once to find the slot
/// that frees enough room). A clock that steps backwards keeps counting in the newest slot
/// that admitted anything (it never reopens an older one): it can only reject more. A slot
/// that starts at or past the end of the int64 range never starts.
///
/// predict() is a lower bound (queued permits are assumed admitted one by one as early as
/// possible), exact when nothing is ahead; detail::max_ns when never (n == 0, n > limit, or
/// not before the end of the int64 range).
class slot_ring : public basic_window<slot_ring, true> {
    friend class basic_policy<slot_ring, true>;
    friend class basic_window<slot_ring, true>;

public:
    /// One slot's counter is 32 bits; it never exceeds the largest limit in force.
    static constexpr std::uint64_t max_limit = (std::uint64_t{1} << 32) - 1;
    /// A ring of 256 KiB at most, and a bounded walk per call.
    static constexpr std::uint32_t max_slots = std::uint32_t{1} << 16;

    /// Throws system_error(error::invalid_limit) unless 1 <= limit <= 2^32 - 1 and
    /// 1 <= slots <= 2^16, and error::invalid_duration unless slot_duration > 0 and
    /// slots * slot_duration fits in int64 nanoseconds.
    slot_ring(std::uint64_t limit, std::chrono::nanoseconds slot_duration, std::uint32_t slots)
        : limit_(check_limit(limit)),
          slot_(check_shape(slot_duration, slots)),
          slots_(slots),
          last_slot_(detail::max_ns / slot_),
          counts_(slots, 0)
    {
    }


    /// Earliest instant from which the policy answers requests at that instant or later
    /// exactly like a new one, if nothing more is admitted: the start of the slot one turn
    /// after the newest slot that admitted anything. detail::min_ns when nothing was ever
    /// admitted, detail::max_ns when that slot starts at or past the end of the int64 range.
    std::int64_t idle_at() const noexcept
    {
        std::lock_guard lock(mutex_);
        return total_ == 0 ? detail::min_ns : slot_start(detail::int128(head_) + slots_);
    }

    /// The same, in the form every policy offers (keyed limiters call it with the time).
    std::int64_t idle_at(std::int64_t /*now*/) const noexcept { return idle_at(); }

    /// Changes the limit; permits already counted stay counted (a smaller limit may leave
    /// the current turn over it until they leave the wheel).
    void set_limit(std::uint64_t limit)
    {
        check_limit(limit);
        std::lock_guard lock(mutex_);
        limit_ = limit;
    }

    /// The length of one slot.
    std::chrono::nanoseconds slot_duration() const noexcept { return std::chrono::nanoseconds{slot_}; }
    /// Slots in one turn.
    std::uint32_t slots() const noexcept { return static_cast<std::uint32_t>(slots_); }
    /// Settles `cost` permits admitted at `at` with their `actual` cost: the count of the
    /// slot of `at` moves by the difference, down (never below 0) or up (a debt, saturating
    /// at 2^32 - 1 in the slot), exactly the counts an admission of `actual` would have
    /// left; a slot out of the turn (or one the admission was not counted in: the clock
    /// stepped back) no longer decides anything and changes nothing. Under the lock. Returns 0.
    std::int64_t settle(std::uint64_t cost, std::uint64_t actual, std::int64_t at, std::int64_t /*now*/) noexcept
    {
        if (cost == actual) return 0;
        std::lock_guard lock(mutex_);
        const std::int64_t k = detail::floor_div(at, slot_);
        if (total_ == 0 || k > head_ || detail::int128(head_) - k >= slots_) return 0;
        std::uint32_t& c = counts_[index(k)];
        std::uint64_t next = actual < cost ? c - std::min<std::uint64_t>(c, cost - actual)
                                           : c + std::min<std::uint64_t>(0xffffffffu - c, actual - cost);
        total_ = total_ - c + next;
        c = static_cast<std::uint32_t>(next);
        return 0;
    }

    /// One turn: slots() * slot_duration().
    std::chrono::nanoseconds window() const noexcept { return std::chrono::nanoseconds{slot_ * slots_}; }

private:

    static std::int64_t check_shape(std::chrono::nanoseconds d, std::uint32_t slots)
    {
        std::int64_t turn;
        if (slots == 0 || slots > max_slots)
            throw boost::system::system_error(make_error_code(error::invalid_limit));
        if (d.count() <= 0 || __builtin_mul_overflow(d.count(), static_cast<std::int64_t>(slots), &turn))
            throw boost::system::system_error(make_error_code(error::invalid_duration));
        return d.count();
    }

    // Ring position of a slot number (any int64, negative ones included).
    std::size_t index(std::int64_t slot) const noexcept
    {
        std::int64_t r = slot % slots_;
        return static_cast<std::size_t>(r < 0 ? r + slots_ : r);
    }

    // Ring position of slot head_ + off, for -slots < off <= slots: no slot arithmetic
    // that could overflow near the ends of the int64 range.
    std::size_t index_from_head(std::int64_t off) const noexcept
    {
        return static_cast<std::size_t>((static_cast<std::int64_t>(index(head_)) + slots_ + off) % slots_);
    }

    // Start of slot s, or max_ns when it starts beyond the int64 range ("never").
    std::int64_t slot_start(detail::int128 s) const noexcept
    {
        return s > last_slot_ ? detail::max_ns : static_cast<std::int64_t>(s * slot_);
    }

    // The slot a request at `now` counts in: its own, or the newest slot that admitted
    // anything when the clock stepped back behind it.
    std::int64_t slot_of(std::int64_t now) const noexcept
    {
        std::int64_t k = detail::floor_div(now, slot_);
        return total_ != 0 && head_ > k ? head_ : k;
    }

    // Permits counted in the turn that ends with slot e >= head_: the slots of the ring
    // from e - slots + 1 on (at most e - head_ of them have left it).
    std::uint64_t in_turn(std::int64_t e) const noexcept
    {
        if (total_ == 0) return 0;
        detail::int128 gap = detail::int128(e) - head_;
        if (gap >= slots_) return 0;
        std::uint64_t n = total_;
        for (std::int64_t off = 1 - slots_; off <= static_cast<std::int64_t>(gap) - slots_; ++off)
            n -= counts_[index_from_head(off)];
        return n;
    }

    // Slot of the r-th newest counted permit (0-based, r < total_).
    detail::int128 newest_slot(std::uint64_t r) const noexcept
    {
        std::uint64_t seen = 0;
        for (std::int64_t off = 0;; --off) {
            seen += counts_[index_from_head(off)];
            if (seen > r) return detail::int128(head_) + off;
        }
    }

    std::uint64_t limit_locked() const noexcept { return limit_; }

    std::int64_t predict_locked(std::uint64_t n, std::int64_t now, std::uint64_t ahead) const noexcept
    {
        if (n == 0 || n > limit_) return detail::max_ns;
        // Greedy admissions one by one: the i-th future permit needs the permit `limit` places
        // before it (counted or future) one full turn behind, as in sliding_log with slots
        // for timestamps. So it lands in max(e, slot of the i-th oldest of the newest
        // `limit` counted permits + slots), plus one turn per full `limit` ahead of it.
        const std::int64_t e = slot_of(now);
        detail::uint128 last = detail::uint128(ahead) + n - 1;
        auto turns = static_cast<std::uint64_t>(last / limit_);
        auto i = static_cast<std::uint64_t>(last % limit_);
        std::uint64_t r = limit_ - 1 - i;   // its place among the counted ones, newest first
        detail::int128 s = r < total_ ? std::max<detail::int128>(e, newest_slot(r) + slots_) : e;
        s += detail::int128(turns) * slots_;
        return s == e ? now : slot_start(s);
    }

    // Clears the slots after head_ up to e (at most one turn of them) and makes e the head.
    void advance(std::int64_t e) noexcept
    {
        if (total_ != 0 && e != head_) {
            detail::int128 gap = detail::int128(e) - head_;
            if (gap >= slots_) {
                std::fill(counts_.begin(), counts_.end(), 0);
                total_ = 0;
            } else {
                for (std::int64_t off = 1; off <= static_cast<std::int64_t>(gap); ++off) {
                    std::uint32_t& c = counts_[index_from_head(off)];
                    total_ -= c;
                    c = 0;
                }
            }
        }
        head_ = e;
    }

    decision decide(std::uint64_t n, std::int64_t now, bool consume) noexcept
    {
        if (n == 0) return detail::invalid_decision(error::invalid_count);
        if (n > limit_) return detail::invalid_decision(error::exceeds_limit);
        decision d;
        const std::int64_t e = slot_of(now);
        const std::uint64_t used = in_turn(e);
        detail::int128 newest;   // the newest slot that admitted anything, after this decision
        if (used + n <= limit_) {
            d.admitted = true;
            d.remaining = limit_ - used - n;
            newest = e;
            if (consume) {
                advance(e);
                counts_[index(e)] += static_cast<std::uint32_t>(n);
                total_ += n;
            }
        } else {
            d.remaining = used >= limit_ ? 0 : limit_ - used;
            // Rejected, so something is counted and the answer is in a later slot (> now).
            std::int64_t at = predict_locked(n, now, 0);
            d.retry_after = std::chrono::nanoseconds{at == detail::max_ns ? detail::max_ns : detail::sat_sub(at, now)};
            newest = head_;
        }
        std::int64_t reset = detail::sat_sub(slot_start(newest + slots_), now);
        d.reset_after = std::chrono::nanoseconds{reset > 0 ? reset : 0};
        return d;
    }

    std::uint64_t limit_;
    const std::int64_t slot_;
    const std::int64_t slots_;
    const std::int64_t last_slot_;          // the last slot that starts within int64
    std::vector<std::uint32_t> counts_;     // counts_[index(k)]: permits admitted in slot k
    std::int64_t head_ = 0;                 // the newest slot that admitted anything
    // Sum of counts_, all of them in slots head_ - slots + 1 .. head_. Zero exactly when
    // nothing was ever admitted: an admission adds at least one to head_, which is never cleared.
    std::uint64_t total_ = 0;
};

} // namespace sluice::policy
