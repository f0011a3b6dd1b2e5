// Options of shm::keyed_bucket's waiting: this process's own, apart from the shared table's.
#pragma once

#include <sluice/limiter_options.hpp>

#include <cstddef>

namespace sluice::shm {

/// Options of shm::keyed_bucket's waiting (async_acquire, acquire), this process's own.
struct keyed_wait_options {
    /// Keys this process keeps a waiting queue for at once (its own bound, apart from the
    /// table's max_keys). A queue nobody waits in is let go when a new one needs the room;
    /// a request that has to wait on a new key when every queue kept has waiters is
    /// refused with error::queue_full. At least 1.
    std::size_t max_waiting_keys = 10'000;

    /// Options of each key's waiting queue (max_queued is per key).
    limiter_options limiter{};
};

} // namespace sluice::shm
