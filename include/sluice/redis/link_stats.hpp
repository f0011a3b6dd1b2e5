// What a Redis client's links went through: how often they came up, were lost, and
// followed a failover announced by the Sentinels.
#pragma once

#include <cstdint>

namespace sluice::redis {

/// Counts since the client was made, read from any thread with basic_client::stats(). A
/// cluster client sums those of its nodes' connections. The client's own close() is not a
/// lost link.
struct link_stats {
    /// Links brought up: the handshake answered (with Sentinel, ROLE said master). The
    /// first connection counts.
    std::uint64_t connects = 0;
    /// Links that were up and went: closed or reset by the server or the network, a
    /// command timeout, a failover followed.
    std::uint64_t links_lost = 0;
    /// Failovers followed on a Sentinel's `+switch-master` announcement, before the link
    /// to the old master broke (announcements of a switch already made are not counted).
    std::uint64_t master_switches = 0;
};

} // namespace sluice::redis
