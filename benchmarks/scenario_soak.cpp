// Scenario `soak` (a sluice addition): the Redis limiters for --seconds D at --rate R
// decisions per second (20000 in the closing notes) with a random fault every
// --fault-every S seconds (default 10), through the fault proxy of the tests
// (tests/fault_proxy.hpp) in front of a redis-server this scenario starts on
// 127.0.0.1:--port and stops by its pid.
//
// One process, one connection, two limiters, both fail_closed (so that every admission
// comes from Redis and the bounds below are exact): a redis::token_bucket of 500/s, burst
// 20 per key and a redis::sliding_window of 10 per 100 ms per key, 16 keys each. Of every
// ten decisions: five bucket tries, two bucket acquires (max_wait 50 ms), two window tries,
// one window acquire (max_wait 50 ms). They are issued on schedule (every millisecond, what
// is due), whatever is still in flight: a fault does not slow the load down.
//
// A fault lasts a third of the period, then everything is healed; one of (--faults, a comma
// list, default all): latency (20-40 ms each way), bandwidth (2 kB/s), drop, blackhole,
// reset (every connection reset while it lasts), reset_once (every open one, once), refuse,
// restart (the server restarted without persistence: every key's state lost), flushall
// (state lost), script_flush, oom (maxmemory 1 with noeviction), busy (a script of the
// scenario's own runs 1.5 s with busy-reply-threshold 100 ms).
//
// Checked, and printed with the numbers (exit status 1 when a check that does not depend on
// timing fails: lost, over_admitted, stats_agree, server_agrees):
// - lost: decisions started and never completed (after the last fault is healed and the
//   load stops, everything in flight gets command_timeout + max_wait + 5 s to end);
// - over_admitted: admissions beyond the bound of a one-second window, for their key:
//   counting those whose request started and completed within the window (decided on the
//   server within it), the limiter's own bound over 1 s, plus one burst (bucket) or one
//   limit (window) for each loss of every key's state (restart, flushall) that may have
//   fallen within it; worst_window_vs_bound is the highest count / bound seen;
// - stats_agree: each limiter's stats() count what the scenario saw (admitted requests,
//   requests answered, admitted tries);
// - server_agrees: the server's own count of script executions (INFO commandstats, summed
//   over restarts, less the scenario's own) lies between the commands the client saw
//   succeed and those it sent: nothing executed twice, nothing reported done that was not;
// - late_waits (timing, reported): completions later than their documented bound
//   (guide, "When Redis or the network fails": a try by command_timeout, an acquire by
//   max_wait + command_timeout) plus 50 ms; max_overrun_ms the worst of them;
//   late_by_kind and overrun_ms_by_kind the same per kind (bucket try, bucket acquire,
//   window try, window acquire);
// - rss_kib_*: resident memory at the first sample past a tenth of the run (warm), the
//   end, the peak sample; rss_growth_kib = end - warm. RSS keeps the peaks of a burst of
//   requests in flight (the allocator keeps what it got); heap_kib_* is the heap in use
//   (mallinfo2) at the same points: a leak grows it, a burst that ended does not.
// The proxy's own counts (connections, resets, dropped bytes) are printed beside.
//
// Prints one JSON line per period (phase "sample") and one at the end (phase "result").
#include "bench_common.hpp"
#include "bench_redis.hpp"

#include "../tests/fault_proxy.hpp"

#include <sluice/error.hpp>
#include <sluice/redis/connection.hpp>
#include <sluice/redis/sliding_window.hpp>
#include <sluice/redis/token_bucket.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <hiredis/hiredis.h>

#include <malloc.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace sluice_bench {

double soak_fault_every = 10;      // --fault-every S
std::int64_t soak_seed = 1;        // --seed N
std::string soak_faults = "all";   // --faults a,b,c

namespace {

namespace asio = boost::asio;
namespace redis = sluice::redis;
using steady = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr int keys = 16;
// Below what the load asks of each key (7/10 of R over 16 keys on the buckets, 3/10 on the
// windows: 875 and 375 a second at 20000/s), so that the limits bind.
constexpr double bucket_rate = 500;          // per key, per second
constexpr std::uint64_t bucket_burst = 20;
constexpr std::uint64_t window_limit = 10;   // per key, per window
constexpr auto window_length = 100ms;
constexpr auto max_wait = 50ms;
constexpr auto command_timeout = 200ms;
constexpr auto late_slack = 50ms;

// Admissions are checked in every window of one second: those whose request started and
// completed within the window were decided on the server within it, so their count is
// bounded by the limiter's own bound over one second (no allowance for round trips or
// stalls: they only make fewer requests fit).
constexpr auto check_window = 1s;

const std::vector<std::string> all_faults = {"latency", "bandwidth", "drop",    "blackhole", "reset",        "reset_once",
                                             "refuse",  "restart",   "flushall", "oom",      "script_flush", "busy"};

// A synchronous command on its own short-lived connection (the scenario's control of the
// server, never through the proxy). The reply as text ("" on failure).
std::string control(int port, const std::vector<std::string>& argv, int timeout_ms = 2000)
{
    timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    redisContext* c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (!c) return "";
    std::string out;
    if (!c->err) {
        redisSetTimeout(c, tv);
        std::vector<const char*> args;
        std::vector<std::size_t> lens;
        for (const auto& a : argv) {
            args.push_back(a.data());
            lens.push_back(a.size());
        }
        if (auto* r = static_cast<redisReply*>(redisCommandArgv(c, static_cast<int>(args.size()), args.data(), lens.data()))) {
            if (r->str) out.assign(r->str, r->len);
            freeReplyObject(r);
        }
    }
    redisFree(c);
    return out;
}

// Successful script executions the server has counted (EVALSHA and EVAL), from INFO
// commandstats: calls less failed_calls.
std::int64_t server_script_runs(int port)
{
    std::istringstream in(control(port, {"INFO", "commandstats"}));
    std::int64_t total = 0;
    for (std::string line; std::getline(in, line);) {
        if (line.rfind("cmdstat_evalsha:", 0) != 0 && line.rfind("cmdstat_eval:", 0) != 0) continue;
        auto field = [&](const std::string& name) -> std::int64_t {
            auto at = line.find(name + "=");
            return at == std::string::npos ? 0 : std::stoll(line.substr(at + name.size() + 1));
        };
        total += field("calls") - field("failed_calls");
    }
    return total;
}

// The admissions of one key that completed within the last check_window, as
// (completion, start) in completion order.
class recent_admissions {
public:
    // Records an admission that started at `start` and completes now; the admissions that
    // started and completed within the check_window ending now.
    std::int64_t add(steady::time_point start, steady::time_point now)
    {
        while (!q_.empty() && q_.front().first < now - check_window) q_.pop_front();
        q_.emplace_back(now, start);
        return std::count_if(q_.begin(), q_.end(), [&](const auto& e) { return e.second >= now - check_window; });
    }

private:
    std::deque<std::pair<steady::time_point, steady::time_point>> q_;
};

// A loss of every key's state (restart, flushall): it happened between `from` and `to`.
struct state_loss {
    steady::time_point from, to;
};

// The heap in use, KiB (what RSS keeps of a peak is not in use: this is).
long heap_in_use_kib() { return static_cast<long>(::mallinfo2().uordblks / 1024); }

// What one completion tells.
enum class kind { bucket_try, bucket_acquire, window_try, window_acquire };

struct counts {
    std::int64_t started = 0, completed = 0;
    std::int64_t admitted = 0, refused = 0, timed_out = 0;
    std::int64_t unavailable = 0, backend_error = 0, other_error = 0;
};

// The state the load and its completions share (all on the io_context's one thread).
struct load {
    std::array<counts, 4> by_kind;
    std::array<std::int64_t, keys> bucket_admitted{};
    std::array<std::int64_t, keys> window_admitted{};
    std::array<recent_admissions, keys> bucket_recent{};
    std::array<recent_admissions, keys> window_recent{};
    std::vector<state_loss> losses;
    std::int64_t over = 0;                    // admissions beyond the bound of their window
    double worst = 0;                         // the highest count / bound seen
    std::string first_over;                   // where the bound was first exceeded
    steady::time_point t0 = steady::now();
    std::int64_t late = 0;
    std::int64_t max_overrun_ns = 0;
    std::array<std::int64_t, 4> late_by_kind{};
    std::array<std::int64_t, 4> overrun_by_kind_ns{};
    std::int64_t outstanding_max = 0;
    bool foreign_error = false;   // an error of no category of sluice's

    std::int64_t outstanding() const
    {
        std::int64_t n = 0;
        for (const auto& c : by_kind) n += c.started - c.completed;
        return n;
    }
    std::int64_t decisions() const
    {
        std::int64_t n = 0;
        for (const auto& c : by_kind) n += c.completed;
        return n;
    }

    // The admissions of a key within the check_window ending now against their bound: the
    // limiter's own over check_window, plus one burst (limit) for each loss of state that
    // may have fallen within it.
    void check(bool bucket, int key, steady::time_point start)
    {
        const auto now = steady::now();
        const auto n = (bucket ? bucket_recent : window_recent)[static_cast<std::size_t>(key)].add(start, now);
        const auto lost = std::count_if(losses.begin(), losses.end(),
                                        [&](const state_loss& x) { return x.from <= now && x.to >= now - check_window; });
        const auto w = std::chrono::duration<double>(check_window).count();
        const double bound = bucket ? static_cast<double>(bucket_burst) * static_cast<double>(1 + lost) + bucket_rate * w
                                    : static_cast<double>(window_limit) *
                                          (static_cast<double>(1 + lost) + w / std::chrono::duration<double>(window_length).count());
        worst = std::max(worst, static_cast<double>(n) / bound);
        if (static_cast<double>(n) > bound && over++ == 0)
            first_over = std::string(bucket ? "bucket" : "window") + " key " + std::to_string(key) + ": " +
                         std::to_string(n) + " > " + std::to_string(bound) + " at " +
                         std::to_string(std::chrono::duration<double>(now - t0).count()) + " s";
    }

    void done(kind k, int key, steady::time_point start, const boost::system::error_code& ec, bool admitted)
    {
        auto& c = by_kind[static_cast<std::size_t>(k)];
        ++c.completed;
        const bool is_try = k == kind::bucket_try || k == kind::window_try;
        const auto bound = (is_try ? steady::duration(command_timeout) : steady::duration(max_wait + command_timeout)) + late_slack;
        const auto took = steady::now() - start;
        if (took > bound) {
            ++late;
            const auto over_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(took - bound).count();
            max_overrun_ns = std::max<std::int64_t>(max_overrun_ns, over_ns);
            ++late_by_kind[static_cast<std::size_t>(k)];
            auto& worst_ns = overrun_by_kind_ns[static_cast<std::size_t>(k)];
            worst_ns = std::max<std::int64_t>(worst_ns, over_ns);
        }
        if (!ec) {
            if (admitted) {
                ++c.admitted;
                const bool b = k == kind::bucket_try || k == kind::bucket_acquire;
                ++(b ? bucket_admitted : window_admitted)[static_cast<std::size_t>(key)];
                check(b, key, start);
            } else {
                ++c.refused;
            }
        } else if (ec == sluice::error::timed_out) {
            ++c.timed_out;
        } else if (ec == sluice::error::backend_unavailable) {
            ++c.unavailable;
        } else if (ec.category() == sluice::error_category()) {
            ++c.backend_error;
        } else {
            ++c.other_error;
            foreign_error = true;
        }
    }
};

// The faults, applied from a thread of their own (a restart blocks for a while).
class fault_driver {
public:
    // on_loss(x): every key's state was lost within x (called from the driver's thread).
    fault_driver(redis_process& srv, sluice_test::fault_proxy& proxy, std::vector<std::string> faults,
                 steady::duration every, std::uint64_t seed, std::function<void(state_loss)> on_loss)
        : srv_(srv), proxy_(proxy), faults_(std::move(faults)), every_(every), rng_(seed), on_loss_(std::move(on_loss))
    {
        thread_ = std::thread([this] { run(); });
    }
    fault_driver(const fault_driver&) = delete;
    fault_driver& operator=(const fault_driver&) = delete;
    ~fault_driver() { finish(); }

    // No fault from now on: returns once the one in progress is healed.
    void stop()
    {
        std::unique_lock lock(m_);
        stopping_ = true;
        cv_.notify_all();
        cv_.wait(lock, [this] { return idle_; });
    }

    // Ends the thread. Until then a server it restarted lives: the kernel stops it when
    // the thread that started it ends (PR_SET_PDEATHSIG follows the thread).
    void finish()
    {
        stop();
        {
            std::lock_guard lock(m_);
            finished_ = true;
        }
        cv_.notify_all();
        if (thread_.joinable()) thread_.join();
    }

    std::int64_t state_losses() const { return losses_.load(); }
    // Script executions of servers stopped so far, less the scenario's own.
    std::int64_t server_runs_before() const { return runs_before_.load(); }
    std::int64_t own_runs() const { return own_runs_.load(); }
    // Each fault and when it started (s after the driver): "restart@10.00,...".
    std::string log() const
    {
        std::lock_guard lock(m_);
        return log_;
    }
    std::map<std::string, int> applied() const
    {
        std::lock_guard lock(m_);
        return applied_;
    }

private:
    // Sleeps until `t` or stop(); false when stopping.
    bool sleep_until(steady::time_point t)
    {
        std::unique_lock lock(m_);
        return !cv_.wait_until(lock, t, [this] { return stopping_; });
    }

    void run()
    {
        auto next = steady::now() + every_;
        while (sleep_until(next)) {
            const std::string f = faults_[std::uniform_int_distribution<std::size_t>(0, faults_.size() - 1)(rng_)];
            {
                std::lock_guard lock(m_);
                ++applied_[f];
                char at[32];
                std::snprintf(at, sizeof at, "%.2f", std::chrono::duration<double>(steady::now() - t0_).count());
                log_ += (log_.empty() ? "" : ",") + f + "@" + at;
            }
            const auto heal_at = steady::now() + every_ / 3;
            apply(f);
            sleep_until(heal_at);
            heal(f);
            next += every_;
        }
        std::unique_lock lock(m_);
        idle_ = true;
        cv_.notify_all();
        cv_.wait(lock, [this] { return finished_; });
    }

    void apply(const std::string& f)
    {
        const int port = srv_.port();
        if (f == "latency") proxy_.set_latency(20ms, 20ms);
        else if (f == "bandwidth") proxy_.set_bandwidth(2000);
        else if (f == "drop") proxy_.set_drop(true);
        else if (f == "blackhole") proxy_.set_black_hole(true);
        else if (f == "reset") proxy_.set_reset(true);
        else if (f == "reset_once") proxy_.reset_all();
        else if (f == "refuse") proxy_.set_refuse(true);
        else if (f == "restart") {
            // Nothing reaches the old server while its count is read (so that every script
            // it ran is counted), then a new, empty one.
            proxy_.set_drop(true);
            std::this_thread::sleep_for(50ms);
            runs_before_ += server_script_runs(port);
            const auto from = steady::now();
            srv_.restart();
            on_loss_({from, steady::now()});
            ++losses_;
        } else if (f == "flushall") {
            const auto from = steady::now();
            control(port, {"FLUSHALL"});
            on_loss_({from, steady::now()});
            ++losses_;
        } else if (f == "script_flush") {
            control(port, {"SCRIPT", "FLUSH"});
        } else if (f == "oom") {
            control(port, {"CONFIG", "SET", "maxmemory-policy", "noeviction"});
            control(port, {"CONFIG", "SET", "maxmemory", "1"});
        } else if (f == "busy") {
            control(port, {"CONFIG", "SET", "busy-reply-threshold", "100"});
            ++own_runs_;
            control(port, {"EVAL", "local t = redis.call('TIME') local e = t[1] * 1e6 + t[2] + 1500000 "
                                   "while true do t = redis.call('TIME') if t[1] * 1e6 + t[2] >= e then break end end "
                                   "return 1", "0"}, 5000);
        }
    }

    void heal(const std::string& f)
    {
        const int port = srv_.port();
        proxy_.heal();
        if (f == "oom") control(port, {"CONFIG", "SET", "maxmemory", "0"});
        if (f == "busy") control(port, {"CONFIG", "SET", "busy-reply-threshold", "5000"});
    }

    redis_process& srv_;
    sluice_test::fault_proxy& proxy_;
    std::vector<std::string> faults_;
    steady::duration every_;
    std::mt19937_64 rng_;
    std::function<void(state_loss)> on_loss_;
    mutable std::mutex m_;
    std::condition_variable cv_;
    bool stopping_ = false;
    bool idle_ = false;       // the loop has ended, every fault healed
    bool finished_ = false;
    std::map<std::string, int> applied_;
    std::string log_;
    steady::time_point t0_ = steady::now();
    std::atomic<std::int64_t> losses_{0};
    std::atomic<std::int64_t> runs_before_{0};
    std::atomic<std::int64_t> own_runs_{0};
    std::thread thread_;
};

std::vector<std::string> parse_faults(const std::string& list)
{
    if (list == "all") return all_faults;
    std::vector<std::string> out;
    std::istringstream in(list);
    for (std::string f; std::getline(in, f, ',');) {
        if (std::find(all_faults.begin(), all_faults.end(), f) == all_faults.end())
            throw std::invalid_argument("unknown fault '" + f + "' (--faults takes a comma list of: latency, bandwidth, "
                                        "drop, blackhole, reset, reset_once, refuse, restart, flushall, oom, "
                                        "script_flush, busy, or all)");
        out.push_back(f);
    }
    if (out.empty()) throw std::invalid_argument("--faults is empty");
    return out;
}

} // namespace

int run_soak(const options& o)
{
    if (!(o.seconds > 0) || !(o.rate > 0) || !(soak_fault_every > 0) || o.port <= 0 || o.port > 65535) {
        std::fprintf(stderr, "sluice-bench: soak: --seconds, --rate and --fault-every must be positive, --port a port\n");
        return 2;
    }
    const auto faults = parse_faults(soak_faults);
    const auto every = std::chrono::duration_cast<steady::duration>(std::chrono::duration<double>(soak_fault_every));

    redis_process srv(o.port);
    sluice_test::fault_proxy proxy(static_cast<std::uint16_t>(o.port));
    asio::io_context io;
    auto cfg = proxy.config();
    cfg.connect_timeout = command_timeout;
    cfg.command_timeout = command_timeout;
    cfg.reconnect_min = 20ms;
    cfg.reconnect_max = 500ms;
    redis::connection conn(io, cfg);
    redis::shared_options so;
    so.on_failure = redis::failure_policy::fail_closed;
    so.probe_interval = 100ms;
    redis::token_bucket<redis::connection> bucket(conn, sluice::rate::per_second(bucket_rate), bucket_burst, so);
    redis::sliding_window<redis::connection> window(conn, window_limit, window_length, so);

    std::vector<std::string> bucket_keys, window_keys;
    for (int k = 0; k < keys; ++k) {
        bucket_keys.push_back("soak:b" + std::to_string(k));
        window_keys.push_back("soak:w" + std::to_string(k));
    }

    // Connected before the clock starts.
    {
        asio::steady_timer poll(io);
        const auto deadline = steady::now() + 10s;
        std::function<void()> arm = [&] {
            poll.expires_after(5ms);
            poll.async_wait([&](boost::system::error_code ec) {
                if (!ec) arm();
            });
        };
        arm();
        while (!conn.connected() && steady::now() < deadline) io.run_one();
        poll.cancel();
        io.poll();   // the cancelled wait's handler
        if (!conn.connected()) throw std::runtime_error("no connection to redis-server through the proxy");
    }

    load l;
    std::int64_t issued = 0;
    const auto start = steady::now();
    l.t0 = start;
    const auto stop_at = start + std::chrono::duration_cast<steady::duration>(std::chrono::duration<double>(o.seconds));
    long rss_warm = -1, rss_peak = 0, heap_warm = -1;
    auto issue = [&](std::int64_t i) {
        const int key = static_cast<int>((i / 10) % keys);
        const auto t0 = steady::now();
        switch (i % 10) {
        case 0: case 1: case 2: case 3: case 4:
            ++l.by_kind[0].started;
            bucket.async_try_acquire(bucket_keys[key], 1, [&l, key, t0](boost::system::error_code ec, sluice::decision d) {
                l.done(kind::bucket_try, key, t0, ec, d.admitted);
            });
            break;
        case 5: case 6:
            ++l.by_kind[1].started;
            bucket.async_acquire(bucket_keys[key], 1, max_wait, [&l, key, t0](boost::system::error_code ec) {
                l.done(kind::bucket_acquire, key, t0, ec, true);
            });
            break;
        case 7: case 8:
            ++l.by_kind[2].started;
            window.async_try_acquire(window_keys[key], 1, [&l, key, t0](boost::system::error_code ec, sluice::decision d) {
                l.done(kind::window_try, key, t0, ec, d.admitted);
            });
            break;
        default:
            ++l.by_kind[3].started;
            window.async_acquire(window_keys[key], 1, max_wait, [&l, key, t0](boost::system::error_code ec) {
                l.done(kind::window_acquire, key, t0, ec, true);
            });
            break;
        }
    };

    // The load: every millisecond, what is due.
    asio::steady_timer tick(io);
    std::function<void()> on_tick = [&] {
        const auto now = steady::now();
        if (now >= stop_at) return;
        const auto due = static_cast<std::int64_t>(o.rate * std::chrono::duration<double>(now - start).count());
        while (issued < due) issue(issued++);
        l.outstanding_max = std::max(l.outstanding_max, l.outstanding());
        tick.expires_at(now + 1ms);
        tick.async_wait([&](boost::system::error_code) { on_tick(); });
    };

    // A sample every period, mid-way between two faults' starts.
    asio::steady_timer sampler(io);
    std::int64_t period = 0;
    std::function<void()> on_sample = [&] {
        ++period;
        const long rss = rss_now_kib();
        // Warm: the first sample past a tenth of the run.
        const long heap = heap_in_use_kib();
        if (rss_warm < 0 && steady::now() - start >= (stop_at - start) / 10) {
            rss_warm = rss;
            heap_warm = heap;
        }
        rss_peak = std::max(rss_peak, rss);
        const auto p = proxy.stats();
        json_line()
            .add("scenario", "soak")
            .add("phase", "sample")
            .add("t_s", std::chrono::duration<double>(steady::now() - start).count())
            .add("decisions", static_cast<long long>(l.decisions()))
            .add("outstanding", static_cast<long long>(l.outstanding()))
            .add("rss_kib", rss)
            .add("heap_kib", heap)
            .add("late_waits", static_cast<long long>(l.late))
            .add("proxy_connections", static_cast<unsigned long long>(p.connections))
            .emit();
        if (steady::now() + every < stop_at) {
            sampler.expires_at(start + (period + 1) * every - every / 2);
            sampler.async_wait([&](boost::system::error_code) { on_sample(); });
        }
    };
    sampler.expires_at(start + every / 2);
    sampler.async_wait([&](boost::system::error_code) { on_sample(); });

    const double cpu0 = cpu_seconds();
    fault_driver driver(srv, proxy, faults, every, static_cast<std::uint64_t>(soak_seed), [&](state_loss x) {
        asio::post(io, [&l, x] { l.losses.push_back(x); });
    });
    on_tick();
    // The load runs until stop_at; the faults too, then everything is healed.
    asio::steady_timer end_of_load(io);
    end_of_load.expires_at(stop_at);
    end_of_load.async_wait([&](boost::system::error_code) {
        driver.stop();
        proxy.heal();
    });
    // Then what is in flight gets its bound and a reconnection to end.
    asio::steady_timer drain(io);
    drain.expires_at(stop_at + max_wait + command_timeout + 5s);
    drain.async_wait([&](boost::system::error_code) { io.stop(); });
    std::function<void()> watch;
    asio::steady_timer watcher(io);
    watch = [&] {
        if (steady::now() > stop_at && l.outstanding() == 0) return io.stop();
        watcher.expires_after(10ms);
        watcher.async_wait([&](boost::system::error_code) { watch(); });
    };
    watch();
    io.run();
    driver.stop();   // (the servers it restarted live until finish())
    const double elapsed = std::chrono::duration<double>(steady::now() - start).count();
    const double cpu = cpu_seconds() - cpu0;
    const std::int64_t lost = l.outstanding();

    // The busiest keys over the whole run (their bounds are checked window by window).
    const auto losses = driver.state_losses();
    const std::int64_t bucket_max = *std::max_element(l.bucket_admitted.begin(), l.bucket_admitted.end());
    const std::int64_t window_max = *std::max_element(l.window_admitted.begin(), l.window_admitted.end());

    // The limiters' own counts against what the scenario saw.
    const auto bs = bucket.stats();
    const auto ws = window.stats();
    auto answered = [](const sluice::limiter_stats& s) {
        return static_cast<std::int64_t>(s.admitted + s.refused + s.timed_out + s.cancelled + s.closed);
    };
    const bool stats_agree = static_cast<std::int64_t>(bs.admitted) == l.by_kind[1].admitted &&
                             answered(bs) == l.by_kind[1].completed &&
                             static_cast<std::int64_t>(bs.try_admitted) == l.by_kind[0].admitted &&
                             static_cast<std::int64_t>(ws.admitted) == l.by_kind[3].admitted &&
                             answered(ws) == l.by_kind[3].completed &&
                             static_cast<std::int64_t>(ws.try_admitted) == l.by_kind[2].admitted;

    // The server's count of script runs against the client's.
    const std::int64_t server_runs = driver.server_runs_before() + server_script_runs(o.port) - driver.own_runs();
    const auto commands = static_cast<std::int64_t>(bs.backend.commands + ws.backend.commands);
    const auto errors = static_cast<std::int64_t>(bs.backend.errors + ws.backend.errors);
    const bool server_agrees = commands - errors <= server_runs && server_runs <= commands;
    driver.finish();

    // In use at the end, before the limiters close (what they hold is part of it).
    const long heap_end = heap_in_use_kib();
    bucket.close();
    window.close();
    const long rss_end = rss_now_kib();
    rss_peak = std::max(rss_peak, rss_end);
    if (rss_warm < 0) rss_warm = rss_end;
    if (heap_warm < 0) heap_warm = heap_end;

    std::string applied;
    int fault_count = 0;
    for (const auto& [name, n] : driver.applied()) {
        applied += (applied.empty() ? "" : ",") + name + ":" + std::to_string(n);
        fault_count += n;
    }
    counts all;
    for (const auto& c : l.by_kind) {
        all.admitted += c.admitted;
        all.refused += c.refused;
        all.timed_out += c.timed_out;
        all.unavailable += c.unavailable;
        all.backend_error += c.backend_error;
        all.other_error += c.other_error;
    }
    const auto p = proxy.stats();
    const bool ok = lost == 0 && l.over == 0 && stats_agree && server_agrees && !l.foreign_error;
    json_line()
        .add("scenario", "soak")
        .add("phase", "result")
        .add("seconds", o.seconds)
        .add("rate", o.rate)
        .add("fault_every_s", soak_fault_every)
        .add("seed", static_cast<long long>(soak_seed))
        .add("faults", static_cast<long long>(fault_count))
        .add("faults_applied", applied)
        .add("decisions", static_cast<long long>(l.decisions()))
        .add("decisions_per_s", static_cast<double>(l.decisions()) / elapsed)
        .add("cpu_us_per_decision", l.decisions() > 0 ? cpu * 1e6 / static_cast<double>(l.decisions()) : 0.0)
        .add("admitted", static_cast<long long>(all.admitted))
        .add("refused", static_cast<long long>(all.refused))
        .add("timed_out", static_cast<long long>(all.timed_out))
        .add("backend_unavailable", static_cast<long long>(all.unavailable))
        .add("backend_error", static_cast<long long>(all.backend_error))
        .add("foreign_errors", static_cast<long long>(all.other_error))
        .add("lost", static_cast<long long>(lost))
        .add("outstanding_max", static_cast<long long>(l.outstanding_max))
        .add("state_losses", static_cast<long long>(losses))
        .add("bucket_key_admitted_max", static_cast<long long>(bucket_max))
        .add("window_key_admitted_max", static_cast<long long>(window_max))
        .add("over_admitted", static_cast<long long>(l.over))
        .add("worst_window_vs_bound", l.worst)
        .add("first_over", l.first_over)
        .add("late_waits", static_cast<long long>(l.late))
        .add("max_overrun_ms", static_cast<double>(l.max_overrun_ns) / 1e6)
        .add("late_by_kind", std::to_string(l.late_by_kind[0]) + "," + std::to_string(l.late_by_kind[1]) + "," +
                                 std::to_string(l.late_by_kind[2]) + "," + std::to_string(l.late_by_kind[3]))
        .add("overrun_ms_by_kind", std::to_string(l.overrun_by_kind_ns[0] / 1'000'000) + "," +
                                       std::to_string(l.overrun_by_kind_ns[1] / 1'000'000) + "," +
                                       std::to_string(l.overrun_by_kind_ns[2] / 1'000'000) + "," +
                                       std::to_string(l.overrun_by_kind_ns[3] / 1'000'000))
        .add("stats_agree", stats_agree)
        .add("commands", static_cast<long long>(commands))
        .add("command_errors", static_cast<long long>(errors))
        .add("server_script_runs", static_cast<long long>(server_runs))
        .add("server_agrees", server_agrees)
        .add("rss_kib_warm", rss_warm)
        .add("rss_kib_end", rss_end)
        .add("rss_kib_peak", rss_peak)
        .add("rss_growth_kib", rss_end - rss_warm)
        .add("heap_kib_warm", heap_warm)
        .add("heap_kib_end", heap_end)
        .add("heap_growth_kib", heap_end - heap_warm)
        .add("proxy_connections", static_cast<unsigned long long>(p.connections))
        .add("proxy_resets", static_cast<unsigned long long>(p.resets))
        .add("proxy_black_holed", static_cast<unsigned long long>(p.black_holed))
        .add("proxy_dropped_bytes", static_cast<unsigned long long>(p.dropped))
        .add("fault_log", driver.log())
        .add("ok", ok)
        .emit();
    return ok ? 0 : 1;
}

} // namespace sluice_bench
