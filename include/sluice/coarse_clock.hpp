// A cheap, tick-granular steady clock (CLOCK_MONOTONIC_COARSE), for limiters whose rates
// are slow enough that a few milliseconds of resolution do not matter.
#pragma once

#include <boost/asio/wait_traits.hpp>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace sluice {

/// A std::chrono clock (a Clock for every limiter) on CLOCK_MONOTONIC_COARSE: the kernel's
/// monotonic time as of its last tick, read without touching the hardware counter (the
/// cheapest read: benchmarks/RESULTS.md, "try"). Same epoch as steady_clock, never ahead
/// of it, behind it by up to resolution() (a little more when a tick is handled late, as
/// on a loaded virtual machine).
///
/// Resolution: one kernel tick, resolution() at run time (4 ms with HZ=250, 1 ms with
/// HZ=1000). Time stands still between ticks, so a limiter on it admits in bursts of up
/// to a tick's worth of permits and measures waits in whole ticks: use it where rate
/// and burst make a tick small (for example 100/s with a burst of 10 over 4 ms ticks).
///
/// Timers: an Asio timer on this clock fires once the clock has reached its expiry, that
/// is up to one resolution() late (never early). The wait_traits below let the reactor
/// sleep through the gap instead of waking repeatedly until the tick. Strict limiter
/// options (limiter_options::strict) poll the clock near the due time; on this clock that
/// polling lasts until the tick, so do not combine the two.
class coarse_clock {
public:
    /// Ticks are counted in an int64...
    using rep = std::int64_t;
    /// ...of one nanosecond each.
    using period = std::nano;
    /// A span of this clock: nanoseconds.
    using duration = std::chrono::nanoseconds;
    /// An instant, on steady_clock's time line.
    using time_point = std::chrono::time_point<coarse_clock, duration>;
    /// True: CLOCK_MONOTONIC never goes back.
    static constexpr bool is_steady = true;

    /// CLOCK_MONOTONIC_COARSE: the monotonic time as of the kernel's last tick.
    static time_point now() noexcept
    {
        timespec ts;
        clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
        return time_point{duration{std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec}};
    }

    /// The clock's resolution (clock_getres), read once.
    static duration resolution() noexcept
    {
        static const duration res = [] {
            timespec ts{};
            if (clock_getres(CLOCK_MONOTONIC_COARSE, &ts) != 0)
                return duration{std::chrono::milliseconds(10)};
            return duration{std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec};
        }();
        return res;
    }
};

} // namespace sluice

/// \cond boost_traits (Boost's, not part of sluice's reference)
/// The reactor sleeps for what is left on steady_clock (the coarse clock lags it by up to
/// a tick), and once steady_clock is past the expiry but the coarse clock is not, for a
/// quarter of a tick at a time: without this, each wake-up before the tick would find a
/// few microseconds left and sleep again for just those.
template <>
struct boost::asio::wait_traits<sluice::coarse_clock> {
    using clock = sluice::coarse_clock;

    static clock::duration to_wait_duration(const clock::duration& d) { return d; }

    static clock::duration to_wait_duration(const clock::time_point& t)
    {
        if (clock::now() >= t)
            return clock::duration::zero();
        clock::duration left = t.time_since_epoch() -
                               std::chrono::duration_cast<clock::duration>(std::chrono::steady_clock::now().time_since_epoch());
        if (left > clock::duration::zero())
            return left;
        return std::max(clock::resolution() / 4, clock::duration{std::chrono::microseconds(50)});
    }
};
/// \endcond
