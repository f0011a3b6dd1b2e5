// The waits between reconnection attempts (and between the tries of a cluster request
// answered TRYAGAIN or CLUSTERDOWN): sans-io, so that the schedule is tested without a
// timer.
#pragma once

#include <algorithm>
#include <chrono>

namespace sluice::redis::detail {

/// `min`, doubling up to `max` (`min` if that is larger); back to `min` on reset() (for
/// the connection: once a link is up again).
class backoff {
public:
    backoff(std::chrono::milliseconds min, std::chrono::milliseconds max) noexcept
        : min_(min), max_(std::max(max, min)), next_(min)
    {
    }

    /// The wait before the next attempt; the one after that is twice as long, capped.
    std::chrono::milliseconds next() noexcept
    {
        auto now = next_;
        next_ = std::min(next_ * 2, max_);
        return now;
    }

    /// The next wait is `min` again.
    void reset() noexcept { next_ = min_; }

private:
    std::chrono::milliseconds min_, max_, next_;
};

} // namespace sluice::redis::detail
