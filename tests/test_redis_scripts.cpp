// The Lua scripts of the Redis limiters on a real redis-server, through hiredis' sync
// API: the GCRA script decides exactly as policy::gcra, and the sliding log script as
// policy::sliding_log, on the same arrivals (fed through the test-only now_us argument);
// bad arguments and wrong-type keys give error replies.
#include "redis_support.hpp"
#include "rng.hpp"

#include <sluice/detail/base/arith.hpp>
#include <sluice/policy/gcra.hpp>
#include <sluice/policy/sliding_log.hpp>
#include <sluice/redis/detail/store/verdict.hpp>
#include <sluice/redis/scripts.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

using sluice_test::redis_server;
using namespace std::chrono_literals;

struct reply_deleter {
    void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
};
using reply_ptr = std::unique_ptr<redisReply, reply_deleter>;

struct context_deleter {
    void operator()(redisContext* c) const noexcept { redisFree(c); }
};
using context_ptr = std::unique_ptr<redisContext, context_deleter>;

reply_ptr command(redisContext* c, const std::vector<std::string>& argv)
{
    std::vector<const char*> ptrs;
    std::vector<std::size_t> lens;
    for (const auto& a : argv) {
        ptrs.push_back(a.data());
        lens.push_back(a.size());
    }
    auto* r = static_cast<redisReply*>(redisCommandArgv(c, static_cast<int>(argv.size()), ptrs.data(), lens.data()));
    REQUIRE(r != nullptr);
    return reply_ptr(r);
}

reply_ptr eval(redisContext* c, std::string_view script, const std::string& key, std::vector<std::string> args)
{
    std::vector<std::string> argv{"EVAL", std::string(script), "1", key};
    argv.insert(argv.end(), args.begin(), args.end());
    return command(c, argv);
}

struct verdict {
    bool admitted = false;
    std::int64_t wait = 0, remaining = 0, reset = 0, now = 0, state = 0, taken = 0, interval = 0, burst = 0;
};

verdict parse(const reply_ptr& r)
{
    INFO("reply type ", r->type, (r->type == REDIS_REPLY_ERROR ? std::string(r->str, r->len) : std::string()));
    REQUIRE(r->type == REDIS_REPLY_ARRAY);
    REQUIRE((r->elements == 6 || r->elements == 9));
    for (std::size_t i = 0; i < r->elements; ++i)
        REQUIRE(r->element[i]->type == REDIS_REPLY_INTEGER);
    return {r->element[0]->integer == 1, r->element[1]->integer, r->element[2]->integer,
            r->element[3]->integer, r->element[4]->integer, r->element[5]->integer,
            r->elements == 9 ? r->element[6]->integer : 0, r->elements == 9 ? r->element[7]->integer : 0,
            r->elements == 9 ? r->element[8]->integer : 0};
}

// Whether a limiter believes this reply of the script to the request (detail::answers
// and detail::consistent, as redis_op reads every reply): every reply a script gives must
// be, or a limiter would turn a genuine decision into a protocol_error.
bool believed(const verdict& v, sluice::redis::detail::eval_request::mode how, std::int64_t n, std::int64_t max_wait,
              sluice::redis::detail::script_kind k)
{
    namespace d = sluice::redis::detail;
    d::verdict x{v.admitted, v.wait, v.remaining, v.reset, v.now, v.state, v.taken, v.interval, v.burst};
    d::eval_request r{how, static_cast<std::uint64_t>(n), max_wait};
    return d::answers(x, r) && d::consistent(x, r, k);
}

constexpr auto gcra_kind = sluice::redis::detail::script_kind::gcra;
using mode = sluice::redis::detail::eval_request::mode;

std::string error_text(const reply_ptr& r)
{
    REQUIRE(r->type == REDIS_REPLY_ERROR);
    return std::string(r->str, r->len);
}

std::string num(std::int64_t v) { return std::to_string(v); }

// A sliding log's limit and window, and the seed of a random run on it.
struct log_cfg {
    std::uint64_t limit;
    std::int64_t window_us;
    std::uint32_t seed;
};

// Calls the sliding log on `key`, its configuration and waiters' queue beside it: ARGV as given.
auto sliding_log_on(redisContext* c, const std::string& key)
{
    return [c, key](std::vector<std::string> args) {
        std::vector<std::string> argv{"EVAL", std::string(sluice::redis::lua::sliding_log), "3", key, key + ":cfg", key + ":q"};
        argv.insert(argv.end(), args.begin(), args.end());
        return parse(command(c, argv));
    };
}

struct server_fixture {
    redis_server server;
    context_ptr ctx{connect(server.port())};

    static redisContext* connect(std::uint16_t port)
    {
        timeval tv{2, 0};
        redisContext* c = redisConnectWithTimeout("127.0.0.1", port, tv);
        if (c && !c->err) redisSetTimeout(c, tv);
        return c;
    }

    server_fixture() { REQUIRE((ctx != nullptr && ctx->err == 0)); }
};

// Runs `steps` random arrivals against the script and a local policy::gcra with the same
// interval and burst (times in whole microseconds), comparing every decision.
void gcra_equality(redisContext* c, const std::string& key, std::int64_t interval_us, std::uint64_t burst,
                   std::uint32_t seed, int steps)
{
    INFO("interval_us ", interval_us, " burst ", burst, " seed ", seed);
    sluice::policy::gcra local(sluice::rate::every(std::chrono::microseconds(interval_us)), burst);
    sluice_test::rng rng{seed};
    std::int64_t now = 1'000'000'000;   // us
    std::uint64_t max_n = std::min<std::uint64_t>(burst, std::max<std::uint64_t>(8, burst / 10));
    struct last_reservation {
        std::uint64_t n;
        std::int64_t z;
    };
    std::vector<last_reservation> refundable;
    int granted = 0, refused = 0, refunds = 0;
    for (int i = 0; i < steps; ++i) {
        // Mostly short steps around the interval, sometimes an idle gap back to full.
        std::uint64_t r = rng() % 100;
        if (r < 3)
            now += interval_us * static_cast<std::int64_t>(burst) * static_cast<std::int64_t>(1 + rng() % 3);
        else if (r < 50)
            now += static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(2 * interval_us + 1));
        // else: the same instant

        std::uint64_t n = 1 + rng() % max_n;
        std::int64_t now_ns = now * 1000;
        std::uint64_t op = rng() % 10;
        if (op < 5) {
            auto v = parse(eval(c, sluice::redis::lua::gcra, key,
                                {num(interval_us), num(static_cast<std::int64_t>(burst)), num(static_cast<std::int64_t>(n)), "0", "try", num(now)}));
            auto d = local.try_acquire(n, now_ns);
            INFO("step ", i, " try n ", n, " now ", now);
            CHECK(believed(v, mode::try_now, static_cast<std::int64_t>(n), 0, gcra_kind));
            REQUIRE(!d.error);
            REQUIRE(v.admitted == d.admitted);
            CHECK(v.now == now);
            CHECK(v.wait * 1000 == d.retry_after.count());
            CHECK(static_cast<std::uint64_t>(v.remaining) == d.remaining);
            CHECK(v.reset * 1000 == d.reset_after.count());
            if (v.admitted) {
                CHECK(v.state * 1000 == local.empty_at());
                refundable.push_back({n, v.state});
                ++granted;
            } else {
                ++refused;
            }
        } else if (op < 9) {
            std::int64_t max_wait = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(interval_us * static_cast<std::int64_t>(burst) * 2 + 1));
            auto v = parse(eval(c, sluice::redis::lua::gcra, key,
                                {num(interval_us), num(static_cast<std::int64_t>(burst)), num(static_cast<std::int64_t>(n)), num(max_wait), "reserve", num(now)}));
            auto res = local.reserve(n, now_ns, max_wait * 1000);
            INFO("step ", i, " reserve n ", n, " now ", now, " max_wait ", max_wait);
            CHECK(believed(v, mode::reserve, static_cast<std::int64_t>(n), max_wait, gcra_kind));
            REQUIRE(v.admitted == res.admitted);
            CHECK(v.wait * 1000 == std::max<std::int64_t>(res.at - now_ns, 0));
            if (v.admitted) {
                CHECK(v.state * 1000 == local.empty_at());
                refundable.push_back({n, v.state});
                ++granted;
            } else {
                CHECK(res.error == sluice::error::timed_out);
                ++refused;
            }
        } else if (!refundable.empty()) {
            // Refund the latest grant, or an older one (which must then change nothing
            // when something later depends on it).
            std::size_t pick = rng() % 2 == 0 ? refundable.size() - 1 : rng() % refundable.size();
            auto [rn, rz] = refundable[pick];
            refundable.erase(refundable.begin() + static_cast<std::ptrdiff_t>(pick));
            auto v = parse(eval(c, sluice::redis::lua::gcra_refund, key,
                                {num(interval_us), num(static_cast<std::int64_t>(burst)), num(static_cast<std::int64_t>(rn)), num(rz), num(now)}));
            std::int64_t moved = 0;
            if (local.empty_at() == rz * 1000)
                moved = local.refund(rn, now_ns);
            INFO("step ", i, " refund n ", rn, " z ", rz, " now ", now);
            CHECK(v.admitted == (moved > 0));
            CHECK(v.wait * 1000 == moved);
            if (v.admitted) ++refunds;
        }
    }
    // The walk exercised both outcomes (and refunds where it could).
    CHECK(granted > 0);
    CHECK(refused > 0);
    MESSAGE("granted ", granted, " refused ", refused, " refunds ", refunds);
}

} // namespace

TEST_SUITE_BEGIN("redis");

TEST_CASE("scripts may read TIME before writing, and the GCRA state expires once fresh" * doctest::timeout(60))
{
    server_fixture f;
    auto v = parse(eval(f.ctx.get(), sluice::redis::lua::gcra, "t:time", {"1000", "5", "1", "0", "try"}));
    CHECK(v.admitted);
    CHECK(v.remaining == 4);
    CHECK(v.reset == 1000);
    auto t = command(f.ctx.get(), {"TIME"});
    REQUIRE(t->type == REDIS_REPLY_ARRAY);
    std::int64_t server_now = std::stoll(t->element[0]->str) * 1'000'000 + std::stoll(t->element[1]->str);
    CHECK(v.now <= server_now);
    CHECK(v.now > server_now - 5'000'000);
    // The key lives only until the bucket is full again: 1 ms here.
    auto ttl = command(f.ctx.get(), {"PTTL", "t:time"});
    REQUIRE(ttl->type == REDIS_REPLY_INTEGER);
    CHECK(ttl->integer <= 1);
    std::this_thread::sleep_for(20ms);
    auto exists = command(f.ctx.get(), {"EXISTS", "t:time"});
    CHECK(exists->integer == 0);

    // The value is written exactly (16 digits, no %.14g rounding). 60,000 permits of 1 ms:
    // the key outlives the GET by a minute however late the test runs (one permit of 1 us
    // expired before a GET on a loaded machine).
    auto v2 = parse(eval(f.ctx.get(), sluice::redis::lua::gcra, "t:exact", {"1000", "1000000", "60000", "0", "try"}));
    REQUIRE(v2.admitted);
    auto raw = command(f.ctx.get(), {"GET", "t:exact"});
    REQUIRE(raw->type == REDIS_REPLY_STRING);
    CHECK(std::stoll(std::string(raw->str, raw->len)) == v2.state);
}

TEST_CASE("GCRA script decides as policy::gcra on the same arrivals" * doctest::timeout(120))
{
    server_fixture f;
    gcra_equality(f.ctx.get(), "eq:b1", 1000, 1, 1, 3000);
    gcra_equality(f.ctx.get(), "eq:b5", 333, 5, 2, 3000);
    gcra_equality(f.ctx.get(), "eq:b1000", 7, 1000, 3, 3000);
    gcra_equality(f.ctx.get(), "eq:slow", 1'000'000, 3, 4, 2000);
    gcra_equality(f.ctx.get(), "eq:b64", 1, 64, 5, 3000);
}

TEST_CASE("GCRA reservation: FIFO slots, max_wait, refund only while nothing depends on it" * doctest::timeout(60))
{
    server_fixture f;
    auto* c = f.ctx.get();
    auto reserve = [&](std::int64_t n, std::int64_t max_wait, std::int64_t now) {
        return parse(eval(c, sluice::redis::lua::gcra, "r", {"100", "2", num(n), num(max_wait), "reserve", num(now)}));
    };
    auto refund = [&](std::int64_t n, std::int64_t z, std::int64_t now) {
        return parse(eval(c, sluice::redis::lua::gcra_refund, "r", {"100", "2", num(n), num(z), num(now)}));
    };
    std::int64_t t = 10'000;
    CHECK(reserve(2, 0, t).wait == 0);   // the burst
    auto a = reserve(1, 1000, t);
    CHECK(a.admitted);
    CHECK(a.wait == 100);
    auto b = reserve(1, 1000, t);
    CHECK(b.wait == 200);
    // Too far: refused, nothing consumed.
    auto no = reserve(2, 399, t);
    CHECK_FALSE(no.admitted);
    CHECK(no.wait == 400);
    CHECK(reserve(1, 1000, t).wait == 300);
    // `a` is no longer the latest: its refund changes nothing.
    CHECK_FALSE(refund(1, a.state, t).admitted);
    // The latest one can go back, and then `b` (now the latest) too.
    auto c3 = reserve(1, 1000, t);
    CHECK(c3.wait == 400);
    CHECK(refund(1, c3.state, t).admitted);
    auto c4 = reserve(1, 1000, t);
    CHECK(c4.wait == 400);   // the slot was given back
    // A refund never fills the bucket beyond its burst.
    auto late = refund(1, c4.state, t + 1'000'000);
    CHECK_FALSE(late.admitted);   // the key expired or the bucket is full already
}

TEST_CASE("GCRA settle: the state of the settled cost; a debt past the burst; peek writes nothing" * doctest::timeout(60))
{
    server_fixture f;
    auto* c = f.ctx.get();
    auto gcra = [&](const std::string& key, std::int64_t n, const char* mode, std::int64_t now) {
        return parse(eval(c, sluice::redis::lua::gcra, key, {"100", "10", num(n), "0", mode, num(now)}));
    };
    auto settle = [&](const std::string& key, std::int64_t cost, std::int64_t actual, std::int64_t now) {
        return parse(eval(c, sluice::redis::lua::gcra_settle, key, {"100", "10", num(cost), num(actual), num(now)}));
    };
    auto get = [&](const std::string& key) {
        auto r = command(c, {"GET", key});
        return r->type == REDIS_REPLY_STRING ? std::string(r->str, r->len) : std::string("(nil)");
    };
    const std::int64_t t = 10'000;

    // Lower: exactly the state of asking for the settled cost, also a while later.
    REQUIRE(gcra("s", 8, "try", t).admitted);
    REQUIRE(gcra("a", 3, "try", t).admitted);
    auto down = settle("s", 8, 3, t + 50);
    CHECK(down.admitted);
    CHECK(down.state == gcra("a", 1, "peek", t + 50).state - 100);
    CHECK(get("s") == get("a"));
    // Never fuller than full: settled to 0 a while after, a full bucket at that instant.
    REQUIRE(gcra("z", 5, "try", t).admitted);
    CHECK(settle("z", 5, 0, t + 400).state == t + 400 - 1000);

    // Higher: a debt beyond the burst; the next permit waits for it.
    REQUIRE(gcra("d", 2, "try", t).admitted);
    CHECK(settle("d", 2, 12, t).state == t - 1000 + 1200);
    auto next = gcra("d", 1, "try", t);
    CHECK_FALSE(next.admitted);
    CHECK(next.wait == 300);

    // Peek: the answer of a try, nothing written, a new key not created.
    const std::string before = get("s");
    for (std::int64_t n : {1, 7, 8, 11}) {
        auto p = gcra("s", n, "peek", t + 60);
        CHECK(get("s") == before);
        if (n == 11) {
            CHECK_FALSE(p.admitted);
            CHECK(p.wait == 0);   // beyond the burst: never
            continue;
        }
        auto r = gcra("s", n, "try", t + 60);
        CHECK(p.admitted == r.admitted);
        CHECK(p.wait == r.wait);
        CHECK(p.remaining == r.remaining);
        CHECK(p.reset == r.reset);
        CHECK(p.state == r.state);
        if (r.admitted) REQUIRE(settle("s", n, 0, t + 60).admitted);   // back to `before`
        CHECK(get("s") == before);
    }
    CHECK(gcra("new", 3, "peek", t).admitted);
    CHECK(get("new") == "(nil)");

    // Bad arguments are error replies.
    for (auto args : {std::vector<std::string>{"100", "10", "0", "1"}, {"100", "10", "1", "-1"}, {"100", "10", "x", "1"}}) {
        auto r = eval(c, sluice::redis::lua::gcra_settle, "s", args);
        CHECK(r->type == REDIS_REPLY_ERROR);
    }
}

TEST_CASE("GCRA lease: runs of consecutive slots beyond the burst, as a model of the bucket, over random arrivals" * doctest::timeout(120))
{
    server_fixture f;
    auto* c = f.ctx.get();
    // The model: z, the instant the bucket is empty; a lease of n takes the next slots
    // z + i * interval ending within the horizon.
    const std::int64_t interval = 100, burst = 3;
    std::int64_t z = INT64_MIN / 4;
    sluice_test::rng rng{7};
    std::int64_t t = 1'000'000;
    std::int64_t granted_slots = 0;
    const std::int64_t start = t;
    for (int i = 0; i < 3000; ++i) {
        // Mostly short steps, sometimes a long idle gap.
        t += (rng() % 50 == 0) ? static_cast<std::int64_t>(rng() % 1'000'000) : static_cast<std::int64_t>(rng() % 300);
        const auto n = static_cast<std::int64_t>(1 + rng() % 40);
        const auto horizon = static_cast<std::int64_t>(rng() % 3000);
        auto v = parse(eval(c, sluice::redis::lua::gcra, "lease", {num(interval), num(burst), num(n), num(horizon), "lease", num(t)}));
        std::int64_t zz = std::max(z, t - interval * burst);
        std::int64_t k = std::min(n, (t + horizon - zz) / interval);
        CAPTURE(i);
        CHECK(believed(v, mode::lease, n, horizon, gcra_kind));
        if (k < 1) {
            CHECK_FALSE(v.admitted);
            CHECK(v.wait == zz + interval - t);
            CHECK(v.taken == 0);
            continue;
        }
        z = zz + k * interval;
        REQUIRE(v.admitted);
        CHECK(v.taken == k);
        CHECK(v.state == z);
        CHECK(v.wait == std::max<std::int64_t>(0, z - t));
        CHECK(v.wait <= horizon);   // the last slot within the horizon
        granted_slots += k;
        // Never more slots up to any instant than the rate and the burst allow.
        CHECK(granted_slots <= burst + (z - start) / interval);
    }
    // The other modes refuse n beyond the burst for good: a refusal with no wait.
    auto big = parse(eval(c, sluice::redis::lua::gcra, "lease", {num(interval), num(burst), "4", "0", "try", num(t)}));
    CHECK_FALSE(big.admitted);
    CHECK(big.wait == 0);
    CHECK(believed(big, mode::try_now, 4, 0, gcra_kind));
    CHECK(big.interval == interval);
    CHECK(big.burst == burst);
}

namespace {

// The configuration rule, from its definition, in integer us: the whole permits of credit
// or debt are kept (capped by the new burst), the part of a permit is scaled, rounded
// against the caller. z: the instant the bucket is empty.
std::int64_t reconfigured(std::int64_t z, std::int64_t now, std::int64_t oi, std::int64_t ob, std::int64_t ni, std::int64_t nb)
{
    z = std::max(z, now - oi * ob);
    std::int64_t nz = z;
    if (ni != oi) {
        auto scale = [&](std::int64_t d, bool up) {
            std::int64_t q = d / oi, r = d % oi;
            sluice::detail::int128 p = static_cast<sluice::detail::int128>(r) * ni;
            std::int64_t f = static_cast<std::int64_t>(p / oi);
            if (up && p % oi != 0) ++f;
            return q * ni + f;
        };
        nz = z < now ? now - scale(now - z, false) : now + scale(z - now, true);
    }
    return std::max(nz, now - ni * nb);
}

} // namespace

TEST_CASE("GCRA configure: permits kept across a change of rate or burst, any process follows, as a model" * doctest::timeout(120))
{
    server_fixture f;
    auto* c = f.ctx.get();
    sluice_test::rng rng{11};
    // Two "processes" with different constructor configurations: the key's wins once set.
    std::int64_t oi = 100, ob = 10;        // the key's configuration in the model
    std::int64_t z = INT64_MIN / 4;
    std::int64_t t = 5'000'000;
    const std::vector<std::string> keys{"cfgk", "cfgk:cfg"};
    auto call = [&](std::string_view script, std::vector<std::string> args) {
        std::vector<std::string> argv{"EVAL", std::string(script), "2", keys[0], keys[1]};
        argv.insert(argv.end(), args.begin(), args.end());
        return parse(command(c, argv));
    };
    // The key's configuration from the start: the processes' own differ.
    REQUIRE(call(sluice::redis::lua::gcra_configure, {"100", "10", "100", "10", num(t)}).admitted);
    int changes = 0, grants = 0;
    for (int i = 0; i < 4000; ++i) {
        t += (rng() % 100 == 0) ? static_cast<std::int64_t>(rng() % 5'000'000) : static_cast<std::int64_t>(rng() % 400);
        CAPTURE(i);
        if (rng() % 10 == 0) {
            // A change of rate, burst or both, sent with either process's own configuration.
            std::int64_t ni = rng() % 3 == 0 ? 0 : static_cast<std::int64_t>(1 + rng() % 1000);
            std::int64_t nb = rng() % 3 == 0 ? 0 : static_cast<std::int64_t>(1 + rng() % 20);
            auto v = call(sluice::redis::lua::gcra_configure,
                          {i % 2 ? "100" : "37", i % 2 ? "10" : "3", num(ni), num(nb), num(t)});
            std::int64_t wi = ni ? ni : oi, wb = nb ? nb : ob;
            z = reconfigured(z, t, oi, ob, wi, wb);
            oi = wi;
            ob = wb;
            REQUIRE(v.admitted);
            CHECK(v.interval == oi);
            CHECK(v.burst == ob);
            CHECK(v.state == z);
            ++changes;
            continue;
        }
        const auto n = static_cast<std::int64_t>(1 + rng() % 12);
        auto v = call(sluice::redis::lua::gcra, {i % 2 ? "100" : "37", i % 2 ? "10" : "3", num(n), "0", "try", num(t)});
        CHECK(v.interval == oi);
        CHECK(v.burst == ob);
        std::int64_t zz = std::max(z, t - oi * ob);
        if (n > ob) {
            CHECK_FALSE(v.admitted);
            CHECK(v.wait == 0);
            continue;
        }
        bool ok = zz + n * oi <= t;
        CHECK(v.admitted == ok);
        if (ok) {
            z = zz + n * oi;
            ++grants;
        }
        if (v.admitted) CHECK(v.state == z);
    }
    MESSAGE("changes ", changes, " grants ", grants);
    CHECK(changes > 300);
    CHECK(grants > 300);
}

TEST_CASE("GCRA configure: examples of issue 12's rule, and the window's limit" * doctest::timeout(60))
{
    server_fixture f;
    auto* c = f.ctx.get();
    auto call = [&](std::string_view script, const std::string& key, std::vector<std::string> args) {
        std::vector<std::string> argv{"EVAL", std::string(script), "2", key, key + ":cfg"};
        argv.insert(argv.end(), args.begin(), args.end());
        return parse(command(c, argv));
    };
    const std::int64_t t = 10'000'000;
    // 10/s burst 10, 5 taken: 5 left. At 20/s still 5 (not a full bucket again), at 5/s 5.
    CHECK(call(sluice::redis::lua::gcra, "a", {"100000", "10", "5", "0", "try", num(t)}).remaining == 5);
    CHECK(call(sluice::redis::lua::gcra_configure, "a", {"100000", "10", "50000", "0", num(t)}).remaining == 5);
    CHECK_FALSE(call(sluice::redis::lua::gcra, "a", {"100000", "10", "6", "0", "try", num(t)}).admitted);
    CHECK(call(sluice::redis::lua::gcra, "a", {"100000", "10", "5", "0", "try", num(t)}).admitted);
    // Now empty; 1 permit back after 50 ms at the new rate (the old one would need 100).
    CHECK(call(sluice::redis::lua::gcra, "a", {"100000", "10", "1", "0", "try", num(t + 50'000)}).admitted);
    CHECK(call(sluice::redis::lua::gcra_configure, "b", {"100000", "10", "200000", "0", num(t)}).remaining == 10);
    // A full bucket that shrinks holds the new burst.
    CHECK(call(sluice::redis::lua::gcra_configure, "b", {"100000", "10", "0", "4", num(t)}).remaining == 4);
    CHECK_FALSE(call(sluice::redis::lua::gcra, "b", {"100000", "10", "5", "0", "try", num(t)}).admitted);

    // The window: the new limit applies to what is in the log.
    for (int i = 0; i < 3; ++i)
        CHECK(call(sluice::redis::lua::sliding_log, "w", {"5", "1000000", "1", num(t)}).admitted);
    auto w = call(sluice::redis::lua::sliding_log_configure, "w", {"5", "1000000", "2", "0"});
    CHECK(w.burst == 2);
    CHECK_FALSE(call(sluice::redis::lua::sliding_log, "w", {"5", "1000000", "1", num(t)}).admitted);
    call(sluice::redis::lua::sliding_log_configure, "w", {"5", "1000000", "4", "0"});
    CHECK(call(sluice::redis::lua::sliding_log, "w", {"5", "1000000", "1", num(t)}).admitted);
    CHECK_FALSE(call(sluice::redis::lua::sliding_log, "w", {"5", "1000000", "1", num(t)}).admitted);
}

TEST_CASE("sliding log queue: waiters first come first served across processes, tries never overtake them, dead tickets dropped" * doctest::timeout(60))
{
    server_fixture f;
    auto* c = f.ctx.get();
    auto call = sliding_log_on(c, "fq");
    const std::int64_t t = 50'000'000;   // limit 5 per 1 s
    CHECK(call({"5", "1000000", "3", num(t)}).admitted);
    // A waiter for 4 (process A) is refused and queued; told when 2 entries leave.
    const std::string a = num(t + 10'000'000) + ":4:a";
    auto ra = call({"5", "1000000", "4", num(t + 1), a});
    CHECK_FALSE(ra.admitted);
    CHECK(ra.wait == 1'000'000 - 1);
    // There is room for 2, but a try for 1 and a waiter for 2 (process B) come after A.
    CHECK_FALSE(call({"5", "1000000", "1", num(t + 2)}).admitted);
    const std::string b = num(t + 10'000'000) + ":2:b";
    auto rb = call({"5", "1000000", "2", num(t + 3), b});
    CHECK_FALSE(rb.admitted);
    CHECK(rb.remaining == 0);   // A's 4 are spoken for
    CHECK(command(c, {"ZCARD", "fq:q"})->integer == 2);
    // B asks again first, once the log is empty: still behind A, which has room for its 4.
    CHECK_FALSE(call({"5", "1000000", "2", num(t + 1'000'001), b}).admitted);
    CHECK(call({"5", "1000000", "4", num(t + 1'000'002), a}).admitted);
    // Now B's turn (4 + 2 > 5: after A's entries leave).
    auto rb2 = call({"5", "1000000", "2", num(t + 1'000'003), b});
    CHECK_FALSE(rb2.admitted);
    CHECK(rb2.wait == 1'000'000 - 1);
    CHECK(call({"5", "1000000", "2", num(t + 2'000'002), b}).admitted);
    CHECK(command(c, {"ZCARD", "fq:q"})->integer == 0);

    // A waiter that died holds its place until its deadline only.
    const std::string dead = num(t + 2'500'000) + ":5:dead";
    CHECK(call({"5", "1000000", "5", num(t + 2'000'003), dead}).admitted == false);
    CHECK_FALSE(call({"5", "1000000", "1", num(t + 2'400'000)}).admitted);
    CHECK(call({"5", "1000000", "1", num(t + 3'100'000)}).admitted);
    CHECK(command(c, {"ZCARD", "fq:q"})->integer == 0);
    // Leaving: the script removes the ticket.
    const std::string gone = num(t + 9'000'000) + ":5:gone";
    call({"5", "1000000", "5", num(t + 3'100'001), gone});
    CHECK(command(c, {"ZCARD", "fq:q"})->integer == 1);
    command(c, {"EVAL", std::string(sluice::redis::lua::sliding_log_leave), "1", "fq:q", gone});
    CHECK(command(c, {"ZCARD", "fq:q"})->integer == 0);
    // The queue is read only when its key exists: one of another type is still an error
    // reply naming it, and the log is left as it was.
    command(c, {"SET", "fq:q", "not a queue"});
    auto bad = command(c, {"EVAL", std::string(sluice::redis::lua::sliding_log), "3", "fq", "fq:cfg", "fq:q", "5",
                           "1000000", "1", num(t + 3'100'002)});
    CHECK(error_text(bad).find("fq:q") != std::string::npos);
    CHECK(error_text(bad).find("WRONGTYPE") != std::string::npos);
    CHECK(command(c, {"ZCARD", "fq"})->integer == 1);
}

TEST_CASE("sliding log queue: read only as far as the answer needs, first come first served across chunks" * doctest::timeout(60))
{
    server_fixture f;
    auto* c = f.ctx.get();
    auto call = sliding_log_on(c, "cq");
    const std::int64_t t = 50'000'000;   // limit 5 per 1 s
    REQUIRE(call({"5", "1000000", "5", num(t)}).admitted);
    // 40 waiters of one permit (more than two chunks of the queue), then one that dies.
    auto ticket = [&](int i) { return num(t + 100'000'000) + ":1:w" + std::to_string(i); };
    for (int i = 1; i <= 40; ++i)
        REQUIRE_FALSE(call({"5", "1000000", "1", num(t + i), ticket(i)}).admitted);
    const std::string dead = num(t + 50) + ":1:dead";
    REQUIRE_FALSE(call({"5", "1000000", "1", num(t + 41), dead}).admitted);
    REQUIRE(command(c, {"ZCARD", "cq:q"})->integer == 41);

    std::int64_t now = t;
    for (int round = 0; round < 8; ++round) {
        now += 1'100'000;   // the window is empty again
        // A try, and the waiter after this round's five, are refused: five tickets come first.
        // The dead ticket at the end is not read, so not dropped yet.
        auto tr = call({"5", "1000000", "1", num(now)});
        CHECK_FALSE(tr.admitted);
        CHECK(tr.remaining == 0);
        if (round < 7) CHECK_FALSE(call({"5", "1000000", "1", num(now), ticket(5 * round + 6)}).admitted);
        CHECK(command(c, {"ZCARD", "cq:q"})->integer == 41 - 5 * round);
        // This round's five, in order.
        for (int i = 5 * round + 1; i <= 5 * round + 5; ++i) {
            INFO("round ", round, " waiter ", i);
            CHECK(call({"5", "1000000", "1", num(now), ticket(i)}).admitted);
        }
    }
    // Only the dead ticket is left: the next request reads it, drops it, and is admitted.
    CHECK(command(c, {"ZCARD", "cq:q"})->integer == 1);
    CHECK(call({"5", "1000000", "1", num(now + 1'100'000)}).admitted);
    CHECK(command(c, {"ZCARD", "cq:q"})->integer == 0);
}

TEST_CASE("sliding log queue: a waiter's wait counts every ticket before it" * doctest::timeout(60))
{
    server_fixture f;
    auto* c = f.ctx.get();
    auto call = sliding_log_on(c, "tq");
    const std::int64_t t = 50'000'000, ms = 1000;   // limit 4 per 1 s
    for (int i = 0; i < 4; ++i)
        REQUIRE(call({"4", "1000000", "1", num(t + i * 100 * ms)}).admitted);
    auto ticket = [&](const char* id, int n) { return num(t + 100'000'000) + ":" + std::to_string(n) + ":" + id; };
    // A and B are queued; C, third, is told when the entry that makes room for A, B and
    // itself leaves: the third oldest (t + 200 ms), not the second (a wake-up that would
    // find A and B still before it, and wait again).
    auto ra = call({"4", "1000000", "1", num(t + 310 * ms), ticket("a", 1)});
    auto rb = call({"4", "1000000", "1", num(t + 320 * ms), ticket("b", 1)});
    auto rc = call({"4", "1000000", "1", num(t + 350 * ms), ticket("c", 1)});
    CHECK_FALSE(ra.admitted);
    CHECK(ra.wait == 1000 * ms - 310 * ms);
    CHECK_FALSE(rb.admitted);
    CHECK(rb.wait == 1100 * ms - 320 * ms);
    CHECK_FALSE(rc.admitted);
    CHECK(rc.wait == 1200 * ms - 350 * ms);
    CHECK(rc.remaining == 0);
    // D, for 2, needs more than the log holds: a window, the lower bound.
    auto rd = call({"4", "1000000", "2", num(t + 360 * ms), ticket("d", 2)});
    CHECK_FALSE(rd.admitted);
    CHECK(rd.wait == 1000 * ms);
    // At C's time A, B and C are granted in order; D waits for a window after them.
    const std::int64_t at = t + 1200 * ms;
    CHECK(call({"4", "1000000", "1", num(at), ticket("a", 1)}).admitted);
    CHECK(call({"4", "1000000", "1", num(at), ticket("b", 1)}).admitted);
    CHECK(call({"4", "1000000", "1", num(at), ticket("c", 1)}).admitted);
    auto rd2 = call({"4", "1000000", "2", num(at), ticket("d", 2)});
    CHECK_FALSE(rd2.admitted);
    CHECK(rd2.wait == 1000 * ms);   // one slot at t + 1300 ms, the second when A's entry leaves
}

TEST_CASE("GCRA script: bad arguments and wrong-type keys are error replies" * doctest::timeout(60))
{
    server_fixture f;
    auto* c = f.ctx.get();
    auto err = [&](const std::string& key, std::vector<std::string> args) {
        return error_text(eval(c, sluice::redis::lua::gcra, key, std::move(args)));
    };
    CHECK(err("k", {"4503599627370496", "1", "1", "0", "try"}).find("interval_us") != std::string::npos);
    CHECK(err("k", {"1000000000", "10000000", "1", "0", "try"}).find("2^51") != std::string::npos);
    CHECK(err("k", {"0", "1", "1", "0", "try"}).find("interval_us") != std::string::npos);
    CHECK(err("k", {"1.5", "1", "1", "0", "try"}).find("interval_us") != std::string::npos);
    CHECK(err("k", {"x", "1", "1", "0", "try"}).find("interval_us") != std::string::npos);
    CHECK(err("k", {"10", "0", "1", "0", "try"}).find("burst") != std::string::npos);
    // n beyond the burst is a refusal with no wait (it can never be granted), not an error.
    auto big = parse(eval(c, sluice::redis::lua::gcra, "k", {"10", "2", "3", "0", "try"}));
    CHECK_FALSE(big.admitted);
    CHECK(big.wait == 0);
    CHECK(err("k", {"10", "2", "1", "-1", "reserve"}).find("max_wait_us") != std::string::npos);
    CHECK(err("k", {"10", "2", "1", "0", "later"}).find("mode") != std::string::npos);
    CHECK(err("k", {"10", "2"}).find("n must") != std::string::npos);

    command(c, {"RPUSH", "list", "x"});
    CHECK(err("list", {"10", "2", "1", "0", "try"}).find("WRONGTYPE") != std::string::npos);
    CHECK(error_text(eval(c, sluice::redis::lua::gcra_refund, "list", {"10", "2", "1", "5"})).find("WRONGTYPE") != std::string::npos);
    CHECK(error_text(eval(c, sluice::redis::lua::sliding_log, "list", {"10", "1000", "1"})).find("WRONGTYPE") != std::string::npos);
    command(c, {"SET", "text", "abc"});
    CHECK(err("text", {"10", "2", "1", "0", "try"}).find("integer") != std::string::npos);
    // Nothing was changed by the refusals.
    auto type = command(c, {"TYPE", "list"});
    CHECK(std::string(type->str) == "list");
    CHECK(command(c, {"EXISTS", "k"})->integer == 0);
}

TEST_CASE("sliding log: the log outlives its newest permit by a window, also when the window grows" * doctest::timeout(60))
{
    server_fixture f;
    auto* c = f.ctx.get();
    auto call = [&](std::string_view script, std::vector<std::string> args) {
        std::vector<std::string> argv{"EVAL", std::string(script), "2", "ttl", "ttl:cfg"};
        argv.insert(argv.end(), args.begin(), args.end());
        return parse(command(c, argv));
    };
    // Under a simulated clock (now_us given) a key lives 60 s longer than it needs.
    constexpr std::int64_t extra_ms = 60'000, slack_ms = 2'000;
    std::int64_t window = 2'000'000, newest = 0;
    std::int64_t now = 1'000'000'000;
    sluice_test::rng rng{7};
    int admitted = 0, expiry_checks = 0;
    for (int i = 0; i < 400; ++i) {
        now += static_cast<std::int64_t>(rng() % 400'000);
        if (i == 200) {
            // The window grows tenfold: what is in the log must now live ten times longer.
            window = 20'000'000;
            call(sluice::redis::lua::sliding_log_configure, {"50", "2000000", "0", num(window), num(now)});
        }
        auto v = call(sluice::redis::lua::sliding_log, {"50", "2000000", "1", num(now)});
        if (v.admitted) {
            ++admitted;
            newest = now;
        }
        if (newest == 0) continue;
        auto ttl = command(c, {"PTTL", "ttl"});
        REQUIRE(ttl->type == REDIS_REPLY_INTEGER);
        INFO("step ", i, " now ", now, " newest ", newest, " window ", window, " pttl ", ttl->integer);
        CHECK(ttl->integer * 1000 >= newest + window - now + (extra_ms - slack_ms) * 1000);
        ++expiry_checks;
    }
    CHECK(admitted > 100);
    CHECK(expiry_checks > 300);
}

TEST_CASE("sliding log script decides as policy::sliding_log and never exceeds the limit in any window" * doctest::timeout(120))
{
    server_fixture f;
    auto* c = f.ctx.get();
    for (log_cfg k : {log_cfg{1, 1000, 1}, log_cfg{5, 10'000, 2}, log_cfg{100, 50'000, 3}}) {
        INFO("limit ", k.limit, " window ", k.window_us);
        std::string key = "log:" + std::to_string(k.limit);
        sluice::policy::sliding_log local(k.limit, std::chrono::microseconds(k.window_us));
        sluice_test::rng rng{k.seed};
        std::int64_t now = 5'000'000;
        std::deque<std::int64_t> admitted;   // one entry per permit
        int granted = 0, refused = 0;
        for (int i = 0; i < 2000; ++i) {
            std::uint64_t r = rng() % 100;
            if (r < 3) now += k.window_us * 2;
            else if (r < 60) now += static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(k.window_us / static_cast<std::int64_t>(k.limit) * 2 + 1));
            std::uint64_t n = 1 + rng() % std::min<std::uint64_t>(k.limit, 4);
            auto v = parse(eval(c, sluice::redis::lua::sliding_log, key,
                                {num(static_cast<std::int64_t>(k.limit)), num(k.window_us), num(static_cast<std::int64_t>(n)), num(now)}));
            auto d = local.try_acquire(n, now * 1000);
            INFO("step ", i, " n ", n, " now ", now);
            CHECK(believed(v, mode::try_now, static_cast<std::int64_t>(n), 0, sluice::redis::detail::script_kind::sliding_log));
            REQUIRE(v.admitted == d.admitted);
            CHECK(v.wait * 1000 == d.retry_after.count());
            CHECK(static_cast<std::uint64_t>(v.remaining) == d.remaining);
            CHECK(v.reset * 1000 == d.reset_after.count());
            if (v.admitted) {
                ++granted;
                for (std::uint64_t j = 0; j < n; ++j) admitted.push_back(now);
                // Permits in (now - window, now]: at most limit.
                auto in_window = std::count_if(admitted.begin(), admitted.end(),
                                               [&](std::int64_t s) { return s > now - k.window_us; });
                CHECK(static_cast<std::uint64_t>(in_window) <= k.limit);
                while (!admitted.empty() && admitted.front() <= now - k.window_us) admitted.pop_front();
            } else {
                ++refused;
            }
        }
        CHECK(granted > 0);
        CHECK(refused > 0);
        // The set holds no more than limit members: unique members per permit.
        CHECK(command(c, {"ZCARD", key})->integer <= static_cast<long long>(k.limit));
    }

    // Many permits at one instant: every one is its own member.
    for (int i = 0; i < 10; ++i)
        CHECK(parse(eval(c, sluice::redis::lua::sliding_log, "same", {"20", "1000000", "2", "7000000"})).admitted);
    CHECK(command(c, {"ZCARD", "same"})->integer == 20);
    for (int i = 0; i < 10; ++i)
        CHECK(parse(eval(c, sluice::redis::lua::sliding_log, "same1", {"20", "1000000", "1", "7000000"})).admitted);
    CHECK(command(c, {"ZCARD", "same1"})->integer == 10);
    CHECK_FALSE(parse(eval(c, sluice::redis::lua::sliding_log, "same", {"20", "1000000", "1", "7000000"})).admitted);
    CHECK(error_text(eval(c, sluice::redis::lua::sliding_log, "same", {"20", "0", "1"})).find("window_us") != std::string::npos);
    auto big = parse(eval(c, sluice::redis::lua::sliding_log, "same", {"20", "10", "21"}));
    CHECK_FALSE(big.admitted);
    CHECK(big.wait == 0);   // beyond the limit: never
}

// A batch, as a process sends the requests of one key that wait while its previous call
// is in flight: ARGV limit, window, n, now, ticket, then (n, ticket) pairs.
struct log_request {
    std::uint64_t n = 1;
    std::string ticket;   // '' for a try
};

std::vector<std::string> batch_args(std::uint64_t limit, std::int64_t window_us, std::int64_t now,
                                    const std::vector<log_request>& rs)
{
    std::vector<std::string> a{num(static_cast<std::int64_t>(limit)), num(window_us),
                               num(static_cast<std::int64_t>(rs[0].n)), num(now), rs[0].ticket};
    for (std::size_t i = 1; i < rs.size(); ++i) {
        a.push_back(num(static_cast<std::int64_t>(rs[i].n)));
        a.push_back(rs[i].ticket);
    }
    return a;
}

std::vector<verdict> parse_batch(const reply_ptr& r, std::size_t m)
{
    INFO("reply type ", r->type, (r->type == REDIS_REPLY_ERROR ? std::string(r->str, r->len) : std::string()));
    REQUIRE(r->type == REDIS_REPLY_ARRAY);
    REQUIRE(r->elements == 6 * m);
    std::vector<verdict> out;
    for (std::size_t k = 0; k < m; ++k) {
        auto el = [&](std::size_t j) {
            REQUIRE(r->element[6 * k + j]->type == REDIS_REPLY_INTEGER);
            return r->element[6 * k + j]->integer;
        };
        out.push_back({el(0) == 1, el(1), el(2), el(3), el(4), el(5)});
    }
    return out;
}

std::vector<std::string> members(redisContext* c, const std::string& key, bool scores)
{
    auto r = scores ? command(c, {"ZRANGE", key, "0", "-1", "WITHSCORES"}) : command(c, {"ZRANGE", key, "0", "-1"});
    REQUIRE(r->type == REDIS_REPLY_ARRAY);
    std::vector<std::string> out;
    for (std::size_t i = 0; i < r->elements; ++i) out.emplace_back(r->element[i]->str, r->element[i]->len);
    return out;
}

TEST_CASE("sliding log batch: decides as the same requests one call each, tickets and queue included" * doctest::timeout(120))
{
    server_fixture f;
    auto* c = f.ctx.get();
    for (log_cfg k : {log_cfg{1, 1000, 11}, log_cfg{6, 10'000, 12}, log_cfg{50, 40'000, 13}}) {
        INFO("limit ", k.limit, " window ", k.window_us, " seed ", k.seed);
        const std::string one = "one:" + std::to_string(k.limit), many = "many:" + std::to_string(k.limit);
        auto keys = [](const std::string& key) {
            return std::vector<std::string>{"EVAL", std::string(sluice::redis::lua::sliding_log), "3", key,
                                            key + ":cfg", key + ":q"};
        };
        sluice_test::rng rng{k.seed};
        std::int64_t now = 9'000'000;
        std::vector<std::string> refused;   // tickets refused, asked again later (or left)
        int id = 0, batches = 0, granted = 0, refusals = 0, waited = 0, multi = 0;
        for (int step = 0; step < 600; ++step) {
            std::uint64_t r = rng() % 100;
            if (r < 15) now += k.window_us * 2;
            else if (r < 70) now += static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(k.window_us / 2 + 1));
            // One batch of 1 to 12 requests: tries, new waiters (some with deadlines that
            // pass while they wait), waiters asking again; sometimes one asks beyond the limit.
            std::vector<log_request> rs(1 + rng() % 12);
            for (auto& q : rs) {
                q.n = 1 + rng() % std::min<std::uint64_t>(k.limit, 3);
                if (rng() % 50 == 0) q.n = k.limit + 1;
                std::uint64_t what = rng() % 10;
                if (what < 4 && !refused.empty()) {
                    // Mostly the oldest waiter (first come, first served), sometimes another.
                    std::size_t at = rng() % 5 == 0 ? rng() % refused.size() : 0;
                    q.ticket = refused[at];
                    refused.erase(refused.begin() + static_cast<std::ptrdiff_t>(at));
                    q.n = std::stoull(q.ticket.substr(q.ticket.find(':') + 1));
                    ++waited;
                } else if (what < 7) {
                    std::int64_t deadline = now + static_cast<std::int64_t>(rng() % 4 == 0 ? k.window_us / 2 : 2 * k.window_us);
                    q.ticket = num(deadline) + ":" + std::to_string(q.n) + ":t" + std::to_string(++id);
                }
            }
            for (const auto& q : rs) INFO("n ", q.n, " ticket ", q.ticket);
            std::vector<verdict> each;
            for (const auto& q : rs) {
                auto argv = keys(one);
                auto a = batch_args(k.limit, k.window_us, now, {q});
                argv.insert(argv.end(), a.begin(), a.end());
                each.push_back(parse(command(c, argv)));
            }
            auto argv = keys(many);
            auto a = batch_args(k.limit, k.window_us, now, rs);
            argv.insert(argv.end(), a.begin(), a.end());
            auto together = parse_batch(command(c, argv), rs.size());
            ++batches;
            if (rs.size() > 1) ++multi;
            for (std::size_t j = 0; j < rs.size(); ++j) {
                INFO("step ", step, " request ", j, " of ", rs.size(), " now ", now);
                CHECK(together[j].admitted == each[j].admitted);
                CHECK(together[j].wait == each[j].wait);
                CHECK(together[j].remaining == each[j].remaining);
                CHECK(together[j].reset == each[j].reset);
                CHECK(together[j].now == each[j].now);
                if (each[j].admitted) ++granted;
                else ++refusals;
                if (!each[j].admitted && !rs[j].ticket.empty() && rs[j].n <= k.limit) refused.push_back(rs[j].ticket);
            }
            // Sometimes a waiter leaves, from both queues.
            if (!refused.empty() && rng() % 8 == 0) {
                std::size_t at = rng() % refused.size();
                for (const auto& key : {one, many})
                    command(c, {"EVAL", std::string(sluice::redis::lua::sliding_log_leave), "1", key + ":q", refused[at]});
                refused.erase(refused.begin() + static_cast<std::ptrdiff_t>(at));
            }
            INFO("step ", step);
            REQUIRE(members(c, one, true) == members(c, many, true));
            REQUIRE(members(c, one + ":q", false) == members(c, many + ":q", false));
        }
        // Every path was taken (a limit of 1 under this load grants a few dozen).
        CHECK(multi > 500);
        CHECK(granted > 20);
        CHECK(refusals > 1000);
        CHECK(waited > 50);
        // Both logs expire together: the batch sets the same expiry.
        auto t1 = command(c, {"PTTL", one})->integer, t2 = command(c, {"PTTL", many})->integer;
        CHECK(std::abs(t1 - t2) <= 1000);
        (void)batches;
    }
}

TEST_CASE("sliding log batch: decides as policy::sliding_log; a bad request fails the call with nothing written" * doctest::timeout(60))
{
    server_fixture f;
    auto* c = f.ctx.get();
    const std::uint64_t limit = 20;
    const std::int64_t window_us = 100'000;
    sluice::policy::sliding_log local(limit, std::chrono::microseconds(window_us));
    sluice_test::rng rng{21};
    std::int64_t now = 3'000'000;
    int granted = 0, refused = 0;
    for (int step = 0; step < 1500; ++step) {
        if (rng() % 100 < 60) now += static_cast<std::int64_t>(rng() % 60'000);
        std::vector<log_request> rs(1 + rng() % 16);
        for (auto& q : rs) q.n = 1 + rng() % 3;
        auto argv = std::vector<std::string>{"EVAL", std::string(sluice::redis::lua::sliding_log), "1", "model"};
        auto a = batch_args(limit, window_us, now, rs);
        argv.insert(argv.end(), a.begin(), a.end());
        auto vs = parse_batch(command(c, argv), rs.size());
        for (std::size_t j = 0; j < rs.size(); ++j) {
            auto d = local.try_acquire(rs[j].n, now * 1000);
            INFO("step ", step, " request ", j, " n ", rs[j].n, " now ", now);
            REQUIRE(vs[j].admitted == d.admitted);
            CHECK(vs[j].wait * 1000 == d.retry_after.count());
            CHECK(static_cast<std::uint64_t>(vs[j].remaining) == d.remaining);
            CHECK(vs[j].reset * 1000 == d.reset_after.count());
            (d.admitted ? granted : refused) += 1;
        }
    }
    CHECK(granted > 1000);
    CHECK(refused > 1000);

    // A bad n or ticket anywhere in the batch: an error reply, and nothing decided before it.
    const auto before = members(c, "model", true);
    for (auto bad : {std::vector<log_request>{{1, ""}, {0, ""}}, std::vector<log_request>{{1, ""}, {1, "soon:1:x"}},
                     std::vector<log_request>{{2, ""}, {1, ""}, {1, "x"}}}) {
        auto argv = std::vector<std::string>{"EVAL", std::string(sluice::redis::lua::sliding_log), "1", "model"};
        auto a = batch_args(limit, window_us, now + window_us * 3, bad);
        argv.insert(argv.end(), a.begin(), a.end());
        auto text = error_text(command(c, argv));
        CHECK((text.find("n must") != std::string::npos || text.find("ticket must") != std::string::npos));
        CHECK(members(c, "model", true) == before);
    }
}

TEST_SUITE_END();
