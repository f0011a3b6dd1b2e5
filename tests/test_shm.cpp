// sluice::shm: the shared-memory GCRA against policy::gcra (the same arrivals, the same
// decisions), the segment's life (create, attach, mismatches, permissions, stale, remove,
// bad input), processes deciding on one segment, and processes killed with SIGKILL at
// random points while others decide. Every `now` is passed by hand.
#include <sluice/policy/gcra.hpp>
#include <sluice/policy/shm_gcra.hpp>
#include <sluice/shm/gcra.hpp>
#include <sluice/shm/segment.hpp>

#include <boost/system/system_error.hpp>
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <string>
#include <type_traits>
#include <vector>

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

// The old name still compiles, deprecated, as the same type.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static_assert(std::is_same_v<sluice::shm::gcra, sluice::policy::shm_gcra>);
#pragma GCC diagnostic pop

#include "rng.hpp"
#include "policy_support.hpp"
#include "shm_support.hpp"

using namespace std::chrono_literals;
using sluice::error;
using sluice::rate;
using sluice_test::free_board;
using sluice_test::shared_board;
using sluice_test::check_same;
using sluice_test::thrown;
using sluice_test::shm_name;
using sluice_test::spawn;
using sluice_test::wait_exit;

namespace {

// Feeds policy::shm_gcra and policy::gcra the same random requests from `start` on and checks
// every answer and the state after it. Refunds are those of a waiting queue: of
// reservations still in the future.
void compare_with_gcra(const std::string& name, std::uint64_t seed, std::int64_t start, std::int64_t interval,
                       std::uint64_t burst, std::int64_t slack)
{
    sluice_test::rng g(seed);
    sluice::rate r = rate::every(std::chrono::nanoseconds{interval});
    sluice::policy::gcra model(r, burst, std::chrono::nanoseconds{slack});
    sluice::policy::shm_gcra shared(name, r, burst, std::chrono::nanoseconds{slack});
    std::int64_t now = start;
    struct pending {
        std::uint64_t n;
        std::int64_t at;        // its slot now (moved up by refunds ahead of it)
        std::uint64_t number;   // its reservation's number, what refund() is told
    };
    std::deque<pending> queued;
    for (int i = 0; i < 20000; ++i) {
        CAPTURE(i);
        CAPTURE(now);
        // Mostly steps of about an interval, some long idle gaps, some steps back.
        int kind = static_cast<int>(g.below(100));
        if (kind < 70)
            now += g.in(0, 2 * interval);
        else if (kind < 75)
            now += g.in(0, 1000 * interval * static_cast<std::int64_t>(burst));
        else if (kind < 78)
            now -= g.in(0, 3 * interval);
        std::uint64_t n = g.chance(3) ? 0 : 1 + g.below(burst + (g.chance(5) ? 2 : 0));
        // Waiters whose slot has come are served: no longer refundable.
        while (!queued.empty() && queued.front().at <= now) queued.pop_front();
        int op = static_cast<int>(g.below(100));
        if (op < 50) {
            check_same(shared.try_acquire(n, now), model.try_acquire(n, now));
        } else if (op < 60) {
            check_same(shared.check(n, now), model.check(n, now));
        } else if (op < 80) {
            std::int64_t max_wait = g.in(0, 5 * interval * static_cast<std::int64_t>(burst));
            sluice::reservation a = shared.reserve(n, now, max_wait);
            sluice::reservation b = model.reserve(n, now, max_wait);
            CHECK(a.admitted == b.admitted);
            CHECK(a.at == b.at);
            CHECK(a.error == b.error);
            if (a.admitted && a.at > now) queued.push_back({n, a.at, shared.last_reservation()});
        } else if (op < 90) {
            std::uint64_t ahead = g.below(4);
            CHECK(shared.predict(n, now, ahead) == model.predict(n, now, ahead));
        } else if (!queued.empty()) {
            // A queue refunds any of its waiters (a cancellation).
            // The waiters behind it move up by what the refund gave back, as
            // reserving_queue moves them.
            std::size_t k = g.below(queued.size());
            std::uint64_t m = queued[k].n;
            std::uint64_t number = queued[k].number;
            queued.erase(queued.begin() + static_cast<std::ptrdiff_t>(k));
            std::int64_t moved = shared.refund(m, now, number);
            CHECK(moved == model.refund(m, now));
            for (std::size_t j = k; j < queued.size(); ++j) queued[j].at -= moved;
        }
        CHECK(shared.empty_at() == std::max(model.empty_at(), std::numeric_limits<std::int64_t>::min()));
        if (model.empty_at() != std::numeric_limits<std::int64_t>::min())
            REQUIRE(shared.empty_at() == model.empty_at());
        CHECK(shared.reset_after(now) == model.reset_after(now));
        CHECK(shared.idle_at(now) == model.idle_at(now));
    }
}

} // namespace

TEST_SUITE_BEGIN("shm");

TEST_CASE("policy::shm_gcra decides as policy::gcra on the same arrivals (token bucket, leaky bucket, far from 0)")
{
    shm_name a("model-tb"), b("model-lb"), c("model-far"), d("model-big");
    SUBCASE("token bucket") { compare_with_gcra(a.str(), 1, 1'000'000'000, 1000, 5, 0); }
    SUBCASE("leaky bucket with slack") { compare_with_gcra(b.str(), 2, 1'000'000'000, 1000, 1, 2500); }
    SUBCASE("far from 0: the 128-bit path") {
        compare_with_gcra(c.str(), 3, std::numeric_limits<std::int64_t>::max() - (std::int64_t{1} << 40), 1000, 7, 300);
    }
    SUBCASE("a large burst and slack") { compare_with_gcra(d.str(), 4, 5, 10'000'000, 1000, 7'000'000); }
}

TEST_CASE("policy::shm_gcra: every instance on a name decides on one bucket")
{
    shm_name name("share");
    sluice::policy::shm_gcra a(name.str(), rate::per_second(1000), 3);
    sluice::policy::shm_gcra b(name.str(), rate::per_second(1000), 3);
    CHECK(a.segment().created());
    CHECK_FALSE(b.segment().created());
    const std::int64_t t = 1'000'000'000;
    CHECK(a.try_acquire(2, t).admitted);
    sluice::decision d = b.try_acquire(2, t);
    CHECK_FALSE(d.admitted);
    CHECK(d.remaining == 1);
    CHECK(b.try_acquire(1, t).admitted);
    CHECK_FALSE(a.try_acquire(1, t).admitted);
    CHECK(a.try_acquire(1, t + 1'000'000).admitted);
    CHECK(a.empty_at() == b.empty_at());
}

TEST_CASE("segment: another configuration is refused, the configuration is the creator's")
{
    shm_name name("mismatch");
    sluice::policy::shm_gcra a(name.str(), rate::per_second(1000), 3, 1ms);
    CHECK(thrown([&] { sluice::policy::shm_gcra b(name.str(), rate::per_second(999), 3, 1ms); }) ==
          error::shm_config_mismatch);
    CHECK(thrown([&] { sluice::policy::shm_gcra b(name.str(), rate::per_second(1000), 4, 1ms); }) ==
          error::shm_config_mismatch);
    CHECK(thrown([&] { sluice::policy::shm_gcra b(name.str(), rate::per_second(1000), 3); }) ==
          error::shm_config_mismatch);
    CHECK(thrown([&] {
              sluice::policy::shm_gcra b(sluice::shm::segment_options{name.str(), 0600, 8192}, rate::per_second(1000), 3, 1ms);
          }) == error::shm_config_mismatch);
    CHECK_FALSE(thrown([&] { sluice::policy::shm_gcra b(name.str(), rate::per_second(1000), 3, 1ms); }));
}

TEST_CASE("segment: another layout, version or kind, or not a segment at all, is refused, never misread")
{
    shm_name name("layout");
    using sluice::shm::detail::segment_header;
    auto patch = [&](auto change) {
        sluice::shm::remove(name.str());
        { sluice::policy::shm_gcra a(name.str(), rate::per_second(1000), 3); }
        int fd = ::open(name.path().c_str(), O_RDWR);
        REQUIRE(fd >= 0);
        void* p = ::mmap(nullptr, sizeof(segment_header), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        REQUIRE(p != MAP_FAILED);
        change(*static_cast<segment_header*>(p));
        ::munmap(p, sizeof(segment_header));
        ::close(fd);
        return thrown([&] { sluice::policy::shm_gcra b(name.str(), rate::per_second(1000), 3); });
    };
    CHECK(patch([](segment_header& h) { h.layout_version += 1; }) == error::shm_incompatible);
    CHECK(patch([](segment_header& h) { h.magic ^= 1; }) == error::shm_incompatible);
    CHECK(patch([](segment_header& h) { h.kind = 99; }) == error::shm_incompatible);
    CHECK(patch([](segment_header& h) { h.word_size = 4; }) == error::shm_incompatible);
    CHECK(patch([](segment_header& h) { h.header_size += 8; }) == error::shm_incompatible);
    CHECK(patch([](segment_header& h) { h.byte_order = 0x0807060504030201ULL; }) == error::shm_incompatible);
    CHECK(patch([](segment_header& h) { h.size *= 2; }) == error::shm_incompatible);
    CHECK(patch([](segment_header&) {}) == boost::system::error_code{});

    // Not a regular file: a FIFO (opening must not hang), a directory, a symbolic link.
    sluice::shm::remove(name.str());
    REQUIRE(::mkfifo(name.path().c_str(), 0600) == 0);
    CHECK(thrown([&] { sluice::policy::shm_gcra b(name.str(), rate::per_second(1000), 3); }) == error::shm_incompatible);
    sluice::shm::remove(name.str());
    REQUIRE(::symlink("/dev/null", name.path().c_str()) == 0);
    CHECK(thrown([&] { sluice::policy::shm_gcra b(name.str(), rate::per_second(1000), 3); }) == error::shm_incompatible);
    sluice::shm::remove(name.str());
    REQUIRE(::mkdir(name.path().c_str(), 0700) == 0);
    CHECK(thrown([&] { sluice::policy::shm_gcra b(name.str(), rate::per_second(1000), 3); }) == error::shm_incompatible);
    ::rmdir(name.path().c_str());

    // Files that are no segment: empty, short, text.
    for (std::string content : {std::string(), std::string("hello"), std::string(4096, 'x')}) {
        sluice::shm::remove(name.str());
        int fd = ::open(name.path().c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
        REQUIRE(fd >= 0);
        REQUIRE(::write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size()));
        ::close(fd);
        CHECK(thrown([&] { sluice::policy::shm_gcra b(name.str(), rate::per_second(1000), 3); }) == error::shm_incompatible);
    }
}

TEST_CASE("segment: created 0600 whatever the umask, or with the mode asked; another user cannot attach")
{
    shm_name name("mode"), wide("mode-wide");
    mode_t old = ::umask(0);
    { sluice::policy::shm_gcra a(name.str(), rate::per_second(1000), 3); }
    ::umask(0077);
    { sluice::policy::shm_gcra a(sluice::shm::segment_options{wide.str(), 0640}, rate::per_second(1000), 3); }
    ::umask(old);
    struct stat st {};
    REQUIRE(::stat(name.path().c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0600);
    CHECK(st.st_uid == ::geteuid());
    REQUIRE(::stat(wide.path().c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0640);

    // Another user: as root, a child that becomes nobody; otherwise a segment of mode 0.
    shm_name closed("mode-closed");
    if (::geteuid() == 0) {
        pid_t pid = spawn([&] {
            if (::setgid(65534) != 0 || ::setuid(65534) != 0) return 4;
            auto ec = thrown([&] { sluice::policy::shm_gcra b(name.str(), rate::per_second(1000), 3); });
            return ec == error::shm_permission ? 0 : 5;
        });
        CHECK(wait_exit(pid) == 0);
    } else {
        { sluice::policy::shm_gcra a(sluice::shm::segment_options{closed.str(), 0}, rate::per_second(1000), 3); }
        CHECK(thrown([&] { sluice::policy::shm_gcra b(closed.str(), rate::per_second(1000), 3); }) == error::shm_permission);
    }
}

TEST_CASE("segment: one left by another boot is stale and replaced by a new, full bucket")
{
    shm_name name("stale");
    using sluice::shm::detail::segment_header;
    const std::int64_t t = 1'000'000'000;
    {
        sluice::policy::shm_gcra a(name.str(), rate::per_second(1000), 3);
        CHECK(a.try_acquire(3, t).admitted);
    }
    int fd = ::open(name.path().c_str(), O_RDWR);
    REQUIRE(fd >= 0);
    auto* h = static_cast<segment_header*>(::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    REQUIRE(h != MAP_FAILED);
    std::memcpy(h->boot_id.data(), "another-boot", 13);
    ::munmap(h, 4096);
    ::close(fd);
    sluice::policy::shm_gcra b(name.str(), rate::per_second(1000), 3);
    CHECK(b.segment().created());
    CHECK(b.try_acquire(3, t).admitted);   // the old state is gone
}

TEST_CASE("segment: remove, and no process has to: a segment left behind is a full bucket")
{
    shm_name name("remove");
    const std::int64_t t = 1'000'000'000;
    {
        sluice::policy::shm_gcra a(name.str(), rate::per_second(1000), 2);
        CHECK(a.try_acquire(2, t).admitted);
    }
    {
        // Left behind, attached again a second later: the bucket refilled meanwhile.
        sluice::policy::shm_gcra a(name.str(), rate::per_second(1000), 2);
        CHECK_FALSE(a.segment().created());
        CHECK(a.try_acquire(2, t + 1'000'000'000).admitted);
        // Removed while attached: this process keeps its mapping, a new one starts afresh.
        CHECK(sluice::shm::remove(name.str()));
        CHECK_FALSE(sluice::shm::remove(name.str()));
        CHECK_FALSE(a.try_acquire(1, t + 1'000'000'000).admitted);
        sluice::policy::shm_gcra b(name.str(), rate::per_second(1000), 2);
        CHECK(b.segment().created());
        CHECK(b.try_acquire(2, t + 1'000'000'000).admitted);
    }
}

TEST_CASE("segment: bad names, sizes, modes and configurations are errors at construction, nothing created")
{
    std::string long_name = "/" + std::string(256, 'a');
    for (std::string bad : {std::string(), std::string("noslash"), std::string("/"), std::string("/a/b"),
                            std::string("/."), std::string("/.."), long_name, std::string("/a\0b", 4)}) {
        CAPTURE(bad);
        CHECK(thrown([&] { sluice::policy::shm_gcra a(bad, rate::per_second(10), 1); }) == error::shm_invalid_name);
        CHECK(thrown([&] { sluice::shm::remove(bad); }) == error::shm_invalid_name);
    }
    std::string longest = "/" + std::string(255, 'b');
    CHECK_FALSE(thrown([&] { sluice::policy::shm_gcra a(longest, rate::per_second(10), 1); }));
    CHECK(sluice::shm::remove(longest));
    shm_name name("bad-input");
    CHECK(thrown([&] { sluice::policy::shm_gcra a(sluice::shm::segment_options{name.str(), 0600, 100}, rate::per_second(10), 1); }) ==
          error::invalid_option);
    CHECK(thrown([&] { sluice::policy::shm_gcra a(sluice::shm::segment_options{name.str(), 01777}, rate::per_second(10), 1); }) ==
          error::invalid_option);
    CHECK(thrown([&] { sluice::policy::shm_gcra a(name.str(), rate::per_second(10), 0); }) == error::invalid_limit);
    CHECK(thrown([&] { sluice::policy::shm_gcra a(name.str(), rate::per_second(10), 1, -1ns); }) == error::invalid_duration);
    struct stat st {};
    CHECK(::stat(name.path().c_str(), &st) != 0);
    // A size given is the segment's.
    {
        sluice::policy::shm_gcra a(sluice::shm::segment_options{name.str(), 0600, 65536}, rate::per_second(10), 1);
        CHECK(a.segment().size() == 65536);
        CHECK(::stat(name.path().c_str(), &st) == 0);
        CHECK(st.st_size == 65536);
    }
}

TEST_CASE("two processes deciding on one segment admit exactly what one bucket holds")
{
    shm_name name("two-procs");
    struct board {
        std::atomic<int> ready{0};
        std::atomic<int> go{0};
        std::atomic<std::int64_t> admitted[2][2]{};
    };
    auto* b = shared_board<board>();
    const std::int64_t t = 1'000'000'000;
    const auto r = rate::per_second(1'000'000);   // one permit per us
    pid_t pids[2];
    for (int c = 0; c < 2; ++c) {
        pids[c] = spawn([&, c] {
            sluice::policy::shm_gcra p(name.str(), r, 5000);
            b->ready.fetch_add(1);
            while (b->go.load() == 0) ::sched_yield();
            // Round 0: a full bucket of 5000 at t, 3000 requests each.
            for (int i = 0; i < 3000; ++i)
                if (p.try_acquire(1, t).admitted) b->admitted[0][c].fetch_add(1);
            b->ready.fetch_add(1);
            while (b->go.load() == 1) ::sched_yield();
            // Round 1: 1000 us later, 1000 permits more; requests of 1 and 2.
            for (int i = 0; i < 1000; ++i) {
                std::uint64_t n = 1 + static_cast<std::uint64_t>(i % 2);
                if (p.try_acquire(n, t + 1'000'000).admitted) b->admitted[1][c].fetch_add(static_cast<std::int64_t>(n));
            }
            return 0;
        });
    }
    while (b->ready.load() < 2) ::sched_yield();
    b->go.store(1);
    while (b->ready.load() < 4) ::sched_yield();
    b->go.store(2);
    for (pid_t pid : pids) CHECK(wait_exit(pid) == 0);
    CHECK(b->admitted[0][0] + b->admitted[0][1] == 5000);
    CHECK(b->admitted[1][0] + b->admitted[1][1] == 1000);
    free_board(b);
}

TEST_CASE("processes that create one segment at once: one creates it, all share it")
{
    shm_name name("race");
    constexpr int procs = 8;
    struct board {
        std::atomic<int> ready{0};
        std::atomic<int> go{0};
        std::atomic<int> created{0};
        std::atomic<int> admitted{0};
    };
    auto* b = shared_board<board>();
    std::vector<pid_t> pids;
    for (int c = 0; c < procs; ++c) {
        pids.push_back(spawn([&] {
            b->ready.fetch_add(1);
            while (b->go.load() == 0) {}
            sluice::policy::shm_gcra p(name.str(), rate::per_second(1000), 5);
            if (p.segment().created()) b->created.fetch_add(1);
            if (p.try_acquire(1, 1'000'000'000).admitted) b->admitted.fetch_add(1);
            return 0;
        }));
    }
    while (b->ready.load() < procs) ::sched_yield();
    b->go.store(1);
    for (pid_t pid : pids) CHECK(wait_exit(pid) == 0);
    CHECK(b->created.load() == 1);
    CHECK(b->admitted.load() == 5);
    free_board(b);
}

// Processes decide on one segment while the test kills them with SIGKILL at random
// points (some while they create or attach to it) and starts new ones. Time is frozen in
// phases, set by the test: within a phase the bucket admits exactly what it holds, in
// whatever order the processes come, so after each phase the shared word must be exactly
// the model's (policy::gcra fed the same phase), and the admissions the survivors
// recorded may fall short of it only by what killed processes committed unrecorded.
TEST_CASE("SIGKILL at random points of 10,000 decisions leaves the segment exact for the survivors" *
          doctest::timeout(120))
{
    shm_name name("sigkill");
    constexpr int procs = 4;
    constexpr int max_phases = 4000;
    struct board {
        std::atomic<std::int64_t> phase{0};
        std::atomic<std::int64_t> tickets{0};
        std::atomic<std::int64_t> decided{0};
        std::atomic<int> stop{0};
        std::int64_t instant[max_phases]{};   // written before its phase is published
        std::atomic<std::int64_t> admitted[max_phases]{};
    };
    auto* b = shared_board<board>();
    const std::int64_t interval = 1000;
    const std::uint64_t burst = 8;
    const auto r = rate::every(std::chrono::nanoseconds{interval});

    auto child = [&] {
        return spawn([&] {
            sluice::policy::shm_gcra p(name.str(), r, burst);
            while (b->stop.load() == 0) {
                std::int64_t t = b->tickets.load();
                if (t <= 0) {
                    ::sched_yield();
                    continue;
                }
                if (!b->tickets.compare_exchange_weak(t, t - 1)) continue;
                std::int64_t ph = b->phase.load();
                if (p.try_acquire(1, b->instant[ph]).admitted) b->admitted[ph].fetch_add(1);
                b->decided.fetch_add(1);
            }
            return 0;
        });
    };

    sluice_test::killed_children children(b, [&](int) { return child(); }, procs);
    sluice_test::rng g(25);
    auto kill_one = [&] { children.kill_one(g); };
    // Some die while they create or attach to the segment.
    kill_one();
    kill_one();
    sluice::policy::shm_gcra observer(name.str(), r, burst);
    sluice::policy::gcra model(r, burst);

    std::int64_t now = 1'000'000'000;
    std::int64_t model_total = 0;
    std::vector<std::int64_t> caps;
    int phase = 0;
    for (; phase < max_phases && b->decided.load() < 10'000; ++phase) {
        CAPTURE(phase);
        // Mostly short steps, sometimes a long idle gap.
        now += g.chance(5) ? 1'000'000 : g.in(0, 3 * interval);
        std::int64_t cap = 0;
        while (model.try_acquire(1, now).admitted) ++cap;
        model_total += cap;
        caps.push_back(cap);
        b->instant[phase] = now;
        b->phase.store(phase);
        b->tickets.fetch_add(cap + 16);
        int polls = 0;
        for (std::int64_t z; (z = observer.empty_at()) != model.empty_at();) {
            REQUIRE(z < model.empty_at());   // never beyond: never over
            if (polls % 64 == 63 && g.chance(2)) kill_one();
            if (b->tickets.load() <= 0) b->tickets.fetch_add(1);
            ++polls;
            ::sched_yield();
        }
        if (g.chance(10)) kill_one();
    }
    children.finish();
    const int kills = children.kills();
    // Nothing moved after the last phase closed (decisions at older instants are refused).
    CHECK(observer.empty_at() == model.empty_at());
    std::int64_t recorded = 0;
    for (int p = 0; p < phase; ++p) {
        CAPTURE(p);
        CHECK(b->admitted[p].load() <= caps[static_cast<std::size_t>(p)]);
        recorded += b->admitted[p].load();
    }
    MESSAGE("phases " << phase << ", decisions " << b->decided.load() << ", kills " << kills << ", admitted "
                      << model_total << ", recorded by survivors " << recorded);
    CHECK(b->decided.load() >= 10'000);
    CHECK(kills >= 20);
    CHECK(recorded <= model_total);
    CHECK(recorded >= model_total - kills);
}

TEST_SUITE_END();
