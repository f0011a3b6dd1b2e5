#include <sluice/policy/all_of.hpp>
#include <sluice/policy/fixed_window.hpp>
#include <sluice/policy/gcra.hpp>
#include <sluice/policy/rate_meter.hpp>
#include <sluice/policy/sliding_log.hpp>
#include <sluice/policy/sliding_window_counter.hpp>

#include <doctest/doctest.h>

using namespace std::chrono_literals;
using namespace sluice;

TEST_CASE("gcra smoke")
{
    policy::gcra g(rate::per_second(10), 2);
    CHECK(g.try_acquire(1, 0).allowed);
    CHECK(g.try_acquire(1, 0).allowed);
    auto d = g.try_acquire(1, 0);
    CHECK_FALSE(d.allowed);
    CHECK(d.retry_after == 100ms);
}

TEST_CASE("all_of smoke")
{
    policy::all_of<policy::gcra, policy::sliding_log> p{std::tuple{rate::per_second(10), 10},
                                                        std::tuple{3, std::chrono::nanoseconds(1h)}};
    CHECK(p.try_acquire(2, 0).allowed);
    CHECK_FALSE(p.try_acquire(2, 0).allowed);
    CHECK(p.try_acquire(1, 0).allowed);
    policy::fixed_window f(3, 1s);
    CHECK(f.try_acquire(3, 5).allowed);
    policy::sliding_window_counter c(3, 1s);
    CHECK(c.try_acquire(3, 5).allowed);
    policy::rate_meter m;
    m.record(5, 0);
    CHECK(m.count(0) == 5);
}
