// detail::sentinel_fsm step by step, without any socket: the order Sentinels are asked in,
// what each kind of answer leads to, the ROLE check (a demoted master or a stale Sentinel's
// answer is never the result), promotion of the verified Sentinel, and the error of a
// failed round.
#include <sluice/redis/detail/sentinel_fsm.hpp>

#include <boost/asio/error.hpp>

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace {

namespace redis = sluice::redis;
using fsm_t = redis::detail::sentinel_fsm;
using step = fsm_t::step;
using redis::reply;
using redis::sentinel_address;
using redis::sentinel_error;
using boost::system::error_code;

reply text(std::string s)
{
    reply r;
    r.type = reply::kind::string;
    r.str = std::move(s);
    return r;
}

reply array(std::vector<reply> e)
{
    reply r;
    r.type = reply::kind::array;
    r.elements = std::move(e);
    return r;
}

reply addr(const std::string& host, const std::string& port) { return array({text(host), text(port)}); }

reply role(const std::string& what) { return array({text(what), reply{}}); }

reply error_reply(std::string s)
{
    reply r;
    r.type = reply::kind::error;
    r.str = std::move(s);
    return r;
}

const error_code unreachable = boost::asio::error::connection_refused;

std::vector<sentinel_address> three()
{
    return {{"127.0.0.1", 26001}, {"127.0.0.1", 26002}, {"127.0.0.1", 26003}};
}

} // namespace

TEST_SUITE_BEGIN("redis_sentinel_fsm");

TEST_CASE("the first Sentinel's verified answer is the master")
{
    fsm_t f(three(), "mymaster");
    CHECK(f.sentinel_command() == std::vector<std::string>{"SENTINEL", "get-master-addr-by-name", "mymaster"});
    auto a = f.start();
    REQUIRE(a.what == step::ask_sentinel);
    CHECK(a.target == sentinel_address{"127.0.0.1", 26001});
    a = f.on_sentinel_reply({}, addr("10.0.0.5", "6380"));
    REQUIRE(a.what == step::check_role);
    CHECK(a.target == sentinel_address{"10.0.0.5", 6380});
    a = f.on_role_reply({}, role("master"));
    REQUIRE(a.what == step::done);
    CHECK_FALSE(a.ec);
    CHECK(a.target == sentinel_address{"10.0.0.5", 6380});
    CHECK(f.sentinels() == three());   // already first: order unchanged
}

TEST_CASE("unreachable, error-replying and malformed Sentinels are skipped; the one verified moves first")
{
    fsm_t f(three(), "m");
    auto a = f.start();
    a = f.on_sentinel_reply(unreachable, {});
    REQUIRE(a.what == step::ask_sentinel);
    CHECK(a.target.port == 26002);
    a = f.on_sentinel_reply({}, error_reply("NOAUTH Authentication required."));
    REQUIRE(a.what == step::ask_sentinel);
    CHECK(a.target.port == 26003);
    a = f.on_sentinel_reply({}, addr("127.0.0.1", "7001"));
    REQUIRE(a.what == step::check_role);
    a = f.on_role_reply({}, role("master"));
    REQUIRE(a.what == step::done);
    CHECK_FALSE(a.ec);
    // The verified Sentinel first, the others in their previous order.
    std::vector<sentinel_address> expected{{"127.0.0.1", 26003}, {"127.0.0.1", 26001}, {"127.0.0.1", 26002}};
    CHECK(f.sentinels() == expected);

    // The next round (a new fsm over the new order, as the operation does) starts there.
    fsm_t g(f.sentinels(), "m");
    CHECK(g.start().target.port == 26003);
}

TEST_CASE("a demoted master (ROLE slave) is rejected and the next Sentinel asked")
{
    fsm_t f(three(), "m");
    auto a = f.start();
    a = f.on_sentinel_reply({}, addr("127.0.0.1", "7001"));   // stale: the old master
    REQUIRE(a.what == step::check_role);
    a = f.on_role_reply({}, role("slave"));
    REQUIRE(a.what == step::ask_sentinel);
    CHECK(a.target.port == 26002);
    // Another Sentinel names the same demoted instance: not checked again.
    a = f.on_sentinel_reply({}, addr("127.0.0.1", "7001"));
    REQUIRE(a.what == step::ask_sentinel);
    CHECK(a.target.port == 26003);
    a = f.on_sentinel_reply({}, addr("127.0.0.1", "7002"));   // up to date: the promoted one
    REQUIRE(a.what == step::check_role);
    CHECK(a.target.port == 7002);
    a = f.on_role_reply({}, role("master"));
    REQUIRE(a.what == step::done);
    CHECK_FALSE(a.ec);
    CHECK(a.target.port == 7002);
    CHECK(f.sentinels().front().port == 26003);
}

TEST_CASE("a Sentinel naming another Sentinel, or an error to ROLE, is not a master")
{
    fsm_t f({{"127.0.0.1", 26001}}, "m");
    auto a = f.start();
    a = f.on_sentinel_reply({}, addr("127.0.0.1", "26001"));
    REQUIRE(a.what == step::check_role);
    a = f.on_role_reply({}, role("sentinel"));
    REQUIRE(a.what == step::done);
    CHECK(a.ec == sentinel_error::not_master);

    a = f.start();
    a = f.on_sentinel_reply({}, addr("127.0.0.1", "7001"));
    a = f.on_role_reply({}, error_reply("NOAUTH Authentication required."));
    REQUIRE(a.what == step::done);
    CHECK(a.ec == sentinel_error::not_master);
    CHECK(f.sentinels().front().port == 26001);
}

TEST_CASE("a failed round reports the failure furthest along")
{
    SUBCASE("no Sentinel reachable")
    {
        fsm_t f(three(), "m");
        auto a = f.start();
        for (int i = 0; i < 3; ++i) {
            REQUIRE(a.what == step::ask_sentinel);
            a = f.on_sentinel_reply(boost::asio::error::timed_out, {});
        }
        REQUIRE(a.what == step::done);
        CHECK(a.ec == sentinel_error::sentinels_unreachable);
        CHECK(f.sentinels() == three());
    }
    SUBCASE("the name is unknown to every Sentinel that answered")
    {
        fsm_t f(three(), "nope");
        auto a = f.start();
        a = f.on_sentinel_reply({}, reply{});   // nil
        a = f.on_sentinel_reply(unreachable, {});
        a = f.on_sentinel_reply({}, reply{});
        REQUIRE(a.what == step::done);
        CHECK(a.ec == sentinel_error::unknown_master);
    }
    SUBCASE("the master named is down (failover not finished yet)")
    {
        fsm_t f(three(), "m");
        auto a = f.start();
        a = f.on_sentinel_reply({}, addr("127.0.0.1", "7001"));
        a = f.on_role_reply(unreachable, {});
        REQUIRE(a.what == step::ask_sentinel);
        a = f.on_sentinel_reply({}, addr("127.0.0.1", "7001"));   // known bad: skipped
        REQUIRE(a.what == step::ask_sentinel);
        a = f.on_sentinel_reply({}, reply{});
        REQUIRE(a.what == step::done);
        CHECK(a.ec == sentinel_error::master_unreachable);
    }
    SUBCASE("not_master wins over master_unreachable")
    {
        fsm_t f(three(), "m");
        auto a = f.start();
        a = f.on_sentinel_reply({}, addr("127.0.0.1", "7002"));
        a = f.on_role_reply({}, role("slave"));
        a = f.on_sentinel_reply({}, addr("127.0.0.1", "7001"));
        a = f.on_role_reply(unreachable, {});
        REQUIRE(a.what == step::ask_sentinel);
        a = f.on_sentinel_reply(unreachable, {});
        REQUIRE(a.what == step::done);
        CHECK(a.ec == sentinel_error::not_master);
    }
    SUBCASE("no Sentinels at all")
    {
        fsm_t f({}, "m");
        auto a = f.start();
        REQUIRE(a.what == step::done);
        CHECK(a.ec == sentinel_error::sentinels_unreachable);
    }
}

TEST_CASE("a new round forgets the last round's rejections")
{
    fsm_t f({{"127.0.0.1", 26001}}, "m");
    auto a = f.start();
    a = f.on_sentinel_reply({}, addr("127.0.0.1", "7001"));
    a = f.on_role_reply(unreachable, {});
    REQUIRE(a.what == step::done);
    a = f.start();
    a = f.on_sentinel_reply({}, addr("127.0.0.1", "7001"));
    CHECK(a.what == step::check_role);   // checked again: it may be back
}

TEST_CASE("get-master-addr-by-name replies are parsed strictly")
{
    auto p = fsm_t::parse_master_address;
    CHECK(p(addr("127.0.0.1", "6379")) == sentinel_address{"127.0.0.1", 6379});
    CHECK(p(addr("redis-1.internal", "65535")) == sentinel_address{"redis-1.internal", 65535});
    CHECK_FALSE(p(addr("127.0.0.1", "0")));
    CHECK_FALSE(p(addr("127.0.0.1", "65536")));
    CHECK_FALSE(p(addr("127.0.0.1", "63x")));
    CHECK_FALSE(p(addr("127.0.0.1", "")));
    CHECK_FALSE(p(addr("", "6379")));
    CHECK_FALSE(p(array({text("127.0.0.1")})));
    CHECK_FALSE(p(array({text("127.0.0.1"), text("6379"), text("x")})));
    reply integer_port = array({text("127.0.0.1"), reply{}});
    integer_port.elements[1].type = reply::kind::integer;
    integer_port.elements[1].integer = 6379;
    CHECK_FALSE(p(integer_port));
    CHECK_FALSE(p(reply{}));
    CHECK_FALSE(p(text("127.0.0.1:6379")));

    CHECK(fsm_t::is_master_role(role("master")));
    CHECK_FALSE(fsm_t::is_master_role(role("slave")));
    CHECK_FALSE(fsm_t::is_master_role(role("sentinel")));
    CHECK_FALSE(fsm_t::is_master_role(array({})));
    CHECK_FALSE(fsm_t::is_master_role(text("master")));
}

TEST_CASE("sentinel_error has its own category and messages")
{
    error_code ec = sentinel_error::not_master;
    CHECK(std::string(ec.category().name()) == "sluice.redis.sentinel");
    CHECK(ec.message() == "the instance named by Redis Sentinel is not a master");
    CHECK(error_code(sentinel_error::sentinels_unreachable).message().find("Sentinel") != std::string::npos);
    CHECK(error_code(sentinel_error::unknown_master) != error_code(sentinel_error::master_unreachable));
}

TEST_SUITE_END();
