// Scenario `shared --backend shm`: the fleet of scenario `shared` (the same processes,
// callers, modes and JSON keys) on ONE sluice::shm::token_bucket of --rate Q per second,
// burst 1, in a shared-memory segment that every process attaches to: no server, no round
// trip. The segment is removed before and after the run. The limiter's clock is --clock
// (default: sluice::default_clock, what a user who names none gets). --lease and
// --limiter window do not apply; --mode try (async_try_acquire) or acquire (async_acquire,
// 1 s max_wait). --coalesce-us / --coalesce-max-us: each process's limiter_options (as in
// scenario fanout).
// --limiter floor (--mode try): the least a try can cost in this fleet, for what burst 1
// lets any design admit on this machine. Each process reads the clock and compare-and-swaps
// one word of shared memory (GCRA's theoretical arrival time, burst 1, as the bucket) in
// a bare loop: no Asio, no limiter, no segment. A permit whose instant falls while no
// process of the fleet is on a CPU to ask (an interrupt, the hypervisor's own work) is
// lost to every design alike.
#include "shared_fleet.hpp"

#include <sluice/shm/token_bucket.hpp>

#include <atomic>
#include <cstdio>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <string_view>

#include <sys/mman.h>
#include <unistd.h>

namespace sluice_bench {

extern std::int64_t fanout_coalesce_us;       // scenario_fanout.cpp: --coalesce-us N
extern std::int64_t fanout_coalesce_max_us;   // scenario_fanout.cpp: --coalesce-max-us N

namespace {

// The fleet's loop names a key (the Redis limiters'); a single bucket has none.
template <class Limiter>
struct unkeyed {
    Limiter& l;

    template <class Handler>
    void async_try_acquire(std::string_view, std::uint64_t n, Handler&& h)
    {
        l.async_try_acquire(n, std::forward<Handler>(h));
    }

    template <class Handler>
    void async_acquire(std::string_view, std::uint64_t n, std::chrono::nanoseconds max_wait, Handler&& h)
    {
        l.async_acquire(n, max_wait, std::forward<Handler>(h));
    }

    sluice::limiter_stats stats() const { return l.stats(); }
    void close() { l.close(); }
};

// One process of the floor: attempts until the window ends, on `tat` (shared by the fleet).
template <class Clock>
child_result run_child_floor(const options& o, std::atomic<std::int64_t>& tat, std::chrono::system_clock::time_point start_at,
                             std::vector<std::int64_t>& bins)
{
    using steady = std::chrono::steady_clock;
    const std::int64_t interval = sluice::rate::per_second(o.rate).interval().count();
    child_result res;
    fleet_window w(o, start_at, bins);
    for (;;) {
        const std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
        ++res.attempts;
        std::int64_t t = tat.load(std::memory_order_relaxed);
        if (now >= t && tat.compare_exchange_strong(t, now + interval, std::memory_order_relaxed) && w.admit(steady::now()))
            ++res.admitted;
        if ((res.attempts & 63) == 0 && steady::now() >= w.end) break;
    }
    res.cpu_us = cpu_time_us() - w.cpu_begin;
    res.ok = 1;
    return res;
}

int run_floor_shm(const options& o)
{
    void* m = ::mmap(nullptr, sizeof(std::atomic<std::int64_t>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        std::fprintf(stderr, "sluice-bench: shared --backend shm --limiter floor: mmap failed\n");
        return 1;
    }
    auto* tat = new (m) std::atomic<std::int64_t>(std::numeric_limits<std::int64_t>::min());
    int rc = with_clock(o.clock, [&]<class Clock>(std::type_identity<Clock>) {
        return run_fleet(o, [&o, tat](std::chrono::system_clock::time_point start_at, std::vector<std::int64_t>& bins) {
            return run_child_floor<Clock>(o, *tat, start_at, bins);
        }, "shm");
    });
    ::munmap(m, sizeof(std::atomic<std::int64_t>));
    return rc;
}

} // namespace

int run_shared_shm(const options& o)
{
    if ((shared_mode != "try" && shared_mode != "acquire") || (shared_limiter != "bucket" && shared_limiter != "floor") ||
        (shared_limiter == "floor" && shared_mode != "try") || shared_lease != 0) {
        std::fprintf(stderr, "sluice-bench: shared --backend shm: --mode try or acquire, --limiter bucket or floor (floor: "
                             "--mode try only), no --lease\n");
        return 2;
    }
    if (o.procs < 1 || o.concurrency < 1 || !(o.rate > 0) || !(o.seconds > 0)) {
        std::fprintf(stderr, "sluice-bench: shared: --procs, --concurrency, --rate and --seconds must be positive\n");
        return 2;
    }
    if (shared_limiter == "floor") return run_floor_shm(o);
    const std::string name = "/sluice-bench-shared-" + std::to_string(::getpid());
    sluice::shm::remove(name);
    int rc = with_clock(o.clock, [&]<class Clock>(std::type_identity<Clock>) {
        return run_fleet(o, [&o, &name](std::chrono::system_clock::time_point start_at, std::vector<std::int64_t>& bins) {
            boost::asio::io_context io(1);
            sluice::limiter_options lo;
            if (fanout_coalesce_us >= 0) lo.coalesce = std::chrono::microseconds(fanout_coalesce_us);
            if (fanout_coalesce_max_us >= 0) lo.coalesce_max = std::chrono::microseconds(fanout_coalesce_max_us);
            sluice::shm::token_bucket<Clock> tb(io, name, sluice::rate::per_second(o.rate), 1, lo);
            unkeyed<sluice::shm::token_bucket<Clock>> l{tb};
            return run_child_on(o, l, io, start_at, bins);
        }, "shm");
    });
    sluice::shm::remove(name);
    return rc;
}

int run_shared(const options& o)
{
    if (o.backend == "shm") return run_shared_shm(o);
    if (!o.backend.empty() && o.backend != "redis") {
        std::fprintf(stderr, "sluice-bench: shared --backend wants redis (the default) or shm\n");
        return 2;
    }
#ifdef SLUICE_BENCH_REDIS
    return run_shared_redis(o);
#else
    std::fprintf(stderr, "sluice-bench: shared --backend redis: built without the Redis backend (hiredis)\n");
    return 2;
#endif
}

} // namespace sluice_bench
