// The crawler's retry policy, step by step: Retry-After honoured exactly (and cut at its
// bound), full-jitter backoff within min(cap, base x 2^(k-1)) and spread over it, the
// page given up after max_attempts.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "retry_policy.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>

using namespace std::chrono_literals;
using crawl::retry_policy;

TEST_CASE("retry_policy: Retry-After is honoured exactly, cut at its bound; none or past means backoff")
{
    retry_policy p(100ms, 10s, 5, 60s, 1);
    auto d = p.after_failure(1, 1, 2s);
    CHECK_FALSE(d.give_up);
    CHECK(d.from_retry_after);
    CHECK(d.delay == 2s);
    d = p.after_failure(1, 1, 3600s);
    CHECK(d.delay == 60s);
    d = p.after_failure(1, 1, -5s);   // an HTTP-date in the past
    CHECK_FALSE(d.from_retry_after);
    CHECK(d.delay <= 100ms);
    d = p.after_failure(1, 1, std::nullopt);
    CHECK_FALSE(d.from_retry_after);
}

TEST_CASE("retry_policy: full jitter within min(cap, base x 2^(k-1)), spread over the whole range")
{
    retry_policy p(100ms, 1600ms, 100, 60s, 42);
    CHECK(p.bound(1) == 100ms);
    CHECK(p.bound(2) == 200ms);
    CHECK(p.bound(5) == 1600ms);
    CHECK(p.bound(6) == 1600ms);
    CHECK(p.bound(1000) == 1600ms);   // no overflow however long the streak
    for (std::uint64_t k = 1; k <= 8; ++k) {
        std::chrono::nanoseconds lo = 1h, hi = 0ns;
        for (int i = 0; i < 2000; ++i) {
            auto d = p.after_failure(1, k, std::nullopt);
            REQUIRE(d.delay >= 0ns);
            REQUIRE(d.delay <= p.bound(k));
            lo = std::min(lo, d.delay);
            hi = std::max(hi, d.delay);
        }
        // Jitter, not a fixed delay: the draws cover the range.
        CHECK(lo < p.bound(k) / 10);
        CHECK(hi > p.bound(k) * 9 / 10);
    }
}

TEST_CASE("retry_policy: the page is given up after max_attempts, and bad settings are refused")
{
    retry_policy p(10ms, 100ms, 3, 60s, 7);
    CHECK_FALSE(p.after_failure(1, 1, std::nullopt).give_up);
    CHECK_FALSE(p.after_failure(2, 2, 1s).give_up);
    CHECK(p.after_failure(3, 3, 1s).give_up);
    CHECK(p.after_failure(3, 3, std::nullopt).delay == 0ns);
    CHECK_THROWS_AS(retry_policy(0ms, 1s, 3, 60s, 1), std::invalid_argument);
    CHECK_THROWS_AS(retry_policy(2s, 1s, 3, 60s, 1), std::invalid_argument);
    CHECK_THROWS_AS(retry_policy(1ms, 1s, 0, 60s, 1), std::invalid_argument);
}
