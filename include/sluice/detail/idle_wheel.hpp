// A timing wheel of eviction candidates: a ring of slots, as a clock face, each holding the
// entries that may have gone idle by the end of its tick.
#pragma once

#include <sluice/detail/arith.hpp>

#include <cstdint>
#include <optional>
#include <vector>

namespace sluice::detail {

/// Entries are filed under the tick at which they may be idle and looked at again when the
/// hand has passed it. Touching an entry costs nothing: it stays where it is and is filed
/// again, under its new idle time, when its slot comes round. Due times beyond one turn of
/// the wheel are filed in its last slot and filed again when they come round.
///
/// Node needs `Node* wheel_prev, *wheel_next` and `std::uint32_t wheel_slot`. Not
/// thread-safe: the owner's lock covers it.
template <class Node>
class idle_wheel {
public:
    /// `tick` > 0 ns, `slots` >= 2; `now` starts the hand.
    idle_wheel(std::int64_t tick, std::uint32_t slots, std::int64_t now)
        : tick_(tick), slots_(slots, nullptr), hand_(floor_div(now, tick))
    {
        next_at_ = start_of(hand_ + 1);
    }

    idle_wheel(const idle_wheel&) = delete;
    idle_wheel& operator=(const idle_wheel&) = delete;

    /// Files `n` to be looked at once `due` has passed (at the latest one turn from now).
    void schedule(Node* n, std::int64_t due) noexcept { file(n, due, hand_); }

    /// Takes `n` off the wheel.
    void unlink(Node* n) noexcept
    {
        (n->wheel_prev ? n->wheel_prev->wheel_next : slots_[n->wheel_slot]) = n->wheel_next;
        if (n->wheel_next) n->wheel_next->wheel_prev = n->wheel_prev;
        n->wheel_prev = n->wheel_next = nullptr;
    }

    /// Whether advance(now, ...) has anything to look at.
    bool due(std::int64_t now) const noexcept { return now >= next_at_; }

    /// Takes every entry whose slot the hand has passed by `now` off the wheel, at most
    /// `budget` of them, and calls `visit(n, now)` for each: it returns the time at which to
    /// look at the entry again, or nullopt when it took the entry away for good. Returns
    /// how many were visited; the rest wait for the next call.
    template <class Visit>
    std::size_t advance(std::int64_t now, std::size_t budget, Visit&& visit)
    {
        const auto size = static_cast<std::int64_t>(slots_.size());
        const std::int64_t now_tick = floor_div(now, tick_);
        std::size_t visited = 0;
        if (now_tick - hand_ > size)
            hand_ = now_tick - size;   // a long idle spell: every slot is due, once
        while (hand_ < now_tick) {
            Node*& head = slots_[index(hand_)];
            // Entries looked at now are filed after this tick (never in this slot again) and
            // not before the current tick: an entry that must stay is looked at once a tick.
            std::int64_t floor = now_tick > hand_ + 1 ? now_tick : hand_ + 1;
            while (head && visited < budget) {
                Node* n = head;
                unlink(n);
                ++visited;
                if (std::optional<std::int64_t> again = visit(n, now))
                    file(n, *again, floor);
            }
            if (head) {
                next_at_ = min_ns;   // out of budget: this slot goes on next time
                return visited;
            }
            ++hand_;
        }
        next_at_ = start_of(hand_ + 1);
        return visited;
    }

private:
    std::size_t index(std::int64_t tick) const noexcept
    {
        auto size = static_cast<std::int64_t>(slots_.size());
        std::int64_t r = tick % size;
        return static_cast<std::size_t>(r < 0 ? r + size : r);
    }

    std::int64_t start_of(std::int64_t tick) const noexcept
    {
        std::int64_t r;
        return __builtin_mul_overflow(tick, tick_, &r) ? (tick > 0 ? max_ns : min_ns) : r;
    }

    // Files n under the tick of `due`, kept within [lo, hand_ + slots - 1] so that it is in
    // this turn of the wheel and never in a slot being emptied.
    void file(Node* n, std::int64_t due, std::int64_t lo) noexcept
    {
        std::int64_t hi = hand_ + static_cast<std::int64_t>(slots_.size()) - 1;
        std::int64_t t = floor_div(due, tick_);
        if (t < lo) t = lo;
        if (t > hi) t = hi;
        std::size_t i = index(t);
        n->wheel_slot = static_cast<std::uint32_t>(i);
        n->wheel_prev = nullptr;
        n->wheel_next = slots_[i];
        if (slots_[i]) slots_[i]->wheel_prev = n;
        slots_[i] = n;
    }

    std::int64_t tick_;
    std::vector<Node*> slots_;
    std::int64_t hand_;             // the oldest tick not yet emptied
    std::int64_t next_at_;          // advance() has work from this instant on
};

} // namespace sluice::detail
