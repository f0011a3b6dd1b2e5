// Coroutines waiting on a token bucket: `if (co_await bucket.acquire(250ms))`.
// Twenty requests against 10/s with a burst of 5: the first five go at once, the rest
// are paced; requests that would wait longer than 1 s give up at once (a 429 in a server).

#include <sluice/sluice.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include <chrono>
#include <cstdio>

namespace asio = boost::asio;
using namespace std::chrono_literals;

int main()
{
    asio::io_context io;
    sluice::token_bucket bucket(io, sluice::rate::per_second(10), 5);
    const auto start = std::chrono::steady_clock::now();

    for (int i = 0; i < 20; ++i) {
        asio::co_spawn(io, [&, i]() -> asio::awaitable<void> {
            const sluice::acquire_result granted = co_await bucket.acquire(1s);
            auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
            std::printf("request %2d %s at %4lld ms\n", i, granted ? "granted" : granted.timed_out() ? "refused (would wait > 1 s)" : "refused (closed)",
                        static_cast<long long>(ms.count()));
        }, asio::detached);
    }
    io.run();
}
