// Scenario `pace` (protocol v1): one waiter (a coroutine) acquires --n N times in a row
// from ONE leaky bucket at --rate R per second (burst 1, the default slack of 1 ms), after
// one initial acquire (--slack-us N: another slack, to see what catch-up buys on a machine
// that stalls). The time of each release is the steady_clock read right after the
// completion resumes the coroutine. Exactly as the Go peer:
//   achieved_rate = N / (last release - release of the initial acquire)
//   gap_err_p50/p99 = percentiles (index len/2 and len*99/100 of the sorted list) of
//                     |gap - 1/R| / (1/R) over the N gaps
// --strict: limiter_options{.strict = true} (the last strict_threshold of each wait is
// spent re-posting to the executor until the exact time). --policy floor: no limiter,
// Asio alone: the coroutine awaits one steady_timer set to each slot of the schedule (the
// initial release + i / R), the least a paced waiter on Asio's timers can get, without a
// limiter's arithmetic, lock, coalescing or slack. One io_context, one thread
// (concurrency hint 1). Extra keys: policy, strict, slack_us, io_uring, gap_p50_us,
// gap_min_us, gap_max_us.
#include "bench_common.hpp"

#include <sluice/leaky_bucket.hpp>
#include <sluice/limiter_options.hpp>
#include <sluice/rate.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace sluice_bench {

namespace {

namespace asio = boost::asio;

#ifdef BOOST_ASIO_HAS_IO_URING
constexpr bool pace_uses_io_uring = true;
#else
constexpr bool pace_uses_io_uring = false;
#endif

std::int64_t pace_now_ns() noexcept
{
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch()).count();
}

asio::awaitable<void> pace_loop(sluice::leaky_bucket<>& bucket, std::int64_t n,
                                std::vector<std::int64_t>& times, std::int64_t& errors)
{
    auto [ec0] = co_await bucket.async_acquire(1, sluice::wait_forever, asio::as_tuple(asio::use_awaitable));
    times.push_back(pace_now_ns());
    if (ec0) ++errors;
    for (std::int64_t i = 0; i < n; ++i) {
        auto [ec] = co_await bucket.async_acquire(1, sluice::wait_forever, asio::as_tuple(asio::use_awaitable));
        times.push_back(pace_now_ns());
        if (ec) ++errors;
    }
}

// --policy floor: the schedule on one timer, no limiter.
asio::awaitable<void> pace_floor_loop(std::int64_t n, double rate, std::vector<std::int64_t>& times)
{
    asio::steady_timer timer(co_await asio::this_coro::executor);
    const auto start = std::chrono::steady_clock::now();
    times.push_back(pace_now_ns());
    for (std::int64_t i = 1; i <= n; ++i) {
        timer.expires_at(start + std::chrono::nanoseconds(static_cast<std::int64_t>(static_cast<double>(i) * 1e9 / rate)));
        co_await timer.async_wait(asio::use_awaitable);
        times.push_back(pace_now_ns());
    }
}

} // namespace

std::int64_t pace_slack_us = -1;   // the leaky bucket's default_slack

int run_pace(const options& o)
{
    if (o.n < 1 || !(o.rate > 0)) {
        std::fprintf(stderr, "sluice-bench: pace needs --n >= 1 and --rate > 0\n");
        return 2;
    }
    const bool floor = o.policy == "floor";
    if (!floor && o.policy != "leaky" && o.policy != "gcra") {
        // "gcra" is the default of --policy for `try`; pace's limiter is the leaky bucket.
        std::fprintf(stderr, "sluice-bench: pace: --policy leaky (default) or floor, got '%s'\n", o.policy.c_str());
        return 2;
    }
    asio::io_context io(1);
    sluice::limiter_options opts;
    opts.strict = o.strict;
    const std::chrono::nanoseconds slack =
        pace_slack_us < 0 ? sluice::leaky_bucket<>::default_slack
                          : std::chrono::nanoseconds(std::chrono::microseconds(pace_slack_us));
    sluice::leaky_bucket<> bucket(io, sluice::rate::per_second(o.rate), slack, opts);

    std::vector<std::int64_t> times;
    times.reserve(static_cast<std::size_t>(o.n) + 1);
    std::int64_t errors = 0;
    const double cpu0 = cpu_seconds();
    if (floor)
        asio::co_spawn(io, pace_floor_loop(o.n, o.rate, times), asio::detached);
    else
        asio::co_spawn(io, pace_loop(bucket, o.n, times, errors), asio::detached);
    io.run();
    const double cpu1 = cpu_seconds();
    if (!o.trace.empty()) {
        std::vector<std::int64_t> rel;
        rel.reserve(times.size());
        for (auto t : times) rel.push_back(t - times.front());
        if (!write_trace(o.trace, rel)) return 1;
    }

    std::vector<double> gaps;
    gaps.reserve(times.size());
    for (std::size_t i = 1; i < times.size(); ++i)
        gaps.push_back(static_cast<double>(times[i] - times[i - 1]));
    std::sort(gaps.begin(), gaps.end());
    const double ideal = 1e9 / o.rate;
    std::vector<double> errs;
    errs.reserve(gaps.size());
    for (double g : gaps) errs.push_back(std::fabs(g - ideal) / ideal);
    std::sort(errs.begin(), errs.end());
    const double total = static_cast<double>(times.back() - times.front()) / 1e9;

    json_line j;
    j.add("scenario", "pace")
        .add("rate", o.rate)
        .add("n", static_cast<long long>(o.n))
        .add("policy", floor ? "floor" : "leaky")
        .add("achieved_rate", static_cast<double>(o.n) / total)
        .add("gap_err_p50", errs[errs.size() / 2])
        .add("gap_err_p99", errs[errs.size() * 99 / 100])
        .add("strict", o.strict)
        .add("slack_us", static_cast<long long>(slack.count() / 1000))
        .add("io_uring", pace_uses_io_uring)
        .add("gap_p50_us", gaps[gaps.size() / 2] / 1e3)
        .add("gap_min_us", gaps.front() / 1e3)
        .add("gap_max_us", gaps.back() / 1e3)
        .add("cpu_s", cpu1 - cpu0)
        .add("wall_s", total)
        .add("errors", static_cast<long long>(errors));
    j.emit();
    return errors == 0 ? 0 : 1;
}

} // namespace sluice_bench
