// Two processes share one quota through Redis: 10 requests a second between them.
//
//   shared_quota [PORT]
//
// Starts its own redis-server on 127.0.0.1:PORT (default 6393), forks two workers that
// each send "requests" as fast as redis::token_bucket lets them for 2 s, and prints who
// got which slot: together they get 10 a second (plus the burst of 1), not 10 each.
#include <sluice/redis/connection.hpp>
#include <sluice/redis/token_bucket.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/system_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

namespace asio = boost::asio;
namespace redis = sluice::redis;
using namespace std::chrono_literals;

// One worker: acquires slots of the shared key "demo" for `run` and counts them.
int worker(int id, std::uint16_t port, std::chrono::system_clock::time_point start)
{
    asio::io_context io;
    redis::connection_config cfg;
    cfg.port = port;
    redis::connection conn(io, cfg);
    redis::token_bucket<redis::connection> quota(conn, sluice::rate::per_second(10), 1);
    int granted = 0;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        asio::steady_timer t(io);
        while (!conn.connected()) {   // the connection comes up in the background
            t.expires_after(5ms);
            co_await t.async_wait(asio::use_awaitable);
        }
        // Both workers start at the same instant, on a timer: the event loop keeps running.
        asio::system_timer at_start(io, start);
        co_await at_start.async_wait(asio::use_awaitable);
        auto end = std::chrono::steady_clock::now() + 2s;
        while (std::chrono::steady_clock::now() < end) {
            // Wait for a slot at most 500 ms; false: the queue is too long, try again.
            if (co_await quota.acquire("demo", 500ms)) {
                ++granted;
                auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now() - start).count();
                std::printf("worker %d: request at %4lld ms\n", id, static_cast<long long>(ms));
                std::fflush(stdout);
            }
        }
        conn.close();
    }, [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
    });
    io.run();
    return granted;
}

int main(int argc, char** argv)
{
    auto port = static_cast<std::uint16_t>(argc > 1 ? std::atoi(argv[1]) : 6393);
    std::string p = std::to_string(port);
    pid_t server = ::fork();
    if (server == 0) {
        if (!std::freopen("/dev/null", "w", stdout)) ::_exit(126);
        ::execlp("redis-server", "redis-server", "--port", p.c_str(), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--loglevel", "warning", static_cast<char*>(nullptr));
        ::_exit(127);
    }
    // Wait until redis-server accepts connections (no event loop runs here yet).
    {
        asio::io_context io;
        asio::ip::tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), port);
        for (int i = 0;; ++i) {
            asio::ip::tcp::socket s(io);
            boost::system::error_code ec;
            s.connect(ep, ec);
            if (!ec) break;
            if (i == 500) {
                std::fprintf(stderr, "redis-server did not start on port %u\n", port);
                ::kill(server, SIGTERM);
                return 1;
            }
            std::this_thread::sleep_for(10ms);
        }
    }

    auto start = std::chrono::system_clock::now() + 500ms;
    pid_t kids[2];
    for (int i = 0; i < 2; ++i) {
        kids[i] = ::fork();
        if (kids[i] == 0) ::_exit(worker(i, port, start));
    }
    int total = 0;
    for (pid_t k : kids) {
        int status = 0;
        ::waitpid(k, &status, 0);
        total += WIFEXITED(status) ? WEXITSTATUS(status) : 0;
    }
    ::kill(server, SIGTERM);
    ::waitpid(server, nullptr, 0);
    std::printf("together: %d requests in 2 s (the quota: 10/s + 1)\n", total);
    return total > 0 && total <= 23 ? 0 : 1;   // the last waits may end just after 2 s
}
