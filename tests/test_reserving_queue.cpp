// The reserving queue (GCRA waiters) on its own: no io_context, no timer; every `now` is
// passed by hand.
#include <sluice/detail/wait/reserving_queue.hpp>
#include <sluice/policy/gcra.hpp>

#include <boost/asio/error.hpp>
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "policy_support.hpp"
#include "queue_support.hpp"

using namespace std::chrono_literals;
using sluice::error;
using sluice::rate;
using sluice::detail::max_ns;
using sluice::policy::gcra;
using sluice_test::handed_out;
using sluice_test::ids;
using sluice_test::test_waiter;
using queue = sluice::detail::reserving_queue<gcra>;

namespace {

constexpr std::int64_t ms = 1'000'000;
constexpr std::int64_t t0 = 1000 * 1000 * ms;
constexpr std::int64_t forever = max_ns;

// 10/s (100 ms a permit), burst `burst`, emptied at t0.
struct fixture {
    explicit fixture(std::uint64_t burst = 1, sluice::limiter_options o = {}) : q(o, rate::per_second(10), burst)
    {
        REQUIRE(q.try_acquire(burst, t0).admitted);
    }

    test_waiter* ask(std::uint64_t n, std::int64_t max_wait, std::int64_t now, bool expect_queued = true)
    {
        test_waiter* w = pool.make();
        CHECK(q.enqueue(w, n, max_wait, now) == expect_queued);
        return w;
    }

    queue q;
    sluice_test::waiter_pool pool;
};

} // namespace

TEST_SUITE_BEGIN("reserving_queue");

TEST_CASE("reserving_queue: waiters get consecutive slots and leave in FIFO order, each at its slot")
{
    fixture f;
    auto* a = f.ask(1, forever, t0);
    auto* b = f.ask(1, forever, t0);
    auto* c = f.ask(1, forever, t0);
    CHECK(f.q.size() == 3);
    CHECK(f.q.queued_permits() == 3);
    CHECK(f.q.wake_at() == t0 + 100 * ms);
    CHECK(f.q.policy().empty_at() == t0 + 300 * ms);   // committed at enqueue
    CHECK(handed_out([&](auto& d) { CHECK(f.q.release_due(t0 + 100 * ms - 1, d) == t0 + 100 * ms); }).empty());
    auto out = handed_out([&](auto& d) { CHECK(f.q.release_due(t0 + 100 * ms, d) == t0 + 200 * ms); });
    CHECK(ids(out) == std::vector{a->id});
    CHECK_FALSE(a->result);
    // A late call releases every waiter that is due, in order, and later slots keep theirs.
    out = handed_out([&](auto& d) { CHECK(f.q.release_due(t0 + 350 * ms, d) == max_ns); });
    CHECK(ids(out) == std::vector{b->id, c->id});
    CHECK(f.q.size() == 0);
    CHECK(f.q.queued_permits() == 0);
    CHECK(f.q.wake_at() == max_ns);
}

TEST_CASE("reserving_queue: answered at once: granted from the bucket, too long, bad input")
{
    fixture f(3);
    SUBCASE("granted: nothing queued")
    {
        auto* w = f.ask(1, 0, t0 + 100 * ms, false);
        CHECK_FALSE(w->result);
        CHECK_FALSE(w->queued);
    }
    SUBCASE("too long: nothing consumed")
    {
        std::int64_t before = f.q.policy().empty_at();
        auto* w = f.ask(2, 199 * ms, t0, false);
        CHECK(w->result == error::timed_out);
        CHECK(f.q.policy().empty_at() == before);
        auto* ok = f.ask(2, 200 * ms, t0);   // exactly as long as allowed
        CHECK(ok->queued);
    }
    SUBCASE("bad input")
    {
        CHECK(f.ask(0, forever, t0, false)->result == error::invalid_count);
        CHECK(f.ask(4, forever, t0, false)->result == error::exceeds_limit);
    }
}

TEST_CASE("reserving_queue: a cancelled waiter is refunded and every later waiter moves up")
{
    for (int victim = 0; victim < 3; ++victim) {
        CAPTURE(victim);
        fixture f;
        test_waiter* w[3];
        for (auto*& x : w)
            x = f.ask(1, forever, t0);   // +100, +200, +300
        CHECK(f.q.last_slot() == t0 + 300 * ms);
        auto out = handed_out([&](auto& d) { CHECK(f.q.cancel(w[victim], t0 + 50 * ms, d)); });
        CHECK(ids(out) == std::vector{w[victim]->id});
        CHECK(w[victim]->result == boost::asio::error::operation_aborted);
        CHECK(f.q.policy().empty_at() == t0 + 200 * ms);   // as if it had never asked
        CHECK(f.q.last_slot() == t0 + 200 * ms);
        // The others leave at +100 and +200.
        std::vector<int> left;
        for (int i = 0; i < 3; ++i)
            if (i != victim) left.push_back(w[i]->id);
        CHECK(f.q.wake_at() == t0 + 100 * ms);
        out = handed_out([&](auto& d) { f.q.release_due(t0 + 100 * ms, d); });
        CHECK(ids(out) == std::vector{left[0]});
        CHECK(f.q.wake_at() == t0 + 200 * ms);
        out = handed_out([&](auto& d) { f.q.release_due(t0 + 200 * ms, d); });
        CHECK(ids(out) == std::vector{left[1]});
        // Cancelling a waiter that is no longer queued does nothing.
        CHECK(handed_out([&](auto& d) { CHECK_FALSE(f.q.cancel(w[victim], t0 + 300 * ms, d)); }).empty());
    }
}

TEST_CASE("reserving_queue: refunds of several cancellations add up, in any order")
{
    fixture f;
    std::vector<test_waiter*> w;
    for (int i = 0; i < 8; ++i)
        w.push_back(f.ask(1, forever, t0));   // +100 .. +800
    handed_out([&](auto& d) { f.q.release_due(t0 + 150 * ms, d); });   // #0
    for (int i : {5, 3, 1})
        handed_out([&](auto& d) { f.q.cancel(w[i], t0 + 150 * ms, d); });
    // #2, #4, #6, #7 at +200, +300, +400, +500; a new request queues behind them at +600.
    CHECK(f.q.last_slot() == t0 + 500 * ms);
    auto* late = f.ask(1, forever, t0 + 150 * ms);
    CHECK(f.q.last_slot() == t0 + 600 * ms);
    std::int64_t expect = t0 + 200 * ms;
    for (int i : {2, 4, 6, 7, static_cast<int>(late->id)}) {
        CHECK(f.q.wake_at() == expect);
        auto out = handed_out([&](auto& d) { f.q.release_due(expect, d); });
        CHECK(ids(out) == std::vector{i});
        expect += 100 * ms;
    }
}

TEST_CASE("reserving_queue: a refund that makes a later waiter due releases it in the same call")
{
    // burst 2: A takes both permits at t0; B (2) waits for +200; C (1), asking at +150,
    // for +300. B cancelled at +160: C's slot becomes +100, already past.
    fixture f(2);
    auto* b = f.ask(2, forever, t0);
    auto* c = f.ask(1, forever, t0 + 150 * ms);
    CHECK(f.q.wake_at() == t0 + 200 * ms);
    auto out = handed_out([&](auto& d) { f.q.cancel(b, t0 + 160 * ms, d); });
    CHECK(ids(out) == std::vector{b->id, c->id});
    CHECK(b->result == boost::asio::error::operation_aborted);
    CHECK_FALSE(c->result);
    CHECK(f.q.size() == 0);
}

TEST_CASE("reserving_queue: queue bounds refuse with queue_full and consume nothing")
{
    SUBCASE("max_queued")
    {
        fixture f(1, {.max_queued = 2});
        f.ask(1, forever, t0);
        f.ask(1, forever, t0);
        std::int64_t before = f.q.policy().empty_at();
        CHECK(f.ask(1, forever, t0, false)->result == error::queue_full);
        CHECK(f.q.policy().empty_at() == before);
        // Bad input behind a full queue is refused as full: nothing is looked at.
        CHECK(f.ask(5, forever, t0, false)->result == error::queue_full);
    }
    SUBCASE("max_queued_permits")
    {
        fixture f(5, {.max_queued_permits = 4});
        f.ask(3, forever, t0);
        CHECK(f.ask(2, forever, t0, false)->result == error::queue_full);
        f.ask(1, forever, t0);
        CHECK(f.ask(1, forever, t0, false)->result == error::queue_full);
        CHECK(f.q.queued_permits() == 4);
    }
    SUBCASE("a full, empty queue still grants what needs no wait, and reports bad input")
    {
        queue q({.max_queued = 0}, rate::per_second(10), 2);
        sluice_test::waiter_pool pool;
        auto* a = pool.make();
        CHECK_FALSE(q.enqueue(a, 2, forever, t0));
        CHECK_FALSE(a->result);
        auto* b = pool.make();
        CHECK_FALSE(q.enqueue(b, 1, forever, t0));
        CHECK(b->result == error::queue_full);
        auto* c = pool.make();
        CHECK_FALSE(q.enqueue(c, 3, forever, t0));
        CHECK(c->result == error::exceeds_limit);
    }
}

TEST_CASE("reserving_queue: a rate change rescales queued slots and pending refunds around now")
{
    queue q({}, rate::per_second(1), 1);
    REQUIRE(q.try_acquire(1, t0).admitted);
    sluice_test::waiter_pool pool;
    std::vector<test_waiter*> w;
    for (int i = 0; i < 4; ++i) {
        w.push_back(pool.make());
        REQUIRE(q.enqueue(w.back(), 1, forever, t0));   // +1 s .. +4 s
    }
    handed_out([&](auto& d) { q.cancel(w[1], t0, d); });   // #2, #3 move up to +2 s, +3 s
    std::int64_t t = t0 + 10 * ms;
    handed_out([&](auto& d) {
        q.reconfigure([&](std::int64_t now) { return q.policy().set_rate(rate::per_second(10), now); }, t, d);
    });
    // What was left of each wait is repaid ten times faster, from t.
    const std::int64_t expect[] = {t + (1000 * ms - 10 * ms) / 10, t + (2000 * ms - 10 * ms) / 10,
                                   t + (3000 * ms - 10 * ms) / 10};
    const int order[] = {0, 2, 3};
    for (int i = 0; i < 3; ++i) {
        CHECK(q.wake_at() == expect[i]);
        auto out = handed_out([&](auto& d) { q.release_due(expect[i], d); });
        CHECK(ids(out) == std::vector{w[order[i]]->id});
    }
}

TEST_CASE("reserving_queue: a configuration change without a factor keeps the slots")
{
    fixture f;
    auto* a = f.ask(1, forever, t0);
    handed_out([&](auto& d) { f.q.reconfigure([&](std::int64_t now) { f.q.policy().set_burst(5, now); }, t0, d); });
    CHECK(f.q.wake_at() == t0 + 100 * ms);
    CHECK(a->queued);
}

TEST_CASE("reserving_queue: close completes every waiter with the error given and refunds them")
{
    fixture f;
    auto* a = f.ask(1, forever, t0);
    auto* b = f.ask(1, forever, t0);
    auto out = handed_out([&](auto& d) { f.q.close(make_error_code(error::closed), t0 + 10 * ms, d); });
    CHECK(ids(out) == std::vector{a->id, b->id});
    CHECK(a->result == error::closed);
    CHECK(b->result == error::closed);
    CHECK(f.q.policy().empty_at() == t0);
    CHECK(f.q.size() == 0);
}

TEST_CASE("reserving_queue: a blocking caller's reservation takes its place in the same order, and can be given back")
{
    fixture f;
    f.ask(1, forever, t0);   // +100
    sluice::reservation r = f.q.reserve_blocking(1, t0, forever);
    CHECK(r.admitted);
    CHECK(r.at == t0 + 200 * ms);
    auto* after = f.ask(1, forever, t0);
    CHECK(f.q.policy().empty_at() == t0 + 300 * ms);
    handed_out([&](auto& d) { f.q.cancel(after, t0, d); });
    f.q.unreserve_blocking(1, t0);
    CHECK(f.q.policy().empty_at() == t0 + 100 * ms);
    CHECK(f.q.reserve_blocking(1, t0, 100 * ms).error == error::timed_out);
}

// ---- model -------------------------------------------------------------------------------

namespace {

using sluice_test::i128;

// GCRA as a bucket of credit in ns: it refills one ns a ns up to tau = burst * interval, a
// grant of n takes n * interval (down into debt), a refund gives it back up to tau. The
// credit is kept as the instant z at which it was zero: credit(t) = min(tau, t - z). A
// queued waiter's slot is the instant its own debt is repaid: z less the debt of everyone
// behind it.
struct model {
    struct entry {
        test_waiter* w;
        std::uint64_t n;
    };

    i128 interval, tau, z;
    std::vector<entry> fifo;
    std::size_t max_queued;
    std::uint64_t max_permits;

    i128 credit(i128 t) const { return t - z < tau ? t - z : tau; }
    void take(std::uint64_t n, i128 t) { z = t - credit(t) + static_cast<i128>(n) * interval; }
    void give(std::uint64_t n, i128 t)
    {
        i128 c = credit(t) + static_cast<i128>(n) * interval;
        z = t - (c < tau ? c : tau);
    }

    std::uint64_t permits() const
    {
        std::uint64_t p = 0;
        for (auto& e : fifo) p += e.n;
        return p;
    }

    i128 slot(std::size_t k) const
    {
        i128 s = z;
        for (std::size_t j = k + 1; j < fifo.size(); ++j) s -= static_cast<i128>(fifo[j].n) * interval;
        return s;
    }

    std::vector<test_waiter*> release(i128 t)
    {
        std::vector<test_waiter*> out;
        while (!fifo.empty() && slot(0) <= t) {
            out.push_back(fifo.front().w);
            fifo.erase(fifo.begin());
        }
        return out;
    }

    std::int64_t wake() const { return fifo.empty() ? max_ns : static_cast<std::int64_t>(slot(0)); }

    std::int64_t last() const { return fifo.empty() ? max_ns : static_cast<std::int64_t>(slot(fifo.size() - 1)); }

    // The expected answer to enqueue(n, max_wait) at t; true when it queues.
    bool enqueue(test_waiter* w, std::uint64_t n, std::int64_t max_wait, std::int64_t t, boost::system::error_code& ec)
    {
        std::uint64_t burst = static_cast<std::uint64_t>((tau / interval));
        auto grantable_now = [&] { return n >= 1 && n <= burst && credit(t) >= static_cast<i128>(n) * interval; };
        ec = {};
        if (fifo.size() >= max_queued || permits() > max_permits || n > max_permits - permits()) {
            if (fifo.empty() && grantable_now()) {
                take(n, t);
                return false;
            }
            if (fifo.empty() && n == 0) ec = error::invalid_count;
            else if (fifo.empty() && n > burst) ec = error::exceeds_limit;
            else ec = error::queue_full;
            return false;
        }
        if (n == 0) { ec = error::invalid_count; return false; }
        if (n > burst) { ec = error::exceeds_limit; return false; }
        i128 nz = t - credit(t) + static_cast<i128>(n) * interval;
        if (nz >= max_ns || nz - t > max_wait) {
            ec = error::timed_out;
            return false;
        }
        take(n, t);
        if (nz <= t) return false;
        fifo.push_back({w, n});
        return true;
    }

    bool cancel(test_waiter* w, std::int64_t t)
    {
        for (std::size_t k = 0; k < fifo.size(); ++k)
            if (fifo[k].w == w) {
                give(fifo[k].n, t);
                fifo.erase(fifo.begin() + static_cast<std::ptrdiff_t>(k));
                return true;
            }
        return false;
    }
};

void run_model(std::uint64_t seed, std::int64_t start, std::int64_t interval, std::uint64_t burst,
               const sluice::limiter_options& opts)
{
    CAPTURE(seed);
    CAPTURE(start);
    CAPTURE(interval);
    CAPTURE(burst);
    sluice_test::rng g{seed};
    queue q(opts, rate::every(std::chrono::nanoseconds(interval)), burst);
    // A new bucket is full at every instant of the int64 clock: empty long before its start.
    model m{interval, static_cast<i128>(burst) * interval, -(i128(1) << 100), {}, opts.max_queued,
            opts.max_queued_permits};
    sluice_test::waiter_pool pool;
    std::vector<test_waiter*> live;
    std::int64_t t = start;
    const std::int64_t waits[] = {0, interval / 2, interval, 3 * interval, 10 * interval, 1'000'000'000'000, max_ns};

    auto check_state = [&] {
        REQUIRE(q.size() == m.fifo.size());
        CHECK(q.queued_permits() == m.permits());
        REQUIRE(q.wake_at() == m.wake());
        REQUIRE(q.last_slot() == m.last());
    };

    for (int step = 0; step < 4000; ++step) {
        CAPTURE(step);
        int op = static_cast<int>(g.next() % 100);
        if (op < 40) {
            // A request, mostly valid.
            std::uint64_t n = g.next() % 50 == 0 ? g.next() % (burst + 2) : 1 + g.next() % burst;
            std::int64_t max_wait = waits[g.next() % std::size(waits)];
            test_waiter* w = pool.make();
            boost::system::error_code want;
            // The model's own answer first: the model is not told what the queue said.
            bool model_queued = m.enqueue(w, n, max_wait, t, want);
            bool queued = q.enqueue(w, n, max_wait, t);
            REQUIRE(queued == model_queued);
            if (!queued)
                CHECK(w->result == want);
            else
                live.push_back(w);
        } else if (op < 60 && !live.empty()) {
            // A cancellation of a waiter that may or may not still wait.
            test_waiter* w = live[g.next() % live.size()];
            bool want = m.cancel(w, t);
            std::vector<test_waiter*> expect;
            if (want) expect.push_back(w);
            for (auto* r : m.release(t)) expect.push_back(r);
            auto out = handed_out([&](auto& d) { CHECK(q.cancel(w, t, d) == want); });
            REQUIRE(out == expect);
            if (want) CHECK(w->result == boost::asio::error::operation_aborted);
        } else {
            // Time passes (now and then a long idle gap), and the queue is woken.
            std::int64_t step_ns = g.next() % 30 == 0 ? 1'000'000'000'000'000 : g.in(0, 3 * interval);
            t = t > max_ns - step_ns ? max_ns : t + step_ns;   // step_ns >= 0: no overflow
            auto expect = m.release(t);
            auto out = handed_out([&](auto& d) { q.release_due(t, d); });
            REQUIRE(out == expect);
            for (auto* w : out) CHECK_FALSE(w->result);
        }
        check_state();
    }
    // Closing gives everything back, front first, as cancellations would.
    std::vector<test_waiter*> expect;
    while (!m.fifo.empty()) {
        expect.push_back(m.fifo.front().w);
        m.cancel(m.fifo.front().w, t);
    }
    auto out = handed_out([&](auto& d) { q.close(make_error_code(error::closed), t, d); });
    CHECK(out == expect);
    CHECK(q.size() == 0);
    CHECK(q.policy().empty_at() == sluice_test::clamp64(m.z));
    for (auto& w : pool.all)
        CHECK(w.completions <= 1);
}

} // namespace

TEST_CASE("reserving_queue: model: random requests, cancellations and wake-ups match GCRA slot by slot")
{
    const std::int64_t starts[] = {0, 1'000'000'000'000, sluice_test::i64_min + 1'000, max_ns - 50'000'000'000};
    const std::int64_t intervals[] = {1, 7, 1'000, 1'000'000};
    const std::uint64_t bursts[] = {1, 3, 10};
    std::uint64_t seed = 12;
    for (std::int64_t start : starts)
        for (std::int64_t interval : intervals)
            for (std::uint64_t burst : bursts) {
                run_model(++seed, start, interval, burst, {});
                run_model(++seed, start, interval, burst, {.max_queued = 5, .max_queued_permits = 12});
            }
}

TEST_SUITE_END();
