#include <sluice/policy/gcra.hpp>

#include <boost/system/system_error.hpp>
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <thread>

#include "policy_support.hpp"

using namespace std::chrono_literals;
using sluice::error;
using sluice::rate;
using sluice::policy::gcra;

namespace {

using sluice_test::i128;
using sluice_test::i64_min;
using sluice_test::i64_max;
using sluice_test::check_same;
using sluice_test::thrown;

constexpr std::int64_t ns_max = i64_max;

struct rng {
    std::uint64_t s;
    std::uint64_t next()
    {
        std::uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
    }
    // Uniform in [lo, hi], any lo <= hi (modular arithmetic in uint64).
    std::int64_t in(std::int64_t lo, std::int64_t hi)
    {
        std::uint64_t span = static_cast<std::uint64_t>(hi) - static_cast<std::uint64_t>(lo) + 1;
        std::uint64_t x = span == 0 ? next() : next() % span;
        return static_cast<std::int64_t>(static_cast<std::uint64_t>(lo) + x);
    }
    bool chance(int percent) { return static_cast<int>(next() % 100) < percent; }
};

std::int64_t clamp64(i128 v)
{
    if (v > i64_max) return i64_max;
    if (v < i64_min) return i64_min;
    return static_cast<std::int64_t>(v);
}

// ITU-T I.371 virtual scheduling (textbook GCRA) on a theoretical arrival time held in
// 128 bits, so nothing saturates: a request of n conforms at t when
// max(tat, t) + n*T - t <= tau, and then tat = max(tat, t) + n*T. A new bucket's tat is
// long before any int64 instant (full at every one). The int64 clock shows only where
// results are read: a permit ready at or past INT64_MAX is never ready (the clock ends
// there), and durations saturate at INT64_MAX.
struct gcra_model {
    i128 T;
    std::uint64_t burst;
    i128 slack;
    i128 tau;
    i128 tat;

    static constexpr i128 long_ago = -(i128(1) << 100);

    gcra_model(std::int64_t interval, std::uint64_t b, std::int64_t s)
        : T(interval), burst(b), slack(s), tau(i128(b) * interval + s), tat(long_ago)
    {
    }

    // Slack is catch-up only: a caller behind its schedule (tat > t) continues it; any
    // other restarts it at t with no slack credit (textbook: max(tat, t), the same with no
    // slack).
    i128 after(std::uint64_t n, std::int64_t t) const { return (tat > t ? tat : i128(t) + slack) + i128(n) * T; }

    // Permits grantable at once, capped at burst (slack is catch-up, not capacity).
    std::uint64_t remaining(i128 tt, std::int64_t t) const
    {
        i128 room = tau - std::max<i128>(tt - t, 0);
        if (room < 0) return 0;
        i128 k = room / T;
        return k > i128(burst) ? burst : static_cast<std::uint64_t>(k);
    }

    // Until the bucket holds its burst again (slack is not capacity).
    std::int64_t reset(i128 tt, std::int64_t t) const { return clamp64(std::max<i128>(tt - slack - t, 0)); }

    sluice::decision decide(std::uint64_t n, std::int64_t t, bool consume)
    {
        sluice::decision d;
        if (n == 0 || n > burst) {
            d.retry_after = std::chrono::nanoseconds::max();
            d.error = n == 0 ? error::invalid_count : error::exceeds_limit;
            return d;
        }
        i128 nt = after(n, t);
        i128 ready = nt - tau;   // the instant the request conforms
        if (ready <= t) {
            d.admitted = true;
            if (consume) tat = nt;
            d.remaining = remaining(nt, t);
            d.reset_after = std::chrono::nanoseconds{reset(nt, t)};
        } else {
            d.retry_after = std::chrono::nanoseconds{ready >= i64_max ? i64_max : clamp64(ready - t)};
            d.remaining = remaining(tat, t);
            d.reset_after = std::chrono::nanoseconds{reset(tat, t)};
        }
        return d;
    }

    // The same decision, the instant the permits are ready (empty_at after commit).
    sluice::reservation reserve(std::uint64_t n, std::int64_t t, std::int64_t max_wait)
    {
        sluice::reservation r;
        if (n == 0 || n > burst) {
            r.at = i64_max;
            r.error = n == 0 ? error::invalid_count : error::exceeds_limit;
            return r;
        }
        i128 nt = after(n, t);
        i128 ready = nt - tau;
        r.at = clamp64(std::max(ready, i128(t)));
        if (ready >= i64_max || ready - t > max_wait) {
            r.at = clamp64(ready);
            r.error = error::timed_out;
            return r;
        }
        r.admitted = true;
        tat = nt;
        return r;
    }

    // Gives n permits back, up to a full bucket at t.
    std::int64_t refund(std::uint64_t n, std::int64_t t)
    {
        i128 nt = std::max(tat - i128(n) * T, i128(t));
        if (nt >= tat) return 0;
        i128 moved = tat - nt;
        tat = nt;
        return clamp64(moved);
    }

    // Reconfiguration counts in permits. The credit at t is tau - max(tat - t, 0) ns at
    // the old interval (negative: a debt); it is rescaled to the new interval (towards
    // zero, to whole ns), then capped by the new bucket; a debt past the end of the clock
    // stays there.
    void reconfigure(i128 new_T, std::uint64_t new_burst, i128 new_slack, std::int64_t t)
    {
        i128 credit = tau - std::max<i128>(tat - t, 0);
        i128 new_tau = i128(new_burst) * new_T + new_slack;
        credit = credit * new_T / T;
        if (credit > new_tau) credit = new_tau;
        i128 nt = i128(t) + new_tau - credit;
        if (nt - new_tau > i64_max) nt = i128(i64_max) + new_tau;
        T = new_T;
        burst = new_burst;
        slack = new_slack;
        tau = new_tau;
        tat = nt;
    }

    // Whether gcra accepts the configuration: burst * interval + slack within int64.
    static bool valid(i128 t, std::uint64_t b, i128 s) { return b > 0 && i128(b) * t < i64_max && i128(b) * t + s < i64_max; }

    std::int64_t empty_at() const { return clamp64(tat - tau); }
};

struct shape {
    const char* name;
    std::int64_t interval;
    std::uint64_t burst;
    std::int64_t slack;
};

// Token buckets (burst b) and leaky buckets (burst 1 + slack).
const shape shapes[] = {
    {"token 1000ns x5", 1000, 5, 0},
    {"token 3ns x100", 3, 100, 0},
    {"token 1s x3", 1'000'000'000, 3, 0},
    {"token 7ns x1", 7, 1, 0},
    {"leaky 1000ns slack 2500", 1000, 1, 2500},
    {"leaky 10ns slack 10", 10, 1, 10},
    {"token+slack 100ns x4 slack 150", 100, 4, 150},
};

const std::int64_t bases[] = {0, -1'000'000'000'000, 5, i64_max - 2'000'000, i64_min, i64_min + 1'000'000};

std::int64_t step_time(rng& r, std::int64_t now, std::int64_t interval, i128 tau)
{
    i128 dt;
    int k = static_cast<int>(r.next() % 100);
    std::int64_t t = static_cast<std::int64_t>(std::min<i128>(tau, i128(1) << 40));
    if (k < 30) dt = 0;                                            // a burst at one instant
    else if (k < 70) dt = r.in(0, 2 * std::min<std::int64_t>(interval, 1 << 30));
    else if (k < 85) dt = r.in(0, 2 * t);
    else if (k < 92) dt = r.in(0, 10 * t);                         // idle
    else if (k < 94) dt = i128(r.in(0, 1 << 20)) * interval;       // long idle
    else dt = -r.in(0, t);                                         // the clock steps back
    return clamp64(i128(now) + dt);
}

std::uint64_t pick_n(rng& r, std::uint64_t burst)
{
    int k = static_cast<int>(r.next() % 100);
    if (k < 2) return 0;
    if (k < 4) return burst + 1 + r.next() % 3;
    if (k < 70) return 1;
    return 1 + r.next() % burst;
}

} // namespace

TEST_SUITE_BEGIN("gcra");

TEST_CASE("gcra matches the textbook model on random arrivals")
{
    for (const shape& sh : shapes) {
        for (std::int64_t base : bases) {
            for (std::uint64_t seed = 1; seed <= 4; ++seed) {
                gcra g(rate::every(std::chrono::nanoseconds{sh.interval}), sh.burst,
                       std::chrono::nanoseconds{sh.slack});
                gcra_model m(sh.interval, sh.burst, sh.slack);
                rng r{seed * 7919 + static_cast<std::uint64_t>(base)};
                std::int64_t now = base;
                // Admitted requests re-stamped on a clock that never goes back: they must
                // conform to GCRA there too (a backward step never admits extra).
                gcra_model mono(sh.interval, sh.burst, sh.slack);
                std::int64_t mono_now = i64_min;
                std::uint64_t admitted = 0;
                for (int step = 0; step < 3000; ++step) {
                    INFO("shape ", std::string(sh.name), " base ", base, " seed ", seed, " step ", step, " now ", now);
                    std::uint64_t n = pick_n(r, sh.burst);
                    int op = static_cast<int>(r.next() % 100);
                    if (op < 70) {
                        sluice::decision want = m.decide(n, now, true);
                        sluice::decision got = g.try_acquire(n, now);
                        check_same(got, want);
                        if (got.admitted) {
                            admitted += n;
                            mono_now = std::max(mono_now, now);
                            CHECK(mono.decide(n, mono_now, true).admitted);
                        }
                    } else if (op < 80) {
                        check_same(g.check(n, now), m.decide(n, now, false));
                    } else if (op < 92) {
                        std::int64_t max_wait = r.chance(50) ? 0 : r.in(0, 3 * sh.interval * static_cast<std::int64_t>(sh.burst));
                        CAPTURE(max_wait);
                        sluice::reservation want = m.reserve(n, now, max_wait);
                        sluice::reservation got = g.reserve(n, now, max_wait);
                        CHECK(got.admitted == want.admitted);
                        CHECK(got.at == want.at);
                        CHECK(got.error == want.error);
                        // Queued reservations are part of the state the re-stamped check sees.
                        if (got.admitted) mono.tat = m.tat;
                    } else {
                        std::uint64_t k = 1 + r.next() % sh.burst;
                        CHECK(g.refund(k, now) == m.refund(k, now));
                        // A refund fills the bucket as of its own `now`, even one behind the
                        // newest instant seen: restart the re-stamped check from there (before
                        // the state's schedule lapses at tat, after which slack gives no credit).
                        mono.tat = m.tat;
                        mono_now = clamp64(std::min<i128>(now, m.tat - 1));
                    }
                    REQUIRE(g.empty_at() == m.empty_at());
                    // Without refunds the re-stamped run is the same run: the state already
                    // knows the newest instant it admitted at.
                    REQUIRE(mono.tat == m.tat);
                    now = step_time(r, now, sh.interval, m.tau);
                }
                CHECK(admitted > 0);
            }
        }
    }
}

TEST_CASE("gcra matches virtual scheduling across reconfiguration and the whole int64 clock")
{
    // Intervals a reconfiguration picks from: 1 ns up to a year (with bursts that fit).
    const std::int64_t intervals[] = {1, 3, 7, 100, 1000, 999'983, 1'000'000'000, 86'400'000'000'000, 31'536'000'000'000'000};
    for (const shape& sh : shapes) {
        for (std::uint64_t seed = 1; seed <= 12; ++seed) {
            gcra g(rate::every(std::chrono::nanoseconds{sh.interval}), sh.burst, std::chrono::nanoseconds{sh.slack});
            gcra_model m(sh.interval, sh.burst, sh.slack);
            rng r{seed * 104729 + static_cast<std::uint64_t>(sh.interval)};
            std::int64_t now = bases[seed % std::size(bases)];
            std::uint64_t admitted = 0;
            int flips = 0;
            for (int step = 0; step < 4000; ++step) {
                INFO("shape ", std::string(sh.name), " seed ", seed, " step ", step, " now ", now, " T ", static_cast<std::int64_t>(m.T),
                     " burst ", m.burst, " slack ", static_cast<std::int64_t>(m.slack));
                int op = static_cast<int>(r.next() % 100);
                if (op < 55) {
                    std::uint64_t n = 1 + r.next() % m.burst;
                    sluice::decision want = m.decide(n, now, true);
                    sluice::decision got = g.try_acquire(n, now);
                    check_same(got, want);
                    admitted += got.admitted ? n : 0;
                } else if (op < 63) {
                    std::uint64_t n = pick_n(r, m.burst);
                    check_same(g.check(n, now), m.decide(n, now, false));
                } else if (op < 73) {
                    std::uint64_t n = 1 + r.next() % m.burst;
                    std::int64_t max_wait = r.chance(10) ? ns_max : r.in(0, clamp64(3 * m.tau));
                    sluice::reservation want = m.reserve(n, now, max_wait);
                    sluice::reservation got = g.reserve(n, now, max_wait);
                    CHECK(got.admitted == want.admitted);
                    CHECK(got.at == want.at);
                    CHECK(got.error == want.error);
                } else if (op < 78) {
                    std::uint64_t k = 1 + r.next() % m.burst;
                    CHECK(g.refund(k, now) == m.refund(k, now));
                } else if (op < 88) {
                    std::int64_t T = intervals[r.next() % std::size(intervals)];
                    CAPTURE(T);
                    if (gcra_model::valid(T, m.burst, m.slack)) {
                        auto f = g.set_rate(rate::every(std::chrono::nanoseconds{T}), now);
                        CHECK(f.first == T);
                        CHECK(f.second == static_cast<std::int64_t>(m.T));
                        m.reconfigure(T, m.burst, m.slack, now);
                    } else {
                        CHECK(thrown([&] { g.set_rate(rate::every(std::chrono::nanoseconds{T}), now); }) == error::invalid_limit);
                    }
                } else if (op < 96) {
                    std::uint64_t b = 1 + r.next() % (r.chance(50) ? 4 : 100);
                    CAPTURE(b);
                    if (gcra_model::valid(m.T, b, m.slack)) {
                        g.set_burst(b, now);
                        m.reconfigure(m.T, b, m.slack, now);
                    } else {
                        CHECK(thrown([&] { g.set_burst(b, now); }) == error::invalid_limit);
                    }
                } else {
                    std::int64_t sl = r.chance(50) ? 0 : r.in(0, clamp64(4 * m.T));
                    CAPTURE(sl);
                    if (gcra_model::valid(m.T, m.burst, sl)) {
                        g.set_slack(std::chrono::nanoseconds{sl}, now);
                        m.reconfigure(m.T, m.burst, sl, now);
                    } else {
                        CHECK(thrown([&] { g.set_slack(std::chrono::nanoseconds{sl}, now); }) == error::invalid_limit);
                    }
                }
                REQUIRE(g.burst() == m.burst);
                REQUIRE(g.interval_ns() == static_cast<std::int64_t>(m.T));
                REQUIRE(g.empty_at() == m.empty_at());
                REQUIRE(g.idle_at(now) == clamp64(m.tat));
                REQUIRE(g.reset_after(now).count() == m.reset(m.tat, now));
                // Time: mostly small steps, sometimes idle, back, or to either end of the
                // clock (steps of more than 2^63 ns both ways).
                int k = static_cast<int>(r.next() % 100);
                std::int64_t before = now;
                if (k < 3) now = i64_min + r.in(0, clamp64(2 * m.tau));
                else if (k < 6) now = i64_max - r.in(0, clamp64(2 * m.tau));
                else if (k < 8) now = r.in(-clamp64(2 * m.tau), clamp64(2 * m.tau));
                else now = step_time(r, now, static_cast<std::int64_t>(m.T), m.tau);
                flips += (before < 0) != (now < 0) ? 1 : 0;
            }
            CHECK(admitted > 0);
            CHECK(flips > 0);
        }
    }
}

TEST_CASE("gcra: a fresh bucket is full wherever the clock starts")
{
    for (std::int64_t start : {std::int64_t{0}, std::int64_t{-1}, std::int64_t{-5'000'000'000'000'000'000},
                               std::int64_t{123'456'789}, i64_max, i64_max - 1, i64_min + 10'000}) {
        CAPTURE(start);
        gcra g(rate::every(100ns), 10);
        for (int i = 0; i < 10; ++i) {
            CAPTURE(i);
            auto d = g.try_acquire(1, start);
            REQUIRE(d.admitted);
            CHECK(d.remaining == static_cast<std::uint64_t>(9 - i));
        }
        auto d = g.try_acquire(1, start);
        CHECK_FALSE(d.admitted);
        // Past the end of the clock a permit is never ready.
        CHECK(d.retry_after == (start <= i64_max - 100 ? 100ns : std::chrono::nanoseconds::max()));
    }
}

TEST_CASE("gcra: the clock's last instant grants nothing extra")
{
    // At now == INT64_MAX the next empty instant cannot be represented: it must reject.
    gcra g(rate::every(1ns), 4);
    int granted = 0;
    for (int i = 0; i < 100; ++i)
        granted += g.try_acquire(1, i64_max).admitted ? 1 : 0;
    CHECK(granted == 4);
    auto d = g.try_acquire(1, i64_max);
    CHECK_FALSE(d.admitted);
    CHECK(d.retry_after.count() > 0);
    auto r = g.reserve(1, i64_max, ns_max);
    CHECK_FALSE(r.admitted);
    CHECK(r.error == error::timed_out);

    gcra slow(rate::every(std::chrono::nanoseconds{i64_max / 4}), 2);
    CHECK(slow.try_acquire(2, i64_max).admitted);
    CHECK_FALSE(slow.try_acquire(1, i64_max).admitted);
    CHECK(slow.try_acquire(1, i64_max).retry_after.count() > 0);
}

TEST_CASE("gcra: near INT64_MIN a fresh bucket is full, and keeps what it has left")
{
    // Used at INT64_MIN + 350, the bucket was empty before INT64_MIN: it still holds the
    // rest of its burst.
    gcra g(rate::every(100ns), 10);
    auto d = g.try_acquire(1, i64_min + 350);
    CHECK(d.admitted);
    CHECK(d.remaining == 9);
    CHECK(g.empty_at() == i64_min);
    CHECK(g.try_acquire(9, i64_min + 350).admitted);
    CHECK_FALSE(g.try_acquire(1, i64_min + 350).admitted);
    CHECK(g.empty_at() == i64_min + 350);
    // And a backward step to INT64_MIN waits for the same state.
    auto e = g.try_acquire(1, i64_min);
    CHECK_FALSE(e.admitted);
    CHECK(e.retry_after == 450ns);
    CHECK(g.refund(3, i64_min) == 300);
    CHECK(g.try_acquire(1, i64_min + 150).admitted);
    gcra h(rate::every(100ns), 10);
    CHECK(h.try_acquire(10, i64_min).admitted);
    CHECK(h.idle_at(i64_min) == i64_min + 1000);
}

TEST_CASE("gcra: extreme rates and bursts")
{
    SUBCASE("one per year")
    {
        const std::int64_t year = 365LL * 86400 * 1'000'000'000;
        gcra g(rate::per(1, std::chrono::hours(24 * 365)), 1);
        CHECK(g.try_acquire(1, 0).admitted);
        auto d = g.try_acquire(1, 1);
        CHECK_FALSE(d.admitted);
        CHECK(d.retry_after.count() == year - 1);
        CHECK(d.reset_after.count() == year - 1);
        CHECK_FALSE(g.try_acquire(1, year - 1).admitted);
        CHECK(g.try_acquire(1, year).admitted);
        // 292 years is the most a burst of such permits may span.
        CHECK(thrown([] { gcra x(rate::per(1, std::chrono::hours(24 * 365)), 293); }) == error::invalid_limit);
        gcra ok(rate::per(1, std::chrono::hours(24 * 365)), 291);
        CHECK(ok.try_acquire(291, 0).admitted);
    }
    SUBCASE("10^9 per second, burst 10^9")
    {
        gcra g(rate::per_second(1e9), 1'000'000'000);
        CHECK(g.try_acquire(1'000'000'000, 0).admitted);
        auto d = g.try_acquire(1, 0);
        CHECK_FALSE(d.admitted);
        CHECK(d.retry_after == 1ns);
        CHECK(d.reset_after == 1s);
        CHECK(g.try_acquire(500, 500).admitted);
        CHECK_FALSE(g.try_acquire(1, 500).admitted);
        CHECK(g.check(1'000'000'000, 1'000'000'500).admitted);
    }
    SUBCASE("burst 10^9 at one per second")
    {
        gcra g(rate::per_second(1), 1'000'000'000);
        CHECK(g.try_acquire(999'999'999, -7).admitted);
        CHECK(g.try_acquire(1, -7).admitted);
        auto d = g.try_acquire(1, -7);
        CHECK(d.retry_after == 1s);
        CHECK(d.reset_after.count() == 1'000'000'000LL * 1'000'000'000LL);
    }
}

TEST_CASE("gcra: bad input")
{
    CHECK(thrown([] { gcra g(rate::per_second(1), 0); }) == error::invalid_limit);
    CHECK(thrown([] { gcra g(rate::every(2ns), (std::uint64_t{1} << 62)); }) == error::invalid_limit);
    CHECK(thrown([] { gcra g(rate::every(1ns), ~std::uint64_t{0}); }) == error::invalid_limit);
    CHECK(thrown([] { gcra g(rate::every(1ns), 1, std::chrono::nanoseconds{i64_max - 1}); }) == error::invalid_duration);
    CHECK(thrown([] { gcra g(rate::every(1ns), 1, -1ns); }) == error::invalid_duration);

    gcra g(rate::per_second(10), 3);
    auto zero = g.try_acquire(0, 0);
    CHECK_FALSE(zero.admitted);
    CHECK(zero.error == error::invalid_count);
    CHECK(zero.retry_after == std::chrono::nanoseconds::max());
    auto big = g.try_acquire(4, 0);
    CHECK_FALSE(big.admitted);
    CHECK(big.error == error::exceeds_limit);
    CHECK(big.retry_after == std::chrono::nanoseconds::max());
    CHECK(g.reserve(0, 0, ns_max).error == error::invalid_count);
    CHECK(g.reserve(4, 0, ns_max).error == error::exceeds_limit);
    CHECK_FALSE(g.reserve(4, 0, ns_max).admitted);
    // Nothing was consumed by the bad requests.
    CHECK(g.try_acquire(3, 0).admitted);
}

TEST_CASE("gcra: reserve commits FIFO future slots")
{
    const std::int64_t T = 1000;
    gcra g(rate::every(std::chrono::nanoseconds{T}), 3);
    const std::int64_t now = 50'000;
    // The burst is granted at once: usable now.
    for (int i = 0; i < 3; ++i) {
        auto r = g.reserve(1, now, 0);
        CHECK(r.admitted);
        CHECK(r.at == now);
        CHECK_FALSE(r.error);
    }
    // Then one slot per interval, each queued behind the previous.
    std::int64_t prev = now;
    for (std::uint64_t n : {1u, 2u, 1u, 3u}) {
        CAPTURE(n);
        auto r = g.reserve(n, now, 100 * T);
        REQUIRE(r.admitted);
        CHECK(r.at == prev + static_cast<std::int64_t>(n) * T);
        prev = r.at;
    }
    CHECK(g.empty_at() == prev);
    // Too long a wait: nothing consumed, the prediction is returned.
    auto late = g.reserve(2, now, 2 * T - 1 + (prev - now));
    CHECK_FALSE(late.admitted);
    CHECK(late.error == error::timed_out);
    CHECK(late.at == prev + 2 * T);
    CHECK(g.empty_at() == prev);
    CHECK(g.predict(2, now) == prev + 2 * T);
    CHECK(g.predict(1, now, 2) == prev + 3 * T);
    // Exactly max_wait is fine.
    auto fits = g.reserve(2, now, prev + 2 * T - now);
    CHECK(fits.admitted);
    CHECK(fits.at == prev + 2 * T);
    // A reservation in the future makes try_acquire wait for it.
    auto d = g.try_acquire(1, now);
    CHECK_FALSE(d.admitted);
    CHECK(d.retry_after.count() == fits.at + T - now);
    CHECK(d.remaining == 0);
}

TEST_CASE("gcra: refund gives capacity back, never beyond the burst")
{
    const std::int64_t T = 100;
    gcra g(rate::every(std::chrono::nanoseconds{T}), 5);
    CHECK(g.try_acquire(5, 0).admitted);
    auto r = g.reserve(2, 0, 10 * T);
    REQUIRE(r.admitted);
    CHECK(r.at == 2 * T);
    // Cancelling the reservation moves the queue back by its size.
    CHECK(g.refund(2, 0) == 2 * T);
    CHECK(g.empty_at() == 0);
    CHECK(g.refund(3, 0) == 3 * T);
    CHECK(g.check(3, 0).remaining == 0);
    CHECK(g.check(3, 0).admitted);
    // Refunding more than was taken stops at a full bucket.
    CHECK(g.refund(100, 0) == 2 * T);
    CHECK(g.refund(1, 0) == 0);
    CHECK(g.empty_at() == -5 * T);
    CHECK(g.check(5, 0).admitted);
    CHECK(g.check(5, 0).remaining == 0);
    auto full = g.try_acquire(5, 0);
    CHECK(full.admitted);
    CHECK_FALSE(g.try_acquire(1, 0).admitted);
    // An idle bucket gains nothing from a refund.
    gcra idle(rate::every(std::chrono::nanoseconds{T}), 5);
    CHECK(idle.refund(3, 1'000'000) == 0);
    CHECK(idle.try_acquire(5, 1'000'000).admitted);
    CHECK_FALSE(idle.try_acquire(1, 1'000'000).admitted);
}

TEST_CASE("gcra: set_rate rescales the debt around now")
{
    gcra g(rate::every(1000ns), 2);
    const std::int64_t now = 10'000;
    CHECK(g.try_acquire(2, now).admitted);
    for (int i = 0; i < 4; ++i)
        REQUIRE(g.reserve(1, now, 1'000'000).admitted);
    REQUIRE(g.empty_at() == now + 4000);
    // Four queued permits at 1000 ns become four at 250 ns.
    auto f = g.set_rate(rate::every(250ns), now);
    CHECK(f.first == 250);
    CHECK(f.second == 1000);
    CHECK(g.interval_ns() == 250);
    CHECK(g.empty_at() == now + 1000);
    CHECK(g.reserve(1, now, 1'000'000).at == now + 1250);
    // Back to slow: the debt (5 permits) now takes 5 slow intervals.
    g.set_rate(rate::every(3000ns), now);
    CHECK(g.empty_at() == now + 15000);
    // Rounding of the debt is down to whole ns (1250 * 1 / 3 = 416.67 -> 416).
    gcra h(rate::every(3ns), 1);
    CHECK(h.try_acquire(1, 0).admitted);
    REQUIRE(h.reserve(1, 0, 100).admitted);
    REQUIRE(h.empty_at() == 3);
    h.set_rate(rate::every(1ns), 1);
    CHECK(h.empty_at() == 1 + 2 / 3);
    // A full bucket stays full: 3 permits at the new interval.
    gcra idle(rate::every(100ns), 3);
    idle.set_rate(rate::every(10ns), 0);
    CHECK(idle.empty_at() == -30);
    CHECK(idle.try_acquire(3, 0).admitted);
    CHECK(idle.try_acquire(1, 0).retry_after == 10ns);
    // A rate whose burst no longer fits: throws and leaves the limiter as it was.
    gcra big(rate::every(1ns), 1'000'000'000);
    CHECK(thrown([&] { big.set_rate(rate::per(1, std::chrono::hours(24 * 365)), 0); }) == error::invalid_limit);
    CHECK(big.interval_ns() == 1);
    CHECK(big.rate() == rate::every(1ns));
}

TEST_CASE("gcra: set_burst keeps the permits available now, capped by the new burst")
{
    gcra g(rate::every(100ns), 2);
    CHECK(g.try_acquire(2, 0).admitted);
    CHECK_FALSE(g.try_acquire(1, 0).admitted);
    // The debt is kept; the bigger bucket fills from it.
    g.set_burst(5, 0);
    CHECK(g.burst() == 5);
    CHECK(g.empty_at() == 0);
    CHECK_FALSE(g.try_acquire(1, 0).admitted);
    CHECK(g.try_acquire(5, 500).admitted);
    // A full bucket that grows holds what it held, and refills to the new burst.
    gcra idle(rate::every(100ns), 2);
    idle.set_burst(7, 0);
    CHECK(idle.check(1, 0).remaining == 1);
    CHECK(idle.reset_after(0) == 500ns);
    CHECK(idle.check(1, 0).reset_after == 600ns);
    CHECK(idle.try_acquire(2, 0).admitted);
    CHECK_FALSE(idle.try_acquire(1, 0).admitted);
    CHECK_FALSE(idle.check(7, 699).admitted);
    CHECK(idle.try_acquire(7, 700).admitted);
    // Shrinking caps what a long idle period saved.
    gcra s(rate::every(100ns), 10);
    s.set_burst(3, 0);
    CHECK(s.try_acquire(3, 1'000'000).admitted);
    CHECK_FALSE(s.try_acquire(1, 1'000'000).admitted);
    CHECK(s.try_acquire(4, 0).error == error::exceeds_limit);
    CHECK(thrown([&] { s.set_burst(0, 0); }) == error::invalid_limit);
    CHECK(s.burst() == 3);
    CHECK(s.slack() == 0ns);
    // Shrinking keeps fewer when fewer are left.
    gcra part(rate::every(100ns), 10);
    CHECK(part.try_acquire(8, 0).admitted);
    part.set_burst(5, 0);
    CHECK(part.check(2, 0).admitted);
    CHECK_FALSE(part.check(3, 0).admitted);
}

TEST_CASE("gcra: set_slack changes how far a late caller may catch up, from now on")
{
    const std::int64_t T = 1000;
    gcra g(rate::every(std::chrono::nanoseconds{T}), 1, std::chrono::nanoseconds{2 * T});
    CHECK(g.try_acquire(1, 0).admitted);   // the schedule: 0, T, 2T, ...
    g.set_slack(std::chrono::nanoseconds{5 * T}, 0);
    // Late by 4T - 1 (within the new slack): slots T, 2T and 3T at once, 4T is not due.
    CHECK(g.try_acquire(1, 4 * T - 1).admitted);
    CHECK(g.try_acquire(1, 4 * T - 1).admitted);
    CHECK(g.try_acquire(1, 4 * T - 1).admitted);
    CHECK_FALSE(g.try_acquire(1, 4 * T - 1).admitted);
    g.set_slack(0ns, 4 * T - 1);
    CHECK_FALSE(g.try_acquire(1, 4 * T - 1).admitted);
    CHECK(g.try_acquire(1, 4 * T).admitted);
    CHECK_FALSE(g.try_acquire(1, 4 * T).admitted);
    CHECK(thrown([&] { g.set_slack(-1ns, 0); }) == error::invalid_duration);
}

TEST_CASE("gcra: leaky bucket spaces requests, slack lets a late caller catch up")
{
    const std::int64_t T = 1000;
    gcra g(rate::every(std::chrono::nanoseconds{T}), 1, std::chrono::nanoseconds{2 * T});
    // Idle: one at once (slack is no burst), then exactly one per interval.
    CHECK(g.try_acquire(1, 0).admitted);
    auto d = g.try_acquire(1, 0);
    CHECK_FALSE(d.admitted);
    CHECK(d.retry_after.count() == T);
    CHECK(g.try_acquire(1, T).admitted);
    CHECK_FALSE(g.try_acquire(1, T).admitted);
    // Late on slot 2T by less than the slack: slots 2T and 3T at once, then 4T on time.
    CHECK(g.try_acquire(1, 4 * T - 1).admitted);
    CHECK(g.try_acquire(1, 4 * T - 1).admitted);
    CHECK_FALSE(g.try_acquire(1, 4 * T - 1).admitted);
    CHECK(g.try_acquire(1, 4 * T).admitted);
    CHECK(g.try_acquire(2, 3 * T).error == error::exceeds_limit);
}

TEST_CASE("gcra: set_rate keeps the permits available now, in permits")
{
    // 5 of 10 taken: 5 permits are left, whatever the new rate.
    gcra faster(rate::per_second(10), 10);
    REQUIRE(faster.try_acquire(5, 0).admitted);
    faster.set_rate(rate::per_second(20), 0);
    CHECK(faster.check(1, 0).remaining == 4);   // after taking 1
    CHECK_FALSE(faster.try_acquire(10, 0).admitted);
    CHECK(faster.try_acquire(5, 0).admitted);
    CHECK_FALSE(faster.try_acquire(1, 0).admitted);

    gcra slower(rate::per_second(10), 10);
    REQUIRE(slower.try_acquire(5, 0).admitted);
    slower.set_rate(rate::per_second(5), 0);
    CHECK(slower.check(1, 0).remaining == 4);
    CHECK(slower.try_acquire(5, 0).admitted);
    auto d = slower.try_acquire(1, 0);
    CHECK_FALSE(d.admitted);
    CHECK(d.retry_after == 200ms);
}

TEST_CASE("gcra: the ends of the int64 clock")
{
    // A fresh bucket is full at the clock's first instants.
    for (std::int64_t start : {i64_min, i64_min + 5, i64_min + 999}) {
        CAPTURE(start);
        gcra g(rate::every(100ns), 10);
        for (int i = 0; i < 10; ++i) {
            CAPTURE(i);
            auto d = g.try_acquire(1, start);
            CHECK(d.admitted);
            CHECK(d.remaining == static_cast<std::uint64_t>(9 - i));
            CHECK(d.reset_after.count() == 100 * (i + 1));
        }
        auto d = g.try_acquire(1, start);
        CHECK_FALSE(d.admitted);
        CHECK(d.retry_after == 100ns);
        CHECK(d.reset_after == 1000ns);
    }
    // A backward step of more than 2^63 ns: the wait is longer than int64 holds.
    gcra back(rate::every(100ns), 10);
    REQUIRE(back.try_acquire(10, i64_max - 1000).admitted);
    auto d = back.try_acquire(1, -1000);
    CHECK_FALSE(d.admitted);
    CHECK(d.retry_after == std::chrono::nanoseconds::max());
    CHECK(d.reset_after == std::chrono::nanoseconds::max());
    CHECK(d.remaining == 0);
    // Full again burst x interval after the last grant, even when that is within burst x
    // interval of INT64_MAX.
    gcra top(rate::every(100ns), 10);
    auto t = top.try_acquire(10, i64_max - 500);
    REQUIRE(t.admitted);
    CHECK(t.reset_after == 1000ns);
    CHECK(top.check(1, i64_max - 450).reset_after == 950ns);
}

TEST_CASE("gcra: threads deciding across the flip of the base admit exactly what the bucket allows")
{
    // Both threads walk the same instants, -4 T to +4 T ns by ns; z crosses 0 on the way,
    // where the state moves to the other half of its range (through the sequence lock).
    // Whatever the interleaving, every grant moves z by T from 12 T before the first
    // instant, and the last instant drains the bucket: exactly burst + 8 grants.
    const std::int64_t T = 16;
    const std::uint64_t burst = 8;
    for (int round = 0; round < 300; ++round) {
        gcra g(rate::every(std::chrono::nanoseconds{T}), burst);
        std::atomic<std::uint64_t> admitted{0};
        std::atomic<int> ready{0};
        auto walk = [&] {
            ready.fetch_add(1);
            while (ready.load() < 2) std::this_thread::yield();
            std::uint64_t mine = 0;
            for (std::int64_t t = -4 * T; t <= 4 * T; ++t)
                for (int k = 0; k < 3; ++k)
                    mine += g.try_acquire(1, t).admitted ? 1 : 0;
            admitted += mine;
        };
        std::thread a(walk), b(walk);
        a.join();
        b.join();
        REQUIRE(admitted.load() == burst + 8);
        REQUIRE(g.empty_at() == 4 * T);
    }
}

TEST_SUITE_END();
