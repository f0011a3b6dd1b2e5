#include <sluice/all_of.hpp>
#include <sluice/manual_clock.hpp>
#include <sluice/policy/composite.hpp>
#include <sluice/policy/fixed_counter.hpp>
#include <sluice/policy/gcra.hpp>
#include <sluice/policy/sliding_log.hpp>
#include <sluice/policy/weighted_counter.hpp>

#include <boost/asio/io_context.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <tuple>

#include "model_driver.hpp"
#include "policy_support.hpp"

using namespace std::chrono_literals;
using namespace sluice::policy;
using sluice::decision;
using sluice::error;
using sluice::rate;
using sluice::reservation;

namespace {

using namespace sluice_test;

// The reference: the same policies standing alone (each checked against its own model in
// its own test), combined literally: grant only when every one would, then take from all.
struct reference {
    gcra g{rate::every(100ns), 5};
    sliding_log l{12, 2000ns};
    fixed_counter f{8, 1500ns};
    weighted_counter c{9, 1000ns};

    decision decide(std::uint64_t n, std::int64_t t, bool consume)
    {
        decision ds[] = {g.check(n, t), l.check(n, t), f.check(n, t), c.check(n, t)};
        // How long until each part is idle with nothing taken: the bucket is full
        // burst x interval after it was empty; the others are idle at idle_at.
        std::int64_t idle[] = {clamp64(i128(g.empty_at()) + 5 * 100), l.idle_at(t), f.idle_at(t), c.idle_at(t)};
        decision out;
        out.admitted = true;
        out.remaining = ~std::uint64_t{0};
        std::uint64_t now_remaining = ~std::uint64_t{0};   // when nothing is taken
        std::int64_t now_reset = 0;
        for (std::size_t i = 0; i < 4; ++i) {
            const decision& d = ds[i];
            now_remaining = std::min(now_remaining, d.admitted ? d.remaining + n : d.remaining);
            now_reset = std::max(now_reset, d.admitted ? clamp64(std::max<i128>(i128(idle[i]) - t, 0)) : d.reset_after.count());
            if (d.error && !out.error) out.error = d.error;
            out.admitted = out.admitted && d.admitted;
            out.retry_after = std::max(out.retry_after, d.retry_after);
            out.reset_after = std::max(out.reset_after, d.reset_after);
            out.remaining = std::min(out.remaining, d.remaining);
        }
        if (!out.admitted && !out.error) {
            out.remaining = now_remaining;
            out.reset_after = std::chrono::nanoseconds{now_reset};
        }
        if (out.error) {
            out.admitted = false;
            out.retry_after = std::chrono::nanoseconds::max();
        }
        if (out.admitted && consume) {
            g.try_acquire(n, t);
            l.try_acquire(n, t);
            f.try_acquire(n, t);
            c.try_acquire(n, t);
        }
        return out;
    }
};

using mix = composite<gcra, sliding_log, fixed_counter, weighted_counter>;

mix make_composite()
{
    return mix{std::tuple{rate::every(100ns), 5}, std::tuple{12, 2000ns}, std::tuple{8, 1500ns},
                     std::tuple{9, 1000ns}};
}

} // namespace

TEST_SUITE_BEGIN("all_of");

TEST_CASE("all_of matches its parts combined literally on random arrivals")
{
    struct run {
        mix policy;
        reference model;
        arrivals shape;
        std::uint64_t granted = 0;

        void admitted(std::uint64_t n, std::int64_t) { granted += n; }
        // The latest of the parts' predictions, never before now.
        void deferred(std::uint64_t n, std::int64_t now, std::uint64_t ahead, const reservation& got, const decision&)
        {
            std::int64_t latest = std::max({now, model.g.predict(n, now, ahead), model.l.predict(n, now, ahead),
                                            model.f.predict(n, now, ahead), model.c.predict(n, now, ahead)});
            CHECK(got.at == latest);
        }
    };
    for (std::int64_t base : {std::int64_t{0}, std::int64_t{-1'000'000'000}, i64_max - 100'000'000, i64_min + 100'000'000}) {
        for (std::uint64_t seed = 1; seed <= 6; ++seed) {
            INFO("base ", base, " seed ", seed);
            arrivals a;
            a.limit = 5;   // the smallest burst
            a.over = 3;    // 6 to 13: beyond it
            a.over_by = 8;
            a.one = 60;
            a.max_wait = 3000;
            a.max_ahead = 10;
            // After a backward step a weighted_counter that grants now may predict a later
            // instant (the start of its newest window), and so may the composite.
            a.exact_prediction = false;
            a.unit = 300;
            a.span = 1667;
            a.still = 35;
            a.medium = 13;
            a.idle = 2;
            a.back = 5;
            run c{make_composite(), reference{}, a, 0};
            rng r{seed * 49979687 + static_cast<std::uint64_t>(base)};
            replay(c, r, base, 4000);
            CHECK(c.granted > 0);
        }
    }
}

TEST_CASE("all_of: all or nothing")
{
    composite<gcra, sliding_log> p{std::tuple{rate::per_second(10), 10}, std::tuple{3, std::chrono::nanoseconds(1h)}};
    CHECK(p.burst() == 3);
    CHECK(p.try_acquire(2, 0).admitted);
    // The log would refuse 2: the bucket must not be charged for it.
    auto d = p.try_acquire(2, 0);
    CHECK_FALSE(d.admitted);
    CHECK(d.retry_after == 1h);
    CHECK(d.remaining == 1);
    CHECK(p.part<0>().check(8, 0).admitted);
    CHECK(p.try_acquire(1, 0).admitted);
    CHECK(p.part<0>().check(7, 0).admitted);
    CHECK_FALSE(p.part<0>().check(8, 0).admitted);
    CHECK(p.try_acquire(4, 0).error == error::exceeds_limit);
    CHECK(p.try_acquire(0, 0).error == error::invalid_count);
    CHECK(p.reserve(4, 0, 0).error == error::exceeds_limit);
    CHECK(p.reserve(0, 0, 0).error == error::invalid_count);
    // Reconfiguring a part through part<I>().
    p.part<1>().set_limit(5);
    CHECK(p.burst() == 5);
    CHECK(p.try_acquire(2, 0).admitted);
}

TEST_CASE("all_of: nested composites and the minimum remaining")
{
    composite<composite<gcra, fixed_counter>, weighted_counter> p{
        std::tuple{std::tuple{rate::every(1000ns), 4}, std::tuple{6, 10'000ns}}, std::tuple{5, 10'000ns}};
    CHECK(p.burst() == 4);
    auto d = p.try_acquire(3, 0);
    CHECK(d.admitted);
    CHECK(d.remaining == 1);
    auto e = p.try_acquire(3, 1000);
    CHECK_FALSE(e.admitted);
    CHECK(e.remaining == 2);
    CHECK(e.retry_after.count() == 10'000 + 3334 - 1000);   // the counter: 3 * (w - e) <= 2 * w
    CHECK(p.try_acquire(2, 1000).admitted);
    auto f = p.try_acquire(1, 5000);
    CHECK_FALSE(f.admitted);   // the counter holds 5 of 5
    CHECK(f.retry_after.count() == 10'000 + 2000 - 5000);
}

TEST_CASE("all_of: a rejected decision reports reset_after with nothing taken")
{
    composite<gcra, fixed_counter> p{std::tuple{rate::per_second(10), 10}, std::tuple{1, std::chrono::nanoseconds(1s)}};
    REQUIRE(p.try_acquire(1, 0).admitted);
    const std::int64_t t = std::chrono::nanoseconds(990ms).count();
    // The bucket is full again; the window holds 1 of 1 until 1 s.
    auto d = p.check(1, t);
    CHECK_FALSE(d.admitted);
    CHECK(d.retry_after == 10ms);
    CHECK(d.remaining == 0);
    CHECK(d.reset_after == 10ms);
    // The bucket in debt: its own reset counts, still without the refused request.
    REQUIRE(p.part<0>().try_acquire(10, t));
    auto e = p.try_acquire(1, t);
    CHECK_FALSE(e.admitted);
    CHECK(e.reset_after == 1s);
}

TEST_CASE("all_of: a part's set_rate keeps what the mix consumed, in permits")
{
    composite<gcra, fixed_counter> p{std::tuple{rate::per_second(10), 10}, std::tuple{100, std::chrono::nanoseconds(1s)}};
    REQUIRE(p.try_acquire(5, 0).admitted);
    p.part<0>().set_rate(rate::per_second(20), 0);
    auto d = p.check(6, 0);
    CHECK_FALSE(d.admitted);
    CHECK(d.remaining == 5);
    CHECK(d.retry_after == 50ms);
    CHECK(p.try_acquire(5, 0).admitted);
    CHECK_FALSE(p.try_acquire(1, 0).admitted);
    // Slower: the 5 left stay 5, and the bucket refills at the new rate.
    composite<gcra, fixed_counter> q{std::tuple{rate::per_second(10), 10}, std::tuple{100, std::chrono::nanoseconds(1s)}};
    REQUIRE(q.try_acquire(5, 0).admitted);
    q.part<0>().set_burst(20, 0);
    q.part<0>().set_rate(rate::per_second(5), 0);
    CHECK(q.check(1, 0).remaining == 4);
    CHECK(q.try_acquire(5, 0).admitted);
    CHECK(q.try_acquire(1, 0).retry_after == 200ms);
}

TEST_CASE("all_of: the asynchronous update keeps what was consumed")
{
    using clk = sluice::basic_manual_clock<struct all_of_update_tag>;
    boost::asio::io_context io;
    clk::set(std::chrono::seconds(1000));
    sluice::basic_all_of<clk, boost::asio::any_io_executor, gcra, fixed_counter> l(
        io, std::tuple{rate::per_second(10), 10}, std::tuple{100, std::chrono::nanoseconds(1s)});
    REQUIRE(l.try_acquire(5).admitted);
    l.update<0>([](gcra& g, std::int64_t now) { g.set_rate(rate::per_second(20), now); });
    CHECK_FALSE(l.try_acquire(6).admitted);
    CHECK(l.try_acquire(5).admitted);
    auto d = l.try_acquire(1);
    CHECK_FALSE(d.admitted);
    CHECK(d.retry_after == 50ms);
}

TEST_SUITE_END();
