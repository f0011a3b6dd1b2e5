// Plain threads: use_future with the io_context run by a background thread, and
// acquire_blocking with no event loop involved at all.

#include <sluice/sluice.hpp>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

namespace asio = boost::asio;
using namespace std::chrono_literals;

int main()
{
    asio::io_context io;
    auto work = asio::make_work_guard(io);
    std::thread loop([&] { io.run(); });

    sluice::leaky_bucket bucket(io, sluice::rate::per_second(20));
    const auto start = std::chrono::steady_clock::now();
    auto ms = [&] {
        return static_cast<long long>(
            std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count());
    };

    std::vector<std::thread> threads;
    for (int t = 0; t < 3; ++t) {
        threads.emplace_back([&, t] {
            for (int i = 0; i < 3; ++i) {
                if (t == 0) {
                    // A future: the wait happens on the io_context, the thread blocks on get().
                    bucket.async_acquire(1, 5s, asio::use_future).get();
                    std::printf("thread %d (future)   got a slot at %4lld ms\n", t, ms());
                } else {
                    // No event loop needed: the thread sleeps until its reserved slot.
                    auto ec = bucket.acquire_blocking(1, 5s);
                    std::printf("thread %d (blocking) %s at %4lld ms\n", t, ec ? ec.message().c_str() : "got a slot", ms());
                }
            }
        });
    }
    for (auto& th : threads) th.join();
    work.reset();
    loop.join();
}
