// Max wait (fail fast, nothing consumed, counted behind the queue) and bad input, on the
// manual clock.
#include "async_support.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <doctest/doctest.h>

#include <optional>

using namespace std::chrono_literals;
using clk = sluice::basic_manual_clock<struct timeout_tag>;
using sluice_test::advance;
using sluice_test::drain;
using sluice_test::ns;
using sluice_test::request;

namespace {

constexpr auto t0 = std::chrono::seconds(1000);   // window-aligned start

void reset_clock() { clk::set(t0); }

} // namespace

// ---- 1. max wait: token_bucket / leaky_bucket ------------------------------------------

TEST_CASE_TEMPLATE("max_wait: a GCRA request fails fast, counted behind the queue, consuming nothing", F,
                   sluice_test::token_bucket_of<clk>, sluice_test::leaky_bucket_of<clk>)
{
    boost::asio::io_context io;
    reset_clock();
    auto l = F::make(io, 10);            // one permit every 100 ms, burst 1
    REQUIRE(l.try_acquire(1).admitted);   // empty now: next slot at +100 ms

    // Three queued: slots +100, +200, +300 ms.
    sluice_test::outcomes q;
    for (int i = 0; i < 3; ++i)
        q.push_back(request<clk>(l, 1, 1s));

    // Alone, this would wait 100 ms; behind three it would wait 400 ms > 350 ms.
    auto late = request<clk>(l, 1, 350ms);
    CHECK_FALSE(late->done());   // not inline
    CHECK(l.queued() == 3);
    drain(io);
    REQUIRE(late->done());
    CHECK(late->ec == sluice::error::timed_out);
    CHECK(late->at == ns(t0));   // at once, without waiting for time to pass

    // Nothing consumed: the next request gets the fourth slot, +400 ms, and a wait of
    // exactly max_wait is allowed.
    auto next = request<clk>(l, 1, 400ms);
    advance<clk>(io, 399ms);
    CHECK(q[2]->ok());
    CHECK_FALSE(next->done());
    advance<clk>(io, 1ms);
    REQUIRE(next->ok());
    CHECK(next->at == ns(t0 + 400ms));
    CHECK(late->calls == 1);
}

TEST_CASE_TEMPLATE("max_wait: zero max_wait on an empty GCRA bucket is timed_out, never queued", F,
                   sluice_test::token_bucket_of<clk>, sluice_test::leaky_bucket_of<clk>)
{
    boost::asio::io_context io;
    reset_clock();
    auto l = F::make(io, 10);
    auto first = request<clk>(l, 1, 0ns);   // available now: a zero wait is fine
    auto second = request<clk>(l, 1, 0ns);  // would wait 100 ms
    CHECK_FALSE(first->done());
    CHECK_FALSE(second->done());
    CHECK(l.queued() == 0);
    drain(io);
    CHECK(first->ok());
    CHECK(second->ec == sluice::error::timed_out);
    // The refused request left the slot free.
    auto third = request<clk>(l, 1, 1s);
    advance<clk>(io, 100ms);
    CHECK(third->ok());
    CHECK(third->at == ns(t0 + 100ms));
}

// ---- 1. max wait: window policies --------------------------------------------------------

namespace {

// Limit 2 per second, 2 consumed at t0, two waiters with a long max_wait; then, if
// `with_refused`, one request whose max_wait (1.7 s) is enough alone (1 s fixed/log,
// 1.5 s counter) but not behind the two waiters (>= 2 s); then two more requests. Returns
// their completion times; the refused one's outcome goes to `refused`.
template <class F>
std::vector<std::int64_t> window_timeout_scenario(bool with_refused, std::shared_ptr<sluice_test::outcome>* refused)
{
    boost::asio::io_context io;
    reset_clock();
    auto l = F::make(io, 2);
    REQUIRE(l.try_acquire(2).admitted);
    sluice_test::outcomes q;
    q.push_back(request<clk>(l, 1, 10s));
    q.push_back(request<clk>(l, 1, 10s));
    if (with_refused) {
        auto r = request<clk>(l, 1, 1700ms);
        CHECK_FALSE(r->done());   // not inline
        drain(io);
        REQUIRE(r->done());
        CHECK(r->ec == sluice::error::timed_out);
        CHECK(r->at == ns(t0));
        CHECK(l.queued() == 2);
        *refused = r;
    }
    q.push_back(request<clk>(l, 1, 10s));
    q.push_back(request<clk>(l, 1, 10s));
    for (int i = 0; i < 100; ++i)
        advance<clk>(io, 100ms);
    std::vector<std::int64_t> at;
    for (auto& o : q) {
        CHECK(o->ok());
        at.push_back(o->at);
    }
    return at;
}

} // namespace

TEST_CASE_TEMPLATE("max_wait: a window request fails fast when the queue ahead makes it too long, consuming nothing", F,
                   sluice_test::fixed_window_of<clk>, sluice_test::sliding_window_of<clk>,
                   sluice_test::sliding_window_counter_of<clk>, sluice_test::all_of_of<clk>)
{
    std::shared_ptr<sluice_test::outcome> refused;
    auto with = window_timeout_scenario<F>(true, &refused);
    auto without = window_timeout_scenario<F>(false, nullptr);
    REQUIRE(refused);
    CHECK(refused->calls == 1);
    // The refused request changed nothing: every later request completes at the same time
    // as if it had never been made.
    CHECK(with == without);
}

TEST_CASE("max_wait: a queued window waiter whose (lower-bound) prediction was too early times out at its deadline")
{
    // fixed_window predicts by packing windows full, a lower bound when sizes differ:
    // limit 3, queued 2 + 2 + 2 is predicted to finish in the second window, but needs three.
    boost::asio::io_context io;
    reset_clock();
    sluice::fixed_window<clk> l(io, 3, 1s);
    REQUIRE(l.try_acquire(3).admitted);
    auto a = request<clk>(l, 2, 10s);
    auto b = request<clk>(l, 2, 10s);
    auto c = request<clk>(l, 2, 2500ms);   // predicted t0 + 2 s: accepted
    auto d = request<clk>(l, 1, 10s);
    drain(io);
    CHECK(l.queued() == 4);
    advance<clk>(io, 1s);
    CHECK(a->ok());
    advance<clk>(io, 1s);
    CHECK(b->ok());
    CHECK_FALSE(c->done());
    CHECK_FALSE(d->done());   // FIFO: behind c even though it would fit
    advance<clk>(io, 499ms);
    CHECK_FALSE(c->done());
    advance<clk>(io, 1ms);
    REQUIRE(c->done());
    CHECK(c->ec == sluice::error::timed_out);
    CHECK(c->at == ns(t0 + 2500ms));
    // c consumed nothing: d, now at the front, fits in the current window at once.
    REQUIRE(d->ok());
    CHECK(d->at == ns(t0 + 2500ms));
    CHECK(l.queued() == 0);
}

// ---- 10. bad input -------------------------------------------------------------------

namespace {

template <class L>
void check_bad_input(boost::asio::io_context& io, L& l, std::uint64_t too_many)
{
    auto zero = request<clk>(l, 0, 1s);
    auto big = request<clk>(l, too_many, 1s);
    CHECK_FALSE(zero->done());   // delivered through the executor, not thrown nor inline
    CHECK_FALSE(big->done());
    drain(io);
    CHECK(zero->ec == sluice::error::invalid_count);
    CHECK(big->ec == sluice::error::exceeds_limit);
    CHECK(l.queued() == 0);

    // acquire() reports both (never throws for an error_code).
    std::optional<boost::system::error_code> e0, e1;
    boost::asio::co_spawn(io, [&]() -> boost::asio::awaitable<void> {
        if (auto r = co_await l.acquire(0, 1s); !r) e0 = r.error();
        if (auto r = co_await l.acquire(too_many); !r) e1 = r.error();
    }, boost::asio::detached);
    drain(io);
    CHECK(e0 == sluice::error::invalid_count);
    CHECK(e1 == sluice::error::exceeds_limit);

    // Still usable.
    auto fine = request<clk>(l, 1, 10s);
    drain(io);
    CHECK(fine->ok());
}

} // namespace

TEST_CASE("bad input: token_bucket reports invalid_count / exceeds_limit through the handler")
{
    boost::asio::io_context io;
    reset_clock();
    sluice::token_bucket<clk> b(io, sluice::rate::per_second(10), 5);
    check_bad_input(io, b, 6);
}

TEST_CASE("bad input: leaky_bucket")
{
    boost::asio::io_context io;
    reset_clock();
    sluice::leaky_bucket<clk> b(io, sluice::rate::per_second(10));
    check_bad_input(io, b, 2);
}

TEST_CASE_TEMPLATE("bad input: window limiters", F, sluice_test::fixed_window_of<clk>,
                   sluice_test::sliding_window_of<clk>, sluice_test::sliding_window_counter_of<clk>,
                   sluice_test::all_of_of<clk>)
{
    boost::asio::io_context io;
    reset_clock();
    auto l = F::make(io, 3);
    check_bad_input(io, l, 4);
}

TEST_CASE("bad input: errors are reported even when waiters are queued, and to a closed limiter as closed")
{
    boost::asio::io_context io;
    reset_clock();
    sluice::token_bucket<clk> b(io, sluice::rate::per_second(10), 1);
    REQUIRE(b.try_acquire().admitted);
    auto w = request<clk>(b, 1, 1s);
    auto bad = request<clk>(b, 2, 1s);
    drain(io);
    CHECK(bad->ec == sluice::error::exceeds_limit);
    CHECK_FALSE(w->done());
    CHECK(b.queued() == 1);
    advance<clk>(io, 100ms);
    CHECK(w->ok());
}
