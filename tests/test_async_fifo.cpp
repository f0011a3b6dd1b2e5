// FIFO order, no starvation of large requests, no barging by try_acquire, and GCRA's
// reserve-at-enqueue schedule, on the manual clock.
#include "async_support.hpp"

#include <doctest/doctest.h>

#include <vector>

using namespace std::chrono_literals;
using clk = sluice::basic_manual_clock<struct fifo_tag>;
using sluice_test::advance;
using sluice_test::drain;
using sluice_test::ns;
using sluice_test::request;

namespace {

constexpr auto t0 = std::chrono::seconds(1000);

// Records the order in which handlers run.
struct order_log {
    std::vector<int> order;
    std::vector<std::int64_t> at;
    std::vector<boost::system::error_code> ec;
};

template <class L>
void tagged(L& l, order_log& log, int tag, std::uint64_t n, std::chrono::nanoseconds max_wait = 100s)
{
    l.async_acquire(n, max_wait, [&log, tag](boost::system::error_code ec) {
        log.order.push_back(tag);
        log.at.push_back(sluice_test::now_ns<clk>());
        log.ec.push_back(ec);
    });
}

} // namespace

// ---- 2. FIFO -------------------------------------------------------------------------

TEST_CASE_TEMPLATE("fifo: GCRA requests complete in the order made; a large one is not starved", F,
                   sluice_test::token_bucket_of<clk>, sluice_test::leaky_bucket_of<clk>)
{
    boost::asio::io_context io;
    clk::set(t0);
    // token_bucket: 10/s burst 5; leaky_bucket: 10/s (n must be 1).
    constexpr bool is_token = std::is_same_v<F, sluice_test::token_bucket_of<clk>>;
    auto l = [&] {
        if constexpr (is_token)
            return typename F::type(io, sluice::rate::per_second(10), 5);
        else
            return F::make(io, 10);
    }();
    const std::uint64_t big = is_token ? 5 : 1;
    REQUIRE(l.try_acquire(big).admitted);   // empty

    order_log log;
    tagged(l, log, 1, 1);
    tagged(l, log, 2, 1);
    tagged(l, log, 3, big);   // the large one
    // A stream of later small requests, arriving while the large one waits.
    int tag = 4;
    for (int step = 0; step < 20; ++step) {
        advance<clk>(io, 50ms);
        tagged(l, log, tag++, 1);
    }
    for (int step = 0; step < 60; ++step)
        advance<clk>(io, 50ms);
    REQUIRE(log.order.size() == static_cast<std::size_t>(tag - 1));
    for (std::size_t i = 0; i < log.order.size(); ++i) {
        CHECK(log.order[i] == static_cast<int>(i) + 1);
        CHECK_FALSE(log.ec[i]);
    }
    // The large one got its slot right after the two small ones, before any later request.
    CHECK(log.at[2] == ns(t0 + 100ms * (2 + big)));
}

TEST_CASE_TEMPLATE("fifo: window requests complete in order; a large one is not starved by later small ones", F,
                   sluice_test::fixed_window_of<clk>, sluice_test::sliding_window_of<clk>,
                   sluice_test::sliding_window_counter_of<clk>, sluice_test::all_of_of<clk>)
{
    boost::asio::io_context io;
    clk::set(t0);
    auto l = F::make(io, 5);
    REQUIRE(l.try_acquire(5).admitted);   // full

    order_log log;
    tagged(l, log, 1, 1);
    tagged(l, log, 2, 1);
    tagged(l, log, 3, 5);   // needs a whole window to itself
    int tag = 4;
    for (int step = 0; step < 40; ++step) {
        advance<clk>(io, 50ms);   // small requests keep arriving: each would fit alone
        tagged(l, log, tag++, 1);
    }
    for (int step = 0; step < 400; ++step)
        advance<clk>(io, 50ms);
    REQUIRE(log.order.size() == static_cast<std::size_t>(tag - 1));
    for (std::size_t i = 0; i < log.order.size(); ++i) {
        CHECK(log.order[i] == static_cast<int>(i) + 1);
        CHECK_FALSE(log.ec[i]);
    }
    // The large request was not pushed back by the stream: it completed within a few
    // windows, while later small requests were still arriving.
    CHECK(log.at[2] <= ns(t0 + 3s));
    CHECK(log.at[3] >= log.at[2]);
}

TEST_CASE("fifo: try_acquire does not barge ahead of a GCRA waiter")
{
    boost::asio::io_context io;
    clk::set(t0);
    sluice::token_bucket<clk> b(io, sluice::rate::per_second(10), 1);
    REQUIRE(b.try_acquire().admitted);
    auto w = request<clk>(b, 1, 1s);   // slot +100 ms
    clk::advance(100ms);               // the slot has come but the timer has not run yet
    auto d = b.try_acquire();
    CHECK_FALSE(d.admitted);            // the permit is the waiter's
    CHECK(d.retry_after == 100ms);
    drain(io);
    CHECK(w->ok());
    CHECK(w->at == ns(t0 + 100ms));
}

TEST_CASE_TEMPLATE("fifo: try_acquire does not barge ahead of window waiters", F, sluice_test::fixed_window_of<clk>,
                   sluice_test::sliding_window_of<clk>, sluice_test::sliding_window_counter_of<clk>,
                   sluice_test::all_of_of<clk>)
{
    boost::asio::io_context io;
    clk::set(t0);
    auto l = F::make(io, 2);
    REQUIRE(l.try_acquire(2).admitted);
    auto w = request<clk>(l, 2, 100s);
    // Time passes far enough for the window to have room, but the waiter's timer has not
    // run yet: try_acquire must not take the room in front of it.
    clk::advance(5s);
    auto d = l.try_acquire(1);
    CHECK_FALSE(d.admitted);
    CHECK(d.retry_after > 0ns);
    CHECK_FALSE(d.error);
    drain(io);
    CHECK(w->ok());
    CHECK(w->at == ns(t0 + 5s));
    // With nobody queued, try_acquire works again (after the window frees up).
    clk::advance(5s);
    CHECK(l.try_acquire(1).admitted);
}

TEST_CASE("fifo: an immediate async request does not barge ahead of a window waiter either")
{
    boost::asio::io_context io;
    clk::set(t0);
    sluice::sliding_window<clk> l(io, 2, 1s);
    REQUIRE(l.try_acquire(2).admitted);
    order_log log;
    tagged(l, log, 1, 2);
    clk::advance(1s);   // room for 2 now, timer not yet run
    tagged(l, log, 2, 1);
    drain(io);
    REQUIRE(log.order.size() == 1);
    CHECK(log.order[0] == 1);
    advance<clk>(io, 1s);
    REQUIRE(log.order.size() == 2);
    CHECK(log.order[1] == 2);
}

// ---- 3. GCRA reserves at enqueue ----------------------------------------------------

TEST_CASE_TEMPLATE("gcra: each of 5 waiters completes exactly at its slot", F, sluice_test::token_bucket_of<clk>,
                   sluice_test::leaky_bucket_of<clk>)
{
    boost::asio::io_context io;
    clk::set(t0);
    auto l = F::make(io, 10);
    REQUIRE(l.try_acquire().admitted);
    sluice_test::outcomes q;
    for (int i = 0; i < 5; ++i)
        q.push_back(request<clk>(l, 1, 10s));
    drain(io);
    for (int i = 0; i < 5; ++i) {
        auto slot = t0 + 100ms * (i + 1);
        advance<clk>(io, slot - std::chrono::nanoseconds(sluice_test::now_ns<clk>()) - 1ns);
        CHECK_FALSE(q[i]->done());   // not a nanosecond early
        advance<clk>(io, 1ns);
        REQUIRE(q[i]->ok());
        CHECK(q[i]->at == ns(slot));
        if (i + 1 < 5)
            CHECK_FALSE(q[i + 1]->done());
    }
}

TEST_CASE_TEMPLATE("gcra: a late wake-up releases every due waiter in one pass and does not shift later slots", F,
                   sluice_test::token_bucket_of<clk>, sluice_test::leaky_bucket_of<clk>)
{
    boost::asio::io_context io;
    clk::set(t0);
    auto l = F::make(io, 10);
    REQUIRE(l.try_acquire().admitted);
    sluice_test::outcomes q;
    for (int i = 0; i < 5; ++i)
        q.push_back(request<clk>(l, 1, 10s));
    drain(io);
    // The timer is 250 ms late: slots +100, +200, +300 are all due.
    clk::advance(350ms);
    io.restart();
    io.run_one();   // the one timer wake-up
    // That single wake-up released all three due waiters (their handlers are now queued
    // on the executor), not one per wake-up.
    CHECK(l.queued() == 2);
    drain(io);
    for (int i = 0; i < 3; ++i) {
        REQUIRE(q[i]->ok());
        CHECK(q[i]->at == ns(t0 + 350ms));
    }
    CHECK_FALSE(q[3]->done());
    // Later slots keep their schedule: +400 and +500, not 350 + 100 and 350 + 200.
    advance<clk>(io, 49ms);
    CHECK_FALSE(q[3]->done());
    advance<clk>(io, 1ms);
    REQUIRE(q[3]->ok());
    CHECK(q[3]->at == ns(t0 + 400ms));
    advance<clk>(io, 100ms);
    REQUIRE(q[4]->ok());
    CHECK(q[4]->at == ns(t0 + 500ms));
}

TEST_CASE("gcra: reservations are committed at enqueue (visible in the bucket state)")
{
    boost::asio::io_context io;
    clk::set(t0);
    sluice::token_bucket<clk> b(io, sluice::rate::per_second(10), 1);
    REQUIRE(b.try_acquire().admitted);
    CHECK(b.policy().empty_at() == ns(t0));   // empty from now
    auto w1 = request<clk>(b, 1, 10s);
    auto w2 = request<clk>(b, 1, 10s);
    CHECK(b.policy().empty_at() == ns(t0 + 200ms));   // both slots taken at once
    advance<clk>(io, 300ms);
    CHECK(w1->ok());
    CHECK(w2->ok());
    CHECK(w1->at == ns(t0 + 300ms));
}

// ---- Coalescing -----------------------------------------------------------------------

namespace {

// The instants at which the waiters of a 10,000/s bucket (slots 100 us apart) were
// released, the clock stepped 10 us at a time.
template <class F>
std::vector<std::int64_t> release_times(const sluice::limiter_options& o, int waiters)
{
    boost::asio::io_context io;
    clk::set(t0);
    auto l = F::make(io, 10'000, o);
    REQUIRE(l.try_acquire().admitted);
    sluice_test::outcomes q;
    for (int i = 0; i < waiters; ++i)
        q.push_back(request<clk>(l, 1, 10s));
    drain(io);
    std::vector<std::int64_t> at;
    for (int step = 0; step < 1000 && l.queued() > 0; ++step)
        advance<clk>(io, 10us);
    for (int i = 0; i < waiters; ++i) {
        REQUIRE(q[i]->ok());
        const std::int64_t slot = ns(t0 + 100us * (i + 1));
        CHECK(q[i]->at >= slot);                                  // never early
        CHECK(q[i]->at <= slot + ns(o.coalesce_max));             // late by the window at most
        if (at.empty() || at.back() != q[i]->at) at.push_back(q[i]->at);
    }
    // The window never holds the last waiter past its slot by more than coalesce.
    CHECK(q.back()->at <= ns(t0 + 100us * waiters) + ns(o.coalesce));
    return at;
}

} // namespace

static_assert(sluice::detail::committed_slots<sluice::detail::rate_queue<sluice::policy::gcra>>);
static_assert(!sluice::detail::committed_slots<sluice::detail::rate_queue<sluice::policy::fixed_counter>>);

TEST_CASE_TEMPLATE("coalescing: a deep queue of committed slots wakes once per coalesce x queued, at most coalesce_max",
                   F, sluice_test::token_bucket_of<clk>, sluice_test::leaky_bucket_of<clk>)
{
    sluice::limiter_options o;
    o.coalesce = 200us;
    o.coalesce_max = 1ms;
    // Slot 1 at +100 us (nothing woke before); 19 then queued: the next wake-up 1 ms later
    // (+1.1 ms, slots 2-11); 9 left, 9 x 200 us = 1.8 ms, so 1 ms again, but the last slot
    // (+2 ms) comes before that: the rest are released at it, none late.
    CHECK(release_times<F>(o, 20) == std::vector<std::int64_t>{ns(t0 + 100us), ns(t0 + 1100us), ns(t0 + 2000us)});
    CHECK(release_times<F>(o, 22) == std::vector<std::int64_t>{ns(t0 + 100us), ns(t0 + 1100us), ns(t0 + 2100us),
                                                              ns(t0 + 2300us)});

    // Few waiters: the window is coalesce x queued (3 queued after the first release: 600
    // us), but no later than the last slot (+400 us); never sooner than coalesce after
    // the last wake-up (2 queued: slots at +200 and +300 us, the wake-up at +300).
    CHECK(release_times<F>(o, 4) == std::vector<std::int64_t>{ns(t0 + 100us), ns(t0 + 400us)});
    CHECK(release_times<F>(o, 3) == std::vector<std::int64_t>{ns(t0 + 100us), ns(t0 + 300us)});
    o.coalesce = 250us;
    CHECK(release_times<F>(o, 3) == std::vector<std::int64_t>{ns(t0 + 100us), ns(t0 + 350us)});
    o.coalesce = 200us;

    // coalesce_max at coalesce: the fixed window of before, a wake-up every 200 us.
    o.coalesce_max = 200us;
    const auto fixed = release_times<F>(o, 20);
    REQUIRE(fixed.size() == 11);
    for (std::size_t i = 1; i < fixed.size(); ++i) CHECK(fixed[i] - fixed[i - 1] == ns(200us));
}

TEST_CASE("coalescing: negative coalesce, coalesce_max or strict_threshold is refused at construction")
{
    boost::asio::io_context io;
    for (int which = 0; which < 3; ++which) {
        sluice::limiter_options o;
        (which == 0 ? o.coalesce : which == 1 ? o.coalesce_max : o.strict_threshold) = -1ns;
        try {
            (void)sluice_test::token_bucket_of<clk>::make(io, 10, o);
            FAIL("accepted option " << which);
        } catch (const boost::system::system_error& e) {
            CHECK(e.code() == sluice::error::invalid_option);
        }
    }
}
