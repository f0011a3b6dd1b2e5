// The example server's --workers N: N worker processes, each with its own listening socket
// on one port (SO_REUSEPORT), under a parent that supervises them.
//
// Why a socket per worker rather than one socket bound before fork: Linux gives each socket
// of a SO_REUSEPORT group its own accept queue and spreads new connections over them by a
// hash of the addresses and ports, so every worker gets its share with no lock and no herd.
// With one shared socket every worker waits on one queue: epoll wakes them all for each
// connection, or (EPOLLEXCLUSIVE) the one that waited last, so a busy worker keeps taking
// most of them (why nginx has `listen ... reuseport`). The cost: the hash does not look at
// load, and connections still in the queue of a worker that dies are reset. The parent
// makes all N sockets before forking, so that the port is taken and every worker has its
// queue from the start; it says where it listens once every worker has said (through a
// pipe) that it serves, as the one-process server says it once it serves.
//
// The parent blocks SIGINT, SIGTERM and SIGCHLD and waits for them (sigtimedwait): it
// passes SIGINT/SIGTERM on to the workers, reaps them, and stops the rest once one has
// ended (the server is one unit). It exits 0 when every worker exited 0, else 1. A worker
// asks to get SIGTERM if the parent dies (PR_SET_PDEATHSIG), so none outlives it.
// `fleet` is the parent's bookkeeping, sans-io: events in, whom to signal out.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/system/system_error.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <vector>

#include <fcntl.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

namespace server_prefork {

/// The parent's view of its workers: which are alive, whether the server is stopping, and
/// the exit code. Takes what happened (a signal to the parent, a worker's wait status) and
/// returns the workers to signal.
class fleet {
public:
    explicit fleet(std::vector<pid_t> pids) : pids_(std::move(pids)), alive_(pids_.size(), true) {}

    /// SIGINT or SIGTERM to the parent: pass it on to every worker alive.
    std::vector<pid_t> on_signal() noexcept
    {
        stopping_ = true;
        return alive();
    }

    /// Worker `pid` ended with wait status `status`: the workers to stop (SIGTERM), once,
    /// the first time one ends. An exit other than 0 (a signal, a non-zero status) makes
    /// the parent's exit code 1. A pid not of the fleet changes nothing.
    std::vector<pid_t> on_exit(pid_t pid, int status)
    {
        auto it = std::find(pids_.begin(), pids_.end(), pid);
        if (it == pids_.end() || !alive_[static_cast<std::size_t>(it - pids_.begin())]) return {};
        alive_[static_cast<std::size_t>(it - pids_.begin())] = false;
        if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) failed_ = true;
        if (stopping_) return {};
        stopping_ = true;
        return alive();
    }

    /// The workers alive (those to kill when the grace period is over).
    std::vector<pid_t> alive() const
    {
        std::vector<pid_t> out;
        for (std::size_t i = 0; i < pids_.size(); ++i)
            if (alive_[i]) out.push_back(pids_[i]);
        return out;
    }

    /// The index of worker `pid` (0 .. N-1), or N.
    std::size_t index_of(pid_t pid) const noexcept
    {
        return static_cast<std::size_t>(std::find(pids_.begin(), pids_.end(), pid) - pids_.begin());
    }

    bool stopping() const noexcept { return stopping_; }
    bool done() const noexcept { return std::none_of(alive_.begin(), alive_.end(), [](bool a) { return a; }); }
    /// 0 when every worker exited 0, else 1.
    int exit_code() const noexcept { return failed_ ? 1 : 0; }
    /// Makes the exit code 1: the server did not run or stop cleanly (a fork failed,
    /// workers were killed after the grace period).
    void fail() noexcept { failed_ = true; }

private:
    std::vector<pid_t> pids_;
    std::vector<bool> alive_;
    bool stopping_ = false;
    bool failed_ = false;
};

/// What a worker process starts with.
struct worker_start {
    std::size_t index;   ///< 0 .. N-1
    int listen_fd;       ///< its listening socket, in the port's SO_REUSEPORT group
    sigset_t mask;       ///< the signal mask to restore (see ready())
    int ready_fd;        ///< the pipe to the parent

    /// Tells the parent that this worker serves, and lets in the signals blocked across the
    /// fork: to be called once the worker handles SIGINT and SIGTERM itself, so that one
    /// that came meanwhile reaches its handler, not the default action.
    void ready() noexcept
    {
        ::pthread_sigmask(SIG_SETMASK, &mask, nullptr);
        const char c = 'r';
        [[maybe_unused]] auto n = ::write(ready_fd, &c, 1);   // a parent gone: nobody to tell
        ::close(ready_fd);
    }
};

/// Opens n listening sockets on `ep` in one SO_REUSEPORT group (port 0: the kernel picks
/// the first one's, the others take it); returns their descriptors and sets `port`.
/// Throws system_error.
inline std::vector<int> listen_reuseport(const boost::asio::ip::tcp::endpoint& ep, std::size_t n, std::uint16_t& port)
{
    std::vector<int> fds;
    auto fail = [&fds](const char* what) {
        const int e = errno;
        for (int fd : fds) ::close(fd);
        throw boost::system::system_error(e, boost::system::system_category(), what);
    };
    auto at = ep;
    for (std::size_t i = 0; i < n; ++i) {
        int fd = ::socket(at.protocol().family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) fail("socket");
        fds.push_back(fd);
        int one = 1;
        if (::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
            ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0)
            fail("setsockopt");
        if (::bind(fd, at.data(), static_cast<socklen_t>(at.size())) != 0) fail("bind");
        if (::listen(fd, SOMAXCONN) != 0) fail("listen");
        if (i == 0) {
            boost::asio::ip::tcp::endpoint got;
            socklen_t len = static_cast<socklen_t>(got.capacity());
            if (::getsockname(fd, got.data(), &len) != 0) fail("getsockname");
            at.port(got.port());
        }
    }
    port = at.port();
    return fds;
}

/// Forks one worker per socket of `fds` and supervises them until every one has ended;
/// returns the parent's exit code (fleet::exit_code). In the child, `worker(worker_start&)`
/// runs with SIGINT, SIGTERM and SIGCHLD blocked, calls ready() once it serves, and its
/// result is the child's exit status. The parent calls `on_ready()` once every worker is
/// ready (not at all if one ended first). A worker not yet stopped `grace` after the
/// server began stopping is killed (SIGKILL).
template <class Worker, class OnReady>
int run(std::vector<int> fds, Worker worker, OnReady on_ready, std::chrono::seconds grace = std::chrono::seconds(10))
{
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGCHLD);
    ::sigprocmask(SIG_BLOCK, &set, &old);
    std::fflush(nullptr);   // nothing buffered is written twice
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
        std::perror("server: pipe");
        for (int fd : fds) ::close(fd);
        ::sigprocmask(SIG_SETMASK, &old, nullptr);
        return 1;
    }
    const pid_t parent = ::getpid();
    std::vector<pid_t> pids;
    for (std::size_t i = 0; i < fds.size(); ++i) {
        pid_t pid = ::fork();
        if (pid == 0) {
            // Killed with the parent, however it dies; it may have died already.
            ::prctl(PR_SET_PDEATHSIG, SIGTERM);
            if (::getppid() != parent) ::_exit(1);
            for (std::size_t j = 0; j < fds.size(); ++j)
                if (j != i) ::close(fds[j]);   // so that a queue dies with its worker
            ::close(pipe_fds[0]);
            worker_start start{i, fds[i], old, pipe_fds[1]};
            int rc = worker(start);
            std::fflush(nullptr);
            ::_exit(rc);
        }
        if (pid < 0) {
            std::perror("server: fork");
            break;   // the workers forked are stopped below
        }
        pids.push_back(pid);
    }
    const bool all_forked = pids.size() == fds.size();
    for (int fd : fds) ::close(fd);
    ::close(pipe_fds[1]);
    // A byte from each worker once it serves; end of file when every one has written or
    // ended (a worker that fails to start ends without writing).
    std::size_t ready = 0;
    for (char buf[64]; all_forked && ready < pids.size();) {
        auto n = ::read(pipe_fds[0], buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        ready += static_cast<std::size_t>(n);
    }
    ::close(pipe_fds[0]);
    if (all_forked && ready == pids.size()) on_ready();
    fleet f(pids);
    if (!all_forked) {
        f.fail();
        for (pid_t p : f.on_signal()) ::kill(p, SIGTERM);
    }
    auto signal = [](const std::vector<pid_t>& to, int sig) {
        for (pid_t p : to) ::kill(p, sig);
    };
    auto stop_began = std::chrono::steady_clock::now();
    while (!f.done()) {
        timespec tick{0, 200'000'000};
        const bool was_stopping = f.stopping();
        int sig = ::sigtimedwait(&set, nullptr, &tick);
        if (sig == SIGINT || sig == SIGTERM) signal(f.on_signal(), sig);
        for (;;) {
            int status = 0;
            pid_t p = ::waitpid(-1, &status, WNOHANG);
            if (p <= 0) break;
            if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
                if (WIFSIGNALED(status))
                    std::fprintf(stderr, "server: worker %zu (pid %d) killed by signal %d\n", f.index_of(p),
                                 static_cast<int>(p), WTERMSIG(status));
                else
                    std::fprintf(stderr, "server: worker %zu (pid %d) exited with status %d\n", f.index_of(p),
                                 static_cast<int>(p), WIFEXITED(status) ? WEXITSTATUS(status) : -1);
            }
            signal(f.on_exit(p, status), SIGTERM);
        }
        if (f.stopping() && !was_stopping) stop_began = std::chrono::steady_clock::now();
        if (f.stopping() && !f.done() && std::chrono::steady_clock::now() - stop_began > grace) {
            std::fprintf(stderr, "server: workers still running %lld s after the stop: killed\n",
                         static_cast<long long>(grace.count()));
            signal(f.alive(), SIGKILL);
            f.fail();
            stop_began = std::chrono::steady_clock::now();   // and reaped on the next turns
        }
    }
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
    return f.exit_code();
}

} // namespace server_prefork
