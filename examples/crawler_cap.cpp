// A crawler's two limits together: at most 4 requests in flight (concurrency_limit) and
// at most 20 requests per second (leaky bucket). Each fake fetch takes 300 ms, so the
// concurrency cap, not the rate, is what binds here: about 13 fetches per second.

#include <sluice/sluice.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <cstdio>

namespace asio = boost::asio;
using namespace std::chrono_literals;

int main()
{
    asio::io_context io;
    sluice::concurrency_limit in_flight(io, 4);
    sluice::leaky_bucket pace(io, sluice::rate::per_second(20));
    const auto start = std::chrono::steady_clock::now();
    int active = 0, peak = 0;

    for (int page = 0; page < 24; ++page) {
        asio::co_spawn(io, [&, page]() -> asio::awaitable<void> {
            auto slot = co_await in_flight.acquire(10s);   // first a slot in flight...
            if (!slot) co_return;
            if (!co_await pace.acquire(10s)) co_return;   // ...then the next send time
            peak = std::max(peak, ++active);
            asio::steady_timer fetch(io, 300ms);          // the "request"
            co_await fetch.async_wait(asio::use_awaitable);
            --active;
            auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
            std::printf("page %2d fetched at %5lld ms (in flight now %d)\n", page, static_cast<long long>(ms.count()), active);
        }, asio::detached);   // the permit is returned when the coroutine ends
    }
    io.run();
    std::printf("peak in flight: %d (cap 4)\n", peak);
}
