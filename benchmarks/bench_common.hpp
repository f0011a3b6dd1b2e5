// Shared pieces of sluice-bench: the options every scenario reads, one-line JSON
// output (benchmark protocol v1, see shared/peers/README.md), rusage helpers and the
// multi-threaded harness of the `try` scenario.
#pragma once

#include <sluice/coarse_clock.hpp>
#include <sluice/default_clock.hpp>
#include <sluice/tsc_clock.hpp>

#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <latch>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

namespace sluice_bench {

/// Every flag of protocol v1 (and the sluice additions). A scenario reads the fields it
/// needs and ignores the others. Defaults follow the Go peer.
struct options {
    std::string scenario = "try";
    std::string policy = "gcra";    // try: token_bucket|gcra|leaky|...|floor|clock|clock_raw|clock_coarse|all
    bool policy_set = false;        // --policy given (try without it: the limiter, token_bucket)
    int threads = 1;                // try: threads hammering one limiter
    std::int64_t ops = 10'000'000;  // try: checks in all (split over the threads)
    bool admitting = true;          // try: infinite rate (true) or 1000/s (false)
    std::int64_t waiters = 100'000; // fanout: concurrent waiters
    double rate = 100'000;          // fanout, pace, shared: permits per second
    std::int64_t n = 20'000;        // pace: acquisitions in a row
    bool strict = false;            // fanout/pace: strict spacing (scenario-defined)
    double seconds = 5;             // shared: duration
    int procs = 4;                  // shared: processes; try --backend shm: processes (see scenario_try.cpp)
    bool procs_set = false;         // --procs given
    std::string backend;            // try: local (default) | shm; shared: redis (default) | shm
    int concurrency = 32;           // shared: concurrent callers per process
    int port = 6391;                // shared: redis port
    std::string clock = "default";  // try, keyed, fanout: the limiter's Clock (default|steady|tsc|coarse)
    std::string trace;              // pace, fanout: a file of one line per grant, for plots
};

/// Writes one grant time a line (ns since the first reference), for --trace. False (after
/// saying why) when the file cannot be written.
inline bool write_trace(const std::string& path, const std::vector<std::int64_t>& ns_since_start)
{
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (!f) {
        std::fprintf(stderr, "sluice-bench: cannot write --trace %s\n", path.c_str());
        return false;
    }
    for (auto t : ns_since_start) std::fprintf(f, "%lld\n", static_cast<long long>(t));
    return std::fclose(f) == 0;
}

/// Calls f(std::type_identity<Clock>{}) with the Clock that --clock names: default is
/// sluice::default_clock, the Clock of a limiter whose user names none. (main() waits for
/// tsc_clock's calibration first, so that nothing timed reads steady_clock through it.)
template <class F>
decltype(auto) with_clock(const std::string& name, F&& f)
{
    if (name == "default")
        return f(std::type_identity<sluice::default_clock>{});
    if (name == "tsc")
        return f(std::type_identity<sluice::tsc_clock>{});
    if (name == "coarse")
        return f(std::type_identity<sluice::coarse_clock>{});
    return f(std::type_identity<std::chrono::steady_clock>{});
}

inline bool known_clock(const std::string& name)
{
    return name == "default" || name == "steady" || name == "tsc" || name == "coarse";
}

/// What the --clock clock reads, for the JSON lines' "clock": tsc, steady or coarse
/// (default_clock and tsc_clock read steady_clock where the counter is not used).
inline const char* clock_read(const std::string& name)
{
    return with_clock(name, []<class Clock>(std::type_identity<Clock>) {
        if constexpr (std::is_same_v<Clock, sluice::tsc_clock>)
            return sluice::tsc_clock::source() == sluice::clock_source::tsc ? "tsc" : "steady";
        else if constexpr (std::is_same_v<Clock, sluice::coarse_clock>)
            return "coarse";
        else
            return "steady";
    });
}

/// The C++ type of the --clock clock, for the JSON lines' "clock_type".
inline const char* clock_type(const std::string& name)
{
    return name == "default" ? "default_clock" : name == "tsc" ? "tsc_clock" : name == "coarse" ? "coarse_clock" : "steady_clock";
}

/// Keeps `v` computed (an empty asm that takes it in a register): what a caller that reads
/// a result does, without a store.
template <class T>
inline void keep(const T& v) noexcept
{
    asm volatile("" : : "r"(v));
}

/// The cost of one read of the --clock clock, ns (one thread, 2 million reads, after a
/// first read): printed as "clock_ns" beside the results.
inline double clock_read_ns(const std::string& name)
{
    return with_clock(name, []<class Clock>(std::type_identity<Clock>) {
        (void)Clock::now();
        constexpr int reads = 2'000'000;
        std::int64_t sink = 0;
        std::atomic_signal_fence(std::memory_order_seq_cst);
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < reads; ++i)
            sink += Clock::now().time_since_epoch().count() & 1;
        auto t1 = std::chrono::steady_clock::now();
        return static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()) / reads +
               static_cast<double>(sink) * 0.0;   // keeps the reads
    });
}

/// Builds one JSON object on one line, keys in insertion order.
class json_line {
public:
    json_line() { out_ = "{\"peer\":\"sluice\""; }

    json_line& add(std::string_view key, std::string_view v)
    {
        put_key(key);
        out_ += '"';
        for (char ch : v) {
            if (ch == '"' || ch == '\\') out_ += '\\';
            out_ += ch;
        }
        out_ += '"';
        return *this;
    }
    json_line& add(std::string_view key, const char* v) { return add(key, std::string_view{v}); }
    json_line& add(std::string_view key, const std::string& v) { return add(key, std::string_view{v}); }
    json_line& add(std::string_view key, bool v)
    {
        put_key(key);
        out_ += v ? "true" : "false";
        return *this;
    }
    json_line& add(std::string_view key, int v) { return add(key, static_cast<long long>(v)); }
    json_line& add(std::string_view key, long v) { return add(key, static_cast<long long>(v)); }
    json_line& add(std::string_view key, long long v)
    {
        put_key(key);
        out_ += std::to_string(v);
        return *this;
    }
    json_line& add(std::string_view key, unsigned long v) { return add(key, static_cast<unsigned long long>(v)); }
    json_line& add(std::string_view key, unsigned long long v)
    {
        put_key(key);
        out_ += std::to_string(v);
        return *this;
    }
    json_line& add(std::string_view key, double v)
    {
        put_key(key);
        if (!std::isfinite(v)) {
            out_ += "null";
            return *this;
        }
        char buf[64];
        auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
        out_.append(buf, ec == std::errc{} ? p : buf);
        return *this;
    }

    /// Prints the line to stdout and flushes (one line per result, streamable).
    void emit()
    {
        out_ += "}\n";
        std::fputs(out_.c_str(), stdout);
        std::fflush(stdout);
        out_.pop_back();
        out_.pop_back();
    }

private:
    void put_key(std::string_view key)
    {
        out_ += ",\"";
        out_ += key;
        out_ += "\":";
    }

    std::string out_;
};

/// User + system CPU time of the whole process, in seconds.
inline double cpu_seconds() noexcept
{
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/// Peak resident set size of the process, in KiB (Linux reports ru_maxrss in KiB).
inline long max_rss_kib() noexcept
{
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/// What the `try` harness measured.
struct try_result {
    double wall_ns = 0;           // around the whole run, from the common start to the last join
    std::uint64_t admitted = 0;   // checks that were allowed, all threads together
};

/// Runs `ops` checks in all over `threads` threads (the first ops % threads threads do one
/// more). Each thread calls check() in a tight loop and counts the true answers. Threads
/// are created first and wait on a latch; the wall clock starts when the latch opens and
/// stops after the last join.
template <class Check>
try_result run_threads(int threads, std::int64_t ops, Check&& check)
{
    struct alignas(64) slot { std::uint64_t admitted = 0; };
    std::vector<slot> slots(static_cast<std::size_t>(threads));
    std::latch ready(threads);
    std::latch go(1);
    std::vector<std::thread> pool;
    pool.reserve(static_cast<std::size_t>(threads));
    for (int t = 0; t < threads; ++t) {
        std::int64_t mine = ops / threads + (t < ops % threads ? 1 : 0);
        pool.emplace_back([&, t, mine] {
            ready.count_down();
            go.wait();
            std::uint64_t c = 0;
            for (std::int64_t i = 0; i < mine; ++i)
                c += check() ? 1 : 0;
            slots[static_cast<std::size_t>(t)].admitted = c;
        });
    }
    ready.wait();
    auto t0 = std::chrono::steady_clock::now();
    go.count_down();
    for (auto& th : pool) th.join();
    auto t1 = std::chrono::steady_clock::now();
    try_result r;
    r.wall_ns = static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
    for (auto& s : slots) r.admitted += s.admitted;
    return r;
}

/// run_threads across processes: `procs` forked processes, ops in all, each making its own
/// check with make() (its own limiter on state shared between the processes) before the
/// common start. The wall clock runs from the start to the last process's end (each
/// records its own, on steady_clock, machine-wide). admitted is 0 and wall_ns negative
/// when a process failed.
template <class Make>
try_result run_procs(int procs, std::int64_t ops, Make&& make)
{
    struct board {
        std::atomic<int> ready{0};
        std::atomic<int> go{0};
        std::atomic<int> failed{0};
        std::atomic<std::uint64_t> admitted{0};
        std::atomic<std::int64_t> end_ns{0};
    };
    void* mem = ::mmap(nullptr, sizeof(board), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return {-1, 0};
    auto* b = ::new (mem) board{};
    auto steady_ns = [] {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
    };
    std::vector<pid_t> kids;
    for (int p = 0; p < procs; ++p) {
        std::int64_t mine = ops / procs + (p < ops % procs ? 1 : 0);
        pid_t pid = ::fork();
        if (pid == 0) {
            int rc = 0;
            try {
                auto check = make();
                b->ready.fetch_add(1);
                while (b->go.load(std::memory_order_acquire) == 0) {}
                std::uint64_t c = 0;
                for (std::int64_t i = 0; i < mine; ++i)
                    c += check() ? 1 : 0;
                std::int64_t end = steady_ns();
                b->admitted.fetch_add(c);
                for (std::int64_t e = b->end_ns.load(); e < end && !b->end_ns.compare_exchange_weak(e, end);) {}
            } catch (...) {
                b->failed.fetch_add(1);
                b->ready.fetch_add(1);
                rc = 1;
            }
            ::_exit(rc);
        }
        if (pid > 0) kids.push_back(pid);
        else b->failed.fetch_add(1);
    }
    // The parent sleeps while the processes get ready and run: it takes no core from them.
    while (b->ready.load() + (procs - static_cast<int>(kids.size())) < procs)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const std::int64_t start = steady_ns();
    b->go.store(1, std::memory_order_release);
    for (pid_t pid : kids) ::waitpid(pid, nullptr, 0);
    try_result r;
    r.wall_ns = b->failed.load() ? -1 : static_cast<double>(b->end_ns.load() - start);
    r.admitted = b->admitted.load();
    ::munmap(mem, sizeof(board));
    return r;
}

// ---------------------------------------------------------------------------------------
// Scenarios. Each is `int run_X(const options&)` returning the process exit code, and is
// registered in the table in sluice_bench.cpp.
//   try    : scenario_try.cpp
//   fanout : scenario_fanout.cpp (to come: async waiters on one limiter)
//   pace   : scenario_pace.cpp   (to come: one waiter, strict spacing)
int run_try(const options& o);

// The reference loops of `try` (bench_floor.cpp): a bare CAS on one atomic word, and the
// clock read alone (steady_clock; clock_gettime directly; the coarse clock).
try_result run_try_floor(const options& o);
try_result run_try_clock(const options& o);
try_result run_try_clock_raw(const options& o);
try_result run_try_clock_coarse(const options& o);

} // namespace sluice_bench
