// The log-linear latency histogram of loadgen.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "latency_histogram.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

using loadgen::latency_histogram;

TEST_SUITE_BEGIN("latency_histogram");

TEST_CASE("buckets are contiguous, ordered, and each holds its values within 1/128")
{
    std::uint64_t prev_high = 0;
    for (std::size_t i = 1; i < 40 * latency_histogram::sub_buckets; ++i) {
        std::uint64_t low = prev_high + 1, high = latency_histogram::highest_in(i);
        CAPTURE(i);
        REQUIRE(high >= low);
        CHECK(latency_histogram::index_of(low) == i);
        CHECK(latency_histogram::index_of(high) == i);
        CHECK(static_cast<double>(high - low) <= static_cast<double>(low) / 128.0 + 1e-9);
        prev_high = high;
    }
    CHECK(latency_histogram::index_of(0) == 0);
    CHECK(latency_histogram::index_of(255) == 255); // exact below 2 x 128
    CHECK(latency_histogram::highest_in(latency_histogram::index_of(UINT64_MAX)) == UINT64_MAX);
}

TEST_CASE("empty histogram")
{
    latency_histogram h;
    CHECK(h.count() == 0);
    CHECK(h.percentile(50) == 0);
    CHECK(h.max() == 0);
    CHECK(h.min() == 0);
}

TEST_CASE("percentiles of 1..10000 us are within 1% and never below the truth")
{
    latency_histogram h;
    for (std::int64_t us = 1; us <= 10000; ++us) h.record(us * 1000);
    CHECK(h.count() == 10000);
    CHECK(h.min() == 1000);
    CHECK(h.max() == 10'000'000);
    for (double p : {50.0, 90.0, 99.0, 99.9, 100.0}) {
        CAPTURE(p);
        auto truth = static_cast<std::int64_t>(p * 100) * 1000; // the p-th percentile in ns
        CHECK(h.percentile(p) >= truth);
        CHECK(h.percentile(p) <= truth + truth / 100);
    }
    CHECK(h.percentile(100) == h.max());
}

TEST_CASE("one outlier: p99.9 and max see it, p99 does not")
{
    latency_histogram h;
    for (int i = 0; i < 999; ++i) h.record(1'000'000); // 1 ms
    h.record(300'000'000);                             // a 300 ms stall
    CHECK(h.percentile(99) < 1'010'000);
    CHECK(h.percentile(99.9) < 1'010'000); // 999 of 1000 are 1 ms: the 999th is 1 ms
    CHECK(h.percentile(99.95) >= 300'000'000);
    CHECK(h.max() == 300'000'000);
}

TEST_CASE("negative values count as 0; merge and reset")
{
    latency_histogram a, b;
    a.record(-5);
    CHECK(a.max() == 0);
    CHECK(a.percentile(50) == 0);
    b.record(7'000);
    b.record(9'000'000'000); // 9 s
    a.merge(b);
    CHECK(a.count() == 3);
    CHECK(a.max() == 9'000'000'000);
    CHECK(a.min() == 0);
    a.reset();
    CHECK(a.count() == 0);
    CHECK(a.percentile(99) == 0);
}

TEST_CASE("random values: every percentile within 1/128 above the exact one")
{
    std::mt19937_64 gen(7);
    std::lognormal_distribution<double> dist(13.0, 2.0); // around 0.4 ms, long tail
    std::vector<std::int64_t> values;
    latency_histogram h;
    for (int i = 0; i < 100000; ++i) {
        auto v = static_cast<std::int64_t>(dist(gen));
        values.push_back(v);
        h.record(v);
    }
    std::sort(values.begin(), values.end());
    for (double p : {1.0, 50.0, 90.0, 99.0, 99.9, 99.99}) {
        CAPTURE(p);
        auto exact = values[static_cast<std::size_t>(std::ceil(p / 100 * static_cast<double>(values.size()) - 1e-9)) - 1];
        CHECK(h.percentile(p) >= exact);
        CHECK(static_cast<double>(h.percentile(p)) <= static_cast<double>(exact) * (1 + 1.0 / 128) + 1);
    }
}

TEST_SUITE_END();
