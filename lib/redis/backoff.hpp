// The waits between reconnection attempts: sans-io, so that the schedule is tested
// without a timer.
#pragma once

#include <algorithm>
#include <chrono>

namespace sluice::redis::detail {

/// reconnect_min, doubling up to reconnect_max (reconnect_min if that is larger); back to
/// reconnect_min once a connection is up again.
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

    /// A connection is up: the next failure waits reconnect_min again.
    void reset() noexcept { next_ = min_; }

private:
    std::chrono::milliseconds min_, max_, next_;
};

} // namespace sluice::redis::detail
