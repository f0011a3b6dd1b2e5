// The leaky bucket as leaky_bucket configures it: policy::gcra(rate, 1, slack).
#include <sluice/leaky_bucket.hpp>
#include <sluice/policy/gcra.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "model_driver.hpp"
#include "policy_support.hpp"

using namespace std::chrono_literals;
using sluice::rate;
using sluice::policy::gcra;

namespace {

using namespace sluice_test;

// A schedule of slots one interval apart. A request is due at the slot after the last
// granted one; a caller late on that slot by less than `slack` catches up (it is granted
// at once and the schedule stays); a caller later than that, or the first one, starts a
// new schedule at its own instant.
struct pacer_model {
    i128 T;
    i128 slack;
    std::optional<i128> slot;   // the last granted slot

    // The slot a request at t would take. Every instant of the int64 clock is valid, the
    // first one included: a new bucket grants at once wherever the clock starts.
    i128 next(std::int64_t t) const
    {
        if (slot && *slot + T + slack > t) return *slot + T;
        return t;
    }

    // One permit at a time (n is 1). After the decision the bucket holds a permit when
    // its last slot is an interval or more behind t, and is full again (reset) one
    // interval after it.
    sluice::decision decide(std::uint64_t /*n*/, std::int64_t t, bool consume)
    {
        sluice::decision d;
        i128 s = next(t);
        if (s > t) {
            d.retry_after = std::chrono::nanoseconds{s >= i64_max ? i64_max : clamp64(s - t)};
            s = *slot;
        } else {
            d.admitted = true;
            if (consume) slot = s;
        }
        d.remaining = t - s >= T ? 1 : 0;
        d.reset_after = std::chrono::nanoseconds{clamp64(std::max<i128>(s + T - t, 0))};
        return d;
    }

    sluice::reservation reserve(std::uint64_t /*n*/, std::int64_t t, std::int64_t max_wait)
    {
        sluice::reservation r;
        i128 s = next(t);
        r.at = clamp64(s);
        if (s >= i64_max || s - t > max_wait) {
            r.error = sluice::error::timed_out;
            return r;
        }
        r.admitted = true;
        r.at = clamp64(s > t ? s : i128(t));
        slot = s;
        return r;
    }
};

} // namespace

TEST_SUITE_BEGIN("leaky_bucket");

TEST_CASE("leaky bucket: after idleness grants are exactly one interval apart, at every rate")
{
    for (double per_second : {10.0, 100.0, 500.0, 999.0, 1000.0, 1001.0, 2000.0, 10'000.0, 1e6}) {
        CAPTURE(per_second);
        rate r = rate::per_second(per_second);
        const std::int64_t T = r.interval().count();
        gcra g(r, 1, sluice::leaky_bucket<>::default_slack);
        // Idle, then a caller that asks every microsecond (and every ns near each slot).
        std::vector<std::int64_t> grants;
        const std::int64_t start = 5'000'000'000;
        for (std::int64_t t = start; grants.size() < 20; t += (grants.empty() || t + 1000 < grants.back() + T) ? 1000 : 1)
            if (g.try_acquire(1, t).admitted) grants.push_back(t);
        CHECK(grants.front() == start);
        for (std::size_t i = 1; i < grants.size(); ++i) {
            CAPTURE(i);
            CHECK(grants[i] - grants[i - 1] == T);
        }
    }
}

TEST_CASE("leaky bucket: slack lets a late caller catch up on its schedule, and no more")
{
    const std::int64_t T = 1000, slack = 2500;
    gcra g(rate::every(std::chrono::nanoseconds{T}), 1, std::chrono::nanoseconds{slack});
    CHECK(g.try_acquire(1, 0).admitted);           // schedule: 0, 1000, 2000, ...
    auto d = g.try_acquire(1, 999);
    CHECK_FALSE(d.admitted);
    CHECK(d.retry_after.count() == 1);
    // Late on slot 1000 by 2499 (less than the slack): slots 1000, 2000, 3000 back to back.
    CHECK(g.try_acquire(1, 3499).admitted);
    CHECK(g.try_acquire(1, 3499).admitted);
    CHECK(g.try_acquire(1, 3499).admitted);
    d = g.try_acquire(1, 3499);
    CHECK_FALSE(d.admitted);
    CHECK(d.retry_after.count() == 4000 - 3499);
    CHECK(g.try_acquire(1, 4000).admitted);
    // Late on slot 5000 by exactly the slack: a new schedule from 7500.
    CHECK(g.try_acquire(1, 7500).admitted);
    d = g.try_acquire(1, 7500);
    CHECK_FALSE(d.admitted);
    CHECK(d.retry_after.count() == T);
    CHECK(g.try_acquire(1, 8500).admitted);
}

TEST_CASE("leaky bucket matches the schedule model on random arrivals")
{
    struct run {
        gcra policy;
        pacer_model model;
        arrivals shape;
    };
    struct shape {
        std::int64_t T, slack;
    };
    const shape shapes[] = {{1000, 0}, {1000, 2500}, {10'000'000, 1'000'000}, {1'000'000, 1'000'000},
                            {7, 3}, {1, 1}, {3, 1'000'000'000}};
    const std::int64_t bases[] = {0, -1'000'000'000'000, i64_min, i64_min + 5, i64_max - 1'000'000'000'000};
    for (const shape& sh : shapes) {
        for (std::int64_t base : bases) {
            for (std::uint64_t seed = 1; seed <= 4; ++seed) {
                INFO("T ", sh.T, " slack ", sh.slack, " base ", base, " seed ", seed);
                // One permit at a time; time by nothing, exactly one slot (on schedule), up
                // to 3 slots, idle for any length, or back.
                arrivals a;
                a.zero = 0;
                a.over = 0;
                a.one = 100;
                a.tries = 60;
                a.checks = 20;
                a.reserves = 20;
                a.max_wait = 3 * sh.T;
                a.unit = sh.T;
                a.span = sh.T;
                a.still = 12;
                a.exact = 12;
                a.medium = 38;
                a.idle = 0;
                a.any_idle = 13;
                a.back = 12;
                run c{gcra(rate::every(std::chrono::nanoseconds{sh.T}), 1, std::chrono::nanoseconds{sh.slack}),
                      pacer_model{sh.T, sh.slack, {}}, a};
                rng r{seed * 2654435761u + static_cast<std::uint64_t>(base) + static_cast<std::uint64_t>(sh.T)};
                replay(c, r, base, 4000);
            }
        }
    }
}

TEST_SUITE_END();
