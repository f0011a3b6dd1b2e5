// A redis-server of the test's own on 127.0.0.1 (a free port, retried on a clash),
// stopped by its pid at the end, also when the test fails. Waits are bounded.
#pragma once

#include <hiredis/hiredis.h>

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>

namespace sluice_test {

class redis_server {
public:
    redis_server()
    {
        std::random_device rd;
        std::uniform_int_distribution<int> pick(20000, 60000);
        for (int attempt = 0; attempt < 20; ++attempt) {
            port_ = static_cast<std::uint16_t>(pick(rd));
            if (start())
                return;
        }
        throw std::runtime_error("redis_server: could not start redis-server on a free port");
    }

    redis_server(const redis_server&) = delete;
    redis_server& operator=(const redis_server&) = delete;

    ~redis_server() { stop(); }

    std::uint16_t port() const noexcept { return port_; }
    pid_t pid() const noexcept { return pid_; }
    bool running() const noexcept { return pid_ > 0; }

    /// Starts redis-server on port() and waits (at most 10 s) until it answers PING.
    /// False when it exited (the port is taken) or never answered.
    bool start()
    {
        if (pid_ > 0) return true;
        std::string port = std::to_string(port_);
        pid_t pid = ::fork();
        if (pid < 0) return false;
        if (pid == 0) {
            // The child: quiet, no persistence, loopback only.
            if (!std::freopen("/dev/null", "w", stdout)) ::_exit(126);
            ::execlp("redis-server", "redis-server", "--port", port.c_str(), "--bind", "127.0.0.1",
                     "--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning",
                     static_cast<char*>(nullptr));
            ::_exit(127);
        }
        pid_ = pid;
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (std::chrono::steady_clock::now() < deadline) {
            int status = 0;
            if (::waitpid(pid_, &status, WNOHANG) == pid_) {
                pid_ = -1;
                return false;
            }
            if (ping())
                return true;
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        stop();
        return false;
    }

    /// SIGTERM, then SIGKILL after 5 s; reaps the process.
    void stop()
    {
        if (pid_ <= 0) return;
        ::kill(pid_, SIGTERM);
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        int status = 0;
        while (::waitpid(pid_, &status, WNOHANG) == 0) {
            if (std::chrono::steady_clock::now() > deadline) {
                ::kill(pid_, SIGKILL);
                ::waitpid(pid_, &status, 0);
                break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        pid_ = -1;
    }

    /// A synchronous hiredis connection to this server (1 s timeouts); nullptr on failure.
    redisContext* connect() const
    {
        timeval tv{1, 0};
        redisContext* c = redisConnectWithTimeout("127.0.0.1", port_, tv);
        if (!c) return nullptr;
        if (c->err) {
            redisFree(c);
            return nullptr;
        }
        redisSetTimeout(c, tv);
        return c;
    }

private:
    bool ping() const
    {
        redisContext* c = connect();
        if (!c) return false;
        auto* r = static_cast<redisReply*>(redisCommand(c, "PING"));
        bool ok = r && r->type == REDIS_REPLY_STATUS;
        if (r) freeReplyObject(r);
        redisFree(c);
        return ok;
    }

    std::uint16_t port_ = 0;
    pid_t pid_ = -1;
};

} // namespace sluice_test
