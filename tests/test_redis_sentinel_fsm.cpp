// detail::sentinel_fsm step by step, without any socket: the order Sentinels are asked in,
// what each kind of answer leads to, the ROLE check (a demoted master or a stale Sentinel's
// answer is never the result), promotion of the verified Sentinel, and the error of a
// failed round. Then what the Sentinels announce (sentinel_events: +switch-master and
// +sentinel parsed, whether a switch concerns the connection) and the Sentinel list kept
// from their SENTINEL SENTINELS replies (sentinel_list: bounded, deduplicated, the
// configured ones kept as a fallback, the live ones first).
#include <sluice/redis/detail/store/sentinel_events.hpp>
#include <sluice/redis/detail/store/sentinel_fsm.hpp>
#include <sluice/redis/detail/store/sentinel_list.hpp>

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

namespace {

using redis::detail::sentinel_list;
using redis::detail::master_switch;
using redis::detail::switch_verdict;

reply status(std::string s)
{
    reply r;
    r.type = reply::kind::status;
    r.str = std::move(s);
    return r;
}

// One entry of SENTINEL SENTINELS, as Redis 7 writes it (a flat field/value array).
reply peer(const std::string& ip, const std::string& port, const std::string& flags = "sentinel")
{
    return array({text("name"), text("0123abcd"), text("ip"), text(ip), text("port"), text(port),
                  text("runid"), text("0123abcd"), text("flags"), text(flags),
                  text("link-pending-commands"), text("0")});
}

sentinel_address at(std::uint16_t port) { return {"127.0.0.1", port}; }

std::vector<sentinel_address> ports(std::initializer_list<std::uint16_t> ps)
{
    std::vector<sentinel_address> out;
    for (auto p : ps) out.push_back(at(p));
    return out;
}

} // namespace

TEST_CASE("+switch-master payloads are parsed strictly")
{
    auto m = redis::detail::parse_switch_master("mymaster 127.0.0.1 6379 10.0.0.2 6380");
    REQUIRE(m);
    CHECK(m->name == "mymaster");
    CHECK(m->from == sentinel_address{"127.0.0.1", 6379});
    CHECK(m->to == sentinel_address{"10.0.0.2", 6380});
    CHECK(redis::detail::parse_switch_master("m ::1 6379 fe80::1 7000")->to.host == "fe80::1");
    for (const char* bad : {"", "mymaster", "mymaster 127.0.0.1 6379 10.0.0.2",
                            "mymaster 127.0.0.1 6379 10.0.0.2 6380 extra", "mymaster 127.0.0.1 6379 10.0.0.2 0",
                            "mymaster 127.0.0.1 x 10.0.0.2 6380", "mymaster 127.0.0.1 6379 10.0.0.2 65536",
                            "mymaster  127.0.0.1 6379 10.0.0.2 6380", "mymaster 127.0.0.1 6379 10.0.0.2 6380 ",
                            " mymaster 127.0.0.1 6379 10.0.0.2 6380"})
        CHECK_MESSAGE(!redis::detail::parse_switch_master(bad), bad);
}

TEST_CASE("Pub/Sub replies: only messages count, not the confirmations of SUBSCRIBE")
{
    auto msg = redis::detail::parse_pubsub_message(
        array({text("message"), text("+switch-master"), text("m 127.0.0.1 1 127.0.0.1 2")}));
    REQUIRE(msg);
    CHECK(msg->channel == "+switch-master");
    CHECK(msg->payload == "m 127.0.0.1 1 127.0.0.1 2");
    reply confirmation = array({text("subscribe"), text("+switch-master"), reply{}});
    confirmation.elements[2].type = reply::kind::integer;
    CHECK_FALSE(redis::detail::parse_pubsub_message(confirmation));
    CHECK_FALSE(redis::detail::parse_pubsub_message(array({text("message"), text("+sentinel")})));
    CHECK_FALSE(redis::detail::parse_pubsub_message(error_reply("ERR")));
    CHECK_FALSE(redis::detail::parse_pubsub_message(text("message")));
    CHECK(redis::detail::sentinel_subscribe_command()
          == std::vector<std::string>{"SUBSCRIBE", "+switch-master", "+sentinel"});
}

TEST_CASE("an announced switch: followed unless it is about another master or the connection is there")
{
    using redis::detail::decide_switch;
    const master_switch m{"mymaster", {"127.0.0.1", 7001}, {"127.0.0.1", 7002}};
    // On the old master (the case that matters: it may still accept writes).
    CHECK(decide_switch(m, "mymaster", at(7001)) == switch_verdict::switch_now);
    // Elsewhere, or nowhere (reconnecting, discovering): the announcement is the newest word.
    CHECK(decide_switch(m, "mymaster", at(7003)) == switch_verdict::switch_now);
    CHECK(decide_switch(m, "mymaster", std::nullopt) == switch_verdict::switch_now);
    // Already there: a second Sentinel announcing the same switch changes nothing.
    CHECK(decide_switch(m, "mymaster", at(7002)) == switch_verdict::already_there);
    CHECK(decide_switch(m, "mymaster", sentinel_address{"127.0.0.1", 7002}) == switch_verdict::already_there);
    // Another master monitored by the same Sentinels.
    CHECK(decide_switch(m, "other", at(7001)) == switch_verdict::other_master);
    // Addresses compare as addresses when numeric.
    const master_switch v6{"m", {"::1", 7001}, {"0:0::1", 7002}};
    CHECK(decide_switch(v6, "m", sentinel_address{"::1", 7002}) == switch_verdict::already_there);
    CHECK(decide_switch(v6, "m", sentinel_address{"::1", 7001}) == switch_verdict::switch_now);
    const master_switch named{"m", {"redis-a", 6379}, {"redis-b", 6379}};
    CHECK(decide_switch(named, "m", sentinel_address{"redis-b", 6379}) == switch_verdict::already_there);
    CHECK(decide_switch(named, "m", sentinel_address{"redis-a", 6379}) == switch_verdict::switch_now);
}

TEST_CASE("+sentinel payloads: a Sentinel of our master, parsed strictly")
{
    using redis::detail::parse_sentinel_added;
    auto a = parse_sentinel_added("sentinel 8d1f9c 127.0.0.1 26380 @ mymaster 127.0.0.1 6379", "mymaster");
    REQUIRE(a);
    CHECK(*a == sentinel_address{"127.0.0.1", 26380});
    CHECK_FALSE(parse_sentinel_added("sentinel 8d1f9c 127.0.0.1 26380 @ other 127.0.0.1 6379", "mymaster"));
    CHECK_FALSE(parse_sentinel_added("slave 127.0.0.1:6380 127.0.0.1 6380 @ mymaster 127.0.0.1 6379", "mymaster"));
    CHECK_FALSE(parse_sentinel_added("sentinel 8d1f9c 127.0.0.1 0 @ mymaster 127.0.0.1 6379", "mymaster"));
    CHECK_FALSE(parse_sentinel_added("sentinel 8d1f9c 127.0.0.1 26380 mymaster 127.0.0.1 6379", "mymaster"));
    CHECK_FALSE(parse_sentinel_added("sentinel 8d1f9c 127.0.0.1 26380", "mymaster"));
}

TEST_CASE("SENTINEL SENTINELS replies: healthy peers only, malformed entries skipped")
{
    reply r = array({peer("127.0.0.1", "26002"), peer("127.0.0.1", "26003", "s_down,sentinel"),
                     peer("127.0.0.1", "26004", "sentinel,disconnected"), peer("127.0.0.1", "26005", "o_down,sentinel"),
                     peer("", "26006"), peer("127.0.0.1", "0"), peer("127.0.0.1", "x"), text("junk"),
                     array({text("ip"), text("127.0.0.1")}), peer("127.0.0.1", "26002")});
    // "disconnected" is this Sentinel's link, opened lazily: the peer counts as alive.
    CHECK(sentinel_list::parse_sentinels(r) == ports({26002, 26004}));
    CHECK(sentinel_list::parse_sentinels(array({})).empty());
    CHECK(sentinel_list::parse_sentinels(error_reply("ERR No such master with that name")).empty());
    CHECK(sentinel_list::parse_sentinels(reply{}).empty());
    // Status strings are text too.
    reply st = array({array({status("ip"), status("10.1.1.1"), status("port"), status("26379")})});
    CHECK(sentinel_list::parse_sentinels(st) == std::vector<sentinel_address>{{"10.1.1.1", 26379}});
}

TEST_CASE("the Sentinel list: refreshed from a Sentinel's peers, the live first, the configured kept")
{
    sentinel_list l(ports({26001, 26002, 26001}));   // duplicates in the configuration: once
    CHECK(l.order() == ports({26001, 26002}));

    // 26002 answered and reports 26003 (added later by the operator): 26001 is not
    // reported (it went away) and moves last; configured, it is kept as a fallback.
    CHECK(l.refresh(at(26002), array({peer("127.0.0.1", "26003")})));
    CHECK(l.order() == ports({26002, 26003, 26001}));
    // The same answer again changes nothing.
    CHECK_FALSE(l.refresh(at(26002), array({peer("127.0.0.1", "26003")})));
    // An error reply says nothing about who is alive.
    CHECK_FALSE(l.refresh(at(26003), error_reply("ERR unknown subcommand")));
    CHECK(l.order() == ports({26002, 26003, 26001}));

    // 26003 answers alone, 26002 gone too: configured, 26002 stays, after 26001 whose
    // turn it keeps.
    CHECK(l.refresh(at(26003), array({})));
    CHECK(l.order() == ports({26003, 26002, 26001}));
    // A discovered Sentinel no longer reported is dropped; the configured ones never are.
    CHECK(l.refresh(at(26001), array({peer("127.0.0.1", "26002")})));
    CHECK(l.order() == ports({26002, 26001}));
    CHECK_FALSE(l.known(at(26003)));

    // promote: the one verified or announcing goes first; unknown ones are not added.
    CHECK(l.promote(at(26001)));
    CHECK(l.order() == ports({26001, 26002}));
    CHECK_FALSE(l.promote(at(26009)));
    CHECK(l.order() == ports({26001, 26002}));

    // +sentinel: added last, once.
    CHECK(l.add(at(26010)));
    CHECK_FALSE(l.add(at(26010)));
    CHECK_FALSE(l.add(sentinel_address{"", 26011}));
    CHECK(l.order() == ports({26001, 26002, 26010}));
}

TEST_CASE("the Sentinel list is bounded: at most max_discovered beyond the configured ones")
{
    const std::size_t cap = sentinel_list::max_discovered;
    sentinel_list l(ports({26001}));
    std::vector<reply> many;
    for (std::size_t i = 0; i < 3 * cap; ++i) many.push_back(peer("127.0.0.1", std::to_string(30000 + i)));
    CHECK(l.refresh(at(40000), array(many)));   // a Sentinel not configured answering
    CHECK(l.order().size() == 1 + cap);          // 40000 and the first peers, up to the cap
    CHECK(l.order().back() == at(26001));        // the configured one kept, last
    CHECK(l.order().front() == at(40000));
    for (std::size_t i = 0; i < 3 * cap; ++i) l.add(at(static_cast<std::uint16_t>(31000 + i)));
    CHECK(l.order().size() == 1 + cap);

    // A configured Sentinel is kept whatever the peers say, and counts apart.
    sentinel_list c(ports({26001, 26002}));
    CHECK(c.refresh(at(26001), array(many)));
    CHECK(c.order().size() == 2 + cap);
    CHECK(c.order().front() == at(26001));
    CHECK(c.order().back() == at(26002));
}

TEST_SUITE_END();
