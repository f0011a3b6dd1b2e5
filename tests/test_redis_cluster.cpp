// Hash slots, and sluice::redis::cluster against a 3-master cluster started by the test.
#include "redis_support.hpp"

#include <sluice/redis/cluster.hpp>
#include <sluice/redis/hash_slot.hpp>

#include <boost/asio/io_context.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <optional>
#include <set>

namespace asio = boost::asio;
using boost::system::error_code;
using sluice::redis::reply;
using namespace std::chrono_literals;

namespace {

using result = std::optional<std::pair<error_code, reply>>;

template <class Pred>
bool run_until(asio::io_context& io, Pred pred, std::chrono::milliseconds limit = 10s)
{
    auto end = std::chrono::steady_clock::now() + limit;
    while (!pred()) {
        if (std::chrono::steady_clock::now() >= end) return false;
        sluice_test::run_slice(io, 2ms);
    }
    return true;
}

result exec(asio::io_context& io, sluice::redis::cluster& c, std::vector<std::string> argv)
{
    result out;
    c.async_exec(std::move(argv), [&](error_code ec, reply r) { out.emplace(ec, std::move(r)); });
    run_until(io, [&] { return out.has_value(); });
    return out;
}

std::string addr(sluice_test::redis_server& s) { return "127.0.0.1:" + std::to_string(s.port()); }

// A key (with a distinct prefix) whose slot node `owner` of the cluster serves.
std::string key_on(sluice_test::redis_cluster& cl, int owner, const std::string& prefix)
{
    for (int i = 0;; ++i) {
        auto k = prefix + std::to_string(i);
        if (cl.owner_of(sluice::redis::key_slot(k)) == owner) return k;
    }
}

} // namespace

TEST_SUITE_BEGIN("redis");

TEST_CASE("hash_slot: CRC16 and hash tags as Redis Cluster defines them")
{
    using sluice::redis::crc16;
    using sluice::redis::key_slot;
    static_assert(crc16("123456789") == 0x31C3);   // the XMODEM check value
    CHECK(key_slot("123456789") == 12739);
    CHECK(key_slot("") == 0);
    CHECK(key_slot("foo") == 12182);
    CHECK(key_slot("{user1000}.following") == key_slot("{user1000}.followers"));
    CHECK(key_slot("{user1000}.following") == key_slot("user1000"));
    CHECK(key_slot("foo{}{bar}") == key_slot("foo{}{bar}"));
    CHECK(sluice::redis::hash_tag("foo{}{bar}") == "foo{}{bar}");   // empty tag: whole key
    CHECK(sluice::redis::hash_tag("foo{{bar}}zap") == "{bar");
    CHECK(sluice::redis::hash_tag("foo{bar}{zap}") == "bar");
    CHECK(sluice::redis::hash_tag("foo{bar") == "foo{bar");
}

TEST_CASE("cluster: keys spread over every master, scripts on the right node" * doctest::timeout(120))
{
    sluice_test::redis_cluster cl;
    asio::io_context io;
    sluice::redis::cluster c(io, cl.config());

    constexpr int n = 300;
    int done = 0, failed = 0;
    for (int i = 0; i < n; ++i)
        c.async_exec({"SET", "key:" + std::to_string(i), std::to_string(i)},
                     [&](error_code ec, reply r) {
                         ++done;
                         if (ec || r.is_error()) ++failed;
                     });
    REQUIRE(run_until(io, [&] { return done == n; }, 30s));
    CHECK(failed == 0);
    std::int64_t total = 0;
    for (std::size_t i = 0; i < cl.size(); ++i) {
        auto size = cl.node(i).command({"DBSIZE"}).integer;
        CHECK(size > 50);   // evenly spread: about 100 each
        total += size;
    }
    CHECK(total == n);
    // The nodes' links, summed: one up for every master, none lost.
    CHECK(c.stats().connects >= cl.size());
    CHECK(c.stats().links_lost == 0);

    auto r = exec(io, c, {"GET", "key:42"});
    REQUIRE(r);
    CHECK(r->second.str == "42");

    // A script runs on the node of its first key (a multi-key script with one hash tag).
    sluice::redis::script s("redis.call('SET', KEYS[1], ARGV[1]); "
                            "return redis.call('INCR', KEYS[2])");
    for (int owner = 0; owner < 3; ++owner) {
        auto k = key_on(cl, owner, "s" + std::to_string(owner) + ":");
        auto tagged = "{" + k + "}";
        result out;
        c.async_eval(s, {tagged + ".a", tagged + ".b"}, {"v"},
                     [&](error_code ec, reply r) { out.emplace(ec, std::move(r)); });
        REQUIRE(run_until(io, [&] { return out.has_value(); }));
        CHECK_FALSE(out->first);
        CHECK(out->second.integer == 1);
        CHECK(cl.node(owner).command({"GET", tagged + ".a"}).str == "v");
        CHECK(c.node_for_slot(sluice::redis::key_slot(tagged)) == addr(cl.node(owner)));
    }

    // Keys in different slots: the cluster refuses, surfaced as backend_error.
    result cross;
    c.async_eval(s, {"a", "b"}, {"v"}, [&](error_code ec, reply r) { cross.emplace(ec, std::move(r)); });
    REQUIRE(run_until(io, [&] { return cross.has_value(); }));
    CHECK(cross->first == sluice::error::backend_error);
    CHECK(cross->second.str.find("CROSSSLOT") != std::string::npos);
}

TEST_CASE("cluster: MOVED after a slot migration refreshes the map; ASK is followed" * doctest::timeout(120))
{
    sluice_test::redis_cluster cl;
    asio::io_context io;
    sluice::redis::cluster c(io, cl.config());

    auto k = key_on(cl, 0, "moved:");
    auto slot = sluice::redis::key_slot(k);
    auto r = exec(io, c, {"SET", k, "before"});
    REQUIRE(r);
    REQUIRE(r->second.str == "OK");
    REQUIRE(c.node_for_slot(slot) == addr(cl.node(0)));

    // Move the slot (and its key) from node 0 to node 1.
    auto id0 = cl.node_id(0), id1 = cl.node_id(1);
    auto s = std::to_string(slot);
    CHECK(cl.node(1).command({"CLUSTER", "SETSLOT", s, "IMPORTING", id0}).str == "OK");
    CHECK(cl.node(0).command({"CLUSTER", "SETSLOT", s, "MIGRATING", id1}).str == "OK");

    SUBCASE("ASK while the slot migrates")
    {
        // A key of that slot that node 0 does not have: node 0 answers ASK.
        std::string fresh;
        for (int i = 0;; ++i) {
            fresh = "{" + k + "}new" + std::to_string(i);
            if (sluice::redis::key_slot(fresh) == slot) break;
        }
        r = exec(io, c, {"SET", fresh, "asked"});
        REQUIRE(r);
        CHECK_FALSE(r->first);
        CHECK(r->second.str == "OK");
        // Landed on the importer (a plain GET there would be MOVED: count instead).
        CHECK(cl.node(1).command({"CLUSTER", "COUNTKEYSINSLOT", s}).integer == 1);
        CHECK(cl.node(0).command({"CLUSTER", "COUNTKEYSINSLOT", s}).integer == 1);   // k
        CHECK(c.node_for_slot(slot) == addr(cl.node(0)));   // ASK does not change the map
    }
    SUBCASE("MOVED once the slot belongs to node 1")
    {
        auto m = cl.node(0).command({"MIGRATE", "127.0.0.1", std::to_string(cl.node(1).port()), k,
                                     "0", "5000"});
        CHECK(m.str == "OK");
        // The order CLUSTER SETSLOT's documentation asks for: the importer first (it bumps
        // its config epoch and owns the slot), then the source, then the others.
        CHECK(cl.node(1).command({"CLUSTER", "SETSLOT", s, "NODE", id1}).str == "OK");
        CHECK(cl.node(0).command({"CLUSTER", "SETSLOT", s, "NODE", id1}).str == "OK");
        for (std::size_t i = 2; i < cl.size(); ++i)
            CHECK(cl.node(i).command({"CLUSTER", "SETSLOT", s, "NODE", id1}).str == "OK");

        r = exec(io, c, {"GET", k});   // sent to node 0, MOVED to node 1
        REQUIRE(r);
        CHECK_FALSE(r->first);
        CHECK(r->second.str == "before");
        CHECK(c.node_for_slot(slot) == addr(cl.node(1)));
        // The background CLUSTER SLOTS refresh agrees.
        run_until(io, [] { return false; }, 200ms);
        CHECK(c.node_for_slot(slot) == addr(cl.node(1)));

        sluice::redis::script sc("return redis.call('GET', KEYS[1])");
        result out;
        c.async_eval(sc, {k}, {}, [&](error_code ec, reply rr) { out.emplace(ec, std::move(rr)); });
        REQUIRE(run_until(io, [&] { return out.has_value(); }));
        CHECK_FALSE(out->first);
        CHECK(out->second.str == "before");
    }
}

TEST_CASE("cluster: TRYAGAIN while a slot migrates is retried until it can run, or answered at the command timeout" * doctest::timeout(120))
{
    sluice_test::redis_cluster cl;
    asio::io_context io;
    auto cfg = cl.config();
    cfg.command_timeout = 3s;
    SUBCASE("the migration ends within the timeout") {}
    SUBCASE("it does not") { cfg.command_timeout = 300ms; }
    sluice::redis::cluster c(io, cfg);

    auto k = key_on(cl, 0, "tryagain:");
    auto slot = sluice::redis::key_slot(k);
    REQUIRE(exec(io, c, {"SET", k, "here"})->second.str == "OK");
    std::string missing;   // same slot, on no node
    for (int i = 0;; ++i) {
        missing = "{" + k + "}absent" + std::to_string(i);
        if (sluice::redis::key_slot(missing) == slot) break;
    }
    auto id0 = cl.node_id(0), id1 = cl.node_id(1);
    auto s = std::to_string(slot);
    REQUIRE(cl.node(1).command({"CLUSTER", "SETSLOT", s, "IMPORTING", id0}).str == "OK");
    REQUIRE(cl.node(0).command({"CLUSTER", "SETSLOT", s, "MIGRATING", id1}).str == "OK");
    // One key here, one not: node 0 answers TRYAGAIN for as long as the slot migrates.
    REQUIRE(cl.node(0).command({"MGET", k, missing}).str.starts_with("TRYAGAIN"));

    result out;
    auto start = std::chrono::steady_clock::now();
    c.async_exec({"MGET", k, missing}, [&](error_code ec, reply r) { out.emplace(ec, std::move(r)); });
    run_until(io, [] { return false; }, 150ms);
    REQUIRE_FALSE(out.has_value());   // still trying

    if (cfg.command_timeout == 3s) {
        CHECK(cl.node(0).command({"MIGRATE", "127.0.0.1", std::to_string(cl.node(1).port()), k, "0", "5000"}).str
              == "OK");
        CHECK(cl.node(1).command({"CLUSTER", "SETSLOT", s, "NODE", id1}).str == "OK");
        CHECK(cl.node(0).command({"CLUSTER", "SETSLOT", s, "NODE", id1}).str == "OK");
        for (std::size_t i = 2; i < cl.size(); ++i)
            CHECK(cl.node(i).command({"CLUSTER", "SETSLOT", s, "NODE", id1}).str == "OK");
        REQUIRE(run_until(io, [&] { return out.has_value(); }));
        CHECK_FALSE(out->first);
        REQUIRE(out->second.type == reply::kind::array);
        REQUIRE(out->second.elements.size() == 2);
        CHECK(out->second.elements[0].str == "here");
        CHECK(out->second.elements[1].type == reply::kind::nil);
    } else {
        REQUIRE(run_until(io, [&] { return out.has_value(); }));
        CHECK_FALSE(out->first);   // answered, with Redis's own reply
        CHECK(out->second.is_error());
        CHECK(out->second.str.starts_with("TRYAGAIN"));
        CHECK(std::chrono::steady_clock::now() - start >= 200ms);
    }
}

TEST_CASE("cluster: unreachable seed fails with backend_unavailable, close() ends everything" * doctest::timeout(60))
{
    asio::io_context io;
    sluice::redis::connection_config cfg;
    cfg.port = sluice_test::pick_port();   // nobody there
    cfg.connect_timeout = 200ms;
    sluice::redis::cluster c(io, cfg);
    auto r = exec(io, c, {"GET", "k"});
    REQUIRE(r);
    CHECK(r->first == sluice::error::backend_unavailable);
    c.close();
    r = exec(io, c, {"GET", "k"});
    REQUIRE(r);
    CHECK(r->first == sluice::error::closed);
}

TEST_CASE("cluster: io_context destroyed with requests in flight" * doctest::timeout(120))
{
    sluice_test::redis_cluster cl;
    for (std::size_t i = 0; i < cl.size(); ++i) cl.node(i).pause();
    int calls = 0;
    {
        asio::io_context io;
        sluice::redis::cluster c(io, cl.config());
        for (int i = 0; i < 10; ++i)
            c.async_exec({"GET", "k" + std::to_string(i)}, [&](error_code, reply) { ++calls; });
        run_until(io, [] { return false; }, 50ms);
    }
    // Dropped with the io_context, never run (LeakSanitizer checks nothing stays behind).
    CHECK(calls == 0);
    for (std::size_t i = 0; i < cl.size(); ++i) cl.node(i).resume();
}

TEST_SUITE_END();
