// tsc_clock's calibration: one process-wide state, decided on first use, resynchronised
// against steady_clock every period (see include/sluice/tsc_clock.hpp for the guarantees).
#include <sluice/tsc_clock.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>

#ifdef SLUICE_DETAIL_TSC
#include <cpuid.h>
#endif

namespace sluice::detail {

constinit tsc_shared tsc_state;

namespace {

std::int64_t steady_ns() noexcept
{
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch()).count();
}

} // namespace

#ifdef SLUICE_DETAIL_TSC

namespace {

// A line serves period_ns; the next one is computed in the last lead_ns of it.
constexpr double period_ns = 8e6;
constexpr double lead_ns = 100e3;
// A line's slope differs from the measured rate by at most this fraction (slewing).
constexpr double max_slew = 0.01;
// Behind steady_clock by more than this: step forward instead of slewing.
constexpr double step_ns = 20e3;
// The first calibration window.
constexpr std::int64_t calibration_ns = 1'000'000;

// What only the resynchronising thread touches, under `lock`.
struct calibration {
    std::uint64_t base_tsc = 0;   // first sample: the rate is measured from it
    std::int64_t base_ns = 0;
    double rate = 0;              // ns per tick
    std::uint64_t period = 0;     // period_ns in ticks
    std::uint64_t lead = 0;       // lead_ns in ticks
};

constinit std::mutex lock;
constinit calibration cal;

struct sample {
    std::uint64_t tsc;
    std::int64_t ns;
};

// steady_clock read between two counter reads; of five tries the tightest bracket, so a
// preemption in one of them does not skew the pair.
sample take_sample() noexcept
{
    sample best{};
    std::uint64_t best_gap = ~std::uint64_t{0};
    for (int i = 0; i < 5; ++i) {
        std::uint64_t t1 = __rdtsc();
        std::int64_t ns = steady_ns();
        std::uint64_t t2 = __rdtsc();
        if (t2 - t1 < best_gap) {
            best_gap = t2 - t1;
            best = {t1 + (t2 - t1) / 2, ns};
        }
    }
    return best;
}

std::uint64_t to_mult(double ns_per_tick) noexcept
{
    return static_cast<std::uint64_t>(std::llround(ns_per_tick * 4294967296.0));
}

// Why the counter cannot serve as a clock here, or null when it can.
const char* tsc_unusable() noexcept
{
    if (const char* env = std::getenv("SLUICE_TSC_CLOCK")) {
        if (!std::strcmp(env, "off") || !std::strcmp(env, "0") || !std::strcmp(env, "steady"))
            return "disabled by SLUICE_TSC_CLOCK";
    }
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u)
        return "no cpuid leaf 0x80000007";
    __get_cpuid(0x80000007u, &a, &b, &c, &d);
    if (!(d & (1u << 8)))
        return "TSC not invariant";
    // The kernel's own choice vouches for the counters agreeing across cores.
    try {
        std::ifstream f("/sys/devices/system/clocksource/clocksource0/current_clocksource");
        std::string source;
        if (!(f >> source) || source != "tsc")
            return "kernel clocksource is not tsc";
    } catch (...) {
        return "kernel clocksource unreadable";
    }
    return nullptr;
}

void publish(std::uint64_t gen, std::uint64_t tsc0, std::uint64_t span, std::int64_t ns0, std::uint64_t mult,
             std::uint64_t prev_tsc0, std::int64_t prev_ns0, std::uint64_t prev_mult) noexcept
{
    auto& l = tsc_state.lines[gen & 3];
    // A reader that loads (with acquire) any of the words stored (with release) below also
    // sees gen 0 or later when it checks gen, and retries: a sequence lock without fences,
    // which ThreadSanitizer models exactly.
    l.gen.store(0, std::memory_order_relaxed);
    l.tsc0.store(tsc0, std::memory_order_release);
    l.span.store(span, std::memory_order_release);
    l.ns0.store(ns0, std::memory_order_release);
    l.mult.store(mult, std::memory_order_release);
    l.prev_tsc0.store(prev_tsc0, std::memory_order_release);
    l.prev_ns0.store(prev_ns0, std::memory_order_release);
    l.prev_mult.store(prev_mult, std::memory_order_release);
    l.gen.store(gen, std::memory_order_release);
    tsc_state.current.store(gen, std::memory_order_release);
}

// Under `lock`, mode still 0.
void calibrate() noexcept
{
    if (tsc_unusable()) {
        tsc_state.mode.store(tsc_mode_steady, std::memory_order_release);
        return;
    }
    sample a = take_sample();
    sample b = a;
    while (b.ns - a.ns < calibration_ns)
        b = take_sample();
    double rate = static_cast<double>(b.ns - a.ns) / static_cast<double>(b.tsc - a.tsc);
    // 10 MHz .. 100 GHz, or the counter did not move: not a clock to trust.
    if (!(b.tsc > a.tsc) || !(rate > 0.01 && rate < 100)) {
        tsc_state.mode.store(tsc_mode_steady, std::memory_order_release);
        return;
    }
    cal = {a.tsc, a.ns, rate, static_cast<std::uint64_t>(period_ns / rate), static_cast<std::uint64_t>(lead_ns / rate)};
    tsc_state.lead.store(cal.lead, std::memory_order_relaxed);
    std::uint64_t mult = to_mult(rate);
    publish(1, b.tsc, cal.period - cal.lead, b.ns, mult, b.tsc, b.ns, mult);
    tsc_state.mode.store(tsc_mode_tsc, std::memory_order_release);
}

// Under `lock`: replaces line `gen` (starting at tsc0, valid up to tsc0 + hard) by the
// next one, which starts where it ends, at the same value or later.
void resync(std::uint64_t gen, std::uint64_t tsc0, std::uint64_t hard, std::int64_t ns0, std::uint64_t mult) noexcept
{
    const std::uint64_t sw = tsc0 + hard;
    const std::int64_t end = ns0 + tsc_scale(hard, mult);
    const sample s = take_sample();
    if (s.tsc > cal.base_tsc + cal.period)
        cal.rate = static_cast<double>(s.ns - cal.base_ns) / static_cast<double>(s.tsc - cal.base_tsc);
    const double rate = cal.rate;
    // steady_clock at the switch, extrapolated from the sample (the switch may be past:
    // nobody read the clock for a while).
    const double steady_at_sw =
        static_cast<double>(s.ns) + static_cast<double>(static_cast<std::int64_t>(sw - s.tsc)) * rate;
    double start = static_cast<double>(end);
    std::int64_t start_ns = end;
    if (start < steady_at_sw - step_ns) {
        start = std::floor(steady_at_sw);
        start_ns = static_cast<std::int64_t>(start);
    }
    // Aim at steady_clock one period after the switch (or after now, if that is later).
    const std::uint64_t from = static_cast<std::int64_t>(s.tsc - sw) > 0 ? s.tsc : sw;
    const std::uint64_t target = from + cal.period;
    const double target_ns = static_cast<double>(s.ns) + static_cast<double>(target - s.tsc) * rate;
    double slope = (target_ns - start) / static_cast<double>(target - sw);
    slope = std::clamp(slope, rate * (1 - max_slew), rate * (1 + max_slew));
    publish(gen + 1, sw, target - sw - cal.lead, start_ns, to_mult(slope), tsc0, ns0, mult);
}

} // namespace

std::int64_t tsc_now_slow() noexcept
{
    int mode = tsc_state.mode.load(std::memory_order_acquire);
    if (mode == 0) {
        {
            std::lock_guard g(lock);
            if (tsc_state.mode.load(std::memory_order_acquire) == 0)
                calibrate();
        }
        mode = tsc_state.mode.load(std::memory_order_acquire);
    }
    if (mode != tsc_mode_tsc)
        return steady_ns();
    const std::uint64_t lead = tsc_state.lead.load(std::memory_order_relaxed);
    for (;;) {
        std::uint64_t c = tsc_state.current.load(std::memory_order_acquire);
        auto& l = tsc_state.lines[c & 3];
        std::uint64_t tsc0 = l.tsc0.load(std::memory_order_acquire);
        std::uint64_t span = l.span.load(std::memory_order_acquire);
        std::int64_t ns0 = l.ns0.load(std::memory_order_acquire);
        std::uint64_t mult = l.mult.load(std::memory_order_acquire);
        std::uint64_t prev_tsc0 = l.prev_tsc0.load(std::memory_order_acquire);
        std::int64_t prev_ns0 = l.prev_ns0.load(std::memory_order_acquire);
        std::uint64_t prev_mult = l.prev_mult.load(std::memory_order_acquire);
        std::uint64_t t = __rdtsc();
        if (l.gen.load(std::memory_order_relaxed) != c)
            continue;   // rewritten under us (we were held up for three periods)
        std::uint64_t d = t - tsc0;
        if (d < span)
            return ns0 + tsc_scale(d, mult);
        if (static_cast<std::int64_t>(d) < 0) {
            // Before this line's start: the previous line, exactly as its own readers
            // compute it (a counter behind its start means unsynchronised cores; the
            // kernel's tsc clocksource rules that out).
            std::uint64_t back = t - prev_tsc0;
            return static_cast<std::int64_t>(back) < 0 ? prev_ns0 : prev_ns0 + tsc_scale(back, prev_mult);
        }
        if (d < span + lead) {
            // The next line is due: whoever gets the lock computes it; the others go on
            // with this one, still valid.
            std::unique_lock g(lock, std::try_to_lock);
            if (!g.owns_lock())
                return ns0 + tsc_scale(d, mult);
            if (tsc_state.current.load(std::memory_order_relaxed) == c)
                resync(c, tsc0, span + lead, ns0, mult);
            continue;
        }
        // Past the end: nobody read the clock in the last lead; wait for the next line.
        std::lock_guard g(lock);
        if (tsc_state.current.load(std::memory_order_relaxed) == c)
            resync(c, tsc0, span + lead, ns0, mult);
    }
}

#else

std::int64_t tsc_now_slow() noexcept
{
    tsc_state.mode.store(tsc_mode_steady, std::memory_order_relaxed);
    return steady_ns();
}

#endif

} // namespace sluice::detail
