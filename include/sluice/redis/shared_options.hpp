// Options of the Redis-backed limiters.
#pragma once

#include <sluice/keyed_options.hpp>
#include <sluice/shadow.hpp>

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

    /// The requests that wait locally (a token bucket's for its reserved slot, a sliding
    /// window's before its next check) share one timer per limiter, which wakes at most
    /// once per `coalesce` and releases every request due by then: a wait may end up to
    /// this much late, never early, and the timer costs a bounded number of system calls
    /// per second however many wait. 0 wakes for every request. >= 0.
    std::chrono::nanoseconds coalesce = std::chrono::microseconds(200);

    /// Leasing (0: off; token bucket): async_try_acquire reserves a run of consecutive
    /// future slots of a key in one round trip and hands them out locally, each no
    /// earlier than its slot on the server. lease_size is the longest run: a run may be
    /// longer than the burst (the slots are future ones, one interval apart). The length
    /// follows the process's demand: it covers the permits the process asked for
    /// (granted or not) over lease_ttl / 8, and halves when slots expired unused; it never
    /// spans more than lease_ttl / 8 of the key's time (nor lease_size slots), the same
    /// for every process whatever its round trip, so processes that ask for more than they
    /// get take runs of one length in turn: equal demand, equal shares. The next run is
    /// reserved in the background while the slots held end, as the server counts (from
    /// the request, not from a reply read late by a busy event loop), within two round
    /// trips (plus one interval) of now, or within 5 ms while the process asks more often
    /// than once an interval; while other processes reserve slots of the key too, within
    /// max(5 ms, 2 intervals) for every one of them (a process reserving earlier than the
    /// others would take a larger share). A process or a server that is not running cannot
    /// reserve, and with a small burst a slot nobody reserved in time is lost to everyone.
    /// While a reservation is in flight and no slot is due, tries are refused locally.
    ///
    /// Bounds, whatever the number of processes: no slot is handed out before its time on
    /// the server and each at most once, so over a run from an idle bucket the fleet
    /// admits at most burst + elapsed / interval (the bucket's own bound), and in any
    /// window of length W at most burst + (W + lease_ttl) / interval (a slot may be handed
    /// out up to lease_ttl late). Slots reserved and not used are lost to the others: at
    /// most what a process holds when it stops asking (its last run, and the slots within
    /// the lead above), the last run given back on close() where nothing later depends on
    /// it. async_acquire is not affected. Each key used with leasing keeps a
    /// small entry in the limiter until close().
    std::uint64_t lease_size = 0;

    /// How far ahead a run may reach (its last slot at most lease_ttl after the server's
    /// now), and how long after its slot a leased permit may still be handed out (later it
    /// is dropped, counted in limiter_stats::backend_counts::lease_expired).
    std::chrono::milliseconds lease_ttl{250};

    /// Shadow mode: every decision taken by Redis and counted, nobody refused or made to
    /// wait (see sluice::shadow_options). Not with lease_size. While Redis is away the
    /// failure policy decides, in the dark as well (fail_closed's refusals stay errors).
    shadow_options shadow{};
};

} // namespace sluice::redis
