// Redis Sentinel against real processes: a master, a replica and three Sentinels on
// loopback (redis_sentinel_support.hpp). Discovery (sentinel_resolver): the master is
// found, dead Sentinels are skipped and the verified one is asked first next time, a
// Sentinel naming a replica is not believed, and a failed round says why. The connection
// through Sentinels: commands land on the master, and a redis::token_bucket under load
// follows a failover (master SIGKILLed mid-run) with its local fallback meanwhile.
#include "redis_limiter_support.hpp"
#include "redis_sentinel_support.hpp"

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
// then closes it: a Sentinel that names whatever the test wants.
class fake_sentinel {
public:
    fake_sentinel(asio::io_context& io, std::string canned)
        : acceptor_(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)), canned_(std::move(canned))
    {
        accept();
    }

    redis::sentinel_address address() const { return {"127.0.0.1", acceptor_.local_endpoint().port()}; }
    int served() const noexcept { return served_; }

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
            ++served_;
            auto sock = std::make_shared<tcp::socket>(std::move(s));
            auto buf = std::make_shared<std::array<char, 512>>();
            sock->async_read_some(asio::buffer(*buf), [this, sock, buf](error_code ec, std::size_t) {
                if (ec) return;
                asio::async_write(*sock, asio::buffer(canned_), [sock](error_code, std::size_t) {});
            });
            accept();
        });
    }

    tcp::acceptor acceptor_;
    std::string canned_;
    int served_ = 0;
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
    SUBCASE("bad configuration")
    {
        CHECK_THROWS_AS(redis::sentinel_resolver(io, redis::sentinel_config{}), boost::system::system_error);
        auto cfg = g.sentinel_config();
        cfg.master_name.clear();
        CHECK_THROWS_AS(redis::sentinel_resolver(io, cfg), boost::system::system_error);
    }
}

TEST_SUITE_END();
