// The connection and the cluster on a strand of an io_context run by two threads, and
// operations initiated from foreign threads (also run under ThreadSanitizer: suite
// 'concurrency').
#include "redis_support.hpp"

#include <sluice/redis/cluster.hpp>
#include <sluice/redis/connection.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

namespace asio = boost::asio;
using boost::system::error_code;
using sluice::redis::reply;
using namespace std::chrono_literals;

TEST_SUITE_BEGIN("redis");

TEST_CASE("connection: on a strand, io_context run by two threads" * doctest::timeout(60))
{
    sluice_test::redis_server srv;
    asio::io_context io;
    auto strand = asio::make_strand(io);
    sluice::redis::basic_connection<asio::strand<asio::io_context::executor_type>> c(strand, srv.config());
    constexpr int workers = 8, per = 500;
    std::atomic<int> ok{0}, finished{0};
    for (int w = 0; w < workers; ++w)
        asio::co_spawn(strand, [&, w]() -> asio::awaitable<void> {
            std::string key = "w" + std::to_string(w);
            for (int i = 0; i < per; ++i) {
                std::vector<std::string> incr{"INCR", key};
                auto [ec, r] = co_await c.async_exec(incr, asio::as_tuple(asio::use_awaitable));
                if (!ec && r.integer == i + 1) ++ok;
            }
            ++finished;
        }, asio::detached);
    std::thread t1([&] { io.run_for(30s); });
    std::thread t2([&] { io.run_for(30s); });
    auto done = sluice_test::wait_until([&] { return finished == workers; }, 30000ms);
    c.close();
    t1.join();
    t2.join();
    CHECK(done);
    CHECK(ok == workers * per);
}

TEST_CASE("connection: initiated from foreign threads while two threads run the strand" * doctest::timeout(60))
{
    sluice_test::redis_server srv;
    asio::io_context io;
    auto guard = asio::make_work_guard(io);
    sluice::redis::connection c(asio::make_strand(io), srv.config());
    std::thread t1([&] { io.run_for(30s); });
    std::thread t2([&] { io.run_for(30s); });

    constexpr int callers = 3, per = 200;
    std::atomic<int> ok{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < callers; ++t)
        threads.emplace_back([&, t] {
            for (int i = 0; i < per; ++i) {
                auto f = c.async_exec({"RPUSH", "list" + std::to_string(t), std::to_string(i)},
                                      asio::use_future);
                if (f.wait_for(10s) == std::future_status::ready && f.get().integer == i + 1) ++ok;
            }
        });
    for (auto& th : threads) th.join();
    CHECK(ok == callers * per);
    c.close();
    guard.reset();
    t1.join();
    t2.join();
}

TEST_CASE("cluster: on a strand, io_context run by two threads" * doctest::timeout(120))
{
    sluice_test::redis_cluster cl;
    asio::io_context io;
    auto strand = asio::make_strand(io);
    sluice::redis::basic_cluster<asio::strand<asio::io_context::executor_type>> c(strand, cl.config());
    constexpr int workers = 6, per = 100;
    std::atomic<int> ok{0}, finished{0};
    sluice::redis::script s("return redis.call('INCR', KEYS[1])");
    for (int w = 0; w < workers; ++w)
        asio::co_spawn(strand, [&, w]() -> asio::awaitable<void> {
            std::string key = "worker" + std::to_string(w);
            for (int i = 0; i < per; ++i) {
                std::vector<std::string> keys{key}, args;
                auto [ec, r] = co_await c.async_eval(s, keys, args, asio::as_tuple(asio::use_awaitable));
                if (!ec && r.integer == i + 1) ++ok;
            }
            ++finished;
        }, asio::detached);
    std::thread t1([&] { io.run_for(60s); });
    std::thread t2([&] { io.run_for(60s); });
    auto done = sluice_test::wait_until([&] { return finished == workers; }, 60000ms);
    c.close();
    t1.join();
    t2.join();
    CHECK(done);
    CHECK(ok == workers * per);
}

TEST_SUITE_END();
