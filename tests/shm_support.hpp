// What the shared-memory tests share: segment names no other test run uses, removed when
// the test ends.
#pragma once

#include <sluice/shm/segment.hpp>

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include <signal.h>

#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rng.hpp"

namespace sluice_test {

/// A segment name of this process and tag; removed (if it exists) when made and when gone,
/// whoever owns the file (shm::remove leaves another user's alone).
class shm_name {
public:
    explicit shm_name(const std::string& tag) : name_("/sluice-test-" + std::to_string(::getpid()) + "-" + tag)
    {
        ::unlink(path().c_str());
    }
    ~shm_name() { ::unlink(path().c_str()); }
    shm_name(const shm_name&) = delete;
    shm_name& operator=(const shm_name&) = delete;

    const std::string& str() const noexcept { return name_; }
    operator const std::string&() const noexcept { return name_; }
    /// The file the segment is under.
    std::string path() const { return "/dev/shm" + name_; }

private:
    std::string name_;
};

/// Memory every process of a test sees (mapped before fork).
template <class T>
T* shared_board()
{
    void* p = ::mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    return ::new (p) T{};
}

/// Unmaps a shared_board.
template <class T>
void free_board(T* b)
{
    b->~T();
    ::munmap(b, sizeof(T));
}

/// Runs f in a child process; returns its pid. The child never returns to the test.
template <class F>
pid_t spawn(F&& f)
{
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        int rc = 0;
        try {
            rc = f();
        } catch (...) {
            rc = 3;
        }
        ::_exit(rc);
    }
    return pid;
}

/// The child's exit status, or 128 + the signal that killed it.
inline int wait_exit(pid_t pid)
{
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/// The children of a test that kills them with SIGKILL at random points and starts others
/// in their slots. Whatever happens to the test, none outlives it, and the board they share
/// (a shared_board with a `stop` flag that tells them to end) is unmapped after the last.
template <class Board>
class killed_children {
public:
    /// start(slot) forks the child of a slot; `count` slots.
    killed_children(Board* board, std::function<pid_t(int)> start, int count)
        : board_(board), start_(std::move(start))
    {
        for (int i = 0; i < count; ++i) pids_.push_back(start_(i));
    }

    ~killed_children()
    {
        board_->stop.store(1);
        for (pid_t pid : pids_) ::kill(pid, SIGKILL);
        for (pid_t pid : pids_) ::waitpid(pid, nullptr, 0);
        free_board(board_);
    }

    killed_children(const killed_children&) = delete;
    killed_children& operator=(const killed_children&) = delete;

    /// Kills a child at a random point (after a random spin), checks that SIGKILL is what
    /// ended it, runs before_restart(slot) while the slot has no child, and starts another
    /// in it. Returns the slot.
    template <class F>
    std::size_t kill_one(rng& g, F&& before_restart)
    {
        for (std::uint64_t spin = g.below(20000); spin > 0; --spin) asm volatile("");
        std::size_t k = g.below(pids_.size());
        ::kill(pids_[k], SIGKILL);
        CHECK(wait_exit(pids_[k]) == 128 + SIGKILL);
        ++kills_;
        before_restart(k);
        pids_[k] = start_(static_cast<int>(k));
        return k;
    }
    std::size_t kill_one(rng& g)
    {
        return kill_one(g, [](std::size_t) {});
    }

    /// Tells the children to end and checks that each exits with 0.
    void finish()
    {
        board_->stop.store(1);
        for (pid_t pid : pids_) CHECK(wait_exit(pid) == 0);
        pids_.clear();
    }

    int kills() const noexcept { return kills_; }

private:
    Board* board_;
    std::function<pid_t(int)> start_;
    std::vector<pid_t> pids_;
    int kills_ = 0;
};

} // namespace sluice_test
