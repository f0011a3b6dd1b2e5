// The Redis limiters keep the contract of every limiter: a compile check of the concept
// for each of them on each client, then one generic function (contract_support.hpp, the
// same as for the local limiters) run on each against a redis-server of its own; and the
// parts only a real wait shows (the waits in stats(), a deferred acquire on a temporary
// key).
#include "contract_support.hpp"
#include "redis_limiter_support.hpp"

#include <sluice/limiter.hpp>
#include <sluice/redis/cluster.hpp>
#include <sluice/redis/connection.hpp>
#include <sluice/redis/sliding_window.hpp>
#include <sluice/redis/token_bucket.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <exception>
#include <memory>
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

// Runs the generic function on `lim` to its end (bounded), rethrowing what it threw.
template <class Limiter>
void run_contract(sluice_test::live_redis& l, Limiter& lim, std::string_view key)
{
    bool done = false;
    std::exception_ptr failure;
    asio::co_spawn(l.io, sluice_test::exercise_contract(lim, {}, key), [&](std::exception_ptr e) {
        failure = e;
        done = true;
    });
    REQUIRE(sluice_test::run_until(l.io, [&] { return done; }, 10'000ms));
    if (failure) std::rethrow_exception(failure);
}

// A key longer than any string's inline buffer: a copy of it lives on the heap.
constexpr std::string_view long_key = "contract:a-key-long-enough-to-live-on-the-heap";

} // namespace

TEST_SUITE_BEGIN("redis");

TEST_CASE("redis token bucket keeps the contract of every limiter" * doctest::timeout(60))
{
    sluice_test::live_redis l;
    redis::token_bucket<redis::connection> tb(l.conn, sluice::rate::every(1min), 3);
    run_contract(l, tb, long_key);
    // Six round trips (invalid_count is answered locally), the pending request's, and the
    // refund of its slot at close().
    REQUIRE(sluice_test::run_until(l.io, [&] { return tb.stats().backend.commands == 8; }));
    CHECK(tb.stats().backend.errors == 0);
}

TEST_CASE("redis sliding window keeps the contract of every limiter" * doctest::timeout(60))
{
    sluice_test::live_redis l;
    redis::sliding_window<redis::connection> w(l.conn, 3, 1min);
    run_contract(l, w, long_key);
    // As the bucket's, and two leaving the waiters' queue (the request that timed out had
    // a ticket in it from its refusal; the pending one at close()).
    REQUIRE(sluice_test::run_until(l.io, [&] { return w.stats().backend.commands == 9; }));
    CHECK(w.stats().backend.errors == 0);
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

TEST_CASE("redis limiters: a deferred acquire owns its key" * doctest::timeout(60))
{
    sluice_test::live_redis l;
    redis::token_bucket<redis::connection> tb(l.conn, sluice::rate::every(1min), 1);
    auto op = [&] {
        std::string key(long_key);
        auto deferred = tb.async_acquire(key, 1, 1s, asio::deferred);
        key.assign(key.size(), '#');
        return deferred;
    }();
    auto ec = sluice_test::run_to_end(l.io, [&](auto h) { std::move(op)(h); });
    CHECK_FALSE(ec);
    // It took the permit of that key, and no other.
    CHECK(l.server.command({"EXISTS", tb.redis_key(long_key)}).integer == 1);
    CHECK(l.server.command({"DBSIZE"}).integer == 1);
}

TEST_SUITE_END();
