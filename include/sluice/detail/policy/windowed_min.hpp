// The least of the values of a window of time, at the cost of two values: the least of the
// current span and of the one before it, so over the last one to two spans. For the
// unloaded latency of a host: under a steady load the least of the last few answers is the
// loaded latency, and a window keeps what an answer alone took (as BBR keeps its least
// round trip for a window).
#pragma once

#include <algorithm>
#include <cstdint>

namespace sluice::detail {

class windowed_min {
public:
    /// `span`: nanoseconds, > 0.
    explicit windowed_min(std::uint64_t span) noexcept : span_(span) {}

    /// A value seen at `now` (nanoseconds since any epoch). A clock that goes back starts
    /// afresh.
    void add(std::int64_t now, std::int64_t v) noexcept
    {
        // Any two int64 differ by at most a uint64.
        const std::uint64_t since = now >= at_ ? static_cast<std::uint64_t>(now) - static_cast<std::uint64_t>(at_) : 2 * span_;
        if (empty_ || since >= span_) {
            prev_ = !empty_ && since < 2 * span_ ? cur_ : INT64_MAX;
            cur_ = v;
            at_ = now;
            empty_ = false;
        } else {
            cur_ = std::min(cur_, v);
        }
    }

    /// The least value of the last one to two spans; INT64_MAX before any.
    std::int64_t get() const noexcept { return std::min(cur_, prev_); }

private:
    std::uint64_t span_;
    bool empty_ = true;
    std::int64_t at_ = 0;
    std::int64_t cur_ = INT64_MAX, prev_ = INT64_MAX;
};

} // namespace sluice::detail
