// Options of a keyed limiter.
#pragma once

#include <sluice/limiter_options.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace sluice {

/// Options of a keyed limiter (sluice::keyed).
struct keyed_options {
    /// Hard cap on keys tracked at once, over all shards (each shard holds its share). A new
    /// key beyond it, when no idle key can be evicted, is served by the overflow limiter.
    std::size_t max_keys = 100'000;

    /// Independent parts of the store, each with its own lock; 0 picks 4 per hardware
    /// thread rounded up to a power of two, or up to twice that when the shards' tables
    /// are then fuller at max_keys (they grow by doubling). Never more than max_keys.
    std::size_t shards = 0;

    /// Length of one slot of the eviction wheel: an idle key is evicted at most about this
    /// long after it is back to fresh (when its shard is used, or on sweep()). >= 1 us.
    std::chrono::nanoseconds tick = std::chrono::milliseconds(10);

    /// Slots in the eviction wheel (one turn = slots * tick); keys idle for longer than a
    /// turn are looked at once a turn. 2 to 2^20.
    std::uint32_t wheel_slots = 512;

    /// Options of each key's waiting queue (max_queued is per key).
    limiter_options limiter{};
};

} // namespace sluice
