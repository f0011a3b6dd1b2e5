#include <sluice/policy/weighted_counter.hpp>

#include <boost/system/system_error.hpp>
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "model_driver.hpp"
#include "policy_support.hpp"

using namespace std::chrono_literals;
using sluice::error;
using sluice::policy::weighted_counter;

namespace {

using namespace sluice_test;

// The literal weighted formula prev * (w - e) / w + cur <= limit, exact in 128 bits, with
// full window numbers. A clock that steps back, by any amount, keeps counting in the
// newest window that admitted anything, with the previous window at full weight.
struct counter_model {
    std::uint64_t limit;
    std::int64_t w;
    std::optional<i128> k_last;
    std::uint64_t prev_last = 0, cur_last = 0;
    i128 fit = 0;   // the instant a refused decide() found room at

    struct view {
        i128 k, start, e;
        std::uint64_t prev, cur;
    };

    view at(i128 t) const
    {
        i128 k = floor_div(t, w);
        std::uint64_t prev = 0, cur = 0;
        if (k_last) {
            if (k == *k_last) { prev = prev_last; cur = cur_last; }
            else if (k == *k_last + 1) { prev = cur_last; }
            else if (k < *k_last) {
                k = *k_last; prev = prev_last; cur = cur_last;
            }
        }
        i128 start = k * w;
        return {k, start, std::max<i128>(t - start, 0), prev, cur};
    }

    bool fits(const view& v, std::uint64_t n) const
    {
        return i128(v.prev) * (w - v.e) + i128(v.cur + n) * w <= i128(limit) * w;
    }

    sluice::decision decide(std::uint64_t n, std::int64_t t, bool consume)
    {
        sluice::decision d;
        if (n == 0 || n > limit) {
            d.retry_after = std::chrono::nanoseconds::max();
            d.error = n == 0 ? error::invalid_count : error::exceeds_limit;
            return d;
        }
        view v = at(t);
        bool ok = fits(v, n);
        std::uint64_t cur = v.cur + (ok ? n : 0);
        i128 idle = cur ? v.start + 2 * w : v.prev ? v.start + w : i128(t);
        d.reset_after = std::chrono::nanoseconds{clamp64(std::max<i128>(std::min<i128>(idle, i64_max) - t, 0))};
        i128 used = (i128(v.prev) * (w - v.e) + w - 1) / w + cur;
        d.remaining = used >= i128(limit) ? 0 : static_cast<std::uint64_t>(limit - used);
        if (ok) {
            d.admitted = true;
            if (consume) {
                k_last = v.k;
                prev_last = v.prev;
                cur_last = cur;
            }
            return d;
        }
        // Earliest later instant at which it fits: the estimate only falls with time.
        i128 lo = i128(t) + 1, hi = v.start + 2 * w;
        while (lo < hi) {
            i128 mid = lo + (hi - lo) / 2;
            if (fits(at(mid), n)) hi = mid; else lo = mid + 1;
        }
        fit = lo;
        // Not before the clock's end: never.
        d.retry_after = lo >= i64_max ? std::chrono::nanoseconds::max() : std::chrono::nanoseconds{clamp64(lo - t)};
        return d;
    }

    std::int64_t simulate(std::uint64_t n, std::int64_t t, std::uint64_t ahead) const
    {
        counter_model copy = *this;
        for (std::uint64_t i = 0; i <= ahead; ++i) {
            std::uint64_t want = i == ahead ? n : 1;
            for (;;) {
                sluice::decision d = copy.decide(want, t, true);
                if (d.admitted) break;
                if (t == i64_max) return i64_max;
                t = clamp64(i128(t) + d.retry_after.count());
            }
        }
        return t;
    }
};

struct shape {
    std::uint64_t limit;
    std::int64_t window;
};

const shape shapes[] = {{1, 1000}, {5, 1000}, {50, 7}, {3, 1'000'000'000}, {10, 3}, {1000, 1'000'003}, {2, 1}};
const std::int64_t bases[] = {0, -1'000'000'000'000, 3, i64_min + 3'000'000'000, 4'000'000'000'000'000'000};

// Idle gaps of every magnitude: 2^r windows for every r, off by a few windows, and near
// multiples of 2048 windows, so that every wrap of a truncated window number is crossed.
std::int64_t idle_gap(rng& r, std::int64_t window)
{
    i128 windows;
    if (r.next() % 4 == 0) {
        windows = 2048 * r.in(1, 6) + r.in(-10, 10);
    } else {
        int bits = static_cast<int>(r.next() % 64);
        windows = (i128(1) << bits) + r.in(-3, 3);
    }
    if (windows < 1) windows = 1;
    return clamp64(windows * window + r.in(0, window - 1));
}

} // namespace

TEST_SUITE_BEGIN("weighted_counter");

TEST_CASE("weighted_counter matches the weighted formula on random arrivals")
{
    // Admissions re-stamped on a clock that never goes back must fit there too.
    struct run {
        weighted_counter policy;
        counter_model model;
        arrivals shape;
        counter_model mono;
        std::int64_t mono_now = i64_min;

        void admitted(std::uint64_t n, std::int64_t now)
        {
            mono_now = std::max(mono_now, now);
            CHECK(mono.decide(n, mono_now, true).admitted);
        }
        // With permits ahead the prediction is NOT a lower bound (contrary to predict()'s
        // doc): it prices them as one lump at one instant, while one-by-one grants sink
        // into the previous window's decaying weight. Reported; only the exact ahead == 0
        // case is checked against the model.
        void deferred(std::uint64_t n, std::int64_t now, std::uint64_t ahead, const sluice::reservation& got,
                      const sluice::decision&)
        {
            if (ahead != 0) return;
            CHECK(got.at <= model.simulate(n, now, 0));
            CHECK(got.at == clamp64(model.fit));
        }
        std::int64_t any_gap(rng& r) const { return idle_gap(r, model.w); }
    };
    for (const shape& sh : shapes) {
        for (std::int64_t base : bases) {
            for (std::uint64_t seed = 1; seed <= 4; ++seed) {
                INFO("limit ", sh.limit, " window ", sh.window, " base ", base, " seed ", seed);
                arrivals a = arrivals::for_window(sh.limit, sh.window);
                a.idle = 0;
                a.any_idle = 4;   // idle, 1 to 2^63 windows
                a.ends = 1;
                a.any_back = 1;   // a long step back
                a.back = 6;
                run c{weighted_counter(sh.limit, std::chrono::nanoseconds{sh.window}), counter_model{sh.limit, sh.window, {}}, a,
                      counter_model{sh.limit, sh.window, {}}, i64_min};
                rng r{seed * 32452843 + static_cast<std::uint64_t>(base) + sh.limit};
                replay(c, r, base, 3000);
            }
        }
    }
}

TEST_CASE("weighted_counter: weights and boundaries")
{
    weighted_counter c(10, 1000ns);
    CHECK(c.try_acquire(10, 500).admitted);        // window 0 full
    auto d = c.try_acquire(1, 999);
    CHECK_FALSE(d.admitted);
    // In window 1 the 10 weigh (1000 - e) / 1000: one more fits from e = 100.
    CHECK(d.retry_after.count() == 1100 - 999);
    CHECK_FALSE(c.try_acquire(1, 1099).admitted);
    CHECK(c.try_acquire(1, 1100).admitted);
    auto e = c.try_acquire(5, 1500);              // 10 * 0.5 + 1 + 5 = 11 > 10
    CHECK_FALSE(e.admitted);
    CHECK(e.retry_after.count() == 1600 - 1500);
    CHECK(e.remaining == 4);
    CHECK(e.reset_after.count() == 3000 - 1500);
    CHECK(c.try_acquire(4, 1500).admitted);
    // Idle for two windows: empty again.
    CHECK(c.try_acquire(10, 3000).admitted);
}

TEST_CASE("weighted_counter: a backward step keeps the newest window at full weight")
{
    weighted_counter c(4, 1000ns);
    CHECK(c.try_acquire(4, 500).admitted);
    CHECK(c.try_acquire(1, 1500).admitted);        // 4 * 0.5 + 1 = 3
    // Back into window 0, and further: still window 1 with the previous at full weight.
    for (std::int64_t t : {std::int64_t{900}, std::int64_t{-2500}}) {
        CAPTURE(t);
        auto d = c.try_acquire(1, t);
        CHECK_FALSE(d.admitted);
        // 4 * (1000 - e) + 2 * 1000 <= 4 * 1000 from e = 500 on.
        CHECK(d.retry_after.count() == 1500 - t);
    }
    CHECK_FALSE(c.try_acquire(1, 1499).admitted);
    CHECK(c.try_acquire(1, 1500).admitted);
}

TEST_CASE("weighted_counter: first call anywhere, extremes")
{
    for (std::int64_t start : {std::int64_t{0}, std::int64_t{-1}, std::int64_t{-7'000'000'000'000'000'000},
                               i64_min, i64_min + 5, i64_max - 5000}) {
        CAPTURE(start);
        weighted_counter c(3, 1000ns);
        CHECK(c.try_acquire(3, start).admitted);
        auto d = c.try_acquire(1, start);
        CHECK_FALSE(d.admitted);
        CHECK(d.retry_after.count() > 0);
    }
    weighted_counter big(weighted_counter::max_limit, 1s);
    CHECK(big.try_acquire(weighted_counter::max_limit, 0).admitted);
    CHECK_FALSE(big.try_acquire(1, 1'000'000'000).admitted);
    // limit * e >= window from e = 15 ns on (limit 2^26 - 1).
    CHECK_FALSE(big.try_acquire(1, 1'000'000'014).admitted);
    CHECK(big.try_acquire(1, 1'000'000'015).admitted);
    weighted_counter year(1, std::chrono::hours(24 * 365));
    CHECK(year.try_acquire(1, 0).admitted);
    CHECK(year.try_acquire(1, 1).retry_after.count() == 2 * 365LL * 86400 * 1'000'000'000 - 1);
}

TEST_CASE("weighted_counter: idle for 128 or more windows forgets old counts")
{
    // The window number kept 8 bits and then 12: a long idle gap must not read as a
    // backward step (with 12 bits, a gap of 4088 to 4097 windows rejected for up to 10).
    for (std::int64_t idle : {2, 9, 128, 200, 255, 256, 257, 1000, 2047, 2048, 2049, 4000, 4098, 100000}) {
        CAPTURE(idle);
        weighted_counter c(10, 1000ns);
        CHECK(c.try_acquire(10, 0).admitted);
        CHECK(c.try_acquire(10, idle * 1000).admitted);
    }
}

TEST_CASE("weighted_counter: no stale count after an idle gap of any length")
{
    std::vector<i128> gaps;
    for (i128 m : {1, 2, 3, 4, 1 << 20})
        for (int off = -12; off <= 12; ++off) gaps.push_back(2048 * m + off);
    for (int bits : {31, 32, 33, 62})
        for (int off = -3; off <= 3; ++off) gaps.push_back((i128(1) << bits) + off);
    for (std::int64_t w : {std::int64_t{1}, std::int64_t{1000}}) {
        for (std::int64_t start : {std::int64_t{0}, std::int64_t{-1} << 62, i64_min}) {
            for (i128 gap : gaps) {
                i128 later = (floor_div(start, w) + gap) * w;
                if (later > i64_max - 20 * w) continue;
                CAPTURE(w);
                CAPTURE(start);
                CAPTURE(static_cast<std::int64_t>(gap));
                weighted_counter c(10, std::chrono::nanoseconds{w});
                CHECK(c.try_acquire(10, start).admitted);
                // Five in the middle of each of the next 20 windows: the estimate is at most
                // 5 * (w - e) / w + 5 <= 10, so all fit unless a stale count is read.
                int admitted = 0;
                for (std::int64_t i = 0; i < 20; ++i)
                    admitted += c.try_acquire(5, static_cast<std::int64_t>(later + i * w + w / 2)).admitted;
                CHECK(admitted == 20);
            }
        }
    }
}

TEST_CASE("weighted_counter: a step back of any length counts in the newest window")
{
    for (std::int64_t back : {std::int64_t{9}, std::int64_t{100}, std::int64_t{4095}, std::int64_t{4096},
                              std::int64_t{4097}, std::int64_t{1} << 31, std::int64_t{1} << 32, std::int64_t{1} << 40}) {
        CAPTURE(back);
        weighted_counter c(4, 1000ns);
        CHECK(c.try_acquire(4, 500).admitted);
        auto d = c.try_acquire(1, 500 - back * 1000);
        CHECK_FALSE(d.admitted);
        // Window 0 full at full weight: free from window 1 on, at e = 250.
        CHECK(d.retry_after.count() == 1250 - (500 - back * 1000));
    }
}

TEST_CASE("weighted_counter: bad input, reserve, set_limit")
{
    CHECK(thrown([] { weighted_counter c(0, 1s); }) == error::invalid_limit);
    CHECK(thrown([] { weighted_counter c(weighted_counter::max_limit + 1, 1s); }) == error::invalid_limit);
    CHECK(thrown([] { weighted_counter c(1, 0s); }) == error::invalid_duration);
    weighted_counter c(4, 1000ns);
    CHECK(c.try_acquire(0, 0).error == error::invalid_count);
    CHECK(c.try_acquire(5, 0).error == error::exceeds_limit);
    CHECK(c.reserve(0, 0, 0).error == error::invalid_count);
    CHECK(c.reserve(5, 0, 0).error == error::exceeds_limit);
    auto a = c.reserve(4, 0, 0);
    CHECK(a.admitted);
    CHECK(a.at == 0);
    auto b = c.reserve(2, 100, 10'000);
    CHECK_FALSE(b.admitted);
    CHECK_FALSE(b.error);
    CHECK(b.at == 1500);
    CHECK(c.reserve(2, 100, 1399).error == error::timed_out);
    CHECK(c.check(2, 1500).admitted);
    CHECK(thrown([&] { c.set_limit(0); }) == error::invalid_limit);
    c.set_limit(6);
    CHECK(c.limit() == 6);
    CHECK(c.try_acquire(2, 100).admitted);
    CHECK_FALSE(c.try_acquire(1, 100).admitted);
}

TEST_SUITE_END();
