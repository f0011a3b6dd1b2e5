// The slot queue (concurrency_limit's waiters) on its own: no io_context, no timer; every
// `now` is passed by hand.
#include <sluice/detail/wait/slot_queue.hpp>

#include <boost/asio/error.hpp>
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "policy_support.hpp"
#include "queue_support.hpp"

using sluice::error;
using sluice::detail::max_ns;
using sluice::detail::slot_queue;
using sluice_test::handed_out;
using sluice_test::ids;
using sluice_test::test_waiter;

namespace {

constexpr std::int64_t t0 = 1'000'000'000'000;
constexpr std::int64_t forever = max_ns;

} // namespace

TEST_SUITE_BEGIN("slot_queue");

TEST_CASE("slot_queue: at most `limit` in use; returned slots go to the head first, in FIFO order")
{
    slot_queue q({}, 3);
    sluice_test::waiter_pool pool;
    auto* a = pool.make();
    CHECK_FALSE(q.enqueue(a, 2, forever, t0));   // free: granted at once
    CHECK_FALSE(a->result);
    CHECK(q.in_use() == 2);
    auto* big = pool.make();
    auto* small = pool.make();
    CHECK(q.enqueue(big, 3, forever, t0));
    CHECK(q.enqueue(small, 1, forever, t0));   // would fit, but big is first
    CHECK_FALSE(q.try_acquire(1, t0));         // and so may not barge either
    CHECK(q.wake_at() == max_ns);              // no deadline: nothing to wake for
    auto out = handed_out([&](auto& d) { q.release(2, d); });
    CHECK(ids(out) == std::vector{big->id});
    CHECK(q.in_use() == 3);
    out = handed_out([&](auto& d) { q.release(1, d); });
    CHECK(ids(out) == std::vector{small->id});
    CHECK(q.size() == 0);
    CHECK(q.in_use() == 3);
}

TEST_CASE("slot_queue: answered at once: bad input, no wait allowed, queue bounds")
{
    slot_queue q({.max_queued = 1, .max_queued_permits = 2}, 2);
    REQUIRE(q.try_acquire(2, t0));
    sluice_test::waiter_pool pool;
    auto ask = [&](std::uint64_t n, std::int64_t max_wait) {
        auto* w = pool.make();
        CHECK_FALSE(q.enqueue(w, n, max_wait, t0));
        return w->result;
    };
    CHECK(ask(0, forever) == error::invalid_count);
    CHECK(ask(3, forever) == error::exceeds_limit);
    CHECK(ask(1, 0) == error::timed_out);
    auto* w = pool.make();
    CHECK(q.enqueue(w, 2, forever, t0));
    CHECK(ask(1, forever) == error::queue_full);
    CHECK(q.queued_permits() == 2);
}

TEST_CASE("slot_queue: deadlines: a waiter still queued at its deadline times out; the next may then fit")
{
    slot_queue q({}, 2);
    REQUIRE(q.try_acquire(1, t0));
    sluice_test::waiter_pool pool;
    auto* big = pool.make();
    auto* small = pool.make();
    REQUIRE(q.enqueue(big, 2, 100, t0));
    REQUIRE(q.enqueue(small, 1, 500, t0));
    CHECK(q.wake_at() == t0 + 100);
    CHECK(handed_out([&](auto& d) { CHECK(q.release_due(t0 + 99, d) == t0 + 100); }).empty());
    auto out = handed_out([&](auto& d) { CHECK(q.release_due(t0 + 100, d) == max_ns); });
    CHECK(ids(out) == std::vector{big->id, small->id});
    CHECK(big->result == error::timed_out);
    CHECK_FALSE(small->result);
}

TEST_CASE("slot_queue: cancelling the head lets smaller ones in; cancelling twice does nothing")
{
    slot_queue q({}, 2);
    REQUIRE(q.try_acquire(1, t0));
    sluice_test::waiter_pool pool;
    auto* big = pool.make();
    auto* small = pool.make();
    REQUIRE(q.enqueue(big, 2, forever, t0));
    REQUIRE(q.enqueue(small, 1, forever, t0));
    auto out = handed_out([&](auto& d) { CHECK(q.cancel(big, t0, d)); });
    CHECK(ids(out) == std::vector{big->id, small->id});
    CHECK(big->result == boost::asio::error::operation_aborted);
    CHECK(handed_out([&](auto& d) { CHECK_FALSE(q.cancel(big, t0, d)); }).empty());
    CHECK(q.in_use() == 2);
}

TEST_CASE("slot_queue: set_limit grants who now fits; a head above the new limit fails with exceeds_limit")
{
    slot_queue q({}, 2);
    REQUIRE(q.try_acquire(2, t0));
    sluice_test::waiter_pool pool;
    auto* a = pool.make();
    auto* b = pool.make();
    REQUIRE(q.enqueue(a, 1, forever, t0));
    REQUIRE(q.enqueue(b, 2, forever, t0));
    auto out = handed_out([&](auto& d) { q.set_limit(3, d); });
    CHECK(ids(out) == std::vector{a->id});
    out = handed_out([&](auto& d) { q.set_limit(1, d); });
    CHECK(ids(out) == std::vector{b->id});
    CHECK(b->result == error::exceeds_limit);
    // Slots in use above the new limit stay in use; none is handed out until they return.
    CHECK(q.in_use() == 3);
    CHECK_FALSE(q.try_acquire(1, t0));
    handed_out([&](auto& d) { q.release(3, d); });
    CHECK(q.try_acquire(1, t0));
}

TEST_CASE("slot_queue: close completes every waiter; slots in use stay in use")
{
    slot_queue q({}, 1);
    REQUIRE(q.try_acquire(1, t0));
    sluice_test::waiter_pool pool;
    auto* a = pool.make();
    auto* b = pool.make();
    REQUIRE(q.enqueue(a, 1, forever, t0));
    REQUIRE(q.enqueue(b, 1, 50, t0));
    auto out = handed_out([&](auto& d) { q.close(make_error_code(error::closed), t0, d); });
    CHECK(ids(out) == std::vector{a->id, b->id});
    CHECK(a->result == error::closed);
    CHECK(q.in_use() == 1);
    CHECK(q.wake_at() == max_ns);
}

// ---- model -------------------------------------------------------------------------------

namespace {

struct model {
    struct entry {
        test_waiter* w;
        std::uint64_t n;
        std::int64_t deadline;
    };

    std::uint64_t limit;
    std::uint64_t in_use = 0;
    std::vector<entry> fifo;

    void grant(std::vector<test_waiter*>& out, std::vector<boost::system::error_code>& ecs,
               std::vector<std::uint64_t>& held)
    {
        while (!fifo.empty()) {
            entry& h = fifo.front();
            if (h.n > limit) {
                ecs.push_back(error::exceeds_limit);
            } else if (in_use + h.n <= limit) {
                in_use += h.n;
                held.push_back(h.n);
                ecs.push_back({});
            } else {
                return;
            }
            out.push_back(h.w);
            fifo.erase(fifo.begin());
        }
    }

    std::int64_t wake() const
    {
        std::int64_t d = max_ns;
        for (auto& e : fifo) d = std::min(d, e.deadline);
        return d;
    }
};

void run_model(std::uint64_t seed, std::uint64_t limit)
{
    CAPTURE(seed);
    sluice_test::rng g{seed};
    slot_queue q({}, limit);
    model m{limit, 0, {}};
    sluice_test::waiter_pool pool;
    std::vector<test_waiter*> live;
    std::vector<std::uint64_t> held;   // grants not yet returned
    std::int64_t t = t0;
    auto check = [](const std::vector<test_waiter*>& out, const std::vector<test_waiter*>& expect,
                    const std::vector<boost::system::error_code>& ecs) {
        REQUIRE(out == expect);
        for (std::size_t i = 0; i < out.size(); ++i) CHECK(out[i]->result == ecs[i]);
    };

    for (int step = 0; step < 4000; ++step) {
        CAPTURE(step);
        int op = static_cast<int>(g.next() % 100);
        std::vector<test_waiter*> expect;
        std::vector<boost::system::error_code> ecs;
        if (op < 35) {
            std::uint64_t n = g.next() % (m.limit + 2);
            std::int64_t max_wait = g.next() % 4 == 0 ? max_ns : g.in(0, 1000);
            while (max_wait != max_ns && std::any_of(m.fifo.begin(), m.fifo.end(),
                                                     [&](auto& e) { return e.deadline == t + max_wait; }))
                ++max_wait;
            test_waiter* w = pool.make();
            boost::system::error_code want;
            bool want_queued = false;
            if (n == 0) want = error::invalid_count;
            else if (n > m.limit) want = error::exceeds_limit;
            else if (m.fifo.empty() && m.in_use + n <= m.limit) {
                m.in_use += n;
                held.push_back(n);
            } else if (max_wait == 0) want = error::timed_out;
            else {
                want_queued = true;
                m.fifo.push_back({w, n, max_wait == max_ns ? max_ns : t + max_wait});
            }
            REQUIRE(q.enqueue(w, n, max_wait, t) == want_queued);
            if (!want_queued) CHECK(w->result == want);
            else live.push_back(w);
        } else if (op < 55 && !held.empty()) {
            std::size_t i = g.next() % held.size();
            std::uint64_t n = held[i];
            held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
            m.in_use -= n;
            m.grant(expect, ecs, held);
            check(handed_out([&](auto& d) { q.release(n, d); }), expect, ecs);
        } else if (op < 65 && !live.empty()) {
            test_waiter* w = live[g.next() % live.size()];
            auto it = std::find_if(m.fifo.begin(), m.fifo.end(), [&](auto& e) { return e.w == w; });
            bool want = it != m.fifo.end();
            if (want) {
                m.fifo.erase(it);
                expect.push_back(w);
                ecs.push_back(boost::asio::error::operation_aborted);
                m.grant(expect, ecs, held);
            }
            check(handed_out([&](auto& d) { CHECK(q.cancel(w, t, d) == want); }), expect, ecs);
        } else if (op < 68) {
            std::uint64_t limit2 = 1 + g.next() % (limit + 2);
            m.limit = limit2;
            m.grant(expect, ecs, held);
            check(handed_out([&](auto& d) { q.set_limit(limit2, d); }), expect, ecs);
        } else if (op < 75) {
            std::uint64_t n = 1 + g.next() % m.limit;
            bool want = m.fifo.empty() && m.in_use + n <= m.limit;
            if (want) {
                m.in_use += n;
                held.push_back(n);
            }
            CHECK(q.try_acquire(n, t) == want);
        } else {
            CHECK(q.wake_at() == m.wake());
            t += g.in(0, 400);
            for (;;) {
                auto late = std::min_element(m.fifo.begin(), m.fifo.end(),
                                             [](auto& a, auto& b) { return a.deadline < b.deadline; });
                if (late == m.fifo.end() || late->deadline > t) break;
                expect.push_back(late->w);
                ecs.push_back(error::timed_out);
                m.fifo.erase(late);
            }
            m.grant(expect, ecs, held);
            check(handed_out([&](auto& d) { CHECK(q.release_due(t, d) == m.wake()); }), expect, ecs);
        }
        REQUIRE(q.size() == m.fifo.size());
        CHECK(q.in_use() == m.in_use);
        CHECK(q.limit() == m.limit);
    }
    for (auto& w : pool.all) CHECK(w.completions <= 1);
}

} // namespace

TEST_CASE("slot_queue: model: random requests, returns, cancellations, limit changes and deadlines")
{
    std::uint64_t seed = 3400;
    for (std::uint64_t limit : {1u, 2u, 5u, 16u})
        run_model(++seed, limit);
}

TEST_SUITE_END();
