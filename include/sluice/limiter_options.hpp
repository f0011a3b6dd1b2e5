// Options every asynchronous limiter takes.
#pragma once

#include <sluice/shadow.hpp>

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

    /// Default mode: the least time between two wake-ups of the limiter's timer, so that the
    /// timer costs a bounded number of system calls per second instead of one per waiter;
    /// each wake-up releases every waiter that has come due since the last one. A release is
    /// never early. Besides the reactor's own lateness it is late by at most `coalesce` on
    /// the window limiters and the concurrency limits (their deadlines too), and on a token
    /// or leaky bucket for a lone waiter and for the last waiter of its queue; a bucket with
    /// several waiters queued may release up to coalesce_max late (see there). 0 wakes for
    /// every slot. Ignored in strict mode.
    std::chrono::nanoseconds coalesce = std::chrono::microseconds(200);

    /// How far the coalescing may grow while several wait on a limiter whose waiters hold
    /// committed slots (token and leaky buckets): with q waiters queued, the least time
    /// between wake-ups is coalesce x q, at most coalesce_max, so a release may come up to
    /// coalesce_max late (never early). A slot committed when its waiter queued does not
    /// move when a wake-up comes late, so a deep queue loses nothing of its rate to a longer
    /// window and pays for far fewer wake-ups; a lone waiter (a pacing loop, which commits
    /// its next slot only once the last one is released) keeps `coalesce`, and so its
    /// spacing. The grown window ends no later than the last queued slot, so a queue's last
    /// release is at most `coalesce` late. At or below `coalesce`, the window stays
    /// `coalesce`. Callers that ask again as soon as they are granted (q of them at rate r
    /// reserve q / r ahead) lose rate when coalesce_max is longer than q / r.
    /// Ignored by the window limiters (their waiters commit nothing ahead) and in strict
    /// mode. Negative values of coalesce, coalesce_max and strict_threshold throw
    /// system_error(error::invalid_option) when the limiter is built.
    std::chrono::nanoseconds coalesce_max = std::chrono::milliseconds(1);

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

    /// Shadow mode: every decision taken and counted, nobody refused or made to wait (see
    /// shadow_options for the exact definition). Not with `strict`.
    shadow_options shadow{};
};

} // namespace sluice
