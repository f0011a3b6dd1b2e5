// sluice::adaptive_rate as an Asio I/O object, on a manual clock: the bucket follows the
// controller, a pause holds requests at the gate, cancellation and close in the pause.
#include "async_support.hpp"

#include <sluice/adaptive_rate.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <atomic>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

using namespace std::chrono_literals;
using clk = sluice::basic_manual_clock<struct adaptive_tag>;
using sluice_test::advance;
using sluice_test::drain;
using sluice_test::outcome;

namespace {

constexpr auto t0 = std::chrono::seconds(1000);
const auto wall = std::chrono::system_clock::from_time_t(784111777); // Sun, 06 Nov 1994 08:49:37 GMT

sluice::adaptive_rate_options options(double initial)
{
    sluice::adaptive_rate_options o;
    o.initial = sluice::rate::per_second(initial);
    o.floor = sluice::rate::per_second(1);
    o.ceiling = sluice::rate::per_second(1000);
    return o;
}

template <class L>
std::shared_ptr<outcome> start(L& l, std::chrono::nanoseconds max_wait = sluice::wait_forever)
{
    auto [o, h] = sluice_test::make_recorder<clk>();
    l.async_acquire(1, max_wait, h);
    return o;
}

std::int64_t at(std::chrono::nanoseconds d) { return (t0 + d).count(); }

} // namespace

TEST_SUITE_BEGIN("adaptive_rate");

TEST_CASE("the bucket runs at the controller's rate, and follows it")
{
    boost::asio::io_context io;
    clk::set(t0);
    sluice::adaptive_rate<clk> l(io, options(10));
    CHECK(l.rate() == sluice::rate::per_second(10));
    CHECK(l.try_acquire().admitted);
    CHECK_FALSE(l.try_acquire().admitted);
    auto o = start(l);
    drain(io);
    CHECK_FALSE(o->done()); // never inside the call, and not before its slot
    advance<clk>(io, 99ms);
    CHECK_FALSE(o->done());
    advance<clk>(io, 1ms);
    REQUIRE(o->done());
    CHECK(o->ok());
    // A policy of 100/s found half full: 100/s.
    auto fb = l.on_response({200, "\"default\";q=100;w=1;sluice-burst=10", "\"default\";r=4;t=1", {}}, clk::now(), wall);
    CHECK(fb.rate_changed);
    CHECK(l.rate() == sluice::rate::per_second(100));
    CHECK(l.stats().adaptive.with_fields == 1);
}

TEST_CASE("a 429 with Retry-After holds every request until the pause ends")
{
    boost::asio::io_context io;
    clk::set(t0);
    sluice::adaptive_rate<clk> l(io, options(100));
    auto fb = l.on_response({429, {}, {}, "2"}, clk::now(), wall);
    CHECK(fb.paused);
    CHECK(l.paused());
    auto d = l.try_acquire();
    CHECK_FALSE(d.admitted);
    CHECK(d.retry_after == 2s);
    auto a = start(l), b = start(l);
    auto c = start(l, 1s); // the pause alone outlasts its max_wait
    drain(io);
    REQUIRE(c->done());
    CHECK(c->ec == sluice::error::timed_out);
    advance<clk>(io, 1999ms);
    CHECK_FALSE(a->done());
    CHECK_FALSE(b->done());
    advance<clk>(io, 1ms);
    REQUIRE(a->done());
    CHECK(a->ok());
    CHECK(a->at == at(2s));
    CHECK_FALSE(b->done()); // then spaced by the bucket: 1/70 s after (the rate dropped by 30 %)
    advance<clk>(io, 15ms);
    REQUIRE(b->done());
    CHECK(b->ok());
    CHECK_FALSE(l.paused());
}

TEST_CASE("a pause extended while requests wait: they wait for the new end")
{
    boost::asio::io_context io;
    clk::set(t0);
    sluice::adaptive_rate<clk> l(io, options(100));
    l.on_response({503, {}, {}, "1"}, clk::now(), wall);
    auto a = start(l);
    drain(io);
    advance<clk>(io, 500ms);
    l.on_response({429, {}, {}, "Sun, 06 Nov 1994 08:49:40 GMT"}, clk::now(), wall); // 3 s
    auto b = start(l);
    advance<clk>(io, 1s); // past the first end (+1 s)
    CHECK_FALSE(a->done());
    advance<clk>(io, 1999ms);
    CHECK_FALSE(a->done());
    CHECK_FALSE(b->done());
    advance<clk>(io, 1ms);
    // Held requests leave the gate in no particular order, one per interval of the bucket
    // (49/s after two decreases).
    CHECK(a->done() + b->done() == 1);
    advance<clk>(io, 21ms);
    REQUIRE(a->done());
    REQUIRE(b->done());
    CHECK(std::min(a->at, b->at) == at(3500ms));
    CHECK(std::max(a->at, b->at) >= at(3520ms));
}

TEST_CASE("a request waiting in the bucket when a pause begins gives up its permit and waits")
{
    boost::asio::io_context io;
    clk::set(t0);
    sluice::adaptive_rate<clk> l(io, options(10));
    CHECK(l.try_acquire().admitted);
    auto a = start(l); // its slot: +100 ms
    drain(io);
    advance<clk>(io, 50ms);
    l.on_response({429, {}, {}, "1"}, clk::now(), wall);
    advance<clk>(io, 50ms);
    CHECK_FALSE(a->done());
    advance<clk>(io, 950ms); // the pause ends at +1050 ms; then the bucket
    advance<clk>(io, 200ms);
    REQUIRE(a->done());
    CHECK(a->ok());
    CHECK(a->at >= at(1050ms));
}

TEST_CASE("cancellation and close in the pause")
{
    using ct = boost::asio::cancellation_type;
    for (ct type : {ct::terminal, ct::partial, ct::total}) {
        boost::asio::io_context io;
        clk::set(t0);
        sluice::adaptive_rate<clk> l(io, options(100));
        l.on_response({429, {}, {}, "10"}, clk::now(), wall);
        boost::asio::cancellation_signal sig;
        auto [o, h] = sluice_test::make_recorder<clk>();
        l.async_acquire(1, sluice::wait_forever, boost::asio::bind_cancellation_slot(sig.slot(), h));
        auto other = start(l);
        drain(io);
        sig.emit(type);
        drain(io);
        REQUIRE(o->done());
        CHECK(o->ec == boost::asio::error::operation_aborted);
        CHECK_FALSE(other->done());
        l.close();
        drain(io);
        REQUIRE(other->done());
        CHECK(other->ec == sluice::error::closed);
        auto late = start(l);
        drain(io);
        REQUIRE(late->done());
        CHECK(late->ec == sluice::error::closed);
    }
}

TEST_CASE("destroying the limiter completes waiters in the pause with closed")
{
    boost::asio::io_context io;
    clk::set(t0);
    std::shared_ptr<outcome> o;
    {
        sluice::adaptive_rate<clk> l(io, options(100));
        l.on_response({429, {}, {}, "10"}, clk::now(), wall);
        o = start(l);
        drain(io);
    }
    drain(io);
    REQUIRE(o->done());
    CHECK(o->ec == sluice::error::closed);
}

TEST_SUITE_END();

TEST_CASE("threads: acquires on four threads while another feeds refusals and pauses" * doctest::timeout(60))
{
    // Real time, short pauses: what is checked is that every request completes exactly once
    // and without error (and, under TSan, without a race), not the timing.
    using real = sluice::adaptive_rate<>;
    boost::asio::io_context io;
    sluice::adaptive_rate_options o;
    o.initial = sluice::rate::per_second(20000);
    o.floor = sluice::rate::per_second(1000);
    o.ceiling = sluice::rate::per_second(50000);
    real l(io, o);
    constexpr int total = 4000;
    std::atomic<int> ok{0}, failed{0};
    for (int i = 0; i < total; ++i)
        l.async_acquire(1, sluice::wait_forever, [&](boost::system::error_code ec) { (ec ? failed : ok).fetch_add(1); });
    std::atomic<bool> done{false};
    std::thread feeder([&] {
        for (int i = 0; i < 3000 && !done.load(); ++i) {   // bounded: a feeder that never stops could hold the gate shut as long as it runs
            sluice::server_response r{i % 3 == 0 ? 429u : 200u, {}, {}, std::chrono::milliseconds(1)};
            l.on_response(r, real::clock_type::now());
            (void)l.try_acquire();
            std::this_thread::yield();
        }
    });
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) threads.emplace_back([&] { io.run(); });
    for (auto& t : threads) t.join();
    done.store(true);
    feeder.join();
    CHECK(ok.load() == total);
    CHECK(failed.load() == 0);
}

TEST_CASE("acquire() reports granted, timed out by a pause, cancelled and closed without throwing")
{
    boost::asio::io_context io;
    clk::set(t0);
    sluice::adaptive_rate<clk> l(io, options(10));
    std::vector<sluice::acquire_result> results;
    boost::asio::cancellation_signal sig;
    boost::asio::co_spawn(io, [&]() -> boost::asio::awaitable<void> {
        results.push_back(co_await l.acquire(1s));   // granted at once
    }, boost::asio::detached);
    drain(io);
    l.on_response({429, {}, {}, "2"}, clk::now(), wall); // a 2 s pause
    boost::asio::co_spawn(io, [&]() -> boost::asio::awaitable<void> {
        results.push_back(co_await l.acquire(1s));   // the pause outlasts 1 s
    }, boost::asio::detached);
    drain(io);
    boost::asio::co_spawn(io, [&]() -> boost::asio::awaitable<void> { results.push_back(co_await l.acquire()); },
                          boost::asio::bind_cancellation_slot(sig.slot(), boost::asio::detached));
    drain(io);
    REQUIRE(results.size() == 2);
    sig.emit(boost::asio::cancellation_type::terminal);
    drain(io);
    REQUIRE(results.size() == 3);
    boost::asio::co_spawn(io, [&]() -> boost::asio::awaitable<void> { results.push_back(co_await l.acquire()); },
                          boost::asio::detached);
    drain(io);
    l.close();
    drain(io);
    REQUIRE(results.size() == 4);
    CHECK(static_cast<bool>(results[0]));
    CHECK_FALSE(static_cast<bool>(results[1]));
    CHECK(results[1].timed_out());
    CHECK(results[2].error() == boost::asio::error::operation_aborted);
    CHECK_FALSE(results[2].closed());
    CHECK(results[3].closed());
    CHECK_FALSE(results[3].timed_out());
}
