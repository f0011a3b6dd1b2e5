// The counters behind redis::link_stats, shared by the connections of a cluster client.
#pragma once

#include <sluice/redis/link_stats.hpp>

#include <atomic>
#include <cstdint>

namespace sluice::redis::detail {

// Written on the executor, read from any thread: relaxed, each count on its own.
struct link_counters {
    std::atomic<std::uint64_t> connects{0};
    std::atomic<std::uint64_t> links_lost{0};
    std::atomic<std::uint64_t> master_switches{0};

    static void bump(std::atomic<std::uint64_t>& c) noexcept { c.fetch_add(1, std::memory_order_relaxed); }

    link_stats snapshot() const noexcept
    {
        return {connects.load(std::memory_order_relaxed), links_lost.load(std::memory_order_relaxed),
                master_switches.load(std::memory_order_relaxed)};
    }
};

} // namespace sluice::redis::detail
