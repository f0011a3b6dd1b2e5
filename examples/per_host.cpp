// Per-host pacing with one keyed limiter: every host gets its own leaky bucket (5 requests
// a second), one slow host is overridden to 1 a second, and a burst of never-seen hosts
// beyond max_keys is served by the shared overflow limiter instead of growing the store.
// Prints what each host achieved and the store's counters.

#include <sluice/sluice.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <cstdio>
#include <map>
#include <string>

namespace asio = boost::asio;
using namespace std::chrono_literals;

int main()
{
    asio::io_context io;
    sluice::keyed_options opts;
    opts.max_keys = 8;   // tiny on purpose: most of the flood below goes to the overflow limiter
    opts.shards = 1;
    sluice::keyed<sluice::leaky_bucket<>> per_host(io, sluice::rate::per_second(5), opts);
    per_host.set_override("slow.example", sluice::rate::per_second(1));
    per_host.set_overflow(sluice::rate::per_second(2));

    const auto start = std::chrono::steady_clock::now();
    std::map<std::string, int> fetched;
    std::map<std::string, double> last_at;
    const char* hosts[] = {"a.example", "b.example", "c.example", "slow.example"};

    // Ten pages per known host, all queued at once: each host's bucket spaces its own.
    for (const char* host : hosts) {
        for (int page = 0; page < 10; ++page) {
            asio::co_spawn(io, [&, host]() -> asio::awaitable<void> {
                if (!co_await per_host.acquire(host, 3s))   // fail fast beyond 3 s of queue
                    co_return;
                ++fetched[host];
                last_at[host] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            }, asio::detached);
        }
    }
    // Then a flood of one-off hosts: 4 fit in the store beside the known hosts, the other
    // 36 share the overflow's 2/s (so only its first permit goes through at once).
    int flood_ok = 0;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        for (int i = 0; i < 40; ++i)
            flood_ok += per_host.try_acquire("random-" + std::to_string(i) + ".example").admitted;
        co_return;
    }, asio::detached);

    io.run();
    for (const char* host : hosts)
        std::printf("%-14s %2d pages in %.2f s (%d waited longer than 3 s and gave up)\n", host, fetched[host],
                    last_at[host], 10 - fetched[host]);
    auto st = per_host.stats();
    std::printf("flood: %d of 40 one-off hosts admitted at once\n", flood_ok);
    std::printf("store: %zu keys (cap %zu), %llu created, %llu evicted, %llu overflow requests, %llu admitted by the overflow\n",
                st.keys.tracked, opts.max_keys, static_cast<unsigned long long>(st.keys.created),
                static_cast<unsigned long long>(st.keys.evicted),
                static_cast<unsigned long long>(st.keys.overflow_requests),
                static_cast<unsigned long long>(st.keys.overflow_admitted));
}
