#include "async_support.hpp"

#include <sluice/concurrency_limit.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include <doctest/doctest.h>

#include <vector>

using namespace std::chrono_literals;
using clk = sluice::basic_manual_clock<struct concurrency_tag>;
using cap_type = sluice::concurrency_limit<clk>;
using permit = cap_type::permit;
using sluice_test::drain;

namespace {

struct result {
    int calls = 0;
    boost::system::error_code ec;
    permit p;
};

auto record(std::shared_ptr<result> r)
{
    return [r](boost::system::error_code ec, permit p) {
        CHECK(r->calls == 0);
        ++r->calls;
        r->ec = ec;
        r->p = std::move(p);
    };
}

std::vector<std::shared_ptr<result>> enqueue(cap_type& cap, std::initializer_list<std::uint64_t> sizes,
                                             std::chrono::nanoseconds max_wait = 10s)
{
    std::vector<std::shared_ptr<result>> out;
    for (auto n : sizes) {
        out.push_back(std::make_shared<result>());
        cap.async_acquire(n, max_wait, record(out.back()));
    }
    return out;
}

} // namespace

TEST_SUITE_BEGIN("async");

TEST_CASE("concurrency_limit: at most K in flight, FIFO, permit releases on destruction")
{
    boost::asio::io_context io;
    clk::set(clk::duration{0});
    cap_type cap(io, 3);
    auto r = enqueue(cap, {1, 1, 1, 1, 1});
    CHECK(r[0]->calls == 0);   // never inline
    drain(io);
    CHECK(r[0]->p);
    CHECK(r[2]->p);
    CHECK(r[3]->calls == 0);
    CHECK(cap.in_use() == 3);
    CHECK(cap.queued() == 2);
    CHECK_FALSE(cap.try_acquire());   // no barging past waiters
    r[1]->p = permit();               // destroying a permit frees its slot
    drain(io);
    CHECK(r[3]->p);
    CHECK(r[4]->calls == 0);
    r[0]->p.release();
    drain(io);
    CHECK(r[4]->p);
    CHECK(cap.in_use() == 3);
}

TEST_CASE("concurrency_limit: a large request is not starved by small ones")
{
    boost::asio::io_context io;
    cap_type cap(io, 4);
    auto first = enqueue(cap, {3});
    auto big = enqueue(cap, {4});
    auto small = enqueue(cap, {1, 1});
    drain(io);
    CHECK(first[0]->p);
    CHECK(big[0]->calls == 0);
    CHECK(small[0]->calls == 0);   // one slot is free, but the big request is first
    first[0]->p.release();
    drain(io);
    CHECK(big[0]->p.count() == 4);
    CHECK(small[0]->calls == 0);
    big[0]->p.release();
    drain(io);
    CHECK(small[0]->p);
    CHECK(small[1]->p);
}

TEST_CASE("concurrency_limit: deadlines, fail fast, bad input")
{
    boost::asio::io_context io;
    clk::set(clk::duration{0});
    cap_type cap(io, 1);
    auto held = enqueue(cap, {1});
    auto now0 = enqueue(cap, {1}, 0ns);
    auto late = enqueue(cap, {1}, 100ms);
    auto later = enqueue(cap, {1}, 300ms);
    auto zero = enqueue(cap, {0});
    auto huge = enqueue(cap, {2});
    drain(io);
    CHECK(held[0]->p);
    CHECK(now0[0]->ec == sluice::error::timed_out);
    CHECK(zero[0]->ec == sluice::error::invalid_count);
    CHECK(huge[0]->ec == sluice::error::exceeds_limit);
    sluice_test::advance<clk>(io, 99ms);
    CHECK(late[0]->calls == 0);
    sluice_test::advance<clk>(io, 1ms);
    CHECK(late[0]->ec == sluice::error::timed_out);
    CHECK_FALSE(late[0]->p);
    CHECK(later[0]->calls == 0);
    held[0]->p.release();
    drain(io);
    CHECK(later[0]->p);
    CHECK_THROWS_AS(cap_type(io, 0), boost::system::system_error);
}

TEST_CASE("concurrency_limit: cancellation of every type removes only that waiter")
{
    using ct = boost::asio::cancellation_type;
    for (ct type : {ct::terminal, ct::partial, ct::total}) {
        CAPTURE(static_cast<int>(type));
        boost::asio::io_context io;
        cap_type cap(io, 1);
        auto held = enqueue(cap, {1});
        boost::asio::cancellation_signal sig;
        auto cancelled = std::make_shared<result>();
        cap.async_acquire(1, 10s, boost::asio::bind_cancellation_slot(sig.slot(), record(cancelled)));
        auto next = enqueue(cap, {1});
        drain(io);
        sig.emit(type);
        drain(io);
        CHECK(cancelled->ec == boost::asio::error::operation_aborted);
        CHECK(next[0]->calls == 0);
        held[0]->p.release();
        drain(io);
        CHECK(next[0]->p);
        sig.emit(type);   // after completion: harmless
        drain(io);
        CHECK(cancelled->calls == 1);
    }
}

TEST_CASE("concurrency_limit: close, queue bound, set_limit, coroutine API")
{
    boost::asio::io_context io;
    cap_type cap(io, 1, sluice::limiter_options{.max_queued = 1});
    auto r = enqueue(cap, {1, 1, 1});
    drain(io);
    CHECK(r[0]->p);
    CHECK(r[2]->ec == sluice::error::queue_full);
    cap.set_limit(2);
    drain(io);
    CHECK(r[1]->p);
    bool got = false, empty = false;
    boost::system::error_code why;
    boost::asio::co_spawn(io, [&]() -> boost::asio::awaitable<void> {
        permit p = co_await cap.acquire(0ns);
        empty = !p;
        why = p.error();
        r[0]->p.release();
        permit q = co_await cap.acquire(1s);
        got = static_cast<bool>(q);
    }, boost::asio::detached);
    drain(io);
    CHECK(empty);
    CHECK(why == sluice::error::timed_out);
    CHECK(got);
    auto pending = enqueue(cap, {2});
    drain(io);
    cap.close();
    drain(io);
    CHECK(pending[0]->ec == sluice::error::closed);
    auto after = enqueue(cap, {1});
    drain(io);
    CHECK(after[0]->ec == sluice::error::closed);
}

TEST_CASE("concurrency_limit: a grant dropped unrun returns its slot")
{
    clk::set(clk::duration{0});
    auto io = std::make_unique<boost::asio::io_context>();
    boost::asio::io_context other;
    cap_type cap(other, 1);
    auto held = cap.try_acquire();
    REQUIRE(held);
    auto r = std::make_shared<result>();
    // The handler runs on `io`, which is destroyed before it can run.
    cap.async_acquire(1, 10s, boost::asio::bind_executor(io->get_executor(), record(r)));
    held.release();   // grants the waiter; its completion is posted to `io`
    CHECK(cap.in_use() == 1);
    io.reset();
    CHECK(r->calls == 0);
    CHECK(cap.in_use() == 0);
}

TEST_SUITE_END();
