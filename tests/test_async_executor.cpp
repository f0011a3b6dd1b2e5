// Where completions run: the handler's associated executor (strand, another io_context),
// never inline, never recursively.
#include "async_support.hpp"

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/strand.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <optional>
#include <stdexcept>
#include <thread>

using namespace std::chrono_literals;
using clk = sluice::basic_manual_clock<struct executor_tag>;
using sluice_test::advance;
using sluice_test::drain;
using sluice_test::ns;

namespace {

constexpr auto t0 = std::chrono::seconds(1000);

} // namespace

TEST_CASE("executor: a handler bound to a strand runs on that strand (immediate grant and timer release)")
{
    boost::asio::io_context io;
    clk::set(t0);
    sluice::token_bucket<clk> b(io, sluice::rate::per_second(10), 1);
    auto strand = boost::asio::make_strand(io);
    int ran = 0;
    auto check_on_strand = [&](boost::system::error_code ec) {
        CHECK_FALSE(ec);
        CHECK(strand.running_in_this_thread());
        ++ran;
    };
    b.async_acquire(1, 1s, boost::asio::bind_executor(strand, check_on_strand));   // at once
    b.async_acquire(1, 1s, boost::asio::bind_executor(strand, check_on_strand));   // by the timer
    CHECK(ran == 0);
    drain(io);
    CHECK(ran == 1);
    advance<clk>(io, 100ms);
    CHECK(ran == 2);

    // An unbound handler runs on the limiter's executor, not on the strand.
    bool plain = false;
    b.async_acquire(1, 1s, [&](boost::system::error_code) {
        CHECK_FALSE(strand.running_in_this_thread());
        plain = true;
    });
    advance<clk>(io, 100ms);
    CHECK(plain);
}

TEST_CASE("executor: a handler bound to a second io_context runs only in that io_context")
{
    boost::asio::io_context io, io2;
    clk::set(t0);
    sluice::token_bucket<clk> b(io, sluice::rate::per_second(10), 1);

    int on_io2 = 0;
    std::thread::id ran_in{};
    auto h = [&](boost::system::error_code ec) {
        CHECK_FALSE(ec);
        ++on_io2;
        ran_in = std::this_thread::get_id();
    };
    // Granted at once: the completion goes to io2, not io.
    b.async_acquire(1, 1s, boost::asio::bind_executor(io2.get_executor(), h));
    drain(io);
    CHECK(on_io2 == 0);
    drain(io2);
    CHECK(on_io2 == 1);

    // Waiting: the limiter's timer runs on io, the completion on io2.
    b.async_acquire(1, 1s, boost::asio::bind_executor(io2.get_executor(), h));
    clk::advance(100ms);
    drain(io2);
    CHECK(on_io2 == 1);   // io's timer has not run yet
    // The pending waiter counts as work on io2: a poll with nothing ready does not stop it.
    CHECK_FALSE(io2.stopped());
    drain(io);
    CHECK(on_io2 == 1);   // released, but its handler belongs to io2
    drain(io2);
    CHECK(on_io2 == 2);

    // Errors go the same way.
    std::optional<boost::system::error_code> err;
    b.async_acquire(0, 1s, boost::asio::bind_executor(io2.get_executor(), [&](boost::system::error_code ec) { err = ec; }));
    drain(io);
    CHECK_FALSE(err);
    drain(io2);
    CHECK(err == sluice::error::invalid_count);
}

TEST_CASE("executor: a handler whose any_io_executor holds another io_context's executor, counting work or not, runs there")
{
    // Completions through an any_io_executor are posted to the io_context executor it holds
    // (detail::post_to): it must be the handler's, not the limiter's.
    boost::asio::io_context io, io2;
    clk::set(t0);
    sluice::token_bucket<clk> b(io, sluice::rate::per_second(10), 1);
    const boost::asio::any_io_executor plain = io2.get_executor();
    const boost::asio::any_io_executor counted =
        boost::asio::prefer(io2.get_executor(), boost::asio::execution::outstanding_work.tracked);
    int answers = 0, grants = 0;
    auto on_io2 = [&] { return io2.get_executor().running_in_this_thread() && !io.get_executor().running_in_this_thread(); };
    for (const auto& ex : {plain, counted}) {
        b.async_try_acquire(1, boost::asio::bind_executor(ex, [&](boost::system::error_code ec, sluice::decision) {
            CHECK_FALSE(ec);
            CHECK(on_io2());
            ++answers;
        }));
        b.async_acquire(1, 1s, boost::asio::bind_executor(ex, [&](boost::system::error_code ec) {
            CHECK_FALSE(ec);
            CHECK(on_io2());
            ++grants;
        }));
        const int before = answers + grants;
        drain(io);
        CHECK(answers + grants == before);   // nothing runs in io
        drain(io2);
        CHECK(answers + grants == before + 1);   // the answer; the acquire waits
        advance<clk>(io, 100ms);
        CHECK(answers + grants == before + 1);   // released by io's timer, run in io2
        drain(io2);
        CHECK(answers + grants == before + 2);
    }
    CHECK(answers == 2);
    CHECK(grants == 2);
}

TEST_CASE("executor: a handler bound to a second io_context run by another thread runs on that thread")
{
    boost::asio::io_context io, io2;
    clk::set(t0);
    sluice::token_bucket<clk> b(io, sluice::rate::per_second(10), 1);
    std::atomic<bool> done{false};
    std::thread::id ran_in{};
    REQUIRE(b.try_acquire().admitted);
    b.async_acquire(1, 1s, boost::asio::bind_executor(io2.get_executor(), [&](boost::system::error_code ec) {
        CHECK_FALSE(ec);
        ran_in = std::this_thread::get_id();
        done = true;
    }));
    std::thread t([&] { io2.run_for(30s); });   // returns when the waiter completes (its work ends)
    advance<clk>(io, 100ms);
    t.join();
    CHECK(done);
    CHECK(ran_in != std::this_thread::get_id());
    CHECK(ran_in != std::thread::id{});
}

namespace {

struct chain {
    sluice::token_bucket<clk>* bucket;
    int* count;
    int* depth;
    int* max_depth;
    int limit;

    void operator()(boost::system::error_code ec)
    {
        CHECK_FALSE(ec);
        ++*depth;
        *max_depth = std::max(*max_depth, *depth);
        if (++*count < limit)
            bucket->async_acquire(1, 0ns, *this);   // re-acquire from inside the completion
        --*depth;
    }
};

} // namespace

TEST_CASE("executor: 10,000 immediate re-acquires from inside completions do not recurse")
{
    boost::asio::io_context io;
    clk::set(t0);
    // Plenty of permits with time frozen: every request is granted at once.
    sluice::token_bucket<clk> b(io, sluice::rate::per_second(1e9), 100000);
    int count = 0, depth = 0, max_depth = 0;
    b.async_acquire(1, 0ns, chain{&b, &count, &depth, &max_depth, 10000});
    CHECK(count == 0);   // never inline
    drain(io);
    CHECK(count == 10000);
    CHECK(max_depth == 1);   // each completion ran from the event loop, not from the previous one
}

TEST_CASE("executor: immediate errors in a chain do not recurse either")
{
    boost::asio::io_context io;
    clk::set(t0);
    sluice::token_bucket<clk> b(io, sluice::rate::per_second(1), 1);
    REQUIRE(b.try_acquire().admitted);
    int count = 0, depth = 0, max_depth = 0;
    std::function<void(boost::system::error_code)> h = [&](boost::system::error_code ec) {
        CHECK(ec == sluice::error::timed_out);
        ++depth;
        max_depth = std::max(max_depth, depth);
        if (++count < 10000)
            b.async_acquire(1, 0ns, h);
        --depth;
    };
    b.async_acquire(1, 0ns, h);
    CHECK(count == 0);
    drain(io);
    CHECK(count == 10000);
    CHECK(max_depth == 1);
}

TEST_CASE("executor: a timer pass runs the handlers whose executor is running at once, and posts the others")
{
    // Running them in the pass (asio::dispatch) saves a post per waiter, the fanout's CPU;
    // a handler bound to another context is still only ever run by that context.
    boost::asio::io_context io, other;
    clk::set(t0);
    sluice::token_bucket<clk> b(io, sluice::rate::per_second(10), 1);
    REQUIRE(b.try_acquire().admitted);
    int ran = 0, ran_other = 0;
    for (int i = 0; i < 3; ++i)
        b.async_acquire(1, 1s, [&](boost::system::error_code ec) {
            CHECK_FALSE(ec);
            ++ran;
        });
    b.async_acquire(1, 1s, boost::asio::bind_executor(other, [&](boost::system::error_code ec) {
        CHECK_FALSE(ec);
        CHECK(other.get_executor().running_in_this_thread());
        ++ran_other;
    }));
    clk::advance(1s);
    io.restart();
    CHECK(io.run_one() == 1);   // the timer: releases all four, runs three
    CHECK(ran == 3);
    CHECK(ran_other == 0);
    CHECK(b.queued() == 0);
    drain(io);
    CHECK(ran_other == 0);
    drain(other);
    CHECK(ran_other == 1);
}

TEST_CASE("executor: a handler that throws in a timer pass leaves no other waiter of the pass behind")
{
    boost::asio::io_context io, other;
    clk::set(t0);
    sluice::token_bucket<clk> b(io, sluice::rate::per_second(10), 1);
    REQUIRE(b.try_acquire().admitted);
    int ran = 0;
    b.async_acquire(1, 1s, [&](boost::system::error_code) {
        ++ran;
        throw std::runtime_error("handler");
    });
    for (int i = 0; i < 2; ++i)
        b.async_acquire(1, 1s, [&](boost::system::error_code) { ++ran; });
    b.async_acquire(1, 1s, boost::asio::bind_executor(other, [&](boost::system::error_code) { ++ran; }));
    clk::advance(1s);
    io.restart();
    CHECK_THROWS_AS(io.run(), std::runtime_error);   // Asio passes it on from run()
    io.restart();
    drain(io);
    drain(other);
    CHECK(ran == 4);
    CHECK(b.queued() == 0);
    CHECK(b.stats().admitted == 4);
}
