// Options and counters of the Redis-backed limiters.
#pragma once

#include <sluice/keyed_options.hpp>

#include <chrono>
#include <cstdint>
#include <string>

namespace sluice::redis {

/// What a limiter decides while Redis cannot be reached (a connection error, or no reply
/// within the client's command timeout, 1 s by default).
enum class failure_policy {
    /// Refuse: requests complete with error::backend_unavailable.
    fail_closed,
    /// Admit everything: availability over the limit.
    fail_open,
    /// Enforce a local share of the quota (rate / expected_nodes, per key) in each process.
    local_fallback,
};

/// Options of a Redis-backed limiter.
struct shared_options {
    /// Keys are "{prefix:key}": the hash tag keeps every key of one limiter key in one
    /// Redis Cluster slot. Two limiters with the same prefix and key share one quota, so
    /// they must be configured alike.
    std::string prefix = "sluice";

    /// What to decide while Redis cannot be reached (see failure_policy).
    failure_policy on_failure = failure_policy::local_fallback;

    /// local_fallback: how many processes share the quota; each enforces rate /
    /// expected_nodes with a burst of burst / expected_nodes (at least 1) while Redis is
    /// away. >= 1.
    std::uint64_t expected_nodes = 1;

    /// While Redis is unreachable, one request per probe_interval tries it again (the
    /// others go to the failure policy at once, so nobody waits for a dead server); the
    /// first success switches back. > 0.
    std::chrono::milliseconds probe_interval{200};

    /// Options of the local fallback limiter (one token bucket per key).
    keyed_options fallback;

    /// Leasing (0: off): async_try_acquire keeps up to lease_size permits of a key
    /// reserved ahead in Redis (reserving up to lease_size, at most the burst, a round trip,
    /// at most lease_ttl ahead; topped up in the background) and hands them out locally,
    /// each no earlier than its slot on the server: no over-admission in any window, and
    /// no round trip while this process holds a due permit or a refusal is in force. While
    /// a reservation of a key is in flight and none is due, tries of that key are refused
    /// locally. Slots reserved and not used are lost to the others (under-admission), at
    /// most lease_size per process. async_acquire is not affected. Each key used with
    /// leasing keeps a small entry in the limiter until close().
    std::uint64_t lease_size = 0;

    /// How far ahead a lease may reserve, and how long after its slot a leased permit may
    /// still be handed out (later it is dropped). On close() unused permits are given back
    /// where nothing later depends on them.
    std::chrono::milliseconds lease_ttl{250};
};

/// Counters of a Redis-backed limiter since construction.
struct shared_stats {
    /// Requests answered (granted or refused), by Redis or by the failure policy.
    std::uint64_t decisions = 0;
    /// Of those, the grants.
    std::uint64_t admitted = 0;
    /// Of those, the refusals.
    std::uint64_t rejected = 0;

    /// Decisions taken by the failure policy while Redis was unreachable.
    std::uint64_t fallback_decisions = 0;

    /// Commands that failed: unreachable, timed out, error replies, malformed replies.
    std::uint64_t redis_errors = 0;

    /// The Redis server's clock minus this host's system_clock, estimated from the server
    /// time in each reply and the middle of its round trip (0 before the first reply).
    /// Decisions never use it: every time in a decision is the server's.
    std::chrono::microseconds clock_offset{0};

    /// The round trip of the last reply.
    std::chrono::microseconds last_round_trip{0};

    /// True while requests go to the failure policy.
    bool degraded = false;
};

} // namespace sluice::redis
