// The counts behind limiter_stats: requests by outcome and their waits, kept by the wait
// engine under its lock, and the opt-in try_acquire counts, kept apart without it.
#pragma once

#include <sluice/detail/base/arith.hpp>
#include <sluice/error.hpp>
#include <sluice/limiter_stats.hpp>

#include <boost/asio/error.hpp>
#include <boost/system/error_code.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace sluice::detail {

/// Not thread-safe but for count_try and the try part of snapshot: the owner calls the
/// rest under its lock.
class request_counters {
public:
    /// A request answered with `ec` after waiting `waited` ns (0 when answered at once).
    void count(const boost::system::error_code& ec, std::int64_t waited) noexcept
    {
        if (!ec) {
            ++stats_.admitted;
            if (waited > 0) {
                ++stats_.waited;
                // Saturates rather than wraps: 2^63 ns is 292 years of waiting.
                stats_.total_wait = std::chrono::nanoseconds{sat_add(stats_.total_wait.count(), waited)};
                stats_.longest_wait = std::max(stats_.longest_wait, std::chrono::nanoseconds{waited});
            }
        } else if (ec == error::timed_out) {
            ++stats_.timed_out;
        } else if (ec == boost::asio::error::operation_aborted) {
            ++stats_.cancelled;
        } else if (ec == error::closed) {
            ++stats_.closed;
        } else {
            ++stats_.refused;
        }
    }

    /// Adds the counts of another limiter (a key's waiting queue that is let go), but its
    /// `waiting`.
    void add(const limiter_stats& o) noexcept
    {
        stats_.admitted += o.admitted;
        stats_.refused += o.refused;
        stats_.timed_out += o.timed_out;
        stats_.cancelled += o.cancelled;
        stats_.closed += o.closed;
        stats_.waited += o.waited;
        stats_.total_wait = std::chrono::nanoseconds{sat_add(stats_.total_wait.count(), o.total_wait.count())};
        stats_.longest_wait = std::max(stats_.longest_wait, o.longest_wait);
        tries_.admitted.fetch_add(o.try_admitted, std::memory_order_relaxed);
        tries_.refused.fetch_add(o.try_refused, std::memory_order_relaxed);
    }

    /// A try_acquire answered; safe from any thread.
    void count_try(bool granted) noexcept
    {
        (granted ? tries_.admitted : tries_.refused).fetch_add(1, std::memory_order_relaxed);
    }

    limiter_stats snapshot(std::size_t waiting) const noexcept
    {
        limiter_stats s = stats_;
        s.waiting = waiting;
        s.try_admitted = tries_.admitted.load(std::memory_order_relaxed);
        s.try_refused = tries_.refused.load(std::memory_order_relaxed);
        return s;
    }

private:
    limiter_stats stats_;

    // On a line of their own: try_acquire from every core writes here, nothing else does.
    struct alignas(64) try_counts {
        std::atomic<std::uint64_t> admitted{0};
        std::atomic<std::uint64_t> refused{0};
    } tries_;
};

} // namespace sluice::detail
