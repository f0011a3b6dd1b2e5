#include <sluice/rate.hpp>

#include <boost/system/system_error.hpp>
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "policy_support.hpp"

using namespace std::chrono_literals;
using sluice::error;
using sluice::rate;

namespace {

using namespace sluice_test;

constexpr std::int64_t year_ns = 365LL * 86400 * 1'000'000'000;

// Runs f and returns the error code of the system_error it throws (empty if none).
} // namespace

TEST_SUITE_BEGIN("rate");

TEST_CASE("per_second keeps whole-nanosecond intervals, rounded up")
{
    CHECK(rate::per_second(1).interval() == 1s);
    CHECK(rate::per_second(10).interval() == 100ms);
    CHECK(rate::per_second(1e9).interval() == 1ns);
    CHECK(rate::per_second(0.5).interval() == 2s);
    // 3/s cannot be exact: rounding up keeps the limiter at or below the asked rate.
    CHECK(rate::per_second(3).interval().count() == 333'333'334);
    CHECK(rate::per_second(3).per_second() <= 3.0);
    CHECK(rate::per_second(1e6).per_second() == doctest::Approx(1e6));
}

TEST_CASE("per, make and every")
{
    CHECK(rate::per(5, 1min).interval() == 12s);
    CHECK(rate::per(1, std::chrono::hours(24 * 365)).interval().count() == year_ns);
    CHECK(rate::per(1'000'000'000, 1s).interval() == 1ns);
    CHECK(rate::per(3, 1s) == rate::per_second(3));
    CHECK(rate::every(7ns).interval() == 7ns);
    CHECK(rate::every(std::chrono::nanoseconds::max()).interval() == std::chrono::nanoseconds::max());
    auto r = rate::make(10, 1s);
    REQUIRE(r.has_value());
    CHECK(r->interval() == 100ms);
}

TEST_CASE("out-of-range rates are invalid_rate")
{
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double inf = std::numeric_limits<double>::infinity();
    for (double bad : {0.0, -0.0, -1.0, -1e9, nan, inf, -inf, 1.5e9, 2e9, 1e18, 1e-11}) {
        CAPTURE(bad);
        CHECK(thrown([&] { (void)rate::per_second(bad); }) == error::invalid_rate);
    }
    CHECK(thrown([] { (void)rate::per(0, 1s); }) == error::invalid_rate);
    CHECK(thrown([] { (void)rate::per(1, 0s); }) == error::invalid_rate);
    CHECK(thrown([] { (void)rate::per(1, -1s); }) == error::invalid_rate);
    // Faster than one permit per nanosecond.
    CHECK(thrown([] { (void)rate::per(3, 2ns); }) == error::invalid_rate);
    CHECK(thrown([] { (void)rate::per(2'000'000'000, 1s); }) == error::invalid_rate);
    // Slower than one permit per INT64_MAX ns (about 292 years).
    CHECK(thrown([] { (void)rate::per(1, std::chrono::hours(24 * 365 * 300)); }) == error::invalid_rate);
    CHECK(thrown([] { (void)rate::every(0ns); }) == error::invalid_rate);
    CHECK(thrown([] { (void)rate::every(-1ns); }) == error::invalid_rate);
    CHECK(rate::make(0, 1s).error() == error::invalid_rate);
    CHECK(rate::make(1, 0s).error() == error::invalid_rate);
    CHECK(rate::make(5, 1ns).error() == error::invalid_rate);
}

TEST_CASE("parse_rate accepts the documented forms")
{
    struct good {
        const char* text;
        std::int64_t interval;
    };
    const good cases[] = {
        {"100/s", 10'000'000},
        {"5/min", 12'000'000'000},
        {"5/m", 12'000'000'000},
        {"2500/h", 1'440'000'000},
        {"1/d", 86'400'000'000'000},
        {"1/w", 7 * 86'400'000'000'000},
        {"1/y", year_ns},
        {"10/250ms", 25'000'000},
        {"0.5/s", 2'000'000'000},
        {"3 / 2h", 2'400'000'000'000},
        {"  7/s  ", 142'857'143},
        {"1000/us", 1},
        {"1/ns", 1},
        {"4/sec", 250'000'000},
        {"2/hour", 1'800'000'000'000},
        {"1/day", 86'400'000'000'000},
        {"1.5/3s", 2'000'000'000},
    };
    for (const auto& c : cases) {
        CAPTURE(c.text);
        auto r = sluice::parse_rate(c.text);
        REQUIRE(r.has_value());
        CHECK(r->interval().count() == c.interval);
    }
}

TEST_CASE("parse_rate rejects bad input with the right code")
{
    // Malformed text.
    for (const char* text : {"", " ", "garbage", "/s", "100", "100/", "100s", "5/parsec", "-5/s", "+5/s", "1e3/s",
                             "1/s/s", "1/s x", "1//s", ".", "./s", "1/2", "1/ 2 ", "1/.5s", "a1/s", "1/S", "1,5/s"}) {
        CAPTURE(std::string(text));
        auto r = sluice::parse_rate(text);
        REQUIRE_FALSE(r.has_value());
        CHECK(r.error() == error::parse_error);
    }
    // Well-formed text naming a rate outside the range.
    for (const char* text : {"0/s", "1/0s", "0.0/h", "2000000000/s", "3/2ns", "1/300y", "1/0.0ms"}) {
        CAPTURE(std::string(text));
        auto r = sluice::parse_rate(text);
        REQUIRE_FALSE(r.has_value());
        CHECK(r.error() == error::invalid_rate);
    }
}

TEST_CASE("extreme rates round-trip")
{
    rate slow = rate::per(1, std::chrono::hours(24 * 365));
    rate fast = rate::per_second(1e9);
    CHECK(slow.interval().count() == year_ns);
    CHECK(fast.interval().count() == 1);
    CHECK(slow.per_second() == doctest::Approx(1.0 / (365.0 * 86400)));
    CHECK(fast.per_second() == doctest::Approx(1e9));
    CHECK(slow != fast);
}

TEST_SUITE_END();
