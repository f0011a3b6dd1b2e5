// A failing network between sluice and Redis, and Redis itself misbehaving (suite
// `faults`): each test puts a fault_proxy (or the server) into one fault and checks what
// docs/guide.md, "When Redis or the network fails", promises for it:
//   - no waiter outlives its bound: an async_acquire completes by max(max_wait,
//     command_timeout), a try by command_timeout, plus scheduling slack, with an error of
//     sluice's category when Redis cannot answer;
//   - admissions stay within the documented bound during and after the fault, checked
//     exactly where the case allows: at an hourly rate nothing refills during a run, and
//     what the limiter admitted is compared with what Redis counts (a permit whose reply
//     was lost is consumed there and admitted nowhere, never admitted twice);
//   - a reply that is malformed, or well formed with values the script could not have
//     given (the proxy cuts, edits, duplicates and flips bytes), is an error of sluice's
//     category, never an admission and never a crash;
//   - the client recovers by itself (the time is measured and printed);
//   - every failure is counted in stats() (backend.errors, refused, degraded).
// Timeouts are short (150 ms) so that the suite runs in seconds; the slack on real-time
// bounds is generous (CI runs on two shared cores, under sanitizers too).
#include "fault_proxy.hpp"
#include "redis_limiter_support.hpp"

#include <sluice/error.hpp>
#include <sluice/redis/connection.hpp>
#include <sluice/redis/sliding_window.hpp>
#include <sluice/redis/token_bucket.hpp>

#include <boost/asio/io_context.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>

namespace {

namespace asio = boost::asio;
namespace redis = sluice::redis;
using namespace std::chrono_literals;
using sluice_test::acq_recorder;
using sluice_test::acq_result;
using sluice_test::fault_proxy;
using sluice_test::redis_server;
using sluice_test::run_for;
using sluice_test::run_until;
using sluice_test::try_recorder;
using sluice_test::try_result;
using error_code = boost::system::error_code;
using steady = std::chrono::steady_clock;
using bucket = redis::token_bucket<redis::connection>;

// The client's timeouts in these tests, and the slack on every real-time bound.
constexpr auto command_timeout = 150ms;
constexpr auto connect_timeout = 150ms;
constexpr auto reconnect_max = 200ms;
constexpr auto probe_interval = 50ms;
constexpr auto slack = 700ms;

// The documented time to recover once the fault is gone: a connection attempt already in
// the fault runs out (connect_timeout), the backoff (at most reconnect_max), the handshake,
// then the next probe (probe_interval).
constexpr auto recovery_bound = connect_timeout + reconnect_max + probe_interval + command_timeout;

redis::connection_config fast(redis::connection_config c)
{
    c.connect_timeout = connect_timeout;
    c.command_timeout = command_timeout;
    c.reconnect_min = 20ms;
    c.reconnect_max = reconnect_max;
    return c;
}

redis::shared_options closed_options()
{
    redis::shared_options o;
    o.on_failure = redis::failure_policy::fail_closed;
    o.probe_interval = probe_interval;
    return o;
}

std::int64_t ms(steady::duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); }

// A server, a proxy in front of it, and a connection through the proxy.
struct rig {
    redis_server server;
    fault_proxy proxy{server.port()};
    asio::io_context io;
    redis::connection conn;

    explicit rig(std::vector<std::string> server_args = {}, redis::connection_config cfg = {})
        : server(std::move(server_args)), conn(io, with_proxy(cfg))
    {
        REQUIRE(sluice_test::wait_connected(io, conn));
    }

    redis::connection_config with_proxy(redis::connection_config c) const
    {
        c.host = "127.0.0.1";
        c.port = proxy.port();
        return c;
    }

    // Runs the client until pred() holds; false after `limit`.
    template <class Pred>
    bool until(Pred pred, std::chrono::milliseconds limit = 5000ms)
    {
        return run_until(io, pred, limit);
    }
};

// Tries started together, all run to their end.
struct tally {
    int admitted = 0, refused = 0, failed = 0;
    bool sluice_errors = true;        // every error of sluice's category
    error_code first_error;
    steady::duration longest{};       // from the start to the last completion
};

template <class Limiter>
tally tries(rig& r, Limiter& l, const std::string& key, int n)
{
    std::vector<std::shared_ptr<try_result>> rs;
    std::vector<steady::time_point> done(static_cast<std::size_t>(n));
    auto start = steady::now();
    for (int i = 0; i < n; ++i) {
        rs.push_back(std::make_shared<try_result>());
        l.async_try_acquire(key, 1, [res = rs.back(), at = &done[static_cast<std::size_t>(i)]](error_code ec, sluice::decision d) {
            try_recorder(res)(ec, d);
            *at = steady::now();
        });
    }
    REQUIRE(r.until([&] {
        for (auto& x : rs)
            if (x->calls == 0) return false;
        return true;
    }, 10000ms));
    tally t;
    for (int i = 0; i < n; ++i) {
        auto& x = *rs[static_cast<std::size_t>(i)];
        CHECK(x.calls == 1);
        t.longest = std::max(t.longest, done[static_cast<std::size_t>(i)] - start);
        if (x.ec) {
            ++t.failed;
            if (!t.first_error) t.first_error = x.ec;
            if (x.ec.category() != sluice::error_category()) t.sluice_errors = false;
        } else if (x.d.admitted) {
            ++t.admitted;
        } else {
            ++t.refused;
        }
    }
    return t;
}

// One async_acquire, run to its end: its error and how long it took.
struct timed {
    error_code ec;
    steady::duration took{};
};

template <class Limiter>
std::vector<timed> acquires(rig& r, Limiter& l, const std::string& key, std::vector<std::chrono::milliseconds> waits)
{
    std::vector<std::shared_ptr<acq_result>> rs;
    auto start = steady::now();
    for (auto w : waits) {
        rs.push_back(std::make_shared<acq_result>());
        l.async_acquire(key, 1, w, acq_recorder(rs.back()));
    }
    REQUIRE(r.until([&] {
        for (auto& x : rs)
            if (x->calls == 0) return false;
        return true;
    }, 10000ms));
    std::vector<timed> out;
    for (auto& x : rs) out.push_back({x->ec, x->at - start});
    return out;
}

// The time from now until a try gets an answer from Redis again (one try every 10 ms).
template <class Limiter>
steady::duration recover(rig& r, Limiter& l, const std::string& key, const char* fault)
{
    auto start = steady::now();
    for (;;) {
        auto t = sluice_test::try_now(r.io, l, key, 1);
        if (!t->ec && !l.stats().backend.degraded) break;
        REQUIRE(steady::now() - start < 10s);
        run_for(r.io, 10ms);
    }
    auto took = steady::now() - start;
    std::printf("faults: %s: recovered in %lld ms\n", fault, static_cast<long long>(ms(took)));
    std::fflush(stdout);
    return took;
}

// The token bucket's own bound over a run of `elapsed` from a full bucket: burst plus one
// permit per interval (plus one for the rounding at both ends).
std::uint64_t bucket_bound(std::uint64_t burst, std::uint64_t per_second, steady::duration elapsed)
{
    return burst + static_cast<std::uint64_t>(ms(elapsed)) * per_second / 1000 + 1;
}

std::uint64_t admitted(const sluice::limiter_stats& s) { return s.admitted + s.try_admitted; }

// A rate that refills nothing within a test: the permits Redis counts as taken are then
// the burst less what is left, exact to the permit.
const sluice::rate hourly = sluice::rate::every(std::chrono::hours(1));

// The permits of `key` that Redis counts as taken, read with one try more (counted there
// when admitted, as in the limiter's stats()): a bucket of `burst` at the hourly rate, or
// a window of that limit an hour long (the remaining of either is what is left).
template <class Limiter>
std::uint64_t taken_in_redis(rig& r, Limiter& l, const std::string& key, std::uint64_t burst)
{
    auto t = sluice_test::try_now(r.io, l, key, 1);
    REQUIRE_FALSE(t->ec);
    REQUIRE(t->d.remaining <= burst);
    return burst - t->d.remaining;
}

// The lines of a RESP chunk ("\r\n" apart, the last one empty), and back.
std::vector<std::string> resp_lines(const std::string& b)
{
    std::vector<std::string> out;
    std::size_t from = 0;
    for (auto at = b.find("\r\n"); at != std::string::npos; at = b.find("\r\n", from)) {
        out.push_back(b.substr(from, at - from));
        from = at + 2;
    }
    out.push_back(b.substr(from));
    return out;
}

std::string resp_join(const std::vector<std::string>& lines)
{
    std::string b;
    for (std::size_t i = 0; i < lines.size(); ++i) b += lines[i] + (i + 1 < lines.size() ? "\r\n" : "");
    return b;
}

// An edit of the next reply: its integer element i (0-based, of the first array in the
// chunk) becomes `value`, the RESP still well formed.
fault_proxy::edit set_element(std::size_t i, std::string value)
{
    // Runs on the proxy's thread: a chunk of another shape is left as it is (and the
    // test's checks on the outcome fail).
    return [i, value](std::string& b) {
        auto lines = resp_lines(b);
        if (lines.size() <= i + 1 || !lines[i + 1].starts_with(":")) return;
        lines[i + 1] = ":" + value;
        b = resp_join(lines);
    };
}


using window = redis::sliding_window<redis::connection>;
} // namespace

TEST_SUITE_BEGIN("faults");

TEST_CASE("faults: black hole (half-open): the command timeout fires, the link is replaced, then it recovers" * doctest::timeout(60))
{
    rig r({}, fast({}));
    bucket tb(r.conn, hourly, 5, closed_options());
    CHECK(tries(r, tb, "bh", 1).admitted == 1);
    auto before = tb.stats();
    auto pbefore = r.proxy.stats();

    r.proxy.set_black_hole(true);
    // Requests in flight on the silent link: a max_wait below the command timeout, one
    // above it; and tries. Each ends with backend_unavailable (fail_closed) by
    // max(max_wait, command_timeout).
    auto a = acquires(r, tb, "bh", {50ms, 400ms});
    for (auto& x : a) CHECK(x.ec == sluice::error::backend_unavailable);
    CHECK(a[0].took >= command_timeout - 5ms);   // not before the timeout: the link could have answered
    CHECK(a[0].took <= command_timeout + slack);
    CHECK(a[1].took <= 400ms + slack);
    auto t = tries(r, tb, "bh", 3);
    CHECK(t.failed == 3);
    CHECK(t.first_error == sluice::error::backend_unavailable);
    CHECK(t.sluice_errors);
    CHECK(t.longest <= command_timeout + slack);

    // Counted, and the link replaced: new connections (each into the hole, each timed out
    // by connect_timeout), the client not connected meanwhile.
    auto during = tb.stats();
    CHECK(during.backend.errors >= before.backend.errors + 2);
    CHECK(during.refused >= before.refused + 2);
    CHECK(during.backend.degraded);
    CHECK(during.backend.links_lost == before.backend.links_lost + 1);   // the silent link, reset once
    CHECK(admitted(during) == admitted(before));   // fail_closed: nothing while Redis is away
    CHECK(r.until([&] { return r.proxy.stats().connections >= pbefore.connections + 2; }, 5000ms));
    CHECK_FALSE(r.conn.connected());
    CHECK(r.proxy.stats().black_holed >= 3);

    r.proxy.heal();
    auto took = recover(r, tb, "bh", "black hole");
    CHECK(took <= recovery_bound + slack);
    CHECK(r.conn.connected());
    // fail_closed admits nothing while Redis is away, and nothing reached Redis through
    // the hole: the permit before it and the recovering try's, exactly what Redis counts.
    CHECK(admitted(tb.stats()) == 2);
    const auto in_redis = taken_in_redis(r, tb, "bh", 5);
    CHECK(admitted(tb.stats()) == in_redis);
}

TEST_CASE("faults: black hole under a sliding window waiting to ask again: bounded by max_wait + command_timeout" * doctest::timeout(60))
{
    rig r({}, fast({}));
    redis::sliding_window<redis::connection> sw(r.conn, 1, 200ms, closed_options());
    CHECK(tries(r, sw, "sw", 1).admitted == 1);
    // Refused at first (the window is full for ~200 ms), it sleeps and asks again: into
    // the hole. That ask ends at the command timeout, with what is left of max_wait for
    // the failure policy (fail_closed: backend_unavailable).
    auto rs = std::make_shared<acq_result>();
    auto start = steady::now();
    sw.async_acquire("sw", 1, 400ms, acq_recorder(rs));
    run_for(r.io, 50ms);
    REQUIRE(rs->calls == 0);
    r.proxy.set_black_hole(true);
    REQUIRE(r.until([&] { return rs->calls == 1; }));
    CHECK(rs->ec == sluice::error::backend_unavailable);
    // Not before the re-check's command timeout: the re-check comes when the first
    // permit leaves the window (200 ms after it was granted, a little before `start`),
    // after the hole opened (50 ms).
    CHECK(rs->at - start >= 50ms + command_timeout - 5ms);
    CHECK(rs->at - start <= 400ms + command_timeout + slack);
    CHECK(sw.stats().backend.errors >= 1);
    CHECK(sw.stats().refused == 1);
    r.proxy.heal();
    CHECK(recover(r, sw, "sw", "black hole, sliding window") <= recovery_bound + slack);
}

TEST_CASE("faults: black hole with the local fallback: waits bounded by max_wait, the local share admitted" * doctest::timeout(60))
{
    rig r({}, fast({}));
    redis::shared_options o;
    o.on_failure = redis::failure_policy::local_fallback;
    o.expected_nodes = 2;
    o.probe_interval = probe_interval;
    // 10/s, burst 4: the local share is 5/s, burst 2.
    bucket tb(r.conn, sluice::rate::per_second(10), 4, o);
    CHECK(tries(r, tb, "lf", 1).admitted == 1);
    r.proxy.set_black_hole(true);
    auto fault_start = steady::now();
    // Three requests in the first round trip: after the command timeout, the fallback has
    // its burst (2) for two of them; the third would wait 200 ms for the next local permit,
    // more than what is left of its 250 ms max_wait: timed_out, by 250 ms (not 150 + 250).
    auto a = acquires(r, tb, "lf", {250ms, 250ms, 250ms});
    int ok = 0, late = 0;
    for (auto& x : a) {
        CHECK((!x.ec || x.ec == sluice::error::timed_out));
        CHECK(x.took <= 250ms + slack);
        ok += !x.ec;
        late += x.ec == sluice::error::timed_out;
    }
    CHECK(ok == 2);
    CHECK(late == 1);
    // While degraded the fallback answers at once; its admissions stay within the local
    // share: burst 2 + 5/s.
    run_for(r.io, 100ms);
    auto t = tries(r, tb, "lf", 10);
    auto in_fault = steady::now() - fault_start;
    CHECK(t.failed <= 1);   // a probe sent into the hole
    auto s = tb.stats();
    CHECK(s.backend.fallback_decisions >= 3);
    CHECK(s.backend.degraded);
    CHECK(static_cast<std::uint64_t>(ok + t.admitted) <= bucket_bound(2, 5, in_fault));

    r.proxy.heal();
    CHECK(recover(r, tb, "lf", "black hole, local fallback") <= recovery_bound + slack);
}

TEST_CASE("faults: reset mid-stream: commands in flight fail at once, the client reconnects by itself" * doctest::timeout(60))
{
    // A long command timeout: a failure well before it is the reset's, not the timeout's.
    auto cfg = fast({});
    cfg.command_timeout = 3000ms;
    rig r({}, cfg);
    bucket tb(r.conn, sluice::rate::per_second(1000), 1000, closed_options());
    CHECK(tries(r, tb, "rs", 1).admitted == 1);
    auto before = tb.stats();

    // Replies held 300 ms on the way: the tries are in flight when the reset comes.
    r.proxy.set_latency(300ms);
    std::vector<std::shared_ptr<try_result>> rs;
    for (int i = 0; i < 10; ++i) {
        rs.push_back(std::make_shared<try_result>());
        tb.async_try_acquire("rs", 1, try_recorder(rs.back()));
    }
    run_for(r.io, 50ms);
    auto reset_at = steady::now();
    r.proxy.reset_all();
    REQUIRE(r.until([&] {
        for (auto& x : rs)
            if (!x->calls) return false;
        return true;
    }));
    CHECK(steady::now() - reset_at <= slack);
    for (auto& x : rs) CHECK(x->ec == sluice::error::backend_unavailable);
    CHECK(r.proxy.stats().resets >= 1);
    auto s = tb.stats();
    CHECK(s.backend.errors >= before.backend.errors + 10);
    CHECK(s.backend.degraded);

    r.proxy.heal();
    CHECK(recover(r, tb, "rs", "reset mid-stream") <= recovery_bound + slack);

    // An idle link reset: noticed without a command (a new connection comes well before
    // the 3 s command timeout could have found it).
    auto idle = r.proxy.stats();
    r.proxy.reset_all();
    CHECK(r.until([&] { return r.proxy.stats().connections >= idle.connections + 1; }, 1000ms));

    // Reset on every connection for a while: no link at all, requests fail at once.
    r.proxy.set_reset(true);
    CHECK(r.until([&] { return !r.conn.connected(); }));
    auto t = tries(r, tb, "rs", 5);
    CHECK(t.failed == 5);
    CHECK(t.first_error == sluice::error::backend_unavailable);
    CHECK(t.longest <= slack);
    CHECK(r.until([&] { return r.proxy.stats().resets >= 3; }));
    r.proxy.heal();
    CHECK(recover(r, tb, "rs", "reset on every connect") <= recovery_bound + slack);
}

TEST_CASE("faults: a link's socket is close-on-exec: a child process cannot keep a reset link open" * doctest::timeout(60))
{
    // Found through the suite: a redis-server started after a connection held a copy of
    // its socket, and closing it sent nothing. Any child of a program does the same.
    rig r({}, fast({}));
    int found = 0;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
        const int fd = std::stoi(e.path().filename().string());
        sockaddr_in peer{};
        socklen_t len = sizeof peer;
        if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0 || peer.sin_family != AF_INET) continue;
        if (ntohs(peer.sin_port) != r.proxy.port()) continue;   // the client's end of the link
        ++found;
        CHECK((::fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
    }
    // The client's end of the link: hiredis' descriptor and the duplicate Asio waits on.
    CHECK(found == 2);
}

TEST_CASE("faults: latency and jitter: admissions exact, waits bounded" * doctest::timeout(60))
{
    auto cfg = fast({});
    cfg.command_timeout = 1000ms;
    rig r({}, cfg);
    r.proxy.set_latency(20ms, 20ms);   // 20-40 ms each way, in order
    bucket tb(r.conn, sluice::rate::per_second(10), 5, closed_options());

    // The burst, exactly: latency changes when, not what.
    auto t = tries(r, tb, "lat", 12);
    CHECK(t.admitted == 5);
    CHECK(t.refused == 7);
    CHECK(t.failed == 0);
    CHECK(t.longest <= 2 * 40ms + slack);

    // A request whose slot is 100 ms ahead: granted within its max_wait plus one round
    // trip; one that cannot make it fails fast after a round trip.
    auto a = acquires(r, tb, "lat", {300ms});
    CHECK_FALSE(a[0].ec);
    CHECK(a[0].took <= 300ms + 2 * 40ms + slack);
    auto b = acquires(r, tb, "lat", {1ms});
    CHECK(b[0].ec == sluice::error::timed_out);
    CHECK(b[0].took <= 2 * 40ms + slack);
    auto s = tb.stats();
    CHECK(s.backend.errors == 0);
    CHECK_FALSE(s.backend.degraded);
    CHECK(s.backend.last_round_trip >= 40ms);
    CHECK(s.backend.last_round_trip <= 80ms + slack);
}

TEST_CASE("faults: drop (bytes discarded, connection kept): timed out like a black hole, then recovers" * doctest::timeout(60))
{
    rig r({}, fast({}));
    bucket tb(r.conn, hourly, 5, closed_options());
    CHECK(tries(r, tb, "dr", 1).admitted == 1);
    auto before = tb.stats();
    auto pbefore = r.proxy.stats();
    r.proxy.set_drop(true);
    auto t = tries(r, tb, "dr", 3);
    CHECK(t.failed == 3);
    CHECK(t.first_error == sluice::error::backend_unavailable);
    CHECK(t.longest <= command_timeout + slack);
    CHECK(r.proxy.stats().dropped > pbefore.dropped);
    CHECK(tb.stats().backend.errors >= before.backend.errors + 3);
    // The link is replaced (and the new ones are dropped too).
    CHECK(r.until([&] { return r.proxy.stats().connections >= pbefore.connections + 2; }));
    r.proxy.heal();
    CHECK(recover(r, tb, "dr", "drop") <= recovery_bound + slack);
    // The dropped requests never reached Redis, and none was admitted here.
    CHECK(admitted(tb.stats()) == 2);
    const auto in_redis = taken_in_redis(r, tb, "dr", 5);
    CHECK(admitted(tb.stats()) == in_redis);
}

TEST_CASE("faults: connections refused, then healed" * doctest::timeout(60))
{
    auto cfg = fast({});
    cfg.command_timeout = 3000ms;
    rig r({}, cfg);
    bucket tb(r.conn, sluice::rate::per_second(20), 5, closed_options());
    CHECK(tries(r, tb, "rf", 1).admitted == 1);
    auto pbefore = r.proxy.stats();
    r.proxy.set_refuse(true);
    r.proxy.reset_all();
    CHECK(r.until([&] { return !r.conn.connected(); }));
    // No link: every request fails at once (not after the command timeout), counted.
    auto t = tries(r, tb, "rf", 5);
    CHECK(t.failed == 5);
    CHECK(t.first_error == sluice::error::backend_unavailable);
    CHECK(t.longest <= slack);
    auto a = acquires(r, tb, "rf", {2000ms});
    CHECK(a[0].ec == sluice::error::backend_unavailable);
    CHECK(a[0].took <= slack);
    CHECK(tb.stats().refused >= 1);
    CHECK(tb.stats().backend.degraded);
    // Nothing was accepted meanwhile.
    run_for(r.io, 300ms);
    CHECK(r.proxy.stats().connections == pbefore.connections);
    r.proxy.heal();
    // The client was backing off between refused connects: recovery within the backoff.
    CHECK(recover(r, tb, "rf", "refused connections") <= recovery_bound + slack);
    CHECK(r.proxy.stats().connections == pbefore.connections + 1);
}

TEST_CASE("faults: bandwidth: a slow link times out what it cannot carry in time, admissions bounded" * doctest::timeout(60))
{
    auto cfg = fast({});
    cfg.command_timeout = 300ms;
    rig r({}, cfg);
    bucket tb(r.conn, hourly, 10, closed_options());
    // About 200 bytes a script call: 2 kB/s carries ten a second; 40 at once cannot all
    // make it within 300 ms.
    r.proxy.set_bandwidth(2000);
    auto t = tries(r, tb, "bw", 40);
    CHECK(t.failed > 0);
    CHECK(t.sluice_errors);
    CHECK(t.longest <= cfg.command_timeout + slack);
    CHECK(t.admitted + t.refused + t.failed == 40);
    CHECK(tb.stats().backend.errors >= static_cast<std::uint64_t>(t.failed));
    r.proxy.heal();
    CHECK(recover(r, tb, "bw", "bandwidth") <= recovery_bound + slack);
    // A request that timed out may have been granted in Redis (its reply came too late):
    // a permit lost, never one admitted twice. Redis counts every admission here, and
    // beyond them at most the requests that failed (each a backend error); the burst
    // bounds it all.
    const auto here = admitted(tb.stats());
    const auto in_redis = taken_in_redis(r, tb, "bw", 10);
    CHECK(in_redis >= admitted(tb.stats()));
    CHECK(in_redis <= here + tb.stats().backend.errors + 1);   // + the last try's
    CHECK(in_redis <= 10);
}

TEST_CASE("faults: Redis restarted without persistence: at most one extra burst per restart" * doctest::timeout(60))
{
    rig r({}, fast({}));
    // Nothing refills during the run: the bound is the bursts, exactly.
    bucket tb(r.conn, hourly, 5, closed_options());
    auto t = tries(r, tb, "rr", 8);
    CHECK(t.admitted == 5);
    auto errors_before = tb.stats().backend.errors;
    r.server.restart();   // same port, empty data set, empty script cache
    auto took = recover(r, tb, "rr", "restart");
    CHECK(took <= recovery_bound + slack);
    // The state was lost: the bucket is full again (the recovering try took one permit).
    auto after = tries(r, tb, "rr", 8);
    CHECK(after.failed == 0);   // NOSCRIPT on the new server is reloaded, not reported
    CHECK(after.admitted == 4);   // the extra burst happened, and no more than it
    CHECK(admitted(tb.stats()) == 10);
    // The failures counted: the link's, then one per probe while it was down (the other
    // requests went to the failure policy without a command), not one per request.
    CHECK(tb.stats().backend.errors - errors_before <= 2 + static_cast<std::uint64_t>(took / probe_interval));
}

TEST_CASE("faults: failover to a replica with a stale state: at most what the old master granted after the replica's last update" * doctest::timeout(60))
{
    // The master syncs its replica at once (no diskless-sync delay).
    rig r({"--repl-diskless-sync-delay", "0"}, fast({}));
    redis_server replica;
    REQUIRE(replica.command({"REPLICAOF", "127.0.0.1", std::to_string(r.server.port())}).str == "OK");
    bucket tb(r.conn, hourly, 10, closed_options());
    CHECK(tries(r, tb, "fo", 4).admitted == 4);
    const auto key = tb.redis_key("fo");
    REQUIRE(sluice_test::wait_until(
        [&] { return replica.command({"GET", key}).str == r.server.command({"GET", key}).str; }, 10000ms));
    // The replica stops following (a partition); what the master grants from now on the
    // replica never sees: 4 more permits.
    REQUIRE(replica.command({"REPLICAOF", "NO", "ONE"}).str == "OK");
    const auto unseen = tries(r, tb, "fo", 4).admitted;
    CHECK(unseen == 4);
    // The failover: the address now leads to the promoted replica, the old links break.
    r.proxy.set_upstream(replica.port());
    r.proxy.reset_all();
    CHECK(recover(r, tb, "fo", "failover to a stale replica") <= recovery_bound + slack);
    // The promoted replica remembers 4 permits of the 8: the 4 it never saw are granted
    // again, and no more (nothing refills during the run): the burst plus those, exactly.
    auto after = tries(r, tb, "fo", 10);
    CHECK(after.failed == 0);
    CHECK(admitted(tb.stats()) == 10 + static_cast<std::uint64_t>(unseen));
}

TEST_CASE("faults: SCRIPT FLUSH: reloaded on NOSCRIPT, no failure reaches the user, state kept" * doctest::timeout(60))
{
    rig r({}, fast({}));
    bucket tb(r.conn, sluice::rate::per_second(1), 15, closed_options());
    auto t1 = tries(r, tb, "sf", 10);
    CHECK(t1.admitted == 10);
    CHECK(r.server.command({"SCRIPT", "FLUSH"}).str == "OK");
    auto t2 = tries(r, tb, "sf", 10);
    CHECK(t2.failed == 0);
    CHECK(t2.admitted == 5);   // the same bucket: nothing lost, nothing extra
    CHECK(t2.refused == 5);
    auto s = tb.stats();
    CHECK(s.backend.errors == 0);
    CHECK_FALSE(s.backend.degraded);
}

TEST_CASE("faults: FLUSHALL: the state is lost, at most one extra burst per flush" * doctest::timeout(60))
{
    rig r({}, fast({}));
    bucket tb(r.conn, hourly, 5, closed_options());
    CHECK(tries(r, tb, "fa", 8).admitted == 5);
    CHECK(r.server.command({"FLUSHALL"}).str == "OK");
    auto t = tries(r, tb, "fa", 8);
    CHECK(t.failed == 0);
    CHECK(t.admitted == 5);   // a full bucket again: one burst, exactly
    CHECK(admitted(tb.stats()) == 10);
    CHECK(tb.stats().backend.errors == 0);
}

TEST_CASE("faults: maxmemory eviction of the limiter's keys: at most one extra burst per eviction" * doctest::timeout(60))
{
    rig r({}, fast({}));
    bucket tb(r.conn, hourly, 5, closed_options());
    CHECK(tries(r, tb, "ev", 8).admitted == 5);
    const auto key = tb.redis_key("ev");
    REQUIRE(r.server.command({"EXISTS", key}).integer == 1);
    auto info = r.server.command({"INFO", "memory"}).str;
    auto pos = info.find("used_memory:");
    REQUIRE(pos != std::string::npos);
    const long long base = std::stoll(info.substr(pos + 12));
    REQUIRE(r.server.command({"CONFIG", "SET", "maxmemory-policy", "allkeys-lru"}).str == "OK");
    REQUIRE(r.server.command({"CONFIG", "SET", "maxmemory", std::to_string(base + 512 * 1024)}).str == "OK");
    // Fill with newer keys until the limiter's (the least recently used) is evicted.
    const std::string value(16 * 1024, 'x');
    int i = 0;
    while (r.server.command({"EXISTS", key}).integer == 1 && i < 2000)
        r.server.command({"SET", "junk:" + std::to_string(i++), value});
    REQUIRE(r.server.command({"EXISTS", key}).integer == 0);
    auto stats = r.server.command({"INFO", "stats"}).str;
    CHECK(stats.find("evicted_keys:0\r") == std::string::npos);
    // Evicted: a full bucket again, as after FLUSHALL, as a user sees it: the same 8 tries
    // now admit a whole burst more (nothing refills at this rate), and no more; no error.
    auto t = tries(r, tb, "ev", 8);
    CHECK(t.failed == 0);
    CHECK(t.admitted == 5);
    CHECK(t.refused == 3);
    CHECK(admitted(tb.stats()) == 10);
    // The new key holds exactly the second burst: Redis agrees.
    CHECK(r.server.command({"EXISTS", key}).integer == 1);
    CHECK(taken_in_redis(r, tb, "ev", 5) == 5);
    CHECK(tb.stats().backend.errors == 0);
}

TEST_CASE("faults: OOM (maxmemory, noeviction): a clear backend_error, counted, nothing admitted, recovered once memory frees" * doctest::timeout(60))
{
    rig r({}, fast({}));
    // fail_open: Redis answers (it refuses to write), so the failure policy, which would
    // admit, is not asked. Nothing refills during the run.
    auto o = closed_options();
    o.on_failure = redis::failure_policy::fail_open;
    bucket tb(r.conn, hourly, 5, o);
    CHECK(tries(r, tb, "oom", 1).admitted == 1);
    auto before = tb.stats();
    REQUIRE(r.server.command({"CONFIG", "SET", "maxmemory-policy", "noeviction"}).str == "OK");
    REQUIRE(r.server.command({"CONFIG", "SET", "maxmemory", "1"}).str == "OK");
    // Every decision writes the key: refused by the server, nothing consumed.
    auto t = tries(r, tb, "oom", 3);
    CHECK(t.failed == 3);
    CHECK(t.first_error == sluice::error::backend_error);
    auto a = acquires(r, tb, "oom", {100ms});
    CHECK(a[0].ec == sluice::error::backend_error);
    CHECK(a[0].took <= command_timeout + slack);
    auto s = tb.stats();
    CHECK(s.backend.errors == before.backend.errors + 4);
    CHECK(s.refused == before.refused + 1);
    CHECK_FALSE(s.backend.degraded);   // Redis answers: not the failure policy's case
    CHECK(r.conn.connected());
    REQUIRE(r.server.command({"CONFIG", "SET", "maxmemory", "0"}).str == "OK");
    CHECK(recover(r, tb, "oom", "OOM") <= slack);
    // Admitted: the permit before and the recovering try's; what Redis refused consumed
    // nothing there either.
    CHECK(admitted(tb.stats()) == 2);
    CHECK(s.backend.fallback_decisions == 0);
    const auto in_redis = taken_in_redis(r, tb, "oom", 5);
    CHECK(admitted(tb.stats()) == in_redis);
}

TEST_CASE("faults: BUSY (a long script on the server): the failure policy decides, then it recovers" * doctest::timeout(60))
{
    rig r({"--busy-reply-threshold", "50"}, fast({}));
    bucket tb(r.conn, hourly, 5, closed_options());
    CHECK(tries(r, tb, "busy", 1).admitted == 1);
    auto before = tb.stats();
    // A side connection runs a script that never ends (until SCRIPT KILL, also when a
    // REQUIRE below throws).
    struct busy_script {
        std::uint16_t port;
        std::thread side{[p = port] { sluice_test::sync_command(p, {"EVAL", "while true do end", "0"}, 20000ms); }};
        ~busy_script()
        {
            if (side.joinable()) {
                sluice_test::sync_command(port, {"SCRIPT", "KILL"});
                side.join();
            }
        }
    } busy{r.server.port()};
    REQUIRE(sluice_test::wait_until(
        [&] { return r.server.command({"PING"}).str.starts_with("BUSY"); }, 5000ms, 10ms));
    // The server answers BUSY (it ran nothing): Redis cannot decide now, the failure
    // policy does (fail_closed: backend_unavailable), within the command timeout.
    auto t = tries(r, tb, "busy", 3);
    CHECK(t.failed == 3);
    CHECK(t.first_error == sluice::error::backend_unavailable);
    CHECK(t.longest <= command_timeout + slack);
    auto a = acquires(r, tb, "busy", {100ms});
    CHECK(a[0].ec == sluice::error::backend_unavailable);
    CHECK(a[0].took <= command_timeout + slack);
    auto s = tb.stats();
    CHECK(s.backend.errors >= before.backend.errors + 1);
    CHECK(s.backend.degraded);
    CHECK(r.server.command({"SCRIPT", "KILL"}).str == "OK");
    busy.side.join();
    CHECK(recover(r, tb, "busy", "BUSY") <= recovery_bound + slack);
    // BUSY ran nothing: the permit before and the recovering try's, as Redis counts them.
    CHECK(admitted(tb.stats()) == 2);
    const auto in_redis = taken_in_redis(r, tb, "busy", 5);
    CHECK(admitted(tb.stats()) == in_redis);
}

TEST_CASE("faults: a reply cut mid-way, then the link closed: backend_unavailable at once, its permits lost, never admitted" * doctest::timeout(60))
{
    // A long command timeout: a failure well before it is the cut's.
    auto cfg = fast({});
    cfg.command_timeout = 3000ms;
    rig r({}, cfg);
    // A second limiter on the same keys, without leases: what Redis counts, read apart.
    bucket probe(r.conn, hourly, 10, closed_options());
    SUBCASE("token bucket: a try, then a waiter's reservation")
    {
        bucket tb(r.conn, hourly, 10, closed_options());
        REQUIRE(tries(r, tb, "cut", 1).admitted == 1);   // the script loaded, the link idle
        r.proxy.cut_reply(30);
        auto t = tries(r, tb, "cut", 1);
        CHECK(t.failed == 1);
        CHECK(t.first_error == sluice::error::backend_unavailable);
        CHECK(t.longest <= slack);
        recover(r, tb, "cut", "reply cut, try");
        r.proxy.cut_reply(30);
        auto a = acquires(r, tb, "cut", {2000ms});
        CHECK(a[0].ec == sluice::error::backend_unavailable);
        CHECK(a[0].took <= slack);
        recover(r, tb, "cut", "reply cut, reservation");
        CHECK(r.proxy.stats().tampered == 2);
        // Both cut requests ran in Redis: 2 permits consumed there, admitted nowhere.
        const auto in_redis = taken_in_redis(r, probe, "cut", 10);
        CHECK(in_redis == admitted(tb.stats()) + admitted(probe.stats()) + 2);
    }
    SUBCASE("token bucket with leases: the run in the cut reply is lost, the book not left waiting")
    {
        auto o = closed_options();
        o.lease_size = 4;
        o.lease_ttl = 5s;   // no slot expires during the test
        bucket tb(r.conn, hourly, 10, o);
        REQUIRE(tries(r, probe, "cutl", 1).admitted == 1);   // the script loaded by the probe
        r.proxy.cut_reply(30);
        auto t = tries(r, tb, "cutl", 1);
        CHECK(t.failed == 1);
        CHECK(t.first_error == sluice::error::backend_unavailable);
        recover(r, tb, "cutl", "reply cut, lease");
        run_for(r.io, 100ms);   // a reservation in the background, if any, is in
        // The cut run (one slot: the first run's length) is lost; the slots held in the
        // book are Redis's too.
        const auto held = tb.leased();
        const auto in_redis = taken_in_redis(r, probe, "cutl", 10);
        CHECK(in_redis == admitted(tb.stats()) + admitted(probe.stats()) + held + 1);
    }
    SUBCASE("sliding window: a batch's reply cut: every request of the batch fails, none admitted")
    {
        window w(r.conn, 10, std::chrono::hours(1), closed_options());
        REQUIRE(tries(r, w, "cutw", 1).admitted == 1);
        // The first try goes alone, the five others wait for its reply and go as one call:
        // its reply is the second chunk.
        r.proxy.cut_reply(40, 1);
        auto t = tries(r, w, "cutw", 6);
        CHECK(t.admitted == 1);
        CHECK(t.failed == 5);
        CHECK(t.first_error == sluice::error::backend_unavailable);
        CHECK(t.longest <= slack);
        recover(r, w, "cutw", "reply cut, window batch");
        window wp(r.conn, 10, std::chrono::hours(1), closed_options());
        const auto in_redis = taken_in_redis(r, wp, "cutw", 10);
        CHECK(in_redis == admitted(w.stats()) + admitted(wp.stats()) + 5);
    }
}

TEST_CASE("faults: a request half-delivered, then the link closed: it never ran, nothing consumed" * doctest::timeout(60))
{
    auto cfg = fast({});
    cfg.command_timeout = 3000ms;
    rig r({}, cfg);
    bucket tb(r.conn, hourly, 10, closed_options());
    REQUIRE(tries(r, tb, "half", 1).admitted == 1);
    r.proxy.cut_request(40);   // of an EVALSHA of about 150 bytes
    auto t = tries(r, tb, "half", 1);
    CHECK(t.failed == 1);
    CHECK(t.first_error == sluice::error::backend_unavailable);
    CHECK(t.longest <= slack);
    recover(r, tb, "half", "request half-delivered, try");
    r.proxy.cut_request(40);
    auto a = acquires(r, tb, "half", {2000ms});
    CHECK(a[0].ec == sluice::error::backend_unavailable);
    CHECK(a[0].took <= slack);
    recover(r, tb, "half", "request half-delivered, reservation");
    CHECK(r.proxy.stats().tampered == 2);
    // Redis counts exactly what was admitted here: the halves ran nothing.
    const auto in_redis = taken_in_redis(r, tb, "half", 10);
    CHECK(admitted(tb.stats()) == in_redis);
    CHECK(in_redis == 4);
}

TEST_CASE("faults: corrupted framing: a malformed reply is an error of sluice's category, the link replaced, never a crash" * doctest::timeout(60))
{
    rig r({}, fast({}));
    bucket tb(r.conn, hourly, 10, closed_options());
    REQUIRE(tries(r, tb, "fr", 1).admitted == 1);
    auto lost_before = r.conn.stats().links_lost;
    int lost = 0;   // requests that ran in Redis and whose reply was not believed
    SUBCASE("a type byte no RESP has: a protocol error, the link dropped")
    {
        r.proxy.edit_reply([](std::string& b) { b[0] = '?'; });
        auto t = tries(r, tb, "fr", 1);
        CHECK(t.failed == 1);
        CHECK(t.first_error == sluice::error::backend_unavailable);
        lost = 1;
    }
    SUBCASE("an array declared one short: the request's reply is not believed, the stray element drops the link")
    {
        // "*9" becomes "*8": eight integers for the request, then a ninth nobody asked
        // for (hiredis 0.14 would abort() on it; it is refused, the link dropped).
        r.proxy.edit_reply([](std::string& b) { b.replace(0, 2, "*8"); });
        auto t = tries(r, tb, "fr", 1);
        CHECK(t.failed == 1);
        CHECK(t.first_error == sluice::error::protocol_error);
        CHECK(t.sluice_errors);
        CHECK(r.until([&] { return r.conn.stats().links_lost > lost_before; }));
        lost = 1;
    }
    SUBCASE("an array declared one long: it waits for an element that never comes, until the command timeout")
    {
        r.proxy.edit_reply([](std::string& b) { b.replace(0, 2, "*10"); });
        auto t = tries(r, tb, "fr", 1);
        CHECK(t.failed == 1);
        CHECK(t.first_error == sluice::error::backend_unavailable);
        CHECK(t.longest >= command_timeout - 5ms);
        CHECK(t.longest <= command_timeout + slack);
        lost = 1;
    }
    SUBCASE("a length cut short inside an integer: garbage, the link dropped")
    {
        r.proxy.edit_reply([](std::string& b) { b.replace(b.find("\r\n:") + 2, 1, "$"); });
        auto t = tries(r, tb, "fr", 1);
        CHECK(t.failed == 1);
        CHECK(t.sluice_errors);
        lost = 1;
    }
    CHECK(r.proxy.stats().tampered == 1);
    recover(r, tb, "fr", "corrupted framing");
    const auto in_redis = taken_in_redis(r, tb, "fr", 10);
    CHECK(in_redis == admitted(tb.stats()) + static_cast<std::uint64_t>(lost));
}

TEST_CASE("faults: corrupted values in a well-formed reply are not believed: protocol_error, never an admission beyond the quota" * doctest::timeout(60))
{
    auto cfg = fast({});
    cfg.command_timeout = 1000ms;
    rig r({}, cfg);
    // Redis's count is read by a limiter the edits never reach.
    SUBCASE("token bucket: a refusal turned into a grant")
    {
        bucket tb(r.conn, hourly, 2, closed_options());
        REQUIRE(tries(r, tb, "v1", 2).admitted == 2);   // empty now
        r.proxy.edit_reply(set_element(0, "1"));
        auto t = tries(r, tb, "v1", 1);
        CHECK(t.failed == 1);
        CHECK(t.first_error == sluice::error::protocol_error);
        CHECK(admitted(tb.stats()) == 2);
        CHECK(taken_in_redis(r, tb, "v1", 2) == 2);
    }
    SUBCASE("token bucket: a grant claiming more permits than asked (taken), a huge remaining, a negative wait")
    {
        bucket tb(r.conn, hourly, 10, closed_options());
        REQUIRE(tries(r, tb, "v2", 1).admitted == 1);
        int lost = 0;
        for (auto [i, v] : {std::pair<std::size_t, const char*>{6, "2"}, {2, "999999999"}, {1, "-5"}, {3, "1"}}) {
            CAPTURE(i);
            r.proxy.edit_reply(set_element(i, v));
            auto t = tries(r, tb, "v2", 1);
            CHECK(t.failed == 1);
            CHECK(t.first_error == sluice::error::protocol_error);
            ++lost;   // the grant ran in Redis; its reply was not believed
        }
        CHECK(admitted(tb.stats()) == 1);
        CHECK(taken_in_redis(r, tb, "v2", 10) == 1 + static_cast<std::uint64_t>(lost) + 1);
        CHECK(tb.stats().backend.errors == static_cast<std::uint64_t>(lost));
        CHECK_FALSE(tb.stats().backend.degraded);   // Redis answers: the link stays
    }
    SUBCASE("token bucket: a reservation's wait shortened: the waiter is not woken before its slot")
    {
        // 10/s, burst 1: the second reservation waits about 100 ms for its slot; the edit
        // makes the wait 10 ms, which would admit it 90 ms early.
        bucket tb(r.conn, sluice::rate::per_second(10), 1, closed_options());
        REQUIRE(tries(r, tb, "v3", 1).admitted == 1);
        r.proxy.edit_reply([](std::string& b) {
            auto lines = resp_lines(b);
            if (lines.size() > 2 && lines[1] == ":1") lines[2] = ":10000";
            b = resp_join(lines);
        });
        auto a = acquires(r, tb, "v3", {500ms});
        CHECK(a[0].ec == sluice::error::protocol_error);
        CHECK(tb.stats().admitted == 0);
    }
    SUBCASE("sliding window: a refusal turned into a grant, a huge remaining, a state where the log has none")
    {
        window w(r.conn, 2, std::chrono::hours(1), closed_options());
        REQUIRE(tries(r, w, "w1", 2).admitted == 2);   // full now
        r.proxy.edit_reply(set_element(0, "1"));
        auto t = tries(r, w, "w1", 1);
        // Granted with the refusal's wait: a try is granted only with nothing to wait.
        CHECK(t.failed == 1);
        CHECK(t.first_error == sluice::error::protocol_error);
        for (auto [i, v] : {std::pair<std::size_t, const char*>{2, "99999999999"}, {5, "7"}}) {
            CAPTURE(i);
            r.proxy.edit_reply(set_element(i, v));
            auto u = tries(r, w, "w1", 1);
            CHECK(u.failed == 1);
            CHECK(u.first_error == sluice::error::protocol_error);
        }
        CHECK(admitted(w.stats()) == 2);
        CHECK(taken_in_redis(r, w, "w1", 2) == 2);
    }
    CHECK(r.proxy.stats().tampered >= 1);
}

TEST_CASE("faults: a reply delivered twice: the copy nobody asked for drops the link (no abort), nothing admitted twice" * doctest::timeout(60))
{
    rig r({}, fast({}));
    bucket tb(r.conn, hourly, 10, closed_options());
    REQUIRE(tries(r, tb, "dup", 1).admitted == 1);
    const auto lost_before = r.conn.stats().links_lost;
    r.proxy.duplicate_reply();
    auto t = tries(r, tb, "dup", 1);
    CHECK(t.admitted == 1);   // the reply, believed once
    CHECK(r.until([&] { return r.conn.stats().links_lost == lost_before + 1; }));
    recover(r, tb, "dup", "reply duplicated");
    const auto in_redis = taken_in_redis(r, tb, "dup", 10);
    CHECK(admitted(tb.stats()) == in_redis);
}

TEST_CASE("faults: random byte flips in replies: every request answered, errors of sluice's category, never beyond Redis's count" * doctest::timeout(60))
{
    rig r({}, fast({}));
    // A probe at once after a lost link: each round's requests reach Redis once the link
    // is back.
    auto o = closed_options();
    o.probe_interval = 1ms;
    bucket tb(r.conn, hourly, 1000, o);
    window w(r.conn, 1000, std::chrono::hours(1), o);
    REQUIRE(tries(r, tb, "rnd", 1).admitted == 1);
    REQUIRE(tries(r, w, "rndw", 1).admitted == 1);
    r.proxy.set_corruption(0.3, 7);
    int failed = 0, answered = 0;
    auto tally_of = [&](const tally& x, int n) {
        CHECK(x.sluice_errors);
        CHECK(x.admitted + x.refused + x.failed == n);
        failed += x.failed;
        answered += x.admitted + x.refused;
    };
    for (int round = 0; round < 40; ++round) {
        REQUIRE(r.until([&] { return r.conn.connected(); }));
        run_for(r.io, 2ms);
        tally_of(tries(r, tb, "rnd", 1), 1);   // the probe, if the last round lost the link
        tally_of(tries(r, tb, "rnd", 3), 3);
        run_for(r.io, 2ms);
        tally_of(tries(r, w, "rndw", 1), 1);
        tally_of(tries(r, w, "rndw", 3), 3);   // one call, then the others as one batch
    }
    const auto flipped = r.proxy.stats().tampered;
    MESSAGE("random flips: ", flipped, " chunks flipped, ", answered, " answered, ", failed, " failed");
    CHECK(flipped >= 20);
    CHECK(answered >= 100);
    r.proxy.heal();
    recover(r, tb, "rnd", "random flips, bucket");
    recover(r, w, "rndw", "random flips, window");
    // What a flip made unbelievable is lost (consumed in Redis, admitted nowhere); nothing
    // is admitted that Redis did not grant.
    bucket tp(r.conn, hourly, 1000, closed_options());
    window wp(r.conn, 1000, std::chrono::hours(1), closed_options());
    const auto bucket_in_redis = taken_in_redis(r, tp, "rnd", 1000);
    const auto window_in_redis = taken_in_redis(r, wp, "rndw", 1000);
    CHECK(admitted(tb.stats()) + admitted(tp.stats()) <= bucket_in_redis);
    CHECK(admitted(w.stats()) + admitted(wp.stats()) <= window_in_redis);
}

TEST_CASE("faults: 1000 waiters behind a black hole: each answered by max(max_wait, command_timeout), none left" * doctest::timeout(60))
{
    // The command timeout runs on the client's steady_clock (no clock to inject there):
    // each completion is measured in real time, against both ends of its window: not
    // before the command timeout (Redis could still have answered), not after
    // max(max_wait, command_timeout) plus the suite's slack.
    rig r({}, fast({}));
    bucket tb(r.conn, hourly, 10, closed_options());
    window w(r.conn, 10, std::chrono::hours(1), closed_options());
    REQUIRE(tries(r, tb, "bh1k", 1).admitted == 1);
    REQUIRE(tries(r, w, "bh1kw", 1).admitted == 1);
    r.proxy.set_black_hole(true);
    // Waits below, at and above the command timeout; half on each limiter, all sent at once
    // into the hole (the window's as one call at a time, the others waiting their turn).
    constexpr int n = 1000;
    std::vector<std::shared_ptr<acq_result>> rs;
    std::vector<std::chrono::milliseconds> waits;
    auto start = steady::now();
    for (int i = 0; i < n; ++i) {
        waits.push_back(std::chrono::milliseconds(20 + (i * 7) % 500));
        rs.push_back(std::make_shared<acq_result>());
        if (i % 2 == 0)
            tb.async_acquire("bh1k", 1, waits.back(), acq_recorder(rs.back()));
        else
            w.async_acquire("bh1kw", 1, waits.back(), acq_recorder(rs.back()));
    }
    REQUIRE(r.until([&] {
        for (auto& x : rs)
            if (x->calls == 0) return false;
        return true;
    }, 10000ms));
    steady::duration latest{};
    int early = 0, late = 0, wrong = 0;
    for (int i = 0; i < n; ++i) {
        const auto& x = *rs[static_cast<std::size_t>(i)];
        const auto took = x.at - start;
        const auto bound = std::max<steady::duration>(waits[static_cast<std::size_t>(i)], command_timeout);
        latest = std::max(latest, took);
        wrong += x.calls != 1 || x.ec != sluice::error::backend_unavailable;
        late += took > bound + slack;
        early += took < command_timeout - 5ms;   // before Redis could have answered
    }
    MESSAGE("1000 waiters: the last answered after ", ms(latest), " ms");
    CHECK(wrong == 0);
    CHECK(late == 0);
    CHECK(early == 0);
    auto sb = tb.stats(), sw = w.stats();
    CHECK(sb.waiting == 0);
    CHECK(sw.waiting == 0);
    CHECK(sb.refused + sw.refused == n);
    CHECK(admitted(sb) + admitted(sw) == 2);
    r.proxy.heal();
    recover(r, tb, "bh1k", "1000 waiters, black hole");
}

TEST_SUITE_END();
