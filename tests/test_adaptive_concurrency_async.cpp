// sluice::adaptive_concurrency on a manual clock: permits measure their operations, the
// limit follows, waiters are granted as it grows; the concurrency_limit rules still hold.
#include "async_support.hpp"

#include <sluice/adaptive_concurrency.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include <doctest/doctest.h>

#include <memory>
#include <vector>

using namespace std::chrono_literals;
using clk = sluice::basic_manual_clock<struct adaptive_concurrency_tag>;
using cap_type = sluice::adaptive_concurrency<clk>;
using permit = cap_type::permit;
using sluice_test::drain;

namespace {

struct result {
    int calls = 0;
    boost::system::error_code ec;
    permit p;
};

std::shared_ptr<result> acquire(cap_type& cap, std::chrono::nanoseconds max_wait = 10s)
{
    auto r = std::make_shared<result>();
    cap.async_acquire(1, max_wait, [r](boost::system::error_code ec, permit p) {
        CHECK(r->calls == 0);
        ++r->calls;
        r->ec = ec;
        r->p = std::move(p);
    });
    return r;
}

sluice::adaptive_concurrency_options aimd(std::uint64_t initial)
{
    sluice::adaptive_concurrency_options o;
    o.algorithm = sluice::concurrency_algorithm::aimd;
    o.initial_limit = initial;
    o.latency_threshold = 50ms;
    return o;
}

} // namespace

TEST_SUITE_BEGIN("async");

TEST_CASE("adaptive_concurrency: at most limit() in flight; a slow operation shrinks the limit, fast ones grow it")
{
    boost::asio::io_context io;
    clk::set(clk::duration{0});
    cap_type cap(io, aimd(4));
    CHECK(cap.limit() == 4);
    std::vector<std::shared_ptr<result>> r;
    for (int i = 0; i < 6; ++i)
        r.push_back(acquire(cap));
    drain(io);
    CHECK(cap.in_use() == 4);
    CHECK(cap.queued() == 2);
    CHECK(r[3]->p);
    CHECK(r[4]->calls == 0);
    CHECK(r[0]->p.granted_at() == clk::time_point{});

    // 100 ms > the 50 ms threshold: the limit goes to floor(4 x 0.9) = 3; the slot given
    // back does not let a waiter in (3 still in flight).
    clk::advance(100ms);
    r[0]->p.release();
    drain(io);
    CHECK(cap.limit() == 3);
    CHECK(cap.in_use() == 3);
    CHECK(r[4]->calls == 0);

    // Fast answers at full use grow it again: +1 a round trip's worth of samples.
    r[1]->p.ignore();   // no sample: a slot for the head waiter, limit unchanged
    drain(io);
    CHECK(cap.limit() == 3);
    CHECK(r[4]->p);
    CHECK(cap.stats().adaptive.samples == 1);

    // r[2], r[3] were granted at 0 and are 100 ms old: slow. r[4] was granted now.
    clk::advance(10ms);
    r[4]->p.release();   // fast, 3 in use: +1/3
    drain(io);
    CHECK(cap.stats().adaptive.samples == 2);
    CHECK(cap.stats().adaptive.increases == 0);
    CHECK(r[5]->p);   // its slot went to the last waiter
}

TEST_CASE("adaptive_concurrency: drop() shrinks the limit whatever the latency; destruction counts as success")
{
    boost::asio::io_context io;
    clk::set(clk::duration{0});
    cap_type cap(io, aimd(10));
    {
        auto p = cap.try_acquire();
        REQUIRE(p);
        p.drop();
        CHECK_FALSE(p);
        p.release();   // ended already: nothing more
    }
    CHECK(cap.limit() == 9);
    CHECK(cap.in_use() == 0);
    CHECK(cap.stats().adaptive.dropped == 1);
    {
        auto p = cap.try_acquire();
        REQUIRE(p);
    }
    CHECK(cap.stats().adaptive.samples == 2);
    CHECK(cap.in_use() == 0);
}

TEST_CASE("adaptive_concurrency: deadlines, cancellation, close and stats follow concurrency_limit's rules")
{
    boost::asio::io_context io;
    clk::set(clk::duration{0});
    cap_type cap(io, aimd(1));
    auto held = cap.try_acquire();
    REQUIRE(held);
    CHECK_FALSE(cap.try_acquire());

    auto now_fail = acquire(cap, 0ns);
    auto deadline = acquire(cap, 5ms);
    boost::asio::cancellation_signal sig;
    auto cancelled = std::make_shared<result>();
    cap.async_acquire(1, 10s, boost::asio::bind_cancellation_slot(sig.slot(), [cancelled](boost::system::error_code ec, permit p) {
        ++cancelled->calls;
        cancelled->ec = ec;
        cancelled->p = std::move(p);
    }));
    auto closed = acquire(cap, 10s);
    drain(io);
    CHECK(now_fail->ec == sluice::error::timed_out);
    CHECK(now_fail->p.timed_out());
    CHECK(deadline->calls == 0);

    sluice_test::advance<clk>(io, 5ms);
    CHECK(deadline->ec == sluice::error::timed_out);

    sig.emit(boost::asio::cancellation_type::terminal);
    drain(io);
    CHECK(cancelled->ec == boost::asio::error::operation_aborted);
    CHECK_FALSE(cancelled->p);

    cap.close();
    drain(io);
    CHECK(closed->p.closed());
    CHECK(held);   // a permit out stays valid after close
    held.release();
    CHECK(cap.in_use() == 0);

    const auto s = cap.stats();
    CHECK(s.admitted == 0);   // try_acquire is not counted unless asked for
    CHECK(s.timed_out == 2);
    CHECK(s.cancelled == 1);
    CHECK(s.closed == 1);
    CHECK(s.waiting == 0);
}

TEST_CASE("adaptive_concurrency: a coroutine's acquire returns the permit or its error, and the limit grows under use")
{
    boost::asio::io_context io;
    clk::set(clk::duration{0});
    cap_type cap(io, aimd(2));
    int ok = 0;
    boost::asio::co_spawn(
        io,
        [&]() -> boost::asio::awaitable<void> {
            for (int i = 0; i < 40; ++i) {
                auto a = co_await cap.acquire(1s);
                auto b = co_await cap.acquire(1s);
                if (a && b) ++ok;
                // Both end fast with two in use: +1/limit each.
            }
        },
        boost::asio::detached);
    drain(io);
    CHECK(ok == 40);
    CHECK(cap.limit() > 2);
    CHECK(cap.stats().adaptive.increases > 0);
}

TEST_CASE("adaptive_concurrency: options out of range throw at construction")
{
    boost::asio::io_context io;
    auto o = aimd(0);
    CHECK_THROWS_AS(cap_type(io, o), boost::system::system_error);
}

TEST_SUITE_END();
