// The leaky bucket as leaky_bucket configures it: policy::gcra(rate, 1, slack).
#include <sluice/leaky_bucket.hpp>
#include <sluice/policy/gcra.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

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

    sluice::decision decide(std::int64_t t, bool consume)
    {
        sluice::decision d;
        i128 s = next(t);
        if (s > t) {
            d.retry_after = std::chrono::nanoseconds{s >= i64_max ? i64_max : clamp64(s - t)};
            return d;
        }
        d.admitted = true;
        if (consume) slot = s;
        return d;
    }

    sluice::reservation reserve(std::int64_t t, std::int64_t max_wait)
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

std::int64_t gap(rng& r, std::int64_t T)
{
    switch (r.next() % 8) {
    case 0: return 0;
    case 1: return r.in(0, T / 4 + 1);
    case 2: case 3: return r.in(0, 2 * T);
    case 4: return r.in(0, 4 * T);                                   // idle for a few slots
    case 5: return clamp64((i128(1) << (r.next() % 63)) + r.in(-3, 3));   // idle, any length
    case 6: return -r.in(0, T);                                      // the clock steps back
    default: return T;
    }
}

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
    struct shape {
        std::int64_t T, slack;
    };
    const shape shapes[] = {{1000, 0}, {1000, 2500}, {10'000'000, 1'000'000}, {1'000'000, 1'000'000},
                            {7, 3}, {1, 1}, {3, 1'000'000'000}};
    const std::int64_t bases[] = {0, -1'000'000'000'000, i64_min, i64_min + 5, i64_max - 1'000'000'000'000};
    for (const shape& sh : shapes) {
        for (std::int64_t base : bases) {
            for (std::uint64_t seed = 1; seed <= 4; ++seed) {
                gcra g(rate::every(std::chrono::nanoseconds{sh.T}), 1, std::chrono::nanoseconds{sh.slack});
                pacer_model m{sh.T, sh.slack, {}};
                rng r{seed * 2654435761u + static_cast<std::uint64_t>(base) + static_cast<std::uint64_t>(sh.T)};
                std::int64_t now = base;
                for (int step = 0; step < 4000; ++step) {
                    INFO("T ", sh.T, " slack ", sh.slack, " base ", base, " seed ", seed, " step ", step, " now ", now);
                    int op = static_cast<int>(r.next() % 10);
                    if (op < 6) {
                        sluice::decision got = g.try_acquire(1, now);
                        sluice::decision want = m.decide(now, true);
                        CHECK(got.admitted == want.admitted);
                        if (!got.admitted) CHECK(got.retry_after.count() == want.retry_after.count());
                    } else if (op < 8) {
                        sluice::decision got = g.check(1, now);
                        sluice::decision want = m.decide(now, false);
                        CHECK(got.admitted == want.admitted);
                        if (!got.admitted) CHECK(got.retry_after.count() == want.retry_after.count());
                    } else {
                        std::int64_t max_wait = r.in(0, 3 * sh.T);
                        sluice::reservation got = g.reserve(1, now, max_wait);
                        sluice::reservation want = m.reserve(now, max_wait);
                        CHECK(got.admitted == want.admitted);
                        CHECK(got.at == want.at);
                        CHECK(got.error == want.error);
                    }
                    now = clamp64(i128(now) + gap(r, sh.T));
                }
            }
        }
    }
}

TEST_SUITE_END();
