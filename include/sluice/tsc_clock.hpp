// A fast steady clock: the CPU's time-stamp counter scaled to nanoseconds and kept on
// steady_clock's time line, for limiters whose checks are dominated by reading the clock.
#pragma once

#include <sluice/detail/base/tsc_timeline.hpp>

#include <chrono>
#include <cstdint>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <x86intrin.h>
#define SLUICE_DETAIL_TSC 1
#endif

namespace sluice {

/// What a tsc_clock reads.
enum class clock_source {
    tsc,      ///< the time-stamp counter, scaled and resynchronised to steady_clock
    steady,   ///< std::chrono::steady_clock itself (the fallback)
};

namespace detail {

/// The process-wide timeline (lib/tsc_clock.cpp), decided at load. Constant-initialised.
extern tsc_timeline tsc_state;

/// Everything but the fast path (tsc_timeline::now_slow on the machine's counter and
/// steady_clock). Returns nanoseconds on steady_clock's time line.
std::int64_t tsc_now_slow() noexcept;

} // namespace detail

/// A std::chrono clock that reads the x86 time-stamp counter (rdtsc) and scales it to
/// nanoseconds, cheaper to read than steady_clock::now() (benchmarks/RESULTS.md, "try",
/// has both). Its time points are on steady_clock's time line (same epoch), within the
/// bound below. sluice::default_clock, the Clock of every limiter unless told otherwise,
/// is this clock.
///
/// Used only where the counter is a clock: the CPU reports an invariant TSC (cpuid
/// 0x80000007, EDX bit 8) and the kernel itself keeps time with it (its clocksource is
/// `tsc`, which Linux selects only after checking that the counters of all cores agree).
/// Otherwise, on other architectures, or when the environment variable SLUICE_TSC_CLOCK
/// is off (or 0, steady) when the library is loaded, now() is steady_clock::now()
/// (source() says which). This is decided once, when the library is loaded (a cpuid, one
/// read of /sys/devices/system/clocksource/clocksource0/current_clocksource).
///
/// Calibration, without blocking anyone: the first sample (counter and steady_clock) is
/// taken at load; until the counter's rate has been measured over at least 1 ms,
/// now() returns steady_clock's reading; the first call after that computes the rate
/// (once) and switches to the counter, starting 2 us ahead of steady_clock
/// (more than the calibration's error, so that no thread sees time go back at the switch).
/// Time is then a chain of straight lines of 8 ms each: in the last 100 us of a line, the
/// first reader to get a lock compares the two clocks again and sets the slope of the next
/// line so that the error left is worked off by its end (slewing by at most 1% from the
/// measured rate; behind steady_clock by more than 20 us, it steps forward instead). Each
/// line starts exactly where the previous one ends; the others read on meanwhile.
///
/// The counter is checked against steady_clock at every line: a counter found behind its
/// line's start (a TSC reset at resume from suspend, a snapshot restored, a migration to
/// a host whose counter is behind) resynchronises at once, and one that went back, leapt
/// ahead or changed its rate (by more than 0.5%) between two lines restarts the lines
/// from steady_clock, never below the largest value already served: time never stops and
/// never goes back; it may then run ahead of steady_clock by up to one line (8 ms), worked
/// off at up to 10% slow. Two such changes in a row measure the counter's new rate. The
/// kernel's clocksource is read again at most once a second (by the reader that computes
/// a line) and after every such change: when the kernel no longer keeps time with the
/// counter (or after more than 8 changes a minute), the clock falls back to steady_clock
/// for good, plus the constant that keeps it monotonic (at most one line).
///
/// Guarantees:
/// - Drift: |tsc_clock - steady_clock| <= 50 us (max_drift), plus the jitter of reading
///   steady_clock itself, while the counter runs steadily and the kernel keeps its
///   clocksource on tsc (tested on the machine, and on simulated counters over hours).
/// - Monotonic in every thread: on the counter, the value is one non-decreasing function
///   of the counter for all threads (across lines, restarts and the fall-back); a counter
///   that goes back by less than a line without leaving it can show as a step back of that
///   size until the line ends (the fast path checks only the line's bounds).
/// - Across threads, as monotonic as rdtsc itself: the instruction is not ordered with
///   the loads before it, so a read that follows another thread's read through a
///   synchronisation may see the counter up to a cache miss earlier, plus whatever skew
///   the counters of two cores have (none on bare metal with an invariant TSC; microseconds
///   on some virtual machines). Ordering it (lfence) would cost as much as
///   steady_clock; a limiter does not need it: its policies already take readings that
///   arrive out of order. No check of the cores' skew is made at calibration.
/// - now() is lock-free except while a line is overdue (nobody read the clock in the last
///   100 us of a line, e.g. after an idle spell) or the counter was found behind: then one
///   reader computes the next line and readers arriving meanwhile wait for it (the time
///   of that computation, and once a second of a read of the clocksource file).
///
/// Timers: a limiter on tsc_clock arms an Asio timer on it; the reactor sleeps for the
/// difference to tsc_clock::now() and checks again on waking, so timers behave as on
/// steady_clock.
class tsc_clock {
public:
    /// Ticks are counted in an int64...
    using rep = std::int64_t;
    /// ...of one nanosecond each.
    using period = std::nano;
    /// A span of this clock: nanoseconds.
    using duration = std::chrono::nanoseconds;
    /// An instant, on steady_clock's time line.
    using time_point = std::chrono::time_point<tsc_clock, duration>;
    /// True: monotonic in every thread (see the class comment for across threads).
    static constexpr bool is_steady = true;

    /// The most a tsc_clock reading differs from steady_clock (see above).
    static constexpr duration max_drift{50'000};

    /// The counter scaled to nanoseconds (steady_clock::now() on the fallback, and while
    /// the counter is being calibrated). Never blocks for the calibration.
    [[gnu::always_inline]] static time_point now() noexcept
    {
#ifdef SLUICE_DETAIL_TSC
        auto& s = detail::tsc_state;
        const int mode = s.mode(std::memory_order_acquire);
        if (mode == detail::tsc_timeline::on_counter) [[likely]] {
            std::int64_t ns;
            if (s.read_line([]() noexcept { return __rdtsc(); }, ns)) [[likely]]
                return time_point{duration{ns}};
        } else if (mode == detail::tsc_timeline::on_reference) {
            return time_point{duration{s.from_reference(std::chrono::duration_cast<duration>(
                                                             std::chrono::steady_clock::now().time_since_epoch())
                                                             .count())}};
        }
        return time_point{duration{detail::tsc_now_slow()}};
#else
        return time_point{std::chrono::duration_cast<duration>(std::chrono::steady_clock::now().time_since_epoch())};
#endif
    }

    /// Which clock now() reads: tsc from the decision on (steady_clock's reading for about
    /// 1 ms while the counter is calibrated), steady where the counter is not used or
    /// stopped being a clock.
    static clock_source source() noexcept
    {
#ifdef SLUICE_DETAIL_TSC
        if (detail::tsc_state.mode() == detail::tsc_timeline::undecided)
            (void)now();
        const int mode = detail::tsc_state.mode();
        return mode == detail::tsc_timeline::on_counter || mode == detail::tsc_timeline::calibrating
                   ? clock_source::tsc
                   : clock_source::steady;
#else
        return clock_source::steady;
#endif
    }

    /// steady_clock's time point for `t` (same epoch; within max_drift).
    static std::chrono::steady_clock::time_point to_steady(time_point t) noexcept
    {
        return std::chrono::steady_clock::time_point{
            std::chrono::duration_cast<std::chrono::steady_clock::duration>(t.time_since_epoch())};
    }
};

} // namespace sluice
