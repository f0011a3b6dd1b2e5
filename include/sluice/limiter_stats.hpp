// The counters every limiter reports: one type for all of them (stats()).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace sluice {

/// What a limiter answered since construction: the one type stats() returns on every
/// limiter, local, keyed, concurrency, adaptive or shared. A field that does not apply to
/// a limiter stays zero (each group says where it applies).
///
/// Requests are the calls that may wait (async_acquire, acquire, acquire_blocking); each is
/// counted once, when it is answered, under exactly one of admitted, refused, timed_out,
/// cancelled and closed. A local limiter takes its snapshot under its lock, so those five,
/// waiting and the waits agree with each other. try_acquire and async_try_acquire are
/// counted apart: by a local limiter only when limiter_options::count_try_acquire is set
/// (they are lock-free, and a shared counter would make every call write one contended
/// cache line), by a shared limiter always.
struct limiter_stats {
    /// Requests admitted, at once or after waiting.
    std::uint64_t admitted = 0;

    /// Requests refused for a reason other than time or closing: error::queue_full,
    /// error::exceeds_limit, error::invalid_count, and for a shared limiter the backend's
    /// errors (error::backend_unavailable, backend_error, protocol_error).
    std::uint64_t refused = 0;

    /// Requests refused with error::timed_out: predicted to wait beyond their max_wait (at
    /// once, with nothing consumed), or still waiting at their deadline.
    std::uint64_t timed_out = 0;

    /// Requests cancelled while they waited (operation_aborted).
    std::uint64_t cancelled = 0;

    /// Requests answered with error::closed: pending at close() or made after it.
    std::uint64_t closed = 0;

    /// Requests waiting now.
    std::size_t waiting = 0;

    /// Of the admitted requests, those that had to wait.
    std::uint64_t waited = 0;

    /// The time the admitted requests spent waiting, summed (a request admitted at once
    /// counts 0), measured on the limiter's clock; saturates at its maximum.
    std::chrono::nanoseconds total_wait{0};

    /// The longest time one admitted request waited.
    std::chrono::nanoseconds longest_wait{0};

    /// Tries admitted (see the class comment for when tries are counted).
    std::uint64_t try_admitted = 0;

    /// Tries refused.
    std::uint64_t try_refused = 0;

    /// Keyed limiters (sluice::keyed); zero elsewhere.
    struct key_counts {
        /// Keys tracked now (at most keyed_options::max_keys).
        std::size_t tracked = 0;
        /// Keys created since construction.
        std::uint64_t created = 0;
        /// Idle keys evicted (never one with state or waiters).
        std::uint64_t evicted = 0;
        /// Requests and tries for keys that could not be tracked (the cap was reached with
        /// nothing idle), served by the overflow limiter.
        std::uint64_t overflow_requests = 0;
        /// Of those, the ones the overflow limiter admitted (less those cancelled after).
        std::uint64_t overflow_admitted = 0;
        /// Keys with a waiting queue allocated now.
        std::size_t waiting = 0;
    } keys; ///< Keyed limiters' counts (sluice::keyed); zero elsewhere.

    /// Limiters whose state lives in a shared backend (sluice::redis); zero elsewhere.
    struct backend_counts {
        /// Commands sent (decisions, reservations, leases, refunds, configuration); a
        /// batch of requests in one script call is one.
        std::uint64_t commands = 0;
        /// Commands that failed: unreachable, no reply in time, error replies, malformed
        /// replies.
        std::uint64_t errors = 0;
        /// Requests and tries answered by the failure policy while the backend was away.
        std::uint64_t fallback_decisions = 0;
        /// Leased slots dropped unused (held past their time), lost to every process.
        std::uint64_t lease_expired = 0;
        /// The client's links that were up and went (redis::link_stats::links_lost): counts
        /// of the client, shared by every limiter on it.
        std::uint64_t links_lost = 0;
        /// Failovers the client followed on a Sentinel's announcement
        /// (redis::link_stats::master_switches), as links_lost.
        std::uint64_t master_switches = 0;
        /// The round trip of the last reply.
        std::chrono::microseconds last_round_trip{0};
        /// The backend's clock minus this host's system_clock, estimated from the last
        /// reply (0 before the first). Decisions never use it: they run on the backend's
        /// clock.
        std::chrono::microseconds clock_offset{0};
        /// True while requests go to the failure policy.
        bool degraded = false;
    } backend; ///< Shared limiters' counts (sluice::redis); zero elsewhere.

    /// Adaptive limiters (adaptive_rate, adaptive_concurrency); zero elsewhere.
    struct adaptive_counts {
        /// adaptive_concurrency: completed operations fed to the controller.
        std::uint64_t samples = 0;
        /// adaptive_concurrency: of those, the ones that failed from overload (drop()).
        std::uint64_t dropped = 0;
        /// adaptive_concurrency: times the limit went up.
        std::uint64_t increases = 0;
        /// Times the limit went down (adaptive_concurrency), or the rate was cut on a
        /// refusal (adaptive_rate).
        std::uint64_t decreases = 0;
        /// adaptive_rate: times the rate in force moved.
        std::uint64_t adaptations = 0;
        /// adaptive_rate: server responses fed.
        std::uint64_t responses = 0;
        /// adaptive_rate: of those, refusals (429 or 503).
        std::uint64_t refusals = 0;
        /// adaptive_rate: responses whose RateLimit fields set the rate.
        std::uint64_t with_fields = 0;
        /// adaptive_rate: fields ignored as malformed (up to three a response).
        std::uint64_t malformed_fields = 0;
        /// adaptive_rate: pauses started or extended (Retry-After, or a refusal).
        std::uint64_t pauses = 0;
        /// adaptive_rate: pauses cut to adaptive_rate_options::max_pause.
        std::uint64_t pauses_cut = 0;
        /// adaptive_rate: times a server's fields contradicted its refusals and were
        /// distrusted.
        std::uint64_t distrusted = 0;
    } adaptive; ///< Adaptive limiters' counts (adaptive_rate, adaptive_concurrency); zero elsewhere.

    /// Limiters in shadow mode (shadow_options): the requests the limit would have refused
    /// or made wait, each answered admitted at once. Every request is also counted above as
    /// usual: an acquire under admitted (or closed, refused for the errors that stay
    /// errors), and a try where tries are counted, as the limit decided it (try_refused
    /// holds those let through; an acquire is decided as a try, and so is counted there as
    /// well). Zero elsewhere.
    struct shadow_counts {
        /// True when the limiter runs in shadow mode.
        bool enabled = false;
        /// Tries the limit refused, answered admitted.
        std::uint64_t try_refused = 0;
        /// Acquires the limit would have refused at once (error::timed_out beyond their
        /// max_wait, error::exceeds_limit), admitted.
        std::uint64_t refused = 0;
        /// Acquires that would have waited, admitted at once.
        std::uint64_t waited = 0;
        /// How long those would have waited, summed (the predicted wait: 0 on a
        /// concurrency limit, which predicts none); saturates at its maximum.
        std::chrono::nanoseconds total_wait{0};
        /// The longest of those waits.
        std::chrono::nanoseconds longest_wait{0};
    } shadow; ///< Shadow mode's counts (shadow_options); zero elsewhere.
};

} // namespace sluice
