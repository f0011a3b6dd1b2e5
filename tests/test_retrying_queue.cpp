// The retrying queue (window policies' waiters) on its own: no io_context, no timer;
// every `now` is passed by hand.
#include <sluice/detail/wait/retrying_queue.hpp>
#include <sluice/policy/fixed_counter.hpp>
#include <sluice/policy/sliding_log.hpp>

#include <boost/asio/error.hpp>
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <vector>

#include "policy_support.hpp"
#include "queue_support.hpp"

using namespace std::chrono_literals;
using sluice::error;
using sluice::detail::max_ns;
using sluice_test::handed_out;
using sluice_test::ids;
using sluice_test::test_waiter;
using fixed = sluice::detail::retrying_queue<sluice::policy::fixed_counter>;

namespace {

constexpr std::int64_t s = 1'000'000'000;
constexpr std::int64_t t0 = 1000 * s;
constexpr std::int64_t forever = max_ns;

} // namespace

TEST_SUITE_BEGIN("retrying_queue");

TEST_CASE("retrying_queue: the head is retried when its window opens; only the head is granted")
{
    fixed q({}, 3, 1s);
    REQUIRE(q.try_acquire(3, t0).admitted);
    sluice_test::waiter_pool pool;
    auto* a = pool.make();
    auto* b = pool.make();
    auto* c = pool.make();
    CHECK(q.enqueue(a, 3, forever, t0));
    CHECK(q.enqueue(b, 1, forever, t0));
    CHECK(q.enqueue(c, 2, forever, t0));
    CHECK(q.queued_permits() == 6);
    CHECK(q.wake_at() == t0 + s);
    CHECK(handed_out([&](auto& d) { CHECK(q.release_due(t0 + s - 1, d) == t0 + s); }).empty());
    auto out = handed_out([&](auto& d) { CHECK(q.release_due(t0 + s, d) == t0 + 2 * s); });
    CHECK(ids(out) == std::vector{a->id});   // a fills the window
    out = handed_out([&](auto& d) { CHECK(q.release_due(t0 + 2 * s, d) == max_ns); });
    CHECK(ids(out) == std::vector{b->id, c->id});
}

TEST_CASE("retrying_queue: try_acquire never passes a queued waiter, and says when to retry")
{
    fixed q({}, 2, 1s);
    REQUIRE(q.try_acquire(2, t0).admitted);
    sluice_test::waiter_pool pool;
    auto* w = pool.make();
    REQUIRE(q.enqueue(w, 2, forever, t0));
    auto d = q.try_acquire(1, t0 + 5 * s);   // room now, but the waiter comes first
    CHECK_FALSE(d.admitted);
    CHECK(d.retry_after.count() > 0);
    CHECK(q.try_acquire(3, t0 + 5 * s).error == error::exceeds_limit);
    handed_out([&](auto& dl) { q.release_due(t0 + 5 * s, dl); });
    CHECK_FALSE(w->queued);
    CHECK_FALSE(q.try_acquire(1, t0 + 5 * s).admitted);   // the waiter took the window
    CHECK(q.try_acquire(1, t0 + 6 * s).admitted);
}

TEST_CASE("retrying_queue: a request is refused when the queue ahead makes its wait too long, consuming nothing")
{
    fixed q({}, 2, 1s);
    REQUIRE(q.try_acquire(2, t0).admitted);
    sluice_test::waiter_pool pool;
    REQUIRE(q.enqueue(pool.make(), 2, forever, t0));   // the next window
    auto* late = pool.make();
    CHECK_FALSE(q.enqueue(late, 1, s, t0));            // the one after: 2 s away
    CHECK(late->result == error::timed_out);
    CHECK(q.queued_permits() == 2);
    auto* fits = pool.make();
    CHECK(q.enqueue(fits, 1, 2 * s, t0));
}

TEST_CASE("retrying_queue: a waiter past its deadline gives up; the one behind it moves to the front")
{
    // Limit 3: 2 + 2 + 2 is predicted to end in the second window (a lower bound) but
    // needs three; c's deadline comes first.
    fixed q({}, 3, 1s);
    REQUIRE(q.try_acquire(3, t0).admitted);
    sluice_test::waiter_pool pool;
    auto* a = pool.make();
    auto* b = pool.make();
    auto* c = pool.make();
    auto* d = pool.make();
    REQUIRE(q.enqueue(a, 2, 10 * s, t0));
    REQUIRE(q.enqueue(b, 2, 10 * s, t0));
    REQUIRE(q.enqueue(c, 2, 2 * s + s / 2, t0));
    REQUIRE(q.enqueue(d, 1, 10 * s, t0));
    CHECK(ids(handed_out([&](auto& dl) { q.release_due(t0 + s, dl); })) == std::vector{a->id});
    CHECK(ids(handed_out([&](auto& dl) { q.release_due(t0 + 2 * s, dl); })) == std::vector{b->id});
    CHECK(q.wake_at() == t0 + 2 * s + s / 2);
    auto out = handed_out([&](auto& dl) { q.release_due(t0 + 2 * s + s / 2, dl); });
    CHECK(ids(out) == std::vector{c->id, d->id});
    CHECK(c->result == error::timed_out);
    CHECK_FALSE(d->result);
}

TEST_CASE("retrying_queue: cancelling the head lets the next one go in the open window")
{
    fixed q({}, 2, 1s);
    REQUIRE(q.try_acquire(1, t0).admitted);
    sluice_test::waiter_pool pool;
    auto* big = pool.make();
    auto* small = pool.make();
    REQUIRE(q.enqueue(big, 2, forever, t0));
    REQUIRE(q.enqueue(small, 1, forever, t0));
    auto out = handed_out([&](auto& dl) { CHECK(q.cancel(big, t0 + 1, dl)); });
    CHECK(ids(out) == std::vector{big->id, small->id});
    CHECK(big->result == boost::asio::error::operation_aborted);
    CHECK_FALSE(small->result);
    CHECK(handed_out([&](auto& dl) { CHECK_FALSE(q.cancel(big, t0 + 2, dl)); }).empty());
}

TEST_CASE("retrying_queue: raising the limit releases who fits; lowering it under the head's request fails it")
{
    fixed q({}, 4, 1s);
    REQUIRE(q.try_acquire(4, t0).admitted);
    sluice_test::waiter_pool pool;
    auto* a = pool.make();
    auto* b = pool.make();
    REQUIRE(q.enqueue(a, 2, forever, t0));
    REQUIRE(q.enqueue(b, 3, forever, t0));
    auto out = handed_out([&](auto& dl) { q.reconfigure([&](std::int64_t) { q.policy().set_limit(6); }, t0, dl); });
    CHECK(ids(out) == std::vector{a->id});
    // b can never be granted under a limit of 2: it fails now instead of waiting forever.
    out = handed_out([&](auto& dl) { q.reconfigure([&](std::int64_t) { q.policy().set_limit(2); }, t0, dl); });
    CHECK(ids(out) == std::vector{b->id});
    CHECK(b->result == error::exceeds_limit);
    CHECK(q.size() == 0);
}

TEST_CASE("retrying_queue: queue bounds, close, and the blocking caller's turn")
{
    fixed q({.max_queued = 1}, 1, 1s);
    REQUIRE(q.try_acquire(1, t0).admitted);
    sluice_test::waiter_pool pool;
    auto* a = pool.make();
    REQUIRE(q.enqueue(a, 1, forever, t0));
    auto* full = pool.make();
    CHECK_FALSE(q.enqueue(full, 1, forever, t0));
    CHECK(full->result == error::queue_full);
    // A blocking caller counts the queued permits ahead of it.
    sluice::reservation r = q.reserve_blocking(1, t0 + s, forever);
    CHECK_FALSE(r.admitted);
    CHECK(r.at == t0 + 2 * s);
    auto out = handed_out([&](auto& dl) { q.close(make_error_code(error::closed), t0, dl); });
    CHECK(ids(out) == std::vector{a->id});
    CHECK(a->result == error::closed);
    CHECK(q.queued_permits() == 0);
    CHECK(q.reserve_blocking(1, t0 + s, forever).admitted);
}

TEST_CASE("retrying_queue: a sliding log waiter is retried when the oldest entry leaves the window")
{
    sluice::detail::retrying_queue<sluice::policy::sliding_log> q({}, 2, 1s);
    REQUIRE(q.try_acquire(1, t0).admitted);
    REQUIRE(q.try_acquire(1, t0 + s / 2).admitted);
    sluice_test::waiter_pool pool;
    auto* a = pool.make();
    auto* b = pool.make();
    REQUIRE(q.enqueue(a, 1, forever, t0 + s / 2));
    REQUIRE(q.enqueue(b, 1, forever, t0 + s / 2));
    CHECK(q.wake_at() == t0 + s);
    CHECK(ids(handed_out([&](auto& dl) { q.release_due(t0 + s, dl); })) == std::vector{a->id});
    CHECK(q.wake_at() == t0 + s + s / 2);
    CHECK(ids(handed_out([&](auto& dl) { q.release_due(t0 + s + s / 2, dl); })) == std::vector{b->id});
}

// ---- model -------------------------------------------------------------------------------

namespace {

// A fixed window as a map from window number to count, and the queue as a vector scanned
// in full: FIFO grants of the head, deadlines (unique here), the packing prediction.
struct model {
    struct entry {
        test_waiter* w;
        std::uint64_t n;
        std::int64_t deadline;
    };

    std::int64_t window;
    std::uint64_t limit;
    std::map<std::int64_t, std::uint64_t> count;
    std::vector<entry> fifo;

    std::int64_t win(std::int64_t t) const { return static_cast<std::int64_t>(sluice_test::floor_div(t, window)); }
    std::uint64_t used(std::int64_t t) const
    {
        auto it = count.find(win(t));
        return it == count.end() ? 0 : it->second;
    }
    bool fits(std::uint64_t n, std::int64_t t) const { return used(t) + n <= limit; }
    std::uint64_t permits() const
    {
        std::uint64_t p = 0;
        for (auto& e : fifo) p += e.n;
        return p;
    }

    // Windows filled in order: the start of the window the last of `need` permits lands in.
    std::int64_t predict(std::uint64_t need, std::int64_t t) const
    {
        std::uint64_t room = limit - std::min(limit, used(t));
        if (need <= room) return t;
        need -= room;
        std::int64_t k = win(t) + 1;
        while (need > limit) {
            need -= limit;
            ++k;
        }
        return k * window;
    }

    std::vector<test_waiter*> release(std::int64_t t, std::vector<boost::system::error_code>& ecs)
    {
        std::vector<test_waiter*> out;
        for (;;) {
            while (!fifo.empty()) {
                entry& h = fifo.front();
                if (h.n > limit) {
                    out.push_back(h.w);
                    ecs.push_back(error::exceeds_limit);
                } else if (fits(h.n, t)) {
                    count[win(t)] += h.n;
                    out.push_back(h.w);
                    ecs.push_back({});
                } else {
                    break;
                }
                fifo.erase(fifo.begin());
            }
            auto late = std::min_element(fifo.begin(), fifo.end(),
                                         [](const entry& a, const entry& b) { return a.deadline < b.deadline; });
            if (late == fifo.end() || late->deadline > t) break;
            out.push_back(late->w);
            ecs.push_back(error::timed_out);
            fifo.erase(late);
        }
        return out;
    }

    // The earliest time anything can happen: the next window for the head, or a deadline.
    std::int64_t next_event(std::int64_t t) const
    {
        if (fifo.empty()) return max_ns;
        std::int64_t e = (win(t) + 1) * window;
        for (auto& x : fifo) e = std::min(e, x.deadline);
        return e;
    }

    bool deadline_taken(std::int64_t d) const
    {
        return std::any_of(fifo.begin(), fifo.end(), [&](const entry& e) { return e.deadline == d; });
    }
};

void run_model(std::uint64_t seed, std::uint64_t limit, const sluice::limiter_options& opts)
{
    CAPTURE(seed);
    CAPTURE(limit);
    constexpr std::int64_t window = 1000;
    sluice_test::rng g{seed};
    fixed q(opts, limit, std::chrono::nanoseconds(window));
    model m{window, limit, {}, {}};
    sluice_test::waiter_pool pool;
    std::vector<test_waiter*> live;
    std::int64_t t = 5'000'000;

    for (int step = 0; step < 4000; ++step) {
        CAPTURE(step);
        int op = static_cast<int>(g.next() % 100);
        if (op < 35) {
            std::uint64_t n = 1 + g.next() % m.limit;
            std::int64_t max_wait = g.next() % 4 == 0 ? max_ns : g.in(0, 5 * window);
            while (max_wait != max_ns && m.deadline_taken(t + max_wait)) ++max_wait;   // ties: any order is right
            test_waiter* w = pool.make();
            // The model's answer.
            boost::system::error_code want;
            bool want_queued = false;
            std::uint64_t ahead = m.permits();
            bool room = m.fifo.size() < opts.max_queued && n <= opts.max_queued_permits - ahead;
            if (!room) {
                if (m.fifo.empty() && m.fits(n, t)) m.count[m.win(t)] += n;
                else want = error::queue_full;
            } else if (ahead == 0 && m.fits(n, t)) {
                m.count[m.win(t)] += n;
            } else if (m.predict(ahead + n, t) - t > max_wait) {
                want = error::timed_out;
            } else {
                want_queued = true;
                m.fifo.push_back({w, n, max_wait == max_ns ? max_ns : t + max_wait});
            }
            REQUIRE(q.enqueue(w, n, max_wait, t) == want_queued);
            if (!want_queued) CHECK(w->result == want);
            else live.push_back(w);
        } else if (op < 45) {
            // Another caller's try_acquire: refused while anyone waits.
            std::uint64_t n = 1 + g.next() % m.limit;
            bool want = m.fifo.empty() && m.fits(n, t);
            if (want) m.count[m.win(t)] += n;
            CHECK(q.try_acquire(n, t).admitted == want);
        } else if (op < 60 && !live.empty()) {
            test_waiter* w = live[g.next() % live.size()];
            auto it = std::find_if(m.fifo.begin(), m.fifo.end(), [&](auto& e) { return e.w == w; });
            bool want = it != m.fifo.end();
            std::vector<test_waiter*> expect;
            std::vector<boost::system::error_code> ecs;
            if (want) {
                m.fifo.erase(it);
                expect.push_back(w);
                ecs.push_back(boost::asio::error::operation_aborted);
            }
            for (auto* r : m.release(t, ecs)) expect.push_back(r);
            auto out = handed_out([&](auto& d) { CHECK(q.cancel(w, t, d) == want); });
            REQUIRE(out == expect);
            for (std::size_t i = 0; i < out.size(); ++i) CHECK(out[i]->result == ecs[i]);
        } else if (op < 63) {
            // The limit changes (sometimes below a queued request).
            std::uint64_t limit2 = 1 + g.next() % (limit + 1);
            m.limit = limit2;
            std::vector<boost::system::error_code> ecs;
            auto expect = m.release(t, ecs);
            auto out = handed_out([&](auto& d) { q.reconfigure([&](std::int64_t) { q.policy().set_limit(limit2); }, t, d); });
            REQUIRE(out == expect);
            for (std::size_t i = 0; i < out.size(); ++i) CHECK(out[i]->result == ecs[i]);
        } else {
            // The queue must not sleep past its next event, nor ask to be woken in the past.
            std::int64_t wake = q.wake_at();
            CHECK(wake <= m.next_event(t));
            if (!m.fifo.empty()) CHECK(wake > t);
            t += g.next() % 20 == 0 ? 100 * window : g.in(0, 2 * window);
            std::vector<boost::system::error_code> ecs;
            auto expect = m.release(t, ecs);
            if (t < wake) CHECK(expect.empty());
            auto out = handed_out([&](auto& d) { q.release_due(t, d); });
            REQUIRE(out == expect);
            for (std::size_t i = 0; i < out.size(); ++i) CHECK(out[i]->result == ecs[i]);
        }
        REQUIRE(q.size() == m.fifo.size());
        CHECK(q.queued_permits() == m.permits());
    }
    auto out = handed_out([&](auto& d) { q.close(make_error_code(error::closed), t, d); });
    CHECK(out.size() == m.fifo.size());
    for (auto& w : pool.all) CHECK(w.completions <= 1);
}

} // namespace

TEST_CASE("retrying_queue: model: random requests, tries, cancellations, limit changes and wake-ups on a fixed window")
{
    std::uint64_t seed = 1200;
    for (std::uint64_t limit : {1u, 3u, 5u}) {
        run_model(++seed, limit, {});
        run_model(++seed, limit, {.max_queued = 4, .max_queued_permits = 9});
    }
}

TEST_SUITE_END();
