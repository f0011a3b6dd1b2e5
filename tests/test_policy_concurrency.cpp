#include <sluice/policy/composite.hpp>
#include <sluice/policy/fixed_counter.hpp>
#include <sluice/policy/gcra.hpp>
#include <sluice/policy/sliding_log.hpp>
#include <sluice/policy/weighted_counter.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <thread>
#include <tuple>
#include <vector>

using namespace std::chrono_literals;
using namespace sluice;
using namespace sluice::policy;

namespace {

constexpr int threads = 4;
#if defined(__SANITIZE_THREAD__)
constexpr std::uint64_t calls_per_thread = 100'000;   // TSan is ~10x slower
#else
constexpr std::uint64_t calls_per_thread = 400'000;
#endif
constexpr std::uint64_t total_calls = threads * calls_per_thread;

std::int64_t steady_ns()
{
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct run_result {
    std::uint64_t admitted;
    std::int64_t t0, t1;   // before the first call, after the last
};

// Hammers one shared policy with try_acquire(1, steady now) from several threads.
template <class P>
run_result hammer(P& p)
{
    std::atomic<std::uint64_t> admitted{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> pool;
    for (int i = 0; i < threads; ++i) {
        pool.emplace_back([&] {
            while (!go.load(std::memory_order_acquire)) {}
            std::uint64_t mine = 0;
            for (std::uint64_t k = 0; k < calls_per_thread; ++k)
                mine += p.try_acquire(1, steady_ns()).admitted ? 1 : 0;
            admitted.fetch_add(mine, std::memory_order_relaxed);
        });
    }
    run_result r;
    r.t0 = steady_ns();
    go.store(true, std::memory_order_release);
    for (auto& t : pool) t.join();
    r.t1 = steady_ns();
    r.admitted = admitted.load();
    return r;
}

std::uint64_t windows_touched(const run_result& r, std::int64_t w)
{
    return static_cast<std::uint64_t>(r.t1 / w - r.t0 / w + 1);   // steady time is positive
}

void report(const run_result& r, std::uint64_t bound)
{
    INFO("admitted ", r.admitted, " bound ", bound, " elapsed ns ", r.t1 - r.t0);
    CHECK(r.admitted <= bound);
    CHECK(r.admitted > 0);
}

} // namespace

TEST_SUITE_BEGIN("concurrency");

TEST_CASE("gcra token bucket never exceeds burst + elapsed / interval")
{
    const std::int64_t T = 10'000;
    gcra g(rate::every(std::chrono::nanoseconds{T}), 100);
    run_result r = hammer(g);
    report(r, 100 + static_cast<std::uint64_t>((r.t1 - r.t0) / T));
}

TEST_CASE("gcra leaky bucket never exceeds 1 + slack / interval + elapsed / interval")
{
    const std::int64_t T = 10'000;
    gcra g(rate::every(std::chrono::nanoseconds{T}), 1, std::chrono::nanoseconds{5 * T});
    run_result r = hammer(g);
    report(r, 1 + 5 + static_cast<std::uint64_t>((r.t1 - r.t0) / T));
}

// Whether d is a decision of try_acquire(1) by a token bucket of `interval` and `burst`
// (no slack): with full = burst x interval, a grant leaves reset_after t with
// interval <= t <= full and remaining = burst - ceil(t / interval); a refusal has
// reset_after = retry_after + full - interval, and remaining = burst - ceil(t / interval)
// below full, 0 from it. A decision computed from a mix of two configurations (an
// interval read before a writer, a burst or tau after) breaks these relations.
static bool decided_by(const decision& d, std::int64_t interval, std::int64_t burst)
{
    const std::int64_t full = burst * interval;
    const std::int64_t t = d.reset_after.count();
    const std::int64_t ceil_t = (t + interval - 1) / interval;
    if (d.admitted)
        return d.retry_after.count() == 0 && t >= interval && t <= full &&
               static_cast<std::int64_t>(d.remaining) == burst - ceil_t;
    return d.retry_after.count() > 0 && t == d.retry_after.count() + full - interval &&
           static_cast<std::int64_t>(d.remaining) == (t >= full ? 0 : burst - ceil_t);
}

TEST_CASE("gcra: decisions racing with set_rate and set_burst each see one whole configuration")
{
    // Four threads decide while a fifth switches the interval and the burst, each change
    // alone (so four configurations, every pair of interval and burst). Every decision's
    // figures must be those of one of them, whole.
    const std::int64_t intervals[] = {1'000, 3'001};
    const std::int64_t bursts[] = {20, 7};
    gcra g(rate::every(std::chrono::nanoseconds{intervals[0]}), bursts[0]);
    std::atomic<int> running{threads};
    std::atomic<bool> go{false};
    std::atomic<std::uint64_t> admitted{0}, refused{0}, mixed{0};
    std::vector<std::thread> pool;
    for (int i = 0; i < threads; ++i) {
        pool.emplace_back([&] {
            while (!go.load(std::memory_order_acquire)) {}
            std::uint64_t yes = 0, no = 0, bad = 0;
            for (std::uint64_t k = 0; k < calls_per_thread / 4; ++k) {
                const decision d = g.try_acquire(1, steady_ns());
                (d.admitted ? yes : no) += 1;
                bool whole = false;
                for (std::int64_t iv : intervals)
                    for (std::int64_t b : bursts)
                        whole = whole || decided_by(d, iv, b);
                bad += whole ? 0 : 1;
            }
            admitted.fetch_add(yes);
            refused.fetch_add(no);
            mixed.fetch_add(bad);
            running.fetch_sub(1, std::memory_order_release);
        });
    }
    std::uint64_t changes = 0;
    go.store(true, std::memory_order_release);
    while (running.load(std::memory_order_acquire) > 0) {
        if (changes % 2 == 0)
            g.set_rate(rate::every(std::chrono::nanoseconds{intervals[(changes / 2) % 2 == 0 ? 1 : 0]}), steady_ns());
        else
            g.set_burst(static_cast<std::uint64_t>(bursts[(changes / 2) % 2 == 0 ? 1 : 0]), steady_ns());
        ++changes;
    }
    for (auto& t : pool) t.join();
    INFO("admitted ", admitted.load(), " refused ", refused.load(), " changes ", changes);
    CHECK(mixed.load() == 0);
    CHECK(admitted.load() > 0);
    CHECK(refused.load() > 0);
    CHECK(changes > 100);
}

TEST_CASE("fixed_counter never exceeds limit per window touched")
{
    const std::int64_t w = 1'000'000;
    fixed_counter f(100, std::chrono::nanoseconds{w});
    run_result r = hammer(f);
    report(r, 100 * windows_touched(r, w));
}

// Several threads open the same new window at once after idle gaps of 2^31 to 2^40
// windows (exact multiples of 2^32 and 2048 included) and then call in it: the window admits
// exactly `limit` (no admission lost to a concurrent reset, no stale count reused).
template <class P>
void race_after_gaps(std::uint64_t limit, std::int64_t w)
{
    P p(limit, std::chrono::nanoseconds{w});
    const std::int64_t gaps[] = {std::int64_t{1} << 32, std::int64_t{1} << 31, (std::int64_t{1} << 32) + 1,
                                 std::int64_t{3} << 32, (std::int64_t{1} << 31) + 1, std::int64_t{1} << 33,
                                 (std::int64_t{1} << 32) - 1, std::int64_t{1} << 40, std::int64_t{1} << 32};
    std::vector<std::int64_t> epochs{-(std::int64_t{1} << 50)};
    for (std::int64_t g : gaps) epochs.push_back(epochs.back() + g);
    const std::int64_t calls = 3 * static_cast<std::int64_t>(limit);
    std::vector<std::atomic<std::uint64_t>> admitted(epochs.size());
    std::barrier sync(threads);
    std::vector<std::thread> pool;
    for (int i = 0; i < threads; ++i) {
        pool.emplace_back([&, i] {
            for (std::size_t e = 0; e < epochs.size(); ++e) {
                sync.arrive_and_wait();
                std::uint64_t mine = 0;
                for (std::int64_t k = 0; k < calls; ++k)
                    mine += p.try_acquire(1, epochs[e] * w + (k * 7 + i) % w).admitted ? 1 : 0;
                admitted[e].fetch_add(mine, std::memory_order_relaxed);
            }
        });
    }
    for (auto& t : pool) t.join();
    for (std::size_t e = 0; e < epochs.size(); ++e) {
        CAPTURE(e);
        CHECK(admitted[e].load() == limit);
    }
}

TEST_CASE("fixed_counter: a window opened by racing threads after a long idle gap admits exactly limit")
{
    for (int round = 0; round < 20; ++round)
        race_after_gaps<fixed_counter>(50, 1000);
}

TEST_CASE("weighted_counter: a window opened by racing threads after a long idle gap admits exactly limit")
{
    for (int round = 0; round < 20; ++round)
        race_after_gaps<weighted_counter>(50, 1000);
}

TEST_CASE("sliding_log never exceeds limit per window length")
{
    const std::int64_t w = 1'000'000;
    sliding_log l(100, std::chrono::nanoseconds{w});
    run_result r = hammer(l);
    // Any window-long span holds at most `limit`: ceil((elapsed + 1) / w) spans cover it.
    report(r, 100 * static_cast<std::uint64_t>((r.t1 - r.t0) / w + 1));
}

TEST_CASE("weighted_counter never exceeds limit per window touched")
{
    const std::int64_t w = 1'000'000;
    weighted_counter c(100, std::chrono::nanoseconds{w});
    run_result r = hammer(c);
    // The estimate includes the current window's count at full weight.
    report(r, 100 * windows_touched(r, w));
}

TEST_CASE("all_of never exceeds the tightest part")
{
    const std::int64_t T = 10'000, w = 1'000'000;
    composite<gcra, fixed_counter> p{std::tuple{rate::every(std::chrono::nanoseconds{T}), 100},
                                 std::tuple{50, std::chrono::nanoseconds{w}}};
    run_result r = hammer(p);
    std::uint64_t bound = std::min<std::uint64_t>(100 + static_cast<std::uint64_t>((r.t1 - r.t0) / T),
                                                  50 * windows_touched(r, w));
    report(r, bound);
}

TEST_CASE("a generous limit admits every call: nothing lost")
{
    SUBCASE("gcra")
    {
        gcra g(rate::every(1ns), 1'000'000'000);
        CHECK(hammer(g).admitted == total_calls);
    }
    SUBCASE("fixed_counter")
    {
        fixed_counter f(fixed_counter::max_limit, 1h);
        CHECK(hammer(f).admitted == total_calls);
    }
    SUBCASE("sliding_log")
    {
        sliding_log l(total_calls, 1h);
        CHECK(hammer(l).admitted == total_calls);
    }
    SUBCASE("weighted_counter")
    {
        weighted_counter c(weighted_counter::max_limit, 1h);
        CHECK(hammer(c).admitted == total_calls);
    }
    SUBCASE("all_of")
    {
        composite<gcra, weighted_counter> p{std::tuple{rate::every(1ns), 1'000'000'000},
                                               std::tuple{weighted_counter::max_limit, 1h}};
        CHECK(hammer(p).admitted == total_calls);
    }
}

TEST_SUITE_END();
