// Settings of one Redis connection.
#pragma once

#include <sluice/redis/sentinel_config.hpp>

#include <chrono>
#include <cstdint>
#include <string>

namespace sluice::redis {

/// Settings of one Redis connection (for a cluster: of every link, taken from the seed's).
struct connection_config {
    /// A numeric address or a host name, resolved with Asio's resolver (off the executor's
    /// threads) at every connection attempt, within connect_timeout. Not used when
    /// `sentinel` lists Sentinels.
    std::string host = "127.0.0.1";
    /// The TCP port.
    std::uint16_t port = 6379;

    /// TCP connect plus the handshake (PING, or AUTH when a password is set; with
    /// Sentinels, ROLE instead of PING, after AUTH). With Sentinels, the discovery before
    /// it is bounded by this too, separately (each of its steps by sentinel.timeout): keep
    /// it above sentinel.timeout times the Sentinels that may not answer, or those behind
    /// them in the list are never asked.
    std::chrono::milliseconds connect_timeout{1000};

    /// A reply later than this fails its command with error::backend_unavailable and
    /// resets the link: in a pipeline a reply cannot be skipped.
    std::chrono::milliseconds command_timeout{1000};

    /// Wait before reconnecting after a failure, doubling up to reconnect_max; back to
    /// reconnect_min once a connection is up again.
    std::chrono::milliseconds reconnect_min{50};
    /// The longest wait between two reconnection attempts.
    std::chrono::milliseconds reconnect_max{2000};

    /// `AUTH password` as the handshake when not empty.
    std::string password;

    /// Redis Sentinel (when sentinel.sentinels is not empty): at every connection attempt,
    /// the master named sentinel.master_name is asked of the Sentinels and checked with
    /// ROLE (see basic_sentinel_resolver), and the connection goes there; a lost link is
    /// followed by a new discovery. The connection also subscribes to `+switch-master` on
    /// every known Sentinel (one link each, reconnected after reconnect_min doubling to
    /// reconnect_max): a failover announced for this master moves it to the new master at
    /// once (commands in flight on the old link fail with error::backend_unavailable), even
    /// while the old master is still up. While no master is found, commands fail with
    /// error::backend_unavailable, as with a server that is down, and a limiter's failure
    /// policy decides.
    sentinel_config sentinel;
};

} // namespace sluice::redis
