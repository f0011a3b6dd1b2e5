// A timing wheel of eviction candidates: a ring of slots, as a clock face, each holding the
// entries that may have gone idle by the end of its tick.
#pragma once

#include <sluice/detail/base/arith.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace sluice::detail {

/// Entries are filed under the tick at which they may be idle and looked at again when the
/// hand has passed it. Touching an entry costs nothing: it stays where it is and is filed
/// again, under its new idle time, when its slot comes round. Due times beyond one turn of
/// the wheel are filed in its last slot and filed again when they come round.
///
/// The wheel holds values (a keyed store files each key's hash, 8 bytes, and finds the key
/// again by it): nothing in the entries themselves, which a flat hash table moves around.
/// Not thread-safe: the owner's lock covers it.
template <class Value>
class idle_wheel {
public:
    /// `tick` > 0 ns, `slots` >= 2; `now` starts the hand.
    idle_wheel(std::int64_t tick, std::uint32_t slots, std::int64_t now)
        : tick_(tick), slots_(slots), hand_(floor_div(now, tick))
    {
        next_at_ = start_of(hand_ + 1);
    }

    idle_wheel(const idle_wheel&) = delete;
    idle_wheel& operator=(const idle_wheel&) = delete;

    /// Files `v` to be looked at once `due` has passed (at the latest one turn from now).
    void schedule(Value v, std::int64_t due) { file(std::move(v), due, hand_); }

    /// Whether advance(now, ...) has anything to look at.
    bool due(std::int64_t now) const noexcept { return now >= next_at_; }

    /// Takes every value whose slot the hand has passed by `now` off the wheel, at most
    /// `budget` of them, and calls `visit(v, now)` for each: it returns the time at which to
    /// look at the value again, or nullopt when it is done with it. Returns how many were
    /// visited; the rest wait for the next call.
    template <class Visit>
    std::size_t advance(std::int64_t now, std::size_t budget, Visit&& visit)
    {
        const auto size = static_cast<std::int64_t>(slots_.size());
        const std::int64_t now_tick = floor_div(now, tick_);
        std::size_t visited = 0;
        if (now_tick - hand_ > size)
            hand_ = now_tick - size;   // a long idle spell: every slot is due, once
        while (hand_ < now_tick) {
            std::vector<Value>& slot = slots_[index(hand_)];
            // Values looked at now are filed after this tick (never in this slot again) and
            // not before the current tick: an entry that must stay is looked at once a tick.
            std::int64_t floor = now_tick > hand_ + 1 ? now_tick : hand_ + 1;
            while (!slot.empty() && visited < budget) {
                Value v = std::move(slot.back());
                slot.pop_back();
                ++visited;
                if (std::optional<std::int64_t> again = visit(v, now))
                    file(std::move(v), *again, floor);
            }
            if (!slot.empty()) {
                next_at_ = min_ns;   // out of budget: this slot goes on next time
                return visited;
            }
            // A slot that once held many keys does not keep their room for ever.
            if (slot.capacity() > 256) std::vector<Value>().swap(slot);
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

    // Files v under the tick of `due`, kept within [lo, hand_ + slots - 1] so that it is in
    // this turn of the wheel and never in a slot being emptied.
    void file(Value v, std::int64_t due, std::int64_t lo)
    {
        std::int64_t hi = hand_ + static_cast<std::int64_t>(slots_.size()) - 1;
        std::int64_t t = floor_div(due, tick_);
        if (t < lo) t = lo;
        if (t > hi) t = hi;
        slots_[index(t)].push_back(std::move(v));
    }

    std::int64_t tick_;
    std::vector<std::vector<Value>> slots_;
    std::int64_t hand_;             // the oldest tick not yet emptied
    std::int64_t next_at_;          // advance() has work from this instant on
};

} // namespace sluice::detail
