// Child processes of the examples (a spawned server, a spawned redis-server): start one
// that dies with its parent, stop it by pid.
#pragma once

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace examples {

/// fork + execvp(args[0], args): the child gets `stdout_fd` as its stdout (-1: /dev/null;
/// -2: inherited) and SIGTERM when this process dies, even by a crash, so no child
/// outlives an example. Returns the pid, or -1 (errno set) if fork failed.
inline pid_t start_child(const std::vector<std::string>& args, int stdout_fd, int close_in_child = -1)
{
    std::vector<std::string> copy = args;
    std::vector<char*> argv;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = ::fork();
    if (pid != 0) return pid;
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (stdout_fd == -1 && !std::freopen("/dev/null", "w", stdout)) ::_exit(126);
    if (stdout_fd >= 0) {
        ::dup2(stdout_fd, STDOUT_FILENO);
        ::close(stdout_fd);
    }
    if (close_in_child >= 0) ::close(close_in_child);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
}

/// SIGTERM, then SIGKILL if it has not exited within `grace`. Returns its wait status.
inline int stop_child(pid_t pid, std::chrono::milliseconds grace = std::chrono::seconds(5))
{
    ::kill(pid, SIGTERM);
    int status = 0;
    auto deadline = std::chrono::steady_clock::now() + grace;
    while (::waitpid(pid, &status, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > deadline) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, &status, 0);
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return status;
}

} // namespace examples
