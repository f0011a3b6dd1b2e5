// A fast steady clock: the CPU's time-stamp counter scaled to nanoseconds and kept on
// steady_clock's time line, for limiters whose checks are dominated by reading the clock.
#pragma once

#include <atomic>
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

// One straight line from counter ticks to nanoseconds. Written once per resynchronisation
// into a ring of four, under the sequence number `gen` (readers check that the slot was
// not rewritten under them). Every field is atomic so that the readers need no lock.
struct alignas(64) tsc_line {
    std::atomic<std::uint64_t> gen{0};        // generation this slot holds (0: none)
    std::atomic<std::uint64_t> tsc0{0};       // counter value where the line starts
    std::atomic<std::uint64_t> span{0};       // the fast path serves [tsc0, tsc0 + span)
    std::atomic<std::int64_t> ns0{0};         // nanoseconds at tsc0
    std::atomic<std::uint64_t> mult{0};       // ns per tick, 32.32 fixed point
    std::atomic<std::uint64_t> prev_tsc0{0};  // the previous line, which serves the
    std::atomic<std::int64_t> prev_ns0{0};    // counter values below tsc0 (a reader that
    std::atomic<std::uint64_t> prev_mult{0};  // sees this line before tsc0 is reached)
};

struct tsc_shared {
    std::atomic<int> mode{0};                 // 0 not decided yet, 1 tsc, 2 steady
    std::atomic<std::uint64_t> current{0};    // generation of the line in use
    std::atomic<std::uint64_t> lead{0};       // a line is valid up to tsc0 + span + lead
    tsc_line lines[4];
};

/// The process-wide calibration (lib/tsc_clock.cpp). Constant-initialised.
extern tsc_shared tsc_state;

/// Everything but the fast path: first use (calibration), the fallback, the switch from
/// one line to the next and resynchronisation. Returns nanoseconds on steady_clock's
/// time line.
std::int64_t tsc_now_slow() noexcept;

inline constexpr int tsc_mode_tsc = 1;
inline constexpr int tsc_mode_steady = 2;

inline std::int64_t tsc_scale(std::uint64_t ticks, std::uint64_t mult) noexcept
{
    __extension__ typedef unsigned __int128 u128;
    return static_cast<std::int64_t>((static_cast<u128>(ticks) * mult) >> 32);
}

} // namespace detail

/// A std::chrono clock (a Clock for every limiter) that reads the x86 time-stamp counter
/// (rdtsc) and scales it to nanoseconds: cheaper than steady_clock::now() (see
/// benchmarks/RESULTS.md, "try").
/// Its time points are on steady_clock's time line (same epoch), within the bound below.
///
/// Used only where the counter is a clock: the CPU reports an invariant TSC (cpuid
/// 0x80000007, EDX bit 8) and the kernel itself keeps time with it (its clocksource is
/// `tsc`, which Linux selects only after checking that the counters of all cores agree).
/// Otherwise, on other architectures, or when the environment variable
/// SLUICE_TSC_CLOCK=off (or 0, steady) is set at first use, it falls back to
/// steady_clock::now() (source() says which).
///
/// Calibration: the first call measures the counter's rate against steady_clock over
/// about 1 ms (that first call blocks for it; call now() or source() at start-up to pay it
/// early). Time is then a chain of straight lines of 8 ms each: in the last 100 us of a
/// line, the first reader to get a lock compares the two clocks again and sets the slope
/// of the next line so that the error left is worked off by its end (slewing by at most
/// 1% from the measured rate; a tsc_clock behind steady_clock by more than 20 us steps
/// forward instead). Each line starts exactly where the previous one ends; the others
/// read on meanwhile.
///
/// Guarantees:
/// - Drift: |tsc_clock - steady_clock| <= 50 us (max_drift), plus the jitter of reading
///   steady_clock itself, while the kernel keeps its clocksource on tsc (tested).
/// - Monotonic in every thread, across resynchronisations: the value is one
///   non-decreasing function of the counter for all threads.
/// - Across threads, as monotonic as rdtsc itself: the instruction is not ordered with
///   the loads before it, so a read that follows another thread's read through a
///   synchronisation may see the counter up to a cache miss earlier, plus whatever skew
///   the counters of two cores have (none on bare metal with an invariant TSC; microseconds
///   on some virtual machines). Ordering it (lfence) would cost as much as
///   steady_clock; a limiter does not need it: its policies already take readings that
///   arrive out of order. No check of the cores' skew is made at calibration.
/// - now() is lock-free except while a resynchronisation is overdue (nobody read the
///   clock in the last 100 us of a line, e.g. after an idle spell): then one reader
///   resynchronises and readers arriving meanwhile wait for it (one comparison of the two
///   clocks).
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

    /// The counter scaled to nanoseconds (or steady_clock::now() on the fallback). The first
    /// call calibrates, for about 1 ms.
    static time_point now() noexcept
    {
#ifdef SLUICE_DETAIL_TSC
        auto& s = detail::tsc_state;
        int mode = s.mode.load(std::memory_order_relaxed);
        if (mode == detail::tsc_mode_tsc) [[likely]] {
            std::uint64_t c = s.current.load(std::memory_order_acquire);
            auto& l = s.lines[c & 3];
            std::uint64_t tsc0 = l.tsc0.load(std::memory_order_acquire);
            std::uint64_t span = l.span.load(std::memory_order_acquire);
            std::int64_t ns0 = l.ns0.load(std::memory_order_acquire);
            std::uint64_t mult = l.mult.load(std::memory_order_acquire);
            std::uint64_t d = __rdtsc() - tsc0;
            if (d < span && l.gen.load(std::memory_order_relaxed) == c) [[likely]]
                return time_point{duration{ns0 + detail::tsc_scale(d, mult)}};
        } else if (mode == detail::tsc_mode_steady) {
            return time_point{std::chrono::duration_cast<duration>(
                std::chrono::steady_clock::now().time_since_epoch())};
        }
        return time_point{duration{detail::tsc_now_slow()}};
#else
        return time_point{std::chrono::duration_cast<duration>(std::chrono::steady_clock::now().time_since_epoch())};
#endif
    }

    /// Which clock now() reads (decides, and calibrates, on first use).
    static clock_source source() noexcept
    {
#ifdef SLUICE_DETAIL_TSC
        if (detail::tsc_state.mode.load(std::memory_order_acquire) == 0)
            (void)now();
        return detail::tsc_state.mode.load(std::memory_order_acquire) == detail::tsc_mode_tsc ? clock_source::tsc
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
