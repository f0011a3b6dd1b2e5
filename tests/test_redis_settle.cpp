// Settle and peek on redis::token_bucket, on a real redis-server (the fixture starts one
// per test): a settled admission leaves the state of an admission of the settled cost
// (compared with a second key that asked for it), a debt makes later callers wait, a peek
// writes nothing, and tickets the limiter cannot settle are refused with sluice's errors.
#include "redis_limiter_support.hpp"

#include <sluice/admission.hpp>
#include <sluice/redis/connection.hpp>
#include <sluice/redis/token_bucket.hpp>

#include <boost/asio/io_context.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace {

namespace redis = sluice::redis;
using namespace std::chrono_literals;
using error_code = boost::system::error_code;
using sluice::admission;
using sluice::decision;
using sluice::error;
using sluice_test::run_to_end;
using sluice_test::run_until;
using live = sluice_test::live_redis;
using bucket = redis::token_bucket<redis::connection>;

struct admit_result {
    std::optional<error_code> ec;
    admission a;
};

admission try_admit(live& l, bucket& tb, const std::string& key, std::uint64_t n)
{
    auto r = std::make_shared<admit_result>();
    tb.async_try_admit(key, n, [r](error_code ec, admission a) {
        r->ec = ec;
        r->a = std::move(a);
    });
    REQUIRE(run_until(l.io, [&] { return r->ec.has_value(); }));
    REQUIRE_FALSE(*r->ec);
    return std::move(r->a);
}

error_code settle(live& l, bucket& tb, admission a, std::uint64_t actual)
{
    return run_to_end(l.io, [&](auto h) { tb.async_settle(std::move(a), actual, std::move(h)); });
}

std::pair<error_code, decision> peek(live& l, bucket& tb, const std::string& key, std::uint64_t n)
{
    auto r = std::make_shared<std::optional<std::pair<error_code, decision>>>();
    tb.async_peek(key, n, [r](error_code ec, decision d) { *r = std::pair(ec, d); });
    REQUIRE(run_until(l.io, [&] { return r->has_value(); }));
    return **r;
}

// The GCRA state (z, in server us) stored for `key`.
std::int64_t stored(live& l, const bucket& tb, const std::string& key)
{
    auto r = l.server.command({"GET", tb.redis_key(key)});
    REQUIRE(r.type == redis::reply::kind::string);
    return std::stoll(r.str);
}

} // namespace

TEST_SUITE_BEGIN("redis");

TEST_CASE("redis token bucket: settling lower leaves the state of asking for less" * doctest::timeout(60))
{
    live l;
    // 100 ms an interval: the few ms between the calls below are far below one.
    bucket tb(l.conn, sluice::rate::per_second(10), 20);

    admission a = try_admit(l, tb, "settled", 10);
    REQUIRE(a);
    CHECK(a.cost() == 10);
    CHECK(a.key() == "settled");
    CHECK(a.answer().remaining == 10);
    auto asked = sluice_test::try_now(l.io, tb, "asked", 3);
    REQUIRE(asked->d.admitted);

    REQUIRE_FALSE(settle(l, tb, std::move(a), 3));
    const std::int64_t z_settled = stored(l, tb, "settled");
    const std::int64_t z_asked = stored(l, tb, "asked");
    // Both are "3 permits taken a moment ago": equal but for the time between the calls.
    CHECK(z_settled - z_asked < 50'000);
    CHECK(z_asked - z_settled < 50'000);

    // And every later decision agrees: 17 left on both.
    auto p1 = peek(l, tb, "settled", 17);
    auto p2 = peek(l, tb, "asked", 17);
    CHECK(p1.second.admitted);
    CHECK(p2.second.admitted);
    CHECK(p1.second.remaining == p2.second.remaining);
    CHECK_FALSE(peek(l, tb, "settled", 18).second.admitted);

    // Settled to 0: the bucket is full again; the key expires at once.
    admission b = try_admit(l, tb, "zero", 5);
    REQUIRE(b);
    REQUIRE_FALSE(settle(l, tb, std::move(b), 0));
    CHECK(l.server.command({"EXISTS", tb.redis_key("zero")}).integer == 0);
}

TEST_CASE("redis token bucket: settling higher is a debt later callers wait for" * doctest::timeout(60))
{
    live l;
    bucket tb(l.conn, sluice::rate::per_second(10), 5);   // tau = 500 ms

    admission a = try_admit(l, tb, "k", 2);
    REQUIRE(a);
    // 12 intervals: beyond the burst, charged all the same (nothing refused after the fact).
    REQUIRE_FALSE(settle(l, tb, std::move(a), 12));
    auto next = sluice_test::try_now(l.io, tb, "k", 1);
    REQUIRE_FALSE(next->ec);
    CHECK_FALSE(next->d.admitted);
    // z = t - 500 ms + 1200 ms: one more permit at z + 100 ms - 500 ms = t + 800 ms.
    CHECK(next->d.retry_after > 700ms);
    CHECK(next->d.retry_after <= 800ms);
}

TEST_CASE("redis token bucket: peek answers as a try and writes nothing" * doctest::timeout(60))
{
    live l;
    bucket tb(l.conn, sluice::rate::per_second(10), 5);

    // A key never seen is not created.
    auto fresh = peek(l, tb, "k", 2);
    REQUIRE_FALSE(fresh.first);
    CHECK(fresh.second.admitted);
    CHECK(fresh.second.remaining == 3);
    CHECK(l.server.command({"EXISTS", tb.redis_key("k")}).integer == 0);

    REQUIRE(sluice_test::try_now(l.io, tb, "k", 4)->d.admitted);
    const std::int64_t before = stored(l, tb, "k");
    auto p = peek(l, tb, "k", 2);
    REQUIRE_FALSE(p.first);
    CHECK_FALSE(p.second.admitted);
    CHECK(p.second.retry_after > 0ns);
    CHECK(stored(l, tb, "k") == before);
    CHECK(peek(l, tb, "k", 1).second.admitted);
    CHECK(stored(l, tb, "k") == before);
    // Beyond the burst: exceeds_limit, as a try.
    CHECK(peek(l, tb, "k", 6).first == error::exceeds_limit);
    // Not counted as tries.
    CHECK(tb.stats().try_admitted == 1);
}

TEST_CASE("redis token bucket: tickets it cannot settle are errors" * doctest::timeout(60))
{
    live l;
    bucket tb(l.conn, sluice::rate::per_second(10), 5);
    bucket other(l.conn, sluice::rate::per_second(10), 5);

    // Twice.
    admission a = try_admit(l, tb, "k", 1);
    REQUIRE(a);
    admission moved = std::move(a);
    REQUIRE_FALSE(settle(l, tb, std::move(moved), 1));
    CHECK(settle(l, tb, std::move(a), 1) == error::already_settled);

    // A refusal's ticket admitted nothing.
    admission refused = try_admit(l, tb, "k", 5);
    CHECK_FALSE(refused);
    CHECK(settle(l, tb, std::move(refused), 1) == error::not_admitted);

    // Another limiter's: nothing changes in Redis.
    admission mine = try_admit(l, other, "x", 1);
    REQUIRE(mine);
    const std::int64_t before = stored(l, other, "x");
    CHECK(settle(l, tb, std::move(mine), 5) == error::foreign_admission);
    CHECK(stored(l, other, "x") == before);

    // After close().
    admission late = try_admit(l, other, "y", 1);
    REQUIRE(late);
    other.close();
    CHECK(settle(l, other, std::move(late), 2) == error::closed);
}

TEST_CASE("redis token bucket: async_admit's ticket settles" * doctest::timeout(60))
{
    live l;
    bucket tb(l.conn, sluice::rate::per_second(10), 5);
    auto r = std::make_shared<admit_result>();
    tb.async_admit(std::string("k"), 4, 1s, [r](error_code ec, admission a) {
        r->ec = ec;
        r->a = std::move(a);
    });
    REQUIRE(run_until(l.io, [&] { return r->ec.has_value(); }));
    REQUIRE_FALSE(*r->ec);
    REQUIRE(r->a);
    CHECK(r->a.cost() == 4);
    REQUIRE_FALSE(settle(l, tb, std::move(r->a), 1));
    CHECK(peek(l, tb, "k", 4).second.admitted);
}

TEST_SUITE_END();
