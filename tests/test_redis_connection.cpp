// sluice::redis::connection against a real redis-server started by the test.
#include "redis_support.hpp"

#include <sluice/redis/connection.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <functional>
#include <chrono>
#include <future>
#include <optional>
#include <thread>

namespace asio = boost::asio;
using boost::system::error_code;
using sluice::redis::reply;
using namespace std::chrono_literals;

namespace {

using result = std::optional<std::pair<error_code, reply>>;

// Runs the io_context until pred() holds or `limit` passes; never hangs.
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

auto recorder(result& out)
{
    return [&out](error_code ec, reply r) {
        CHECK_FALSE(out.has_value());
        out.emplace(ec, std::move(r));
    };
}

result exec(asio::io_context& io, sluice::redis::connection& c, std::vector<std::string> argv,
            std::chrono::milliseconds limit = 10s)
{
    result out;
    c.async_exec(std::move(argv), recorder(out));
    run_until(io, [&] { return out.has_value(); }, limit);
    return out;
}

// Waits until the connection answers again (after a reset or restart).
bool wait_connected(asio::io_context& io, sluice::redis::connection& c,
                    std::chrono::milliseconds limit = 10s)
{
    auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
        auto r = exec(io, c, {"PING"}, 2s);
        if (r && !r->first && r->second.str == "PONG") return true;
        run_until(io, [] { return false; }, 20ms);
    }
    return false;
}

sluice::redis::connection_config fast(sluice::redis::connection_config c)
{
    c.connect_timeout = 500ms;
    c.command_timeout = 500ms;
    c.reconnect_min = 10ms;
    c.reconnect_max = 100ms;
    return c;
}

} // namespace

TEST_SUITE_BEGIN("redis");

TEST_CASE("script: sha1 as Redis computes it")
{
    sluice::redis::script s("return 1");
    CHECK(s.sha1() == "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
    CHECK(s.source() == "return 1");
    sluice::redis::script empty("");
    CHECK(empty.sha1() == "da39a3ee5e6b4b0d3255bfef95601890afd80709");
}

TEST_CASE("connection: command round trip, every reply kind" * doctest::timeout(30))
{
    sluice_test::redis_server srv;
    asio::io_context io;
    sluice::redis::connection c(io, srv.config());

    auto r = exec(io, c, {"SET", "k", std::string("a\0b", 3)});
    REQUIRE(r);
    CHECK_FALSE(r->first);
    CHECK(r->second.type == reply::kind::status);
    CHECK(r->second.str == "OK");
    CHECK(c.connected());

    r = exec(io, c, {"GET", "k"});
    REQUIRE(r);
    CHECK(r->second.type == reply::kind::string);
    CHECK(r->second.str == std::string("a\0b", 3));   // binary safe

    r = exec(io, c, {"GET", "missing"});
    REQUIRE(r);
    CHECK(r->second.type == reply::kind::nil);

    r = exec(io, c, {"INCRBY", "n", "41"});
    REQUIRE(r);
    CHECK(r->second.type == reply::kind::integer);
    CHECK(r->second.integer == 41);

    exec(io, c, {"RPUSH", "l", "x", "y"});
    r = exec(io, c, {"LRANGE", "l", "0", "-1"});
    REQUIRE(r);
    REQUIRE(r->second.type == reply::kind::array);
    REQUIRE(r->second.elements.size() == 2);
    CHECK(r->second.elements[1].str == "y");

    // An empty command or one that would break reply ordering: a clear error.
    r = exec(io, c, {});
    REQUIRE(r);
    CHECK(r->first == sluice::error::invalid_option);
    r = exec(io, c, {"subscribe", "ch"});
    REQUIRE(r);
    CHECK(r->first == sluice::error::invalid_option);
}

TEST_CASE("connection: AUTH as the handshake; a wrong password never connects" * doctest::timeout(30))
{
    sluice_test::redis_server srv({"--requirepass", "s3cret"});
    asio::io_context io;
    auto cfg = fast(srv.config());
    cfg.password = "s3cret";
    sluice::redis::connection good(io, cfg);
    auto r = exec(io, good, {"SET", "k", "v"});
    REQUIRE(r);
    CHECK_FALSE(r->first);
    CHECK(r->second.str == "OK");
    CHECK(good.connected());

    cfg.password = "wrong";
    sluice::redis::connection bad(io, cfg);
    r = exec(io, bad, {"GET", "k"});
    REQUIRE(r);
    CHECK(r->first == sluice::error::backend_unavailable);
    CHECK_FALSE(bad.connected());

    cfg.password.clear();   // PING without AUTH: NOAUTH, the handshake fails too
    sluice::redis::connection none(io, cfg);
    r = exec(io, none, {"GET", "k"});
    REQUIRE(r);
    CHECK(r->first == sluice::error::backend_unavailable);
}

TEST_CASE("connection: an error reply is a reply, not an error_code" * doctest::timeout(30))
{
    sluice_test::redis_server srv;
    asio::io_context io;
    sluice::redis::connection c(io, srv.config());
    exec(io, c, {"SET", "k", "v"});
    auto r = exec(io, c, {"LPUSH", "k", "x"});
    REQUIRE(r);
    CHECK_FALSE(r->first);
    CHECK(r->second.type == reply::kind::error);
    CHECK(r->second.str.rfind("WRONGTYPE", 0) == 0);
    // The link is still fine.
    r = exec(io, c, {"GET", "k"});
    REQUIRE(r);
    CHECK(r->second.str == "v");
}

TEST_CASE("connection: 10,000 pipelined commands, replies matched in order" * doctest::timeout(60))
{
    sluice_test::redis_server srv;
    asio::io_context io;
    sluice::redis::connection c(io, srv.config());
    REQUIRE(wait_connected(io, c));

    constexpr int n = 10000;
    std::vector<std::int64_t> got(n, -1);
    int done = 0, failed = 0;
    for (int i = 0; i < n; ++i)
        c.async_exec({"INCR", "counter"}, [&, i](error_code ec, reply r) {
            ++done;
            if (ec) ++failed;
            got[i] = r.integer;
        });
    // Nothing completes inside the initiating calls.
    CHECK(done == 0);
    REQUIRE(run_until(io, [&] { return done == n; }, 30s));
    CHECK(failed == 0);
    bool in_order = true;
    for (int i = 0; i < n; ++i) in_order = in_order && got[i] == i + 1;
    CHECK(in_order);
}

TEST_CASE("connection: every completion token" * doctest::timeout(30))
{
    sluice_test::redis_server srv;
    asio::io_context io;
    sluice::redis::connection c(io, srv.config());

    SUBCASE("use_awaitable")
    {
        std::optional<std::string> got;
        asio::co_spawn(io, [&]() -> asio::awaitable<void> {
            // gcc 12 rejects braced lists inside co_await expressions: named vectors.
            std::vector<std::string> set{"SET", "a", "1"}, get{"GET", "a"};
            co_await c.async_exec(set, asio::use_awaitable);
            auto r = co_await c.async_exec(get, asio::use_awaitable);
            got = r.str;
        }, asio::detached);
        REQUIRE(run_until(io, [&] { return got.has_value(); }));
        CHECK(*got == "1");
    }
    SUBCASE("use_awaitable throws the error_code")
    {
        c.close();
        std::optional<error_code> got;
        asio::co_spawn(io, [&]() -> asio::awaitable<void> {
            try {
                std::vector<std::string> ping{"PING"};
                co_await c.async_exec(ping, asio::use_awaitable);
            } catch (const boost::system::system_error& e) {
                got = e.code();
            }
        }, asio::detached);
        REQUIRE(run_until(io, [&] { return got.has_value(); }));
        CHECK(*got == sluice::error::closed);
    }
    SUBCASE("deferred")
    {
        auto op = c.async_exec({"PING"}, asio::deferred);
        result out;
        std::move(op)(recorder(out));
        REQUIRE(run_until(io, [&] { return out.has_value(); }));
        CHECK(out->second.str == "PONG");
    }
    SUBCASE("callback")
    {
        auto r = exec(io, c, {"ECHO", "hi"});
        REQUIRE(r);
        CHECK(r->second.str == "hi");
    }
    SUBCASE("use_future, io_context on another thread")
    {
        auto guard = asio::make_work_guard(io);
        std::thread t([&] { io.run(); });
        auto f = c.async_exec({"ECHO", "future"}, asio::use_future);
        bool ready = f.wait_for(10s) == std::future_status::ready;
        CHECK(ready);
        if (ready) CHECK(f.get().str == "future");
        auto g = c.async_eval(sluice::redis::script("return 7"), {}, {}, asio::use_future);
        REQUIRE(g.wait_for(10s) == std::future_status::ready);
        CHECK(g.get().integer == 7);
        c.close();
        guard.reset();
        io.stop();
        t.join();
    }
}

TEST_CASE("connection: connection refused fails fast with backend_unavailable" * doctest::timeout(30))
{
    asio::io_context io;
    auto cfg = fast({});
    cfg.port = sluice_test::pick_port();   // nobody listens there
    sluice::redis::connection c(io, cfg);
    auto start = std::chrono::steady_clock::now();
    auto r = exec(io, c, {"PING"});
    REQUIRE(r);
    CHECK(r->first == sluice::error::backend_unavailable);
    CHECK(std::chrono::steady_clock::now() - start < 400ms);
    CHECK_FALSE(c.connected());
    // Between attempts, commands are not queued: they fail at once.
    run_until(io, [] { return false; }, 5ms);
    r = exec(io, c, {"PING"});
    REQUIRE(r);
    CHECK(r->first == sluice::error::backend_unavailable);
}

TEST_CASE("connection: a host name is resolved off the executor; commands sent meanwhile wait for it" * doctest::timeout(30))
{
    sluice_test::redis_server srv;
    asio::io_context io;
    auto cfg = srv.config();
    cfg.host = "localhost";
    sluice::redis::connection c(io, cfg);
    // Sent before the name is resolved: held, then sent on the new link.
    auto r = exec(io, c, {"PING"});
    REQUIRE(r);
    CHECK_FALSE(r->first);
    CHECK(r->second.str == "PONG");
    CHECK(c.connected());

    SUBCASE("a name that does not resolve fails the commands held for it")
    {
        auto bad = fast({});
        bad.host = "no-such-host.invalid";
        sluice::redis::connection b(io, bad);
        r = exec(io, b, {"PING"});
        REQUIRE(r);
        CHECK(r->first == sluice::error::backend_unavailable);
        CHECK_FALSE(b.connected());
    }
    SUBCASE("close() while the name resolves fails them with closed")
    {
        sluice::redis::connection b(io, cfg);
        std::optional<std::pair<error_code, reply>> out;
        b.async_exec({"PING"}, [&](error_code ec, reply rr) { out.emplace(ec, std::move(rr)); });
        b.close();
        REQUIRE(run_until(io, [&] { return out.has_value(); }));
        CHECK(out->first == sluice::error::closed);
    }
}

TEST_CASE("connection: a listener that never answers is a connect timeout" * doctest::timeout(30))
{
    asio::io_context io;
    asio::ip::tcp::acceptor mute(io, {asio::ip::make_address("127.0.0.1"), 0});   // never accepts
    auto cfg = fast({});
    cfg.port = mute.local_endpoint().port();
    cfg.connect_timeout = 200ms;
    cfg.command_timeout = 5000ms;
    sluice::redis::connection c(io, cfg);
    auto start = std::chrono::steady_clock::now();
    auto r = exec(io, c, {"PING"});
    auto took = std::chrono::steady_clock::now() - start;
    REQUIRE(r);
    CHECK(r->first == sluice::error::backend_unavailable);
    CHECK(took >= 150ms);
    CHECK(took < 2000ms);
    CHECK_FALSE(c.connected());
}

TEST_CASE("connection: reconnection backs off exponentially up to reconnect_max" * doctest::timeout(30))
{
    // A listener that accepts and hangs up at once: every attempt fails its handshake.
    asio::io_context io;
    asio::ip::tcp::acceptor rude(io, {asio::ip::make_address("127.0.0.1"), 0});
    std::vector<std::chrono::steady_clock::time_point> accepts;
    std::function<void()> accept_one = [&] {
        rude.async_accept([&](error_code ec, asio::ip::tcp::socket s) {
            if (ec) return;
            accepts.push_back(std::chrono::steady_clock::now());
            s.close();
            accept_one();
        });
    };
    accept_one();
    auto cfg = fast({});
    cfg.port = rude.local_endpoint().port();
    cfg.reconnect_min = 50ms;
    cfg.reconnect_max = 400ms;
    sluice::redis::connection c(io, cfg);
    REQUIRE(run_until(io, [&] { return accepts.size() >= 7; }, 10s));
    CHECK_FALSE(c.connected());
    // Timers never fire early: each gap is at least its backoff (50, 100, 200, 400, 400 ms).
    std::vector<std::chrono::milliseconds> nominal{50ms, 100ms, 200ms, 400ms, 400ms, 400ms};
    for (std::size_t i = 0; i < nominal.size(); ++i) {
        auto gap = std::chrono::duration_cast<std::chrono::milliseconds>(accepts[i + 1] - accepts[i]);
        CHECK(gap >= nominal[i]);
        CHECK(gap < nominal[i] + 300ms);   // and capped: no runaway doubling
    }
}

TEST_CASE("connection: a stalled server times out, the link is reset and recovers" * doctest::timeout(60))
{
    sluice_test::redis_server srv;
    asio::io_context io;
    auto cfg = fast(srv.config());
    cfg.command_timeout = 200ms;
    sluice::redis::connection c(io, cfg);
    REQUIRE(wait_connected(io, c));

    CHECK(c.stats().connects == 1);
    CHECK(c.stats().links_lost == 0);
    srv.pause();   // SIGSTOP: the socket stays open, nothing is answered
    result first, second;
    auto start = std::chrono::steady_clock::now();
    c.async_exec({"SET", "x", "1"}, recorder(first));
    c.async_exec({"GET", "x"}, recorder(second));
    REQUIRE(run_until(io, [&] { return first && second; }, 5s));
    CHECK(first->first == sluice::error::backend_unavailable);
    CHECK(second->first == sluice::error::backend_unavailable);   // the link was reset
    CHECK(std::chrono::steady_clock::now() - start < 2s);
    CHECK_FALSE(c.connected());

    CHECK(c.stats().links_lost == 1);   // the reset, counted once

    srv.resume();
    CHECK(wait_connected(io, c));
    CHECK(c.connected());
    const auto after = c.stats();
    CHECK(after.connects == 2);
    CHECK(after.links_lost == 1);
    CHECK(after.master_switches == 0);
    c.close();   // the user's own closing is not a lost link
    CHECK(c.stats().links_lost == 1);
}

TEST_CASE("connection: server killed with commands in flight, then back" * doctest::timeout(60))
{
    sluice_test::redis_server srv;
    asio::io_context io;
    sluice::redis::connection c(io, fast(srv.config()));
    REQUIRE(wait_connected(io, c));

    srv.pause();
    std::vector<result> pending(5);
    for (auto& p : pending) c.async_exec({"PING"}, recorder(p));
    run_until(io, [] { return false; }, 20ms);   // sent, unanswered
    srv.kill();
    REQUIRE(run_until(io, [&] {
        for (auto& p : pending)
            if (!p) return false;
        return true;
    }, 5s));
    for (auto& p : pending) CHECK(p->first == sluice::error::backend_unavailable);

    // Down: fails at once, no hang.
    auto r = exec(io, c, {"PING"}, 2s);
    REQUIRE(r);
    CHECK(r->first == sluice::error::backend_unavailable);

    // Lost once, however many reconnection attempts were refused since.
    CHECK(c.stats().links_lost == 1);
    CHECK(c.stats().connects == 1);

    srv.start();
    CHECK(wait_connected(io, c));
    CHECK(c.stats().connects == 2);
    CHECK(c.stats().links_lost == 1);
}

TEST_CASE("connection: NOSCRIPT is handled transparently" * doctest::timeout(60))
{
    sluice_test::redis_server srv;
    asio::io_context io;
    sluice::redis::connection c(io, fast(srv.config()));
    sluice::redis::script s("return redis.call('INCRBY', KEYS[1], ARGV[1])");

    auto eval = [&](std::string by) {
        result out;
        c.async_eval(s, {"k"}, {std::move(by)}, recorder(out));
        run_until(io, [&] { return out.has_value(); });
        return out;
    };
    auto r = eval("2");   // a new server: NOSCRIPT, loaded, run
    REQUIRE(r);
    CHECK_FALSE(r->first);
    CHECK(r->second.integer == 2);
    CHECK(srv.command({"SCRIPT", "EXISTS", s.sha1()}).elements.at(0).integer == 1);

    r = eval("3");   // cached
    REQUIRE(r);
    CHECK(r->second.integer == 5);

    srv.command({"SCRIPT", "FLUSH"});
    r = eval("1");
    REQUIRE(r);
    CHECK_FALSE(r->first);
    CHECK(r->second.integer == 6);

    srv.restart();   // an empty data set and an empty script cache
    REQUIRE(wait_connected(io, c));
    r = eval("4");
    REQUIRE(r);
    CHECK_FALSE(r->first);
    CHECK(r->second.integer == 4);
}

TEST_CASE("connection: a failing script completes with backend_error" * doctest::timeout(30))
{
    sluice_test::redis_server srv;
    asio::io_context io;
    sluice::redis::connection c(io, srv.config());
    exec(io, c, {"SET", "k", "v"});

    result out;
    c.async_eval(sluice::redis::script("return redis.call('LPUSH', KEYS[1], 'x')"), {"k"}, {},
                 recorder(out));
    REQUIRE(run_until(io, [&] { return out.has_value(); }));
    CHECK(out->first == sluice::error::backend_error);
    CHECK(out->second.str.find("WRONGTYPE") != std::string::npos);

    result bad;   // does not compile: the SCRIPT LOAD error is what surfaces
    c.async_eval(sluice::redis::script("this is not lua"), {}, {}, recorder(bad));
    REQUIRE(run_until(io, [&] { return bad.has_value(); }));
    CHECK(bad->first == sluice::error::backend_error);
    CHECK(bad->second.is_error());

    auto r = exec(io, c, {"GET", "k"});
    REQUIRE(r);
    CHECK(r->second.str == "v");
}

TEST_CASE("connection: per-operation cancellation; the late reply is dropped" * doctest::timeout(30))
{
    sluice_test::redis_server srv;
    asio::io_context io;
    auto cfg = fast(srv.config());
    cfg.command_timeout = 5000ms;
    sluice::redis::connection c(io, cfg);
    REQUIRE(wait_connected(io, c));

    srv.pause();
    asio::cancellation_signal sig;
    result cancelled, next;
    c.async_exec({"ECHO", "first"}, asio::bind_cancellation_slot(sig.slot(), recorder(cancelled)));
    c.async_exec({"ECHO", "second"}, recorder(next));
    run_until(io, [] { return false; }, 20ms);
    CHECK_FALSE(cancelled);

    auto start = std::chrono::steady_clock::now();
    sig.emit(asio::cancellation_type::terminal);
    CHECK_FALSE(cancelled);   // not inline
    REQUIRE(run_until(io, [&] { return cancelled.has_value(); }, 2s));
    CHECK(cancelled->first == asio::error::operation_aborted);
    CHECK(std::chrono::steady_clock::now() - start < 500ms);
    sig.emit(asio::cancellation_type::terminal);   // again, after completion: nothing

    srv.resume();
    REQUIRE(run_until(io, [&] { return next.has_value(); }));
    CHECK_FALSE(next->first);
    CHECK(next->second.str == "second");   // "first" was dropped, not delivered here
    CHECK(cancelled->second.str.empty());

    // An eval can be cancelled the same way.
    srv.pause();
    result ev;
    c.async_eval(sluice::redis::script("return 1"), {}, {},
                 asio::bind_cancellation_slot(sig.slot(), recorder(ev)));
    run_until(io, [] { return false; }, 20ms);
    sig.emit(asio::cancellation_type::partial);
    REQUIRE(run_until(io, [&] { return ev.has_value(); }, 2s));
    CHECK(ev->first == asio::error::operation_aborted);
    srv.resume();
    CHECK(wait_connected(io, c));
}

TEST_CASE("connection: close() with commands in flight" * doctest::timeout(30))
{
    sluice_test::redis_server srv;
    asio::io_context io;
    sluice::redis::connection c(io, srv.config());
    REQUIRE(wait_connected(io, c));
    srv.pause();
    std::vector<result> pending(3);
    for (auto& p : pending) c.async_exec({"PING"}, recorder(p));
    run_until(io, [] { return false; }, 20ms);
    c.close();
    REQUIRE(run_until(io, [&] { return pending[0] && pending[1] && pending[2]; }, 2s));
    for (auto& p : pending) CHECK(p->first == sluice::error::closed);
    CHECK_FALSE(c.connected());
    auto r = exec(io, c, {"PING"});
    REQUIRE(r);
    CHECK(r->first == sluice::error::closed);
    srv.resume();
}

TEST_CASE("connection: destroyed with commands in flight, and io_context destroyed after" * doctest::timeout(30))
{
    sluice_test::redis_server srv;
    std::vector<result> pending(3);
    {
        asio::io_context io;
        {
            sluice::redis::connection c(io, srv.config());
            REQUIRE(wait_connected(io, c));
            for (auto& p : pending) c.async_exec({"PING"}, recorder(p));
        }
        REQUIRE(run_until(io, [&] { return pending[0] && pending[1] && pending[2]; }, 2s));
        for (auto& p : pending) CHECK(p->first == sluice::error::closed);
    }
    {
        // Never run again: the io_context's destruction frees everything (ASan checks).
        asio::io_context io;
        sluice::redis::connection c(io, srv.config());
        c.async_exec({"PING"}, [](error_code, reply) {});
        io.poll_one();   // not run_one_for: see sluice_test::run_slice
    }
    {
        // A coroutine that owns the connection waits on it: a cycle through the queue,
        // broken when the io_context shuts down (LeakSanitizer checks).
        srv.pause();
        asio::io_context io;
        auto c = std::make_shared<sluice::redis::connection>(io, srv.config());
        bool resumed = false;
        asio::co_spawn(io, [c, &resumed]() -> asio::awaitable<void> {
            std::vector<std::string> ping{"PING"};
            co_await c->async_exec(ping, asio::use_awaitable);
            resumed = true;
        }, asio::detached);
        c.reset();
        run_until(io, [] { return false; }, 50ms);
        CHECK_FALSE(resumed);
    }
    srv.resume();
}

TEST_CASE("connection: destroyed with an eval in flight completes it with closed" * doctest::timeout(30))
{
    sluice_test::redis_server srv;
    asio::io_context io;
    result ev;
    {
        sluice::redis::connection c(io, srv.config());
        REQUIRE(wait_connected(io, c));
        srv.pause();
        c.async_eval(sluice::redis::script("return 1"), {}, {}, recorder(ev));
        run_until(io, [] { return false; }, 20ms);   // EVALSHA sent, unanswered
    }
    REQUIRE(run_until(io, [&] { return ev.has_value(); }, 2s));
    CHECK(ev->first == sluice::error::closed);
    srv.resume();
}

TEST_CASE("connection: closed between a NOSCRIPT and its reload, the eval completes with closed" * doctest::timeout(30))
{
    sluice_test::redis_server srv;
    asio::io_context io;
    sluice::redis::connection c(io, srv.config());
    REQUIRE(wait_connected(io, c));
    // PING and EVALSHA pipelined: their replies come back in one read, and PING's handler
    // (which closes) runs before the NOSCRIPT is looked at. Should they come apart, close()
    // fails the pending EVALSHA itself, with the same answer.
    result ping, ev;
    c.async_exec({"PING"}, [&](error_code ec, reply r) {
        ping.emplace(ec, std::move(r));
        c.close();
    });
    c.async_eval(sluice::redis::script("return 'never loaded'"), {}, {}, recorder(ev));
    REQUIRE(run_until(io, [&] { return ev.has_value(); }, 5s));
    REQUIRE(ping);
    CHECK_FALSE(ping->first);
    CHECK(ev->first == sluice::error::closed);
}

TEST_SUITE_END();
