#include <sluice/rate_meter.hpp>

#include <boost/system/system_error.hpp>
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <map>

#include "rng.hpp"

using namespace std::chrono_literals;
using sluice::rate_meter;
using sluice_test::rng;

namespace {

std::int64_t floor_div(std::int64_t a, std::int64_t b) { return a / b - ((a % b != 0 && a < 0) ? 1 : 0); }

} // namespace

TEST_SUITE_BEGIN("rate_meter");

TEST_CASE("rate_meter matches the weighted two-window estimate")
{
    for (std::uint64_t seed = 1; seed <= 5; ++seed) {
        const std::int64_t w = 1000;
        rate_meter meter(std::chrono::nanoseconds{w});
        std::map<std::int64_t, std::uint64_t> per_window;
        rng r{seed};
        std::int64_t now = -50'000;
        for (int step = 0; step < 5000; ++step) {
            INFO("seed ", seed, " step ", step, " now ", now);
            std::uint64_t n = r.next() % 5;
            meter.record(n, now);
            per_window[floor_div(now, w)] += n;
            std::int64_t k = floor_div(now, w);
            double e = static_cast<double>(now - k * w) / w;
            double want = static_cast<double>(per_window[k - 1]) * (1 - e) + static_cast<double>(per_window[k]);
            CHECK(meter.count(now) == doctest::Approx(want));
            CHECK(meter.per_second(now) == doctest::Approx(want * 1e9 / w));
            // Only forward: the meter keeps two slots.
            now += static_cast<std::int64_t>(r.next() % 100 < 90 ? r.next() % 300 : r.next() % 5000);
        }
    }
}

TEST_CASE("rate_meter: idle, saturation, bad window")
{
    rate_meter m(1s);
    CHECK(m.window() == 1s);
    CHECK(m.count(0) == 0);
    m.record(10, 0);
    CHECK(m.count(999'999'999) == 10);
    CHECK(m.count(1'500'000'000) == doctest::Approx(5));
    CHECK(m.count(2'000'000'000) == 0);
    CHECK(m.per_second(500'000'000) == doctest::Approx(10));
    m.record(~std::uint64_t{0}, 5'000'000'000);
    m.record(5, 5'000'000'000);
    CHECK(m.count(5'000'000'000) == doctest::Approx(static_cast<double>((std::uint64_t{1} << 40) - 1)));
    CHECK_THROWS_AS(rate_meter(0ns), boost::system::system_error);
    CHECK_THROWS_AS(rate_meter(-1s), boost::system::system_error);
}

TEST_SUITE_END();
