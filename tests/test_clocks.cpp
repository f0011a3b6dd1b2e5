// tsc_clock (default_clock) and coarse_clock against the real steady_clock. No sleeping:
// the tests read the clocks in loops (busy) for a bounded number of milliseconds. The same
// binary runs a second time with SLUICE_TSC_CLOCK=off (test clocks_fallback) for the
// steady_clock path. The conversion itself, on simulated counters: test_tsc_timeline.cpp.
#include <sluice/coarse_clock.hpp>
#include <sluice/default_clock.hpp>
#include <sluice/leaky_bucket.hpp>
#include <sluice/token_bucket.hpp>
#include <sluice/tsc_clock.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/system/error_code.hpp>

#include <doctest/doctest.h>

#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace {

using namespace std::chrono_literals;
using sluice::clock_source;
using sluice::coarse_clock;
using sluice::tsc_clock;

static_assert(std::chrono::is_clock_v<tsc_clock>);
static_assert(std::chrono::is_clock_v<coarse_clock>);
static_assert(tsc_clock::is_steady && coarse_clock::is_steady);
// The default Clock of every limiter is tsc_clock.
static_assert(std::is_same_v<sluice::default_clock, tsc_clock>);
static_assert(std::is_same_v<sluice::token_bucket<>::clock_type, tsc_clock>);
static_assert(std::is_same_v<sluice::leaky_bucket<>::clock_type, tsc_clock>);

std::int64_t ns(tsc_clock::time_point t) { return t.time_since_epoch().count(); }
std::int64_t ns(coarse_clock::time_point t) { return t.time_since_epoch().count(); }
std::int64_t steady_ns()
{
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

bool fallback_forced()
{
    const char* env = std::getenv("SLUICE_TSC_CLOCK");
    return env && (!std::strcmp(env, "off") || !std::strcmp(env, "0") || !std::strcmp(env, "steady"));
}

std::uint64_t generation() { return sluice::detail::tsc_state.generation(); }

using timeline = sluice::detail::tsc_timeline;

} // namespace

TEST_SUITE_BEGIN("clocks");

TEST_CASE("tsc_clock: the source follows SLUICE_TSC_CLOCK and the CPU")
{
    clock_source s = tsc_clock::source();
    MESSAGE("tsc_clock source: " << std::string(s == clock_source::tsc ? "tsc" : "steady"));
    if (fallback_forced())
        CHECK(s == clock_source::steady);
    // Decided once: asking again does not change it.
    CHECK(tsc_clock::source() == s);
}

TEST_CASE("tsc_clock: decided at load; on the counter once calibrated, reading on meanwhile" * doctest::timeout(30))
{
    const int mode = sluice::detail::tsc_state.mode();
    CHECK(mode != timeline::undecided);
    if (tsc_clock::source() == clock_source::steady) {
        CHECK(mode == timeline::on_reference);
        return;
    }
    // The calibration completes on a call at least 1 ms after load; every call before it
    // answered from steady_clock at once. Readings stay monotonic across the switch.
    std::int64_t last = ns(tsc_clock::now()), backwards = 0;
    const std::int64_t until = steady_ns() + 10'000'000'000;
    while (sluice::detail::tsc_state.mode() == timeline::calibrating && steady_ns() < until) {
        std::int64_t t = ns(tsc_clock::now());
        backwards += t < last;
        last = t;
    }
    CHECK(sluice::detail::tsc_state.mode() == timeline::on_counter);
    for (int i = 0; i < 100'000; ++i) {
        std::int64_t t = ns(tsc_clock::now());
        backwards += t < last;
        last = t;
    }
    CHECK(backwards == 0);
}

TEST_CASE("tsc_clock: the fallback reads steady_clock" * doctest::timeout(10))
{
    if (tsc_clock::source() != clock_source::steady)
        return;   // covered by the clocks_fallback run
    for (int i = 0; i < 100'000; ++i) {
        std::int64_t a = steady_ns();
        std::int64_t t = ns(tsc_clock::now());
        std::int64_t b = steady_ns();
        REQUIRE(a <= t);
        REQUIRE(t <= b);
    }
}

TEST_CASE("tsc_clock: monotonic in each of 4 threads across resynchronisations" * doctest::timeout(60))
{
    const bool on_tsc = tsc_clock::source() == clock_source::tsc;
    const std::uint64_t gen0 = generation();
    std::atomic<std::int64_t> backwards{0}, reads{0};
    auto body = [&] {
        std::int64_t last = ns(tsc_clock::now());
        std::int64_t n = 0, bad = 0;
        // At least 10 line changes (8 ms each) seen by the threads, whatever the machine's
        // load (4 threads on fewer cores: preempted in the middle of reads); 10 s at most.
        const std::int64_t until = steady_ns() + 10'000'000'000;
        for (;;) {
            for (int i = 0; i < 1024; ++i) {
                std::int64_t t = ns(tsc_clock::now());
                bad += t < last;
                last = t;
            }
            n += 1024;
            if (n >= 2'000'000 && (!on_tsc || generation() - gen0 >= 12 || steady_ns() > until)) break;
        }
        backwards += bad;
        reads += n;
    };
    std::vector<std::thread> others;
    for (int i = 0; i < 3; ++i) others.emplace_back(body);
    body();
    for (auto& t : others) t.join();
    CHECK(reads.load() >= 8'000'000);
    CHECK(backwards.load() == 0);
    if (on_tsc) {
        MESSAGE("resynchronisations during the run: " << generation() - gen0);
        CHECK(generation() - gen0 >= 10);
    }
}

TEST_CASE("tsc_clock: a reading handed to another thread is not ahead of its own" * doctest::timeout(30))
{
    // rdtsc is not ordered with the load before it, and two cores' counters may be skewed
    // (see tsc_clock.hpp): the receiving thread may read the counter early by a cache miss
    // plus that skew (up to 1.8 us seen on a virtual machine). Beyond max_drift it would be
    // the clock's own doing (two lines disagreeing by more than either may drift).
    std::atomic<std::int64_t> box{0};
    std::atomic<bool> stop{false};
    std::thread writer([&] {
        while (!stop.load(std::memory_order_relaxed))
            box.store(ns(tsc_clock::now()), std::memory_order_release);
    });
    std::int64_t worst = 0, n = 0;
    const std::int64_t until = steady_ns() + 40'000'000;
    while (n < 1'000'000 || steady_ns() < until) {
        std::int64_t seen = box.load(std::memory_order_acquire);
        std::int64_t mine = ns(tsc_clock::now());
        if (seen != 0) worst = std::max(worst, seen - mine);
        ++n;
    }
    stop = true;
    writer.join();
    MESSAGE("largest lag behind another thread's reading: " << worst << " ns");
    CHECK(worst <= std::chrono::nanoseconds(tsc_clock::max_drift).count());
}

TEST_CASE("tsc_clock: stays within max_drift of steady_clock" * doctest::timeout(30))
{
    (void)tsc_clock::now();
    const std::uint64_t gen0 = generation();
    // Each steady_clock reading is bracketed by two tsc_clock readings: a preemption in
    // between widens the bracket, so the check cannot fail for it.
    const std::int64_t bound = tsc_clock::max_drift.count();
    std::int64_t worst = 0, n = 0;
    const std::int64_t until = steady_ns() + 200'000'000;
    bool ok = true;
    auto check_once = [&] {
        std::int64_t t1 = ns(tsc_clock::now());
        std::int64_t s = steady_ns();
        std::int64_t t2 = ns(tsc_clock::now());
        ok = ok && t1 - bound <= s && s <= t2 + bound;
        if (t2 - t1 < 1'000)   // a tight bracket: a meaningful difference
            worst = std::max(worst, std::abs(t1 + (t2 - t1) / 2 - s));
        ++n;
    };
    while (steady_ns() < until) check_once();
    CHECK(ok);
    // After 20 ms without any reading (so past the end of a line: the overdue path).
    for (int gap = 0; gap < 3; ++gap) {
        const std::int64_t quiet = steady_ns() + 20'000'000;
        while (steady_ns() < quiet) {}
        check_once();
        CHECK(ok);
    }
    MESSAGE(n << " readings, worst difference " << worst << " ns, "
              << generation() - gen0 << " resynchronisations");
    CHECK(worst <= bound);
}

TEST_CASE("coarse_clock: resolution, and between steady_clock readings")
{
    timespec res{};
    REQUIRE(clock_getres(CLOCK_MONOTONIC_COARSE, &res) == 0);
    CHECK(coarse_clock::resolution().count() == std::int64_t{res.tv_sec} * 1'000'000'000 + res.tv_nsec);
    CHECK(coarse_clock::resolution() > 0ns);
    MESSAGE("coarse_clock resolution: " << coarse_clock::resolution().count() << " ns");
    std::int64_t last = ns(coarse_clock::now());
    std::int64_t worst_lag = 0;
    for (int i = 0; i < 1'000'000; ++i) {
        std::int64_t a = steady_ns();
        std::int64_t c = ns(coarse_clock::now());
        std::int64_t b = steady_ns();
        REQUIRE(c >= last);
        // Never ahead of the fine clock (same epoch), behind it by about a tick: more when
        // a tick is handled late (a loaded VM), but not by 100 ms.
        REQUIRE(c <= b);
        worst_lag = std::max(worst_lag, a - c);
        REQUIRE(a - c < coarse_clock::resolution().count() + 100'000'000);
        last = c;
    }
    MESSAGE("coarse_clock: largest lag behind steady_clock " << worst_lag << " ns");
}

TEST_CASE("coarse_clock: the reactor's wait")
{
    using traits = boost::asio::wait_traits<coarse_clock>;
    auto now = coarse_clock::now();
    CHECK(traits::to_wait_duration(now - 1ms) == 0ns);
    CHECK(traits::to_wait_duration(7ms) == 7ms);
    // Far ahead: what is left on steady_clock (which is ahead of the coarse clock).
    auto w = traits::to_wait_duration(now + 1s);
    CHECK(w <= 1s);
    CHECK(w > 1s - coarse_clock::resolution() - 100ms);
    // Due on steady_clock but not yet on the coarse clock: a quarter tick, not 0.
    auto due = coarse_clock::time_point{std::chrono::duration_cast<coarse_clock::duration>(
        std::chrono::steady_clock::now().time_since_epoch())};
    if (coarse_clock::now() < due)
        CHECK(traits::to_wait_duration(due) >= std::max<coarse_clock::duration>(coarse_clock::resolution() / 4, 50us));
}

TEST_SUITE_END();

TEST_SUITE_BEGIN("clocks_limiters");

namespace {

// A bucket emptied by try_acquire, then one async_acquire: it must complete without
// error, not before its slot on the limiter's clock.
template <class Clock>
void grants_after_wait(std::chrono::nanoseconds interval)
{
    boost::asio::io_context io;
    sluice::token_bucket<Clock> bucket(io, sluice::rate::every(interval), 1);
    auto before = Clock::now();
    REQUIRE(bucket.try_acquire(1).admitted);
    auto steady_start = std::chrono::steady_clock::now();
    int calls = 0;
    boost::system::error_code got = make_error_code(boost::system::errc::io_error);
    typename Clock::time_point at{};
    bucket.async_acquire(1, 5s, [&](boost::system::error_code ec) {
        ++calls;
        got = ec;
        at = Clock::now();
    });
    io.run();
    auto waited = std::chrono::steady_clock::now() - steady_start;
    CHECK(calls == 1);
    CHECK_FALSE(got);
    // The slot is one interval after the try_acquire, and the limiter's clock says when.
    CHECK(at >= before + interval);
    MESSAGE("interval " << interval.count() << " ns, waited " << waited.count() << " ns on steady_clock");
    CHECK(waited < 2s);
}

} // namespace

TEST_CASE("token_bucket<tsc_clock>: async_acquire waits for its slot" * doctest::timeout(10))
{
    grants_after_wait<tsc_clock>(20ms);
}

TEST_CASE("token_bucket<> (default_clock): async_acquire waits for its slot" * doctest::timeout(10))
{
    grants_after_wait<sluice::default_clock>(20ms);
}

TEST_CASE("token_bucket<coarse_clock>: async_acquire waits for its slot" * doctest::timeout(10))
{
    grants_after_wait<coarse_clock>(20ms);
}

TEST_CASE("leaky_bucket<tsc_clock> and <coarse_clock>: waiters released in order" * doctest::timeout(10))
{
    auto run = []<class Clock>(Clock*) {
        boost::asio::io_context io;
        sluice::leaky_bucket<Clock> bucket(io, sluice::rate::every(2ms), 0ns);
        std::vector<int> order;
        std::vector<typename Clock::time_point> when;
        auto t0 = Clock::now();
        for (int i = 0; i < 5; ++i)
            bucket.async_acquire(1, 5s, [&, i](boost::system::error_code ec) {
                CHECK_FALSE(ec);
                order.push_back(i);
                when.push_back(Clock::now());
            });
        io.run();
        CHECK(order == std::vector<int>{0, 1, 2, 3, 4});
        // The fifth waiter's slot is 4 intervals after the first: not granted earlier.
        REQUIRE(when.size() == 5);
        CHECK(when[4] - t0 >= 8ms);
    };
    run(static_cast<tsc_clock*>(nullptr));
    run(static_cast<coarse_clock*>(nullptr));
}

TEST_SUITE_END();
