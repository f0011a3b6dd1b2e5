// Redis Sentinel against real processes: a master, a replica and three Sentinels on
// loopback (redis_sentinel_support.hpp). Discovery (sentinel_resolver): the master is
// found, dead Sentinels are skipped and the verified one is asked first next time, a
// Sentinel naming a replica is not believed, and a failed round says why. The connection
// through Sentinels: commands land on the master, and a redis::token_bucket under load
// follows a failover (master SIGKILLed mid-run) with its local fallback meanwhile. A
// manual failover with the old master still up is followed on the +switch-master
// announcement (the time from it to the first command served by the new master is
// printed), and a Sentinel learnt from the others keeps discovery going once the
// configured ones are gone.
#include "redis_limiter_support.hpp"
#include "redis_sentinel_support.hpp"

#include <sluice/redis/cluster.hpp>
#include <sluice/redis/connection.hpp>
#include <sluice/redis/sentinel_resolver.hpp>
#include <sluice/redis/token_bucket.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
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
    // The Sentinels it reports alive next, in their previous order; the dead one, which
    // no Sentinel reports, last: configured, it is kept, but asked after the live ones.
    CHECK(order[1] == cfg.sentinels[2]);
    CHECK(order[2] == cfg.sentinels[3]);
    CHECK(order[3] == dead);

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
        auto s = this->state_->fallback().stats();
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

namespace {

// Subscribes to +switch-master on every Sentinel of a group, on its own sockets: the time
// of the first announcement, whichever Sentinel makes it.
class switch_listener {
public:
    switch_listener(asio::io_context& io, const std::vector<redis::sentinel_address>& sentinels)
    {
        for (const auto& a : sentinels) {
            auto l = std::make_shared<link>(io);
            l->socket.connect(tcp::endpoint(asio::ip::make_address(a.host), a.port));
            asio::write(l->socket, asio::buffer(std::string("*2\r\n$9\r\nSUBSCRIBE\r\n$14\r\n+switch-master\r\n")));
            links_.push_back(l);
            read(l);
        }
    }

    // Cancelled, not closed, with their reads in flight (Asio 1.81's io_uring backend
    // reuses a socket closed with an operation in flight); each closes with its handler.
    ~switch_listener()
    {
        for (auto& l : links_) {
            error_code ignored;
            l->socket.cancel(ignored);
        }
    }

    std::optional<std::chrono::steady_clock::time_point> first;
    std::optional<std::chrono::steady_clock::time_point> last;   // of those heard
    int heard = 0;         // Sentinels that announced
    std::string payload;   // of the first announcement

private:
    struct link {
        explicit link(asio::io_context& io) : socket(io) {}
        tcp::socket socket;
        std::array<char, 512> buf;
        std::string seen;
    };

    void read(const std::shared_ptr<link>& l)
    {
        l->socket.async_read_some(asio::buffer(l->buf), [this, l](error_code ec, std::size_t n) {
            if (ec) return;
            const auto now = std::chrono::steady_clock::now();
            l->seen.append(l->buf.data(), n);
            // The message array's third element follows "$14\r\n+switch-master\r\n".
            if (auto at = l->seen.find("message\r\n$14\r\n+switch-master\r\n"); at != std::string::npos) {
                ++heard;
                last = now;
                if (!first) {
                    first = now;
                    auto rest = l->seen.substr(at);
                    auto line = rest.find("\r\n", rest.find("$", rest.find("+switch-master")));
                    payload = rest.substr(line + 2, rest.find("\r\n", line + 2) - line - 2);
                }
                return;
            }
            read(l);
        });
    }

    std::vector<std::shared_ptr<link>> links_;
};

// After the failover of the test below (in its group: Sentinels take seconds to start): a
// client configured with the first two Sentinels only learns the third from them, and
// keeps finding the master through it once the two are gone.
void check_learnt_sentinel(sentinel_group& g, asio::io_context& io)
{
    auto all = g.addresses();
    const auto master_port = g.master_port_by_sentinels(2);
    REQUIRE(master_port != 0);

    auto cfg = g.config();
    cfg.sentinel.sentinels = {all[0], all[1]};
    cfg.sentinel.timeout = 100ms;
    cfg.reconnect_min = 20ms;
    cfg.reconnect_max = 200ms;
    redis::sentinel_resolver resolver(io, cfg.sentinel);
    auto res = std::make_shared<resolved>();
    resolver.async_resolve(recorder(res));
    REQUIRE(run_until(io, [&] { return res->calls == 1; }, 5000ms));
    REQUIRE_FALSE(res->ec);
    auto known = resolver.sentinels();
    CHECK(std::find(known.begin(), known.end(), all[2]) != known.end());

    redis::connection conn(io, cfg);
    REQUIRE(sluice_test::wait_connected(io, conn));
    run_for(io, 100ms);

    // The configured Sentinels die; the client's link then breaks (its clients killed on
    // the master): the next discovery can only succeed through the third Sentinel.
    g.sentinel(0).kill();
    g.sentinel(1).kill();
    CHECK(sluice_test::sync_command(master_port, {"CLIENT", "KILL", "TYPE", "normal"}).integer >= 1);
    REQUIRE(run_until(io, [&] { return !conn.connected(); }, 2000ms));
    REQUIRE(run_until(io, [&] { return conn.connected(); }, 5000ms));
    auto done = std::make_shared<std::optional<error_code>>();
    conn.async_exec({"SET", "sentinel:learnt", "yes"}, [done](error_code ec, redis::reply) { *done = ec; });
    REQUIRE(run_until(io, [&] { return done->has_value(); }, 2000ms));
    CHECK_FALSE(**done);
    CHECK(sluice_test::sync_command(master_port, {"GET", "sentinel:learnt"}).str == "yes");

    // The resolver too, its list refreshed by its earlier round.
    auto again = std::make_shared<resolved>();
    resolver.async_resolve(recorder(again));
    REQUIRE(run_until(io, [&] { return again->calls == 1; }, 5000ms));
    CHECK_FALSE(again->ec);
    CHECK(again->master.port() == master_port);
    CHECK(resolver.sentinels().front() == all[2]);
}

} // namespace

TEST_CASE("manual failover, old master still up: the client switches on the +switch-master announcement; then a Sentinel learnt from the others is used once the configured ones are gone" * doctest::timeout(120))
{
    using clock = std::chrono::steady_clock;
    sentinel_group g;   // its own: this test fails over, then kills Sentinels
    asio::io_context io;
    switch_listener announced(io, g.addresses());

    auto cfg = g.config();
    cfg.sentinel.timeout = 200ms;
    redis::connection conn(io, cfg);
    REQUIRE(sluice_test::wait_connected(io, conn));

    // The load: 4 callers in a loop, each an INCR (the admission) that also says which
    // server ran it. Every reply is kept: (value, port, time).
    const std::string count_and_port =
        "local n = redis.call('INCR', KEYS[1]) "
        "return {n, tonumber(string.match(redis.call('INFO', 'server'), 'tcp_port:(%d+)'))}";
    const std::string key = "sentinel:admissions";
    struct served {
        long long value;
        std::uint16_t port;
        clock::time_point at;
    };
    std::vector<served> replies;
    long started = 0, completed = 0, failed = 0;
    std::vector<int> completions;   // per request: how many times its handler ran
    bool stop = false;
    std::function<void()> issue = [&] {
        const auto id = completions.size();
        completions.push_back(0);
        ++started;
        conn.async_exec({"EVAL", count_and_port, "1", key}, [&, id](error_code ec, redis::reply r) {
            ++completions[id];
            ++completed;
            if (ec || r.type != redis::reply::kind::array || r.elements.size() != 2)
                ++failed;
            else
                replies.push_back({r.elements[0].integer, static_cast<std::uint16_t>(r.elements[1].integer),
                                   clock::now()});
            if (stop) return;
            // 1 ms apart: a steady load (about 4,000 commands/s) without a busy loop.
            auto t = std::make_shared<asio::steady_timer>(io, 1ms);
            t->async_wait([&, t](error_code) { issue(); });
        });
    };
    for (int i = 0; i < 4; ++i) issue();
    run_for(io, 300ms);
    REQUIRE_FALSE(replies.empty());
    CHECK(failed == 0);

    const auto old_master = g.master().port();
    const auto new_master = g.replica().port();
    CHECK(g.sentinel(0).command({"SENTINEL", "FAILOVER", g.name()}).str == "OK");
    auto on_new = [&] {
        for (const auto& r : replies)
            if (r.port == new_master) return true;
        return false;
    };
    REQUIRE(run_until(io, [&] { return announced.first && on_new(); }, 20000ms));
    // The old master is still up and still says master: only the announcement moved the
    // client (the Sentinels reconfigure it, closing its clients, seconds later).
    CHECK(g.master().command({"ROLE"}).elements.at(0).str == "master");
    run_for(io, 200ms);
    stop = true;
    REQUIRE(run_until(io, [&] { return completed == started; }, 3000ms));
    // The other Sentinels announce the switch too, once they hear of it.
    run_until(io, [&] { return announced.heard == 3; }, 3000ms);

    clock::time_point first_new = clock::time_point::max(), last_old = clock::time_point::min();
    std::vector<long long> on_old, on_new_master;
    for (const auto& r : replies) {
        if (r.port == new_master) {
            first_new = std::min(first_new, r.at);
            on_new_master.push_back(r.value);
        } else if (r.port == old_master) {
            last_old = std::max(last_old, r.at);
            on_old.push_back(r.value);
        }
    }
    CHECK(on_old.size() + on_new_master.size() == replies.size());
    const double latency_ms = std::chrono::duration<double, std::milli>(first_new - *announced.first).count();
    const long late_old = std::count_if(replies.begin(), replies.end(), [&](const served& r) {
        return r.port == old_master && r.at > *announced.first;
    });
    MESSAGE("announced '", announced.payload, "' by ", announced.heard, " Sentinels over ",
            std::chrono::duration<double, std::milli>(*announced.last - *announced.first).count(),
            " ms; first command served by the new master ", latency_ms,
            " ms after the first announcement (goal 100 ms); commands ", started, ", served by the old master ",
            on_old.size(), " (", late_old, " after the announcement), by the new ", on_new_master.size(),
            ", failed ", failed);
    CHECK(announced.payload.find(g.name() + " 127.0.0.1 " + std::to_string(old_master) + " 127.0.0.1 "
                                 + std::to_string(new_master))
          == 0);
    CHECK(latency_ms < 1000);
    CHECK(last_old < first_new);   // never back on the old master

    // Every request answered once; no admission doubled (each server's values distinct)
    // nor lost on the new master (its values run without a gap up to its counter).
    CHECK(std::all_of(completions.begin(), completions.end(), [](int n) { return n == 1; }));
    for (auto* v : {&on_old, &on_new_master}) {
        std::sort(v->begin(), v->end());
        CHECK(std::adjacent_find(v->begin(), v->end()) == v->end());
    }
    REQUIRE_FALSE(on_new_master.empty());
    CHECK(on_new_master.back() - on_new_master.front() + 1 == static_cast<long long>(on_new_master.size()));
    CHECK(std::stoll(g.replica().command({"GET", key}).str) == on_new_master.back());
    // The commands that failed are those in flight on the old link when it was dropped.
    CHECK(failed <= 4);
    // Counted: one switch followed (the later announcements name the master it is on),
    // the old link lost once for it.
    const auto links = conn.stats();
    CHECK(links.master_switches == 1);
    CHECK(links.links_lost >= 1);
    CHECK(links.connects >= 2);

    conn.close();
    check_learnt_sentinel(g, io);
}

TEST_CASE("a subscription whose Sentinel goes silent is made again" * doctest::timeout(60))
{
    auto& g = shared_group();
    asio::io_context io;
    // Answers SENTINEL SENTINELS and SUBSCRIBE once, then neither answers (PING included)
    // nor closes: a Sentinel cut off without a reset.
    tcp::acceptor silent(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    std::vector<std::shared_ptr<tcp::socket>> accepted;
    const std::string subscribed = "*0\r\n*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master\r\n:1\r\n"
                                   "*3\r\n$9\r\nsubscribe\r\n$9\r\n+sentinel\r\n:2\r\n";
    std::function<void()> accept = [&] {
        silent.async_accept([&](error_code ec, tcp::socket s) {
            if (ec) return;
            auto sock = std::make_shared<tcp::socket>(std::move(s));
            accepted.push_back(sock);
            asio::async_write(*sock, asio::buffer(subscribed), [sock](error_code, std::size_t) {});
            accept();
        });
    };
    accept();

    auto cfg = g.config();
    cfg.sentinel.sentinels.push_back({"127.0.0.1", silent.local_endpoint().port()});   // last: never asked
    cfg.sentinel.timeout = 50ms;   // a PING every 200 ms; silent over one period: closed
    cfg.reconnect_min = 20ms;
    redis::connection conn(io, cfg);
    REQUIRE(sluice_test::wait_connected(io, conn));
    const auto start = std::chrono::steady_clock::now();
    REQUIRE(run_until(io, [&] { return accepted.size() >= 3; }, 3000ms));
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // Each subscription lasts two periods at most (PING sent, nothing back by the next).
    CHECK(took < 2.0);
    CHECK(conn.connected());
    conn.close();
    run_for(io, 50ms);

    {
        // Owned by a coroutine that never ends, its subscriptions up: the io_context's
        // shutdown frees everything, the subscriptions' pending reads and timers included
        // (LeakSanitizer checks).
        asio::io_context io2;
        auto c = std::make_shared<redis::connection>(io2, g.config());
        REQUIRE(sluice_test::wait_connected(io2, *c));
        asio::co_spawn(io2, [c]() -> asio::awaitable<void> {
            asio::steady_timer forever(co_await asio::this_coro::executor, std::chrono::hours(1));
            co_await forever.async_wait(asio::use_awaitable);
        }, asio::detached);
        c.reset();
        run_for(io2, 100ms);
    }
}

TEST_SUITE_END();
