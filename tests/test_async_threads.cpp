// Multi-threaded: thousands of coroutines on several threads and two io_contexts sharing one
// limiter, with random cancellations. Real steady_clock; only generous bounds on time. Also
// run under TSan (keep it fast). Threads call io.run() under a work guard, never run_for:
// Boost 1.81's io_uring backend can crash in run_for (see run_slice in redis_support.hpp).
#include "async_support.hpp"
#include "rng.hpp"

#include <sluice/keyed.hpp>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
namespace asio = boost::asio;

namespace {

using steady = std::chrono::steady_clock;

struct run_stats {
    explicit run_stats(int n) : done(static_cast<std::size_t>(n)) {}
    std::vector<std::atomic<int>> done;   // per coroutine: how many times it finished
    std::atomic<int> finished{0};
    std::atomic<long> granted{0};
    std::atomic<long> cancelled{0};
    std::atomic<long> failed{0};          // any other outcome (must stay 0)
};

// One request: either a plain acquire(), or an acquire raced against a timer (the timer
// may win, which cancels the acquire through per-operation cancellation).
template <class Limiter>
asio::awaitable<void> worker(Limiter& l, run_stats& s, int id, std::optional<std::chrono::microseconds> cancel_after)
{
    using namespace asio::experimental::awaitable_operators;
    try {
        if (!cancel_after) {
            if (co_await l.acquire(60s))
                ++s.granted;
            else
                ++s.failed;
        } else {
            asio::steady_timer timer(co_await asio::this_coro::executor, *cancel_after);
            auto r = co_await (l.async_acquire(1, sluice::wait_forever, asio::use_awaitable) ||
                               timer.async_wait(asio::use_awaitable));
            if (r.index() == 0)
                ++s.granted;
            else
                ++s.cancelled;
        }
    } catch (...) {
        ++s.failed;
    }
    s.done[static_cast<std::size_t>(id)].fetch_add(1);
    s.finished.fetch_add(1);
}

// Spawns n workers on strands of `ex`, about a third of them racing a random timer.
template <class Limiter, class Executor>
void spawn_workers(Limiter& l, run_stats& s, int first, int n, const Executor& ex, unsigned seed)
{
    sluice_test::rng rng{seed};
    for (int i = first; i < first + n; ++i) {
        std::optional<std::chrono::microseconds> cancel;
        if (rng.in(0, 2) == 0)
            cancel = std::chrono::microseconds(rng.in(0, 20000));
        asio::co_spawn(asio::make_strand(ex), worker(l, s, i, cancel), asio::detached);
    }
}

// Waits (bounded) until every worker has finished; the watchdog of these tests.
bool wait_all(const run_stats& s, int n, std::chrono::seconds limit)
{
    auto deadline = steady::now() + limit;
    while (s.finished.load() < n && steady::now() < deadline)
        std::this_thread::sleep_for(1ms);
    return s.finished.load() == n;
}

void check_exactly_once(const run_stats& s, int n)
{
    int bad = 0;
    for (int i = 0; i < n; ++i)
        if (s.done[static_cast<std::size_t>(i)].load() != 1)
            ++bad;
    CHECK(bad == 0);
    CHECK(s.failed == 0);
    CHECK(s.granted + s.cancelled == n);
}

double seconds_since(steady::time_point start)
{
    return std::chrono::duration<double>(steady::now() - start).count();
}

} // namespace

TEST_CASE("threads: one io_context, 4 threads, thousands of coroutines on a token_bucket and a sliding_window")
{
    constexpr int n = 2000;   // per limiter
    constexpr double rate = 20000;
    constexpr std::uint64_t burst = 20;
    constexpr std::uint64_t limit = 50;
    constexpr auto window = 5ms;

    asio::io_context io(4);
    run_stats bucket_stats(n), window_stats(n);
    auto work = asio::make_work_guard(io);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&] { io.run(); });
    auto start = steady::now();
    double elapsed = 0;
    {
        sluice::token_bucket<> bucket(io, sluice::rate::per_second(rate), burst);
        sluice::sliding_window<> sw(io, limit, window);
        spawn_workers(bucket, bucket_stats, 0, n, io.get_executor(), 1);
        spawn_workers(sw, window_stats, 0, n, io.get_executor(), 2);
        bool all = wait_all(bucket_stats, n, 60s) && wait_all(window_stats, n, 60s);
        elapsed = seconds_since(start);
        CHECK(all);
        CHECK(bucket.queued() == 0);
        CHECK(sw.queued() == 0);
    }   // limiters first, then the io_context
    work.reset();
    for (auto& t : threads)
        t.join();
    CHECK(io.stopped());   // nothing left pending: no hang

    check_exactly_once(bucket_stats, n);
    check_exactly_once(window_stats, n);
    // Never more than the policy allows for the elapsed time (measured around everything).
    const long bucket_granted = bucket_stats.granted, window_granted = window_stats.granted;
    CHECK(bucket_granted <= static_cast<long>(burst + rate * elapsed) + 1);
    CHECK(window_granted <= static_cast<long>(limit * (elapsed / std::chrono::duration<double>(window).count() + 2)));
    // Most requests were not cancelled (a third race a timer of at most 20 ms).
    CHECK(bucket_granted >= n / 2);
    CHECK(window_granted >= n / 2);
    MESSAGE("bucket granted " << bucket_stats.granted << ", cancelled " << bucket_stats.cancelled
            << "; window granted " << window_stats.granted << ", cancelled " << window_stats.cancelled
            << "; in " << elapsed << " s");
}

TEST_CASE("threads: two io_contexts, each run by its own thread, share one limiter")
{
    constexpr int n = 1500;   // per io_context
    constexpr double rate = 20000;
    constexpr std::uint64_t burst = 10;

    asio::io_context io1(1), io2(1);
    run_stats stats(2 * n);
    auto w1 = asio::make_work_guard(io1);
    auto w2 = asio::make_work_guard(io2);
    std::thread t1([&] { io1.run(); });
    std::thread t2([&] { io2.run(); });
    auto start = steady::now();
    double elapsed = 0;
    {
        sluice::token_bucket<> bucket(io1, sluice::rate::per_second(rate), burst);   // its timer runs on io1
        spawn_workers(bucket, stats, 0, n, io1.get_executor(), 3);
        spawn_workers(bucket, stats, n, n, io2.get_executor(), 4);
        CHECK(wait_all(stats, 2 * n, 60s));
        elapsed = seconds_since(start);
        CHECK(bucket.queued() == 0);
    }
    w1.reset();
    w2.reset();
    t1.join();
    t2.join();
    CHECK(io1.stopped());
    CHECK(io2.stopped());
    check_exactly_once(stats, 2 * n);
    const long granted = stats.granted, cancelled = stats.cancelled;
    CHECK(granted <= static_cast<long>(burst + rate * elapsed) + 1);
    CHECK(granted >= n);
    MESSAGE("granted " << granted << ", cancelled " << cancelled << "; in " << elapsed << " s");
}

TEST_CASE("threads: a limiter closed while threads wait on it: every waiter completes exactly once")
{
    constexpr int n = 1000;
    asio::io_context io(2);
    sluice_test::handler_stats hs;
    auto work = asio::make_work_guard(io);
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t)
        threads.emplace_back([&] { io.run(); });
    {
        // Slow enough that most are still waiting when the limiter is closed.
        sluice::token_bucket<> bucket(io, sluice::rate::per_second(2000), 1);
        std::thread producer([&] {
            for (int i = 0; i < n; ++i)
                bucket.async_acquire(1, sluice::wait_forever, asio::bind_executor(asio::make_strand(io), sluice_test::counted_handler(hs)));
        });
        std::thread closer([&] {
            auto until = steady::now() + 30s;
            while (hs.runs.load() < 50 && steady::now() < until)
                std::this_thread::yield();
            bucket.close();
        });
        producer.join();
        closer.join();
        auto deadline = steady::now() + 60s;
        while (hs.runs.load() < n && steady::now() < deadline)
            std::this_thread::sleep_for(1ms);
    }
    work.reset();
    for (auto& t : threads)
        t.join();
    CHECK(hs.runs == n);
    CHECK(hs.twice == 0);
    CHECK(hs.dropped == 0);
    CHECK(hs.live == 0);
    CHECK(hs.errors >= 1);   // some were closed
}

TEST_CASE("threads: a keyed limiter shared by threads: per-key bounds hold through churn, overflow and waiting")
{
    // 64 keys over a store of 16 (4 shards): keys come, go idle, are evicted and come back,
    // some land in the overflow; 2 threads check, one io_context (2 threads) runs waiters.
    constexpr double rate = 2000;
    constexpr std::uint64_t burst = 4;
    constexpr int keys = 64;
    sluice::keyed_options o;
    o.max_keys = 16;
    o.shards = 4;
    o.tick = 1ms;
    o.wheel_slots = 16;
    asio::io_context io(2);
    auto work = asio::make_work_guard(io);
    std::vector<std::thread> runners;
    for (int t = 0; t < 2; ++t)
        runners.emplace_back([&] { io.run(); });
    std::vector<std::atomic<long>> granted(keys);
    std::atomic<long> async_done{0}, async_ok{0};
    sluice_test::handler_stats hs;
    auto start = steady::now();
    double elapsed = 0;
    sluice::limiter_stats st;
    {
        sluice::keyed<sluice::token_bucket<>, int> k(io, sluice::rate::per_second(rate), burst, o);
        k.set_overflow(sluice::rate::per_second(rate), burst);
        std::vector<std::thread> checkers;
        for (int t = 0; t < 2; ++t) {
            checkers.emplace_back([&, t] {
                sluice_test::rng rng{static_cast<std::uint64_t>(t)};
                for (int i = 0; i < 20000; ++i) {
                    int key = static_cast<int>(rng() % keys);
                    if (k.try_acquire(key).admitted) granted[static_cast<std::size_t>(key)].fetch_add(1);
                    if (i % 20 == 0) {
                        k.async_acquire(key, 1, 2ms, asio::bind_executor(asio::make_strand(io),
                            [&, key](boost::system::error_code ec) {
                                if (!ec) {
                                    granted[static_cast<std::size_t>(key)].fetch_add(1);
                                    async_ok.fetch_add(1);
                                }
                                async_done.fetch_add(1);
                            }));
                    }
                    if (i % 1000 == 0) std::this_thread::sleep_for(5ms);   // let keys go idle
                }
            });
        }
        for (auto& c : checkers) c.join();
        auto deadline = steady::now() + 30s;
        while (async_done.load() < 2 * 1000 && steady::now() < deadline)
            std::this_thread::sleep_for(1ms);
        elapsed = seconds_since(start);
        st = k.stats();
    }
    work.reset();
    for (auto& t : runners) t.join();
    CHECK(async_done == 2 * 1000);   // every waiter completed, exactly once (counted above)
    CHECK(st.keys.tracked <= 16);
    CHECK(st.keys.evicted > 0);
    CHECK(st.keys.overflow_requests > 0);
    // A key's own bucket, or the overflow: each admits at most burst + rate * elapsed.
    long own_bound = static_cast<long>(burst + rate * elapsed) + 1;
    long total = 0;
    for (auto& g : granted) {
        CHECK(g.load() <= own_bound + static_cast<long>(st.keys.overflow_admitted));
        total += g.load();
    }
    CHECK(st.keys.overflow_admitted <= static_cast<std::uint64_t>(own_bound));
    CHECK(async_ok > 0);
    MESSAGE("keyed: " << total << " granted over " << keys << " keys in " << elapsed << " s; created " << st.keys.created
            << ", evicted " << st.keys.evicted << ", overflow " << st.keys.overflow_requests << " (" << st.keys.overflow_admitted
            << " admitted)");
}
