// Queue bounds (max_queued, max_queued_permits) and shutdown: close(), destruction of the
// limiter with waiters, io_context torn down with completions pending (ASan: no leak).
#include "async_support.hpp"

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <doctest/doctest.h>

#include <memory>
#include <optional>

using namespace std::chrono_literals;
using clk = sluice::basic_manual_clock<struct shutdown_tag>;
using sluice_test::advance;
using sluice_test::drain;
using sluice_test::ns;
using sluice_test::request;

namespace {

constexpr auto t0 = std::chrono::seconds(1000);

} // namespace

// ---- 7. queue bound --------------------------------------------------------------------

TEST_CASE("queue: max_queued refuses the K+1-th waiting request at once with queue_full")
{
    boost::asio::io_context io;
    clk::set(t0);
    sluice::token_bucket<clk> b(io, sluice::rate::per_second(10), 1, {.max_queued = 2});
    auto now = request<clk>(b, 1, 10s);   // granted at once: never counts against the bound
    auto w1 = request<clk>(b, 1, 10s);
    auto w2 = request<clk>(b, 1, 10s);
    auto full = request<clk>(b, 1, 10s);
    CHECK_FALSE(full->done());   // through the executor
    CHECK(b.queued() == 2);
    drain(io);
    CHECK(now->ok());
    REQUIRE(full->done());
    CHECK(full->ec == sluice::error::queue_full);
    CHECK(full->at == ns(t0));
    // Nothing consumed by the refused one: w2 keeps +200 ms, and once w1 has gone there is
    // room again for one more, at +300 ms.
    advance<clk>(io, 100ms);
    CHECK(w1->ok());
    auto w3 = request<clk>(b, 1, 10s);
    auto full2 = request<clk>(b, 1, 10s);
    drain(io);
    CHECK(full2->ec == sluice::error::queue_full);
    advance<clk>(io, 100ms);
    CHECK(w2->ok());
    CHECK(w2->at == ns(t0 + 200ms));
    advance<clk>(io, 100ms);
    CHECK(w3->ok());
    CHECK(w3->at == ns(t0 + 300ms));
}

TEST_CASE("queue: a request that can be granted at once is not refused by a full bound")
{
    boost::asio::io_context io;
    clk::set(t0);
    SUBCASE("max_queued = 0")
    {
        sluice::token_bucket<clk> b(io, sluice::rate::per_second(10), 3, {.max_queued = 0});
        sluice_test::outcomes q;
        for (int i = 0; i < 4; ++i)
            q.push_back(request<clk>(b, 1, 10s));
        drain(io);
        CHECK(q[0]->ok());
        CHECK(q[1]->ok());
        CHECK(q[2]->ok());
        CHECK(q[3]->ec == sluice::error::queue_full);   // would have to wait
        // Bad input is still reported as such, not as queue_full.
        auto bad = request<clk>(b, 4, 10s);
        drain(io);
        CHECK(bad->ec == sluice::error::exceeds_limit);
    }
    SUBCASE("max_queued_permits smaller than an immediate request")
    {
        sluice::token_bucket<clk> b(io, sluice::rate::per_second(10), 5, {.max_queued_permits = 3});
        auto big = request<clk>(b, 5, 10s);   // 5 > 3 but needs no wait
        drain(io);
        CHECK(big->ok());
    }
    SUBCASE("window limiter with max_queued = 0")
    {
        sluice::fixed_window<clk> w(io, 2, 1s, {.max_queued = 0});
        auto a = request<clk>(w, 2, 10s);
        auto b = request<clk>(w, 1, 10s);
        drain(io);
        CHECK(a->ok());
        CHECK(b->ec == sluice::error::queue_full);
        advance<clk>(io, 1s);
        auto c = request<clk>(w, 1, 10s);
        drain(io);
        CHECK(c->ok());
    }
}

TEST_CASE("queue: max_queued_permits bounds the permits waiting, summed over requests")
{
    boost::asio::io_context io;
    clk::set(t0);
    sluice::token_bucket<clk> b(io, sluice::rate::per_second(10), 5, {.max_queued_permits = 4});
    REQUIRE(b.try_acquire(5).admitted);
    auto w1 = request<clk>(b, 3, 10s);
    auto over = request<clk>(b, 2, 10s);   // 3 + 2 > 4
    auto w2 = request<clk>(b, 1, 10s);     // 3 + 1 fits
    auto over2 = request<clk>(b, 1, 10s);
    drain(io);
    CHECK(over->ec == sluice::error::queue_full);
    CHECK(over2->ec == sluice::error::queue_full);
    CHECK(b.queued() == 2);
    advance<clk>(io, 300ms);
    CHECK(w1->ok());
    advance<clk>(io, 100ms);
    CHECK(w2->ok());
    CHECK(w2->at == ns(t0 + 400ms));   // the refused ones consumed nothing
}

TEST_CASE_TEMPLATE("queue: max_queued on window limiters", F, sluice_test::fixed_window_of<clk>,
                   sluice_test::sliding_window_of<clk>, sluice_test::sliding_window_counter_of<clk>,
                   sluice_test::all_of_of<clk>)
{
    boost::asio::io_context io;
    clk::set(t0);
    auto l = F::make(io, 2, {.max_queued = 1});
    REQUIRE(l.try_acquire(2).admitted);
    auto w = request<clk>(l, 1, 100s);
    auto full = request<clk>(l, 1, 100s);
    drain(io);
    CHECK(full->ec == sluice::error::queue_full);
    CHECK(l.queued() == 1);
    for (int i = 0; i < 30 && !w->done(); ++i)
        advance<clk>(io, 100ms);
    CHECK(w->ok());
}

// ---- 8. shutdown ---------------------------------------------------------------------

TEST_CASE_TEMPLATE("close: every pending waiter completes with closed exactly once, and so do later requests", F,
                   sluice_test::token_bucket_of<clk>, sluice_test::fixed_window_of<clk>,
                   sluice_test::sliding_window_of<clk>, sluice_test::sliding_window_counter_of<clk>,
                   sluice_test::all_of_of<clk>)
{
    boost::asio::io_context io;
    clk::set(t0);
    auto l = F::make(io, 1);
    REQUIRE(l.try_acquire(1).admitted);
    sluice_test::outcomes q;
    for (int i = 0; i < 5; ++i)
        q.push_back(request<clk>(l, 1, 100s));
    drain(io);
    CHECK(l.queued() == 5);
    l.close();
    CHECK(l.queued() == 0);
    for (auto& o : q)
        CHECK_FALSE(o->done());   // through the executor
    drain(io);
    for (auto& o : q) {
        CHECK(o->calls == 1);
        CHECK(o->ec == sluice::error::closed);
    }
    auto later = request<clk>(l, 1, 100s);
    auto later_bad = request<clk>(l, 0, 100s);
    drain(io);
    CHECK(later->ec == sluice::error::closed);
    CHECK(later_bad->calls == 1);
    // The timer never fires into anything again.
    for (int i = 0; i < 20; ++i)
        advance<clk>(io, 1s);
    for (auto& o : q)
        CHECK(o->calls == 1);
    l.close();   // twice is fine
    drain(io);
}

TEST_CASE_TEMPLATE("close: destroying the limiter completes its waiters with closed", F,
                   sluice_test::token_bucket_of<clk>, sluice_test::sliding_window_of<clk>)
{
    boost::asio::io_context io;
    clk::set(t0);
    sluice_test::handler_stats stats;
    sluice_test::outcomes q;
    {
        auto l = F::make(io, 1);
        REQUIRE(l.try_acquire(1).admitted);
        for (int i = 0; i < 5; ++i)
            q.push_back(request<clk>(l, 1, 100s));
        for (int i = 0; i < 5; ++i)
            l.async_acquire(1, 100s, sluice_test::counted_handler(stats));
        drain(io);
    }
    drain(io);
    for (auto& o : q) {
        CHECK(o->calls == 1);
        CHECK(o->ec == sluice::error::closed);
    }
    CHECK(stats.runs == 5);
    CHECK(stats.errors == 5);
    CHECK(stats.twice == 0);
    CHECK(stats.dropped == 0);
    CHECK(stats.live == 0);
    for (int i = 0; i < 10; ++i)
        advance<clk>(io, 1s);
    CHECK(stats.runs == 5);
}

TEST_CASE("close: a moved-to limiter closes the one it replaces")
{
    boost::asio::io_context io;
    clk::set(t0);
    sluice::token_bucket<clk> a(io, sluice::rate::per_second(10), 1);
    sluice::token_bucket<clk> b(io, sluice::rate::per_second(10), 1);
    REQUIRE(a.try_acquire().admitted);
    auto w = request<clk>(a, 1, 10s);
    a = std::move(b);
    drain(io);
    CHECK(w->ec == sluice::error::closed);
    auto fresh = request<clk>(a, 1, 10s);
    drain(io);
    CHECK(fresh->ok());
}

TEST_CASE("shutdown: io_context stopped and destroyed with 100,000 waiters: no handler runs, all are freed")
{
    clk::set(t0);
    sluice_test::handler_stats stats;
    {
        auto io = std::make_unique<boost::asio::io_context>();
        auto b = std::make_unique<sluice::token_bucket<clk>>(*io, sluice::rate::per_second(1000), 1);
        for (int i = 0; i < 100000; ++i)
            b->async_acquire(1, sluice::wait_forever, sluice_test::counted_handler(stats));
        CHECK(b->queued() == 99999);   // the first was granted at once
        io->stop();
        b.reset();    // the limiter first, as Asio requires: completes them (queued on io)
        io.reset();   // destroyed unrun
    }
    CHECK(stats.runs == 0);
    CHECK(stats.twice == 0);
    CHECK(stats.dropped == 100000);
    CHECK(stats.live == 0);
}

TEST_CASE("shutdown: io_context destroyed with 100,000 waiters on a window limiter, partly run")
{
    clk::set(t0);
    sluice_test::handler_stats stats;
    {
        auto io = std::make_unique<boost::asio::io_context>();
        auto w = std::make_unique<sluice::sliding_window<clk>>(*io, 10, 1s);
        for (int i = 0; i < 100000; ++i)
            w->async_acquire(1, sluice::wait_forever, sluice_test::counted_handler(stats));
        drain(*io);
        advance<clk>(*io, 1s);
        CHECK(stats.runs == 20);
        w.reset();
        io->restart();
        while (stats.runs < 1020)
            io->run_one();   // some of the closed completions run, the rest are dropped
        io.reset();
    }
    CHECK(stats.runs == 1020);
    CHECK(stats.errors == 1000);
    CHECK(stats.twice == 0);
    CHECK(stats.dropped == 100000 - 1020);
    CHECK(stats.live == 0);
}

TEST_CASE("shutdown: running the io_context after destroying the limiter completes all 100,000 once")
{
    clk::set(t0);
    sluice_test::handler_stats stats;
    {
        boost::asio::io_context io;
        {
            sluice::token_bucket<clk> b(io, sluice::rate::per_second(1000), 1);
            for (int i = 0; i < 100000; ++i)
                b.async_acquire(1, sluice::wait_forever, sluice_test::counted_handler(stats));
        }
        io.run();   // returns: nothing is left pending (no timer, no work)
    }
    CHECK(stats.runs == 100000);
    CHECK(stats.errors == 99999);
    CHECK(stats.twice == 0);
    CHECK(stats.dropped == 0);
    CHECK(stats.live == 0);
}

TEST_CASE("shutdown: handlers bound to a second io_context destroyed unrun are freed")
{
    clk::set(t0);
    sluice_test::handler_stats stats;
    {
        boost::asio::io_context io;
        auto io2 = std::make_unique<boost::asio::io_context>();
        {
            sluice::token_bucket<clk> b(io, sluice::rate::per_second(10), 1);
            for (int i = 0; i < 1000; ++i)
                b.async_acquire(1, sluice::wait_forever,
                                boost::asio::bind_executor(io2->get_executor(), sluice_test::counted_handler(stats)));
            drain(io);
        }
        drain(io);
        io2.reset();
    }
    CHECK(stats.runs == 0);
    CHECK(stats.dropped == 1000);
    CHECK(stats.live == 0);
}

namespace {

struct frame_counter {
    std::atomic<long>* live;
    explicit frame_counter(std::atomic<long>* l) : live(l) { ++*live; }
    ~frame_counter() { --*live; }
};

} // namespace

TEST_CASE("shutdown: coroutines suspended in acquire() are destroyed with the io_context, nothing leaks")
{
    clk::set(t0);
    std::atomic<long> frames{0};
    int finished = 0;
    {
        auto io = std::make_unique<boost::asio::io_context>();
        auto b = std::make_unique<sluice::token_bucket<clk>>(*io, sluice::rate::per_second(10), 1);
        for (int i = 0; i < 1000; ++i)
            boost::asio::co_spawn(*io, [&, bp = b.get()]() -> boost::asio::awaitable<void> {
                frame_counter fc(&frames);
                co_await bp->acquire();
                ++finished;
            }, boost::asio::detached);
        drain(*io);
        CHECK(frames == 999);   // the first was granted at once and finished
        CHECK(finished == 1);
        b.reset();   // closed completions are queued; the io_context is never run again
        io.reset();
    }
    CHECK(frames == 0);
    CHECK(finished == 1);
}
