// What the shared-memory tests share: segment names no other test run uses, removed when
// the test ends.
#pragma once

#include <sluice/shm/segment.hpp>

#include <doctest/doctest.h>

#include <new>
#include <string>

#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

namespace sluice_test {

/// A segment name of this process and tag; removed (if it exists) when made and when gone.
class shm_name {
public:
    explicit shm_name(const std::string& tag) : name_("/sluice-test-" + std::to_string(::getpid()) + "-" + tag)
    {
        sluice::shm::remove(name_);
    }
    ~shm_name() { sluice::shm::remove(name_); }
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

} // namespace sluice_test
