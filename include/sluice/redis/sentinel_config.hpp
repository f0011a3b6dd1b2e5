// Where to find the master through Redis Sentinel.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace sluice::redis {

/// One Sentinel's address.
struct sentinel_address {
    /// A numeric address or a host name (resolved with Asio's resolver at every use).
    std::string host;
    /// Sentinel's TCP port.
    std::uint16_t port = 26379;

    /// Equal host text and port.
    friend bool operator==(const sentinel_address&, const sentinel_address&) = default;
};

/// The Sentinels that monitor a master and the master's name. With sentinels, a
/// connection asks them for the master at every connection attempt instead of using its
/// host and port.
struct sentinel_config {
    /// The Sentinels to ask, in order; the one whose answer was last verified is asked
    /// first next time. Empty: Sentinel is not used. The list is refreshed from the
    /// Sentinels themselves (SENTINEL SENTINELS, +sentinel): Sentinels they report are
    /// added (at most 16 beyond these), the live ones are asked first, and these are never
    /// forgotten (asked last when no Sentinel reports them).
    std::vector<sentinel_address> sentinels;

    /// The name the Sentinels monitor the master under (`sentinel monitor <name> ...`).
    std::string master_name;

    /// Each step of a discovery (one Sentinel's answer, then the ROLE check of the master
    /// it named: connect, optional AUTH, command, reply) is given up after this long and
    /// counts as that Sentinel or master being unreachable. A few hundred milliseconds, as
    /// Sentinel's client guidelines advise: a dead Sentinel must not hold up the next one.
    /// A connection's subscription to a Sentinel (see connection_config::sentinel) is
    /// bounded by it until subscribed, then sends PING every 4 x timeout and is made again
    /// when nothing came back over one such period.
    std::chrono::milliseconds timeout{250};

    /// `AUTH password` to the Sentinels (their own `requirepass`) when not empty. The
    /// master is authenticated with connection_config::password.
    std::string password;
};

} // namespace sluice::redis
