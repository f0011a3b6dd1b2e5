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
    using rep = std::int64_t;
    using period = std::nano;
    using duration = std::chrono::nanoseconds;
    using time_point = std::chrono::time_point<basic_manual_clock, duration>;
    static constexpr bool is_steady = false;

    static time_point now() noexcept { return time_point{duration{now_.load(std::memory_order_acquire)}}; }

    static void advance(duration d) noexcept { now_.fetch_add(d.count(), std::memory_order_acq_rel); }

    static void set(time_point t) noexcept { now_.store(t.time_since_epoch().count(), std::memory_order_release); }

    static void set(duration since_epoch) noexcept { set(time_point{since_epoch}); }

private:
    static inline std::atomic<std::int64_t> now_{0};
};

/// The default manual clock.
using manual_clock = basic_manual_clock<void>;

namespace detail {

/// Nanoseconds since the clock's epoch: the time unit of every policy.
template <class Clock>
std::int64_t now_ns() noexcept
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
