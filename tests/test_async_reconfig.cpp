// Reconfiguration with waiters queued (set_rate, set_limit) on the manual clock, and
// acquire_blocking from plain threads on the real clock.
#include "async_support.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <optional>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using clk = sluice::basic_manual_clock<struct reconfig_tag>;
using sluice_test::advance;
using sluice_test::drain;
using sluice_test::ns;
using sluice_test::request;

namespace {

constexpr auto t0 = std::chrono::seconds(1000);

// Advances in 1 ms steps until `o` completes (at most `limit`).
template <class Clock = clk>
void run_until(boost::asio::io_context& io, const sluice_test::outcome& o, std::chrono::nanoseconds limit = 60s)
{
    auto end = sluice_test::now_ns<Clock>() + limit.count();
    while (!o.done() && sluice_test::now_ns<Clock>() < end)
        advance<Clock>(io, 1ms);
}

} // namespace

// ---- 9. set_rate ---------------------------------------------------------------------

TEST_CASE_TEMPLATE("set_rate: 10 waiters at 1/s, set_rate(10/s): they complete 100 ms apart from then", F,
                   sluice_test::token_bucket_of<clk>, sluice_test::leaky_bucket_of<clk>)
{
    boost::asio::io_context io;
    clk::set(t0);
    auto l = F::make(io, 1);
    REQUIRE(l.try_acquire().admitted);
    sluice_test::outcomes q;
    for (int i = 0; i < 10; ++i)
        q.push_back(request<clk>(l, 1, 100s));   // +1 s .. +10 s
    drain(io);
    advance<clk>(io, 10ms);
    l.set_rate(sluice::rate::per_second(10));
    drain(io);
    for (int i = 0; i < 10; ++i) {
        run_until(io, *q[i]);
        REQUIRE(q[i]->ok());
        // The debt of (i + 1) s - 10 ms is now repaid at the new rate, from now.
        CHECK(q[i]->at == ns(t0 + 10ms + ((i + 1) * 1000ms - 10ms) / 10));
    }
    CHECK(l.queued() == 0);
}

TEST_CASE_TEMPLATE("set_rate: mid-way, and slower: every waiter is rescheduled, none is lost", F,
                   sluice_test::token_bucket_of<clk>, sluice_test::leaky_bucket_of<clk>)
{
    boost::asio::io_context io;
    clk::set(t0);
    auto l = F::make(io, 1);
    REQUIRE(l.try_acquire().admitted);
    sluice_test::outcomes q;
    for (int i = 0; i < 6; ++i)
        q.push_back(request<clk>(l, 1, 1000s));   // +1 s .. +6 s
    advance<clk>(io, 2500ms);
    CHECK(q[0]->ok());
    CHECK(q[1]->ok());
    CHECK_FALSE(q[2]->done());
    l.set_rate(sluice::rate::per_second(0.5));   // twice as slow: the remaining debt doubles
    drain(io);
    for (int i = 2; i < 6; ++i) {
        run_until(io, *q[i], 100s);
        REQUIRE(q[i]->ok());
        // Was +((i + 1) s), 2.5 s into it: 2.5 s + 2 * ((i + 1) s - 2.5 s).
        CHECK(q[i]->at == ns(t0 + 2500ms + 2 * ((i + 1) * 1000ms - 2500ms)));
    }
}

TEST_CASE("set_rate: refunds of cancelled waiters not yet passed on are rescaled too")
{
    boost::asio::io_context io;
    clk::set(t0);
    sluice::token_bucket<clk> b(io, sluice::rate::per_second(1), 1);
    REQUIRE(b.try_acquire().admitted);
    boost::asio::cancellation_signal sig;
    auto w0 = request<clk>(b, 1, 100s);   // +1 s
    auto [w1, h1] = sluice_test::make_recorder<clk>();
    b.async_acquire(1, 100s, boost::asio::bind_cancellation_slot(sig.slot(), h1));   // +2 s
    auto w2 = request<clk>(b, 1, 100s);   // +3 s
    auto w3 = request<clk>(b, 1, 100s);   // +4 s
    sig.emit(boost::asio::cancellation_type::terminal);   // w2, w3 move up by 1 s
    drain(io);
    CHECK(w1->ec == boost::asio::error::operation_aborted);
    b.set_rate(sluice::rate::per_second(10));   // ... by 100 ms at the new rate
    drain(io);
    run_until(io, *w3);
    CHECK(w0->at == ns(t0 + 100ms));
    CHECK(w2->at == ns(t0 + 200ms));
    CHECK(w3->at == ns(t0 + 300ms));
}

TEST_CASE("set_burst with waiters queued keeps them and their order")
{
    boost::asio::io_context io;
    clk::set(t0);
    sluice::token_bucket<clk> b(io, sluice::rate::per_second(10), 1);
    REQUIRE(b.try_acquire().admitted);
    sluice_test::outcomes q;
    for (int i = 0; i < 3; ++i)
        q.push_back(request<clk>(b, 1, 100s));
    b.set_burst(5);
    drain(io);
    for (int i = 0; i < 3; ++i) {
        run_until(io, *q[i]);
        REQUIRE(q[i]->ok());
        CHECK(q[i]->at == ns(t0 + 100ms * (i + 1)));
    }
}

// ---- 9. set_limit ---------------------------------------------------------------------

TEST_CASE_TEMPLATE("set_limit: raising the limit releases the waiters that now fit", F,
                   sluice_test::fixed_window_of<clk>, sluice_test::sliding_window_of<clk>,
                   sluice_test::sliding_window_counter_of<clk>)
{
    boost::asio::io_context io;
    clk::set(t0);
    auto l = F::make(io, 1);
    REQUIRE(l.try_acquire().admitted);
    sluice_test::outcomes q;
    for (int i = 0; i < 4; ++i)
        q.push_back(request<clk>(l, 1, 100s));
    advance<clk>(io, 10ms);
    for (auto& o : q)
        CHECK_FALSE(o->done());
    F::set_limit(l, 4);
    drain(io);
    for (int i = 0; i < 3; ++i) {   // 1 + 3 fill the current window
        REQUIRE(q[i]->ok());
        CHECK(q[i]->at == ns(t0 + 10ms));
    }
    CHECK_FALSE(q[3]->done());
    run_until(io, *q[3], 5s);
    CHECK(q[3]->ok());
}

TEST_CASE_TEMPLATE("set_limit: lowering the limit spaces the waiters out, none is lost", F,
                   sluice_test::fixed_window_of<clk>, sluice_test::sliding_window_of<clk>)
{
    boost::asio::io_context io;
    clk::set(t0);
    auto l = F::make(io, 4);
    REQUIRE(l.try_acquire(4).admitted);
    sluice_test::outcomes q;
    for (int i = 0; i < 4; ++i)
        q.push_back(request<clk>(l, 1, 100s));
    drain(io);
    F::set_limit(l, 1);
    drain(io);
    for (int i = 0; i < 4; ++i) {
        run_until(io, *q[i], 10s);
        REQUIRE(q[i]->ok());
        CHECK(q[i]->at == ns(t0 + std::chrono::seconds(i + 1)));   // one a window
    }
}

TEST_CASE("set_limit: a sliding_window_counter waiter survives lowering the limit")
{
    boost::asio::io_context io;
    clk::set(t0);
    sluice::sliding_window_counter<clk> l(io, 4, 1s);
    REQUIRE(l.try_acquire(4).admitted);
    sluice_test::outcomes q;
    for (int i = 0; i < 4; ++i)
        q.push_back(request<clk>(l, 1, 100s));
    l.set_limit(1);
    drain(io);
    for (int i = 0; i < 4; ++i) {
        run_until(io, *q[i], 20s);
        CHECK(q[i]->ok());
    }
    CHECK(l.queued() == 0);
}

TEST_CASE("all_of: update<I>() with waiters queued reschedules them")
{
    boost::asio::io_context io;
    clk::set(t0);
    sluice::basic_all_of<clk, boost::asio::any_io_executor, sluice::policy::gcra, sluice::policy::fixed_counter> l(
        io, std::tuple{sluice::rate::per_second(100), 100}, std::tuple{1, 1s});
    REQUIRE(l.try_acquire().admitted);
    auto a = request<clk>(l, 1, 100s);
    auto b = request<clk>(l, 1, 100s);
    advance<clk>(io, 10ms);
    l.update<1>([](sluice::policy::fixed_counter& p, std::int64_t) { p.set_limit(3); });
    drain(io);
    CHECK(a->ok());
    CHECK(b->ok());
    CHECK(a->at == ns(t0 + 10ms));
}

// ---- 11. acquire_blocking (real clock) ------------------------------------------------

TEST_CASE("acquire_blocking: from plain threads, with a generous rate")
{
    boost::asio::io_context io;   // never run: blocking acquires need no event loop
    sluice::token_bucket<> b(io, sluice::rate::per_second(1e6), 10);
    std::atomic<int> ok{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&] {
            for (int i = 0; i < 250; ++i)
                if (!b.acquire_blocking(1, 10s))
                    ++ok;
        });
    for (auto& t : threads)
        t.join();
    CHECK(ok == 1000);
}

TEST_CASE("acquire_blocking: a wait beyond max_wait fails at once with timed_out")
{
    boost::asio::io_context io;
    sluice::token_bucket<> b(io, sluice::rate::per(1, std::chrono::hours(1)), 1);
    CHECK_FALSE(b.acquire_blocking(1, 1s));   // available
    auto start = std::chrono::steady_clock::now();
    auto ec = b.acquire_blocking(1, 1s);
    auto took = std::chrono::steady_clock::now() - start;
    CHECK(ec == sluice::error::timed_out);
    CHECK(took < 500ms);   // did not wait
    CHECK(b.acquire_blocking(0) == sluice::error::invalid_count);
    CHECK(b.acquire_blocking(2) == sluice::error::exceeds_limit);

    sluice::fixed_window<> w(io, 1, std::chrono::hours(1));
    CHECK_FALSE(w.acquire_blocking(1, 1s));
    start = std::chrono::steady_clock::now();
    CHECK(w.acquire_blocking(1, 1s) == sluice::error::timed_out);
    CHECK(std::chrono::steady_clock::now() - start < 500ms);
}

TEST_CASE("acquire_blocking: close() wakes a blocked thread with closed and refunds its reservation")
{
    boost::asio::io_context io;
    sluice::token_bucket<> b(io, sluice::rate::per(1, std::chrono::hours(1)), 1);
    REQUIRE(b.try_acquire().admitted);
    const std::int64_t empty = b.policy().empty_at();
    std::optional<boost::system::error_code> result;
    std::thread t([&] { result = b.acquire_blocking(1); });
    // Wait (bounded) until the thread has reserved its slot, i.e. is blocked on it.
    auto deadline = std::chrono::steady_clock::now() + 20s;
    while (b.policy().empty_at() == empty && std::chrono::steady_clock::now() < deadline)
        std::this_thread::yield();
    CHECK(b.policy().empty_at() != empty);
    b.close();
    t.join();
    CHECK(result == sluice::error::closed);
    CHECK(b.policy().empty_at() < empty + std::chrono::nanoseconds(1h).count());   // refunded
    CHECK(b.acquire_blocking(1, 1s) == sluice::error::closed);
}

TEST_CASE("acquire_blocking: close() wakes a thread blocked on a window limiter")
{
    boost::asio::io_context io;
    sluice::sliding_window<> w(io, 1, std::chrono::hours(1));
    REQUIRE(w.try_acquire().admitted);
    std::optional<boost::system::error_code> result;
    std::atomic<bool> started{false};
    std::thread t([&] {
        started = true;
        result = w.acquire_blocking(1);
    });
    while (!started)
        std::this_thread::yield();
    w.close();   // before or during the wait: either way the answer is closed
    t.join();
    CHECK(result == sluice::error::closed);
}

TEST_CASE("acquire_blocking: a sliding window is respected by blocking callers")
{
    boost::asio::io_context io;
    sluice::sliding_window<> w(io, 100, 100ms);
    auto start = std::chrono::steady_clock::now();
    int ok = 0;
    for (int i = 0; i < 150; ++i)
        if (!w.acquire_blocking(1, 10s))
            ++ok;
    auto took = std::chrono::steady_clock::now() - start;
    CHECK(ok == 150);
    CHECK(took >= 100ms);   // the 101st had to wait for the first to leave the window
    CHECK(took < 20s);
}
