// Starts the example server (examples/server) as a child process for `--spawn-server`,
// reads its port from its first stdout line and stops it by pid when done.
#pragma once

#include "child_process.hpp"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace examples {

/// The default server binary: `server` in the directory of the running executable.
inline std::string server_next_to_self()
{
    std::error_code ec;
    auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) return "server";
    return (self.parent_path() / "server").string();
}

class spawned_server {
public:
    /// Runs `bin --port 0 args...` and waits (at most 10 s) for its
    /// `listening on 127.0.0.1:PORT` line. nullptr, with the reason in `why`, on failure.
    static std::unique_ptr<spawned_server> start(const std::string& bin, const std::vector<std::string>& args,
                                                 std::string& why)
    {
        if (::access(bin.c_str(), X_OK) != 0) {
            why = "cannot execute server binary '" + bin + "' (build it: meson compile -C build server, or pass --server-bin)";
            return nullptr;
        }
        int fds[2];
        if (::pipe(fds) != 0) {
            why = std::string("pipe: ") + std::strerror(errno);
            return nullptr;
        }
        std::vector<std::string> args_v{bin, "--port", "0"};
        args_v.insert(args_v.end(), args.begin(), args.end());
        pid_t pid = start_child(args_v, fds[1], fds[0]);
        if (pid < 0) {
            why = std::string("fork: ") + std::strerror(errno);
            ::close(fds[0]);
            ::close(fds[1]);
            return nullptr;
        }
        ::close(fds[1]);
        std::unique_ptr<spawned_server> s(new spawned_server(pid, fds[0]));
        std::string line;
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (line.find('\n') == std::string::npos) {
            auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
            pollfd p{fds[0], POLLIN, 0};
            if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) {
                why = "the server did not print its port within 10 s";
                return nullptr;
            }
            char buf[256];
            auto n = ::read(fds[0], buf, sizeof buf);
            if (n <= 0) {
                why = "the server exited before printing its port";
                return nullptr;
            }
            line.append(buf, static_cast<std::size_t>(n));
        }
        line.resize(line.find('\n'));
        constexpr std::string_view prefix = "listening on 127.0.0.1:";
        if (line.rfind(prefix, 0) != 0) {
            why = "unexpected first line from the server: '" + line + "'";
            return nullptr;
        }
        s->port_ = static_cast<std::uint16_t>(std::atoi(line.c_str() + prefix.size()));
        if (s->port_ == 0) {
            why = "no port in '" + line + "'";
            return nullptr;
        }
        // Whatever else the server prints must not fill the pipe and block it.
        s->drain_ = std::thread([fd = fds[0]] {
            char buf[4096];
            while (::read(fd, buf, sizeof buf) > 0) {
            }
        });
        return s;
    }

    spawned_server(const spawned_server&) = delete;
    spawned_server& operator=(const spawned_server&) = delete;
    ~spawned_server() { stop(); }

    std::uint16_t port() const noexcept { return port_; }
    pid_t pid() const noexcept { return pid_; }

    /// SIGTERM, then SIGKILL if it has not exited within 5 s. Returns its exit status.
    int stop()
    {
        if (pid_ > 0) {
            status_ = stop_child(pid_);
            pid_ = -1;
        }
        if (drain_.joinable()) drain_.join(); // EOF once the server is gone
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
        return status_;
    }

private:
    spawned_server(pid_t pid, int fd) : pid_(pid), fd_(fd) {}

    pid_t pid_;
    int fd_;
    std::uint16_t port_ = 0;
    int status_ = 0;
    std::thread drain_;
};

/// `--spawn-server [--url PATH]` of the example clients: starts `bin` (empty: the server
/// next to this executable) with `args` and turns `url`, a path (empty: /api/items), into
/// the server's URL. On failure says why on stderr, returns nullptr and sets `rc` to the
/// exit code: 2 for bad usage, 1 when the server did not start.
inline std::unique_ptr<spawned_server> spawn_server_for(const char* program, std::string bin,
                                                        const std::vector<std::string>& args, std::string& url, int& rc)
{
    if (bin.empty()) bin = server_next_to_self();
    std::string why;
    auto server = spawned_server::start(bin, args, why);
    if (!server) {
        std::fprintf(stderr, "%s: --spawn-server: %s\n", program, why.c_str());
        rc = 1;
        return nullptr;
    }
    std::string path = url.empty() ? "/api/items" : url;
    if (path.front() != '/') {
        std::fprintf(stderr, "%s: with --spawn-server, --url is a path such as /api/items\n", program);
        rc = 2;
        return nullptr;
    }
    url = "http://127.0.0.1:" + std::to_string(server->port()) + path;
    std::string shown;
    for (auto& a : args) shown += " " + a;
    std::fprintf(stderr, "%s: started %s (pid %d) on port %u with%s\n", program, bin.c_str(),
                 static_cast<int>(server->pid()), server->port(), shown.c_str());
    return server;
}

} // namespace examples
