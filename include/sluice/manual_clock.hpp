// A clock that moves only when told to: for deterministic tests of anything built on
// sluice. Usable wherever a limiter takes a Clock parameter.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace sluice {

/// A Clock whose now() is set by hand. Each Tag is an independent clock, so unrelated
/// tests can drive their own time. Thread-safe. Its epoch is arbitrary and it starts
/// at 0; it may be set backwards, so is_steady is false.
template <class Tag>
class basic_manual_clock {
public:
    /// Ticks are counted in an int64...
    using rep = std::int64_t;
    /// ...of one nanosecond each.
    using period = std::nano;
    /// A span of this clock: nanoseconds.
    using duration = std::chrono::nanoseconds;
    /// An instant of this clock (its own type: no mixing with another Tag's).
    using time_point = std::chrono::time_point<basic_manual_clock, duration>;
    /// False: set() may move it backwards.
    static constexpr bool is_steady = false;

    /// The time last set or advanced to (0 at start).
    static time_point now() noexcept { return time_point{duration{now_.load(std::memory_order_acquire)}}; }

    /// Moves the clock by `d` (backwards when negative). Timers waiting on it notice at the
    /// next poll of their io_context (see <sluice/detail/base/wait_traits.hpp>).
    static void advance(duration d) noexcept { now_.fetch_add(d.count(), std::memory_order_acq_rel); }

    /// Sets the clock to `t`, forwards or backwards.
    static void set(time_point t) noexcept { now_.store(t.time_since_epoch().count(), std::memory_order_release); }

    /// Sets the clock to `since_epoch` after its epoch.
    static void set(duration since_epoch) noexcept { set(time_point{since_epoch}); }

private:
    static inline std::atomic<std::int64_t> now_{0};
};

/// The default manual clock.
using manual_clock = basic_manual_clock<void>;

namespace detail {

/// Nanoseconds since the clock's epoch: the time unit of every policy.
template <class Clock>
[[gnu::always_inline]] inline std::int64_t now_ns() noexcept
{
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

/// The clock's time_point at `ns` nanoseconds since its epoch (for timer expiries).
template <class Clock>
typename Clock::time_point to_time_point(std::int64_t ns) noexcept
{
    return typename Clock::time_point{
        std::chrono::duration_cast<typename Clock::duration>(std::chrono::nanoseconds{ns})};
}

} // namespace detail
} // namespace sluice
