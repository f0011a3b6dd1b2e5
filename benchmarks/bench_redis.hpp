// The redis-server the Redis scenarios (shared, soak) run against: started on
// 127.0.0.1:port without persistence, stopped by its pid, restartable on the same port.
#pragma once

#include <hiredis/hiredis.h>

#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>

namespace sluice_bench {

/// True when something answers PING on 127.0.0.1:port within 200 ms.
inline bool redis_ping(int port)
{
    timeval tv{0, 200'000};
    redisContext* c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (!c) return false;
    bool ok = false;
    if (!c->err) {
        redisSetTimeout(c, tv);
        if (auto* r = static_cast<redisReply*>(redisCommand(c, "PING"))) {
            ok = r->type == REDIS_REPLY_STATUS;
            freeReplyObject(r);
        }
    }
    redisFree(c);
    return ok;
}

/// redis-server on 127.0.0.1:port, no persistence; stopped by its pid.
class redis_process {
public:
    explicit redis_process(int port) : port_(port)
    {
        if (redis_ping(port))
            throw std::runtime_error("something already answers on 127.0.0.1:" + std::to_string(port));
        start();
    }
    redis_process(const redis_process&) = delete;
    redis_process& operator=(const redis_process&) = delete;
    ~redis_process() { stop(); }

    int port() const noexcept { return port_; }

    /// Stops the server (SIGTERM) and waits for it.
    void stop()
    {
        if (pid_ <= 0) return;
        ::kill(pid_, SIGTERM);
        int status = 0;
        ::waitpid(pid_, &status, 0);
        pid_ = -1;
    }

    /// A new, empty server on the same port (what a restart without persistence leaves).
    void restart()
    {
        stop();
        start();
    }

private:
    void start()
    {
        const std::string p = std::to_string(port_);
        pid_ = ::fork();
        if (pid_ < 0) throw std::runtime_error("fork failed");
        if (pid_ == 0) {
            // Dies with the scenario, also when that crashes; keeps none of its descriptors
            // (Asio opens sockets without close-on-exec: a listener kept open here could not
            // be opened again by the scenario).
            ::prctl(PR_SET_PDEATHSIG, SIGTERM);
            if (::close_range(3, ~0U, 0) != 0)
                for (int fd = 3; fd < 4096; ++fd) ::close(fd);
            if (!std::freopen("/dev/null", "w", stdout)) ::_exit(126);
            ::execlp("redis-server", "redis-server", "--port", p.c_str(), "--bind", "127.0.0.1", "--save", "",
                     "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning", static_cast<char*>(nullptr));
            ::_exit(127);
        }
        auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (!redis_ping(port_)) {
            int status = 0;
            if (::waitpid(pid_, &status, WNOHANG) == pid_) {
                pid_ = -1;
                throw std::runtime_error("redis-server exited (port " + p + " taken?)");
            }
            if (std::chrono::steady_clock::now() > end) {
                stop();
                throw std::runtime_error("redis-server did not answer in 10 s");
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
    }

    int port_;
    pid_t pid_ = -1;
};

/// Current resident set size, KiB (/proc/self/statm, second field in pages).
inline long rss_now_kib()
{
    long size = 0, resident = 0;
    if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
        if (std::fscanf(f, "%ld %ld", &size, &resident) != 2) resident = 0;
        std::fclose(f);
    }
    return resident * (::sysconf(_SC_PAGESIZE) / 1024);
}

} // namespace sluice_bench
