// Options every asynchronous limiter takes.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace sluice {

/// A max_wait that never expires: the default of every limiter's acquire.
inline constexpr std::chrono::nanoseconds wait_forever = std::chrono::nanoseconds::max();

/// Options of an asynchronous limiter.
struct limiter_options {
    /// Most requests waiting at once; one more completes at once with error::queue_full.
    std::size_t max_queued = std::numeric_limits<std::size_t>::max();

    /// Most permits waiting at once (summed over waiting requests); error::queue_full beyond.
    std::uint64_t max_queued_permits = std::numeric_limits<std::uint64_t>::max();

    /// Default mode: the least time between two wake-ups of the limiter's timer. At high
    /// rates each wake-up releases every waiter that has come due since the last one, so a
    /// release may be up to this much late (never early), and the timer costs a bounded
    /// number of system calls per second instead of one per waiter. 0 wakes for every slot.
    /// Ignored in strict mode.
    std::chrono::nanoseconds coalesce = std::chrono::microseconds(200);

    /// Strict wait: timers wake late by the reactor's own latency, so waits end late. In
    /// strict mode the last `strict_threshold` of a wait is spent yielding to the executor
    /// (re-posting) and the last 30 us watching the clock, until the exact time, at the price
    /// of a busy executor during that stretch. Off by default.
    bool strict = false;

    /// How much of the end of each wait strict mode spends yielding instead of sleeping.
    std::chrono::nanoseconds strict_threshold = std::chrono::milliseconds(2);

    /// Counts try_acquire calls in stats() (try_admitted, try_refused). Off by default:
    /// try_acquire is lock-free, and a shared counter would make every call write a cache
    /// line that all cores contend for (one atomic increment, far costlier under
    /// contention). Requests that may wait are always counted.
    bool count_try_acquire = false;
};

} // namespace sluice
