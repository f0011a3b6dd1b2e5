// The sans-io halves of the Redis limiters, step by step, without a server or an
// io_context: the state machines of async_try_acquire and async_acquire (bucket and
// window) against a fake limiter core, the queue their local waits go to in the wait
// engine, and the lease book against an independent model of the server's GCRA lease
// script, over a simulated fleet.
#include <sluice/error.hpp>
#include <sluice/redis/detail/store/acquire_fsm.hpp>
#include <sluice/redis/detail/store/key_batches.hpp>
#include <sluice/redis/detail/store/lease_book.hpp>
#include <sluice/redis/detail/store/try_fsm.hpp>
#include <sluice/redis/detail/wait/wake_queue.hpp>
#include <sluice/redis/reply.hpp>
#include <sluice/redis/scripts.hpp>
#include <sluice/redis/shared_options.hpp>
#include <sluice/redis/detail/store/verdict.hpp>

#include <boost/asio/error.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "rng.hpp"

namespace redis = sluice::redis;
using redis::detail::eval_request;
using redis::detail::lease_book;
using redis::detail::lease_limits;
using redis::detail::op_step;
using redis::detail::round_trip;
using redis::detail::verdict;
using boost::system::error_code;

namespace {

constexpr std::int64_t ms = 1'000'000;
constexpr std::int64_t us = 1'000;

verdict granted(std::int64_t wait_us, std::int64_t state = 42, std::int64_t taken = 1)
{
    verdict v;
    v.admitted = true;
    v.wait_us = wait_us;
    v.state = state;
    v.taken = taken;
    return v;
}

verdict refused(std::int64_t wait_us)
{
    verdict v;
    v.wait_us = wait_us;
    return v;
}

// What the state machines may ask of a limiter core, recorded.
struct fake_core {
    static constexpr bool can_lease = true;

    error_code check_ec;
    bool routed = true;
    bool is_closed = false;
    bool fallback_grants = true;
    redis::shared_options opts;
    int unavailable = 0, errors = 0, replies = 0;
    // Decisions (requests and tries together): admitted, or refused (a try) or timed out
    // (a request); by the failure policy.
    int admitted = 0, rejected = 0, by_fallback = 0;
    int started = 0, answered = 0;      // requests
    std::vector<std::int64_t> waits;    // of the admitted requests, as counted
    std::vector<std::pair<std::uint64_t, std::int64_t>> refunds;
    std::vector<std::uint64_t> prefetches;
    lease_book book;
    lease_limits lim{100 * us, 250 * ms, 64};
    std::int64_t now_ns = 0;

    error_code check(std::uint64_t n) const { return n == 0 ? make_error_code(sluice::error::invalid_count) : check_ec; }
    bool route() const { return routed; }
    bool closed() const { return is_closed; }
    const redis::shared_options& options() const { return opts; }
    void on_unavailable() { ++unavailable; }
    void on_error() { ++errors; }
    void on_reply(const verdict&, round_trip) { ++replies; }
    void request_started() { ++started; }
    void count_request(const error_code& ec, std::int64_t waited)
    {
        ++answered;
        if (!ec) {
            ++admitted;
            waits.push_back(waited);
        } else if (ec == sluice::error::timed_out) {
            ++rejected;
        }
    }
    void count_try(bool a, bool fb)
    {
        ++(a ? admitted : rejected);
        if (fb) count_fallback();
    }
    void count_fallback() { ++by_fallback; }
    void refund(const std::string&, std::uint64_t n, std::int64_t state) { refunds.emplace_back(n, state); }
    sluice::decision fallback_try(const std::string&, std::uint64_t)
    {
        sluice::decision d;
        d.admitted = fallback_grants;
        return d;
    }
    bool leasing() const { return opts.lease_size > 0; }
    std::int64_t lease_horizon_us() const { return 250'000; }
    lease_book::take_result lease_take(const std::string&, std::uint64_t n, std::int64_t now)
    {
        return book.take(lim, n, now);
    }
    lease_book::take_result lease_fill(const std::string&, std::uint64_t n, const verdict& v, std::int64_t rtt,
                                       std::int64_t now)
    {
        return book.fill(lim, n, v, now, rtt);
    }
    void lease_failed(const std::string&) { book.failed(); }
    void prefetch(const std::string&, std::uint64_t k) { prefetches.push_back(k); }
    std::vector<std::string> left_queue;
    int tickets = 0;
    std::string make_ticket(std::uint64_t n, std::int64_t) { return "9:" + std::to_string(n) + ":t" + std::to_string(++tickets); }
    void leave_queue(const std::string&, const std::string& t) { left_queue.push_back(t); }
};

const round_trip rt{1000, 1100};

// A reply for the length of one call.
const verdict* p(const verdict& v) { return &v; }
const error_code unreachable_ec = make_error_code(sluice::error::backend_unavailable);
const error_code aborted = boost::asio::error::operation_aborted;

} // namespace

TEST_SUITE_BEGIN("redis_fsm");

TEST_CASE("bucket acquire: reserve, sleep until the slot, complete")
{
    fake_core c;
    redis::detail::bucket_acquire_fsm f("k", 2, 7'500'999);   // max_wait rounded down to whole us
    auto s = f.start(c, 0);
    REQUIRE(s.next == op_step::kind::eval);
    CHECK(s.request.how == eval_request::mode::reserve);
    CHECK(s.request.n == 2);
    CHECK(s.request.max_wait_us == 7'500);
    CHECK_FALSE(s.cancellable);   // the reply decides whether there is a slot to give back

    s = f.on_reply(c, {}, p(granted(5'000, 77)), false, rt, 0);
    REQUIRE(s.next == op_step::kind::sleep);
    CHECK(s.wait_ns == 5 * ms);
    CHECK(c.admitted == 0);   // counted when answered, once
    CHECK(c.started == 1);
    CHECK(c.replies == 1);

    s = f.on_wake(c, {}, false, 5 * ms);
    CHECK(s.next == op_step::kind::complete);
    CHECK_FALSE(f.error());
    CHECK(c.refunds.empty());
    CHECK(c.admitted == 1);
    CHECK(c.answered == 1);
    REQUIRE(c.waits.size() == 1);
    CHECK(c.waits[0] == 5 * ms);   // from the request to its grant
}

TEST_CASE("bucket acquire: a slot due now completes at once; a refusal consumes nothing")
{
    fake_core c;
    redis::detail::bucket_acquire_fsm now_f("k", 1, 0);
    now_f.start(c, 0);
    CHECK(now_f.on_reply(c, {}, p(granted(0)), false, rt, 0).next == op_step::kind::complete);
    CHECK_FALSE(now_f.error());
    REQUIRE(c.waits.size() == 1);
    CHECK(c.waits[0] == 0);   // granted at once: no wait

    redis::detail::bucket_acquire_fsm f("k", 1, 1 * ms);
    f.start(c, 0);
    CHECK(f.on_reply(c, {}, p(refused(3'000)), false, rt, 0).next == op_step::kind::complete);
    CHECK(f.error() == sluice::error::timed_out);
    CHECK(c.rejected == 1);
    CHECK(c.refunds.empty());
}

TEST_CASE("bucket acquire: cancelled or closed around the reservation gives the slot back")
{
    SUBCASE("cancelled while the script ran")
    {
        fake_core c;
        redis::detail::bucket_acquire_fsm f("k", 3, 1'000 * ms);
        f.start(c, 0);
        CHECK(f.on_reply(c, {}, p(granted(9'000, 1234)), true, rt, 0).next == op_step::kind::complete);
        CHECK(f.error() == aborted);
        REQUIRE(c.refunds.size() == 1);
        CHECK(c.refunds[0] == std::pair<std::uint64_t, std::int64_t>(3, 1234));
        CHECK(c.admitted == 0);
    }
    SUBCASE("closed while the script ran")
    {
        fake_core c;
        c.is_closed = true;
        redis::detail::bucket_acquire_fsm f("k", 1, 1'000 * ms);
        f.start(c, 0);
        f.on_reply(c, {}, p(granted(9'000, 55)), false, rt, 0);
        CHECK(f.error() == sluice::error::closed);
        CHECK(c.refunds.size() == 1);
    }
    SUBCASE("woken early on its timer")
    {
        fake_core c;
        redis::detail::bucket_acquire_fsm f("k", 1, 1'000 * ms);
        f.start(c, 0);
        f.on_reply(c, {}, p(granted(9'000, 99)), false, rt, 0);
        c.is_closed = true;
        CHECK(f.on_wake(c, aborted, false, 1 * ms).next == op_step::kind::complete);
        CHECK(f.error() == sluice::error::closed);
        REQUIRE(c.refunds.size() == 1);
        CHECK(c.refunds[0].second == 99);
    }
}

TEST_CASE("bucket acquire: bad requests and error replies complete without a grant")
{
    fake_core c;
    redis::detail::bucket_acquire_fsm zero("k", 0, 0);
    CHECK(zero.start(c, 0).next == op_step::kind::post);   // never inside the initiating call
    CHECK(zero.posted());
    CHECK(zero.error() == sluice::error::invalid_count);

    redis::detail::bucket_acquire_fsm f("k", 1, 0);
    f.start(c, 0);
    f.on_reply(c, make_error_code(sluice::error::backend_error), nullptr, false, rt, 0);
    CHECK(f.error() == sluice::error::backend_error);
    redis::detail::bucket_acquire_fsm g("k", 1, 0);
    g.start(c, 0);
    g.on_reply(c, {}, nullptr, false, rt, 0);   // a reply of the wrong shape
    CHECK(g.error() == sluice::error::protocol_error);
    CHECK(c.errors == 2);
    CHECK(c.admitted + c.rejected == 0);
}

TEST_CASE("acquire: the failure policy while Redis is away")
{
    SUBCASE("local_fallback waits on the fallback within max_wait and counts its decision")
    {
        fake_core c;
        redis::detail::bucket_acquire_fsm f("k", 1, 40 * ms);
        f.start(c, 0);
        auto s = f.on_reply(c, unreachable_ec, nullptr, false, rt, 0);
        REQUIRE(s.next == op_step::kind::fall_back);
        CHECK(s.wait_ns == 40 * ms);
        CHECK(c.unavailable == 1);
        CHECK(f.on_wake(c, {}, false, 0).next == op_step::kind::complete);
        CHECK_FALSE(f.error());
        CHECK(c.by_fallback == 1);
        CHECK(c.admitted == 1);
    }
    SUBCASE("not routed to Redis: fail_closed and fail_open post their result")
    {
        fake_core c;
        c.routed = false;
        c.opts.on_failure = redis::failure_policy::fail_closed;
        redis::detail::bucket_acquire_fsm f("k", 1, 0);
        CHECK(f.start(c, 0).next == op_step::kind::post);
        CHECK(f.error() == sluice::error::backend_unavailable);
        c.opts.on_failure = redis::failure_policy::fail_open;
        redis::detail::window_acquire_fsm g("k", 1, 0);
        CHECK(g.start(c, 0).next == op_step::kind::post);
        CHECK_FALSE(g.error());
        CHECK(c.by_fallback == 1);
    }
    SUBCASE("the window's fallback wait is what is left of its deadline")
    {
        fake_core c;
        redis::detail::window_acquire_fsm f("k", 1, 50 * ms);
        f.start(c, 0);
        auto s = f.on_reply(c, unreachable_ec, nullptr, false, rt, 20 * ms);
        REQUIRE(s.next == op_step::kind::fall_back);
        CHECK(s.wait_ns == 30 * ms);
    }
    SUBCASE("the bucket's fallback wait is what is left of max_wait too (found by the faults suite)")
    {
        // A round trip that ended at the command timeout (150 ms) leaves 100 ms of a
        // 250 ms max_wait: the fallback may wait that, not 250 ms more.
        fake_core c;
        redis::detail::bucket_acquire_fsm f("k", 1, 250 * ms);
        f.start(c, 0);
        auto s = f.on_reply(c, unreachable_ec, nullptr, false, rt, 150 * ms);
        REQUIRE(s.next == op_step::kind::fall_back);
        CHECK(s.wait_ns == 100 * ms);
        redis::detail::bucket_acquire_fsm g("k", 1, 100 * ms);
        g.start(c, 0);
        s = g.on_reply(c, unreachable_ec, nullptr, false, rt, 150 * ms);
        REQUIRE(s.next == op_step::kind::fall_back);
        CHECK(s.wait_ns == 0);
    }
    SUBCASE("cancelled during the round trip: aborted, no fallback")
    {
        fake_core c;
        redis::detail::window_acquire_fsm f("k", 1, 50 * ms);
        f.start(c, 0);
        CHECK(f.on_reply(c, unreachable_ec, nullptr, true, rt, 0).next == op_step::kind::complete);
        CHECK(f.error() == aborted);
    }
}

TEST_CASE("window acquire: sleep until retry_after, ask again, give up past the deadline")
{
    fake_core c;
    redis::detail::window_acquire_fsm f("k", 2, 10 * ms);
    auto s = f.start(c, 100 * ms);
    REQUIRE(s.next == op_step::kind::eval);
    CHECK(s.request.how == eval_request::mode::try_now);
    CHECK_FALSE(s.cancellable);

    REQUIRE(s.request.ticket != nullptr);   // every call carries the waiter's ticket
    CHECK(*s.request.ticket == "9:2:t1");

    s = f.on_reply(c, {}, p(refused(3'000)), false, rt, 100 * ms);
    REQUIRE(s.next == op_step::kind::sleep);
    // The wait counts from when the script ran: less the round trip (100 us), the next
    // request reaches Redis when the room opens, not a round trip later.
    CHECK(s.wait_ns == 3 * ms - 100'000);
    CHECK(c.rejected == 0);         // not a decision yet

    s = f.on_wake(c, {}, false, 103 * ms);
    REQUIRE(s.next == op_step::kind::eval);
    CHECK(*s.request.ticket == "9:2:t1");   // the same place in the queue
    s = f.on_reply(c, {}, p(refused(4'000)), false, rt, 105 * ms);
    REQUIRE(s.next == op_step::kind::sleep);
    CHECK(c.left_queue.empty());

    s = f.on_wake(c, {}, false, 109 * ms);
    REQUIRE(s.next == op_step::kind::eval);
    CHECK(f.on_reply(c, {}, p(refused(1'001)), false, rt, 109 * ms).next == op_step::kind::complete);
    CHECK(f.error() == sluice::error::timed_out);
    CHECK(c.rejected == 1);
    // Giving up leaves the queue.
    REQUIRE(c.left_queue.size() == 1);
    CHECK(c.left_queue[0] == "9:2:t1");
}

TEST_CASE("window acquire: the sleep is the wait less the refusal's round trip, never below 0")
{
    fake_core c;
    redis::detail::window_acquire_fsm f("k", 1, 10 * ms);
    f.start(c, 0);
    auto s = f.on_reply(c, {}, p(refused(3'000)), false, round_trip{5'000, 7'500}, 0);
    REQUIRE(s.next == op_step::kind::sleep);
    CHECK(s.wait_ns == 500'000);
    // A round trip longer than the wait: ask again at once.
    f.on_wake(c, {}, false, 1 * ms);
    s = f.on_reply(c, {}, p(refused(1'000)), false, round_trip{10'000, 12'000}, 1 * ms);
    REQUIRE(s.next == op_step::kind::sleep);
    CHECK(s.wait_ns == 0);
    // Times that went back (the system clock stepped): the wait as the script said.
    f.on_wake(c, {}, false, 2 * ms);
    s = f.on_reply(c, {}, p(refused(2'000)), false, round_trip{20'000, 15'000}, 2 * ms);
    REQUIRE(s.next == op_step::kind::sleep);
    CHECK(s.wait_ns == 2 * ms);
    // The deadline is still checked against the whole wait: it cannot end in a grant sooner.
    f.on_wake(c, {}, false, 4 * ms);
    CHECK(f.on_reply(c, {}, p(refused(6'001)), false, round_trip{0, 5'000}, 4 * ms).next == op_step::kind::complete);
    CHECK(f.error() == sluice::error::timed_out);
}

TEST_CASE("window acquire: a wait longer than the deadline fails fast; a grant after cancellation still counts")
{
    fake_core c;
    redis::detail::window_acquire_fsm f("k", 1, 10 * ms);
    f.start(c, 0);
    CHECK(f.on_reply(c, {}, p(refused(10'001)), false, rt, 0).next == op_step::kind::complete);
    CHECK(f.error() == sluice::error::timed_out);
    CHECK(c.rejected == 1);

    redis::detail::window_acquire_fsm g("k", 1, 10 * ms);
    g.start(c, 0);
    CHECK(g.on_reply(c, {}, p(granted(0)), true, rt, 0).next == op_step::kind::complete);
    CHECK_FALSE(g.error());   // granted permits are consumed: reported, whatever happened
    CHECK(c.admitted == 1);

    redis::detail::window_acquire_fsm h("k", 1, 10 * ms);
    h.start(c, 0);
    h.on_reply(c, {}, p(refused(1'000)), true, rt, 0);
    CHECK(h.error() == aborted);
    // The refusal queued h's ticket (and f's: a first refusal beyond the deadline); g was
    // granted at once and never queued.
    CHECK(c.left_queue.size() == 2);

    // Woken by close() while queued: leaves.
    redis::detail::window_acquire_fsm w("k", 1, 10 * ms);
    w.start(c, 0);
    w.on_reply(c, {}, p(refused(1'000)), false, rt, 0);
    c.is_closed = true;
    w.on_wake(c, aborted, false, 0);
    CHECK(w.error() == sluice::error::closed);
    CHECK(c.left_queue.back() == w.ticket());
}

TEST_CASE("try: one script call, cancellable; errors and the fallback")
{
    fake_core c;
    redis::detail::try_fsm f("k", 3);
    auto s = f.start(c, 0);
    REQUIRE(s.next == op_step::kind::eval);
    CHECK(s.request.how == eval_request::mode::try_now);
    CHECK(s.request.n == 3);
    CHECK(s.cancellable);
    f.on_reply(c, {}, p(refused(2'000)), false, rt, 0);
    CHECK_FALSE(f.result().admitted);
    CHECK(f.result().retry_after == std::chrono::milliseconds(2));
    CHECK(c.rejected == 1);

    redis::detail::try_fsm g("k", 1);
    g.start(c, 0);
    g.on_reply(c, unreachable_ec, nullptr, false, rt, 0);
    CHECK_FALSE(g.error());
    CHECK(g.result().admitted);   // the local fallback granted
    CHECK(c.by_fallback == 1);

    c.opts.on_failure = redis::failure_policy::fail_closed;
    redis::detail::try_fsm h("k", 1);
    h.start(c, 0);
    h.on_reply(c, unreachable_ec, nullptr, false, rt, 0);
    CHECK(h.error() == sluice::error::backend_unavailable);
}

TEST_CASE("peek: one read-only script call, never leased, counted or decided by the fallback")
{
    fake_core c;
    c.opts.lease_size = 8;   // a peek reads Redis all the same
    auto f = redis::detail::try_fsm::peek("k", 2);
    auto s = f.start(c, 0);
    REQUIRE(s.next == op_step::kind::eval);
    CHECK(s.request.how == eval_request::mode::try_now);
    CHECK(s.request.peek);
    CHECK(s.request.n == 2);
    f.on_reply(c, {}, p(granted(0)), false, rt, 0);
    CHECK_FALSE(f.error());
    CHECK(f.result().admitted);
    CHECK(c.admitted == 0);
    CHECK(c.rejected == 0);
    CHECK(c.prefetches.empty());

    // Redis away: an error, not the failure policy's answer.
    auto g = redis::detail::try_fsm::peek("k", 1);
    g.start(c, 0);
    g.on_reply(c, unreachable_ec, nullptr, false, rt, 0);
    CHECK(g.error() == sluice::error::backend_unavailable);
    CHECK(c.by_fallback == 0);

    c.routed = false;   // degraded, not the probe's turn
    auto h = redis::detail::try_fsm::peek("k", 1);
    CHECK(h.start(c, 0).next == op_step::kind::post);
    CHECK(h.error() == sluice::error::backend_unavailable);

    // A try is never a peek.
    c.routed = true;
    c.opts.lease_size = 0;
    redis::detail::try_fsm t("k", 1);
    CHECK_FALSE(t.start(c, 0).request.peek);
}

TEST_CASE("try with leasing: the book answers locally, fetches a run when empty, prefetches in the background")
{
    fake_core c;
    c.opts.lease_size = 64;
    c.now_ns = 10 * ms;
    redis::detail::try_fsm a("k", 1);
    auto s = a.start(c, c.now_ns);
    REQUIRE(s.next == op_step::kind::eval);
    CHECK(s.request.how == eval_request::mode::lease);
    CHECK(s.request.n == 1);
    CHECK(s.request.max_wait_us == 250'000);

    // Meanwhile two more requests: refused locally (one reservation per key in flight);
    // the next run covers the three permits asked for (the process's demand).
    for (int i = 0; i < 2; ++i) {
        redis::detail::try_fsm b("k", 1);
        CHECK(b.start(c, c.now_ns).next == op_step::kind::post);
        CHECK_FALSE(b.result().admitted);
        CHECK(b.result().retry_after == std::chrono::nanoseconds(c.lim.spacing_ns));
    }
    c.now_ns += 200 * us;
    a.on_reply(c, {}, p(granted(0, 500, 1)), false, {0, 200}, c.now_ns);
    CHECK(a.result().admitted);
    CHECK(c.book.run() == 3);
    REQUIRE(c.prefetches.size() == 1);   // nothing held, demand is steady: reserve ahead
    CHECK(c.prefetches[0] == 3);

    // The background reservation: 2 slots of the 3 asked for (the script may give fewer),
    // the last 100 us after the server's now.
    auto pf = redis::detail::try_fsm::prefetch("k", 3);
    s = pf.start(c, c.now_ns);
    REQUIRE(s.next == op_step::kind::eval);
    CHECK(s.request.n == 3);
    CHECK_FALSE(s.cancellable);
    pf.on_reply(c, {}, p(granted(100, 700, 2)), false, {0, 200}, c.now_ns);
    CHECK(c.book.held(c.lim, c.now_ns) == 2);
    CHECK(c.admitted == 1);   // a background reservation is not a decision

    // The first slot is due now, the second in 100 us: not before.
    redis::detail::try_fsm d1("k", 1), d2("k", 1);
    d1.start(c, c.now_ns);
    CHECK(d1.result().admitted);
    d2.start(c, c.now_ns);
    CHECK_FALSE(d2.result().admitted);
    CHECK(d2.result().retry_after == std::chrono::microseconds(100));
}

static_assert(sluice::detail::waiting_queue<redis::detail::wake_queue>);
// No try of its own: a Redis limiter's try is a script call, never the queue's.
static_assert(!sluice::detail::trying_queue<redis::detail::wake_queue>);

TEST_CASE("wake queue: waiters are handed out by their wake-up time, whatever their order; cancel and close")
{
    using sluice::detail::completion_list;
    using sluice::detail::waiter;
    redis::detail::wake_queue q(sluice::limiter_options{});
    waiter w[5];
    auto names = [&](const completion_list& done) {
        std::string out;
        done.for_each([&](const waiter* x) { out += static_cast<char>('a' + (x - w)); });
        return out;
    };
    CHECK(q.wake_at() == sluice::detail::max_ns);
    CHECK(q.enqueue(&w[0], 1, 30 * ms, 0));   // a: at 30 ms
    CHECK(q.enqueue(&w[1], 1, 10 * ms, 0));   // b: at 10 ms
    CHECK(q.enqueue(&w[2], 2, 15 * ms, 5 * ms));   // c: at 20 ms
    CHECK(q.enqueue(&w[3], 1, 25 * ms, 0));   // d: at 25 ms
    CHECK_FALSE(q.enqueue(&w[4], 1, 0, 0));   // nothing to wait for: done at once
    CHECK_FALSE(w[4].queued);
    CHECK(q.size() == 4);
    CHECK(q.wake_at() == 10 * ms);

    completion_list done;
    CHECK(q.release_due(10 * ms - 1, done) == 10 * ms);
    CHECK(names(done).empty());
    CHECK(q.release_due(20 * ms, done) == 25 * ms);
    CHECK(names(done) == "bc");
    CHECK_FALSE(w[1].result);

    completion_list cancelled;
    CHECK(q.cancel(&w[3], 21 * ms, cancelled));
    CHECK_FALSE(q.cancel(&w[3], 21 * ms, cancelled));   // not waiting any more
    CHECK(names(cancelled) == "d");
    CHECK(w[3].result == boost::asio::error::operation_aborted);
    CHECK(q.wake_at() == 30 * ms);

    completion_list closed;
    q.close(make_error_code(sluice::error::closed), 22 * ms, closed);
    CHECK(names(closed) == "a");
    CHECK(w[0].result == sluice::error::closed);
    CHECK(q.size() == 0);
    CHECK(q.wake_at() == sluice::detail::max_ns);
}

TEST_CASE("lease book: a refused run holds refusals locally; slots expire unused and shorten the run; close gives back")
{
    lease_limits lim{1 * ms, 50 * ms, 16};
    lease_book b;
    auto t = b.take(lim, 1, 0);
    REQUIRE(t.next == lease_book::step::fetch);
    // Not even one slot within the horizon: 80 ms away, 50 ms allowed.
    auto d = b.fill(lim, 1, refused(80'000), 0, 100 * us).d;
    CHECK_FALSE(d.admitted);
    CHECK(d.retry_after == std::chrono::milliseconds(30));
    t = b.take(lim, 1, 29 * ms);
    CHECK(t.next == lease_book::step::local);   // no round trip while the refusal holds
    CHECK(t.d.retry_after == std::chrono::milliseconds(1));
    t = b.take(lim, 1, 30 * ms);
    REQUIRE(t.next == lease_book::step::fetch);

    // A run of 4, the last 3 ms ahead: slots at +0, +1, +2, +3 ms.
    b.fill(lim, 0, granted(3'000, 900, 4), 30 * ms, 100 * us);
    CHECK(b.held(lim, 30 * ms) == 4);
    CHECK(b.take(lim, 1, 30 * ms).d.admitted);
    t = b.take(lim, 1, 30 * ms + 999'999);
    CHECK_FALSE(t.d.admitted);
    CHECK(t.d.retry_after == std::chrono::nanoseconds(1));
    // Nobody asks for a while: the other three expire 50 ms after their slots.
    CHECK(b.held(lim, 83 * ms) == 1);
    auto g = b.close(lim, 84 * ms);
    CHECK(g.count == 0);
    CHECK(b.expired() == 3);
}

TEST_CASE("lease book: close gives back only the last run's slots, never earlier runs' (others reserved after them)")
{
    lease_limits lim{1 * ms, 50 * ms, 16};
    lease_book b;
    b.take(lim, 1, 0);
    b.fill(lim, 0, granted(3'000, 100, 4), 0, 100 * us);   // run A: 4 slots, state 100
    b.take(lim, 1, 0);                                       // takes A's first slot
    b.fill(lim, 0, granted(9'000, 300, 2), 0, 100 * us);   // run B: 2 slots after others', state 300
    CHECK(b.held(lim, 0) == 5);
    auto g = b.close(lim, 0);
    CHECK(g.count == 2);   // B's, against B's state: moving z back over A would cross others' runs
    CHECK(g.state == 300);
}

TEST_CASE("lease book: close gives the slots held back against the state of the last run")
{
    lease_limits lim{1 * ms, 50 * ms, 16};
    lease_book b;
    b.take(lim, 1, 0);
    b.fill(lim, 1, granted(5'000, 1234, 6), 0, 100 * us);
    auto g = b.close(lim, 1 * ms);
    CHECK(g.count == 5);
    CHECK(g.state == 1234);
    CHECK(b.held(lim, 1 * ms) == 0);
}

namespace {

// The server's side of leasing, written from the script's definition (GCRA with z the
// instant the bucket is empty, lease mode), independently of lua::gcra: integer us.
struct gcra_server {
    std::int64_t interval;
    std::int64_t burst;
    std::int64_t z = INT64_MIN / 4;

    // Grants up to n consecutive slots ending within horizon; the slots' times in `out`.
    verdict lease(std::int64_t now, std::int64_t n, std::int64_t horizon, std::vector<std::int64_t>& out)
    {
        std::int64_t zz = std::max(z, now - interval * burst);
        std::int64_t fit = (now + horizon - zz) / interval;
        std::int64_t k = std::min(n, fit);
        verdict v;
        v.now_us = now;
        if (k < 1) {
            v.wait_us = zz + interval - now;
            return v;
        }
        for (std::int64_t i = 1; i <= k; ++i) out.push_back(zz + i * interval);
        z = zz + k * interval;
        v.admitted = true;
        v.wait_us = std::max<std::int64_t>(0, z - now);
        v.state = z;
        v.taken = k;
        return v;
    }
};

struct sim_result {
    std::int64_t granted = 0;
    std::int64_t commands = 0;
    std::int64_t early = 0;        // a slot handed out before its time on the server
    double allowed = 0;   // what the rate allows over the run
    std::vector<std::int64_t> per_proc;   // grants of each process
    std::vector<std::int64_t> times;      // of every grant, in order
};

// The fleet: P processes, each asking for one permit every `poll_ns` while it runs
// (saturating demand), with its own round trip (drawn in 60-400 us, or given); the server
// executes a call half-way through the round trip. A process may read its replies late:
// `loop_ns` after they arrive (a busy event loop, where a reply waits behind the handlers
// queued before it) while it goes on asking. And it may stall: run for a slice (drawn
// around `slice_ns`), then stand still for a pause (drawn up to twice its `stall_ns`), as
// a process waiting for a CPU does: it neither asks nor reads a reply then. The round trip
// a process measures (from its request to the reply read) takes both in. Every grant must
// be the process's oldest unused server slot, at or after that slot's time.
struct fleet {
    std::int64_t interval_us;
    int procs;
    std::int64_t ms_long;
    std::uint64_t max_run;
    std::uint32_t seed;
    std::int64_t poll_ns;
    std::vector<std::int64_t> rtt_ns = {};     // per process; empty: drawn
    std::vector<std::int64_t> loop_ns = {};    // per process; empty: none
    std::vector<std::int64_t> stall_ns = {};   // per process; empty: none
    std::int64_t slice_ns = 0;
    std::int64_t step_ns = 1 * us;             // the simulation's tick
};

sim_result simulate(const fleet& fl)
{
    sluice_test::rng rng{fl.seed};
    gcra_server srv{fl.interval_us, 1};
    lease_limits lim{fl.interval_us * us, 250 * ms, fl.max_run};
    struct in_flight {
        std::int64_t sent_at, exec_at, arrive_at;
        std::uint64_t n, count;
        verdict v;
        std::vector<std::int64_t> slots;
        bool executed = false;
    };
    struct proc {
        lease_book book;
        std::int64_t rtt;
        std::int64_t stall = 0;
        std::int64_t loop = 0;
        std::int64_t runs_until = INT64_MAX, stalled_until = 0;
        std::deque<std::int64_t> slots;   // server times of the slots held, in order
        std::vector<in_flight> flying;
        std::int64_t next_poll = 0;
        std::int64_t granted = 0;
    };
    std::vector<proc> ps(static_cast<std::size_t>(fl.procs));
    for (std::size_t i = 0; i < ps.size(); ++i) {
        auto& p = ps[i];
        p.rtt = i < fl.rtt_ns.size() ? fl.rtt_ns[i] : rng.in(60, 400) * us;
        if (i < fl.loop_ns.size()) p.loop = fl.loop_ns[i];
        if (i < fl.stall_ns.size() && fl.stall_ns[i] > 0) {
            p.stall = fl.stall_ns[i];
            p.runs_until = rng.in(0, fl.slice_ns);
        }
    }
    sim_result r;
    const std::int64_t end = fl.ms_long * ms;
    const std::int64_t step = fl.step_ns;
    auto drop_expired = [&](proc& p, std::int64_t held) {
        while (static_cast<std::int64_t>(p.slots.size()) > held) p.slots.pop_front();
    };
    auto grant = [&](proc& p, std::int64_t t) {
        if (p.slots.front() * us > t) ++r.early;
        p.slots.pop_front();
        ++r.granted;
        ++p.granted;
        r.times.push_back(t);
    };
    auto send = [&](proc& p, std::int64_t t, std::uint64_t n, std::uint64_t count) {
        p.flying.push_back({t, t + p.rtt / 2, t + p.rtt + p.loop, n, count, {}, {}, false});
    };
    for (std::int64_t t = 0; t < end; t += step) {
        for (auto& p : ps) {
            for (auto& f : p.flying)
                if (!f.executed && f.exec_at <= t) {
                    f.v = srv.lease(t / us, static_cast<std::int64_t>(f.count), 250'000, f.slots);
                    f.executed = true;
                    ++r.commands;
                }
            if (t >= p.runs_until) {
                p.stalled_until = t + rng.in(0, 2 * p.stall);
                p.runs_until = p.stalled_until + rng.in(fl.slice_ns / 2, fl.slice_ns * 3 / 2);
            }
            if (t < p.stalled_until) continue;
            for (std::size_t i = 0; i < p.flying.size();) {
                auto& f = p.flying[i];
                if (f.arrive_at > t) {
                    ++i;
                    continue;
                }
                for (auto s : f.slots) p.slots.push_back(s);
                auto fr = p.book.fill(lim, f.n, f.v, t, t - f.sent_at);
                const auto& d = fr.d;
                drop_expired(p, static_cast<std::int64_t>(p.book.held(lim, t)) + (d.admitted ? static_cast<std::int64_t>(f.n) : 0));
                if (d.admitted) grant(p, t);
                p.flying.erase(p.flying.begin() + static_cast<std::ptrdiff_t>(i));
                if (fr.prefetch) send(p, t, 0, fr.count);
            }
            if (t < p.next_poll) continue;
            p.next_poll = t + fl.poll_ns;
            auto held_before = p.book.held(lim, t);
            auto k = p.book.take(lim, 1, t);
            drop_expired(p, static_cast<std::int64_t>(std::min<std::uint64_t>(held_before, p.book.held(lim, t) + (k.d.admitted ? 1 : 0))));
            if (k.next == lease_book::step::fetch) {
                send(p, t, 1, k.count);
                continue;
            }
            if (k.d.admitted) grant(p, t);
            if (k.prefetch) send(p, t, 0, k.count);
        }
    }
    r.allowed = static_cast<double>(end) / static_cast<double>(fl.interval_us * us) + 1;
    for (const auto& p : ps) r.per_proc.push_back(p.granted);
    return r;
}

sim_result simulate(std::int64_t interval_us, int procs, std::int64_t seconds_ms, std::uint64_t max_run, std::uint32_t seed,
                    std::int64_t poll_ns)
{
    return simulate(fleet{interval_us, procs, seconds_ms, max_run, seed, poll_ns});
}

// The most grants in any window of length w (times in order).
std::int64_t most_in_window(const std::vector<std::int64_t>& times, std::int64_t w)
{
    std::int64_t most = 0;
    std::size_t lo = 0;
    for (std::size_t hi = 0; hi < times.size(); ++hi) {
        while (times[hi] - times[lo] >= w) ++lo;
        most = std::max(most, static_cast<std::int64_t>(hi - lo + 1));
    }
    return most;
}

} // namespace

TEST_CASE("leasing over a simulated fleet: never a slot before its time, never more than the rate, >= 98 % of it")
{
    struct scenario {
        std::int64_t interval_us;
        int procs;
        std::int64_t ms_long;
        std::int64_t poll_ns;
    };
    // 100,000/s, 10,000/s and 1,000/s shared by 4 processes, burst 1, as the benchmark.
    for (auto sc : {scenario{10, 4, 300, 2 * us}, scenario{100, 4, 1000, 10 * us}, scenario{1000, 4, 3000, 50 * us}}) {
        for (std::uint32_t seed : {1u, 2u, 3u}) {
            auto r = simulate(sc.interval_us, sc.procs, sc.ms_long, 64, seed, sc.poll_ns);
            CAPTURE(sc.interval_us);
            CAPTURE(seed);
            CAPTURE(r.granted);
            CAPTURE(r.commands);
            MESSAGE("1/", sc.interval_us, "us seed ", seed, ": granted ", r.granted, " of ", r.allowed, ", commands ", r.commands);
            CHECK(r.early == 0);
            CHECK(static_cast<double>(r.granted) <= r.allowed);
            CHECK(static_cast<double>(r.granted) >= 0.98 * r.allowed);
            if (sc.interval_us == 10)
                CHECK(r.commands * 20 <= r.granted);   // Redis calls <= 5 % of the grants
        }
    }
}

TEST_CASE("leasing over a simulated fleet: equal demand gets equal shares whatever each process's round trip and stalls")
{
    // 4 processes asking without pause, as the benchmark's 32 callers a process: round
    // trips of 0.1-0.8 ms, replies read 0-8 ms late (busy event loops), and every process
    // stalled now and then (slices of about 4 ms, pauses of up to 8 ms: four processes and
    // Redis on two cores), all of which the round trip each measures takes in. Equal
    // demand: each asks whenever it runs, and each runs as much.
    struct scenario {
        std::int64_t interval_us;
        std::int64_t ms_long;
        std::int64_t step_ns;
    };
    // 1,000/s and 10,000/s (at 100,000/s a run of 64 slots is 0.64 ms of the key, less than
    // a stall: shares there are measured by the benchmark, not promised).
    for (auto sc : {scenario{1000, 10'000, 20 * us}, scenario{100, 2'000, 4 * us}}) {
        for (std::uint32_t seed : {1u, 2u, 3u}) {
            fleet fl{sc.interval_us, 4, sc.ms_long, 64, seed, sc.step_ns};
            fl.rtt_ns = {100 * us, 200 * us, 400 * us, 800 * us};
            fl.loop_ns = {0, 1 * ms, 3 * ms, 8 * ms};
            fl.stall_ns = {4 * ms, 4 * ms, 4 * ms, 4 * ms};
            fl.slice_ns = 4 * ms;
            fl.step_ns = sc.step_ns;
            auto r = simulate(fl);
            const double equal = static_cast<double>(r.granted) / 4;
            const auto [lo, hi] = std::minmax_element(r.per_proc.begin(), r.per_proc.end());
            const double share_min = static_cast<double>(*lo) / equal, share_max = static_cast<double>(*hi) / equal;
            MESSAGE("1/", sc.interval_us, "us seed ", seed, ": granted ", r.granted, " of ", r.allowed, ", shares ",
                    r.per_proc[0] / equal, " ", r.per_proc[1] / equal, " ", r.per_proc[2] / equal, " ", r.per_proc[3] / equal,
                    ", commands ", r.commands);
            CAPTURE(sc.interval_us);
            CAPTURE(seed);
            CHECK(r.early == 0);
            CHECK(share_min >= 0.9);
            CHECK(share_max <= 1.1);
            // The documented bound: in any window of length W at most burst + (W + lease_ttl) / interval.
            for (std::int64_t w : {1 * ms, 10 * ms, 100 * ms, 1000 * ms}) {
                CAPTURE(w);
                CHECK(most_in_window(r.times, w) <= 1 + (w + 250 * ms) / (sc.interval_us * us));
            }
            CHECK(static_cast<double>(r.granted) <= r.allowed);
        }
    }
}

TEST_CASE("answers: only a verdict the script could give to that call is believed (found by fuzz/acquire_fsm)")
{
    using redis::detail::answers;
    eval_request try_now{eval_request::mode::try_now, 2, 0};
    eval_request reserve{eval_request::mode::reserve, 2, 10'000};
    eval_request lease{eval_request::mode::lease, 4, 250'000};
    CHECK(answers(granted(0, 1, 2), try_now));
    CHECK(answers(refused(3'000), try_now));
    CHECK_FALSE(answers(granted(1), try_now));   // admitted now, with a wait
    CHECK(answers(granted(10'000), reserve));
    CHECK_FALSE(answers(granted(10'001), reserve));   // past the caller's max_wait
    CHECK(answers(granted(0, 1, 1), lease));
    CHECK(answers(granted(250'000, 1, 4), lease));
    CHECK_FALSE(answers(granted(0, 1, 5), lease));   // more slots than asked
    CHECK_FALSE(answers(granted(0, 1, 0), lease));
    CHECK_FALSE(answers(granted(250'001, 1, 1), lease));
    CHECK_FALSE(answers(refused(0), lease));   // a lease is refused only with a wait
    verdict huge = refused(1);
    huge.interval_us = sluice::redis::lua::max_span_us + 1;
    CHECK_FALSE(answers(huge, try_now));
}

TEST_CASE("consistent: a GCRA reply whose fields do not follow from each other is not believed, whatever field changed")
{
    using redis::detail::consistent;
    using redis::detail::script_kind;
    // A bucket of 10/s, burst 10 (tau 1 s), at t = 5 s, as the script answers (see lua::gcra).
    constexpr std::int64_t t = 5'000'000, iv = 100'000, b = 10;
    auto v9 = [](bool admitted, std::int64_t wait, std::int64_t remaining, std::int64_t reset, std::int64_t state,
                 std::int64_t taken) { return verdict{admitted, wait, remaining, reset, t, state, taken, iv, b}; };
    struct example {
        const char* what;
        verdict v;
        eval_request r;
    };
    const example genuine[] = {
        // A try of 1 on a full bucket: z was t - tau, now t - tau + iv.
        {"try granted", v9(true, 0, 9, iv, t - 900'000, 1), {eval_request::mode::try_now, 1, 0}},
        // A try of 2 on an empty bucket (z = t): two intervals to wait.
        {"try refused", v9(false, 200'000, 0, 1'000'000, t, 0), {eval_request::mode::try_now, 2, 0}},
        {"try beyond the burst", v9(false, 0, 10, 0, t - 1'000'000, 0), {eval_request::mode::try_now, 11, 0}},
        // A reservation of 3 on an empty bucket: its slot 300 ms ahead.
        {"reserve granted", v9(true, 300'000, 0, 1'300'000, t + 300'000, 3), {eval_request::mode::reserve, 3, 500'000}},
        {"reserve refused", v9(false, 600'000, 0, 1'300'000, t + 300'000, 0), {eval_request::mode::reserve, 3, 500'000}},
        // A lease of up to 4 on a bucket half full (z = t - 500 ms): four slots, ending at
        // t - 100 ms (all due now).
        {"lease granted", v9(true, 0, 1, 900'000, t - 100'000, 4), {eval_request::mode::lease, 4, 250'000}},
        {"lease refused", v9(false, 400'000, 0, 1'300'000, t + 300'000, 0), {eval_request::mode::lease, 4, 250'000}},
    };
    for (const auto& e : genuine) {
        CAPTURE(e.what);
        REQUIRE(redis::detail::answers(e.v, e.r));
        CHECK(consistent(e.v, e.r, script_kind::gcra));
        // Every field off by one, by a factor of ten, or zeroed (a flipped digit, a byte
        // lost): never believed.
        for (int field = 0; field < 9; ++field) {
            for (int how = 0; how < 4; ++how) {
                verdict x = e.v;
                std::int64_t* f[] = {nullptr, &x.wait_us, &x.remaining, &x.reset_us, &x.now_us, &x.state, &x.taken, &x.interval_us, &x.burst};
                if (field == 0) {
                    if (how > 0) continue;
                    x.admitted = !x.admitted;
                } else {
                    std::int64_t& y = *f[field];
                    const std::int64_t was = y;
                    y = how == 0 ? y + 1 : how == 1 ? y - 1 : how == 2 ? y * 10 : 0;
                    if (y == was) continue;
                }
                CAPTURE(field);
                CAPTURE(how);
                CHECK_FALSE((redis::detail::answers(x, e.r) && consistent(x, e.r, script_kind::gcra)));
            }
        }
        // The answer to another request: one permit more or less than asked.
        if (e.r.how != eval_request::mode::lease && e.r.n > 1 && (e.v.admitted || e.v.wait_us > 0)) {
            eval_request other = e.r;
            other.n = e.r.n + 1;
            CHECK_FALSE(consistent(e.v, other, script_kind::gcra));
        }
    }
    // A reply of the other script's shape: the window's six integers to a bucket, the
    // bucket's nine to a window.
    verdict six{true, 0, 3, 100'000, t, 0, 0, 0, 0};
    eval_request one{eval_request::mode::try_now, 1, 0};
    CHECK_FALSE(consistent(six, one, script_kind::gcra));
    CHECK(consistent(six, one, script_kind::sliding_log));
    CHECK_FALSE(consistent(genuine[0].v, one, script_kind::sliding_log));
    // The window's remaining beyond any limit, a state where the log keeps none.
    verdict huge = six;
    huge.remaining = (std::int64_t{1} << 24) + 1;
    CHECK_FALSE(consistent(huge, one, script_kind::sliding_log));
    verdict stated = six;
    stated.state = 7;
    CHECK_FALSE(consistent(stated, one, script_kind::sliding_log));
    // Extremes overflow nothing: the largest interval and burst, a state far off.
    verdict far = v9(true, 0, 0, 0, INT64_MAX, 1);
    far.interval_us = sluice::redis::lua::max_span_us;
    far.burst = 1;
    CHECK_FALSE(consistent(far, one, script_kind::gcra));
    far.state = INT64_MIN;
    CHECK_FALSE(consistent(far, one, script_kind::gcra));
}

TEST_CASE("lease book: a round trip across a system clock step, a long wait or long intervals overflow nothing (found by fuzz/lease_book)")
{
    lease_limits lim{1 * ms, 50 * ms, 16};
    SUBCASE("round trips measured across a clock step")
    {
        for (std::int64_t rtt : {INT64_MIN / 2, INT64_MAX / 2}) {
            lease_book b;
            b.take(lim, 1, 0);
            b.fill(lim, 0, granted(0, 1, 1), 0, rtt);
            CHECK(b.lead(lim) >= lim.spacing_ns);
            CHECK(b.lead(lim) <= 2 * lim.ttl_ns + lim.spacing_ns + 5 * ms);
        }
    }
    SUBCASE("a refusal's wait near 2^53 us, late in the clock's range")
    {
        lease_book b;
        const std::int64_t now = std::int64_t{1} << 62;
        b.take(lim, 1, now);
        auto d = b.fill(lim, 1, refused((std::int64_t{1} << 53) - 1), now, 100 * us).d;
        CHECK_FALSE(d.admitted);
        CHECK(d.retry_after.count() > 0);
        CHECK(b.take(lim, 1, now + 1 * ms).d.retry_after.count() > 0);   // still refused, locally
    }
    SUBCASE("six slots of the longest interval: the first ones are due now, not in the far future")
    {
        lease_limits longest{sluice::redis::lua::max_span_us * 1000, 50 * ms, 16};
        lease_book b;
        b.take(longest, 6, 0);
        verdict v = granted(0, 1, 6);
        v.interval_us = sluice::redis::lua::max_span_us;
        CHECK(b.fill(longest, 6, v, 1 * ms, 100 * us).d.admitted);
    }
}

TEST_CASE("try with leasing: a refusal without a wait ends the reservation (found by fuzz/try_fsm)")
{
    fake_core c;
    c.opts.lease_size = 64;
    redis::detail::try_fsm a("k", 1);
    REQUIRE(a.start(c, 0).next == op_step::kind::eval);
    a.on_reply(c, {}, p(refused(0)), false, rt, 0);
    CHECK(a.error() == sluice::error::exceeds_limit);
    // The book is not left waiting for it: the next request makes its own round trip.
    redis::detail::try_fsm b("k", 1);
    CHECK(b.start(c, 1 * ms).next == op_step::kind::eval);
}

TEST_CASE("parse_verdict: a server's now beyond 2^53 us is not believed (found by fuzz/shared_backend)")
{
    // The clock offset (the server's now minus the round trip's middle) overflowed on it.
    auto reply_with_now = [](std::int64_t now) {
        sluice::redis::reply r;
        r.type = sluice::redis::reply::kind::array;
        for (std::int64_t x : {std::int64_t{1}, std::int64_t{0}, std::int64_t{3}, std::int64_t{0}, now, std::int64_t{0}}) {
            sluice::redis::reply e;
            e.type = sluice::redis::reply::kind::integer;
            e.integer = x;
            r.elements.push_back(e);
        }
        return r;
    };
    const std::int64_t two53 = std::int64_t{1} << 53;
    CHECK(redis::detail::parse_verdict(reply_with_now(1'700'000'000'000'000)));
    CHECK(redis::detail::parse_verdict(reply_with_now(-(two53 - 1))));   // a test's simulated clock
    CHECK_FALSE(redis::detail::parse_verdict(reply_with_now(two53)));
    CHECK_FALSE(redis::detail::parse_verdict(reply_with_now(INT64_MIN + 5)));
}

namespace {
struct batch_entry {
    std::uint64_t id;
};
} // namespace

TEST_CASE("key batches: one call per key in flight; those that wait go together, in order, at most max_batch a call")
{
    sluice::redis::detail::key_batches<batch_entry> kb(3);
    batch_entry a{1}, b{2}, c{3}, d{4}, e{5}, x{6};
    CHECK(kb.submit("k", a));    // nothing in flight: goes now
    CHECK_FALSE(kb.submit("k", b));
    CHECK(kb.submit("other", x));   // another key: its own call
    CHECK_FALSE(kb.submit("k", c));
    CHECK_FALSE(kb.submit("k", d));
    CHECK_FALSE(kb.submit("k", e));
    CHECK(kb.in_flight() == 2);
    CHECK(kb.waiting("k") == 4);
    auto c1 = kb.cancel("k", 3);
    REQUIRE(c1);
    CHECK(c1->id == 3);
    CHECK_FALSE(kb.cancel("k", 3));
    CHECK_FALSE(kb.cancel("nope", 2));
    auto n1 = kb.returned("k");
    REQUIRE(n1.size() == 3);
    CHECK(n1[0].id == 2);
    CHECK(n1[1].id == 4);
    CHECK(n1[2].id == 5);
    CHECK_FALSE(kb.submit("k", a));   // the batch is in flight
    auto n2 = kb.returned("k");
    REQUIRE(n2.size() == 1);
    CHECK(n2[0].id == 1);
    CHECK(kb.returned("k").empty());   // nothing waited: the key is free
    CHECK(kb.in_flight() == 1);
    CHECK(kb.returned("other").empty());
    CHECK(kb.in_flight() == 0);
    CHECK(kb.returned("k").empty());   // a stray return changes nothing
    CHECK(kb.submit("k", b));
}

TEST_CASE("key batches: model, random submits, returns and cancels over several keys: each request sent once or cancelled, in order")
{
    sluice::redis::detail::key_batches<batch_entry> kb(4);
    sluice_test::rng rng{99};
    const std::string keys[] = {"a", "b", "c"};
    // The model: per key, whether a call is in flight and the ids waiting, in order.
    struct key_model {
        bool busy = false;
        std::deque<std::uint64_t> waiting;
    };
    key_model model[3];
    std::uint64_t next_id = 0, sent = 0, cancelled = 0;
    std::vector<bool> done;
    for (int step = 0; step < 20'000; ++step) {
        std::size_t k = rng() % 3;
        auto& m = model[k];
        std::uint64_t op = rng() % 10;
        INFO("step ", step, " key ", keys[k], " op ", op);
        if (op < 5) {
            batch_entry e{next_id++};
            done.push_back(false);
            bool now = kb.submit(keys[k], e);
            REQUIRE(now == !m.busy);
            if (now) {
                m.busy = true;
                done[e.id] = true;
                ++sent;
            } else {
                m.waiting.push_back(e.id);
            }
        } else if (op < 8) {
            auto next = kb.returned(keys[k]);
            if (!m.busy) {
                REQUIRE(next.empty());
                continue;
            }
            std::size_t want = std::min<std::size_t>(4, m.waiting.size());
            REQUIRE(next.size() == want);
            for (auto& e : next) {
                REQUIRE(e.id == m.waiting.front());
                m.waiting.pop_front();
                REQUIRE_FALSE(done[e.id]);
                done[e.id] = true;
                ++sent;
            }
            m.busy = want > 0;
        } else if (!m.waiting.empty()) {
            std::size_t at = rng() % m.waiting.size();
            std::uint64_t id = m.waiting[at];
            auto c = kb.cancel(keys[k], id);
            REQUIRE(c);
            REQUIRE(c->id == id);
            m.waiting.erase(m.waiting.begin() + static_cast<std::ptrdiff_t>(at));
            done[id] = true;
            ++cancelled;
            REQUIRE_FALSE(kb.cancel(keys[k], id));
        }
        std::size_t busy = 0;
        for (std::size_t j = 0; j < 3; ++j) {
            busy += model[j].busy;
            REQUIRE(kb.waiting(keys[j]) == model[j].waiting.size());
        }
        REQUIRE(kb.in_flight() == busy);
    }
    // Every request is sent once or cancelled once those waiting are drained.
    for (std::size_t j = 0; j < 3; ++j) {
        while (model[j].busy) {
            auto next = kb.returned(keys[j]);
            for (auto& e : next) {
                REQUIRE_FALSE(done[e.id]);
                done[e.id] = true;
            }
            model[j].busy = !next.empty();
        }
    }
    CHECK(std::all_of(done.begin(), done.end(), [](bool b) { return b; }));
    CHECK(sent > 5'000);
    CHECK(cancelled > 500);
    CHECK(kb.in_flight() == 0);
}

TEST_SUITE_END();
