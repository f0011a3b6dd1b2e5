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
#include <vector>

#include "model_driver.hpp"
#include "policy_support.hpp"
#include "rng.hpp"

using namespace std::chrono_literals;
using sluice::error;
using sluice::rate;
using sluice::policy::gcra;

namespace {

using namespace sluice_test;

constexpr std::int64_t ns_max = i64_max;

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

    // Reconfiguration counts in permits, at t. The credit is tau - (tat - t) ns at the old
    // interval (negative: a debt, which stays a debt of the same permits). A bucket keeps
    // the permits it holds, capped by the new burst, and the catch-up of a caller late on
    // its schedule (tat > t), capped by the new slack. An idle bucket (tat <= t) holds its
    // burst and no catch-up, and when that is the whole new burst it is idle again (decides
    // as a new bucket). Both parts are rescaled to the new interval (towards zero, to
    // whole ns); a debt past the end of the clock stays there.
    void reconfigure(i128 new_T, std::uint64_t new_burst, i128 new_slack, std::int64_t t)
    {
        bool idle = tat <= t;
        i128 full = i128(burst) * T;
        i128 new_full = i128(new_burst) * new_T;
        i128 new_tau = new_full + new_slack;
        i128 credit = idle ? full : tau - (tat - t);
        i128 held = std::min(credit, full);
        i128 late = (credit - held) * new_T / T;
        held = std::min(held * new_T / T, new_full);
        i128 nt = i128(t) + new_tau - (held + late);
        if (held + late >= new_tau || (idle && held == new_full)) nt = t;
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

// Permits granted at one instant: try_acquire(1, t) until one is refused.
std::uint64_t at_once(gcra& g, std::int64_t t)
{
    std::uint64_t k = 0;
    while (k < 1'000'000 && g.try_acquire(1, t).admitted) ++k;
    return k;
}

// g decides from t on as `ref` (a new bucket, maybe fed a grant at t): the same arrivals
// (each instant drained, then gaps of a part of an interval up to several slacks) get the
// same decisions.
void decides_as(gcra& g, gcra& ref, std::int64_t t)
{
    const std::int64_t T = g.interval_ns(), S = g.slack().count();
    const std::int64_t gaps[] = {0, T / 2, T, S / 2, S, S + T, 3 * T / 2, 10 * T, S + 10 * T, T - 1, S - 1};
    for (int round = 0; round < 3; ++round) {
        for (std::int64_t gap : gaps) {
            t += std::max<std::int64_t>(gap, 0);
            CAPTURE(t);
            for (int i = 0; i < 100'000; ++i) {
                sluice::decision want = ref.try_acquire(1, t);
                check_same(g.try_acquire(1, t), want);
                if (!want.admitted) break;
            }
        }
    }
}

// What a bucket holds at t, read from its state: idle (it decides as a new bucket: its
// burst, no slack credit), or the lag of z behind t (negative: a debt), exact also where
// empty_at() saturates.
struct holding {
    bool idle;
    i128 lag;
};

holding held(const gcra& g, std::int64_t t)
{
    // idle_at() = z + tau, saturated: exact below INT64_MAX; at it z itself is exact.
    std::int64_t idle_at = g.idle_at(t);
    i128 tau = i128(g.burst()) * g.interval_ns() + g.slack().count();
    if (idle_at < i64_max && idle_at <= t) return {true, 0};
    i128 z = idle_at < i64_max ? i128(idle_at) - tau : i128(g.empty_at());
    return {z + tau <= t, i128(t) - z};
}

// Permits granted at once at t, from the state.
std::uint64_t grantable(const gcra& g, std::int64_t t)
{
    holding h = held(g, t);
    if (h.idle) return g.burst();
    return h.lag <= 0 ? 0 : static_cast<std::uint64_t>(h.lag / g.interval_ns());
}

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

// The arrivals of a random run on a bucket like m: counts mostly 1, sometimes 0 or beyond
// the burst; time mostly in small steps (a burst at one instant, a part of an interval),
// sometimes idle for any length, or back.
arrivals random_arrivals(const gcra_model& m)
{
    arrivals a;
    a.limit = m.burst;
    a.over_by = 3;
    a.one = 66;
    a.unit = 2 * static_cast<std::int64_t>(std::min<i128>(m.T, i128(1) << 30));
    a.span = clamp64(std::min<i128>(m.tau, i128(1) << 40));
    a.still = 30;
    a.medium = 15;
    a.idle = 7;
    a.any_idle = 2;
    a.back = 6;
    return a;
}

} // namespace

TEST_SUITE_BEGIN("gcra");

TEST_CASE("gcra matches the textbook model on random arrivals")
{
    struct run {
        gcra policy;
        gcra_model model;
        arrivals shape;
        // Admitted requests re-stamped on a clock that never goes back: they must conform
        // to GCRA there too (a backward step never admits extra).
        gcra_model mono;
        std::int64_t mono_now = i64_min;
        std::uint64_t admitted_n = 0;

        void admitted(std::uint64_t n, std::int64_t now)
        {
            admitted_n += n;
            mono_now = std::max(mono_now, now);
            CHECK(mono.decide(n, mono_now, true).admitted);
        }
        // Queued reservations are part of the state the re-stamped check sees.
        void reserved(std::uint64_t, std::int64_t, const sluice::reservation& got)
        {
            if (got.admitted) mono.tat = model.tat;
        }
        void other(rng& r, std::uint64_t, std::int64_t now)
        {
            std::uint64_t k = 1 + r.below(model.burst);
            CHECK(policy.refund(k, now) == model.refund(k, now));
            // A refund fills the bucket as of its own `now`, even one behind the newest
            // instant seen: restart the re-stamped check from there (before the state's
            // schedule lapses at tat, after which slack gives no credit).
            mono.tat = model.tat;
            mono_now = clamp64(std::min<i128>(now, model.tat - 1));
        }
        void after(std::int64_t)
        {
            REQUIRE(policy.empty_at() == model.empty_at());
            // Without refunds the re-stamped run is the same run: the state already knows
            // the newest instant it admitted at.
            REQUIRE(mono.tat == model.tat);
        }
    };
    for (const shape& sh : shapes) {
        for (std::int64_t base : bases) {
            for (std::uint64_t seed = 1; seed <= 4; ++seed) {
                INFO("shape ", std::string(sh.name), " base ", base, " seed ", seed);
                gcra_model m(sh.interval, sh.burst, sh.slack);
                run c{gcra(rate::every(std::chrono::nanoseconds{sh.interval}), sh.burst, std::chrono::nanoseconds{sh.slack}), m,
                      random_arrivals(m), m, i64_min, 0};
                c.shape.tries = 70;
                c.shape.checks = 10;
                c.shape.reserves = 12;   // and 8 refunds
                c.shape.no_wait = 50;
                c.shape.max_wait = 3 * sh.interval * static_cast<std::int64_t>(sh.burst);
                rng r{seed * 7919 + static_cast<std::uint64_t>(base)};
                replay(c, r, base, 3000);
                CHECK(c.admitted_n > 0);
            }
        }
    }
}

TEST_CASE("gcra matches virtual scheduling across reconfiguration and the whole int64 clock")
{
    // Intervals a reconfiguration picks from: 1 ns up to a year (with bursts that fit).
    static constexpr std::int64_t intervals[] = {1, 3, 7, 100, 1000, 999'983, 1'000'000'000, 86'400'000'000'000,
                                                 31'536'000'000'000'000};
    struct run {
        gcra policy;
        gcra_model model;
        arrivals shape;
        std::uint64_t admitted_n = 0;
        int flips = 0;
        std::int64_t last;

        void admitted(std::uint64_t n, std::int64_t) { admitted_n += n; }
        // Refunds (5 in 27) and changes of rate (10), burst (8) and slack (4).
        void other(rng& r, std::uint64_t, std::int64_t now)
        {
            INFO("T ", static_cast<std::int64_t>(model.T), " burst ", model.burst, " slack ", static_cast<std::int64_t>(model.slack));
            int op = static_cast<int>(r.below(27));
            if (op < 5) {
                std::uint64_t k = 1 + r.below(model.burst);
                CHECK(policy.refund(k, now) == model.refund(k, now));
            } else if (op < 15) {
                std::int64_t T = intervals[r.below(std::size(intervals))];
                CAPTURE(T);
                if (gcra_model::valid(T, model.burst, model.slack)) {
                    auto f = policy.set_rate(rate::every(std::chrono::nanoseconds{T}), now);
                    CHECK(f.first == T);
                    CHECK(f.second == static_cast<std::int64_t>(model.T));
                    model.reconfigure(T, model.burst, model.slack, now);
                } else {
                    CHECK(thrown([&] { policy.set_rate(rate::every(std::chrono::nanoseconds{T}), now); }) == error::invalid_limit);
                }
            } else if (op < 23) {
                std::uint64_t b = 1 + r.below(r.chance(50) ? 4 : 100);
                CAPTURE(b);
                if (gcra_model::valid(model.T, b, model.slack)) {
                    policy.set_burst(b, now);
                    model.reconfigure(model.T, b, model.slack, now);
                } else {
                    CHECK(thrown([&] { policy.set_burst(b, now); }) == error::invalid_limit);
                }
            } else {
                std::int64_t sl = r.chance(50) ? 0 : r.in(0, clamp64(4 * model.T));
                CAPTURE(sl);
                if (gcra_model::valid(model.T, model.burst, sl)) {
                    policy.set_slack(std::chrono::nanoseconds{sl}, now);
                    model.reconfigure(model.T, model.burst, sl, now);
                } else {
                    CHECK(thrown([&] { policy.set_slack(std::chrono::nanoseconds{sl}, now); }) == error::invalid_duration);
                }
            }
            shape = random_arrivals(model);
            reshape();
        }
        // The operations' mix, and waits up to 3 tau (10 % forever); time also to either
        // end of the clock and around 0 (steps of more than 2^63 ns both ways).
        void reshape()
        {
            shape.tries = 55;
            shape.checks = 8;
            shape.reserves = 10;
            shape.forever = 10;
            shape.max_wait = clamp64(3 * model.tau);
            shape.ends = 6;
            shape.near_zero = 2;
        }
        void after(std::int64_t now)
        {
            INFO("T ", static_cast<std::int64_t>(model.T), " burst ", model.burst, " slack ", static_cast<std::int64_t>(model.slack));
            REQUIRE(policy.burst() == model.burst);
            REQUIRE(policy.interval_ns() == static_cast<std::int64_t>(model.T));
            REQUIRE(policy.empty_at() == model.empty_at());
            REQUIRE(policy.idle_at(now) == clamp64(model.tat));
            REQUIRE(policy.reset_after(now).count() == model.reset(model.tat, now));
            flips += (last < 0) != (now < 0) ? 1 : 0;
            last = now;
        }
    };
    for (const shape& sh : shapes) {
        for (std::uint64_t seed = 1; seed <= 12; ++seed) {
            INFO("shape ", std::string(sh.name), " seed ", seed);
            gcra_model m(sh.interval, sh.burst, sh.slack);
            std::int64_t base = bases[seed % std::size(bases)];
            run c{gcra(rate::every(std::chrono::nanoseconds{sh.interval}), sh.burst, std::chrono::nanoseconds{sh.slack}), m,
                  random_arrivals(m), 0, 0, base};
            c.reshape();
            rng r{seed * 104729 + static_cast<std::uint64_t>(sh.interval)};
            replay(c, r, base, 4000);
            CHECK(c.admitted_n > 0);
            CHECK(c.flips > 0);
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

TEST_CASE("gcra: reconfiguring an idle or new bucket lets no burst through (slack is catch-up, not capacity)")
{
    // An idle bucket holds its burst and no slack credit; after a change it decides as a
    // new bucket with the new settings (the last case: a grown burst is not granted at
    // once, it refills from what the bucket held). Each case on a new bucket and on one
    // used once long before.
    struct change_case {
        const char* name;
        sluice::rate r;
        std::uint64_t burst;
        std::chrono::nanoseconds slack;
        void (*change)(gcra&, std::int64_t);
        std::uint64_t at_once;   // at the instant of the change
    };
    const change_case cases[] = {
        {"leaky 10,000/s (1 ms slack), set_rate(20,000/s)", rate::per_second(10'000), 1, 1ms,
         [](gcra& g, std::int64_t t) { g.set_rate(rate::per_second(20'000), t); }, 1},
        {"leaky 100/s (25 ms slack), set_rate(200/s)", rate::per_second(100), 1, 25ms,
         [](gcra& g, std::int64_t t) { g.set_rate(rate::per_second(200), t); }, 1},
        {"leaky 10,000/s (1 ms slack), set_slack(2 ms)", rate::per_second(10'000), 1, 1ms,
         [](gcra& g, std::int64_t t) { g.set_slack(2ms, t); }, 1},
        {"leaky 10,000/s (1 ms slack), set_rate(1,000/s)", rate::per_second(10'000), 1, 1ms,
         [](gcra& g, std::int64_t t) { g.set_rate(rate::per_second(1'000), t); }, 1},
        {"leaky 10,000/s (1 ms slack), the same rate", rate::per_second(10'000), 1, 1ms,
         [](gcra& g, std::int64_t t) { g.set_rate(rate::per_second(10'000), t); }, 1},
        {"token 10/s x 5, set_rate(20/s)", rate::per_second(10), 5, 0ns,
         [](gcra& g, std::int64_t t) { g.set_rate(rate::per_second(20), t); }, 5},
        {"gcra(10 ms, 3, 25 ms), set_burst(2)", rate::every(10ms), 3, 25ms,
         [](gcra& g, std::int64_t t) { g.set_burst(2, t); }, 2},
        {"gcra(10 ms, 1, 25 ms), set_burst(2)", rate::every(10ms), 1, 25ms,
         [](gcra& g, std::int64_t t) { g.set_burst(2, t); }, 1},
    };
    const std::int64_t t = 10'000'000'000;   // 10 s after the grant of a used bucket
    for (const change_case& c : cases) {
        for (bool used : {false, true}) {
            CAPTURE(std::string(c.name));
            CAPTURE(used);
            auto make = [&] {
                auto g = std::make_unique<gcra>(c.r, c.burst, c.slack);
                if (used) REQUIRE(g->try_acquire(1, 0).admitted);
                c.change(*g, t);
                return g;
            };
            // What a new bucket with the settings in force grants: a grown burst counts
            // the permits beyond the old one as taken at the change.
            auto reference = [&](const gcra& g) {
                auto ref = std::make_unique<gcra>(g.rate(), g.burst(), g.slack());
                if (g.burst() > c.burst) REQUIRE(ref->try_acquire(g.burst() - c.burst, t).admitted);
                return ref;
            };
            auto g = make();
            CHECK(at_once(*g, t) == c.at_once);
            // The same from the change on, probed at once or only later (just under 1 ms,
            // 10 ms): no slack credit builds up while the bucket stays idle.
            for (std::int64_t later : {std::int64_t{0}, std::int64_t{999'000}, std::int64_t{10'000'000}}) {
                CAPTURE(later);
                auto h = make();
                auto ref = reference(*h);
                decides_as(*h, *ref, t + later);
            }
        }
    }
}

TEST_CASE("gcra: set_rate, set_burst and set_slack count in permits around now (debt kept, slack credit only when late)")
{
    const std::int64_t T = 1000;
    // A debt of 2 permits (two reserved ahead) stays 2 permits at any new rate, burst or
    // slack.
    gcra g(rate::every(std::chrono::nanoseconds{T}), 1, std::chrono::nanoseconds{5 * T});
    REQUIRE(g.try_acquire(1, 0).admitted);
    REQUIRE(g.reserve(1, 0, 10 * T).admitted);
    REQUIRE(g.reserve(1, 0, 10 * T).admitted);
    REQUIRE(g.empty_at() == 2 * T);   // slots T and 2 T reserved, the next one 3 T
    g.set_rate(rate::every(std::chrono::nanoseconds{2 * T}), 0);
    CHECK(g.empty_at() == 4 * T);
    g.set_slack(std::chrono::nanoseconds{T}, 0);
    CHECK(g.empty_at() == 4 * T);
    g.set_burst(3, 0);
    CHECK(g.empty_at() == 4 * T);
    CHECK(g.predict(1, 0) == 6 * T);
    // A caller late on its schedule keeps its catch-up across a change of rate, in
    // permits, capped by the slack: 2 T late at interval T is 2 permits, 4 at T / 2.
    gcra late(rate::every(std::chrono::nanoseconds{T}), 1, std::chrono::nanoseconds{5 * T});
    REQUIRE(late.try_acquire(1, 0).admitted);          // the schedule: T, 2 T, ...
    late.set_rate(rate::every(std::chrono::nanoseconds{T / 2}), 3 * T);
    CHECK(late.empty_at() == 3 * T - 3 * T / 2);       // 3 slots due (T, 2 T, 3 T), each now T / 2
    CHECK(at_once(late, 3 * T) == 3);
    CHECK_FALSE(late.try_acquire(1, 3 * T + T / 2 - 1).admitted);
    CHECK(late.try_acquire(1, 3 * T + T / 2).admitted);
    // Shrinking the slack caps the catch-up; beyond it the schedule restarts as a new one.
    gcra capped(rate::every(std::chrono::nanoseconds{T}), 1, std::chrono::nanoseconds{5 * T});
    REQUIRE(capped.try_acquire(1, 0).admitted);
    capped.set_slack(std::chrono::nanoseconds{T}, 4 * T);   // 3 T late, more than T
    CHECK(at_once(capped, 4 * T) == 1);
    // Shrinking the burst of a full bucket with a large slack leaves it full, not in catch-up.
    gcra shrink(rate::every(std::chrono::nanoseconds{T}), 10, std::chrono::nanoseconds{8 * T});
    REQUIRE(shrink.try_acquire(10, 0).admitted);
    shrink.set_burst(3, 10 * T);                        // full again at 10 T, on schedule
    CHECK(at_once(shrink, 10 * T) == 3);
}

TEST_CASE("gcra: random reconfigurations and idle gaps never add permits; debts stay; an idle bucket decides as a new one")
{
    // Long random runs of changes of rate, burst and slack (slack up to 30 intervals: the
    // leaky buckets of the issue), idle gaps of every length, grants, drains and
    // reservations into debt, at instants near 0 and near both ends of int64. At every
    // change: the permits granted at once do not grow (the bug: 11 where it held 1), it
    // keeps at least what it held (capped by the new burst), and a debt stays a debt of
    // the same permits at the new interval. Whenever the bucket is idle (and from every
    // change of an idle bucket on), it decides exactly as a new bucket with the settings
    // in force, fed the same arrivals (a grown burst: the permits beyond the old one taken
    // at the change).
    const std::int64_t intervals[] = {1, 7, 1000, 50'000, 100'000, 5'000'000, 10'000'000, 1'000'000'000,
                                      31'536'000'000'000'000};
    const std::int64_t bases[] = {0, -5'000'000'000, i64_min, i64_min + 1'000'000, i64_max - 4'000'000'000'000'000'000,
                                  i64_max - 1'000'000'000};
    std::uint64_t changes = 0, idle_changes = 0, debt_changes = 0, compared = 0;
    for (std::uint64_t seed = 1; seed <= 20; ++seed) {
        rng r{seed * 0x2545F4914F6CDD1DULL};
        auto pick_slack = [&](std::int64_t T) -> std::int64_t {
            int k = static_cast<int>(r.next() % 4);
            if (k == 0) return 0;
            if (k == 1) return r.in(0, T);
            return clamp64(std::min<i128>(i128(T) * r.in(1, 30), i64_max / 4));
        };
        // A new bucket: a leaky one (burst 1) of a random interval and slack.
        auto make = [&] {
            std::int64_t T = intervals[r.next() % std::size(intervals)];
            return std::make_unique<gcra>(rate::every(std::chrono::nanoseconds{T}), 1, std::chrono::nanoseconds{pick_slack(T)});
        };
        std::unique_ptr<gcra> g = make();
        auto fresh = [&] { return std::make_unique<gcra>(g->rate(), g->burst(), g->slack()); };
        std::unique_ptr<gcra> ref = fresh();   // set while g decides as a new bucket would
        std::int64_t now = bases[seed % std::size(bases)];
        for (int step = 0; step < 5000; ++step) {
            INFO("seed ", seed, " step ", step, " now ", now, " T ", g->interval_ns(), " burst ", g->burst(), " slack ",
                 g->slack().count());
            int op = static_cast<int>(r.next() % 100);
            if (op < 30) {
                std::int64_t T0 = g->interval_ns();
                std::uint64_t B0 = g->burst();
                holding before = held(*g, now);
                std::uint64_t k0 = grantable(*g, now);
                std::int64_t T1 = T0;
                std::uint64_t B1 = B0;
                std::int64_t S1 = g->slack().count();
                int kind = static_cast<int>(r.next() % 3);
                if (kind == 0) T1 = intervals[r.next() % std::size(intervals)];
                if (kind == 1) B1 = r.chance(50) ? 1 : 1 + r.next() % (r.chance(50) ? 4 : 100);
                if (kind == 2) S1 = pick_slack(T0);
                CAPTURE(T1);
                CAPTURE(B1);
                CAPTURE(S1);
                if (!gcra_model::valid(T1, B1, S1)) continue;
                if (kind == 0) g->set_rate(rate::every(std::chrono::nanoseconds{T1}), now);
                if (kind == 1) g->set_burst(B1, now);
                if (kind == 2) g->set_slack(std::chrono::nanoseconds{S1}, now);
                ++changes;
                std::uint64_t k1 = grantable(*g, now);
                CHECK(k1 <= k0);
                if (!before.idle && before.lag <= 0) {
                    // A debt (lag <= 0): the same permits at the new interval, towards now.
                    ++debt_changes;
                    i128 z = std::min<i128>(i128(now) - before.lag * T1 / T0, i64_max);
                    CHECK(g->empty_at() == clamp64(z));
                } else {
                    std::uint64_t had = before.idle ? B0 : std::min<std::uint64_t>(B0, static_cast<std::uint64_t>(before.lag / T0));
                    CHECK(k1 >= std::min(had, B1));
                }
                if (before.idle) {
                    ++idle_changes;
                    ref = fresh();
                    if (B1 > B0) REQUIRE(ref->try_acquire(B1 - B0, now).admitted);
                } else {
                    ref.reset();
                }
            } else if (op < 75) {
                // Arrivals: a drain at one instant, or a few permits.
                bool drain = r.chance(40);
                std::uint64_t n = drain ? 1 : 1 + r.next() % g->burst();
                for (int i = 0; i < (drain ? 1000 : 1); ++i) {
                    sluice::decision got = g->try_acquire(n, now);
                    if (ref) {
                        check_same(got, ref->try_acquire(n, now));
                        ++compared;
                    }
                    if (!got.admitted) break;
                }
            } else if (op < 82) {
                std::uint64_t n = 1 + r.next() % g->burst();
                std::int64_t max_wait = r.in(0, clamp64(5 * (i128(g->burst()) * g->interval_ns() + g->slack().count())));
                sluice::reservation got = g->reserve(n, now, max_wait);
                if (ref) {
                    sluice::reservation want = ref->reserve(n, now, max_wait);
                    CHECK(got.admitted == want.admitted);
                    CHECK(got.at == want.at);
                    CHECK(got.error == want.error);
                }
            }
            // Time: forward only (a bucket idle at t decides as a new one from t on), by
            // nothing, a part of an interval, about the slack, past idle, any length, or to
            // the end of the clock; now and then back to the start of a run (a new check).
            i128 tau = i128(g->burst()) * g->interval_ns() + g->slack().count();
            std::int64_t span = clamp64(std::min<i128>(3 * tau, i128(1) << 62));
            int k = static_cast<int>(r.next() % 100);
            i128 dt = 0;
            if (k < 15) dt = 0;
            else if (k < 35) dt = r.in(0, g->interval_ns());
            else if (k < 50) dt = r.in(0, clamp64(g->slack().count() + g->interval_ns()));
            else if (k < 78) dt = r.in(clamp64(tau), std::max(span, clamp64(tau)));
            else if (k < 90) dt = (i128(1) << (r.next() % 63)) + r.in(0, 3);
            else if (k < 92) dt = std::max<i128>(0, i128(i64_max) - r.in(0, span) - now);
            if (k >= 96) {
                // A new run: a new bucket at another instant (a debt pushed past the end of
                // the clock is never repaid).
                now = bases[r.next() % std::size(bases)];
                g = make();
                ref = fresh();
            } else {
                now = clamp64(i128(now) + dt);
            }
            if (!ref && held(*g, now).idle) ref = fresh();
        }
    }
    // Every kind of change happened, many times over.
    CHECK(changes > 20'000);
    CHECK(idle_changes > 5000);
    CHECK(debt_changes > 5000);
    CHECK(compared > 100'000);
}

TEST_SUITE_END();

TEST_CASE("gcra_step::quotient is the integer quotient: at multiples and one either side, near 2^53, over random pairs")
{
    using sluice::detail::gcra_step;
    const std::int64_t big = std::int64_t{1} << 53;
    std::vector<std::int64_t> intervals{1, 2, 3, 7, 1000, 999'999'937, big - 1, big, big + 1,
                                        std::numeric_limits<std::int64_t>::max()};
    std::vector<std::int64_t> rooms{0, 1, big - 2, big - 1, big, big + 1, std::numeric_limits<std::int64_t>::max()};
    for (std::int64_t i : intervals)
        for (std::int64_t k : {0LL, 1LL, 2LL, 3LL, 1000LL, 4503599627370495LL, 9007199254740991LL})
            for (std::int64_t d : {-1LL, 0LL, 1LL}) {
                const sluice::detail::int128 r = sluice::detail::int128(i) * k + d;
                if (r >= 0 && r <= std::numeric_limits<std::int64_t>::max())
                    rooms.push_back(static_cast<std::int64_t>(r));
            }
    sluice_test::rng rng{11};
    for (int j = 0; j < 200'000; ++j) {
        const int bits_i = static_cast<int>(rng() % 63), bits_r = static_cast<int>(rng() % 63);
        const std::int64_t i = 1 + static_cast<std::int64_t>(rng() & ((std::uint64_t{1} << bits_i) - 1));
        const std::int64_t r = static_cast<std::int64_t>(rng() & ((std::uint64_t{1} << bits_r) - 1));
        INFO("room ", r, " interval ", i);
        REQUIRE(gcra_step::quotient(r, i) == r / i);
    }
    for (std::int64_t i : intervals)
        for (std::int64_t r : rooms) {
            INFO("room ", r, " interval ", i);
            REQUIRE(gcra_step::quotient(r, i) == r / i);
        }
}
