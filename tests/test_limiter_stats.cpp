// stats() of every asynchronous limiter: each request counted once under its outcome,
// the waits measured on the manual clock, try_acquire counted only when asked for.
#include "async_support.hpp"
#include "rng.hpp"

#include <sluice/all_of.hpp>
#include <sluice/concurrency_limit.hpp>
#include <sluice/fixed_window.hpp>
#include <sluice/keyed.hpp>
#include <sluice/leaky_bucket.hpp>
#include <sluice/limiter_stats.hpp>
#include <sluice/sliding_window.hpp>
#include <sluice/sliding_window_counter.hpp>
#include <sluice/token_bucket.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

using namespace std::chrono_literals;
using clk = sluice::basic_manual_clock<struct stats_tag>;
using sluice_test::advance;
using sluice_test::drain;
using sluice_test::make_recorder;
using sluice_test::outcome;

namespace {

// The five outcomes of the requests answered so far.
std::uint64_t answered(const sluice::limiter_stats& s)
{
    return s.admitted + s.refused + s.timed_out + s.cancelled + s.closed;
}

template <class Limiter>
std::shared_ptr<outcome> start(Limiter& l, std::uint64_t n, std::chrono::nanoseconds max_wait)
{
    auto [o, h] = make_recorder<clk>();
    l.async_acquire(n, max_wait, h);
    return o;
}

} // namespace

TEST_SUITE_BEGIN("async");

TEST_CASE("stats: every outcome of a token bucket's requests, and exact waits")
{
    boost::asio::io_context io;
    clk::set(clk::duration{0});
    sluice::token_bucket<clk> b(io, sluice::rate::per_second(10), 2, sluice::limiter_options{.max_queued = 2});

    CHECK(answered(b.stats()) == 0);
    auto a = start(b, 2, 0s);     // granted at once
    auto t = start(b, 1, 50ms);   // would wait 100 ms: timed out at once, nothing consumed
    auto x = start(b, 3, 1s);     // more than the burst
    auto w1 = start(b, 1, 1s);    // waits 100 ms
    auto w2 = start(b, 1, 1s);    // waits 200 ms
    auto f = start(b, 1, 1s);     // two already wait: queue full
    drain(io);
    REQUIRE(a->ok());
    CHECK(t->ec == sluice::error::timed_out);
    CHECK(f->ec == sluice::error::queue_full);
    CHECK(x->ec == sluice::error::exceeds_limit);

    auto s = b.stats();
    CHECK(s.admitted == 1);
    CHECK(s.waited == 0);
    CHECK(s.timed_out == 1);
    CHECK(s.refused == 2);
    CHECK(s.waiting == 2);
    CHECK(b.queued() == 2);
    CHECK(s.total_wait == 0ns);

    advance<clk>(io, 100ms);
    CHECK(w1->ok());
    advance<clk>(io, 100ms);
    CHECK(w2->ok());
    s = b.stats();
    CHECK(s.admitted == 3);
    CHECK(s.waited == 2);
    CHECK(s.waiting == 0);
    CHECK(s.total_wait == 300ms);
    CHECK(s.longest_wait == 200ms);

    // A cancelled waiter, and the one behind it moving up; then close.
    boost::asio::cancellation_signal sig;
    auto [c, ch] = make_recorder<clk>();
    b.async_acquire(2, 1s, boost::asio::bind_cancellation_slot(sig.slot(), ch));
    auto behind = start(b, 1, 1s);
    drain(io);
    CHECK(b.stats().waiting == 2);
    sig.emit(boost::asio::cancellation_type::terminal);
    drain(io);
    CHECK(c->ec == boost::asio::error::operation_aborted);
    s = b.stats();
    CHECK(s.cancelled == 1);
    CHECK(s.waiting == 1);
    b.close();
    auto late = start(b, 1, 1s);
    drain(io);
    CHECK(behind->ec == sluice::error::closed);
    CHECK(late->ec == sluice::error::closed);
    s = b.stats();
    CHECK(s.closed == 2);
    CHECK(s.waiting == 0);
    CHECK(answered(s) == 9);
    CHECK(s.admitted == 3);   // waits of refused, cancelled and closed requests are not counted
    CHECK(s.total_wait == 300ms);
}

TEST_CASE("stats: try_acquire is counted only with count_try_acquire")
{
    boost::asio::io_context io;
    clk::set(clk::duration{0});
    sluice::token_bucket<clk> quiet(io, sluice::rate::per_second(1), 1);
    CHECK(quiet.try_acquire());
    CHECK_FALSE(quiet.try_acquire());
    auto s = quiet.stats();
    CHECK(s.try_admitted == 0);
    CHECK(s.try_refused == 0);
    CHECK(answered(s) == 0);   // try_acquire is no request of the five outcomes

    sluice::limiter_options counting{.count_try_acquire = true};
    sluice::token_bucket<clk> b(io, sluice::rate::per_second(1), 1, counting);
    sluice::sliding_window<clk> w(io, 2, 1s, counting);
    sluice::concurrency_limit<clk> cap(io, 1, counting);
    CHECK(b.try_acquire());
    CHECK_FALSE(b.try_acquire());
    CHECK_FALSE(b.try_acquire());
    CHECK(w.try_acquire(2));
    CHECK_FALSE(w.try_acquire());
    {
        auto p = cap.try_acquire();
        CHECK(p);
        CHECK_FALSE(cap.try_acquire());
    }
    CHECK(cap.try_acquire());
    CHECK(b.stats().try_admitted == 1);
    CHECK(b.stats().try_refused == 2);
    CHECK(w.stats().try_admitted == 1);
    CHECK(w.stats().try_refused == 1);
    CHECK(cap.stats().try_admitted == 2);
    CHECK(cap.stats().try_refused == 1);
    CHECK(answered(cap.stats()) == 0);
}

TEST_CASE("stats: window policies retry the head; the wait is from queueing to the grant")
{
    boost::asio::io_context io;
    clk::set(clk::duration{5s});
    sluice::fixed_window<clk> fw(io, 1, 1s);
    sluice::sliding_window<clk> sw(io, 1, 1s);
    sluice::sliding_window_counter<clk> swc(io, 1, 1s);
    std::vector<std::shared_ptr<outcome>> out;
    for (int i = 0; i < 2; ++i) {
        out.push_back(start(fw, 1, 10s));
        out.push_back(start(sw, 1, 10s));
        out.push_back(start(swc, 1, 10s));
    }
    drain(io);
    advance<clk>(io, 400ms);
    auto t = start(sw, 1, 100ms);   // the head still waits 600 ms: this one cannot make it
    drain(io);
    for (int i = 0; i < 26; ++i)    // to 8 s: every window has let the second one through
        advance<clk>(io, 100ms);
    for (auto& o : out)
        CHECK(o->ok());
    for (auto s : {fw.stats(), sw.stats(), swc.stats()}) {
        CHECK(s.admitted == 2);
        CHECK(s.waited == 1);
        CHECK(s.waiting == 0);
        CHECK(s.longest_wait == s.total_wait);
        CHECK(s.total_wait >= 1s);   // the window of the first grant, at the least
        CHECK(s.total_wait <= 3s);
    }
    CHECK(fw.stats().total_wait == 1s);   // the next window starts at 6 s
    CHECK(sw.stats().total_wait == 1s);   // the log entry of 5 s leaves at 6 s
    CHECK(t->done());
    CHECK(sw.stats().timed_out == 1);
}

TEST_CASE("stats: concurrency_limit counts a wait that passed its max_wait as timed out")
{
    boost::asio::io_context io;
    clk::set(clk::duration{0});
    sluice::concurrency_limit<clk> cap(io, 1);
    auto held = cap.try_acquire();
    REQUIRE(held);
    int granted = 0;
    boost::system::error_code last;
    sluice::concurrency_limit<clk>::permit kept;
    cap.async_acquire(1, 50ms, [&](boost::system::error_code ec, auto) { last = ec; });
    drain(io);
    CHECK(cap.stats().waiting == 1);
    advance<clk>(io, 60ms);
    CHECK(last == sluice::error::timed_out);
    auto s = cap.stats();
    CHECK(s.timed_out == 1);
    CHECK(s.waiting == 0);

    cap.async_acquire(1, 1s, [&](boost::system::error_code ec, auto p) {
        last = ec;
        granted += !ec;
        kept = std::move(p);
    });
    drain(io);
    advance<clk>(io, 30ms);
    held = {};   // the slot goes to the waiter, 30 ms after it queued
    drain(io);
    CHECK(granted == 1);
    s = cap.stats();
    CHECK(s.admitted == 1);
    CHECK(s.waited == 1);
    CHECK(s.total_wait == 30ms);
    CHECK(cap.stats().try_admitted == 0);   // not asked for
}

TEST_CASE("stats: all_of and leaky_bucket count like the rest")
{
    boost::asio::io_context io;
    clk::set(clk::duration{0});
    sluice::leaky_bucket<clk> lb(io, sluice::rate::per_second(10));
    sluice::basic_all_of<clk, boost::asio::any_io_executor, sluice::policy::gcra, sluice::policy::fixed_counter> both(
        io, std::tuple{sluice::rate::per_second(10), 1}, std::tuple{5, 1s});
    std::vector<std::shared_ptr<outcome>> out;
    for (int i = 0; i < 3; ++i) {
        out.push_back(start(lb, 1, 1s));
        out.push_back(start(both, 1, 1s));
    }
    drain(io);
    advance<clk>(io, 100ms);
    advance<clk>(io, 100ms);
    for (auto& o : out)
        CHECK(o->ok());
    for (auto s : {lb.stats(), both.stats()}) {
        CHECK(s.admitted == 3);
        CHECK(s.waited == 2);
        CHECK(s.total_wait == 300ms);
        CHECK(s.longest_wait == 200ms);
    }
}

TEST_CASE("stats: acquire_blocking counts once per call, waits included")
{
    boost::asio::io_context io;
    clk::set(clk::duration{0});
    sluice::token_bucket<clk> b(io, sluice::rate::per_second(10), 1);
    CHECK_FALSE(b.acquire_blocking(1, 0s));
    CHECK(b.acquire_blocking(1, 10ms) == sluice::error::timed_out);
    CHECK(b.acquire_blocking(2) == sluice::error::exceeds_limit);

    // A thread blocks for the next slot (100 ms of manual time); it is seen waiting, then
    // the clock moves and it is granted with a wait of exactly 100 ms.
    std::atomic<bool> done{false};
    std::thread th([&] {
        CHECK_FALSE(b.acquire_blocking(1, 1s));
        done = true;
    });
    while (b.stats().waiting == 0)
        std::this_thread::yield();
    CHECK_FALSE(done.load());
    clk::advance(100ms);
    th.join();
    auto s = b.stats();
    CHECK(s.admitted == 2);
    CHECK(s.timed_out == 1);
    CHECK(s.refused == 1);
    CHECK(s.waited == 1);
    CHECK(s.total_wait == 100ms);
    CHECK(s.waiting == 0);
}

TEST_CASE("stats: random requests, cancellations and clock steps agree with the outcomes seen")
{
    // Every handler's outcome is tallied by the test; the limiter's counts must equal the
    // tally, and the waits must equal the sum of (completion - start) of the granted ones.
    sluice_test::rng rng{20261123};
    for (int round = 0; round < 20; ++round) {
        boost::asio::io_context io;
        clk::set(clk::duration{static_cast<std::int64_t>(rng() % 1'000'000'000)});
        sluice::token_bucket<clk> b(io, sluice::rate::per_second(1000), 5,
                                    sluice::limiter_options{.max_queued = 20, .coalesce = 0ns});
        struct req {
            std::shared_ptr<outcome> o;
            std::int64_t started;
            std::unique_ptr<boost::asio::cancellation_signal> sig;
        };
        std::vector<req> reqs;
        for (int step = 0; step < 400; ++step) {
            switch (rng() % 4) {
            case 0:
            case 1: {
                auto [o, h] = make_recorder<clk>();
                auto sig = std::make_unique<boost::asio::cancellation_signal>();
                std::uint64_t n = rng() % 7;   // 0 and 6 are refused
                b.async_acquire(n, std::chrono::milliseconds(rng() % 30), boost::asio::bind_cancellation_slot(sig->slot(), h));
                reqs.push_back({o, clk::now().time_since_epoch().count(), std::move(sig)});
                break;
            }
            case 2:
                if (!reqs.empty())
                    reqs[rng() % reqs.size()].sig->emit(boost::asio::cancellation_type::terminal);
                break;
            default:
                advance<clk>(io, std::chrono::microseconds(rng() % 3000));
            }
            drain(io);
        }
        if (round % 2)
            b.close();
        else
            advance<clk>(io, 1h);
        drain(io);

        sluice::limiter_stats want;
        std::int64_t max_wait = 0, total_wait = 0;
        for (auto& r : reqs) {
            REQUIRE(r.o->done());
            const auto& ec = *r.o->ec;
            if (!ec) {
                ++want.admitted;
                std::int64_t w = r.o->at - r.started;
                if (w > 0) {
                    ++want.waited;
                    total_wait += w;
                    max_wait = std::max(max_wait, w);
                }
            } else if (ec == sluice::error::timed_out) {
                ++want.timed_out;
            } else if (ec == boost::asio::error::operation_aborted) {
                ++want.cancelled;
            } else if (ec == sluice::error::closed) {
                ++want.closed;
            } else {
                ++want.refused;
            }
        }
        auto s = b.stats();
        CHECK(s.admitted == want.admitted);
        CHECK(s.refused == want.refused);
        CHECK(s.timed_out == want.timed_out);
        CHECK(s.cancelled == want.cancelled);
        CHECK(s.closed == want.closed);
        CHECK(s.waited == want.waited);
        CHECK(s.total_wait.count() == total_wait);
        CHECK(s.longest_wait.count() == max_wait);
        CHECK(s.waiting == 0);
    }
}

TEST_CASE("stats: a keyed limiter sums its keys, those evicted and the overflow included")
{
    boost::asio::io_context io;
    clk::set(clk::duration{0});
    sluice::keyed_options o;
    o.max_keys = 4;
    o.shards = 1;
    o.tick = 1ms;
    o.wheel_slots = 64;
    o.limiter.count_try_acquire = true;
    sluice::keyed<sluice::token_bucket<clk>> k(io, sluice::rate::per_second(10), 1, o);

    std::vector<std::shared_ptr<outcome>> out;
    auto req = [&](std::string key, std::chrono::nanoseconds max_wait) {
        auto [r, h] = make_recorder<clk>();
        k.async_acquire(key, 1, max_wait, h);
        out.push_back(r);
    };
    req("a", 1s);     // at once, on the key's policy
    req("a", 1s);     // waits 100 ms in a's queue
    req("a", 0s);     // timed out at once
    req("b", 1s);     // at once
    CHECK(k.try_acquire("c").admitted);   // counted by the shard
    CHECK_FALSE(k.try_acquire("c").admitted);
    CHECK_FALSE(k.try_acquire("a").admitted);   // counted by a's queue
    drain(io);
    auto s = k.stats();
    CHECK(s.admitted == 2);
    CHECK(s.timed_out == 1);
    CHECK(s.waiting == 1);
    CHECK(s.try_admitted == 1);
    CHECK(s.try_refused == 2);

    advance<clk>(io, 100ms);
    CHECK(out[1]->ok());
    // Everything idles out: a's queue is let go and the keys evicted; the counts stay.
    for (int i = 0; i < 300; ++i)
        advance<clk>(io, 10ms);
    k.sweep();
    auto st = k.stats();
    CHECK(st.keys.tracked == 0);
    CHECK(st.keys.waiting == 0);
    CHECK(st.admitted == 3);
    CHECK(st.waited == 1);
    CHECK(st.total_wait == 100ms);
    CHECK(st.timed_out == 1);
    CHECK(st.try_refused == 2);

    // Past max_keys, with every key busy: the overflow limiter answers, and is counted.
    for (std::string key : {"w", "x", "y", "z"})
        CHECK(k.try_acquire(key).admitted);
    req("over", 1s);
    drain(io);
    CHECK(k.stats().keys.overflow_requests == 1);
    CHECK(k.stats().admitted == 4);
    k.close();
    req("w", 1s);
    drain(io);
    CHECK(k.stats().closed == 1);
    CHECK(answered(k.stats()) == 6);
}

TEST_SUITE_END();
