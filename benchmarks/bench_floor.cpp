// The reference loops of the `try` scenario, against which the policies are measured.
//
// floor: the least a lock-free limiter can do per check: read the same clock as the
// policies (--clock, through sluice::detail::now_ns), load one std::atomic<int64_t>,
// and compare-and-swap it when the check admits. It is GCRA stripped to the bone (no
// configuration snapshot, no saturation, no decision struct, no remaining/reset fields):
// z' = max(z, now - tau) + interval, admitted when z' <= now. Rejections do not write,
// exactly as the GCRA core. Same parameters as the `gcra` policy of scenario_try.cpp.
//
// clock: the --clock clock read alone, one per check: the cost every policy pays first.
// clock_raw: clock_gettime(CLOCK_MONOTONIC) called directly (what steady_clock::now() does,
// without the hop through libstdc++). clock_coarse: CLOCK_MONOTONIC_COARSE, the kernel's
// tick-granular clock (1-4 ms resolution), what a coarse limiter could use instead.
#include "bench_common.hpp"

#include <sluice/manual_clock.hpp>

#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>

namespace sluice_bench {

namespace {

struct alignas(64) floor_word {
    std::atomic<std::int64_t> z{std::numeric_limits<std::int64_t>::min() / 2};
};

} // namespace

try_result run_try_floor(const options& o)
{
    // admitting: 1 ns a permit with 1 s of burst; rejecting: 1000/s, burst 1.
    const std::int64_t interval = o.admitting ? 1 : 1'000'000;
    const std::int64_t tau = o.admitting ? 1'000'000'000 : 1'000'000;
    floor_word w;
    return with_clock(o.clock, [&]<class Clock>(std::type_identity<Clock>) {
        return run_threads(o.threads, o.ops, [&]() noexcept {
            std::int64_t now = sluice::detail::now_ns<Clock>();
            std::int64_t z = w.z.load(std::memory_order_acquire);
            for (;;) {
                std::int64_t start = now - tau;
                if (z > start) start = z;
                std::int64_t nz = start + interval;
                if (nz > now) return false;
                if (w.z.compare_exchange_weak(z, nz, std::memory_order_acq_rel, std::memory_order_acquire))
                    return true;
            }
        });
    });
}

try_result run_try_clock(const options& o)
{
    return with_clock(o.clock, [&]<class Clock>(std::type_identity<Clock>) {
        return run_threads(o.threads, o.ops, []() noexcept {
            std::int64_t now = sluice::detail::now_ns<Clock>();
            return now != 0;   // keeps the read; always true
        });
    });
}

try_result run_try_clock_raw(const options& o)
{
    return run_threads(o.threads, o.ops, []() noexcept {
        timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec * 1'000'000'000 + ts.tv_nsec != 0;
    });
}

try_result run_try_clock_coarse(const options& o)
{
    return run_threads(o.threads, o.ops, []() noexcept {
        timespec ts;
        clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
        return ts.tv_sec * 1'000'000'000 + ts.tv_nsec != 0;
    });
}

} // namespace sluice_bench
