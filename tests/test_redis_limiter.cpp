// redis::token_bucket on a real redis-server (the fixture starts one per test): the
// asynchronous API, fail fast, FIFO, cancellation that gives the slot back, close(),
// several OS processes sharing one quota, Redis killed and restarted mid-run (failure
// policies), wrong-type keys and garbage replies.
#include "redis_limiter_support.hpp"

#include <sluice/redis/cluster.hpp>
#include <sluice/redis/connection.hpp>
#include <sluice/redis/token_bucket.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/asio/write.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

namespace {

namespace asio = boost::asio;
namespace redis = sluice::redis;
using namespace std::chrono_literals;
using sluice_test::redis_server;
using error_code = boost::system::error_code;
using sluice_test::acq_recorder;
using sluice_test::acq_result;
using sluice_test::run_for;
using sluice_test::run_until;
using sluice_test::try_recorder;
using sluice_test::try_result;
using sluice_test::wait_connected;
using live = sluice_test::live_redis;

} // namespace

TEST_SUITE_BEGIN("redis");

TEST_CASE("redis token bucket: try, acquire and acquire() on a live server" * doctest::timeout(60))
{
    live l;
    redis::token_bucket<redis::connection> tb(l.conn, sluice::rate::per_second(20), 3);

    // The burst, then a refusal with its retry_after.
    std::vector<std::shared_ptr<try_result>> tries;
    for (int i = 0; i < 4; ++i) {
        tries.push_back(std::make_shared<try_result>());
        tb.async_try_acquire("api", 1, try_recorder(tries.back()));
    }
    CHECK(tries[0]->calls == 0);   // never inside the initiating call
    REQUIRE(run_until(l.io, [&] { return tries[3]->calls == 1; }));
    for (int i = 0; i < 3; ++i) {
        CHECK_FALSE(tries[i]->ec);
        CHECK(tries[i]->d.admitted);
        CHECK(tries[i]->d.remaining == static_cast<std::uint64_t>(2 - i));
    }
    CHECK_FALSE(tries[3]->ec);
    CHECK_FALSE(tries[3]->d.admitted);
    CHECK(tries[3]->d.retry_after > 0ns);
    CHECK(tries[3]->d.retry_after <= 50ms);

    // Another key has its own bucket.
    auto other = std::make_shared<try_result>();
    tb.async_try_acquire("other", 3, try_recorder(other));
    REQUIRE(run_until(l.io, [&] { return other->calls == 1; }));
    CHECK(other->d.admitted);

    // A waiting acquire: about one interval (50 ms), never less than the slot.
    auto start = std::chrono::steady_clock::now();
    auto a = std::make_shared<acq_result>();
    tb.async_acquire("api", 1, 1s, acq_recorder(a));
    REQUIRE(run_until(l.io, [&] { return a->calls == 1; }));
    CHECK_FALSE(a->ec);
    CHECK(a->at - start >= 30ms);
    CHECK(a->at - start < 500ms);

    // The coroutine form, and its timed_out().
    std::optional<sluice::acquire_result> got, refused;
    asio::co_spawn(l.io, [&]() -> asio::awaitable<void> {
        got = co_await tb.acquire("api", 1s);
        refused = co_await tb.acquire("api", 3, 1ms);
    }, asio::detached);
    REQUIRE(run_until(l.io, [&] { return refused.has_value(); }));
    CHECK(static_cast<bool>(*got));
    CHECK(refused->timed_out());

    // Bad requests.
    auto zero = std::make_shared<try_result>();
    tb.async_try_acquire("api", 0, try_recorder(zero));
    auto big = std::make_shared<acq_result>();
    tb.async_acquire("api", 4, 1s, acq_recorder(big));
    REQUIRE(run_until(l.io, [&] { return zero->calls == 1 && big->calls == 1; }));
    CHECK(zero->ec == sluice::error::invalid_count);
    CHECK(big->ec == sluice::error::exceeds_limit);

    // The key is hash-tagged and expires once the bucket is full again.
    CHECK(tb.redis_key("api") == "{sluice:api}");
    auto pttl = l.server.command({"PTTL", "{sluice:api}"});
    CHECK(pttl.integer > 0);
    CHECK(pttl.integer <= 1000);

    auto s = tb.stats();
    CHECK(s.backend.errors == 0);
    CHECK(s.backend.fallback_decisions == 0);
    CHECK(s.admitted + s.try_admitted >= 6);
    CHECK(s.timed_out + s.try_refused >= 2);
    CHECK_FALSE(s.backend.degraded);
    // Same host, same clock: the estimated offset is small.
    CHECK(s.backend.clock_offset < 100ms);
    CHECK(s.backend.clock_offset > -100ms);
}

TEST_CASE("redis token bucket: completions run on the handler's executor; use_future works" * doctest::timeout(60))
{
    live l;
    redis::token_bucket<redis::connection> tb(l.conn, sluice::rate::per_second(1000), 5);
    auto strand = asio::make_strand(l.io);
    bool on_strand = false;
    int calls = 0;
    tb.async_try_acquire("k", 1, asio::bind_executor(strand, [&](error_code, sluice::decision) {
        on_strand = strand.running_in_this_thread();
        ++calls;
    }));
    REQUIRE(run_until(l.io, [&] { return calls == 1; }));
    CHECK(on_strand);

    std::thread runner([&] { run_for(l.io, 2000ms); });
    auto f = tb.async_acquire("k", 1, 1s, asio::use_future);
    CHECK(f.wait_for(2s) == std::future_status::ready);
    CHECK_NOTHROW(f.get());
    runner.join();
}

TEST_CASE("redis token bucket: fail fast consumes nothing" * doctest::timeout(60))
{
    live l;
    redis::token_bucket<redis::connection> tb(l.conn, sluice::rate::per_second(10), 1);
    auto first = std::make_shared<acq_result>();
    tb.async_acquire("ff", 1, 0ns, acq_recorder(first));
    REQUIRE(run_until(l.io, [&] { return first->calls == 1; }));
    REQUIRE_FALSE(first->ec);
    auto before = l.server.command({"GET", "{sluice:ff}"}).str;

    auto late = std::make_shared<acq_result>();
    tb.async_acquire("ff", 1, 20ms, acq_recorder(late));
    REQUIRE(run_until(l.io, [&] { return late->calls == 1; }));
    CHECK(late->ec == sluice::error::timed_out);
    CHECK(l.server.command({"GET", "{sluice:ff}"}).str == before);

    // The next slot is still the one right after `first`.
    auto next = std::make_shared<acq_result>();
    auto start = std::chrono::steady_clock::now();
    tb.async_acquire("ff", 1, 150ms, acq_recorder(next));
    REQUIRE(run_until(l.io, [&] { return next->calls == 1; }));
    CHECK_FALSE(next->ec);
    CHECK(next->at - start <= 150ms);
}

TEST_CASE("redis token bucket: waiters complete in FIFO order" * doctest::timeout(60))
{
    live l;
    redis::token_bucket<redis::connection> tb(l.conn, sluice::rate::per_second(200), 4);
    std::vector<int> order;
    const std::uint64_t sizes[] = {4, 1, 3, 1, 2, 4, 1, 1};
    int i = 0;
    for (std::uint64_t n : sizes) {
        tb.async_acquire("fifo", n, 5s, [&order, k = i](error_code ec) {
            CHECK_FALSE(ec);
            order.push_back(k);
        });
        ++i;
    }
    REQUIRE(run_until(l.io, [&] { return order.size() == std::size(sizes); }));
    for (std::size_t k = 0; k < order.size(); ++k)
        CHECK(order[k] == static_cast<int>(k));
}

TEST_CASE("redis token bucket: cancellation gives the slot back in Redis" * doctest::timeout(60))
{
    live l;
    redis::token_bucket<redis::connection> tb(l.conn, sluice::rate::per_second(10), 1);
    auto first = std::make_shared<acq_result>();
    tb.async_acquire("c", 1, 0ns, acq_recorder(first));
    REQUIRE(run_until(l.io, [&] { return first->calls == 1; }));
    auto empty_at = l.server.command({"GET", "{sluice:c}"}).str;

    // A waiter reserves the next slot (100 ms away) ...
    asio::cancellation_signal sig;
    auto cancelled = std::make_shared<acq_result>();
    tb.async_acquire("c", 1, 1s, asio::bind_cancellation_slot(sig.slot(), acq_recorder(cancelled)));
    REQUIRE(run_until(l.io, [&] { return l.server.command({"GET", "{sluice:c}"}).str != empty_at; }, 2000ms));
    run_for(l.io, 5ms);   // the reply is in: it waits on its timer
    CHECK(cancelled->calls == 0);
    // ... and is cancelled: it completes at once and the slot goes back.
    sig.emit(asio::cancellation_type::terminal);
    REQUIRE(run_until(l.io, [&] { return cancelled->calls == 1; }, 50ms));
    CHECK(cancelled->ec == asio::error::operation_aborted);
    REQUIRE(run_until(l.io, [&] { return l.server.command({"GET", "{sluice:c}"}).str == empty_at; }, 2000ms));

    // So a later request gets that slot: within 150 ms, not 200.
    auto later = std::make_shared<acq_result>();
    tb.async_acquire("c", 1, 150ms, acq_recorder(later));
    REQUIRE(run_until(l.io, [&] { return later->calls == 1; }));
    CHECK_FALSE(later->ec);
}

TEST_CASE("redis token bucket: close() completes waiters with error::closed" * doctest::timeout(60))
{
    live l;
    redis::token_bucket<redis::connection> tb(l.conn, sluice::rate::per_second(2), 1);
    std::vector<std::shared_ptr<acq_result>> r;
    for (int i = 0; i < 3; ++i) {
        r.push_back(std::make_shared<acq_result>());
        tb.async_acquire("z", 1, 10s, acq_recorder(r.back()));
    }
    REQUIRE(run_until(l.io, [&] { return r[0]->calls == 1; }));
    run_for(l.io, 20ms);   // the others wait on their timers
    CHECK(r[1]->calls == 0);
    tb.close();
    REQUIRE(run_until(l.io, [&] { return r[1]->calls == 1 && r[2]->calls == 1; }, 500ms));
    CHECK(r[1]->ec == sluice::error::closed);
    CHECK(r[2]->ec == sluice::error::closed);
    auto after = std::make_shared<try_result>();
    tb.async_try_acquire("z", 1, try_recorder(after));
    REQUIRE(run_until(l.io, [&] { return after->calls == 1; }));
    CHECK(after->ec == sluice::error::closed);
}

TEST_CASE("redis token bucket: several processes share one quota" * doctest::timeout(120))
{
    redis_server server;
    const int procs = 3;
    const double rate = 200;
    const auto duration = 1500ms;
    auto start_at = std::chrono::system_clock::now() + 500ms;
    std::vector<pid_t> kids;
    std::vector<int> pipes;
    for (int p = 0; p < procs; ++p) {
        int fds[2];
        REQUIRE(::pipe(fds) == 0);
        pid_t pid = ::fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            ::close(fds[0]);
            long admitted = -1;
            try {
                asio::io_context io;
                redis::connection conn(io, server.config());
                redis::shared_options o;
                o.on_failure = redis::failure_policy::fail_closed;
                redis::token_bucket<redis::connection> tb(conn, sluice::rate::per_second(rate), 1, o);
                run_until(io, [&] { return conn.connected(); });
                std::this_thread::sleep_until(start_at);
                auto end = std::chrono::steady_clock::now() + duration;
                long ok = 0;
                int inflight = 0;
                std::function<void()> issue = [&] {
                    ++inflight;
                    tb.async_try_acquire("shared", 1, [&](error_code ec, sluice::decision d) {
                        --inflight;
                        if (!ec && d.admitted) ++ok;
                        if (std::chrono::steady_clock::now() < end) issue();
                    });
                };
                for (int c = 0; c < 8; ++c) issue();
                run_until(io, [&] { return inflight == 0; }, duration + 3000ms);
                admitted = ok;
            } catch (...) {
            }
            if (::write(fds[1], &admitted, sizeof admitted) != sizeof admitted) ::_exit(3);
            ::_exit(0);
        }
        ::close(fds[1]);
        kids.push_back(pid);
        pipes.push_back(fds[0]);
    }
    long total = 0;
    for (int p = 0; p < procs; ++p) {
        long v = -1;
        CHECK(::read(pipes[p], &v, sizeof v) == static_cast<ssize_t>(sizeof v));
        ::close(pipes[p]);
        int status = 0;
        ::waitpid(kids[p], &status, 0);
        CHECK(v > 0);   // every process got a share
        total += v;
    }
    // At most rate x time + burst (the attempts span the run plus one round trip).
    double allowed = rate * std::chrono::duration<double>(duration).count() + 1;
    MESSAGE("admitted ", total, " of ", allowed, " allowed");
    CHECK(static_cast<double>(total) <= allowed + rate * 0.02);
    // Close to it: burst 1 loses the slots nobody asks for in time, which a loaded machine
    // (or a sanitizer build) makes more frequent; typically 95 % or more.
    CHECK(static_cast<double>(total) >= allowed * 0.75);
}

TEST_CASE("redis token bucket: Redis killed and restarted mid-run, local fallback" * doctest::timeout(120))
{
    redis_server server;
    asio::io_context io;
    auto cfg = server.config();
    cfg.command_timeout = 300ms;
    cfg.reconnect_max = 100ms;
    redis::connection conn(io, cfg);
    REQUIRE(wait_connected(io, conn));
    redis::shared_options o;
    o.probe_interval = 50ms;
    o.expected_nodes = 2;
    redis::token_bucket<redis::connection> tb(conn, sluice::rate::per_second(1000), 10, o);

    long issued = 0, completed = 0, admitted = 0;
    bool stop = false;
    std::function<void()> issue = [&] {
        ++issued;
        tb.async_try_acquire("kr", 1, [&](error_code ec, sluice::decision d) {
            ++completed;
            CHECK_FALSE(ec);
            if (d.admitted) ++admitted;
            if (!stop) {
                // Paced, so that the fallback is not just spinning.
                auto t = std::make_shared<asio::steady_timer>(io, 1ms);
                t->async_wait([&, t](error_code) { issue(); });
            }
        });
    };
    for (int c = 0; c < 4; ++c) issue();
    run_for(io, 200ms);
    auto healthy = tb.stats();
    CHECK(healthy.backend.fallback_decisions == 0);
    CHECK(healthy.try_admitted > 0);

    server.kill();
    run_for(io, 400ms);
    auto down = tb.stats();
    CHECK(down.backend.degraded);
    CHECK(down.backend.fallback_decisions > 0);
    CHECK(down.backend.errors > 0);
    CHECK(completed + 4 >= issued);   // nobody hangs

    server.start();
    REQUIRE(run_until(io, [&] { return !tb.stats().backend.degraded; }, 5000ms));
    auto back = tb.stats();
    run_for(io, 200ms);
    auto after = tb.stats();
    CHECK(after.backend.fallback_decisions == back.backend.fallback_decisions);   // Redis decides again
    CHECK(sluice_test::decisions(after) > sluice_test::decisions(back));
    stop = true;
    REQUIRE(run_until(io, [&] { return completed == issued; }, 3000ms));
    MESSAGE("decisions ", sluice_test::decisions(after), " fallback ", after.backend.fallback_decisions, " errors ",
            after.backend.errors);
}

TEST_CASE("redis token bucket: failure policies while Redis is away" * doctest::timeout(60))
{
    redis_server server;
    asio::io_context io;
    redis::connection conn(io, server.config());
    REQUIRE(wait_connected(io, conn));
    server.kill();

    redis::shared_options closed_opts;
    closed_opts.on_failure = redis::failure_policy::fail_closed;
    redis::token_bucket<redis::connection> closed(conn, sluice::rate::per_second(1), 1, closed_opts);
    redis::shared_options open_opts;
    open_opts.on_failure = redis::failure_policy::fail_open;
    redis::token_bucket<redis::connection> open(conn, sluice::rate::per_second(1), 1, open_opts);
    redis::token_bucket<redis::connection> local(conn, sluice::rate::per_second(1), 2);

    auto c1 = std::make_shared<try_result>();
    auto c2 = std::make_shared<acq_result>();
    closed.async_try_acquire("k", 1, try_recorder(c1));
    closed.async_acquire("k", 1, 1s, acq_recorder(c2));
    std::vector<std::shared_ptr<try_result>> o(3), f(3);
    for (int i = 0; i < 3; ++i) {
        o[i] = std::make_shared<try_result>();
        f[i] = std::make_shared<try_result>();
        open.async_try_acquire("k", 1, try_recorder(o[i]));
        local.async_try_acquire("k", 1, try_recorder(f[i]));
    }
    auto fa = std::make_shared<acq_result>();
    local.async_acquire("k", 1, 10ms, acq_recorder(fa));
    REQUIRE(run_until(io, [&] { return c1->calls && c2->calls && o[2]->calls && f[2]->calls && fa->calls; }, 3000ms));
    CHECK(c1->ec == sluice::error::backend_unavailable);
    CHECK(c2->ec == sluice::error::backend_unavailable);
    for (int i = 0; i < 3; ++i) {
        CHECK_FALSE(o[i]->ec);
        CHECK(o[i]->d.admitted);
    }
    // The local share: burst 2, then refusals.
    CHECK(f[0]->d.admitted);
    CHECK(f[1]->d.admitted);
    CHECK_FALSE(f[2]->d.admitted);
    CHECK(fa->ec == sluice::error::timed_out);
    CHECK(open.stats().backend.fallback_decisions == 3);
    CHECK(local.stats().backend.fallback_decisions == 4);
    CHECK(local.stats().backend.degraded);
}

TEST_CASE("redis token bucket: a server that stops answering is timed out, then the fallback decides" * doctest::timeout(60))
{
    redis_server server;
    asio::io_context io;
    auto cfg = server.config();
    cfg.command_timeout = 200ms;
    redis::connection conn(io, cfg);
    REQUIRE(wait_connected(io, conn));
    redis::token_bucket<redis::connection> tb(conn, sluice::rate::per_second(100), 5);
    server.pause();
    auto start = std::chrono::steady_clock::now();
    auto t = std::make_shared<try_result>();
    auto a = std::make_shared<acq_result>();
    tb.async_try_acquire("p", 1, try_recorder(t));
    tb.async_acquire("p", 1, 1s, acq_recorder(a));
    REQUIRE(run_until(io, [&] { return t->calls && a->calls; }, 3000ms));
    CHECK(std::chrono::steady_clock::now() - start < 1500ms);
    CHECK_FALSE(t->ec);
    CHECK(t->d.admitted);   // the local share
    CHECK_FALSE(a->ec);
    CHECK(tb.stats().backend.degraded);
    CHECK(tb.stats().backend.fallback_decisions == 2);
    server.resume();
}

TEST_CASE("redis token bucket: bad construction parameters throw" * doctest::timeout(60))
{
    asio::io_context io;
    redis::connection conn(io, redis::connection_config{});
    using tb = redis::token_bucket<redis::connection>;
    auto code = [&](auto&& f) {
        try {
            f();
        } catch (const boost::system::system_error& e) {
            return e.code();
        }
        return error_code{};
    };
    CHECK(code([&] { tb(conn, sluice::rate::per_second(1), 0); }) == sluice::error::invalid_limit);
    // One permit in 100 years: beyond the scripts' 2^51 us.
    CHECK(code([&] { tb(conn, sluice::rate::every(std::chrono::hours(24 * 365 * 100)), 1); }) == sluice::error::invalid_rate);
    CHECK(code([&] { tb(conn, sluice::rate::every(std::chrono::hours(24 * 365)), 100); }) == sluice::error::invalid_limit);
    redis::shared_options o;
    o.expected_nodes = 0;
    CHECK(code([&] { tb(conn, sluice::rate::per_second(1), 1, o); }) == sluice::error::invalid_option);
    CHECK_FALSE(code([&] { tb(conn, sluice::rate::per_second(1e6), 1000); }));
}

TEST_CASE("redis token bucket: a wrong-type key is backend_error" * doctest::timeout(60))
{
    live l;
    redis::token_bucket<redis::connection> tb(l.conn, sluice::rate::per_second(10), 1);
    l.server.command({"RPUSH", "{sluice:list}", "x"});
    auto t = std::make_shared<try_result>();
    auto a = std::make_shared<acq_result>();
    tb.async_try_acquire("list", 1, try_recorder(t));
    tb.async_acquire("list", 1, 1s, acq_recorder(a));
    REQUIRE(run_until(l.io, [&] { return t->calls && a->calls; }));
    CHECK(t->ec == sluice::error::backend_error);
    CHECK_FALSE(t->d.admitted);
    CHECK(a->ec == sluice::error::backend_error);
    CHECK(tb.stats().backend.errors == 2);
    CHECK_FALSE(tb.stats().backend.degraded);   // Redis is there: not a reason to fall back
    CHECK(l.server.command({"LLEN", "{sluice:list}"}).integer == 1);
}

TEST_CASE("redis token bucket: a server answering nonsense is protocol_error" * doctest::timeout(60))
{
    // A stub on 127.0.0.1 that answers the handshake, then an integer to everything.
    asio::io_context stub_io;
    asio::ip::tcp::acceptor acceptor(stub_io, {asio::ip::make_address("127.0.0.1"), 0});
    auto port = acceptor.local_endpoint().port();
    std::atomic<bool> done{false};
    std::thread stub([&] {
        acceptor.non_blocking(false);
        while (!done) {
            error_code ec;
            asio::ip::tcp::socket s(stub_io);
            acceptor.accept(s, ec);
            if (ec || done) break;
            char buf[4096];
            bool first = true;
            for (;;) {
                std::size_t n = s.read_some(asio::buffer(buf), ec);
                if (ec || n == 0) break;
                std::string out = first ? "+PONG\r\n" : ":42\r\n";
                first = false;
                asio::write(s, asio::buffer(out), ec);
                if (ec) break;
            }
        }
    });

    {
        asio::io_context io;
        sluice::redis::connection_config cfg;
        cfg.port = port;
        redis::connection conn(io, cfg);
        REQUIRE(wait_connected(io, conn));
        redis::token_bucket<redis::connection> tb(conn, sluice::rate::per_second(10), 1);
        auto t = std::make_shared<try_result>();
        tb.async_try_acquire("g", 1, try_recorder(t));
        REQUIRE(run_until(io, [&] { return t->calls == 1; }));
        CHECK(t->ec == sluice::error::protocol_error);
        CHECK(tb.stats().backend.errors == 1);
        conn.close();
        run_for(io, 10ms);
    }
    done = true;
    // Wake the accept with one last connection.
    error_code ec;
    asio::ip::tcp::socket poke(stub_io);
    poke.connect({asio::ip::make_address("127.0.0.1"), port}, ec);
    poke.close();
    stub.join();
}

TEST_CASE("redis token bucket: leasing reserves runs of slots beyond the burst, answers locally, gives unused ones back on close" * doctest::timeout(60))
{
    live l;
    redis::shared_options lo;
    lo.lease_size = 16;
    // 50 us a slot: a run may span lease_ttl / 8 (625 slots), capped by lease_size.
    const double rate = 20000;
    redis::token_bucket<redis::connection> leasing(l.conn, sluice::rate::per_second(rate), 1, lo);

    // 16 callers asking as fast as they are answered, for 300 ms.
    long admitted = 0, attempts = 0;
    int inflight = 0;
    auto start = std::chrono::steady_clock::now();
    auto end = start + 300ms;
    std::function<void()> issue = [&] {
        ++attempts;
        ++inflight;
        leasing.async_try_acquire("lk", 1, [&](error_code ec, sluice::decision d) {
            --inflight;
            CHECK_FALSE(ec);
            if (d.admitted) ++admitted;
            if (std::chrono::steady_clock::now() < end) issue();
        });
    };
    for (int c = 0; c < 16; ++c) issue();
    REQUIRE(run_until(l.io, [&] { return inflight == 0; }, 5000ms));
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    auto s = leasing.stats();
    MESSAGE("leasing 20000/s burst 1: admitted ", admitted, " in ", secs, " s, ", s.backend.commands, " commands, ", attempts, " attempts");
    CHECK(static_cast<double>(admitted) <= rate * secs + 1);
    // How much of the rate it reaches is the benchmark's to measure (a loaded machine
    // starves this loop); here, that it admits at all.
    CHECK(admitted >= 100);
    // Runs of several slots a round trip, though the burst is 1 (up to 16 here; 4 on
    // average leaves room for the first runs, which cover only the permits asked for
    // while the first round trip was on its way).
    CHECK(s.backend.commands * 4 <= static_cast<std::uint64_t>(admitted));

    // One more request: the process reserves ahead again and holds slots. The key lives
    // only until the bucket is full again, about a millisecond after the last slot here: on
    // a loaded machine it can be gone before it is read, and then there is nothing to give
    // back. Ask again until the state is read while it stands.
    std::string state;
    for (int i = 0; i < 50 && state.empty(); ++i) {
        auto last = std::make_shared<try_result>();
        leasing.async_try_acquire("lk", 1, try_recorder(last));
        REQUIRE(run_until(l.io, [&] { return last->calls == 1 && leasing.leased() > 0; }, 2000ms));
        state = l.server.command({"GET", "{sluice:lk}"}).str;
    }
    REQUIRE_FALSE(state.empty());
    // close(): the slots held go back (no other process reserved after them).
    leasing.close();
    REQUIRE(run_until(l.io, [&] { return l.server.command({"GET", "{sluice:lk}"}).str != state; }, 2000ms));
    auto after = l.server.command({"GET", "{sluice:lk}"}).str;   // gone once the bucket is full again
    CHECK((after.empty() || std::stoll(after) < std::stoll(state)));
}

TEST_CASE("redis token bucket: leasing never admits more than the rate over the run" * doctest::timeout(60))
{
    live l;
    redis::connection conn2(l.io, l.server.config());
    REQUIRE(wait_connected(l.io, conn2));
    redis::shared_options lo;
    lo.lease_size = 4;
    const double rate = 200;
    const std::uint64_t burst = 8;
    redis::token_bucket<redis::connection> a(l.conn, sluice::rate::per_second(rate), burst, lo);
    redis::token_bucket<redis::connection> b(conn2, sluice::rate::per_second(rate), burst, lo);
    long admitted = 0, attempts = 0;
    int inflight = 0;
    auto end = std::chrono::steady_clock::now() + 1000ms;
    std::function<void(redis::token_bucket<redis::connection>&)> issue = [&](auto& tb) {
        ++attempts;
        ++inflight;
        tb.async_try_acquire("lr", 1, [&](error_code ec, sluice::decision d) {
            --inflight;
            CHECK_FALSE(ec);
            if (d.admitted) ++admitted;
            if (std::chrono::steady_clock::now() < end) issue(tb);
        });
    };
    auto start = std::chrono::steady_clock::now();
    for (int c = 0; c < 4; ++c) {
        issue(a);
        issue(b);
    }
    REQUIRE(run_until(l.io, [&] { return inflight == 0; }, 5000ms));
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    MESSAGE("leasing: admitted ", admitted, " in ", secs, " s, ", attempts, " attempts");
    CHECK(static_cast<double>(admitted) <= rate * secs + static_cast<double>(burst));
    CHECK(static_cast<double>(admitted) >= rate * 0.8);
    CHECK(attempts > admitted * 10);   // most answers were local
}

TEST_CASE("redis token bucket: set_rate and set_burst from one process, every process follows on its next call" * doctest::timeout(60))
{
    live l;
    redis::connection conn2(l.io, l.server.config());
    REQUIRE(wait_connected(l.io, conn2));
    // Two processes, configured alike (1/s, burst 10: slow enough that the time between
    // two round trips never adds a permit on a loaded machine).
    redis::token_bucket<redis::connection> a(l.conn, sluice::rate::per_second(1), 10);
    redis::token_bucket<redis::connection> b(conn2, sluice::rate::per_second(1), 10);
    auto try_n = [&](auto& lim, std::uint64_t n) { return sluice_test::try_now(l.io, lim, "cfg", n); };
    auto done = [&](auto&& start) { return sluice_test::run_to_end(l.io, start); };
    CHECK(try_n(a, 6)->d.admitted);
    // b slows the key to one permit every 10 s: a's 4 remaining permits stay 4, and the
    // fifth comes at the new rate (up to 10 s, where the old one would take at most 1 s).
    CHECK_FALSE(done([&](auto h) { b.async_set_rate("cfg", sluice::rate::every(10s), h); }));
    auto r = try_n(a, 5);
    CHECK_FALSE(r->d.admitted);
    CHECK(r->d.remaining == 4);
    CHECK(r->d.retry_after > 1s);
    CHECK(try_n(a, 4)->d.admitted);
    // b speeds it up to 1000/s: the empty bucket stays empty (no permits from the change).
    CHECK_FALSE(done([&](auto h) { b.async_set_rate("cfg", sluice::rate::per_second(1000), h); }));
    auto after = try_n(b, 10);
    CHECK_FALSE(after->d.admitted);
    CHECK(after->d.retry_after <= 10ms);   // the new rate
    // b lowers the burst to 2: a follows (3 can never be granted now).
    CHECK_FALSE(done([&](auto h) { b.async_set_burst("cfg", 2, h); }));
    auto big = try_n(a, 3);
    CHECK(big->ec == sluice::error::exceeds_limit);
    run_for(l.io, 5ms);
    CHECK(try_n(a, 2)->d.admitted);
    // ... and raises it beyond a's own: a asks for 15 at once and is refused only for now.
    CHECK_FALSE(done([&](auto h) { b.async_set_burst("cfg", 20, h); }));
    auto wide = try_n(a, 15);
    CHECK_FALSE(wide->ec);
    // The configuration is with the key, not in the processes.
    auto cfg = l.server.command({"HGETALL", "{sluice:cfg}:cfg"});
    REQUIRE(cfg.elements.size() == 4);
    CHECK(cfg.elements[1].str == "1000");   // us
    CHECK(cfg.elements[3].str == "20");

    // Bad values: an error of their own, nothing sent.
    CHECK(done([&](auto h) { b.async_set_burst("cfg", 0, h); }) == sluice::error::invalid_limit);
    CHECK(done([&](auto h) { b.async_set_rate("cfg", sluice::rate::every(std::chrono::hours(24 * 365 * 100)), h); }) ==
          sluice::error::invalid_rate);
    b.close();
    CHECK(done([&](auto h) { b.async_set_rate("cfg", sluice::rate::per_second(5), h); }) == sluice::error::closed);
}

TEST_CASE("redis token bucket over a Redis Cluster: hash-tagged keys routed to their masters" * doctest::timeout(120))
{
    sluice_test::redis_cluster cl;
    asio::io_context io;
    redis::cluster c(io, cl.config());
    // Warm up: the client fetches the slot map.
    bool up = false;
    for (int attempt = 0; attempt < 100 && !up; ++attempt) {
        bool done = false;
        c.async_exec({"SET", "{sluice:warm}", "1"}, [&](error_code ec, sluice::redis::reply rep) {
            up = !ec && !rep.is_error();
            done = true;
        });
        run_until(io, [&] { return done; });
        if (!up) std::this_thread::sleep_for(20ms);
    }
    REQUIRE(up);
    redis::token_bucket<redis::cluster> tb(c, sluice::rate::per_second(1), 2);
    const int keys = 30;
    std::vector<std::shared_ptr<try_result>> r;
    for (int k = 0; k < keys; ++k)
        for (int i = 0; i < 3; ++i) {
            r.push_back(std::make_shared<try_result>());
            tb.async_try_acquire("user" + std::to_string(k), 1, try_recorder(r.back()));
        }
    REQUIRE(run_until(io, [&] {
        for (auto& x : r) if (x->calls == 0) return false;
        return true;
    }, 10000ms));
    for (int k = 0; k < keys; ++k) {
        CHECK_FALSE(r[k * 3]->ec);
        CHECK(r[k * 3]->d.admitted);
        CHECK(r[k * 3 + 1]->d.admitted);
        CHECK_FALSE(r[k * 3 + 2]->d.admitted);
    }
    int masters_used = 0;
    for (std::size_t i = 0; i < cl.size(); ++i)
        if (cl.node(i).command({"DBSIZE"}).integer > 0) ++masters_used;
    CHECK(masters_used >= 2);
    CHECK(tb.stats().backend.errors == 0);
}

TEST_SUITE_END();
