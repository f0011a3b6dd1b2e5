// Counters of an asynchronous limiter: what its callers were answered, and how long they
// waited.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace sluice {

/// Counters of one limiter since construction (stats() on every asynchronous limiter).
///
/// Requests are async_acquire, acquire and acquire_blocking calls; each is counted once,
/// when it is answered, under exactly one of admitted, refused, timed_out, cancelled and
/// closed. A snapshot is taken under the limiter's lock, so those five, waiting and the
/// waits agree with each other. try_acquire is counted apart, and only when
/// limiter_options::count_try_acquire is set: its counts are read without the lock.
struct limiter_stats {
    /// Requests granted, at once or after waiting.
    std::uint64_t admitted = 0;

    /// Requests refused for a reason other than time: error::queue_full,
    /// error::exceeds_limit, error::invalid_count.
    std::uint64_t refused = 0;

    /// Requests refused because the wait would pass their max_wait (error::
    /// timed_out, at once and with nothing consumed), or whose max_wait passed
    /// while they waited (error::timed_out).
    std::uint64_t timed_out = 0;

    /// Requests cancelled while they waited (operation_aborted).
    std::uint64_t cancelled = 0;

    /// Requests answered with error::closed: pending at close() or made after it.
    std::uint64_t closed = 0;

    /// Requests waiting now, asynchronous and blocking.
    std::size_t waiting = 0;

    /// Of the admitted requests, those that had to wait.
    std::uint64_t waited = 0;

    /// The time the admitted requests spent waiting, summed (a request granted at once
    /// counts 0), as measured on the limiter's clock; saturates at its maximum.
    std::chrono::nanoseconds total_wait{0};
    /// The longest time one admitted request waited.
    std::chrono::nanoseconds max_wait{0};

    /// try_acquire calls granted (with limiter_options::count_try_acquire).
    std::uint64_t try_admitted = 0;
    /// try_acquire calls refused (with limiter_options::count_try_acquire).
    std::uint64_t try_refused = 0;
};

} // namespace sluice
