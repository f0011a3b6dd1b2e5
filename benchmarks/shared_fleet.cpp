// The fleet of scenario `shared` (see shared_fleet.hpp).
#include "shared_fleet.hpp"

#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdexcept>

namespace sluice_bench {

std::int64_t shared_lease = 0;          // --lease N
std::string shared_mode = "try";         // --mode try|acquire|wait
std::string shared_limiter = "bucket";   // --limiter bucket|window|floor

std::int64_t cpu_time_us()
{
    struct rusage u {};
    ::getrusage(RUSAGE_SELF, &u);
    auto us = [](const timeval& t) { return static_cast<std::int64_t>(t.tv_sec) * 1'000'000 + t.tv_usec; };
    return us(u.ru_utime) + us(u.ru_stime);
}

int run_fleet(const options& o, const fleet_child& child, const char* backend)
{
    auto start_at = std::chrono::system_clock::now() + std::chrono::milliseconds(500 + 50 * o.procs);
    std::vector<pid_t> kids;
    std::vector<int> pipes;
    for (int p = 0; p < o.procs; ++p) {
        int fds[2];
        if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
        pid_t pid = ::fork();
        if (pid < 0) throw std::runtime_error("fork failed");
        if (pid == 0) {
            ::close(fds[0]);
            child_result r;
            std::vector<std::int64_t> bins;
            try {
                r = child(start_at, bins);
            } catch (...) {
            }
            // The result, then the number of bins and the bins (blocking writes: each is
            // whole or fails; the parent reads every child to its end).
            const auto nb = static_cast<std::int64_t>(bins.size());
            bool sent = ::write(fds[1], &r, sizeof r) == static_cast<ssize_t>(sizeof r) &&
                        ::write(fds[1], &nb, sizeof nb) == static_cast<ssize_t>(sizeof nb) &&
                        (nb == 0 || ::write(fds[1], bins.data(), bins.size() * sizeof(std::int64_t)) ==
                                        static_cast<ssize_t>(bins.size() * sizeof(std::int64_t)));
            ::_exit(sent ? 0 : 3);
        }
        ::close(fds[1]);
        kids.push_back(pid);
        pipes.push_back(fds[0]);
    }
    child_result sum;
    std::vector<std::int64_t> rtts, per_proc, per_proc_attempts;
    std::vector<std::vector<std::int64_t>> traces(static_cast<std::size_t>(o.procs));
    int failed = 0;
    for (int p = 0; p < o.procs; ++p) {
        child_result r;
        const int fd = pipes[static_cast<std::size_t>(p)];
        std::int64_t nb = 0;
        if (::read(fd, &r, sizeof r) != static_cast<ssize_t>(sizeof r) || !r.ok)
            ++failed;
        else if (::read(fd, &nb, sizeof nb) == static_cast<ssize_t>(sizeof nb) && nb > 0 && nb < 1'000'000) {
            auto& t = traces[static_cast<std::size_t>(p)];
            t.resize(static_cast<std::size_t>(nb));
            std::size_t want = t.size() * sizeof(std::int64_t), got = 0;
            while (got < want) {
                ssize_t k = ::read(fd, reinterpret_cast<char*>(t.data()) + got, want - got);
                if (k <= 0) break;
                got += static_cast<std::size_t>(k);
            }
            if (got < want) t.clear();
        }
        ::close(pipes[static_cast<std::size_t>(p)]);
        int status = 0;
        ::waitpid(kids[static_cast<std::size_t>(p)], &status, 0);
        sum.admitted += r.admitted;
        sum.attempts += r.attempts;
        sum.redis_errors += r.redis_errors;
        sum.fallback += r.fallback;
        sum.timeouts += r.timeouts;
        sum.commands += r.commands;
        sum.lease_expired += r.lease_expired;
        sum.cpu_us += r.cpu_us;
        rtts.push_back(r.rtt_us);
        per_proc.push_back(r.admitted);
        per_proc_attempts.push_back(r.attempts);
    }
    if (!o.trace.empty()) {
        std::FILE* f = std::fopen(o.trace.c_str(), "w");
        if (!f) {
            std::fprintf(stderr, "sluice-bench: cannot write --trace %s\n", o.trace.c_str());
            return 1;
        }
        for (std::size_t p = 0; p < traces.size(); ++p)
            for (std::size_t i = 0; i < traces[p].size(); ++i)
                std::fprintf(f, "%zu,%zu,%lld\n", p, i, static_cast<long long>(traces[p][i]));
        std::fclose(f);
    }
    std::sort(rtts.begin(), rtts.end());
    double allowed = o.rate * o.seconds + 1;
    const double equal = static_cast<double>(sum.admitted) / o.procs;
    const auto [lo_it, hi_it] = std::minmax_element(per_proc.begin(), per_proc.end());
    const double share_min = equal > 0 ? static_cast<double>(*lo_it) / equal : 0;
    const double share_max = equal > 0 ? static_cast<double>(*hi_it) / equal : 0;
    // Each process's attempts against an equal share of them: its demand, which its share
    // follows (a process that gets less of the CPUs asks less).
    const double equal_attempts = static_cast<double>(sum.attempts) / o.procs;
    const auto [alo, ahi] = std::minmax_element(per_proc_attempts.begin(), per_proc_attempts.end());
    const double demand_min = equal_attempts > 0 ? static_cast<double>(*alo) / equal_attempts : 0;
    const double demand_max = equal_attempts > 0 ? static_cast<double>(*ahi) / equal_attempts : 0;
    json_line()
        .add("scenario", "shared")
        .add("backend", backend)
        .add("procs", o.procs)
        .add("concurrency", o.concurrency)
        .add("rate", o.rate)
        .add("seconds", o.seconds)
        .add("lease", static_cast<long long>(shared_lease))
        .add("admitted", static_cast<long long>(sum.admitted))
        .add("allowed", allowed)
        .add("over_admission", (static_cast<double>(sum.admitted) - allowed) / allowed)
        .add("decisions_per_s", static_cast<double>(sum.attempts) / o.seconds)
        .add("attempts", static_cast<long long>(sum.attempts))
        .add("redis_errors", static_cast<long long>(sum.redis_errors))
        .add("fallback_decisions", static_cast<long long>(sum.fallback))
        .add("round_trip_us", static_cast<long long>(rtts[rtts.size() / 2]))
        .add("failed_procs", failed)
        .add("mode", shared_mode)
        .add("limiter", shared_limiter)
        .add("share_min", share_min)
        .add("share_max", share_max)
        .add("demand_min", demand_min)
        .add("demand_max", demand_max)
        .add("commands", static_cast<long long>(sum.commands))
        .add("commands_per_decision", sum.attempts > 0 ? static_cast<double>(sum.commands) / static_cast<double>(sum.attempts) : 0.0)
        .add("commands_per_admitted", sum.admitted > 0 ? static_cast<double>(sum.commands) / static_cast<double>(sum.admitted) : 0.0)
        .add("lease_expired", static_cast<long long>(sum.lease_expired))
        .add("timeouts", static_cast<long long>(sum.timeouts))
        // The fleet's CPU time over the run, in cores (the processes' user + system time /
        // --seconds): with burst 1, a permit nobody asks for at its instant is lost, so
        // tries admit no more than the fleet is on a CPU to ask.
        .add("fleet_cpu_cores", static_cast<double>(sum.cpu_us) / 1e6 / o.seconds)
        .emit();
    return failed == 0 ? 0 : 1;
}

} // namespace sluice_bench
