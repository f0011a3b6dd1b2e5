// Completion tokens: callbacks, use_awaitable (acquire()), deferred, use_future, as_tuple and
// the awaitable operators.
#include "async_support.hpp"

#include <sluice/acquire_result.hpp>
#include <sluice/concurrency_limit.hpp>
#include <sluice/keyed.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/basic_waitable_timer.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/system/system_error.hpp>

#include <doctest/doctest.h>

#include <future>
#include <optional>
#include <thread>
#include <tuple>
#include <variant>

using namespace std::chrono_literals;
using clk = sluice::basic_manual_clock<struct tokens_tag>;
using sluice_test::advance;
using sluice_test::drain;
using sluice_test::ns;
using sluice_test::request;
namespace asio = boost::asio;

namespace {

constexpr auto t0 = std::chrono::seconds(1000);

} // namespace

TEST_CASE("tokens: use_awaitable: acquire() is true when granted, timed out past max_wait, closed after close()")
{
    asio::io_context io;
    clk::set(t0);
    sluice::token_bucket<clk> b(io, sluice::rate::per_second(10), 1);
    std::vector<std::pair<bool, std::int64_t>> results;
    std::optional<boost::system::error_code> thrown;
    bool timed_out = false, closed = false;
    bool finished = false;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        auto record = [&](sluice::acquire_result r) {
            results.emplace_back(static_cast<bool>(r), sluice_test::now_ns<clk>());
            if (!r) timed_out = r.timed_out() && r.error() == sluice::error::timed_out;
        };
        record(co_await b.acquire(250ms));      // at once
        record(co_await b.acquire(250ms));      // waits 100 ms
        record(co_await b.acquire(50ms));       // would wait 100 ms
        record(co_await b.acquire(1, 250ms));
        b.close();
        // Reported, not thrown.
        auto r = co_await b.acquire(250ms);
        thrown = r.error();
        closed = !r && r.closed() && !r.timed_out();
        finished = true;
    }, asio::detached);
    drain(io);
    for (int i = 0; i < 50 && !finished; ++i)
        advance<clk>(io, 10ms);
    REQUIRE(finished);
    REQUIRE(results.size() == 4);
    CHECK(results[0] == std::pair{true, ns(t0)});
    CHECK(results[1] == std::pair{true, ns(t0 + 100ms)});
    CHECK(results[2] == std::pair{false, ns(t0 + 100ms)});   // at once, nothing consumed
    CHECK(results[3] == std::pair{true, ns(t0 + 200ms)});
    CHECK(timed_out);
    CHECK(thrown == sluice::error::closed);
    CHECK(closed);
}

TEST_CASE("tokens: use_awaitable: a cancelled acquire() reports operation_aborted")
{
    asio::io_context io;
    clk::set(t0);
    sluice::token_bucket<clk> b(io, sluice::rate::per_second(10), 1);
    REQUIRE(b.try_acquire().admitted);
    asio::cancellation_signal sig;
    std::optional<boost::system::error_code> thrown;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        auto r = co_await b.acquire(1s);
        if (!r) thrown = r.error();
    }, asio::bind_cancellation_slot(sig.slot(), asio::detached));
    drain(io);
    CHECK(b.queued() == 1);
    sig.emit(asio::cancellation_type::terminal);
    drain(io);
    CHECK(thrown == asio::error::operation_aborted);
    CHECK(b.queued() == 0);
}

TEST_CASE("tokens: deferred: nothing starts until the deferred operation is launched")
{
    asio::io_context io;
    clk::set(t0);
    sluice::token_bucket<clk> b(io, sluice::rate::per_second(10), 1);
    auto op = b.async_acquire(1, 1s, asio::deferred);
    drain(io);
    CHECK(b.queued() == 0);
    CHECK(b.policy().check(1, ns(t0)).admitted);   // nothing consumed yet
    auto [o, h] = sluice_test::make_recorder<clk>();
    std::move(op)(h);
    CHECK_FALSE(o->done());
    drain(io);
    CHECK(o->ok());
    CHECK_FALSE(b.policy().check(1, ns(t0)).admitted);

    // Composed with deferred's continuation, and awaited in a coroutine.
    std::optional<boost::system::error_code> got;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        auto [ec] = co_await b.async_acquire(1, 1s, asio::as_tuple(asio::deferred));
        got = ec;
    }, asio::detached);
    drain(io);
    CHECK_FALSE(got);
    advance<clk>(io, 100ms);
    CHECK(got == boost::system::error_code{});
}

TEST_CASE("tokens: as_tuple with a callback and with use_awaitable")
{
    asio::io_context io;
    clk::set(t0);
    sluice::token_bucket<clk> b(io, sluice::rate::per_second(10), 1);
    std::optional<boost::system::error_code> cb;
    b.async_acquire(1, 0ns, asio::as_tuple([&](std::tuple<boost::system::error_code> t) { cb = std::get<0>(t); }));
    std::optional<boost::system::error_code> aw;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        auto [ec] = co_await b.async_acquire(1, 0ns, asio::as_tuple(asio::use_awaitable));
        aw = ec;   // an error, not an exception
    }, asio::detached);
    drain(io);
    CHECK(cb == boost::system::error_code{});
    CHECK(aw == sluice::error::timed_out);
}

TEST_CASE("tokens: plain use_awaitable on async_acquire throws the error")
{
    asio::io_context io;
    clk::set(t0);
    sluice::token_bucket<clk> b(io, sluice::rate::per_second(10), 1);
    std::optional<boost::system::error_code> thrown;
    bool ok = false;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        co_await b.async_acquire(1, 0ns, asio::use_awaitable);
        ok = true;
        try {
            co_await b.async_acquire(1, 0ns, asio::use_awaitable);
        } catch (const boost::system::system_error& e) {
            thrown = e.code();
        }
    }, asio::detached);
    drain(io);
    CHECK(ok);
    CHECK(thrown == sluice::error::timed_out);
}

TEST_CASE("tokens: awaitable operators: a timer that wins cancels the acquire, which is refunded")
{
    using namespace asio::experimental::awaitable_operators;
    asio::io_context io;
    clk::set(t0);
    sluice::token_bucket<clk> b(io, sluice::rate::per_second(1), 1);
    REQUIRE(b.try_acquire().admitted);   // next slot at +1 s
    std::optional<std::size_t> winner;
    std::int64_t at = 0;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        asio::basic_waitable_timer<clk> timer(co_await asio::this_coro::executor);
        timer.expires_after(500ms);
        auto r = co_await (b.async_acquire(1, sluice::wait_forever, asio::use_awaitable) ||
                           timer.async_wait(asio::use_awaitable));
        winner = r.index();
        at = sluice_test::now_ns<clk>();
    }, asio::detached);
    drain(io);
    CHECK(b.queued() == 1);
    CHECK(b.policy().empty_at() == ns(t0 + 1s));   // the waiter's slot was reserved
    advance<clk>(io, 500ms);
    REQUIRE(winner);
    CHECK(*winner == 1);   // the timer
    CHECK(at == ns(t0 + 500ms));
    CHECK(b.queued() == 0);
    CHECK(b.policy().empty_at() == ns(t0));   // refunded
    // A new request gets the refunded slot, +1 s, not +2 s.
    auto next = request<clk>(b, 1, 10s);
    advance<clk>(io, 499ms);
    CHECK_FALSE(next->done());
    advance<clk>(io, 1ms);
    CHECK(next->ok());
    CHECK(next->at == ns(t0 + 1s));
}

TEST_CASE("tokens: awaitable operators: the acquire wins over a later timer")
{
    using namespace asio::experimental::awaitable_operators;
    asio::io_context io;
    clk::set(t0);
    sluice::sliding_window<clk> w(io, 1, 1s);
    REQUIRE(w.try_acquire().admitted);
    std::optional<std::size_t> winner;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        asio::basic_waitable_timer<clk> timer(co_await asio::this_coro::executor);
        timer.expires_after(5s);
        auto r = co_await (w.async_acquire(1, sluice::wait_forever, asio::use_awaitable) ||
                           timer.async_wait(asio::use_awaitable));
        winner = r.index();
    }, asio::detached);
    drain(io);
    advance<clk>(io, 1s);
    REQUIRE(winner);
    CHECK(*winner == 0);
    CHECK_FALSE(w.try_acquire().admitted);   // consumed by the winner
}

TEST_CASE("tokens: use_future from a plain thread, the io_context run by another (real clock)")
{
    asio::io_context io;
    auto work = asio::make_work_guard(io);
    std::thread runner([&] { io.run_for(60s); });
    {
        sluice::token_bucket<> b(io, sluice::rate::per_second(100000), 10);
        for (int i = 0; i < 50; ++i) {
            std::future<void> f = b.async_acquire(1, 10s, asio::use_future);
            CHECK_NOTHROW(f.get());
        }
        // Errors come out of get() as system_error.
        std::future<void> bad = b.async_acquire(0, 10s, asio::use_future);
        try {
            bad.get();
            FAIL("no exception");
        } catch (const boost::system::system_error& e) {
            CHECK(e.code() == sluice::error::invalid_count);
        }
        sluice::token_bucket<> slow(io, sluice::rate::per_second(0.001), 1);
        REQUIRE(slow.try_acquire().admitted);
        std::future<void> late = slow.async_acquire(1, 1s, asio::use_future);
        try {
            late.get();
            FAIL("no exception");
        } catch (const boost::system::system_error& e) {
            CHECK(e.code() == sluice::error::timed_out);
        }
        // A pending future is answered by close().
        std::future<void> pending = slow.async_acquire(1, sluice::wait_forever, asio::use_future);
        CHECK(pending.wait_for(0s) == std::future_status::timeout);
        slow.close();
        try {
            pending.get();
            FAIL("no exception");
        } catch (const boost::system::system_error& e) {
            CHECK(e.code() == sluice::error::closed);
        }
    }
    work.reset();
    runner.join();
    CHECK(io.stopped());   // nothing was left pending
}

TEST_CASE("tokens: acquire() reports exceeds_limit, neither timed out nor closed")
{
    asio::io_context io;
    clk::set(t0);
    sluice::token_bucket<clk> b(io, sluice::rate::per_second(10), 2);
    std::optional<sluice::acquire_result> r;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> { r = co_await b.acquire(3, 1s); }, asio::detached);
    drain(io);
    REQUIRE(r);
    CHECK_FALSE(static_cast<bool>(*r));
    CHECK(r->error() == sluice::error::exceeds_limit);
    CHECK_FALSE(r->timed_out());
    CHECK_FALSE(r->closed());
    CHECK(b.try_acquire(2).admitted);   // nothing consumed
}

TEST_CASE("tokens: keyed acquire() reports granted, timed out, closed and cancelled")
{
    asio::io_context io;
    clk::set(t0);
    sluice::keyed<sluice::token_bucket<clk>> k(io, sluice::rate::per_second(10), 1);
    std::vector<sluice::acquire_result> results;
    asio::cancellation_signal sig;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        results.push_back(co_await k.acquire("a", 1s));     // granted at once
        results.push_back(co_await k.acquire("a", 50ms));   // would wait 100 ms
    }, asio::detached);
    drain(io);
    asio::co_spawn(io, [&]() -> asio::awaitable<void> { results.push_back(co_await k.acquire("a", 10s)); },
                   asio::bind_cancellation_slot(sig.slot(), asio::detached));
    drain(io);
    REQUIRE(results.size() == 2);
    CHECK(k.queued("a") == 1);
    sig.emit(asio::cancellation_type::terminal);
    drain(io);
    REQUIRE(results.size() == 3);
    CHECK(k.queued("a") == 0);
    asio::co_spawn(io, [&]() -> asio::awaitable<void> { results.push_back(co_await k.acquire("a", 10s)); },
                   asio::detached);
    drain(io);
    k.close();
    drain(io);
    REQUIRE(results.size() == 4);
    CHECK(static_cast<bool>(results[0]));
    CHECK_FALSE(results[0].error());
    CHECK_FALSE(static_cast<bool>(results[1]));
    CHECK(results[1].timed_out());
    CHECK(results[1].error() == sluice::error::timed_out);
    CHECK_FALSE(static_cast<bool>(results[2]));
    CHECK(results[2].error() == asio::error::operation_aborted);
    CHECK_FALSE(results[2].timed_out());
    CHECK_FALSE(results[2].closed());
    CHECK_FALSE(static_cast<bool>(results[3]));
    CHECK(results[3].closed());
}

TEST_CASE("tokens: concurrency_limit acquire() gives an empty permit that tells why")
{
    asio::io_context io;
    clk::set(t0);
    sluice::concurrency_limit<clk> cap(io, 1);
    using permit = sluice::concurrency_limit<clk>::permit;
    std::vector<permit> got;
    asio::cancellation_signal sig;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        got.push_back(co_await cap.acquire(1s));    // granted
        got.push_back(co_await cap.acquire(2, 1s)); // more than the limit
        got.push_back(co_await cap.acquire(1s));    // times out while queued
    }, asio::detached);
    drain(io);
    advance<clk>(io, 1s);
    drain(io);
    REQUIRE(got.size() == 3);
    asio::co_spawn(io, [&]() -> asio::awaitable<void> { got.push_back(co_await cap.acquire(10s)); },
                   asio::bind_cancellation_slot(sig.slot(), asio::detached));
    drain(io);
    sig.emit(asio::cancellation_type::terminal);
    drain(io);
    asio::co_spawn(io, [&]() -> asio::awaitable<void> { got.push_back(co_await cap.acquire(10s)); },
                   asio::detached);
    drain(io);
    cap.close();
    drain(io);
    REQUIRE(got.size() == 5);
    CHECK(static_cast<bool>(got[0]));
    CHECK_FALSE(got[0].error());
    CHECK_FALSE(static_cast<bool>(got[1]));
    CHECK(got[1].error() == sluice::error::exceeds_limit);
    CHECK_FALSE(static_cast<bool>(got[2]));
    CHECK(got[2].timed_out());
    CHECK(got[2].error() == sluice::error::timed_out);
    CHECK(got[3].error() == asio::error::operation_aborted);
    CHECK(got[4].closed());
    CHECK_FALSE(static_cast<bool>(got[4]));
}

namespace {

using awaitable_executor = asio::use_awaitable_t<>::executor_with_default<asio::any_io_executor>;

} // namespace

TEST_CASE("tokens: a limiter rebound to a use_awaitable executor needs no token")
{
    asio::io_context io;
    clk::set(t0);
    using bucket = sluice::token_bucket<clk>::rebind_executor<awaitable_executor>::other;
    static_assert(std::is_same_v<bucket, sluice::token_bucket<clk, awaitable_executor>>);
    static_assert(std::is_same_v<asio::use_awaitable_t<>::as_default_on_t<sluice::leaky_bucket<clk>>,
                                 sluice::leaky_bucket<clk, awaitable_executor>>);
    bucket b(io, sluice::rate::per_second(10), 1);
    std::vector<std::int64_t> granted;
    std::optional<boost::system::error_code> thrown;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        co_await b.async_acquire(1, 1s);
        granted.push_back(sluice_test::now_ns<clk>());
        co_await b.async_acquire(1, 1s);
        granted.push_back(sluice_test::now_ns<clk>());
        try {
            co_await b.async_acquire(1, 50ms);   // would wait 100 ms
        } catch (const boost::system::system_error& e) {
            thrown = e.code();
        }
    }, asio::detached);
    drain(io);
    advance<clk>(io, 100ms);
    drain(io);
    CHECK(granted == std::vector<std::int64_t>{ns(t0), ns(t0 + 100ms)});
    CHECK(thrown == sluice::error::timed_out);
}

TEST_CASE("tokens: keyed and concurrency_limit rebound to a use_awaitable executor need no token")
{
    asio::io_context io;
    clk::set(t0);
    using keyed = sluice::keyed<sluice::token_bucket<clk>>::rebind_executor<awaitable_executor>::other;
    static_assert(std::is_same_v<keyed::executor_type, awaitable_executor>);
    using cap_type = sluice::concurrency_limit<clk>::rebind_executor<awaitable_executor>::other;
    keyed k(io, sluice::rate::per_second(10), 1);
    cap_type cap(io, 1);
    std::vector<std::int64_t> granted;
    bool held = false;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        co_await k.async_acquire("a", 1, 1s);
        co_await k.async_acquire("a", 1, 1s);
        granted.push_back(sluice_test::now_ns<clk>());
        auto p = co_await cap.async_acquire(1, 1s);
        held = static_cast<bool>(p) && cap.in_use() == 1;
    }, asio::detached);
    drain(io);
    advance<clk>(io, 100ms);
    drain(io);
    CHECK(granted == std::vector<std::int64_t>{ns(t0 + 100ms)});
    CHECK(held);
    CHECK(cap.in_use() == 0);
}
