// tsc_clock's process-wide timeline on the machine's counter and steady_clock, decided when
// the library is loaded (see include/sluice/tsc_clock.hpp for the guarantees and
// include/sluice/detail/base/tsc_timeline.hpp for the conversion).
#include <sluice/tsc_clock.hpp>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include <fcntl.h>
#include <unistd.h>

#ifdef SLUICE_DETAIL_TSC
#include <cpuid.h>
#endif

namespace sluice::detail {

constinit tsc_timeline tsc_state;

namespace {

std::int64_t steady_ns() noexcept
{
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch()).count();
}

} // namespace

#ifdef SLUICE_DETAIL_TSC

namespace {

// The machine: rdtsc, steady_clock, cpuid and the kernel's clocksource.
struct machine_source {
    std::uint64_t counter() noexcept { return __rdtsc(); }

    std::int64_t reference() noexcept { return steady_ns(); }

    // steady_clock read between two counter reads; of five tries the tightest bracket, so a
    // preemption in one of them does not skew the pair.
    tsc_sample sample() noexcept
    {
        tsc_sample best{};
        best.width = ~std::uint64_t{0};
        for (int i = 0; i < 5; ++i) {
            std::uint64_t t1 = __rdtsc();
            std::int64_t ns = steady_ns();
            std::uint64_t t2 = __rdtsc();
            if (t2 - t1 < best.width) best = {t1 + (t2 - t1) / 2, ns, t2 - t1};
        }
        return best;
    }

    bool counter_allowed() noexcept
    {
        if (const char* env = std::getenv("SLUICE_TSC_CLOCK")) {
            if (!std::strcmp(env, "off") || !std::strcmp(env, "0") || !std::strcmp(env, "steady"))
                return false;
        }
        unsigned a = 0, b = 0, c = 0, d = 0;
        if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u)
            return false;
        __get_cpuid(0x80000007u, &a, &b, &c, &d);
        return (d & (1u << 8)) != 0;   // invariant TSC
    }

    // The kernel's own choice vouches for the counters agreeing across cores, and it
    // changes it when its watchdog finds the counter unstable. Plain system calls (no
    // allocation, no exception): this runs under the timeline's lock.
    bool kernel_uses_counter() noexcept
    {
        int fd = ::open("/sys/devices/system/clocksource/clocksource0/current_clocksource", O_RDONLY | O_CLOEXEC);
        if (fd < 0) return false;
        char buf[32];
        ssize_t n = ::read(fd, buf, sizeof buf);
        ::close(fd);
        return n == 4 && std::memcmp(buf, "tsc\n", 4) == 0;
    }
};

static_assert(tsc_source<machine_source>);

machine_source machine;

// Decided at load: the first sample of the calibration is taken here, so that the first
// call to now() finds most or all of the calibration's millisecond already past.
[[maybe_unused]] const bool decided_at_load = (tsc_state.decide(machine), true);

} // namespace

std::int64_t tsc_now_slow() noexcept
{
    return tsc_state.now_slow(machine);
}

#else

std::int64_t tsc_now_slow() noexcept
{
    return steady_ns();
}

#endif

} // namespace sluice::detail
