// Starts a throwaway redis-server on a free 127.0.0.1 port (`--spawn-redis`), for a
// self-contained demo of a quota shared through Redis; stops it by pid.
#pragma once

#include "child_process.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

namespace examples {

class spawned_redis {
public:
    /// Picks a free port, runs redis-server there (no persistence) and waits until it
    /// accepts connections: at most 5 attempts (another process may take the port between
    /// the pick and the bind), 5 s each. nullptr, with the reason in `why`, on failure.
    static std::unique_ptr<spawned_redis> start(std::string& why)
    {
        for (int attempt = 0; attempt < 5; ++attempt) {
            std::uint16_t port = free_port();
            if (port == 0) {
                why = "no free loopback port";
                return nullptr;
            }
            pid_t pid = start_child({"redis-server", "--port", std::to_string(port), "--bind", "127.0.0.1", "--save",
                                     "", "--appendonly", "no", "--loglevel", "warning"},
                                    -1);
            if (pid < 0) {
                why = "fork failed";
                return nullptr;
            }
            std::unique_ptr<spawned_redis> r(new spawned_redis(pid, port));
            auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
            bool up = false;
            while (std::chrono::steady_clock::now() < deadline) {
                // A connection can also reach whoever took the port first; a redis-server
                // that lost the port exits at once, so it must still run after the connect.
                up = up || accepts(port);
                std::this_thread::sleep_for(std::chrono::milliseconds(up ? 50 : 20));
                int status = 0;
                if (::waitpid(pid, &status, WNOHANG) == pid) { // exited: not installed, or the port was taken
                    r->pid_ = -1;
                    if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
                        why = "cannot run redis-server (is it installed? Debian: apt-get install redis-server)";
                        return nullptr;
                    }
                    break;
                }
                if (up) return r;
            }
        }
        why = "redis-server did not come up on a free loopback port (5 attempts)";
        return nullptr;
    }

    spawned_redis(const spawned_redis&) = delete;
    spawned_redis& operator=(const spawned_redis&) = delete;
    ~spawned_redis() { stop(); }

    std::uint16_t port() const noexcept { return port_; }
    pid_t pid() const noexcept { return pid_; }

    void stop()
    {
        if (pid_ > 0) stop_child(pid_);
        pid_ = -1;
    }

private:
    spawned_redis(pid_t pid, std::uint16_t port) : pid_(pid), port_(port) {}

    static sockaddr_in loopback(std::uint16_t port)
    {
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(port);
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        return a;
    }

    static std::uint16_t free_port()
    {
        int fd = ::socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) return 0;
        sockaddr_in a = loopback(0);
        socklen_t len = sizeof a;
        std::uint16_t port = 0;
        if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
            port = ntohs(a.sin_port);
        ::close(fd);
        return port;
    }

    static bool accepts(std::uint16_t port)
    {
        int fd = ::socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) return false;
        sockaddr_in a = loopback(port);
        bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
        ::close(fd);
        return ok;
    }

    pid_t pid_;
    std::uint16_t port_;
};

} // namespace examples
