// Scenario `fanout` (protocol v1): --waiters W concurrent waiters on ONE leaky bucket at
// --rate R per second with burst 1 and slack 0 (exact spacing); each acquires once, all
// start at once. One io_context, one thread (concurrency hint 1).
//
//   --waiter coroutine (default): W coroutines (co_spawn, detached), each
//       co_await gate; co_await bucket.async_acquire(1, wait_forever, use_awaitable);
//   --waiter callback: W plain completion handlers (a pointer and an index), started by
//       one posted function; no coroutine frame at all.
//   --policy floor: the same W waiters with NO limiter: waiter k awaits its own
//       steady_timer set to gate + k/R (the schedule the limiter would give it). What
//       Asio itself costs for W timed waits: the floor of CPU and memory per waiter.
//   --policy queue: the same W waiters with NO limiter on ONE timer: each parks its
//       handler in a FIFO, and a timer that wakes at most every --coalesce-us (200 us)
//       resumes, in order, every waiter whose slot (first park + k/R) has come, calling
//       its handler directly. No arithmetic, no lock, no cancellation, no statistics:
//       the least any one-timer engine (sluice's among them) can cost a waiter on Asio.
//
// Start gate: every coroutine is spawned first and parks at the gate; opening it lets the
// first 256 waiters go, and the last of them lets the next 256 go before it acquires, so
// the waiters start in order right away (a batch, not one a time: each post is a round
// of the scheduler, with its epoll_wait). (A timer cancelled with W waits on it would queue
// all W completions before the first waiter runs, a delay charged to the rate of the
// limiter, whose schedule starts at the first acquire, but not to the floor's, whose timers
// are set from the gate.)
// wall_s runs from the gate opening to the last completion (the clock is read in each
// waiter right after it resumes); first_acquire_s from the gate to the first acquire. spawn_s is the time to create and park all waiters
// (0 for callbacks: they have nothing to create before the gate), wall_incl_spawn_s is
// spawn_s + wall_s, as the Go peer's wall (it includes starting its goroutines).
// cpu_us_per_acquire: process CPU from the gate to the last completion / W;
// cpu_us_per_acquire_incl_spawn from before the first spawn (as the Go peer).
// achieved_rate = (W - 1) / (last completion - first completion).
// --clock default|steady|tsc|coarse: the leaky bucket's Clock, default sluice::default_clock
// (the floor and the measurements stay on steady_clock).
#include "bench_common.hpp"

#include <sluice/leaky_bucket.hpp>
#include <sluice/rate.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sluice_bench {

// --waiter coroutine|callback: set by the parser in sluice_bench.cpp (the shared options
// struct has no field for it).
std::string fanout_waiter = "coroutine";
// --coalesce-us N: the bucket's limiter_options::coalesce (-1: the default, 200 us).
std::int64_t fanout_coalesce_us = -1;
// --coalesce-max-us N: the bucket's limiter_options::coalesce_max (-1: the default, 1 ms).
std::int64_t fanout_coalesce_max_us = -1;

namespace {

namespace asio = boost::asio;

#ifdef BOOST_ASIO_HAS_IO_URING
constexpr bool uses_io_uring = true;
#else
constexpr bool uses_io_uring = false;
#endif

std::int64_t now_ns() noexcept
{
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// Current resident set size, KiB (/proc/self/statm, second field in pages).
long rss_now_kib()
{
    std::ifstream f("/proc/self/statm");
    long size = 0, resident = 0;
    f >> size >> resident;
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

struct stats {
    std::int64_t first = std::numeric_limits<std::int64_t>::max();
    std::int64_t last = std::numeric_limits<std::int64_t>::min();
    std::int64_t done = 0;
    std::int64_t errors = 0;
    std::vector<std::int64_t>* trace = nullptr;   // --trace: every completion time

    void record(bool ok) noexcept
    {
        std::int64_t t = now_ns();
        if (trace) trace->push_back(t);
        if (t < first) first = t;
        if (t > last) last = t;
        ++done;
        if (!ok) ++errors;
    }
};

// A parked completion handler of signature void(), type-erased: the gate's and the
// queue's waiters.
struct parked_base {
    virtual ~parked_base() = default;
    virtual void resume() = 0;
};

template <class Handler>
struct parked final : parked_base {
    explicit parked(Handler&& h) : handler(std::move(h)) {}
    void resume() override { std::move(handler)(); }
    Handler handler;
};

// Waiters park here (each a coroutine's completion handler) and leave one at a time.
class chain_gate {
public:
    explicit chain_gate(asio::io_context& io) : io_(io) {}

    template <class Token>
    auto async_wait(Token&& token)
    {
        return asio::async_initiate<Token, void()>(
            [this](auto h) { parked_.push_back(std::make_unique<parked<decltype(h)>>(std::move(h))); }, token);
    }

    // Lets the next batch of parked waiters go (posted: they resume on the io_context's
    // thread), once every waiter let go before has passed.
    void pass()
    {
        if (++passed_ == next_)
            let_go();
    }

    // Opens the gate: the first batch goes.
    void open() { let_go(); }

private:
    asio::io_context& io_;
    void let_go()
    {
        for (std::size_t end = std::min(parked_.size(), next_ + batch); next_ < end; ++next_)
            asio::post(io_, [p = std::move(parked_[next_])] { p->resume(); });
    }

    static constexpr std::size_t batch = 256;
    std::vector<std::unique_ptr<parked_base>> parked_;
    std::size_t next_ = 0;     // parked_[0, next_) have been let go
    std::size_t passed_ = 0;   // of which this many have passed
};

// --policy queue: waiters resumed in order at their slots by one timer (see the top).
class ideal_queue {
public:
    ideal_queue(asio::io_context& io, double rate, std::chrono::nanoseconds coalesce)
        : timer_(io), interval_(1e9 / rate), coalesce_(coalesce.count())
    {
    }

    template <class Token>
    auto async_wait(Token&& token)
    {
        return asio::async_initiate<Token, void()>(
            [this](auto h) {
                if (parked_.empty()) start_ = now_ns();
                parked_.push_back(std::make_unique<parked<decltype(h)>>(std::move(h)));
                if (!armed_) arm();
            },
            token);
    }

private:
    std::int64_t slot(std::size_t k) const noexcept
    {
        return start_ + static_cast<std::int64_t>(static_cast<double>(k) * interval_);
    }

    void arm()
    {
        armed_ = true;
        timer_.expires_at(asio::steady_timer::time_point(
            std::chrono::nanoseconds(std::max(slot(next_), last_wake_ + coalesce_))));
        timer_.async_wait([this](boost::system::error_code) { on_timer(); });
    }

    void on_timer()
    {
        armed_ = false;
        last_wake_ = now_ns();
        while (next_ < parked_.size() && slot(next_) <= last_wake_) {
            auto p = std::move(parked_[next_++]);
            p->resume();
        }
        if (next_ < parked_.size() && !armed_) arm();
    }

    asio::steady_timer timer_;
    double interval_;
    std::int64_t coalesce_;
    std::vector<std::unique_ptr<parked_base>> parked_;
    std::size_t next_ = 0;   // parked_[0, next_) resumed
    std::int64_t start_ = 0;
    std::int64_t last_wake_ = 0;
    bool armed_ = false;
};

template <class Clock>
struct run_ctx {
    using bucket_type = sluice::leaky_bucket<Clock>;
    asio::io_context& io;
    bucket_type* bucket = nullptr;   // null for the floor and the queue
    ideal_queue* queue = nullptr;    // --policy queue
    chain_gate gate;
    stats st;
    std::int64_t gate_ns = 0;
    std::int64_t first_acquire_ns = 0;
    double rate = 0;

    explicit run_ctx(asio::io_context& i) : io(i), gate(i) {}

    // A waiter past the gate: the next one may go, and the first acquire is noted.
    void passed()
    {
        if (first_acquire_ns == 0) first_acquire_ns = now_ns();
        gate.pass();
    }
};

template <class Clock>
asio::awaitable<void> coro_waiter(run_ctx<Clock>& c)
{
    co_await c.gate.async_wait(asio::use_awaitable);
    c.passed();
    auto [ec] = co_await c.bucket->async_acquire(1, sluice::wait_forever, asio::as_tuple(asio::use_awaitable));
    c.st.record(!ec);
}

template <class Clock>
asio::awaitable<void> coro_floor(run_ctx<Clock>& c, std::int64_t k)
{
    co_await c.gate.async_wait(asio::use_awaitable);
    c.passed();
    asio::steady_timer t(c.io);
    t.expires_at(asio::steady_timer::time_point(std::chrono::nanoseconds(
        c.gate_ns + static_cast<std::int64_t>(static_cast<double>(k) * 1e9 / c.rate))));
    auto [ec] = co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
    c.st.record(!ec);
}

template <class Clock>
asio::awaitable<void> coro_queue(run_ctx<Clock>& c)
{
    co_await c.gate.async_wait(asio::use_awaitable);
    c.passed();
    co_await c.queue->async_wait(asio::use_awaitable);
    c.st.record(true);
}

template <class Clock>
struct callback_handler {
    run_ctx<Clock>* c;
    void operator()(boost::system::error_code ec) const { c->st.record(!ec); }
    void operator()() const { c->st.record(true); }   // the queue's waiters
};

template <class Clock>
struct floor_callback_handler {
    run_ctx<Clock>* c;
    void operator()(boost::system::error_code ec) const { c->st.record(!ec); }
};

enum class engine { leaky, floor, queue };

template <class Clock>
int run_fanout_on(const options& o, bool callback, engine e)
{
    const std::int64_t W = o.waiters;
    const bool floor = e == engine::floor;

    asio::io_context io(1);
    run_ctx<Clock> c(io);
    std::vector<std::int64_t> trace;
    if (!o.trace.empty()) {
        trace.reserve(static_cast<std::size_t>(W));
        c.st.trace = &trace;
    }
    c.rate = o.rate;
    std::optional<typename run_ctx<Clock>::bucket_type> bucket;
    std::optional<ideal_queue> queue;
    sluice::limiter_options lo;
    if (fanout_coalesce_us >= 0) lo.coalesce = std::chrono::microseconds(fanout_coalesce_us);
    if (fanout_coalesce_max_us >= 0) lo.coalesce_max = std::chrono::microseconds(fanout_coalesce_max_us);
    if (e == engine::leaky) {
        bucket.emplace(io, sluice::rate::per_second(o.rate), std::chrono::nanoseconds(0), lo);
        c.bucket = &*bucket;
    } else if (e == engine::queue) {
        queue.emplace(io, o.rate, lo.coalesce);
        c.queue = &*queue;
    }
    std::vector<asio::steady_timer> floor_timers;   // callback floor: one timer per waiter

    const double cpu0 = cpu_seconds();
    const std::int64_t spawn0 = now_ns();
    double cpu_gate = 0;
    long rss_gate = 0;

    if (!callback) {
        for (std::int64_t k = 0; k < W; ++k) {
            if (floor)
                asio::co_spawn(io, coro_floor(c, k), asio::detached);
            else if (e == engine::queue)
                asio::co_spawn(io, coro_queue(c), asio::detached);
            else
                asio::co_spawn(io, coro_waiter(c), asio::detached);
        }
        // co_spawn posts each start; this runs after every coroutine has parked on the gate.
        asio::post(io, [&] {
            rss_gate = rss_now_kib();
            cpu_gate = cpu_seconds();
            c.gate_ns = now_ns();
            c.gate.open();
        });
    } else {
        if (floor) floor_timers.reserve(static_cast<std::size_t>(W));
        asio::post(io, [&] {
            rss_gate = rss_now_kib();
            cpu_gate = cpu_seconds();
            c.gate_ns = now_ns();
            c.first_acquire_ns = c.gate_ns;
            for (std::int64_t k = 0; k < W; ++k) {
                if (floor) {
                    auto& t = floor_timers.emplace_back(io);
                    t.expires_at(asio::steady_timer::time_point(std::chrono::nanoseconds(
                        c.gate_ns + static_cast<std::int64_t>(static_cast<double>(k) * 1e9 / c.rate))));
                    t.async_wait(floor_callback_handler<Clock>{&c});
                } else if (e == engine::queue) {
                    c.queue->async_wait(callback_handler<Clock>{&c});
                } else {
                    c.bucket->async_acquire(1, sluice::wait_forever, callback_handler<Clock>{&c});
                }
            }
        });
    }
    io.run();
    if (!o.trace.empty()) {
        for (auto& t : trace) t -= c.gate_ns;   // since the gate opened
        if (!write_trace(o.trace, trace)) return 1;
    }
    const double cpu1 = cpu_seconds();
    const long rss_max = max_rss_kib();

    if (c.st.done != W)
        std::fprintf(stderr, "sluice-bench: fanout: %lld of %lld waiters completed\n",
                     static_cast<long long>(c.st.done), static_cast<long long>(W));

    const double spawn_s = callback ? 0.0 : static_cast<double>(c.gate_ns - spawn0) / 1e9;
    const double wall = static_cast<double>(c.st.last - c.gate_ns) / 1e9;
    const double wall_incl = static_cast<double>(c.st.last - (callback ? c.gate_ns : spawn0)) / 1e9;
    const double ideal = static_cast<double>(W - 1) / o.rate;
    const double span = static_cast<double>(c.st.last - c.st.first) / 1e9;

    json_line j;
    j.add("scenario", "fanout")
        .add("policy", floor ? "floor" : e == engine::queue ? "queue" : "leaky")
        .add("waiter", callback ? "callback" : "coroutine")
        .add("clock", clock_read(o.clock))
        .add("clock_type", clock_type(o.clock))
        .add("coalesce_us", static_cast<long long>(fanout_coalesce_us < 0 ? sluice::limiter_options{}.coalesce.count() / 1000
                                                                          : fanout_coalesce_us))
        .add("coalesce_max_us", static_cast<long long>(lo.coalesce_max.count() / 1000))
        .add("clock_ns", clock_read_ns(o.clock))
        .add("waiters", static_cast<long long>(W))
        .add("rate", o.rate)
        .add("wall_s", wall)
        .add("ideal_s", ideal)
        .add("rate_error", (ideal - wall) / wall)
        .add("cpu_us_per_acquire", (cpu1 - cpu_gate) * 1e6 / static_cast<double>(W))
        .add("max_rss_kib", rss_max)
        .add("spawn_s", spawn_s)
        .add("wall_incl_spawn_s", wall_incl)
        .add("rate_error_incl_spawn", (ideal - wall_incl) / wall_incl)
        .add("cpu_us_per_acquire_incl_spawn", (cpu1 - cpu0) * 1e6 / static_cast<double>(W))
        .add("achieved_rate", static_cast<double>(W - 1) / span)
        .add("first_acquire_s", static_cast<double>(c.first_acquire_ns - c.gate_ns) / 1e9)
        .add("first_release_s", static_cast<double>(c.st.first - c.gate_ns) / 1e9)
        .add("rss_at_gate_kib", rss_gate)
        .add("errors", static_cast<long long>(c.st.errors))
        .add("io_uring", uses_io_uring);
    j.emit();
    return c.st.done == W && c.st.errors == 0 ? 0 : 1;
}

} // namespace

int run_fanout(const options& o)
{
    const bool callback = fanout_waiter == "callback";
    const engine e = o.policy == "floor" ? engine::floor : o.policy == "queue" ? engine::queue : engine::leaky;
    if (!callback && fanout_waiter != "coroutine") {
        std::fprintf(stderr, "sluice-bench: fanout: --waiter coroutine|callback, got '%s'\n", fanout_waiter.c_str());
        return 2;
    }
    if (e == engine::leaky && o.policy != "leaky" && o.policy != "gcra") {
        // "gcra" is the default of --policy for `try`; fanout's limiter is the leaky bucket.
        std::fprintf(stderr, "sluice-bench: fanout: --policy leaky (default), floor or queue, got '%s'\n", o.policy.c_str());
        return 2;
    }
    if (o.waiters < 2 || !(o.rate > 0)) {
        std::fprintf(stderr, "sluice-bench: fanout needs --waiters >= 2 and --rate > 0\n");
        return 2;
    }
    return with_clock(o.clock, [&]<class Clock>(std::type_identity<Clock>) { return run_fanout_on<Clock>(o, callback, e); });
}

} // namespace sluice_bench
