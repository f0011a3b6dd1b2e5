// The parts of the Redis transport that do no I/O, step by step without a server: the
// reconnection schedule, the pipeline's reply bookkeeping, the NOSCRIPT decision, and the
// RESP formatter and reader of the short exchanges (Sentinel discovery).
#include "redis/backoff.hpp"
#include "redis/cluster_replies.hpp"
#include "redis/eval_fsm.hpp"
#include "redis/hiredis_adapter.hpp"
#include "redis/reply_queue.hpp"

#include <sluice/error.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

using boost::system::error_code;
using sluice::redis::reply;
using sluice::redis::detail::backoff;
using sluice::redis::detail::eval_fsm;
using namespace std::chrono_literals;

namespace {

reply error_reply(std::string text)
{
    reply r;
    r.type = reply::kind::error;
    r.str = std::move(text);
    return r;
}

reply integer_reply(std::int64_t v)
{
    reply r;
    r.type = reply::kind::integer;
    r.integer = v;
    return r;
}

reply noscript() { return error_reply("NOSCRIPT No matching script. Please use EVAL."); }

using queue = sluice::redis::detail::reply_queue<int>;
const auto t0 = std::chrono::steady_clock::time_point{} + 1h;

// A new link on `q`: its handshake `hs`, then the commands `rest`, all due at t0.
void open_link(queue& q, int hs, std::initializer_list<int> rest)
{
    q.new_link();
    q.push(hs, t0);
    q.mark_handshake();
    for (int e : rest) q.push(e, t0);
}

} // namespace

TEST_SUITE_BEGIN("redis");

TEST_CASE("backoff: doubles from reconnect_min up to reconnect_max, back to the start once up")
{
    backoff b(50ms, 400ms);
    CHECK(b.next() == 50ms);
    CHECK(b.next() == 100ms);
    CHECK(b.next() == 200ms);
    CHECK(b.next() == 400ms);
    CHECK(b.next() == 400ms);
    b.reset();
    CHECK(b.next() == 50ms);
    CHECK(b.next() == 100ms);
}

TEST_CASE("backoff: a maximum below the minimum is the minimum; zero stays zero")
{
    backoff b(300ms, 100ms);
    CHECK(b.next() == 300ms);
    CHECK(b.next() == 300ms);
    backoff z(0ms, 100ms);
    CHECK(z.next() == 0ms);
    CHECK(z.next() == 0ms);
}

TEST_CASE("reply_queue: replies answer the oldest entry; the front deadline is the oldest's")
{
    queue q;
    q.new_link();
    q.push(1, t0);
    q.push(2, t0 + 5ms);
    CHECK(q.size() == 2);
    CHECK(q.front() == 1);
    CHECK(q.front_deadline() == t0);
    auto a = q.pop(true, false);
    CHECK(a.entry == 1);
    CHECK(a.how == queue::outcome::reply);
    CHECK(q.front_deadline() == t0 + 5ms);
    a = q.pop(true, true);   // an error reply is still the reply
    CHECK(a.entry == 2);
    CHECK(a.how == queue::outcome::reply);
    CHECK(q.empty());
}

TEST_CASE("reply_queue: a refused handshake refuses the replies after it on that link")
{
    queue q;
    open_link(q, 0, {1, 2});
    auto hs = q.pop(true, true);   // NOAUTH
    CHECK(hs.entry == 0);
    CHECK(hs.how == queue::outcome::refused);
    CHECK(q.pop(true, false).how == queue::outcome::refused);   // came in the same read
    CHECK(q.pop(false, false).how == queue::outcome::link_error);   // the link is freed

    SUBCASE("a new link starts afresh")
    {
        open_link(q, 3, {4});
        CHECK(q.pop(true, false).how == queue::outcome::reply);
        CHECK(q.pop(true, false).how == queue::outcome::reply);
    }
}

TEST_CASE("reply_queue: a handshake never answered refuses nothing that has a reply on a later link")
{
    queue q;
    open_link(q, 0, {1});
    // The link is freed with both pending: no reply for either.
    CHECK(q.pop(false, false).how == queue::outcome::link_error);
    CHECK(q.pop(false, false).how == queue::outcome::link_error);
    q.link_gone();
    q.new_link();
    q.push(2, t0);
    CHECK(q.pop(true, false).how == queue::outcome::reply);
}

TEST_CASE("reply_queue: an accepted handshake lets the rest through; the link going fails what is left")
{
    queue q;
    open_link(q, 0, {1, 2});
    CHECK(q.pop(true, false).how == queue::outcome::reply);   // PONG
    CHECK(q.pop(true, true).how == queue::outcome::reply);    // an error reply of a command
    CHECK(q.pop(false, false).how == queue::outcome::link_error);
}

TEST_CASE("reply_queue: the handshake is the last command marked (AUTH then ROLE), known at the front")
{
    queue q;
    q.new_link();
    q.push(0, t0);   // AUTH
    q.push(1, t0);   // ROLE
    q.mark_handshake();
    q.push(2, t0);
    CHECK_FALSE(q.front_is_handshake());
    CHECK(q.pop(true, false).how == queue::outcome::reply);   // OK
    CHECK(q.front_is_handshake());
    CHECK(q.pop(true, true).how == queue::outcome::refused);   // ROLE says slave
    CHECK_FALSE(q.front_is_handshake());
    CHECK(q.pop(true, false).how == queue::outcome::refused);
    CHECK_FALSE(q.front_is_handshake());
}

TEST_CASE("reply_reader: reads back what format_commands wrote, a byte at a time; garbage is a protocol error")
{
    using sluice::redis::detail::format_commands;
    using sluice::redis::detail::reply_reader;

    // A request is RESP too (an array of bulk strings): what was formatted reads back.
    const std::string wire = format_commands({{"AUTH", "p\r\nw"}, {"ROLE"}});
    reply_reader rd;
    std::vector<reply> got;
    std::optional<reply> r;
    for (char c : wire) {
        REQUIRE(rd.feed(&c, 1));
        REQUIRE(rd.next(r));
        if (r) got.push_back(std::move(*r));
    }
    REQUIRE(got.size() == 2);
    REQUIRE(got[0].type == reply::kind::array);
    REQUIRE(got[0].elements.size() == 2);
    CHECK(got[0].elements[0].str == "AUTH");
    CHECK(got[0].elements[1].str == "p\r\nw");
    CHECK(got[1].elements.at(0).str == "ROLE");
    CHECK(rd.next(r));
    CHECK_FALSE(r);

    const std::string replies = "*3\r\n$6\r\nmaster\r\n:42\r\n*0\r\n-NOAUTH no\r\n";
    REQUIRE(rd.feed(replies.data(), replies.size()));
    REQUIRE(rd.next(r));
    REQUIRE(r);
    CHECK(r->elements.at(0).str == "master");
    CHECK(r->elements.at(1).integer == 42);
    REQUIRE(rd.next(r));
    REQUIRE(r);
    CHECK(r->is_error());

    reply_reader bad;
    const std::string junk = "?what\r\n";
    const bool fed = bad.feed(junk.data(), junk.size());
    CHECK_FALSE((fed && bad.next(r)));
}

TEST_CASE("reply_reader: an aggregate declaring more elements than any sluice reply is a protocol error, not an allocation")
{
    using sluice::redis::detail::reply_reader;
    std::optional<reply> r;

    // hiredis 0.14 would allocate 5 GB for this header before reading an element.
    for (const std::string wire : {"*666666630\r\n", "*2\r\n:1\r\n*65537\r\n", "*2147483647\r\n"}) {
        reply_reader rd;
        const bool fed = rd.feed(wire.data(), wire.size());
        CHECK_FALSE((fed && rd.next(r)));
    }
    // The bound itself is readable.
    std::string wire = "*65536\r\n";
    for (int i = 0; i < 65536; ++i) wire += ":1\r\n";
    reply_reader rd;
    REQUIRE(rd.feed(wire.data(), wire.size()));
    REQUIRE(rd.next(r));
    REQUIRE(r);
    CHECK(r->elements.size() == 65536);
}

TEST_CASE("eval_fsm: a reply is the answer; an error reply is backend_error with the reply")
{
    eval_fsm f;
    error_code ec;
    reply r = integer_reply(7);
    CHECK(f.on_evalsha(ec, r) == eval_fsm::next::done);
    CHECK_FALSE(ec);
    CHECK(r.integer == 7);

    eval_fsm g;
    r = error_reply("WRONGTYPE Operation against a key holding the wrong kind of value");
    CHECK(g.on_evalsha(ec, r) == eval_fsm::next::done);
    CHECK(ec == sluice::error::backend_error);
    CHECK(r.str.starts_with("WRONGTYPE"));
}

TEST_CASE("eval_fsm: BUSY and LOADING are backend_unavailable (nothing ran: the failure policy decides); OOM is backend_error")
{
    for (const char* text : {"BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
                             "LOADING Redis is loading the dataset in memory"}) {
        eval_fsm f;
        error_code ec;
        reply r = error_reply(text);
        CHECK(f.on_evalsha(ec, r) == eval_fsm::next::done);
        CHECK(ec == sluice::error::backend_unavailable);
    }
    eval_fsm g;
    error_code ec;
    reply r = error_reply("OOM command not allowed when used memory > 'maxmemory'.");
    CHECK(g.on_evalsha(ec, r) == eval_fsm::next::done);
    CHECK(ec == sluice::error::backend_error);
    // Only the error's first word counts.
    eval_fsm h;
    error_code ec2;
    r = error_reply("ERR BUSYNESS");
    CHECK(h.on_evalsha(ec2, r) == eval_fsm::next::done);
    CHECK(ec2 == sluice::error::backend_error);
}

TEST_CASE("eval_fsm: NOSCRIPT loads once; the retry's reply is the answer")
{
    eval_fsm f;
    error_code ec;
    reply r = noscript();
    CHECK(f.on_evalsha(ec, r) == eval_fsm::next::reload);
    f.on_load({}, reply{reply::kind::string, 0, "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", {}});
    r = integer_reply(1);
    CHECK(f.on_evalsha(ec, r) == eval_fsm::next::done);
    CHECK_FALSE(ec);
    CHECK(r.integer == 1);
}

TEST_CASE("eval_fsm: a script that does not compile answers with the load's error, not NOSCRIPT")
{
    eval_fsm f;
    error_code ec;
    reply r = noscript();
    CHECK(f.on_evalsha(ec, r) == eval_fsm::next::reload);
    f.on_load({}, error_reply("ERR Error compiling script"));
    r = noscript();
    CHECK(f.on_evalsha(ec, r) == eval_fsm::next::done);   // never a second load
    CHECK(ec == sluice::error::backend_error);
    CHECK(r.str.starts_with("ERR Error compiling"));
}

TEST_CASE("eval_fsm: an error_code (link lost, timed out) is the answer as it is")
{
    eval_fsm f;
    error_code ec = make_error_code(sluice::error::backend_unavailable);
    reply r;
    CHECK(f.on_evalsha(ec, r) == eval_fsm::next::done);
    CHECK(ec == sluice::error::backend_unavailable);

    eval_fsm g;   // after a reload whose load failed, a lost link still says so
    ec = {};
    r = noscript();
    CHECK(g.on_evalsha(ec, r) == eval_fsm::next::reload);
    g.on_load({}, error_reply("ERR Error compiling script"));
    ec = make_error_code(sluice::error::backend_unavailable);
    r = {};
    CHECK(g.on_evalsha(ec, r) == eval_fsm::next::done);
    CHECK(ec == sluice::error::backend_unavailable);
    CHECK_FALSE(r.is_error());
}

TEST_CASE("eval_fsm: a retry that ran the script is the answer, even after a failed load (found by fuzz/eval_fsm)")
{
    // The load failed here (OOM, say) but another client loaded the script meanwhile: the
    // retry ran it, and its reply (a decision that may have consumed permits) must not be
    // replaced by the load's error.
    eval_fsm f;
    error_code ec;
    reply r = noscript();
    CHECK(f.on_evalsha(ec, r) == eval_fsm::next::reload);
    f.on_load({}, error_reply("OOM command not allowed when used memory > 'maxmemory'."));
    r = integer_reply(1);
    CHECK(f.on_evalsha(ec, r) == eval_fsm::next::done);
    CHECK_FALSE(ec);
    CHECK(r.type == reply::kind::integer);
    CHECK(r.integer == 1);

    eval_fsm g;   // another error than NOSCRIPT is the retry's own answer too
    r = noscript();
    CHECK(g.on_evalsha(ec, r) == eval_fsm::next::reload);
    g.on_load({}, error_reply("ERR Error compiling script"));
    r = error_reply("BUSY Redis is busy running a script.");
    CHECK(g.on_evalsha(ec, r) == eval_fsm::next::done);
    CHECK(ec == sluice::error::backend_unavailable);   // BUSY: the failure policy's
    CHECK(r.str.starts_with("BUSY"));
}

TEST_CASE("cluster replies: MOVED and ASK name a slot and a host:port, CLUSTER SLOTS ranges with their masters")
{
    using sluice::redis::detail::parse_cluster_slots;
    using sluice::redis::detail::parse_redirect;
    auto moved = parse_redirect("MOVED 3999 127.0.0.1:6381", "MOVED");
    REQUIRE(moved);
    CHECK(moved->first == 3999);
    CHECK(moved->second == "127.0.0.1:6381");
    CHECK(parse_redirect("ASK 16383 [::1]:7000", "ASK")->second == "[::1]:7000");
    CHECK_FALSE(parse_redirect("MOVED 3999 127.0.0.1:6381", "ASK"));
    CHECK_FALSE(parse_redirect("MOVED 16384 127.0.0.1:6381", "MOVED"));
    CHECK_FALSE(parse_redirect("MOVED 39x9 127.0.0.1:6381", "MOVED"));
    CHECK_FALSE(parse_redirect("MOVED 3999 127.0.0.1", "MOVED"));
    // A port beyond 16 bits was taken modulo 2^16 when connecting: someone else's port.
    CHECK_FALSE(parse_redirect("MOVED 3999 127.0.0.1:71917", "MOVED"));
    CHECK_FALSE(parse_redirect("MOVED 3999 127.0.0.1:0", "MOVED"));
    CHECK_FALSE(parse_redirect("MOVED 3999 127.0.0.1:", "MOVED"));

    auto text = [](std::string s) { return reply{reply::kind::string, 0, std::move(s), {}}; };
    auto array = [](std::vector<reply> e) { return reply{reply::kind::array, 0, {}, std::move(e)}; };
    auto range = [&](std::int64_t lo, std::int64_t hi, reply host, reply port) {
        return array({integer_reply(lo), integer_reply(hi), array({std::move(host), std::move(port), text("id")})});
    };
    reply slots = array({range(0, 5460, text("10.0.0.1"), integer_reply(7000)),
                         range(5461, 16383, text(""), integer_reply(7001)),          // the node asked
                         range(1, 2, text("10.0.0.3"), integer_reply(70000)),        // no such port
                         range(3, 4, text("10.0.0.4"), text("7000")),                // not an integer
                         range(9, 8, text("10.0.0.5"), integer_reply(7000)),         // empty range
                         range(0, 16384, text("10.0.0.6"), integer_reply(7000))});   // no such slot
    auto r = parse_cluster_slots(slots, "10.0.0.2");
    REQUIRE(r.size() == 2);
    CHECK(r[0].first == 0);
    CHECK(r[0].last == 5460);
    CHECK(r[0].address == "10.0.0.1:7000");
    CHECK(r[1].address == "10.0.0.2:7001");
    CHECK(parse_cluster_slots(integer_reply(1), "x").empty());
}

TEST_SUITE_END();
