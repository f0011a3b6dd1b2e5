#include <sluice/policy/sliding_log.hpp>

#include <boost/system/system_error.hpp>
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <limits>

#include "model_driver.hpp"
#include "policy_support.hpp"

using namespace std::chrono_literals;
using sluice::error;
using sluice::policy::sliding_log;

namespace {

using namespace sluice_test;

// Every admitted permit's timestamp, counted literally. A clock that steps back stamps
// permits at the newest instant seen.
struct log_model {
    std::uint64_t limit;
    std::int64_t w;
    std::deque<i128> stamps;   // non-decreasing

    std::uint64_t live(i128 t) const
    {
        return static_cast<std::uint64_t>(std::count_if(stamps.begin(), stamps.end(), [&](i128 s) { return s > t - w; }));
    }

    sluice::decision decide(std::uint64_t n, std::int64_t t, bool consume)
    {
        sluice::decision d;
        if (n == 0 || n > limit) {
            d.retry_after = std::chrono::nanoseconds::max();
            d.error = n == 0 ? error::invalid_count : error::exceeds_limit;
            return d;
        }
        std::uint64_t in_window = live(t);
        std::uint64_t free = in_window >= limit ? 0 : limit - in_window;
        if (in_window + n <= limit) {
            d.admitted = true;
            d.remaining = free - n;
            if (consume) {
                i128 stamp = stamps.empty() ? i128(t) : std::max(stamps.back(), i128(t));
                for (std::uint64_t i = 0; i < n; ++i) stamps.push_back(stamp);
                // Behind the newest `limit` stamps, older ones can never decide anything again.
                while (stamps.size() > 2 * limit) stamps.pop_front();
            }
        } else {
            d.remaining = free;
            // Granted once at most limit - n stamps remain in the window: when the
            // (limit - n + 1)-th newest stamp leaves it.
            i128 s = stamps[stamps.size() - (limit - n + 1)];
            i128 at = s + w;
            d.retry_after = std::chrono::nanoseconds{at >= i64_max ? i64_max : clamp64(at - t)};
        }
        i128 newest = stamps.empty() ? i128(i64_min) : stamps.back();
        if (d.admitted && !consume) newest = std::max(newest, i128(t));
        d.reset_after = std::chrono::nanoseconds{clamp64(std::max<i128>(std::min<i128>(newest + w, i64_max) - t, 0))};
        return d;
    }

    std::int64_t simulate(std::uint64_t n, std::int64_t t, std::uint64_t ahead) const
    {
        log_model copy = *this;
        for (std::uint64_t i = 0; i <= ahead; ++i) {
            std::uint64_t want = i == ahead ? n : 1;
            for (;;) {
                sluice::decision d = copy.decide(want, t, true);
                if (d.admitted) break;
                if (d.retry_after == std::chrono::nanoseconds::max()) return i64_max;
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

const shape shapes[] = {{1, 1000}, {5, 1000}, {50, 7}, {3, 1'000'000'000}, {200, 1}};
const std::int64_t bases[] = {0, -1'000'000'000'000, 3, i64_max - 3'000'000'000, i64_min + 3'000'000'000};

} // namespace

TEST_SUITE_BEGIN("sliding_log");

TEST_CASE("sliding_log matches a literal timestamp log on random arrivals")
{
    // Admissions re-stamped on a clock that never goes back: never more than limit in
    // any window there.
    struct run {
        sliding_log policy;
        log_model model;
        arrivals shape;
        std::deque<std::int64_t> mono;

        void admitted(std::uint64_t n, std::int64_t now)
        {
            std::int64_t t = mono.empty() ? now : std::max(mono.back(), now);
            for (std::uint64_t i = 0; i < n; ++i) mono.push_back(t);
            while (!mono.empty() && mono.front() <= t - model.w) mono.pop_front();
            CHECK(mono.size() <= model.limit);
        }
        // A prediction no later than reality.
        void deferred(std::uint64_t n, std::int64_t now, std::uint64_t ahead, const sluice::reservation& got,
                      const sluice::decision&)
        {
            CHECK(got.at <= model.simulate(n, now, ahead));
        }
    };
    for (const shape& sh : shapes) {
        for (std::int64_t base : bases) {
            for (std::uint64_t seed = 1; seed <= 4; ++seed) {
                INFO("limit ", sh.limit, " window ", sh.window, " base ", base, " seed ", seed);
                arrivals a = arrivals::for_window(sh.limit, sh.window);
                a.idle = 2;
                a.any_idle = 2;
                // Within one window of INT64_MIN a new log still counts its initial stamps
                // ("first call anywhere, extremes"): the model starts empty, so stay out.
                a.earliest = i64_min + sh.window;
                run c{sliding_log(sh.limit, std::chrono::nanoseconds{sh.window}), log_model{sh.limit, sh.window, {}}, a, {}};
                rng r{seed * 15485863 + static_cast<std::uint64_t>(base) + sh.limit};
                replay(c, r, base, 3000);
            }
        }
    }
}

TEST_CASE("sliding_log: the strong guarantee across a fixed-window boundary")
{
    sliding_log l(4, 1000ns);
    CHECK(l.try_acquire(4, 999).admitted);
    auto d = l.try_acquire(1, 1000);
    CHECK_FALSE(d.admitted);
    CHECK(d.retry_after.count() == 999);
    CHECK(d.reset_after.count() == 999);
    CHECK(d.remaining == 0);
    CHECK_FALSE(l.try_acquire(1, 1998).admitted);
    CHECK(l.try_acquire(4, 1999).admitted);
    // A backward step stamps at the newest instant: it only delays.
    CHECK_FALSE(l.try_acquire(1, 500).admitted);
    CHECK(l.try_acquire(1, 500).retry_after.count() == 2999 - 500);
}

TEST_CASE("sliding_log: first call anywhere, extremes")
{
    for (std::int64_t start : {std::int64_t{0}, std::int64_t{-1}, std::int64_t{-7'000'000'000'000'000'000},
                               i64_max, i64_max - 10, i64_min + 1000}) {
        CAPTURE(start);
        sliding_log l(3, 1000ns);
        auto d = l.try_acquire(3, start);
        CHECK(d.admitted);
        CHECK(d.remaining == 0);
        auto e = l.try_acquire(1, start);
        CHECK_FALSE(e.admitted);
        CHECK(e.retry_after.count() == (start > i64_max - 1000 ? i64_max : 1000));
    }
    // "Long ago" is INT64_MIN: within one window of it a fresh log still counts its
    // initial stamps (a limitation of the int64 range). It never grants more.
    sliding_log early(3, 1000ns);
    CHECK_FALSE(early.try_acquire(1, i64_min + 999).admitted);
    CHECK(early.try_acquire(1, i64_min + 999).retry_after == 1ns);
    CHECK(early.try_acquire(3, i64_min + 1000).admitted);
    sliding_log year(1, std::chrono::hours(24 * 365));
    CHECK(year.try_acquire(1, -5).admitted);
    CHECK(year.try_acquire(1, -5).retry_after.count() == 365LL * 86400 * 1'000'000'000);
    sliding_log big(sliding_log::max_limit, 1s);
    CHECK(big.try_acquire(sliding_log::max_limit, 0).admitted);
    CHECK_FALSE(big.try_acquire(1, 999'999'999).admitted);
    CHECK(big.try_acquire(1, 1'000'000'000).admitted);
}

TEST_CASE("sliding_log: bad input")
{
    CHECK(thrown([] { sliding_log l(0, 1s); }) == error::invalid_limit);
    CHECK(thrown([] { sliding_log l(sliding_log::max_limit + 1, 1s); }) == error::invalid_limit);
    CHECK(thrown([] { sliding_log l(1, 0s); }) == error::invalid_duration);
    sliding_log l(3, 1s);
    CHECK(l.try_acquire(0, 0).error == error::invalid_count);
    CHECK(l.try_acquire(4, 0).error == error::exceeds_limit);
    CHECK(l.reserve(0, 0, 0).error == error::invalid_count);
    CHECK(l.reserve(4, 0, 0).error == error::exceeds_limit);
    CHECK(l.try_acquire(3, 0).admitted);
    CHECK(thrown([&] { l.set_limit(0); }) == error::invalid_limit);
    CHECK(l.limit() == 3);
}

TEST_CASE("sliding_log: reserve, predict and set_limit")
{
    sliding_log l(3, 1000ns);
    CHECK(l.try_acquire(1, 100).admitted);
    CHECK(l.try_acquire(1, 200).admitted);
    CHECK(l.try_acquire(1, 300).admitted);
    auto r = l.reserve(2, 400, 5000);
    CHECK_FALSE(r.admitted);
    CHECK_FALSE(r.error);
    CHECK(r.at == 1200);
    CHECK(l.reserve(2, 400, 799).error == error::timed_out);
    CHECK(l.predict(1, 400) == 1100);
    CHECK(l.predict(1, 400, 2) == 1300);
    CHECK(l.predict(1, 400, 3) == 2100);
    CHECK(l.check(1, 1100).admitted);
    // Growing keeps the newest timestamps; the new room is free at once.
    l.set_limit(5);
    CHECK(l.limit() == 5);
    CHECK(l.try_acquire(2, 400).admitted);
    CHECK_FALSE(l.try_acquire(1, 400).admitted);
    CHECK(l.try_acquire(1, 400).retry_after.count() == 700);
    // Shrinking keeps the newest: two stamps at 400.
    l.set_limit(2);
    CHECK_FALSE(l.try_acquire(1, 1399).admitted);
    CHECK(l.try_acquire(2, 1400).admitted);
}

TEST_SUITE_END();
