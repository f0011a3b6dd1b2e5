// Scenario `shared` (protocol v1 addition, see shared/peers/README.md): --procs P
// processes, each with --concurrency C callers, make non-blocking acquire attempts for
// --seconds D against ONE redis::token_bucket of --rate Q per second, burst 1, on a
// redis-server that this scenario starts on 127.0.0.1:--port and stops by its pid.
// Processes are forked from this one; all start and stop at the same wall-clock instants.
// Each caller issues its next attempt when the previous one completes.
//
// --lease N (a sluice addition): the limiters lease up to N permits a round trip and
// answer locally while a lease lasts or a refusal holds (limiter_options::lease_size).
// --mode try (default: async_try_acquire, protocol v1) | acquire (async_acquire with a
// 1 s max_wait: callers wait their turn instead of retrying) | wait (below). --limiter
// bucket (default: redis::token_bucket, burst 1) | window (redis::sliding_window, limit
// max(1, Q/10) per 100 ms) | floor (--mode try only: the least a decision can cost on this
// path: the same connection, keys and arguments as the window's calls, and a script of the
// scripts' shared prelude and one SET; it admits every call).
//
// --mode wait: what waiting costs. ONE process (forked), --waiters W async_acquire calls
// (plain callbacks, max_wait 1 h) made at once on ONE redis::token_bucket of --rate Q,
// burst 1: each reserves its slot in Redis (pipelined round trips) and waits locally until
// it. The key's next --seconds D are reserved first by another limiter of the same rate
// (as another process would hold them), so that every slot is at least D away: with D
// beyond the time the W reservations take, all W wait at once, then wake at Q per second.
// Prints: reserved_s (from the
// first call to the last reservation's reply), waiting_reserved (of the W, those still
// waiting then), wall_s (to the last completion), rss_before_kib (connected, nothing
// started), rss_reserved_kib (when the last reply is in), max_rss_kib (the peak);
// bytes_per_waiter = (rss_reserved - rss_before) / waiting_reserved (the resident memory,
// with what the round trips left in the allocator), heap_bytes_per_waiter = the growth of
// the heap in use (mallinfo2) over the same span / waiting_reserved (what a waiting
// request holds), bytes_per_request_peak = (max_rss - rss_before) / W; cpu_us_per_request (process CPU from the first call to the
// last completion, / W) and cpu_us_per_wait (process CPU from the last reply to the last
// completion, / waiting_reserved: the waits alone, no round trip); errors.
//
// Prints one JSON line: scenario, procs, concurrency, rate, seconds, lease, admitted,
// allowed = Q*D + 1, over_admission = (admitted - allowed) / allowed, decisions_per_s,
// attempts, redis_errors, fallback_decisions, round_trip_us (the median of the processes'
// last round trips), mode, limiter, share_min and share_max (each process's admissions
// against an equal share of the total), demand_min and demand_max (each process's attempts
// against an equal share of them: what the CPUs let it ask), timeouts (acquires that gave up), fleet_cpu_cores (the processes' CPU time over
// the run / D: with burst 1 a permit nobody asks for at its instant is lost, so tries
// admit at most what the fleet is on a CPU to ask for). --trace FILE: each process's admissions per 100 ms, one line
// `process,interval,admitted` each, for plots.
#include "bench_redis.hpp"
#include "shared_fleet.hpp"

#include <sluice/limiter_stats.hpp>
#include <sluice/redis/connection.hpp>
#include <sluice/redis/scripts.hpp>
#include <sluice/redis/sliding_window.hpp>
#include <sluice/redis/token_bucket.hpp>

#include <boost/asio/io_context.hpp>

#include <malloc.h>

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace sluice_bench {

namespace {

namespace asio = boost::asio;
namespace redis = sluice::redis;
using steady = std::chrono::steady_clock;

// Runs `io` until `conn` is connected, for 10 s at most.
bool wait_connected(asio::io_context& io, const redis::connection& conn)
{
    auto give_up = steady::now() + std::chrono::seconds(10);
    while (!conn.connected() && steady::now() < give_up) {
        io.restart();
        io.run_for(std::chrono::milliseconds(5));
    }
    return conn.connected();
}

// --limiter floor: one EVALSHA per decision of the scripts' prelude and one SET, with the
// window's keys and arguments; it admits every call. What run_child_on uses of a limiter.
class script_floor {
public:
    explicit script_floor(redis::connection& conn) : conn_(conn) {}

    template <class Handler>
    void async_try_acquire(std::string_view key, std::uint64_t n, Handler handler)
    {
        const std::string k = "{bench:" + std::string(key) + "}";
        const auto sent = steady::now();
        conn_.async_eval(script_, {k, k + ":cfg", k + ":q"}, {limit_, window_, std::to_string(n)},
                         [this, sent, handler = std::move(handler)](boost::system::error_code ec, const redis::reply& r) mutable {
                             ++stats_.backend.commands;
                             stats_.backend.last_round_trip =
                                 std::chrono::duration_cast<std::chrono::microseconds>(steady::now() - sent);
                             if (!ec && (r.type != redis::reply::kind::array || r.elements.empty()))
                                 ec = sluice::error::protocol_error;
                             if (ec) ++stats_.backend.errors;
                             sluice::decision d;
                             d.admitted = !ec && r.elements[0].integer == 1;
                             handler(ec, d);
                         });
    }
    // --mode acquire is refused for the floor; run_child_on names it.
    template <class Handler>
    void async_acquire(std::string_view key, std::uint64_t n, std::chrono::nanoseconds, Handler handler)
    {
        async_try_acquire(key, n, [handler = std::move(handler)](boost::system::error_code ec, sluice::decision) mutable {
            handler(ec);
        });
    }
    sluice::limiter_stats stats() const { return stats_; }
    void close() {}

private:
    static constexpr auto text = redis::lua::detail::with_prelude(R"lua(
redis.call('SET', KEYS[1], ARGV[3])
return {1, 0, 0, 0, 0, 0}
)lua");
    redis::connection& conn_;
    redis::script script_{std::string(text.view())};
    std::string limit_ = "20000";
    std::string window_ = "100000";
    sluice::limiter_stats stats_;
};

child_result run_child(const options& o, std::chrono::system_clock::time_point start_at, std::vector<std::int64_t>& bins)
{
    child_result res;
    asio::io_context io(1);
    redis::connection_config cfg;
    cfg.port = static_cast<std::uint16_t>(o.port);
    redis::connection conn(io, cfg);
    if (!wait_connected(io, conn)) return res;
    redis::shared_options lo;
    lo.prefix = "bench";
    lo.on_failure = redis::failure_policy::fail_closed;   // a failing run shows as errors
    lo.lease_size = static_cast<std::uint64_t>(shared_lease);
    child_result res2;
    if (shared_limiter == "window") {
        // The same rate as a log of 100 ms windows (Q/10 a window, at least 1).
        const auto limit = static_cast<std::uint64_t>(std::max(1.0, std::floor(o.rate / 10)));
        redis::sliding_window<redis::connection> sw(conn, limit, std::chrono::milliseconds(100), lo);
        res2 = run_child_on(o, sw, io, start_at, bins);
    } else if (shared_limiter == "floor") {
        script_floor fl(conn);
        res2 = run_child_on(o, fl, io, start_at, bins);
    } else {
        redis::token_bucket<redis::connection> tb(conn, sluice::rate::per_second(o.rate), 1, lo);
        res2 = run_child_on(o, tb, io, start_at, bins);
    }
    conn.close();
    return res2;
}

struct wait_result {
    std::int64_t ok = 0;
    std::int64_t done = 0;
    std::int64_t errors = 0;
    std::int64_t waiting_reserved = 0;
    long rss_before_kib = 0;
    long rss_reserved_kib = 0;
    long max_rss_kib = 0;
    std::int64_t heap_before = 0;     // bytes in use (mallinfo2)
    std::int64_t heap_reserved = 0;
    double reserved_s = 0;
    double wall_s = 0;
    double cpu_total_s = 0;
    double cpu_wait_s = 0;
};

// --mode wait, in the forked child.
wait_result run_wait_child(const options& o)
{
    wait_result res;
    asio::io_context io(1);
    redis::connection_config cfg;
    cfg.port = static_cast<std::uint16_t>(o.port);
    cfg.command_timeout = std::chrono::seconds(30);   // W scripts queued on one link
    redis::connection conn(io, cfg);
    if (!wait_connected(io, conn)) return res;
    redis::shared_options lo;
    lo.prefix = "bench";
    lo.on_failure = redis::failure_policy::fail_closed;   // a failing run shows as errors
    redis::token_bucket<redis::connection> tb(conn, sluice::rate::per_second(o.rate), 1, lo);

    // The script is loaded before measuring (the first EVALSHA of a new server is NOSCRIPT).
    bool warm = false;
    tb.async_try_acquire("warm", 1, [&](boost::system::error_code, sluice::decision) { warm = true; });
    while (!warm) {
        io.restart();
        io.run_for(std::chrono::milliseconds(5));
    }

    // The next D seconds of the key go to another limiter first (two requests: the full
    // bucket, then the D seconds after it, which waits for its slot and is closed at the
    // end).
    const auto ahead_n = static_cast<std::uint64_t>(std::ceil(o.rate * o.seconds));
    redis::token_bucket<redis::connection> ahead(conn, sluice::rate::per_second(o.rate), ahead_n, lo);
    int ahead_done = 0;
    ahead.async_acquire("wait", ahead_n, std::chrono::nanoseconds(0), [&](boost::system::error_code) { ++ahead_done; });
    ahead.async_acquire("wait", ahead_n, std::chrono::duration_cast<std::chrono::nanoseconds>(
                                             std::chrono::duration<double>(o.seconds + 1)),
                        [&](boost::system::error_code) { ++ahead_done; });
    while (ahead_done == 0) {
        io.restart();
        io.run_for(std::chrono::milliseconds(5));
    }

    const std::int64_t W = o.waiters;
    struct counts {
        std::int64_t done = 0;
        std::int64_t errors = 0;
    } c;
    struct on_done {
        counts* c;
        void operator()(boost::system::error_code ec) const
        {
            ++c->done;
            if (ec) ++c->errors;
        }
    };
    res.rss_before_kib = rss_now_kib();
    res.heap_before = static_cast<std::int64_t>(::mallinfo2().uordblks);
    const double cpu0 = cpu_seconds();
    const auto t0 = steady::now();
    for (std::int64_t k = 0; k < W; ++k)
        tb.async_acquire("wait", 1, std::chrono::hours(1), on_done{&c});
    // Every reservation's reply is in once no command is in flight: poll the connection with
    // a PING behind them (replies come in order).
    bool ponged = false;
    conn.async_exec({"PING"}, [&](boost::system::error_code, redis::reply) { ponged = true; });
    while (!ponged && c.done < W) {
        io.restart();
        io.run_one_for(std::chrono::milliseconds(100));
    }
    const auto t1 = steady::now();
    res.rss_reserved_kib = rss_now_kib();
    res.heap_reserved = static_cast<std::int64_t>(::mallinfo2().uordblks);
    const double cpu1 = cpu_seconds();
    res.waiting_reserved = W - c.done;
    while (c.done < W) {
        io.restart();
        io.run_for(std::chrono::milliseconds(100));
    }
    const auto t2 = steady::now();
    const double cpu2 = cpu_seconds();
    res.max_rss_kib = max_rss_kib();
    res.reserved_s = std::chrono::duration<double>(t1 - t0).count();
    res.wall_s = std::chrono::duration<double>(t2 - t0).count();
    res.cpu_total_s = cpu2 - cpu0;
    res.cpu_wait_s = cpu2 - cpu1;
    res.done = c.done;
    res.errors = c.errors;
    res.ok = 1;
    tb.close();
    ahead.close();
    conn.close();
    return res;
}

int run_shared_wait(const options& o)
{
    if (o.waiters < 1 || !(o.rate > 0) || !(o.seconds > 0) || o.port < 1 || o.port > 65535 ||
        shared_limiter != "bucket") {
        std::fprintf(stderr, "sluice-bench: shared --mode wait: --waiters, --rate, --seconds and --port must be "
                             "positive; --limiter bucket only\n");
        return 2;
    }
    redis_process srv(o.port);
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
    pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
        ::close(fds[0]);
        wait_result r;
        try {
            r = run_wait_child(o);
        } catch (...) {
        }
        ::_exit(::write(fds[1], &r, sizeof r) == static_cast<ssize_t>(sizeof r) ? 0 : 3);
    }
    ::close(fds[1]);
    wait_result r;
    const bool got = ::read(fds[0], &r, sizeof r) == static_cast<ssize_t>(sizeof r) && r.ok;
    ::close(fds[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    srv.stop();
    if (!got) {
        std::fprintf(stderr, "sluice-bench: shared --mode wait: the run failed\n");
        return 1;
    }
    const double W = static_cast<double>(o.waiters);
    const double waiting = static_cast<double>(std::max<std::int64_t>(1, r.waiting_reserved));
    json_line()
        .add("scenario", "shared")
        .add("mode", "wait")
        .add("limiter", shared_limiter)
        .add("waiters", static_cast<long long>(o.waiters))
        .add("rate", o.rate)
        .add("ahead_s", o.seconds)
        .add("reserved_s", r.reserved_s)
        .add("waiting_reserved", static_cast<long long>(r.waiting_reserved))
        .add("wall_s", r.wall_s)
        .add("rss_before_kib", r.rss_before_kib)
        .add("rss_reserved_kib", r.rss_reserved_kib)
        .add("max_rss_kib", r.max_rss_kib)
        .add("bytes_per_waiter", static_cast<double>(r.rss_reserved_kib - r.rss_before_kib) * 1024 / waiting)
        .add("heap_bytes_per_waiter", static_cast<double>(r.heap_reserved - r.heap_before) / waiting)
        .add("bytes_per_request_peak", static_cast<double>(r.max_rss_kib - r.rss_before_kib) * 1024 / W)
        .add("cpu_us_per_request", r.cpu_total_s * 1e6 / W)
        .add("cpu_us_per_wait", r.cpu_wait_s * 1e6 / waiting)
        .add("completed", static_cast<long long>(r.done))
        .add("errors", static_cast<long long>(r.errors))
        .emit();
    return r.done == o.waiters && r.errors == 0 ? 0 : 1;
}

} // namespace

int run_shared_redis(const options& o)
{
    if (shared_mode == "wait")
        return run_shared_wait(o);
    if ((shared_mode != "try" && shared_mode != "acquire") ||
        (shared_limiter != "bucket" && shared_limiter != "window" && shared_limiter != "floor") ||
        (shared_limiter == "floor" && shared_mode != "try")) {
        std::fprintf(stderr, "sluice-bench: shared: --mode wants try, acquire or wait, --limiter bucket, window or floor "
                             "(floor: --mode try only)\n");
        return 2;
    }
    if (o.procs < 1 || o.concurrency < 1 || !(o.rate > 0) || !(o.seconds > 0) || o.port < 1 || o.port > 65535 ||
        shared_lease < 0) {
        std::fprintf(stderr, "sluice-bench: shared: --procs, --concurrency, --rate, --seconds and --port must be positive, --lease >= 0\n");
        return 2;
    }
    redis_process srv(o.port);
    return run_fleet(o, [&o](std::chrono::system_clock::time_point start_at, std::vector<std::int64_t>& bins) {
        return run_child(o, start_at, bins);
    }, "redis");
}

} // namespace sluice_bench
