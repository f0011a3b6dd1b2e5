// sluice::shm limiters as Asio I/O objects on the manual clock: waiting, the order of
// grants across limiters (each its own wait engine, as in two processes) on one segment,
// cancellation and its refund, and threads deciding on one segment through two mappings.
#include <sluice/shm.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "async_support.hpp"
#include "shm_support.hpp"

using namespace std::chrono_literals;
using clk = sluice::basic_manual_clock<struct shm_async_tag>;
using sluice_test::advance;
using sluice_test::cancellable;
using sluice_test::drain;
using sluice_test::ns;
using sluice_test::outcome;
using sluice_test::request;
using sluice_test::shm_name;

namespace {

constexpr auto t0 = std::chrono::seconds(1000);
using ct = boost::asio::cancellation_type;
using bucket = sluice::shm::token_bucket<clk>;

void run_until(boost::asio::io_context& io, const std::shared_ptr<outcome>& o, std::chrono::nanoseconds limit)
{
    auto end = sluice_test::now_ns<clk>() + limit.count();
    while (!o->done() && sluice_test::now_ns<clk>() < end) advance<clk>(io, 1ms);
}

} // namespace

TEST_SUITE_BEGIN("shm");

TEST_CASE("shm::token_bucket: waiters get their slots; a cancelled one gives its slot back, later ones move up")
{
    for (ct type : {ct::terminal, ct::partial, ct::total}) {
        for (int victim = 0; victim < 3; ++victim) {
            CAPTURE(victim);
            shm_name name("cancel");
            boost::asio::io_context io;
            clk::set(t0);
            bucket l(io, name.str(), sluice::rate::per_second(10), 1);
            REQUIRE(l.try_acquire().admitted);
            boost::asio::cancellation_signal sig[3];
            std::shared_ptr<outcome> q[3];
            for (int i = 0; i < 3; ++i) q[i] = cancellable<clk>(l, sig[i]);   // +100, +200, +300 ms
            drain(io);
            CHECK(l.policy().empty_at() == ns(t0 + 300ms));
            advance<clk>(io, 50ms);
            sig[victim].emit(type);
            drain(io);
            REQUIRE(q[victim]->done());
            CHECK(q[victim]->ec == boost::asio::error::operation_aborted);
            // Exactly as if the victim had never asked.
            CHECK(l.policy().empty_at() == ns(t0 + 200ms));
            std::int64_t expect = ns(t0 + 100ms);
            for (int i = 0; i < 3; ++i) {
                if (i == victim) continue;
                run_until(io, q[i], 1s);
                REQUIRE(q[i]->ok());
                CHECK(q[i]->at == expect);
                expect += ns(100ms);
            }
            auto st = l.stats();   // the waiters (try_acquire is not counted by default)
            CHECK(st.admitted == 2);
            CHECK(st.cancelled == 1);
        }
    }
}

TEST_CASE("shm: two limiters on one segment (two processes' engines) serve in the order of reservations")
{
    shm_name name("order");
    boost::asio::io_context io;
    clk::set(t0);
    bucket a(io, name.str(), sluice::rate::per_second(10), 1);
    bucket b(io, name.str(), sluice::rate::per_second(10), 1);
    REQUIRE(a.try_acquire().admitted);
    CHECK_FALSE(b.try_acquire().admitted);
    auto qa = request<clk>(a, 1, 10s);   // +100 ms
    auto qb = request<clk>(b, 1, 10s);   // +200 ms
    auto qa2 = request<clk>(a, 1, 10s);  // +300 ms
    drain(io);
    run_until(io, qa, 1s);
    CHECK(qa->ok());
    CHECK(qa->at == ns(t0 + 100ms));
    CHECK_FALSE(qb->done());
    run_until(io, qb, 1s);
    CHECK(qb->at == ns(t0 + 200ms));
    CHECK_FALSE(qa2->done());
    run_until(io, qa2, 1s);
    CHECK(qa2->at == ns(t0 + 300ms));
    // A timeout is predicted against every reservation of both.
    auto qb2 = request<clk>(b, 1, 10s);   // +400 ms
    auto late = request<clk>(a, 1, 150ms);   // would be +500 ms: beyond its 150 ms
    drain(io);
    CHECK(late->ec == sluice::error::timed_out);
    run_until(io, qb2, 1s);
    CHECK(qb2->at == ns(t0 + 400ms));
}

TEST_CASE("shm: a cancellation refunds only when no other engine reserved after it (never admits twice)")
{
    shm_name name("refund");
    boost::asio::io_context io;
    clk::set(t0);
    bucket a(io, name.str(), sluice::rate::per_second(10), 1);
    bucket b(io, name.str(), sluice::rate::per_second(10), 1);
    REQUIRE(a.try_acquire().admitted);
    boost::asio::cancellation_signal sig;
    auto qa = cancellable<clk>(a, sig);           // +100 ms
    auto qb = request<clk>(b, 1, 10s);       // +200 ms
    drain(io);
    sig.emit(ct::terminal);
    drain(io);
    CHECK(qa->ec == boost::asio::error::operation_aborted);
    // b's waiter keeps its slot: a refund would let a new request take +200 ms too.
    CHECK(a.policy().empty_at() == ns(t0 + 200ms));
    CHECK(b.try_acquire().admitted == false);
    run_until(io, qb, 1s);
    CHECK(qb->at == ns(t0 + 200ms));
    // The last reservation of the segment is refunded exactly.
    boost::asio::cancellation_signal sig2;
    auto qa2 = cancellable<clk>(a, sig2);         // +300 ms
    drain(io);
    CHECK(a.policy().empty_at() == ns(t0 + 300ms));
    sig2.emit(ct::total);
    drain(io);
    CHECK(qa2->ec == boost::asio::error::operation_aborted);
    CHECK(a.policy().empty_at() == ns(t0 + 200ms));
    advance<clk>(io, 100ms);
    CHECK(b.try_acquire().admitted);
}

// The refund rule looks between the cancelled reservation and the process's last one (an
// earlier rule looked only at the last: a's second waiter moved up onto b's slot, two
// grants at one instant from a bucket of one).
TEST_CASE("shm: a cancelled reservation with another engine's between it and a later one of its own keeps its slot")
{
    shm_name name("between");
    boost::asio::io_context io;
    clk::set(t0);
    bucket a(io, name.str(), sluice::rate::per_second(10), 1);
    bucket b(io, name.str(), sluice::rate::per_second(10), 1);
    REQUIRE(a.try_acquire().admitted);
    boost::asio::cancellation_signal sig, sig2;
    auto a1 = cancellable<clk>(a, sig);     // +100 ms
    auto b1 = request<clk>(b, 1, 10s);      // +200 ms
    auto a2 = cancellable<clk>(a, sig2);    // +300 ms
    auto a3 = request<clk>(a, 1, 10s);      // +400 ms
    drain(io);
    sig.emit(ct::terminal);
    drain(io);
    CHECK(a1->ec == boost::asio::error::operation_aborted);
    CHECK(a.policy().empty_at() == ns(t0 + 400ms));
    sig2.emit(ct::terminal);
    drain(io);
    CHECK(a2->ec == boost::asio::error::operation_aborted);
    CHECK(a.policy().empty_at() == ns(t0 + 300ms));
    run_until(io, b1, 1s);
    run_until(io, a3, 1s);
    CHECK(b1->at == ns(t0 + 200ms));
    CHECK(a3->at == ns(t0 + 300ms));
}

TEST_CASE("shm: threads on two mappings of one segment admit exactly what the bucket holds")
{
    shm_name name("threads");
    boost::asio::io_context io;
    clk::set(t0);
    bucket a(io, name.str(), sluice::rate::per_second(1000), 2000);
    bucket b(io, name.str(), sluice::rate::per_second(1000), 2000);
    std::atomic<int> admitted{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < 4; ++i) {
        threads.emplace_back([&, i] {
            bucket& l = i % 2 ? a : b;
            for (int k = 0; k < 1000; ++k)
                if (l.try_acquire().admitted) admitted.fetch_add(1);
        });
    }
    for (auto& t : threads) t.join();
    CHECK(admitted.load() == 2000);
    clk::advance(500ms);
    int more = 0;
    while (a.try_acquire().admitted) ++more;
    CHECK(more == 500);
}

TEST_CASE("shm::leaky_bucket: admissions one interval apart across limiters")
{
    shm_name name("leaky");
    boost::asio::io_context io;
    clk::set(t0);
    sluice::shm::leaky_bucket<clk> a(io, name.str(), sluice::rate::per_second(100), 0ns);
    sluice::shm::leaky_bucket<clk> b(io, name.str(), sluice::rate::per_second(100), 0ns);
    CHECK(a.try_acquire().admitted);
    CHECK_FALSE(b.try_acquire().admitted);
    auto q = request<clk>(b, 1, 1s);
    drain(io);
    run_until(io, q, 1s);
    CHECK(q->at == ns(t0 + 10ms));
    CHECK(b.slack() == 0ns);
    CHECK(a.burst() == 1);
    // Without template arguments: default_clock, the default slack.
    shm_name other("leaky-ctad");
    sluice::shm::leaky_bucket c(io, other.str(), sluice::rate::per_second(100));
    static_assert(std::is_same_v<decltype(c), sluice::shm::leaky_bucket<>>);
    CHECK(c.slack() == sluice::leaky_bucket<>::default_slack);
}

TEST_SUITE_END();
