#include <sluice/rate.hpp>

#include <boost/system/system_error.hpp>
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <iterator>
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
        CAPTURE(std::string(c.text));
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

TEST_CASE("parse_rate is exact: decimals are not binary floating point")
{
    struct good {
        const char* text;
        std::int64_t interval;
    };
    const good cases[] = {
        {"1/0.1s", 100'000'000},
        {"100/0.1s", 1'000'000},
        {"1/0.3s", 300'000'000},
        {"3/0.3s", 100'000'000},
        {"10/0.7ms", 70'000},
        {"0.1/s", 10'000'000'000},
        {"0.3/s", 3'333'333'334},
        {"0.7/0.7s", 1'000'000'000},
        {"1.1/1.1us", 1'000},
        {"1000000000/s", 1},
        {"1000000000.0/1.0s", 1},
        {".5/s", 2'000'000'000},
        {"5./s", 200'000'000},
        {"0.000000001/ns", 1'000'000'000},
        {"1/9223372036.854775807s", 9'223'372'036'854'775'807},
        {"00001.5000000000000000000000000000/3.000000000000000000000000000s", 2'000'000'000},
        {"100000000000000000000000000000/100000000000000000000000000000s", 1'000'000'000},
    };
    for (const auto& c : cases) {
        CAPTURE(std::string(c.text));
        auto r = sluice::parse_rate(c.text);
        REQUIRE(r.has_value());
        CHECK(r->interval().count() == c.interval);
    }
    // Never faster than asked: 0.1 per 250 days is one per 2500 days, exactly.
    auto slow = sluice::parse_rate("0.1/250d");
    REQUIRE(slow.has_value());
    CHECK(slow->interval().count() == 2500LL * 86'400'000'000'000);
    // Out of range by the smallest step, both ends.
    CHECK(sluice::parse_rate("1/9223372036.854775808s").error() == error::invalid_rate);
    CHECK(sluice::parse_rate("1000000000.000000001/s").error() == error::invalid_rate);
    CHECK(sluice::parse_rate("2.5/ns").error() == error::invalid_rate);
    CHECK(sluice::parse_rate("1/0.9ns").error() == error::invalid_rate);
    // Beyond 19 significant digits: exact when the extra digits cannot change the
    // interval, an error when they could (never a guess).
    CHECK(sluice::parse_rate("1.00000000000000000001/s")->interval().count() == 1'000'000'000);
    CHECK(sluice::parse_rate("3/1.00000000000000000001s")->interval().count() == 333'333'334);
    CHECK(sluice::parse_rate("1/0.99999999999999999999ns").error() == error::parse_error);
    // Numbers far too long for any range: a clear error, never a clamp.
    CHECK(sluice::parse_rate("1/" + std::string(5000, '9') + "s").error() == error::invalid_rate);
    CHECK(sluice::parse_rate(std::string(5000, '9') + "/s").error() == error::invalid_rate);
    CHECK(sluice::parse_rate("0." + std::string(5000, '0') + "1/s").error() == error::invalid_rate);
    CHECK(sluice::parse_rate("1/0." + std::string(5000, '0') + "1s").error() == error::invalid_rate);
}

TEST_CASE("parse_rate matches ceil(period / count) computed exactly, on random input")
{
    // Units in ns, as parse_rate knows them.
    struct unit {
        const char* name;
        i128 ns;
    };
    const unit units[] = {{"ns", 1}, {"us", 1000}, {"ms", 1'000'000}, {"s", 1'000'000'000},
                          {"min", 60'000'000'000}, {"h", 3'600'000'000'000}, {"d", 86'400'000'000'000},
                          {"w", 604'800'000'000'000}, {"y", i128(year_ns)}};
    rng r{20261123};
    int valid = 0;
    for (int i = 0; i < 200'000; ++i) {
        // count: an integer; period: a decimal with 0 to 9 fraction digits.
        std::uint64_t count = 1 + r.next() % (r.next() % 2 ? 1000 : 10'000'000'000ULL);
        int frac = static_cast<int>(r.next() % 10);
        std::uint64_t mantissa = r.next() % (r.next() % 2 ? 100'000 : 10'000'000'000'000ULL);
        const unit& u = units[r.next() % std::size(units)];
        std::string digits = std::to_string(mantissa);
        if (static_cast<int>(digits.size()) <= frac) digits.insert(0, static_cast<std::size_t>(frac) + 1 - digits.size(), '0');
        std::string period = frac ? digits.substr(0, digits.size() - static_cast<std::size_t>(frac)) + "." +
                                        digits.substr(digits.size() - static_cast<std::size_t>(frac))
                                  : digits;
        std::string text = std::to_string(count) + "/" + period + u.name;
        CAPTURE(text);
        // period_ns = mantissa * unit / 10^frac; interval = ceil(period_ns / count), exactly:
        // ceil(mantissa * unit / (count * 10^frac)).
        i128 num = i128(mantissa) * u.ns;
        i128 den = i128(count);
        for (int k = 0; k < frac; ++k) den *= 10;
        auto got = sluice::parse_rate(text);
        if (mantissa == 0 || num < den || (num + den - 1) / den > i64_max) {
            REQUIRE_FALSE(got.has_value());
            CHECK(got.error() == error::invalid_rate);
            continue;
        }
        ++valid;
        REQUIRE(got.has_value());
        CHECK(got->interval().count() == static_cast<std::int64_t>((num + den - 1) / den));
    }
    CHECK(valid > 100'000);
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
