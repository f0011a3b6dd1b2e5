// redis::sliding_window on a real redis-server (the fixture starts one per test): the
// asynchronous API, fail fast, waiting until the oldest entry leaves the window,
// cancellation and close(), several OS processes sharing one key (never more than the
// limit in any window, checked from the grant times), failure policies with Redis killed,
// bad construction parameters.
#include "redis_limiter_support.hpp"

#include <sluice/redis/connection.hpp>
#include <sluice/redis/sliding_window.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include <doctest/doctest.h>

#include <algorithm>
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
using window = redis::sliding_window<redis::connection>;
using sluice_test::acq_recorder;
using sluice_test::acq_result;
using sluice_test::run_for;
using sluice_test::run_until;
using sluice_test::try_recorder;
using sluice_test::try_result;

struct live : sluice_test::live_redis {
    long long zcard(const std::string& key) { return server.command({"ZCARD", key}).integer; }
};

} // namespace

TEST_SUITE_BEGIN("redis");

TEST_CASE("redis sliding window: try, acquire and acquire() on a live server" * doctest::timeout(60))
{
    live l;
    window w(l.conn, 3, 300ms);
    CHECK(w.limit() == 3);
    CHECK(w.window() == 300ms);
    CHECK(w.redis_key("a") == "{sluice:a}");

    std::vector<std::shared_ptr<try_result>> r;
    for (int i = 0; i < 4; ++i) {
        r.push_back(std::make_shared<try_result>());
        w.async_try_acquire("a", 1, try_recorder(r.back()));
        CHECK(r.back()->calls == 0);   // never inside the initiating call
        REQUIRE(run_until(l.io, [&] { return r.back()->calls == 1; }));
        CHECK_FALSE(r.back()->ec);
    }
    CHECK(r[0]->d.admitted);
    CHECK(r[1]->d.admitted);
    CHECK(r[2]->d.admitted);
    CHECK(r[2]->d.remaining == 0);
    CHECK_FALSE(r[3]->d.admitted);
    CHECK(r[3]->d.retry_after > 0ns);
    CHECK(r[3]->d.retry_after <= 300ms);
    CHECK(l.zcard("{sluice:a}") == 3);

    // Bad requests.
    auto zero = std::make_shared<try_result>();
    auto big = std::make_shared<acq_result>();
    w.async_try_acquire("a", 0, try_recorder(zero));
    w.async_acquire("a", 4, 1s, acq_recorder(big));
    REQUIRE(run_until(l.io, [&] { return zero->calls == 1 && big->calls == 1; }));
    CHECK(zero->ec == sluice::error::invalid_count);
    CHECK(big->ec == sluice::error::exceeds_limit);

    // The coroutine form: another key has room; this one does not within 10 ms.
    sluice::acquire_result got(sluice::error::closed), refused;
    bool done = false;
    asio::co_spawn(l.io, [&]() -> asio::awaitable<void> {
        got = co_await w.acquire("b", 2, 100ms);
        refused = co_await w.acquire("a", 10ms);
        done = true;
    }, asio::detached);
    REQUIRE(run_until(l.io, [&] { return done; }));
    CHECK(static_cast<bool>(got));
    CHECK(refused.timed_out());

    auto s = w.stats();
    CHECK(s.admitted + s.try_admitted == 4);
    CHECK(s.timed_out + s.try_refused == 2);
    CHECK(s.backend.fallback_decisions == 0);
    CHECK_FALSE(s.backend.degraded);
}

TEST_CASE("redis sliding window: set_limit and set_window from one process, every process follows; consumed stays consumed" * doctest::timeout(60))
{
    sluice_test::live_redis l;
    redis::connection conn2(l.io, l.server.config());
    REQUIRE(sluice_test::wait_connected(l.io, conn2));
    window a(l.conn, 5, 10s);
    window b(conn2, 5, 10s);
    auto try_n = [&](auto& lim, std::uint64_t n) { return sluice_test::try_now(l.io, lim, "wcfg", n); };
    auto done = [&](auto&& start) { return sluice_test::run_to_end(l.io, start); };
    CHECK(try_n(a, 3)->d.admitted);
    CHECK_FALSE(done([&](auto h) { b.async_set_limit("wcfg", 2, h); }));
    CHECK_FALSE(try_n(a, 1)->d.admitted);   // 3 in the window, limit 2
    CHECK(try_n(a, 3)->ec == sluice::error::exceeds_limit);
    CHECK_FALSE(done([&](auto h) { b.async_set_limit("wcfg", 8, h); }));
    CHECK(try_n(a, 5)->d.admitted);          // 3 + 5
    CHECK_FALSE(try_n(b, 1)->d.admitted);
    // A window of 1 ms: the entries leave it at once.
    CHECK_FALSE(done([&](auto h) { b.async_set_window("wcfg", 1ms, h); }));
    run_for(l.io, 5ms);
    CHECK(try_n(a, 8)->d.admitted);
    CHECK(done([&](auto h) { b.async_set_limit("wcfg", 0, h); }) == sluice::error::invalid_limit);
    CHECK(done([&](auto h) { b.async_set_window("wcfg", 0ms, h); }) == sluice::error::invalid_duration);
}

TEST_CASE("redis sliding window: fail fast consumes nothing" * doctest::timeout(60))
{
    live l;
    window w(l.conn, 2, 400ms);
    auto first = std::make_shared<acq_result>();
    w.async_acquire("ff", 2, 0ns, acq_recorder(first));
    REQUIRE(run_until(l.io, [&] { return first->calls == 1; }));
    REQUIRE_FALSE(first->ec);
    auto before = l.server.command({"ZRANGE", "{sluice:ff}", "0", "-1", "WITHSCORES"});

    auto late = std::make_shared<acq_result>();
    auto start = std::chrono::steady_clock::now();
    w.async_acquire("ff", 1, 50ms, acq_recorder(late));
    REQUIRE(run_until(l.io, [&] { return late->calls == 1; }));
    CHECK(late->ec == sluice::error::timed_out);
    CHECK(late->at - start < 300ms);   // at once, not after waiting
    auto after = l.server.command({"ZRANGE", "{sluice:ff}", "0", "-1", "WITHSCORES"});
    REQUIRE(after.elements.size() == before.elements.size());
    for (std::size_t i = 0; i < after.elements.size(); ++i)
        CHECK(after.elements[i].str == before.elements[i].str);
    CHECK(w.stats().timed_out == 1);
}

TEST_CASE("redis sliding window: async_acquire waits until the oldest entry leaves the window" * doctest::timeout(60))
{
    live l;
    window w(l.conn, 2, 200ms);
    auto a = std::make_shared<acq_result>();
    w.async_acquire("w", 1, 0ns, acq_recorder(a));
    REQUIRE(run_until(l.io, [&] { return a->calls == 1; }));
    run_for(l.io, 60ms);
    auto b = std::make_shared<acq_result>();
    w.async_acquire("w", 1, 0ns, acq_recorder(b));
    REQUIRE(run_until(l.io, [&] { return b->calls == 1; }));
    REQUIRE_FALSE(a->ec);
    REQUIRE_FALSE(b->ec);

    // Full: the next permit frees when `a` leaves, 200 ms after the server stamped it
    // (a->at is later by up to a round trip); two permits only when the log is empty,
    // when `one` leaves too.
    auto one = std::make_shared<acq_result>();
    w.async_acquire("w", 1, 2s, acq_recorder(one));
    REQUIRE(run_until(l.io, [&] { return one->calls == 1; }));
    CHECK_FALSE(one->ec);
    CHECK(one->at - a->at >= 150ms);
    CHECK(one->at - a->at < 1000ms);
    auto two = std::make_shared<acq_result>();
    w.async_acquire("w", 2, 2s, acq_recorder(two));
    REQUIRE(run_until(l.io, [&] { return two->calls == 1; }));
    CHECK_FALSE(two->ec);
    CHECK(two->at - one->at >= 150ms);
    CHECK(w.stats().admitted == 4);
    CHECK(l.zcard("{sluice:w}") <= 2);
}

TEST_CASE("redis sliding window: cancellation and close() complete waiters, nothing consumed" * doctest::timeout(60))
{
    live l;
    window w(l.conn, 1, 500ms);
    const asio::cancellation_type types[] = {asio::cancellation_type::terminal, asio::cancellation_type::partial,
                                             asio::cancellation_type::total};
    int i = 0;
    for (auto type : types) {
        std::string key = "c" + std::to_string(i++);
        auto first = std::make_shared<acq_result>();
        w.async_acquire(key, 1, 0ns, acq_recorder(first));
        REQUIRE(run_until(l.io, [&] { return first->calls == 1; }));
        asio::cancellation_signal sig;
        auto waiter = std::make_shared<acq_result>();
        w.async_acquire(key, 1, 5s, asio::bind_cancellation_slot(sig.slot(), acq_recorder(waiter)));
        run_for(l.io, 50ms);   // the refusal is in: it sleeps
        CHECK(waiter->calls == 0);
        sig.emit(type);
        // Well before `first` leaves the window (which would grant it).
        REQUIRE(run_until(l.io, [&] { return waiter->calls == 1; }, 300ms));
        CHECK(waiter->ec == asio::error::operation_aborted);
        CHECK(l.zcard("{sluice:" + key + "}") == 1);
    }

    std::vector<std::shared_ptr<acq_result>> r;
    for (int k = 0; k < 3; ++k) {
        r.push_back(std::make_shared<acq_result>());
        w.async_acquire("z", 1, 10s, acq_recorder(r.back()));
    }
    REQUIRE(run_until(l.io, [&] { return r[0]->calls == 1; }));
    run_for(l.io, 50ms);
    CHECK(r[1]->calls == 0);
    w.close();
    REQUIRE(run_until(l.io, [&] { return r[1]->calls == 1 && r[2]->calls == 1; }, 500ms));
    CHECK(r[1]->ec == sluice::error::closed);
    CHECK(r[2]->ec == sluice::error::closed);
    CHECK(l.zcard("{sluice:z}") == 1);
    auto after = std::make_shared<try_result>();
    w.async_try_acquire("z", 1, try_recorder(after));
    REQUIRE(run_until(l.io, [&] { return after->calls == 1; }));
    CHECK(after->ec == sluice::error::closed);
}

TEST_CASE("redis sliding window: use_future while another thread runs the io_context" * doctest::timeout(60))
{
    live l;
    window w(l.conn, 1, 1s);
    std::thread runner([&] {
        auto guard = asio::make_work_guard(l.io);
        sluice_test::run_slice(l.io, 3s);
    });
    auto f = w.async_acquire("f", 1, 100ms, asio::use_future);
    CHECK(f.wait_for(2s) == std::future_status::ready);
    CHECK_NOTHROW(f.get());
    auto g = w.async_try_acquire("f", 1, asio::use_future);
    REQUIRE(g.wait_for(2s) == std::future_status::ready);
    CHECK_FALSE(g.get().admitted);
    l.io.stop();
    runner.join();
}

TEST_CASE("redis sliding window: several processes never exceed the limit in any window" * doctest::timeout(120))
{
    redis_server server;
    const int procs = 3;
    const std::uint64_t limit = 5;
    const auto win = 400ms;
    const auto duration = 1600ms;
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
            // Grant times, system_clock us (one clock for the processes of one host).
            std::vector<std::int64_t> grants;
            long errors = 0;
            try {
                asio::io_context io;
                redis::connection conn(io, server.config());
                redis::shared_options o;
                o.on_failure = redis::failure_policy::fail_closed;
                window w(conn, limit, win, o);
                run_until(io, [&] { return conn.connected(); });
                std::this_thread::sleep_until(start_at);
                auto end = std::chrono::steady_clock::now() + duration;
                int inflight = 0;
                std::function<void()> issue = [&] {
                    ++inflight;
                    w.async_acquire("shared", 1, 2s, [&](error_code ec) {
                        --inflight;
                        if (!ec)
                            grants.push_back(std::chrono::duration_cast<std::chrono::microseconds>(
                                std::chrono::system_clock::now().time_since_epoch()).count());
                        else if (ec != sluice::error::timed_out)
                            ++errors;
                        if (std::chrono::steady_clock::now() < end) issue();
                    });
                };
                for (int c = 0; c < 3; ++c) issue();
                run_until(io, [&] { return inflight == 0; }, duration + 5000ms);
            } catch (...) {
                errors = -1;
            }
            long count = static_cast<long>(grants.size());
            bool ok = ::write(fds[1], &errors, sizeof errors) == sizeof errors
                      && ::write(fds[1], &count, sizeof count) == sizeof count;
            for (std::int64_t g : grants)
                ok = ok && ::write(fds[1], &g, sizeof g) == sizeof g;
            ::_exit(ok ? 0 : 3);
        }
        ::close(fds[1]);
        kids.push_back(pid);
        pipes.push_back(fds[0]);
    }
    auto read_all = [](int fd, void* p, std::size_t n) {
        auto* b = static_cast<char*>(p);
        while (n > 0) {
            ssize_t k = ::read(fd, b, n);
            if (k <= 0) return false;
            b += k;
            n -= static_cast<std::size_t>(k);
        }
        return true;
    };
    std::vector<std::int64_t> all;
    for (int p = 0; p < procs; ++p) {
        long errors = -2, count = 0;
        CHECK(read_all(pipes[p], &errors, sizeof errors));
        CHECK(read_all(pipes[p], &count, sizeof count));
        CHECK(errors == 0);
        // No share is promised: waiters are not queued across processes, and a process
        // slower to ask again (a sanitizer build on a busy machine) may lose every time.
        MESSAGE("process ", p, ": ", count, " grants");
        for (long i = 0; i < count; ++i) {
            std::int64_t g = 0;
            if (!read_all(pipes[p], &g, sizeof g)) break;
            all.push_back(g);
        }
        ::close(pipes[p]);
        int status = 0;
        ::waitpid(kids[p], &status, 0);
        CHECK(WIFEXITED(status));
    }
    std::sort(all.begin(), all.end());
    // A grant is seen at most `slack` after the server stamped it, so limit + 1 grants
    // seen within window - slack would be limit + 1 stamps within one window.
    const std::int64_t slack_us = 100000;   // generous: sanitizer builds on a busy machine
    const std::int64_t win_us = std::chrono::duration_cast<std::chrono::microseconds>(win).count();
    std::int64_t tightest = INT64_MAX;
    for (std::size_t i = 0; i + limit < all.size(); ++i)
        tightest = std::min(tightest, all[i + limit] - all[i]);
    MESSAGE("grants ", all.size(), "; tightest span of ", limit + 1, " grants: ", tightest, " us");
    CHECK(tightest >= win_us - slack_us);
    // The run spans at most duration + max_wait: at most limit per window.
    CHECK(all.size() <= limit * static_cast<std::size_t>((duration + 2s) / win + 1));
    // And the waiters kept the window busy: close to limit per window over the run.
    CHECK(all.size() >= limit * static_cast<std::size_t>(duration / win) / 2);
}

TEST_CASE("redis sliding window: failure policies with Redis killed, then back" * doctest::timeout(60))
{
    redis_server server;
    asio::io_context io;
    auto cfg = server.config();
    cfg.command_timeout = 300ms;
    cfg.reconnect_max = 100ms;
    redis::connection conn(io, cfg);
    REQUIRE(run_until(io, [&] { return conn.connected(); }));

    redis::shared_options closed_opts;
    closed_opts.on_failure = redis::failure_policy::fail_closed;
    window closed(conn, 4, 300ms, closed_opts);
    redis::shared_options open_opts;
    open_opts.on_failure = redis::failure_policy::fail_open;
    window open(conn, 1, 300ms, open_opts);
    redis::shared_options local_opts;
    local_opts.expected_nodes = 2;
    local_opts.probe_interval = 5000ms;   // no probe during the outage part
    window local(conn, 4, 300ms, local_opts);

    server.kill();
    auto c1 = std::make_shared<try_result>();
    auto c2 = std::make_shared<acq_result>();
    closed.async_try_acquire("k", 1, try_recorder(c1));
    closed.async_acquire("k", 1, 1s, acq_recorder(c2));
    std::vector<std::shared_ptr<try_result>> o(3), f(3);
    for (int i = 0; i < 3; ++i) {
        o[i] = std::make_shared<try_result>();
        open.async_try_acquire("k", 1, try_recorder(o[i]));
        REQUIRE(run_until(io, [&] { return o[i]->calls == 1; }, 3000ms));
    }
    for (int i = 0; i < 3; ++i) {
        f[i] = std::make_shared<try_result>();
        local.async_try_acquire("k", 1, try_recorder(f[i]));
        REQUIRE(run_until(io, [&] { return f[i]->calls == 1; }, 3000ms));
    }
    REQUIRE(run_until(io, [&] { return c1->calls && c2->calls; }, 3000ms));
    CHECK(c1->ec == sluice::error::backend_unavailable);
    CHECK(c2->ec == sluice::error::backend_unavailable);
    for (int i = 0; i < 3; ++i) {
        CHECK_FALSE(o[i]->ec);
        CHECK(o[i]->d.admitted);
        CHECK_FALSE(f[i]->ec);
    }
    // The local share: 4 / 2 per window, then refusals.
    CHECK(f[0]->d.admitted);
    CHECK(f[1]->d.admitted);
    CHECK_FALSE(f[2]->d.admitted);
    // A waiter on the fallback: refused fast within 10 ms, granted when the local window
    // frees.
    auto fast = std::make_shared<acq_result>();
    auto slow = std::make_shared<acq_result>();
    auto start = std::chrono::steady_clock::now();
    local.async_acquire("k", 1, 10ms, acq_recorder(fast));
    local.async_acquire("k", 1, 2s, acq_recorder(slow));
    REQUIRE(run_until(io, [&] { return fast->calls && slow->calls; }, 3000ms));
    CHECK(fast->ec == sluice::error::timed_out);
    CHECK_FALSE(slow->ec);
    CHECK(slow->at - start >= 150ms);
    auto down = local.stats();
    CHECK(down.backend.degraded);
    CHECK(down.backend.fallback_decisions == 5);
    CHECK(down.backend.errors >= 1);
    CHECK(open.stats().backend.fallback_decisions == 3);

    // Redis back: the next probe switches back to it.
    server.start();
    REQUIRE(run_until(io, [&] { return conn.connected(); }, 5000ms));
    redis::shared_options quick = local_opts;
    quick.probe_interval = 50ms;
    window again(conn, 4, 300ms, quick);
    auto probe = std::make_shared<try_result>();
    again.async_try_acquire("k2", 1, try_recorder(probe));
    REQUIRE(run_until(io, [&] { return probe->calls == 1; }));
    CHECK_FALSE(probe->ec);
    CHECK(probe->d.admitted);
    CHECK_FALSE(again.stats().backend.degraded);
    CHECK(server.command({"ZCARD", "{sluice:k2}"}).integer == 1);
}

TEST_CASE("redis sliding window: Redis killed mid-wait, the waiter falls back" * doctest::timeout(60))
{
    redis_server server;
    asio::io_context io;
    auto cfg = server.config();
    cfg.command_timeout = 300ms;
    cfg.reconnect_max = 100ms;
    redis::connection conn(io, cfg);
    REQUIRE(run_until(io, [&] { return conn.connected(); }));
    window w(conn, 1, 300ms);
    auto first = std::make_shared<acq_result>();
    w.async_acquire("m", 1, 0ns, acq_recorder(first));
    REQUIRE(run_until(io, [&] { return first->calls == 1; }));
    auto waiter = std::make_shared<acq_result>();
    w.async_acquire("m", 1, 3s, acq_recorder(waiter));
    run_for(io, 50ms);   // sleeping until `first` leaves the window
    REQUIRE(waiter->calls == 0);
    server.kill();
    // Its next check finds Redis away: the local window (empty) grants.
    REQUIRE(run_until(io, [&] { return waiter->calls == 1; }, 3000ms));
    CHECK_FALSE(waiter->ec);
    auto s = w.stats();
    CHECK(s.backend.degraded);
    CHECK(s.backend.fallback_decisions == 1);
    CHECK(s.admitted == 2);
}

TEST_CASE("redis sliding window: bad construction parameters throw" * doctest::timeout(60))
{
    asio::io_context io;
    redis::connection conn(io, redis::connection_config{});
    auto code = [&](auto&& f) {
        try {
            f();
        } catch (const boost::system::system_error& e) {
            return e.code();
        }
        return error_code{};
    };
    CHECK(code([&] { window(conn, 0, 1s); }) == sluice::error::invalid_limit);
    CHECK(code([&] { window(conn, (std::uint64_t{1} << 24) + 1, 1s); }) == sluice::error::invalid_limit);
    CHECK(code([&] { window(conn, 1, 0ns); }) == sluice::error::invalid_duration);
    CHECK(code([&] { window(conn, 1, -1s); }) == sluice::error::invalid_duration);
    // 100 years: beyond the script's 2^51 us.
    CHECK(code([&] { window(conn, 1, std::chrono::hours(24 * 365 * 100)); }) == sluice::error::invalid_duration);
    redis::shared_options o;
    o.expected_nodes = 0;
    CHECK(code([&] { window(conn, 1, 1s, o); }) == sluice::error::invalid_option);
    o.expected_nodes = 1;
    o.probe_interval = 0ms;
    CHECK(code([&] { window(conn, 1, 1s, o); }) == sluice::error::invalid_option);
    CHECK_FALSE(code([&] { window(conn, std::uint64_t{1} << 24, 1500ns); }));
    window w(conn, 10, 1500ns);
    CHECK(w.window() == 2us);   // rounded up: never more permits than asked
}

TEST_SUITE_END();
