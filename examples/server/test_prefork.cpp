// The --workers parent's bookkeeping (prefork.hpp's fleet), fed signals and wait statuses by
// hand: whom it signals, when it is done, and its exit code. No process is forked.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "prefork.hpp"

#include <doctest/doctest.h>

#include <csignal>
#include <vector>

using server_prefork::fleet;

namespace {

// Wait statuses as waitpid() reports them (Linux's encoding: exit code << 8, or the signal).
constexpr int exited(int code) { return code << 8; }
constexpr int killed_by(int sig) { return sig; }

} // namespace

TEST_CASE("a signal to the parent goes to every worker alive; clean exits make 0")
{
    fleet f({101, 102, 103});
    CHECK_FALSE(f.stopping());
    CHECK(f.on_signal() == std::vector<pid_t>{101, 102, 103});
    CHECK(f.stopping());
    CHECK(f.on_exit(102, exited(0)).empty());   // stopping already: nobody more to stop
    CHECK(f.on_signal() == std::vector<pid_t>{101, 103});   // a second ^C: the rest again
    CHECK(f.on_exit(101, exited(0)).empty());
    CHECK_FALSE(f.done());
    CHECK(f.on_exit(103, exited(0)).empty());
    CHECK(f.done());
    CHECK(f.exit_code() == 0);
}

TEST_CASE("a worker that dies stops the others, and the exit code says so")
{
    fleet f({7, 8});
    CHECK(f.on_exit(7, killed_by(SIGKILL)) == std::vector<pid_t>{8});
    CHECK(f.stopping());
    CHECK(f.exit_code() == 1);
    CHECK(f.on_exit(8, exited(0)).empty());
    CHECK(f.done());
    CHECK(f.exit_code() == 1);
}

TEST_CASE("a worker that exits on its own (--seconds) ends the server cleanly")
{
    fleet f({7, 8});
    CHECK(f.on_exit(8, exited(0)) == std::vector<pid_t>{7});
    CHECK(f.on_exit(7, exited(0)).empty());
    CHECK(f.exit_code() == 0);
}

TEST_CASE("a non-zero exit fails; an unknown or already reaped pid changes nothing")
{
    fleet f({7, 8});
    CHECK(f.on_exit(9, exited(1)).empty());
    CHECK_FALSE(f.stopping());
    CHECK(f.exit_code() == 0);
    CHECK(f.on_exit(7, exited(3)) == std::vector<pid_t>{8});
    CHECK(f.on_exit(7, exited(0)).empty());
    CHECK(f.alive() == std::vector<pid_t>{8});
    CHECK(f.index_of(8) == 1);
    CHECK(f.index_of(9) == 2);
    f.fail();
    CHECK(f.exit_code() == 1);
}
