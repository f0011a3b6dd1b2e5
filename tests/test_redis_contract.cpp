// The Redis limiters keep the contract of every limiter: a compile check of the concept
// for each of them on each client, then the one generic function of contract_support.hpp
// (the same the local limiters run) on each, against a redis-server of its own; and what
// the generic function leaves to each limiter: the errors of requests that can never be
// granted, a request still waiting at close(), the waits in stats(); and, as for the local
// keyed limiters, deferred operations whose key was a view of a buffer reused since.
#include "contract_support.hpp"
#include "redis_limiter_support.hpp"

#include <sluice/limiter.hpp>
#include <sluice/redis/cluster.hpp>
#include <sluice/redis/connection.hpp>
#include <sluice/redis/sliding_window.hpp>
#include <sluice/redis/token_bucket.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace {

namespace asio = boost::asio;
namespace redis = sluice::redis;
using namespace std::chrono_literals;
using error_code = boost::system::error_code;

static_assert(sluice::limiter<redis::token_bucket<redis::connection>, std::string_view>);
static_assert(sluice::limiter<redis::sliding_window<redis::connection>, std::string_view>);
static_assert(sluice::limiter<redis::token_bucket<redis::cluster>, std::string_view>);
static_assert(sluice::limiter<redis::sliding_window<redis::cluster>, std::string_view>);
// Every decision is a round trip: no answer on the spot.
static_assert(!sluice::local_limiter<redis::token_bucket<redis::connection>, std::string_view>);
static_assert(!sluice::local_limiter<redis::sliding_window<redis::connection>, std::string_view>);
// The key names the quota: no call without it.
static_assert(!sluice::limiter<redis::token_bucket<redis::connection>>);

// Runs `check` (one of contract_support.hpp's functions) to its end (bounded), rethrowing
// what it threw.
void run_check(sluice_test::live_redis& l, asio::awaitable<void> check)
{
    bool done = false;
    std::exception_ptr failure;
    asio::co_spawn(l.io, std::move(check), [&](std::exception_ptr e) {
        failure = e;
        done = true;
    });
    REQUIRE(sluice_test::run_until(l.io, [&] { return done; }, 10'000ms));
    if (failure) std::rethrow_exception(failure);
}

// Runs the generic function on `lim`, which admits 3 permits of a key at once.
template <class Limiter>
void run_contract(sluice_test::live_redis& l, Limiter& lim, std::string_view key)
{
    run_check(l, contract::exercise(lim, 3, key));
}

// A key longer than any string's inline buffer: a copy of it lives on the heap.
constexpr std::string_view long_key = "contract:a-key-long-enough-to-live-on-the-heap";

} // namespace

TEST_SUITE_BEGIN("redis");

TEST_CASE("redis token bucket: the one generic function of the contract" * doctest::timeout(60))
{
    sluice_test::live_redis l;
    redis::token_bucket<redis::connection> tb(l.conn, sluice::rate::every(1h), 3);
    run_contract(l, tb, long_key);
    // Six round trips, none answered by the failure policy.
    auto s = tb.stats();
    CHECK(s.backend.commands == 6);
    CHECK(s.backend.errors == 0);
    CHECK(s.backend.fallback_decisions == 0);
}

TEST_CASE("redis sliding window: the one generic function of the contract" * doctest::timeout(60))
{
    sluice_test::live_redis l;
    redis::sliding_window<redis::connection> w(l.conn, 3, 1h);
    run_contract(l, w, long_key);
    // As the bucket's, and the two requests that timed out left the waiters' queue (their
    // refusal put a ticket in it).
    REQUIRE(sluice_test::run_until(l.io, [&] { return w.stats().backend.commands == 8; }));
    CHECK(w.stats().backend.errors == 0);
}

TEST_CASE("redis limiters: requests that can never be granted, and a request waiting at close()" * doctest::timeout(60))
{
    sluice_test::live_redis l;
    auto check = [&](auto& lim, std::string_view key) {
        CAPTURE(key);
        // Beyond the burst (limit): after its round trip; 0 permits: at once.
        CHECK(sluice_test::run_to_end(l.io, [&](auto h) { lim.async_acquire(key, 4, 1s, h); }) ==
              sluice::error::exceeds_limit);
        CHECK(sluice_test::run_to_end(l.io, [&](auto h) { lim.async_acquire(key, 0, 1s, h); }) ==
              sluice::error::invalid_count);
        // The quota used up, a request that waits (its slot, or its next check, an hour away).
        CHECK_FALSE(sluice_test::run_to_end(l.io, [&](auto h) { lim.async_acquire(key, 3, 0ns, h); }));
        auto waiting = std::make_shared<sluice_test::acq_result>();
        lim.async_acquire(key, 1, 2h, sluice_test::acq_recorder(waiting));
        REQUIRE(sluice_test::run_until(l.io, [&] { return lim.stats().backend.commands == 3; }));
        sluice_test::run_for(l.io, 5ms);   // its reply is in: it waits locally
        CHECK(waiting->calls == 0);
        CHECK(lim.stats().waiting == 1);
        lim.close();
        REQUIRE(sluice_test::run_until(l.io, [&] { return waiting->calls == 1; }, 500ms));
        CHECK(waiting->ec == sluice::error::closed);
        auto s = lim.stats();
        CHECK(s.refused == 2);
        CHECK(s.admitted == 1);
        CHECK(s.closed == 1);
        CHECK(s.waiting == 0);
        // What it held in Redis goes back (the bucket's slot) or leaves (the window's
        // ticket): one more command.
        REQUIRE(sluice_test::run_until(l.io, [&] { return lim.stats().backend.commands == 4; }));
    };
    redis::token_bucket<redis::connection> tb(l.conn, sluice::rate::every(1h), 3);
    redis::sliding_window<redis::connection> w(l.conn, 3, 1h);
    check(tb, "bucket");
    check(w, "window");
}

TEST_CASE("redis limiters: stats() counts the waits of admitted requests" * doctest::timeout(60))
{
    sluice_test::live_redis l;
    redis::token_bucket<redis::connection> tb(l.conn, sluice::rate::per_second(20), 1);
    redis::sliding_window<redis::connection> w(l.conn, 1, 50ms);
    auto wait_twice = [&](auto& lim, std::string_view key) {
        auto first = sluice_test::run_to_end(l.io, [&](auto h) { lim.async_acquire(key, 1, 1s, h); });
        auto start = std::chrono::steady_clock::now();
        auto second = sluice_test::run_to_end(l.io, [&](auto h) { lim.async_acquire(key, 1, 1s, h); });
        auto took = std::chrono::steady_clock::now() - start;
        CHECK_FALSE(first);
        CHECK_FALSE(second);
        auto s = lim.stats();
        CHECK(s.admitted == 2);
        CHECK(s.waited == 1);   // the first was admitted at once
        CHECK(s.waiting == 0);
        CHECK(s.longest_wait == s.total_wait);
        CHECK(s.total_wait >= 20ms);   // the next slot was about 50 ms away
        CHECK(s.total_wait <= took);
    };
    wait_twice(tb, "bucket");
    wait_twice(w, "window");
}

TEST_CASE("redis limiters: an operation owns its key: a view of a buffer reused before it starts" *
          doctest::timeout(60))
{
    sluice_test::live_redis l;
    redis::token_bucket<redis::connection> tb(l.conn, sluice::rate::every(1h), 2);
    redis::shared_options window_opts;
    window_opts.prefix = "window";
    redis::sliding_window<redis::connection> w(l.conn, 2, 1h, window_opts);
    run_check(l, contract::views_are_owned(tb));
    run_check(l, contract::views_are_owned(w));
}

TEST_SUITE_END();
