// The fleet of scenario `shared`: --procs P forked processes, each with --concurrency C
// callers making attempts on its own limiter over one shared state (a Redis key, or a
// shared-memory segment), all starting at the same instant; the parent sums what they
// admitted and prints the JSON line (see scenario_shared.cpp for the keys).
#pragma once

#include "bench_common.hpp"

#include <sluice/decision.hpp>
#include <sluice/error.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/system/error_code.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace sluice_bench {

extern std::int64_t shared_lease;    // --lease N
extern std::string shared_mode;      // --mode try|acquire|wait
extern std::string shared_limiter;   // --limiter bucket|window|floor

/// What one process of the fleet reports.
struct child_result {
    std::int64_t admitted = 0;
    std::int64_t attempts = 0;
    std::int64_t redis_errors = 0;
    std::int64_t fallback = 0;
    std::int64_t rtt_us = 0;
    std::int64_t timeouts = 0;
    std::int64_t commands = 0;
    std::int64_t lease_expired = 0;
    std::int64_t cpu_us = 0;   // the process's CPU time (user + system) over the run
    std::int64_t ok = 0;
};

/// The calling process's CPU time so far (user + system), us.
std::int64_t cpu_time_us();

// Admissions per 100 ms of the run, for --trace.
constexpr auto trace_interval = std::chrono::milliseconds(100);

/// One process's counting window: from start_at (slept until) for --seconds, on steady_clock.
/// Every process counts over the same window: one that is ready late (a loaded machine)
/// counts from start_at too, else the union of the windows is longer than --seconds and
/// over_admission reads an excess that is not there.
struct fleet_window {
    using steady = std::chrono::steady_clock;
    steady::time_point begin, end;
    std::int64_t cpu_begin = 0;
    std::vector<std::int64_t>& bins;

    fleet_window(const options& o, std::chrono::system_clock::time_point start_at, std::vector<std::int64_t>& b) : bins(b)
    {
        std::this_thread::sleep_until(start_at);
        const auto late = std::max(std::chrono::system_clock::now() - start_at, std::chrono::system_clock::duration::zero());
        begin = steady::now() - std::chrono::duration_cast<steady::duration>(late);
        end = begin + std::chrono::duration_cast<steady::duration>(std::chrono::duration<double>(o.seconds));
        bins.assign(static_cast<std::size_t>(std::ceil(o.seconds * 10)) + 1, 0);
        cpu_begin = cpu_time_us();
    }

    /// An admission now: counted when within the window (one granted after it is not).
    bool admit(steady::time_point now)
    {
        if (now > end) return false;
        auto i = static_cast<std::size_t>((now - begin) / trace_interval);
        ++bins[std::min(i, bins.size() - 1)];
        return true;
    }
};

/// One process's run: C callers on `tb` (a limiter taking a key: the Redis limiters, or
/// an adapter), from start_at for --seconds, counting admissions per trace_interval.
template <class Limiter>
child_result run_child_on(const options& o, Limiter& tb, boost::asio::io_context& io, std::chrono::system_clock::time_point start_at,
                          std::vector<std::int64_t>& bins)
{
    using steady = std::chrono::steady_clock;
    child_result res;
    const bool acquire = shared_mode == "acquire";
    fleet_window w(o, start_at, bins);
    const auto end = w.end;
    std::int64_t admitted = 0, attempts = 0, timeouts = 0;
    int inflight = 0;
    auto admit = [&] {
        if (w.admit(steady::now())) ++admitted;   // granted after the run: not counted, as with try
    };
    std::function<void()> issue = [&] {
        ++attempts;
        ++inflight;
        if (acquire) {
            tb.async_acquire("shared", 1, std::chrono::seconds(1), [&](boost::system::error_code ec) {
                --inflight;
                if (!ec) admit();
                else if (ec == sluice::error::timed_out) ++timeouts;
                if (steady::now() < end) issue();
            });
            return;
        }
        tb.async_try_acquire("shared", 1, [&](boost::system::error_code ec, sluice::decision d) {
            --inflight;
            if (!ec && d.admitted) admit();
            if (steady::now() < end) issue();
        });
    };
    for (int c = 0; c < o.concurrency; ++c) issue();
    // The connection keeps the io_context busy: run until the last attempt is answered.
    auto deadline = end + std::chrono::seconds(5);
    while (inflight > 0 && steady::now() < deadline) {
        io.restart();
        io.run_for(std::chrono::milliseconds(10));
    }
    res.cpu_us = cpu_time_us() - w.cpu_begin;
    auto s = tb.stats();
    res.admitted = admitted;
    res.attempts = attempts;
    res.redis_errors = static_cast<std::int64_t>(s.backend.errors);
    res.fallback = static_cast<std::int64_t>(s.backend.fallback_decisions);
    res.rtt_us = s.backend.last_round_trip.count();
    res.timeouts = timeouts;
    res.commands = static_cast<std::int64_t>(s.backend.commands);
    res.lease_expired = static_cast<std::int64_t>(s.backend.lease_expired);
    res.ok = 1;
    tb.close();
    return res;
}

/// One process of the fleet: its limiter set up, run_child_on to its end.
using fleet_child = std::function<child_result(std::chrono::system_clock::time_point start_at,
                                               std::vector<std::int64_t>& bins)>;

/// Scenario `shared` on Redis (scenario_shared.cpp; built with the Redis backend).
int run_shared_redis(const options& o);

/// Forks o.procs processes running `child`, all from the same instant, collects their
/// results and prints the JSON line ("backend": redis or shm). Returns the exit status.
int run_fleet(const options& o, const fleet_child& child, const char* backend);

} // namespace sluice_bench
