#include <sluice/policy/slot_ring.hpp>

#include <boost/system/system_error.hpp>
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "model_driver.hpp"
#include "policy_support.hpp"

using namespace std::chrono_literals;
using sluice::error;
using sluice::policy::slot_ring;

namespace {

using namespace sluice_test;

// The slot of every counted permit, counted literally, in 128 bits. A request counts in
// its own slot, or in the newest slot that granted anything when the clock stepped back
// behind it; it is granted when the `slots` slots ending there hold at most `limit` with it.
struct wheel_model {
    std::uint64_t limit;
    std::int64_t slot;
    std::int64_t slots;
    std::vector<i128> stamps;   // non-decreasing

    i128 slot_at(std::int64_t t) const
    {
        i128 k = floor_div(t, slot);
        return stamps.empty() ? k : std::max(k, stamps.back());
    }

    // Permits in the turn ending with slot e (no stamp is newer than e).
    std::uint64_t in_turn(i128 e) const
    {
        auto first = std::upper_bound(stamps.begin(), stamps.end(), e - slots);
        return static_cast<std::uint64_t>(stamps.end() - first);
    }

    sluice::decision decide(std::uint64_t n, std::int64_t t, bool consume)
    {
        sluice::decision d;
        if (n == 0 || n > limit) {
            d.retry_after = std::chrono::nanoseconds::max();
            d.error = n == 0 ? error::invalid_count : error::exceeds_limit;
            return d;
        }
        i128 e = slot_at(t);
        std::uint64_t used = in_turn(e);
        std::optional<i128> newest;
        if (!stamps.empty()) newest = stamps.back();
        if (used + n <= limit) {
            d.admitted = true;
            d.remaining = limit - used - n;
            newest = e;
            if (consume) {
                for (std::uint64_t i = 0; i < n; ++i) stamps.push_back(e);
                // Older than a turn behind the newest slot: they can never count again.
                stamps.erase(stamps.begin(), std::upper_bound(stamps.begin(), stamps.end(), e - slots));
            }
        } else {
            d.remaining = used >= limit ? 0 : limit - used;
            // The first later slot whose turn has room: the counts only fall with time.
            i128 j = e + 1;
            while (in_turn(j) + n > limit) ++j;
            // A slot that starts at or past the clock's end never starts.
            i128 at = j * slot;
            d.retry_after = std::chrono::nanoseconds{at >= i64_max ? i64_max : clamp64(at - t)};
        }
        if (newest) d.reset_after = std::chrono::nanoseconds{clamp64(std::max<i128>(std::min<i128>((*newest + slots) * slot, i64_max) - t, 0))};
        return d;
    }

    // Earliest instant at which `ahead` single permits and then n more are granted, one
    // request at a time, if nothing else consumes.
    std::int64_t simulate(std::uint64_t n, std::int64_t t, std::uint64_t ahead) const
    {
        wheel_model copy = *this;
        for (std::uint64_t i = 0; i <= ahead; ++i) {
            std::uint64_t want = i == ahead ? n : 1;
            for (;;) {
                sluice::decision dec = copy.decide(want, t, true);
                if (dec.admitted) break;
                if (dec.retry_after == std::chrono::nanoseconds::max()) return i64_max;
                t = clamp64(i128(t) + dec.retry_after.count());
            }
        }
        return t;
    }

    std::int64_t idle_at() const
    {
        if (stamps.empty()) return i64_min;
        return clamp64((stamps.back() + slots) * slot);
    }
};

struct shape {
    std::uint64_t limit;
    std::int64_t slot;
    std::uint32_t slots;
};

const shape shapes[] = {{1, 1000, 1}, {5, 1000, 4}, {50, 7, 16}, {3, 1'000'000'000, 60},
                        {10, 3, 5}, {200, 1, 64}, {7, 1'000'003, 2}, {4, 13, 100}};
const std::int64_t bases[] = {0, -1'000'000'000'000, 3, i64_max - 3'000'000'000, i64_max - 5,
                              i64_min, i64_min + 3'000'000'000};

} // namespace

TEST_SUITE_BEGIN("slot_ring");

TEST_CASE("slot_ring matches literal per-permit slots on random arrivals")
{
    struct run {
        slot_ring policy;
        wheel_model model;
        arrivals shape;
        std::uint64_t resize;   // now and then a new limit in 1..resize (0: the limit stays)
        // Admissions re-stamped on a clock that never goes back: never more than limit in
        // any `slots` consecutive slots there (checked while the limit is fixed).
        std::vector<i128> mono;

        void admitted(std::uint64_t n, std::int64_t now)
        {
            if (resize) return;
            i128 s = floor_div(now, model.slot);
            if (!mono.empty()) s = std::max(s, mono.back());
            for (std::uint64_t i = 0; i < n; ++i) mono.push_back(s);
            mono.erase(mono.begin(), std::upper_bound(mono.begin(), mono.end(), s - model.slots));
            CHECK(mono.size() <= model.limit);
        }
        // Exactly when one-by-one grants would come.
        void deferred(std::uint64_t n, std::int64_t now, std::uint64_t ahead, const sluice::reservation& got,
                      const sluice::decision&)
        {
            CHECK(got.at == model.simulate(n, now, ahead));
        }
        // predict() (10 in 13), or a new limit (3 in 13, when resizing).
        void other(rng& r, std::uint64_t n, std::int64_t now)
        {
            if (!resize || r.below(13) < 10) {
                std::uint64_t ahead = r.below(2) == 0 ? r.below(3 * model.limit) : 0;
                CAPTURE(ahead);
                CHECK(policy.predict(n, now, ahead) == (n == 0 || n > model.limit ? i64_max : model.simulate(n, now, ahead)));
                return;
            }
            std::uint64_t limit = 1 + r.below(resize);
            policy.set_limit(limit);
            model.limit = limit;
            shape.limit = limit;
            shape.max_ahead = 3 * limit;
            CHECK(policy.limit() == limit);
        }
        void after(std::int64_t) { CHECK(policy.idle_at() == model.idle_at()); }
    };
    for (const shape& sh : shapes) {
        const std::int64_t turn = sh.slot * sh.slots;
        for (std::int64_t base : bases) {
            for (std::uint64_t seed = 1; seed <= 4; ++seed) {
                INFO("limit ", sh.limit, " slot ", sh.slot, " slots ", sh.slots, " base ", base, " seed ", seed);
                arrivals a;
                a.limit = sh.limit;
                a.one = 41;
                a.tries = 60;
                a.checks = 12;
                a.reserves = 15;
                a.max_wait = 3 * turn;
                a.max_ahead = 3 * sh.limit;
                a.unit = turn / static_cast<std::int64_t>(std::min<std::uint64_t>(sh.limit, 4)) + 1;
                a.span = turn;
                a.medium = 15;
                a.idle = 5;   // idle for over a turn
                a.back = 10;
                // Seeds 3 and 4 also change the limit now and then.
                run c{slot_ring(sh.limit, std::chrono::nanoseconds{sh.slot}, sh.slots), wheel_model{sh.limit, sh.slot, sh.slots, {}},
                      a, seed >= 3 ? 2 * sh.limit : 0, {}};
                rng r{seed * 104729 + static_cast<std::uint64_t>(base) + sh.limit * 31 + sh.slots};
                replay(c, r, base, 3000);
            }
        }
    }
}

TEST_CASE("slot_ring: never more than limit in any `slots` consecutive slots")
{
    for (const shape& sh : shapes) {
        for (std::int64_t base : {std::int64_t{0}, std::int64_t{-5'000'000'000}, i64_min + 2, i64_max - 4 * sh.slot * sh.slots}) {
            CAPTURE(sh.limit);
            CAPTURE(sh.slots);
            CAPTURE(base);
            slot_ring w(sh.limit, std::chrono::nanoseconds{sh.slot}, sh.slots);
            rng r{static_cast<std::uint64_t>(base) ^ sh.limit};
            // Saturating demand over four turns, the clock sometimes stepping back: granted
            // permits by slot, counted in the slot the policy says (the newest one seen).
            std::map<i128, std::uint64_t> granted;
            i128 newest = i128(i64_min) - 1;   // nothing granted yet
            std::int64_t now = base;
            const std::int64_t end = base + 4 * sh.slot * sh.slots;
            const std::int64_t step = std::max<std::int64_t>(1, sh.slot / 3);
            while (now < end) {
                std::uint64_t n = 1 + r.next() % sh.limit;
                std::int64_t t = r.next() % 5 == 0 ? clamp64(i128(now) - r.in(0, sh.slot * sh.slots)) : now;
                if (w.try_acquire(n, t).admitted) {
                    newest = std::max(newest, floor_div(t, sh.slot));
                    granted[newest] += n;
                }
                now = clamp64(i128(now) + (r.next() % 4 == 0 ? step : 0));
            }
            std::uint64_t full_turns = 0;
            REQUIRE_FALSE(granted.empty());
            for (i128 first = granted.begin()->first - sh.slots; first <= newest; ++first) {
                std::uint64_t sum = 0;
                for (auto it = granted.lower_bound(first); it != granted.end() && it->first < first + sh.slots; ++it)
                    sum += it->second;
                CHECK(sum <= sh.limit);
                full_turns += sum == sh.limit ? 1 : 0;
            }
            // The demand saturates the wheel: the bound is reached, not just respected.
            CHECK(full_turns > 0);
        }
    }
}

TEST_CASE("slot_ring: slots, boundaries and backward steps")
{
    slot_ring w(4, 1000ns, 3);   // a turn is slots 0..2 of [0, 3000)
    CHECK(w.window() == 3000ns);
    CHECK(w.slot_duration() == 1000ns);
    CHECK(w.slots() == 3);
    CHECK(w.try_acquire(2, 100).admitted);
    CHECK(w.try_acquire(1, 1500).admitted);
    auto d = w.try_acquire(2, 2999);
    CHECK_FALSE(d.admitted);
    CHECK(d.remaining == 1);
    // Slot 0 leaves the turn at 3000.
    CHECK(d.retry_after.count() == 1);
    CHECK(d.reset_after.count() == 4000 - 2999);
    CHECK(w.try_acquire(1, 2999).admitted);
    // Slot 3: slots 1..3 hold 2, and slot 0's 2 have left the turn.
    CHECK_FALSE(w.check(3, 3000).admitted);
    auto e = w.try_acquire(2, 3000);
    CHECK(e.admitted);
    CHECK(e.remaining == 0);
    CHECK(e.reset_after.count() == 3000);
    // Back into slot 1 and further: counted in slot 3, where slots 1..3 hold 4; slot 1
    // leaves the turn at 4000.
    for (std::int64_t t : {std::int64_t{1200}, std::int64_t{-7000}}) {
        CAPTURE(t);
        auto b = w.try_acquire(1, t);
        CHECK_FALSE(b.admitted);
        CHECK(b.retry_after.count() == 4000 - t);
    }
    CHECK_FALSE(w.check(1, 3999).admitted);
    CHECK(w.check(1, 4000).admitted);
    CHECK(w.idle_at() == 6000);
    // An idle gap of many turns forgets everything, even with the largest wheel.
    slot_ring big(3, 1ns, slot_ring::max_slots);
    CHECK(big.try_acquire(3, 0).admitted);
    CHECK_FALSE(big.check(1, slot_ring::max_slots - 1).admitted);
    CHECK(big.try_acquire(3, slot_ring::max_slots).admitted);
    CHECK(big.try_acquire(3, 1'000'000'000'000).admitted);
    CHECK(big.idle_at() == 1'000'000'000'000 + slot_ring::max_slots);
}

TEST_CASE("slot_ring: first call anywhere, extremes")
{
    for (std::int64_t start : {std::int64_t{0}, std::int64_t{-1}, std::int64_t{-7'000'000'000'000'000'000},
                               i64_max, i64_max - 10, i64_min, i64_min + 1000}) {
        CAPTURE(start);
        slot_ring w(3, 1000ns, 4);
        CHECK(w.idle_at() == i64_min);
        auto d = w.try_acquire(3, start);
        CHECK(d.admitted);
        CHECK(d.remaining == 0);
        auto e = w.try_acquire(1, start);
        CHECK_FALSE(e.admitted);
        i128 at = (floor_div(start, 1000) + 4) * 1000;
        CHECK(e.retry_after.count() == (at >= i64_max ? i64_max : at - start));
        CHECK(w.idle_at() == clamp64(at));
        CHECK(w.predict(1, start) == clamp64(at));
    }
    slot_ring big(slot_ring::max_limit, 1s, 2);
    CHECK(big.try_acquire(slot_ring::max_limit, 0).admitted);
    CHECK_FALSE(big.try_acquire(1, 1'999'999'999).admitted);
    CHECK(big.try_acquire(slot_ring::max_limit, 2'000'000'000).admitted);
    // The longest wheel: one turn of almost the whole int64 range.
    slot_ring year(1, std::chrono::nanoseconds{i64_max / 2}, 2);
    CHECK(year.try_acquire(1, -5).admitted);
    // Slot -1 leaves the turn when slot 1 starts.
    CHECK(year.try_acquire(1, -5).retry_after.count() == i64_max / 2 + 5);
}

TEST_CASE("slot_ring: bad input")
{
    CHECK(thrown([] { slot_ring w(0, 1s, 10); }) == error::invalid_limit);
    CHECK(thrown([] { slot_ring w(slot_ring::max_limit + 1, 1s, 10); }) == error::invalid_limit);
    CHECK(thrown([] { slot_ring w(1, 0s, 10); }) == error::invalid_duration);
    CHECK(thrown([] { slot_ring w(1, -1ns, 10); }) == error::invalid_duration);
    CHECK(thrown([] { slot_ring w(1, 1s, 0); }) == error::invalid_limit);
    CHECK(thrown([] { slot_ring w(1, 1s, slot_ring::max_slots + 1); }) == error::invalid_limit);
    CHECK(thrown([] { slot_ring w(1, std::chrono::nanoseconds{i64_max / 2 + 1}, 2); }) == error::invalid_duration);
    CHECK(thrown([] { slot_ring w(1, std::chrono::nanoseconds{i64_max / 2}, 2); }) == boost::system::error_code());
    CHECK(thrown([] { slot_ring w(1, 1ns, slot_ring::max_slots); }) == boost::system::error_code());
    slot_ring w(3, 1s, 10);
    CHECK(w.try_acquire(0, 0).error == error::invalid_count);
    CHECK(w.try_acquire(0, 0).retry_after == std::chrono::nanoseconds::max());
    CHECK(w.try_acquire(4, 0).error == error::exceeds_limit);
    CHECK(w.check(4, 0).retry_after == std::chrono::nanoseconds::max());
    CHECK(w.reserve(0, 0, 0).error == error::invalid_count);
    CHECK(w.reserve(4, 0, 0).error == error::exceeds_limit);
    CHECK(w.predict(0, 0) == i64_max);
    CHECK(w.predict(4, 0) == i64_max);
    CHECK(w.idle_at() == i64_min);   // nothing granted: still fresh
    CHECK(w.try_acquire(3, 0).admitted);
    CHECK(thrown([&] { w.set_limit(0); }) == error::invalid_limit);
    CHECK(thrown([&] { w.set_limit(slot_ring::max_limit + 1); }) == error::invalid_limit);
    CHECK(w.limit() == 3);
}

TEST_CASE("slot_ring: reserve, predict and set_limit")
{
    slot_ring w(3, 100ns, 10);   // a turn of 1000 ns
    CHECK(w.try_acquire(1, 100).admitted);
    CHECK(w.try_acquire(1, 200).admitted);
    CHECK(w.try_acquire(1, 300).admitted);
    auto r = w.reserve(2, 400, 5000);
    CHECK_FALSE(r.admitted);
    CHECK_FALSE(r.error);
    CHECK(r.at == 1200);
    CHECK(w.reserve(2, 400, 799).error == error::timed_out);
    CHECK(w.predict(1, 400) == 1100);
    CHECK(w.predict(1, 400, 2) == 1300);
    CHECK(w.predict(1, 400, 3) == 2100);
    CHECK(w.predict(3, 400, 3) == 2300);
    CHECK(w.check(1, 1100).admitted);
    // Growing: counted permits stay counted, the new room is free at once.
    w.set_limit(5);
    CHECK(w.limit() == 5);
    CHECK(w.try_acquire(2, 400).admitted);
    auto full = w.try_acquire(1, 450);
    CHECK_FALSE(full.admitted);
    CHECK(full.retry_after.count() == 1100 - 450);
    // Shrinking below what is counted: rejects until enough slots leave the turn.
    w.set_limit(2);
    auto over = w.check(1, 500);
    CHECK_FALSE(over.admitted);
    CHECK(over.remaining == 0);
    // Four of five counted must leave: the slot-4 pair stays until 1400.
    CHECK(over.retry_after.count() == 1400 - 500);
    CHECK_FALSE(w.try_acquire(1, 1399).admitted);
    CHECK(w.try_acquire(1, 1400).admitted);
    CHECK(w.idle_at() == 2400);
}

TEST_CASE("slot_ring: from idle_at on, a used wheel answers like a new one")
{
    for (const shape& sh : shapes) {
        for (std::int64_t base : {std::int64_t{0}, std::int64_t{-3'000'000'000'000}, i64_min + 1, i64_max / 2}) {
            for (std::uint64_t seed = 1; seed <= 3; ++seed) {
                CAPTURE(sh.limit);
                CAPTURE(sh.slots);
                CAPTURE(base);
                CAPTURE(seed);
                const std::int64_t turn = sh.slot * sh.slots;
                slot_ring used(sh.limit, std::chrono::nanoseconds{sh.slot}, sh.slots);
                rng r{seed * 7 + static_cast<std::uint64_t>(base)};
                std::int64_t now = base;
                for (int i = 0; i < 200; ++i) {
                    used.try_acquire(1 + r.next() % sh.limit, now);
                    now = clamp64(i128(now) + (r.next() % 5 == 0 ? -r.in(0, turn) : r.in(0, turn / 8 + 1)));
                }
                std::int64_t idle = used.idle_at();
                REQUIRE(idle != i64_min);
                // Just before idle_at the newest granted slot still counts.
                CHECK_FALSE(used.check(sh.limit, idle - 1).admitted);
                slot_ring fresh(sh.limit, std::chrono::nanoseconds{sh.slot}, sh.slots);
                // The same requests from idle_at on, the clock stepping back no further than it.
                std::int64_t t = idle + (seed == 1 ? 0 : r.in(0, 3 * turn));
                std::int64_t newest = t;
                for (int i = 0; i < 300; ++i) {
                    INFO("i ", i, " t ", t);
                    std::uint64_t n = 1 + r.next() % sh.limit;
                    std::uint64_t ahead = r.next() % 3 == 0 ? r.next() % (2 * sh.limit) : 0;
                    CHECK(used.predict(n, t, ahead) == fresh.predict(n, t, ahead));
                    check_same(used.check(n, t), fresh.check(n, t));
                    check_same(used.try_acquire(n, t), fresh.try_acquire(n, t));
                    CHECK(used.idle_at() == fresh.idle_at());
                    newest = std::max(newest, t);
                    t = r.next() % 5 == 0 ? r.in(idle, newest) : clamp64(i128(newest) + r.in(0, turn / 4 + 1));
                }
            }
        }
    }
}

TEST_CASE("slot_ring: no stale count after an idle gap of any length")
{
    // Slot numbers are full int64 values (no truncation): a gap of 2^31, 2^32 or 2^62
    // slots, give or take a few, starts from an empty ring.
    for (int bits : {16, 31, 32, 33, 62}) {
        for (std::int64_t off = -3; off <= 3; ++off) {
            CAPTURE(bits);
            CAPTURE(off);
            slot_ring t(10, 1ns, 4);
            CHECK(t.try_acquire(10, 0).admitted);
            std::int64_t later = (std::int64_t{1} << bits) + off;
            int admitted = 0;
            for (std::int64_t i = 0; i < 8; ++i)
                admitted += t.try_acquire(5, later + i).admitted;
            // 5 a slot fits twice a turn of 4 slots: slots 0, 1, then 4, 5.
            CHECK(admitted == 4);
        }
    }
}

TEST_SUITE_END();
