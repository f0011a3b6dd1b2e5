// Prefork workers share one quota through shared memory: 20 requests a second between all
// of them, with no server to run.
//
//   prefork_quota [WORKERS]
//
// Forks WORKERS processes (default 4), as a prefork server does; each attaches a
// sluice::shm::token_bucket to the segment the parent made before forking and sends
// "requests" as fast as it lets them for 2 s. Together they get 20 a second (plus the burst
// of 1), not 20 each. The segment is unnamed (a sealed memfd, inherited across fork): no
// other process can open it, take its name first or truncate it, and nothing is left behind.
// Unrelated processes share a quota by name instead (segment_options::name).
#include <sluice/shm.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/system_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace asio = boost::asio;
using namespace std::chrono_literals;

// One worker: acquires slots of the shared bucket for 2 s and counts them.
int worker(int id, const sluice::shm::segment_options& where, std::chrono::system_clock::time_point start)
{
    asio::io_context io;
    // The parent's segment, by its inherited descriptor, with the same configuration.
    sluice::shm::token_bucket<> quota(io, where, sluice::rate::per_second(20), 1);
    int granted = 0;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        asio::system_timer at_start(io, start);
        co_await at_start.async_wait(asio::use_awaitable);
        const auto end = start + 2s;   // the same instant in every worker
        while (std::chrono::system_clock::now() < end) {
            // Wait for a slot at most 500 ms; false: too many ahead, try again.
            if (co_await quota.acquire(500ms)) {
                auto now = std::chrono::system_clock::now();
                auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - start).count();
                // A wait that began before the end may be granted after it: not counted.
                bool counted = now <= end;
                granted += counted;
                std::printf("worker %d (pid %d): request at %4lld ms%s\n", id, static_cast<int>(::getpid()),
                            static_cast<long long>(ms), counted ? "" : " (after the 2 s)");
                std::fflush(stdout);
            }
        }
    }, [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
    });
    io.run();
    return granted;
}

int main(int argc, char** argv)
{
    int workers = argc > 1 ? std::atoi(argv[1]) : 4;
    if (workers < 1 || workers > 64) {
        std::fprintf(stderr, "usage: prefork_quota [WORKERS, 1 to 64]\n");
        return 2;
    }
    // Made before the first fork, so that a segment that cannot be made fails once.
    const sluice::policy::shm_gcra shared(sluice::shm::segment_options{.anonymous = true}, sluice::rate::per_second(20), 1);
    const auto where = sluice::shm::segment_options::of(shared.segment());
    auto start = std::chrono::system_clock::now() + 300ms;
    std::vector<pid_t> kids;
    for (int i = 0; i < workers; ++i) {
        pid_t pid = ::fork();
        if (pid == 0) ::_exit(worker(i, where, start));
        kids.push_back(pid);
    }
    int total = 0;
    for (pid_t k : kids) {
        int status = 0;
        ::waitpid(k, &status, 0);
        total += WIFEXITED(status) ? WEXITSTATUS(status) : 0;
    }
    std::printf("together: %d requests in 2 s from %d processes (the quota: 20/s + 1)\n", total, workers);
    return total > 0 && total <= 41 ? 0 : 1;
}
