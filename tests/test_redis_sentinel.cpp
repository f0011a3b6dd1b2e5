// Redis Sentinel against real processes: a master, a replica and three Sentinels on
// loopback (redis_sentinel_support.hpp). Discovery (sentinel_resolver): the master is
// found, dead Sentinels are skipped and the verified one is asked first next time, a
// Sentinel naming a replica is not believed, and a failed round says why. The connection
// through Sentinels: commands land on the master, and a redis::token_bucket under load
// follows a failover (master SIGKILLed mid-run) with its local fallback meanwhile.
#include "redis_limiter_support.hpp"
#include "redis_sentinel_support.hpp"

#include <sluice/redis/cluster.hpp>
#include <sluice/redis/connection.hpp>
#include <sluice/redis/sentinel_resolver.hpp>
#include <sluice/redis/token_bucket.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace redis = sluice::redis;
using namespace std::chrono_literals;
using error_code = boost::system::error_code;
using asio::ip::tcp;
using sluice_test::run_for;
using sluice_test::run_until;
using sluice_test::sentinel_group;

struct resolved {
    int calls = 0;
    error_code ec;
    tcp::endpoint master;
};

auto recorder(std::shared_ptr<resolved> r)
{
    return [r](error_code ec, tcp::endpoint ep) {
        ++r->calls;
        r->ec = ec;
        r->master = ep;
    };
}

// A listener that answers every connection with one canned reply (whatever was asked),
// then closes it: a Sentinel that names whatever the test wants. With several replies, the
// n-th connection gets the n-th (the last one from then on).
class fake_sentinel {
public:
    fake_sentinel(asio::io_context& io, std::string canned)
        : fake_sentinel(io, std::vector<std::string>{std::move(canned)})
    {
    }

    fake_sentinel(asio::io_context& io, std::vector<std::string> canned)
        : acceptor_(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)), canned_(std::move(canned))
    {
        accept();
    }

    redis::sentinel_address address() const { return {"127.0.0.1", acceptor_.local_endpoint().port()}; }
    int served() const noexcept { return static_cast<int>(received_.size()); }
    /// What connection `i` sent in its first read.
    const std::string& received(std::size_t i) const { return *received_.at(i); }

    // A get-master-addr-by-name answer.
    static std::string naming(std::uint16_t port)
    {
        std::string p = std::to_string(port);
        return "*2\r\n$9\r\n127.0.0.1\r\n$" + std::to_string(p.size()) + "\r\n" + p + "\r\n";
    }

private:
    void accept()
    {
        acceptor_.async_accept([this](error_code ec, tcp::socket s) {
            if (ec) return;
            const std::string& reply = canned_.at(std::min(received_.size(), canned_.size() - 1));
            auto got = std::make_shared<std::string>();
            received_.push_back(got);
            auto sock = std::make_shared<tcp::socket>(std::move(s));
            auto buf = std::make_shared<std::array<char, 512>>();
            sock->async_read_some(asio::buffer(*buf), [sock, buf, got, &reply](error_code ec, std::size_t n) {
                if (ec) return;
                got->assign(buf->data(), n);
                asio::async_write(*sock, asio::buffer(reply), [sock](error_code, std::size_t) {});
            });
            accept();
        });
    }

    tcp::acceptor acceptor_;
    std::vector<std::string> canned_;
    std::vector<std::shared_ptr<std::string>> received_;
};

// The group of the tests that kill nothing, started once (Sentinels take seconds to find
// each other).
sentinel_group& shared_group()
{
    static sentinel_group g;
    return g;
}

// A loopback port nothing listens on.
redis::sentinel_address dead_address()
{
    return {"127.0.0.1", sluice_test::pick_port()};
}

} // namespace

TEST_SUITE_BEGIN("redis_sentinel");

TEST_CASE("sentinel resolver: finds the master; a dead Sentinel is skipped, the verified one asked first next time" * doctest::timeout(60))
{
    auto& g = shared_group();
    asio::io_context io;

    auto cfg = g.sentinel_config();
    auto dead = dead_address();
    cfg.sentinels.insert(cfg.sentinels.begin(), dead);
    redis::sentinel_resolver r(io, cfg);

    auto first = std::make_shared<resolved>();
    r.async_resolve(recorder(first));
    CHECK(first->calls == 0);   // never inside the initiating call
    REQUIRE(run_until(io, [&] { return first->calls == 1; }, 5000ms));
    CHECK_FALSE(first->ec);
    CHECK(first->master.port() == g.master().port());
    CHECK(first->master.address().to_string() == "127.0.0.1");
    auto order = r.sentinels();
    REQUIRE(order.size() == 4);
    CHECK(order.front() == cfg.sentinels[1]);   // the one that answered
    CHECK(order[1] == dead);                    // the others keep their order

    auto again = std::make_shared<resolved>();
    r.async_resolve(recorder(again));
    REQUIRE(run_until(io, [&] { return again->calls == 1; }, 5000ms));
    CHECK_FALSE(again->ec);
    CHECK(again->master == first->master);
    run_for(io, 50ms);
    CHECK(again->calls == 1);
}

TEST_CASE("sentinel resolver: a Sentinel naming a replica is not believed" * doctest::timeout(60))
{
    auto& g = shared_group();
    asio::io_context io;
    // A stale Sentinel that names the replica (as after a failover it has not seen).
    fake_sentinel stale(io, fake_sentinel::naming(g.replica().port()));

    SUBCASE("the next Sentinel's verified answer is used, and the stale one is not promoted")
    {
        auto cfg = g.sentinel_config();
        cfg.sentinels.insert(cfg.sentinels.begin(), stale.address());
        redis::sentinel_resolver r(io, cfg);
        auto res = std::make_shared<resolved>();
        r.async_resolve(recorder(res));
        REQUIRE(run_until(io, [&] { return res->calls == 1; }, 5000ms));
        CHECK(stale.served() == 1);
        CHECK_FALSE(res->ec);
        CHECK(res->master.port() == g.master().port());
        CHECK_FALSE(r.sentinels().front() == stale.address());
    }
    SUBCASE("alone, it makes the round fail with not_master")
    {
        redis::sentinel_config cfg;
        cfg.sentinels = {stale.address()};
        cfg.master_name = g.name();
        redis::sentinel_resolver r(io, cfg);
        auto res = std::make_shared<resolved>();
        r.async_resolve(recorder(res));
        REQUIRE(run_until(io, [&] { return res->calls == 1; }, 5000ms));
        CHECK(res->ec == redis::sentinel_error::not_master);
    }
}

TEST_CASE("sentinel resolver: a failed round says why" * doctest::timeout(60))
{
    auto& g = shared_group();
    asio::io_context io;

    SUBCASE("unknown master name")
    {
        auto cfg = g.sentinel_config();
        cfg.master_name = "no-such-master";
        redis::sentinel_resolver r(io, cfg);
        auto res = std::make_shared<resolved>();
        r.async_resolve(recorder(res));
        REQUIRE(run_until(io, [&] { return res->calls == 1; }, 5000ms));
        CHECK(res->ec == redis::sentinel_error::unknown_master);
    }
    SUBCASE("no Sentinel reachable, each given up after its timeout")
    {
        redis::sentinel_config cfg;
        cfg.sentinels = {dead_address(), dead_address()};
        cfg.master_name = g.name();
        cfg.timeout = 100ms;
        redis::sentinel_resolver r(io, cfg);
        auto res = std::make_shared<resolved>();
        r.async_resolve(recorder(res));
        REQUIRE(run_until(io, [&] { return res->calls == 1; }, 5000ms));
        CHECK(res->ec == redis::sentinel_error::sentinels_unreachable);
    }
    SUBCASE("a Sentinel that accepts and never answers is timed out")
    {
        tcp::acceptor silent(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
        redis::sentinel_config cfg;
        cfg.sentinels = {{"127.0.0.1", silent.local_endpoint().port()}, g.addresses()[0]};
        cfg.master_name = g.name();
        cfg.timeout = 150ms;
        redis::sentinel_resolver r(io, cfg);
        auto start = std::chrono::steady_clock::now();
        auto res = std::make_shared<resolved>();
        r.async_resolve(recorder(res));
        REQUIRE(run_until(io, [&] { return res->calls == 1; }, 5000ms));
        CHECK_FALSE(res->ec);
        CHECK(res->master.port() == g.master().port());
        auto took = std::chrono::steady_clock::now() - start;
        CHECK(took >= 140ms);
        CHECK(took < 2000ms);
    }
    SUBCASE("terminal cancellation")
    {
        tcp::acceptor silent(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
        redis::sentinel_config cfg;
        cfg.sentinels = {{"127.0.0.1", silent.local_endpoint().port()}};
        cfg.master_name = g.name();
        cfg.timeout = 5000ms;
        redis::sentinel_resolver r(io, cfg);
        asio::cancellation_signal sig;
        auto res = std::make_shared<resolved>();
        r.async_resolve(asio::bind_cancellation_slot(sig.slot(), recorder(res)));
        run_for(io, 50ms);
        CHECK(res->calls == 0);
        sig.emit(asio::cancellation_type::terminal);
        REQUIRE(run_until(io, [&] { return res->calls == 1; }, 1000ms));
        CHECK(res->ec == asio::error::operation_aborted);
    }
    SUBCASE("terminal cancellation while a Sentinel's name resolves")
    {
        // The resolver cannot be cancelled: the step goes on once the name is resolved, and
        // the round must then end with operation_aborted, not an exception out of run().
        redis::sentinel_config cfg;
        cfg.sentinels = {{"localhost", g.addresses()[0].port}};
        cfg.master_name = g.name();
        redis::sentinel_resolver r(io, cfg);
        asio::cancellation_signal sig;
        auto res = std::make_shared<resolved>();
        r.async_resolve(asio::bind_cancellation_slot(sig.slot(), recorder(res)));
        // The dispatch, which starts the coroutine: it suspends in the name resolution.
        io.run_one();
        REQUIRE(res->calls == 0);
        sig.emit(asio::cancellation_type::terminal);
        bool finished = false;
        CHECK_NOTHROW(finished = run_until(io, [&] { return res->calls == 1; }, 1000ms));
        REQUIRE(finished);
        CHECK(res->ec == asio::error::operation_aborted);
    }
    SUBCASE("bad configuration")
    {
        CHECK_THROWS_AS(redis::sentinel_resolver(io, redis::sentinel_config{}), boost::system::system_error);
        auto cfg = g.sentinel_config();
        cfg.master_name.clear();
        CHECK_THROWS_AS(redis::sentinel_resolver(io, cfg), boost::system::system_error);
    }
}

TEST_CASE("connection through Sentinels: commands go to the master" * doctest::timeout(60))
{
    auto& g = shared_group();
    asio::io_context io;
    auto cfg = g.config();   // host:port point nowhere: only the Sentinels can tell
    redis::connection conn(io, cfg);
    REQUIRE(sluice_test::wait_connected(io, conn));

    auto done = std::make_shared<int>(0);
    conn.async_exec({"SET", "sentinel:k", "v1"}, [done](error_code ec, redis::reply r) {
        CHECK_FALSE(ec);
        CHECK(r.str == "OK");
        ++*done;
    });
    REQUIRE(run_until(io, [&] { return *done == 1; }));
    CHECK(g.master().command({"GET", "sentinel:k"}).str == "v1");

    // A master name nobody monitors: never connected, commands fail fast.
    auto wrong = cfg;
    wrong.sentinel.master_name = "no-such-master";
    redis::connection nowhere(io, wrong);
    auto failed = std::make_shared<std::optional<error_code>>();
    nowhere.async_exec({"PING"}, [failed](error_code ec, redis::reply) { *failed = ec; });
    // Held while the first discovery runs, failed once it finds nothing: well within the
    // connect timeout.
    REQUIRE(run_until(io, [&] { return failed->has_value(); }, cfg.connect_timeout));
    CHECK(**failed == sluice::error::backend_unavailable);
    run_for(io, 300ms);
    CHECK_FALSE(nowhere.connected());

    // Sentinels without a master name, or for a cluster: refused at construction.
    auto unnamed = cfg;
    unnamed.sentinel.master_name.clear();
    CHECK_THROWS_AS(redis::connection(io, unnamed), boost::system::system_error);
    CHECK_THROWS_AS(redis::cluster(io, cfg), boost::system::system_error);
}

TEST_CASE("connection through Sentinels: a link whose ROLE is not master counts for nothing" * doctest::timeout(60))
{
    asio::io_context io;
    // The instance says master to the discovery's check, then slave on the link (a failover
    // in between), and answers the command that waited for the discovery in the same write.
    const std::string master_role = "*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n";
    const std::string slave_role = "*1\r\n$5\r\nslave\r\n";
    fake_sentinel instance(io, std::vector<std::string>{master_role, slave_role + "+OK\r\n"});
    fake_sentinel sentinel(io, fake_sentinel::naming(instance.address().port));

    redis::connection_config cfg;
    cfg.port = 1;
    cfg.sentinel.sentinels = {sentinel.address()};
    cfg.sentinel.master_name = "mymaster";
    cfg.reconnect_min = 5000ms;   // one attempt within the test
    cfg.reconnect_max = 5000ms;
    redis::connection conn(io, cfg);
    auto result = std::make_shared<std::optional<error_code>>();
    auto answer = std::make_shared<redis::reply>();
    conn.async_exec({"SET", "k", "v"}, [result, answer](error_code ec, redis::reply r) {
        *result = ec;
        *answer = std::move(r);
    });
    REQUIRE(run_until(io, [&] { return result->has_value(); }, 3000ms));
    REQUIRE(instance.served() == 2);   // the discovery's check, then the link
    CHECK(instance.received(1).find("ROLE") != std::string::npos);
    CHECK(instance.received(1).find("SET") != std::string::npos);   // sent, and answered +OK
    CHECK(**result == sluice::error::backend_unavailable);
    CHECK(answer->str.empty());
    CHECK_FALSE(conn.connected());
}

namespace {

// The bucket with its local fallback's counters in view (they are not part of its API).
class observed_bucket : public redis::token_bucket<redis::connection> {
public:
    using redis::token_bucket<redis::connection>::token_bucket;

    // Grants of the local fallback: waits and tries.
    std::uint64_t fallback_admitted() const
    {
        auto s = this->core_->fallback().stats();
        return s.admitted + s.try_admitted;
    }
};

double seconds(std::chrono::steady_clock::duration d)
{
    return std::chrono::duration<double>(d).count();
}

} // namespace

TEST_CASE("failover: a token bucket under load follows the Sentinels to the new master" * doctest::timeout(120))
{
    using clock = std::chrono::steady_clock;
    sentinel_group g;   // its own: this test kills the master
    asio::io_context io;

    auto cfg = g.config();
    cfg.command_timeout = 300ms;
    cfg.reconnect_min = 20ms;
    cfg.reconnect_max = 200ms;
    cfg.sentinel.timeout = 200ms;
    redis::connection conn(io, cfg);
    REQUIRE(sluice_test::wait_connected(io, conn));

    constexpr double rate = 200;          // per second
    constexpr std::uint64_t burst = 10;
    redis::shared_options o;
    o.on_failure = redis::failure_policy::local_fallback;
    o.expected_nodes = 2;                 // the fallback: 100/s, burst 5
    o.probe_interval = 100ms;
    o.fallback.limiter.count_try_acquire = true;
    observed_bucket tb(conn, sluice::rate::per_second(rate), burst, o);
    const double fallback_rate = rate / static_cast<double>(o.expected_nodes);
    const double fallback_burst = static_cast<double>(std::max<std::uint64_t>(1, burst / o.expected_nodes));

    // The load: 4 callers looping on async_try_acquire, 4 on async_acquire (max_wait 50 ms),
    // each paced by 2 ms between a completion and its next request.
    long started = 0, completed = 0, unexpected = 0;
    bool stop = false;
    std::function<void(bool)> issue = [&](bool wait) {
        ++started;
        auto next = [&, wait] {
            if (stop) return;
            auto t = std::make_shared<asio::steady_timer>(io, 2ms);
            t->async_wait([&, t, wait](error_code) { issue(wait); });
        };
        if (wait) {
            tb.async_acquire("k", 1, 50ms, [&, next](error_code ec) {
                ++completed;
                if (ec && ec != sluice::error::timed_out) {
                    ++unexpected;
                    MESSAGE("async_acquire: ", ec.message());
                }
                next();
            });
        } else {
            tb.async_try_acquire("k", 1, [&, next](error_code ec, sluice::decision) {
                ++completed;
                if (ec) {
                    ++unexpected;
                    MESSAGE("async_try_acquire: ", ec.message());
                }
                next();
            });
        }
    };
    for (int i = 0; i < 4; ++i) {
        issue(false);
        issue(true);
    }
    run_for(io, 500ms);
    auto healthy = tb.stats();
    CHECK(healthy.backend.fallback_decisions == 0);
    CHECK(healthy.admitted + healthy.try_admitted > 0);
    CHECK_FALSE(healthy.backend.degraded);

    // SIGKILL the master mid-run and watch, every 20 ms: the limiter degrade and recover,
    // the Sentinels name the replica (any of them: the one the client asks first may lag),
    // and the fallback's grants.
    const auto old_master = g.master().port();
    const auto new_master = g.replica().port();
    const auto killed = clock::now();
    g.master().kill();
    std::optional<clock::time_point> degraded_at, promoted_at, back_at, fallback_last;
    std::uint64_t fallback_seen = tb.fallback_admitted();
    const auto deadline = killed + 25s;
    while (!back_at && clock::now() < deadline) {
        run_for(io, 20ms);
        auto now = clock::now();
        auto st = tb.stats();
        if (st.backend.degraded && !degraded_at) degraded_at = now;
        if (!promoted_at)
            for (std::size_t i = 0; i < 3; ++i)
                if (g.master_port_by_sentinels(i) == new_master) {
                    promoted_at = now;
                    break;
                }
        if (degraded_at && !st.backend.degraded) back_at = now;
        if (auto f = tb.fallback_admitted(); f != fallback_seen) {
            fallback_seen = f;
            fallback_last = now;
        }
    }
    REQUIRE(degraded_at);
    REQUIRE(promoted_at);
    REQUIRE(back_at);
    CHECK(conn.connected());

    // Waiters of the fallback may still finish (within their max_wait), then it stays idle:
    // Redis decides again, on the new master, whose key the script keeps.
    run_for(io, 100ms);
    if (auto f = tb.fallback_admitted(); f != fallback_seen) {
        fallback_seen = f;
        fallback_last = clock::now();
    }
    auto back = tb.stats();
    // The bucket's state on the new master (replicated before the kill, so that it exists
    // says little): it moves while Redis decides there.
    const auto state_back = g.replica().command({"GET", tb.redis_key("k")}).str;
    run_for(io, 500ms);
    auto after = tb.stats();
    CHECK(g.replica().command({"GET", tb.redis_key("k")}).str != state_back);
    CHECK_FALSE(after.backend.degraded);
    CHECK(after.backend.fallback_decisions == back.backend.fallback_decisions);
    CHECK(sluice_test::decisions(after) > sluice_test::decisions(back));
    CHECK(tb.fallback_admitted() == fallback_seen);
    CHECK(g.replica().command({"ROLE"}).elements.at(0).str == "master");
    CHECK(g.replica().command({"EXISTS", tb.redis_key("k")}).integer == 1);

    // The fallback's grants over the outage: at most its burst plus its rate times the time
    // it was deciding (from the kill to its last grant seen), as documented.
    REQUIRE(fallback_last);
    const double outage = seconds(*fallback_last - killed);
    const double allowed = fallback_burst + fallback_rate * outage;
    CHECK(fallback_seen > 0);
    CHECK(static_cast<double>(fallback_seen) <= allowed);

    // Back on Redis within the failover (the Sentinels naming the new master) plus one
    // probe interval plus the reconnection backoff; 300 ms for discovery, connection and
    // this loop's 20 ms steps (more under sanitizers).
    const double failover = seconds(*promoted_at - killed);
    const double recovery = seconds(*back_at - *promoted_at);
    const double bound = seconds(o.probe_interval + cfg.reconnect_max + 300ms);
    CHECK(recovery <= bound);
    MESSAGE("old master ", old_master, ", new ", new_master, ": degraded after ",
            seconds(*degraded_at - killed), " s; Sentinels switched after ", failover,
            " s; decisions back on Redis ", recovery, " s later (bound ", bound, " s); fallback granted ",
            fallback_seen, " (bound ", allowed, ") over ", outage, " s; decisions ", sluice_test::decisions(after),
            ", fallback decisions ", after.backend.fallback_decisions, ", redis errors ", after.backend.errors);

    // Nobody hung: every request started completed, none with an unexpected error.
    stop = true;
    REQUIRE(run_until(io, [&] { return completed == started; }, 3000ms));
    CHECK(unexpected == 0);
    CHECK(started > 0);
}

TEST_SUITE_END();
