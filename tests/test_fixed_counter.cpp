#include <sluice/policy/fixed_counter.hpp>

#include <boost/system/system_error.hpp>
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>

#include "model_driver.hpp"
#include "policy_support.hpp"

using namespace std::chrono_literals;
using sluice::error;
using sluice::policy::fixed_counter;

namespace {

using namespace sluice_test;

// A map window -> count. A clock that steps back keeps counting in the newest window that
// admitted anything (it never reopens an old window).
struct window_model {
    std::uint64_t limit;
    std::int64_t w;
    std::map<i128, std::uint64_t> count;
    std::optional<i128> newest;

    i128 window_at(std::int64_t t) const
    {
        i128 k = floor_div(t, w);
        return newest && *newest > k ? *newest : k;
    }

    sluice::decision decide(std::uint64_t n, std::int64_t t, bool consume)
    {
        sluice::decision d;
        if (n == 0 || n > limit) {
            d.retry_after = std::chrono::nanoseconds::max();
            d.error = n == 0 ? error::invalid_count : error::exceeds_limit;
            return d;
        }
        i128 k = window_at(t);
        std::uint64_t c = count.count(k) ? count.at(k) : 0;
        // Window ends past the clock's end read as the clock's end.
        d.reset_after = std::chrono::nanoseconds{clamp64(std::min<i128>((k + 1) * w, i64_max) - t)};
        if (c + n > limit) {
            // A window ending at or past the clock's end never ends.
            d.retry_after = (k + 1) * w >= i64_max ? std::chrono::nanoseconds::max() : d.reset_after;
            d.remaining = limit - c;
            return d;
        }
        d.admitted = true;
        d.remaining = limit - c - n;
        if (consume) {
            count[k] = c + n;
            newest = k;
            // Older windows can never count again (nothing reopens them).
            count.erase(count.begin(), count.find(k));
        }
        return d;
    }

    // Earliest instant at which `ahead` single permits and then n more are granted, one
    // request at a time, if nothing else consumes.
    std::int64_t simulate(std::uint64_t n, std::int64_t t, std::uint64_t ahead) const
    {
        window_model copy = *this;
        for (std::uint64_t i = 0; i <= ahead; ++i) {
            std::uint64_t want = i == ahead ? n : 1;
            for (;;) {
                sluice::decision d = copy.decide(want, t, true);
                if (d.admitted) break;
                if (d.retry_after.count() <= 0 || t == i64_max) return i64_max;
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

const shape shapes[] = {{1, 1000}, {5, 1000}, {100, 7}, {3, 1'000'000'000}, {1'000, 1}};
const std::int64_t bases[] = {0, -1'000'000'000'000, 3, i64_max - 3'000'000'000, i64_min, i64_min + 999};

} // namespace

TEST_SUITE_BEGIN("fixed_counter");

TEST_CASE("fixed_counter matches a window->count map on random arrivals")
{
    // Admissions re-stamped on a clock that never goes back: never more than limit in a
    // window there.
    struct run {
        fixed_counter policy;
        window_model model;
        arrivals shape;
        std::map<i128, std::uint64_t> mono;
        std::int64_t mono_now = i64_min;

        void admitted(std::uint64_t n, std::int64_t now)
        {
            mono_now = std::max(mono_now, now);
            std::uint64_t& c = mono[floor_div(mono_now, model.w)];
            c += n;
            CHECK(c <= model.limit);
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
                run c{fixed_counter(sh.limit, std::chrono::nanoseconds{sh.window}), window_model{sh.limit, sh.window, {}, {}}, a, {}, i64_min};
                rng r{seed * 104729 + static_cast<std::uint64_t>(base) + sh.limit};
                replay(c, r, base, 3000);
            }
        }
    }
}

TEST_CASE("fixed_counter matches the model across idle gaps of every length, forward and back")
{
    // Refused: at the end of the window that counts (the clock's end at most); idle
    // once that window has passed.
    struct run {
        fixed_counter policy;
        window_model model;
        arrivals shape;

        void other(rng&, std::uint64_t n, std::int64_t now)
        {
            sluice::decision want = model.decide(n, now, false);
            i128 k = model.window_at(now);
            CHECK(policy.predict(n, now) == (want.admitted ? now : clamp64((k + 1) * model.w)));
            bool counted = model.count.count(k) && model.count.at(k) != 0;
            CHECK(policy.idle_at(now) == (counted ? clamp64((k + 1) * model.w) : i64_min));
        }
    };
    const shape gap_shapes[] = {{1, 1}, {1, 1000}, {100, 1000}, {3, 7}, {fixed_counter::max_limit, 1'000'000}};
    for (const shape& sh : gap_shapes) {
        for (std::int64_t base : bases) {
            for (std::uint64_t seed = 1; seed <= 3; ++seed) {
                INFO("limit ", sh.limit, " window ", sh.window, " base ", base, " seed ", seed);
                arrivals a;
                a.limit = sh.limit;
                a.zero = 0;
                a.over = 0;
                a.one = 50;
                a.tries = 75;
                a.checks = 15;
                a.reserves = 0;
                a.unit = sh.window;
                a.span = sh.window;
                a.still = 10;
                a.medium = 0;
                a.idle = 0;
                a.any_idle = 35;
                a.back = 0;
                a.any_back = 5;
                a.ends = 10;
                run c{fixed_counter(sh.limit, std::chrono::nanoseconds{sh.window}), window_model{sh.limit, sh.window, {}, {}}, a};
                rng r{seed * 7919 + static_cast<std::uint64_t>(base) + sh.limit};
                replay(c, r, base, 4000);
            }
        }
    }
}

TEST_CASE("fixed_counter: a count is never reused after an idle gap, however long")
{
    // The gap of the issue: 2^31 + 1 windows of 1 us after a grant at 0 was refused for
    // 2^31 us (35.8 minutes).
    fixed_counter one(1, 1000ns);
    CHECK(one.try_acquire(1, 0).admitted);
    auto d = one.try_acquire(1, (std::int64_t{1} << 31) * 1000 + 1000);
    CHECK(d.admitted);
    CHECK(d.remaining == 0);
    // Every gap near 2^31, 2^32 and 2^62 windows, in both signs of the clock.
    for (std::int64_t w : {std::int64_t{1}, std::int64_t{1000}}) {
        for (int bits : {30, 31, 32, 33, 62}) {
            for (std::int64_t off = -3; off <= 3; ++off) {
                for (std::int64_t start : {std::int64_t{0}, std::int64_t{-1} << 62, i64_min}) {
                    i128 gap = (i128(1) << bits) + off;
                    i128 later = (floor_div(start, w) + gap) * w;
                    if (later > i64_max) continue;
                    CAPTURE(w);
                    CAPTURE(bits);
                    CAPTURE(off);
                    CAPTURE(start);
                    fixed_counter f(100, std::chrono::nanoseconds{w});
                    CHECK(f.try_acquire(100, start).admitted);
                    // One request per window for 1000 windows after the gap: all admitted.
                    int admitted = 0;
                    for (std::int64_t i = 0; i < 1000 && later + i * w <= i64_max - w; ++i)
                        admitted += f.try_acquire(1, static_cast<std::int64_t>(later + i * w)).admitted;
                    bool room = later <= i64_max - w;
                    CHECK(admitted == (room ? std::min<i128>(1000, (i64_max - w - later) / w + 1) : 0));
                    // A step back to the first window after the gap counts in the newest one.
                    CHECK(f.try_acquire(100, static_cast<std::int64_t>(later)).admitted == !room);
                }
            }
        }
    }
}

TEST_CASE("fixed_counter: a backward step keeps counting in the newest window")
{
    fixed_counter f(3, 1000ns);
    CHECK(f.try_acquire(3, 5'500).admitted);
    // Back two windows: still window 5, still full, reset at its end.
    auto d = f.try_acquire(1, 3'200);
    CHECK_FALSE(d.admitted);
    CHECK(d.retry_after.count() == 6'000 - 3'200);
    CHECK(d.reset_after.count() == 6'000 - 3'200);
    CHECK(d.remaining == 0);
    CHECK(f.predict(1, 3'200) == 6'000);
    CHECK(f.try_acquire(3, 6'000).admitted);
    CHECK_FALSE(f.try_acquire(1, 6'999).admitted);
}

TEST_CASE("fixed_counter: boundaries, first call anywhere, extremes")
{
    for (std::int64_t start : {std::int64_t{0}, std::int64_t{-1}, std::int64_t{-999}, std::int64_t{-1000},
                               std::int64_t{-7'000'000'000'000'000'000}, i64_min, i64_max, i64_max - 1000}) {
        CAPTURE(start);
        fixed_counter f(4, 1000ns);
        auto d = f.try_acquire(4, start);
        CHECK(d.admitted);
        CHECK(d.remaining == 0);
        auto e = f.try_acquire(1, start);
        CHECK_FALSE(e.admitted);
        i128 end = (floor_div(start, 1000) + 1) * 1000;
        CHECK(e.retry_after.count() == (end >= i64_max ? i64_max : clamp64(end - start)));
        CHECK(e.retry_after.count() > 0);
    }
    // 1 per year, 10^9 per second.
    fixed_counter year(1, std::chrono::hours(24 * 365));
    CHECK(year.try_acquire(1, 1).admitted);
    CHECK(year.try_acquire(1, 1).retry_after.count() == 365LL * 86400 * 1'000'000'000 - 1);
    fixed_counter fast(fixed_counter::max_limit, 1s);
    CHECK(fast.try_acquire(fixed_counter::max_limit, 0).admitted);
    CHECK_FALSE(fast.try_acquire(1, 999'999'999).admitted);
    CHECK(fast.try_acquire(fixed_counter::max_limit, 1'000'000'000).admitted);
    fixed_counter ns(1, 1ns);
    for (std::int64_t t = -5; t < 5; ++t) {
        CHECK(ns.try_acquire(1, t).admitted);
        CHECK(ns.try_acquire(1, t).retry_after == 1ns);
    }
}

TEST_CASE("fixed_counter: bad input")
{
    CHECK(thrown([] { fixed_counter f(0, 1s); }) == error::invalid_limit);
    CHECK(thrown([] { fixed_counter f(fixed_counter::max_limit + 1, 1s); }) == error::invalid_limit);
    CHECK(thrown([] { fixed_counter f(1, 0s); }) == error::invalid_duration);
    CHECK(thrown([] { fixed_counter f(1, -1ns); }) == error::invalid_duration);
    fixed_counter f(3, 1s);
    CHECK(f.try_acquire(0, 0).error == error::invalid_count);
    CHECK(f.try_acquire(4, 0).error == error::exceeds_limit);
    CHECK(f.try_acquire(4, 0).retry_after == std::chrono::nanoseconds::max());
    CHECK(f.reserve(0, 0, 0).error == error::invalid_count);
    CHECK(f.reserve(4, 0, 0).error == error::exceeds_limit);
    CHECK(f.try_acquire(3, 0).admitted);
    CHECK(thrown([&] { f.set_limit(0); }) == error::invalid_limit);
    CHECK(f.limit() == 3);
}

TEST_CASE("fixed_counter: reserve grants only at once, set_limit keeps the count")
{
    fixed_counter f(4, 1000ns);
    auto a = f.reserve(3, 100, 0);
    CHECK(a.admitted);
    CHECK(a.at == 100);
    auto b = f.reserve(2, 200, 10'000);
    CHECK_FALSE(b.admitted);
    CHECK_FALSE(b.error);
    CHECK(b.at == 1000);
    auto c = f.reserve(2, 200, 799);
    CHECK_FALSE(c.admitted);
    CHECK(c.error == error::timed_out);
    CHECK(c.at == 1000);
    // Nothing was consumed by the deferred ones.
    CHECK(f.try_acquire(1, 300).admitted);
    // Queued permits ahead push the prediction whole windows out.
    CHECK(f.predict(1, 300, 4) == 2000);
    CHECK(f.predict(1, 300, 3) == 1000);
    CHECK(f.predict(4, 300, 5) == 3000);
    CHECK_FALSE(f.reserve(1, 300, 1'000'000, 1).admitted);
    f.set_limit(6);
    CHECK(f.limit() == 6);
    CHECK(f.burst() == 6);
    CHECK(f.try_acquire(2, 400).admitted);
    CHECK_FALSE(f.try_acquire(1, 400).admitted);
    f.set_limit(2);
    CHECK_FALSE(f.try_acquire(1, 500).admitted);
    CHECK(f.try_acquire(2, 1000).admitted);
}

TEST_SUITE_END();
