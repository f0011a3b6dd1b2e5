// tsc_clock's conversion (detail::tsc_timeline) on simulated counters and references: time
// is driven by hand, so jumps, frequency changes, clocksource changes and hours of drift
// are tested in milliseconds, with no real clock. Every test checks, at every reading,
// that the clock never goes back; most also bound its distance to the reference.
#include <sluice/detail/base/tsc_timeline.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>

namespace {

using sluice::detail::tsc_sample;
using sluice::detail::tsc_timeline;

__extension__ typedef __int128 i128;

constexpr std::int64_t us = 1'000;
constexpr std::int64_t ms = 1'000'000;
constexpr std::int64_t sec = 1'000'000'000;
constexpr std::int64_t max_drift = 50 * us;   // tsc_clock::max_drift
constexpr std::int64_t i64_max = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t i64_min = std::numeric_limits<std::int64_t>::min();

// A machine in simulation: true time `t` (ns) moves only when the test says; the counter
// and the reference are straight lines of it, changed by hand (jumps, rates).
struct sim {
    std::int64_t t = 0;
    // counter = c_at + (t - c_t0) * c_num / c_den  (ticks; 2.5 GHz by default)
    std::uint64_t c_at = 1'000'000'000'000;
    std::int64_t c_t0 = 0;
    std::int64_t c_num = 5, c_den = 2;
    // reference = r_at + (t - r_t0) * (1 + r_ppb / 10^9)
    std::int64_t r_at = 50 * sec;
    std::int64_t r_t0 = 0;
    std::int64_t r_ppb = 0;
    bool allowed = true;
    bool kernel = true;
    int kernel_checks = 0;
    int samples = 0;
    std::mt19937_64 rng{20260623};

    std::uint64_t counter_at(std::int64_t when) const noexcept
    {
        return c_at + static_cast<std::uint64_t>(static_cast<i128>(when - c_t0) * c_num / c_den);
    }
    std::int64_t reference_at(std::int64_t when) const noexcept
    {
        const i128 d = static_cast<i128>(when) - r_t0;
        const i128 v = static_cast<i128>(r_at) + d + d * r_ppb / 1'000'000'000;
        return v > i64_max ? i64_max : static_cast<std::int64_t>(v);
    }

    std::uint64_t counter() noexcept { return counter_at(t); }
    std::int64_t reference() noexcept { return reference_at(t); }
    tsc_sample sample() noexcept
    {
        ++samples;
        // Two counter reads w ns apart around the reference read (1 in 50: preempted).
        const std::int64_t w = rng() % 50 == 0 ? 5 * us : 10 + static_cast<std::int64_t>(rng() % 50);
        const std::int64_t u = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(w + 1));
        const std::uint64_t a = counter_at(t - w), b = counter_at(t);
        return {a + (b - a) / 2, reference_at(t - w + u), b - a};
    }
    bool counter_allowed() noexcept { return allowed; }
    bool kernel_uses_counter() noexcept
    {
        ++kernel_checks;
        return kernel;
    }

    // Changes of the counter, from now on.
    void counter_jump(std::int64_t ticks)
    {
        c_at = counter() + static_cast<std::uint64_t>(ticks);
        c_t0 = t;
    }
    void counter_set(std::uint64_t value)
    {
        c_at = value;
        c_t0 = t;
    }
    void counter_rate(std::int64_t num, std::int64_t den)
    {
        c_at = counter();
        c_t0 = t;
        c_num = num;
        c_den = den;
    }
    void reference_ppb(std::int64_t ppb)
    {
        r_at = reference();
        r_t0 = t;
        r_ppb = ppb;
    }
};

static_assert(sluice::detail::tsc_source<sim>);

// Reads the timeline at every `step` of true time for `span`, checking at each reading that
// it did not go back and calling check(value, reference).
struct driver {
    sim& s;
    tsc_timeline& tl;
    std::int64_t last = i64_min;
    std::int64_t reads = 0;
    std::int64_t backwards = 0;
    std::int64_t worst_ahead = 0, worst_behind = 0;   // of value - reference

    std::int64_t read()
    {
        const std::int64_t v = tl.now(s);
        if (v < last) ++backwards;
        last = std::max(last, v);
        const std::int64_t err = v - s.reference();
        worst_ahead = std::max(worst_ahead, err);
        worst_behind = std::min(worst_behind, err);
        ++reads;
        return v;
    }

    template <class Check>
    void run(std::int64_t span, std::int64_t step, Check&& check)
    {
        const std::int64_t until = s.t + span;
        while (s.t < until) {
            s.t += step;
            const std::int64_t v = read();
            check(v, s.reference());
        }
    }
    void run(std::int64_t span, std::int64_t step)
    {
        run(span, step, [](std::int64_t, std::int64_t) {});
    }
    void reset_bounds()
    {
        worst_ahead = 0;
        worst_behind = 0;
    }
};

// A timeline decided and calibrated on `s`, reading every 10 us for 20 ms.
void start(sim& s, tsc_timeline& tl)
{
    tl.decide(s);
    REQUIRE(tl.mode() == tsc_timeline::calibrating);
    driver d{s, tl};
    d.run(20 * ms, 10 * us);
    REQUIRE(tl.mode() == tsc_timeline::on_counter);
    REQUIRE(d.backwards == 0);
}

} // namespace

TEST_SUITE_BEGIN("clocks");

TEST_CASE("tsc_timeline: the first calls read the reference until calibrated, then the counter")
{
    sim s;
    tsc_timeline tl;
    CHECK(tl.mode() == tsc_timeline::undecided);
    tl.decide(s);   // at load: one sample, nothing waits
    CHECK(tl.mode() == tsc_timeline::calibrating);
    CHECK(s.samples == 1);
    driver d{s, tl};
    // Before the calibration's millisecond is over: exactly the reference, at once.
    for (int i = 0; i < 90; ++i) {
        s.t += 10 * us;
        CHECK(d.read() == s.reference());
    }
    CHECK(tl.mode() == tsc_timeline::calibrating);
    // The first call after it computes the rate and switches; it still answers from the
    // reference, and the line starts a little ahead of it (never behind what was served).
    s.t += 200 * us;
    CHECK(d.read() == s.reference());
    CHECK(tl.mode() == tsc_timeline::on_counter);
    CHECK(tl.generation() == 1);
    s.t += 1;
    const std::int64_t first = d.read();
    CHECK(first >= s.reference());
    CHECK(first - s.reference() <= tsc_timeline::switch_margin_ns + 6 * us);   // + the sample's width
    d.run(100 * ms, 7 * us, [](std::int64_t v, std::int64_t ref) { CHECK(std::abs(v - ref) <= max_drift); });
    CHECK(d.backwards == 0);
    MESSAGE("after calibration: worst ahead " << d.worst_ahead << " ns, behind " << -d.worst_behind << " ns");
}

TEST_CASE("tsc_timeline: a call that finds the timeline undecided decides it")
{
    sim s;
    tsc_timeline tl;
    s.t = 5 * ms;
    CHECK(tl.now(s) == s.reference());
    CHECK(tl.mode() == tsc_timeline::calibrating);
}

TEST_CASE("tsc_timeline: no counter, or a kernel not on it: the reference itself")
{
    for (int which = 0; which < 2; ++which) {
        sim s;
        (which == 0 ? s.allowed : s.kernel) = false;
        tsc_timeline tl;
        tl.decide(s);
        CHECK(tl.mode() == tsc_timeline::on_reference);
        CHECK(tl.offset() == 0);
        driver d{s, tl};
        d.run(50 * ms, 13 * us, [](std::int64_t v, std::int64_t ref) { REQUIRE(v == ref); });
    }
}

TEST_CASE("tsc_timeline: a counter that does not move, or moves at no plausible rate: the reference")
{
    sim s;
    s.c_num = 0;   // stands still
    tsc_timeline tl;
    tl.decide(s);
    driver d{s, tl};
    d.run(10 * ms, 10 * us, [](std::int64_t v, std::int64_t ref) { REQUIRE(v == ref); });
    CHECK(tl.mode() == tsc_timeline::on_reference);

    sim fast;
    fast.c_num = 1000;   // 1000 GHz
    tsc_timeline tl2;
    tl2.decide(fast);
    driver d2{fast, tl2};
    d2.run(10 * ms, 10 * us);
    CHECK(tl2.mode() == tsc_timeline::on_reference);
    CHECK(d2.backwards == 0);
}

TEST_CASE("tsc_timeline: the counter going back during calibration restarts it")
{
    sim s;
    tsc_timeline tl;
    tl.decide(s);
    driver d{s, tl};
    d.run(500 * us, 10 * us);
    s.counter_set(1000);
    d.run(3 * ms, 10 * us);
    CHECK(tl.mode() == tsc_timeline::on_counter);
    d.run(50 * ms, 10 * us, [](std::int64_t v, std::int64_t ref) { CHECK(std::abs(v - ref) <= max_drift); });
    CHECK(d.backwards == 0);
}

TEST_CASE("tsc_timeline: drift within max_drift over two simulated hours, NTP slewing the reference")
{
    sim s;
    tsc_timeline tl;
    start(s, tl);
    driver d{s, tl};
    std::mt19937_64 rng(7);
    std::int64_t bursts = 0;
    // Bursts of reads (1 to 30 ms, a read every 3 to 60 us) between idle spells of up to
    // 10 s (no reader in a line's lead: the overdue path), while the reference's rate moves
    // within +-500 ppm (NTP's limit) every few seconds.
    while (s.t < 2 * 3600 * sec) {
        if (rng() % 4 == 0) s.reference_ppb(static_cast<std::int64_t>(rng() % 1'000'001) - 500'000);
        const std::int64_t burst = ms + static_cast<std::int64_t>(rng() % (29 * ms));
        const std::int64_t step = 3 * us + static_cast<std::int64_t>(rng() % (57 * us));
        d.run(burst, step);
        s.t += static_cast<std::int64_t>(rng() % (10 * sec));
        ++bursts;
    }
    MESSAGE(bursts << " bursts, " << d.reads << " readings, " << tl.generation() << " lines; worst ahead "
                   << d.worst_ahead << " ns, behind " << -d.worst_behind << " ns");
    CHECK(d.backwards == 0);
    CHECK(d.worst_ahead <= max_drift);
    CHECK(-d.worst_behind <= max_drift);
    // About one check of the clocksource per second of reading (not one per reading).
    CHECK(s.kernel_checks <= 2 + bursts);
}

TEST_CASE("tsc_timeline: continuous reading for five simulated minutes, reference 400 ppm slow")
{
    sim s;
    s.r_ppb = -400'000;
    tsc_timeline tl;
    start(s, tl);
    driver d{s, tl};
    const int checks0 = s.kernel_checks;
    d.run(300 * sec, 61 * us);
    MESSAGE(d.reads << " readings, " << tl.generation() << " lines; worst ahead " << d.worst_ahead << " ns, behind "
                    << -d.worst_behind << " ns; clocksource read " << s.kernel_checks - checks0 << " times");
    CHECK(d.backwards == 0);
    CHECK(d.worst_ahead <= max_drift);
    CHECK(-d.worst_behind <= max_drift);
    // Bounded cost: once a second.
    CHECK(s.kernel_checks - checks0 <= 301);
    CHECK(s.kernel_checks - checks0 >= 290);
}

TEST_CASE("tsc_timeline: a counter found behind its line resynchronises at once, never stopping time")
{
    // A reset to near 0 (resume from suspend), and a step back of 50 ms (a snapshot).
    for (std::int64_t back : {std::int64_t{-1}, std::int64_t{125'000'000}}) {
        sim s;
        tsc_timeline tl;
        start(s, tl);
        driver d{s, tl};
        d.run(13 * ms + 310 * us, 11 * us);
        const std::uint64_t gen = tl.generation();
        if (back < 0)
            s.counter_set(12'345);
        else
            s.counter_jump(-back);   // 125e6 ticks: 50 ms at 2.5 GHz
        d.reset_bounds();
        // The next reading already moves on from the last one, and time keeps moving.
        s.t += 11 * us;
        const std::int64_t before = d.last;
        const std::int64_t v = d.read();
        CHECK(v >= before);
        CHECK(tl.generation() > gen);
        s.t += ms;
        CHECK(d.read() >= v + ms * 85 / 100);
        d.run(5 * ms, 11 * us);
        // Ahead by at most one line (what the line in use could have served), worked off.
        CHECK(d.worst_ahead <= tsc_timeline::period_ns + tsc_timeline::lead_ns);
        CHECK(-d.worst_behind <= max_drift);
        d.run(200 * ms, 11 * us);
        d.reset_bounds();
        d.run(100 * ms, 11 * us);
        CHECK(d.worst_ahead <= max_drift);
        CHECK(-d.worst_behind <= max_drift);
        CHECK(d.backwards == 0);
        CHECK(tl.mode() == tsc_timeline::on_counter);
    }
}

TEST_CASE("tsc_timeline: a counter leaping ahead does not move the clock with it")
{
    // An hour of ticks at once, in the middle of a line; then the same with nobody reading
    // for 3 s around it.
    for (std::int64_t idle : {std::int64_t{0}, 3 * sec}) {
        sim s;
        tsc_timeline tl;
        start(s, tl);
        driver d{s, tl};
        d.run(11 * ms, 9 * us);
        s.t += idle;
        s.counter_jump(3600 * sec * 5 / 2);
        d.reset_bounds();
        d.run(5 * ms, 9 * us);
        CHECK(d.worst_ahead <= tsc_timeline::period_ns + tsc_timeline::lead_ns);
        CHECK(-d.worst_behind <= max_drift);
        d.run(200 * ms, 9 * us);
        d.reset_bounds();
        d.run(100 * ms, 9 * us);
        CHECK(d.worst_ahead <= max_drift);
        CHECK(-d.worst_behind <= max_drift);
        CHECK(d.backwards == 0);
        CHECK(tl.mode() == tsc_timeline::on_counter);
    }
}

TEST_CASE("tsc_timeline: the counter's frequency changes: the new rate is measured")
{
    // 2.5 GHz to 2.625 (+5%), to 2.375 (-5%), and a small change (+0.3%) that the lines'
    // slewing absorbs without a restart.
    struct change {
        std::int64_t num, den, bound;
    };
    for (change c : {change{21, 8, 2 * ms}, change{19, 8, 2 * ms}, change{2'507'500, 1'000'000, max_drift}}) {
        sim s;
        tsc_timeline tl;
        start(s, tl);
        driver d{s, tl};
        d.run(1 * sec, 17 * us);
        s.counter_rate(c.num, c.den);
        d.reset_bounds();
        d.run(300 * ms, 17 * us);
        CHECK(d.worst_ahead <= c.bound);
        CHECK(-d.worst_behind <= c.bound);
        d.reset_bounds();
        d.run(10 * sec, 17 * us);
        MESSAGE("rate " << c.num << "/" << c.den << " ticks/ns: worst ahead " << d.worst_ahead << " ns, behind "
                        << -d.worst_behind << " ns after 300 ms");
        CHECK(d.worst_ahead <= max_drift);
        CHECK(-d.worst_behind <= max_drift);
        CHECK(d.backwards == 0);
        CHECK(tl.mode() == tsc_timeline::on_counter);
    }
}

TEST_CASE("tsc_timeline: the kernel leaving the tsc clocksource is noticed within a second")
{
    sim s;
    tsc_timeline tl;
    start(s, tl);
    driver d{s, tl};
    d.run(2 * sec + 3 * ms, 23 * us);
    s.kernel = false;
    const std::int64_t changed = s.t;
    while (tl.mode() == tsc_timeline::on_counter && s.t < changed + 3 * sec) d.run(100 * us, 23 * us);
    CHECK(tl.mode() == tsc_timeline::on_reference);
    CHECK(s.t - changed <= tsc_timeline::check_interval_ns + tsc_timeline::period_ns);
    // From then on the reference, plus what kept the readings from going back (no more
    // than the rest of a line's lead and the drift).
    CHECK(tl.offset() >= 0);
    CHECK(tl.offset() <= tsc_timeline::lead_ns + max_drift);
    const int checks = s.kernel_checks;
    d.run(100 * ms, 23 * us, [&](std::int64_t v, std::int64_t ref) { REQUIRE(v == ref + tl.offset()); });
    CHECK(d.backwards == 0);
    CHECK(s.kernel_checks == checks);   // decided for good
}

TEST_CASE("tsc_timeline: counters that disagree across cores fall back to the reference")
{
    // Two cores whose counters are 1 s apart, read in turn by one thread: each finds the
    // other's line behind or ahead. After max_anomalies restarts, the reference.
    sim s;
    tsc_timeline tl;
    start(s, tl);
    driver d{s, tl};
    const std::uint64_t skew = 2'500'000'000;
    for (int i = 0; i < 200 && tl.mode() == tsc_timeline::on_counter; ++i) {
        s.t += 7 * us;
        d.read();
        s.c_at += skew;
        s.t += 7 * us;
        d.read();
        s.c_at -= skew;
    }
    CHECK(tl.mode() == tsc_timeline::on_reference);
    CHECK(d.backwards == 0);
    // Never more than a line and a restart line per anomaly ahead.
    CHECK(tl.offset() <= tsc_timeline::period_ns + tsc_timeline::lead_ns +
                             (tsc_timeline::max_anomalies + 1) * tsc_timeline::restart_ns);
    d.run(10 * ms, 7 * us);
    CHECK(d.backwards == 0);
}

TEST_CASE("tsc_timeline: the ends of the int64 range")
{
    SUBCASE("the reference near its largest value: the clock stops there, no overflow")
    {
        sim s;
        s.r_at = i64_max - 2 * sec;
        tsc_timeline tl;
        start(s, tl);
        driver d{s, tl};
        d.run(1900 * ms, 31 * us, [](std::int64_t v, std::int64_t ref) { CHECK(std::abs(v - ref) <= max_drift); });
        d.run(500 * ms, 31 * us);
        CHECK(d.backwards == 0);
        CHECK(d.last >= i64_max - max_drift);
        d.run(10 * ms, 31 * us, [](std::int64_t v, std::int64_t) { CHECK(v >= i64_max - max_drift); });
        CHECK(d.backwards == 0);
    }
    SUBCASE("the reference near its smallest value")
    {
        sim s;
        s.r_at = i64_min + sec;
        tsc_timeline tl;
        start(s, tl);
        driver d{s, tl};
        d.run(200 * ms, 31 * us, [](std::int64_t v, std::int64_t ref) { CHECK(std::abs(v - ref) <= max_drift); });
        CHECK(d.backwards == 0);
    }
    SUBCASE("the counter wrapping around 2^64")
    {
        sim s;
        s.c_at = ~std::uint64_t{0} - 2'500'000'000u * 3 / 10;   // 0.3 s before the wrap
        tsc_timeline tl;
        start(s, tl);
        driver d{s, tl};
        d.run(1 * sec, 29 * us, [](std::int64_t v, std::int64_t ref) { CHECK(std::abs(v - ref) <= max_drift); });
        CHECK(s.counter() < 2'500'000'000u);   // wrapped
        CHECK(d.backwards == 0);
        CHECK(tl.mode() == tsc_timeline::on_counter);
    }
    SUBCASE("a fall-back near the largest value saturates")
    {
        sim s;
        s.r_at = i64_max - 100 * ms;
        tsc_timeline tl;
        start(s, tl);
        driver d{s, tl};
        d.run(1 * sec, 31 * us);
        s.kernel = false;
        d.run(2 * sec, 31 * us);
        CHECK(tl.mode() == tsc_timeline::on_reference);
        CHECK(d.last == i64_max);
        CHECK(d.backwards == 0);
    }
}

TEST_SUITE_END();
