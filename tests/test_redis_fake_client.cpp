// The Redis limiters' operations end to end against a fake client, without a server: the
// script calls they send (keys and arguments), what they do with each reply, their timers
// on a manual clock, cancellation, close() and the failure policy, step by step.
#include "async_support.hpp"

#include <sluice/redis/reply.hpp>
#include <sluice/redis/script.hpp>
#include <sluice/redis/sliding_window.hpp>
#include <sluice/redis/token_bucket.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/system/system_error.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace redis = sluice::redis;
using error_code = boost::system::error_code;
using clk = sluice::basic_manual_clock<struct fake_client_tag>;
using namespace std::chrono_literals;

// Records every script call; the test answers them.
class fake_client {
public:
    using executor_type = asio::any_io_executor;

    explicit fake_client(asio::io_context& io) : io_(io) {}
    executor_type get_executor() const { return io_.get_executor(); }

    struct call {
        std::vector<std::string> keys, args;
        std::function<void(error_code, redis::reply)> answer;
    };
    std::deque<call> calls;

    template <class Token>
    auto async_eval(const redis::script&, std::vector<std::string> keys, std::vector<std::string> args, Token&& token)
    {
        return asio::async_initiate<Token, void(error_code, redis::reply)>(
            [this](auto handler, std::vector<std::string> k, std::vector<std::string> a) {
                auto h = std::make_shared<decltype(handler)>(std::move(handler));
                auto ex = asio::get_associated_executor(*h, io_.get_executor());
                calls.push_back({std::move(k), std::move(a), [h, ex](error_code e, redis::reply r) {
                                     asio::post(ex, [h, e, r = std::move(r)]() mutable { (*h)(e, std::move(r)); });
                                 }});
            },
            token, std::move(keys), std::move(args));
    }

    // Answers the oldest call.
    void answer(error_code e, redis::reply r = {})
    {
        REQUIRE_FALSE(calls.empty());
        auto c = std::move(calls.front());
        calls.pop_front();
        c.answer(e, std::move(r));
    }

private:
    asio::io_context& io_;
};

redis::reply ints(std::vector<std::int64_t> v)
{
    redis::reply r;
    r.type = redis::reply::kind::array;
    for (auto x : v) {
        redis::reply e;
        e.type = redis::reply::kind::integer;
        e.integer = x;
        r.elements.push_back(e);
    }
    return r;
}

// A GCRA grant with its wait (us), state and permits taken, of a bucket of 10/s, burst 10
// (tau: 1 s), as the script gives it: the server's now is the state less the wait, the
// bucket empty then (remaining 0) and full again a tau after the state.
redis::reply gcra_granted(std::int64_t wait, std::int64_t state = 7, std::int64_t taken = 1)
{
    return ints({1, wait, 0, wait + 1'000'000, state - wait, state, taken, 100'000, 10});
}

const std::vector<std::string> bucket_keys{"{sluice:k}", "{sluice:k}:cfg"};

struct fixture {
    asio::io_context io;
    fake_client client{io};
    fixture() { clk::set(std::chrono::seconds(1000)); }
    void run() { sluice_test::drain(io); }
};

} // namespace

TEST_SUITE_BEGIN("redis_fsm");

TEST_CASE("fake client: try sends one GCRA call with both keys and completes with its decision")
{
    fixture f;
    redis::token_bucket<fake_client, clk> tb(f.client, sluice::rate::per_second(10), 10);
    std::optional<sluice::decision> got;
    tb.async_try_acquire("k", 2, [&](error_code ec, sluice::decision d) {
        CHECK_FALSE(ec);
        got = d;
    });
    REQUIRE(f.client.calls.size() == 1);
    CHECK(f.client.calls[0].keys == bucket_keys);
    CHECK(f.client.calls[0].args == std::vector<std::string>{"100000", "10", "2", "0", "try"});
    f.run();
    CHECK_FALSE(got);
    f.client.answer({}, ints({1, 0, 8, 200'000, 1'000'000, 200'000, 2, 100'000, 10}));
    f.run();
    REQUIRE(got);
    CHECK(got->admitted);
    CHECK(got->remaining == 8);
    auto s = tb.stats();
    CHECK(s.backend.commands == 1);
    CHECK(s.try_admitted == 1);
}

TEST_CASE("fake client: acquire reserves, sleeps on the limiter's clock until its slot, completes")
{
    fixture f;
    redis::token_bucket<fake_client, clk> tb(f.client, sluice::rate::per_second(10), 10);
    std::optional<error_code> got;
    tb.async_acquire("k", 1, 1s, [&](error_code ec) { got = ec; });
    REQUIRE(f.client.calls.size() == 1);
    CHECK(f.client.calls[0].args == std::vector<std::string>{"100000", "10", "1", "1000000", "reserve"});
    f.client.answer({}, gcra_granted(5'000));
    f.run();
    CHECK_FALSE(got);
    sluice_test::advance<clk>(f.io, 4'999us);
    CHECK_FALSE(got);
    sluice_test::advance<clk>(f.io, 1us);
    REQUIRE(got);
    CHECK_FALSE(*got);
    CHECK(f.client.calls.empty());   // no refund
}

TEST_CASE("fake client: a cancelled or closed sleeper completes at once and gives its slot back")
{
    fixture f;
    redis::token_bucket<fake_client, clk> tb(f.client, sluice::rate::per_second(10), 10);
    asio::cancellation_signal sig;
    std::optional<error_code> a, b;
    tb.async_acquire("k", 3, 1s, asio::bind_cancellation_slot(sig.slot(), [&](error_code ec) { a = ec; }));
    tb.async_acquire("k", 1, 1s, [&](error_code ec) { b = ec; });
    f.client.answer({}, gcra_granted(50'000, 41, 3));
    f.client.answer({}, gcra_granted(60'000, 42));
    f.run();
    sig.emit(asio::cancellation_type::terminal);
    f.run();
    REQUIRE(a);
    CHECK(*a == asio::error::operation_aborted);
    REQUIRE(f.client.calls.size() == 1);   // the refund of a's 3 permits, against its state
    CHECK(f.client.calls[0].keys == bucket_keys);
    CHECK(f.client.calls[0].args == std::vector<std::string>{"100000", "10", "3", "41"});
    CHECK_FALSE(b);
    tb.close();
    f.run();
    REQUIRE(b);
    CHECK(*b == sluice::error::closed);
    CHECK(f.client.calls.size() == 2);
    CHECK(f.client.calls[1].args == std::vector<std::string>{"100000", "10", "1", "42"});
}

TEST_CASE("fake client: Redis unreachable, the fallback decides, one probe per interval, back on the first reply")
{
    fixture f;
    redis::shared_options o;
    o.expected_nodes = 2;
    redis::token_bucket<fake_client, clk> tb(f.client, sluice::rate::per_second(10), 10, o);
    std::optional<sluice::decision> d1;
    tb.async_try_acquire("k", 1, [&](error_code ec, sluice::decision d) {
        CHECK_FALSE(ec);
        d1 = d;
    });
    f.client.answer(make_error_code(sluice::error::backend_unavailable));
    f.run();
    REQUIRE(d1);
    CHECK(d1->admitted);   // the local fallback (5/s, burst 5)
    CHECK(tb.stats().backend.degraded);
    // Degraded: nothing goes to Redis until the probe interval has passed.
    int local = 0;
    for (int i = 0; i < 10; ++i)
        tb.async_try_acquire("k", 1, [&](error_code, sluice::decision d) { local += d.admitted; });
    f.run();
    CHECK(f.client.calls.empty());
    CHECK(local == 4);   // burst 5 of the fallback, one taken before
    CHECK(tb.stats().backend.fallback_decisions == 11);
    sluice_test::advance<clk>(f.io, 200ms);
    std::optional<sluice::decision> probe;
    tb.async_try_acquire("k", 1, [&](error_code, sluice::decision d) { probe = d; });
    REQUIRE(f.client.calls.size() == 1);   // the probe
    f.client.answer({}, gcra_granted(0));
    f.run();
    REQUIRE(probe);
    CHECK(probe->admitted);
    CHECK_FALSE(tb.stats().backend.degraded);
}

TEST_CASE("fake client: sleepers of several keys wait in the limiter's one engine and wake in the order of their slots")
{
    fixture f;
    redis::token_bucket<fake_client, clk> tb(f.client, sluice::rate::per_second(10), 10);
    std::string woke;
    for (char k : {'a', 'b', 'c'})
        tb.async_acquire(std::string(1, k), 1, 1s, [&woke, k](error_code ec) {
            CHECK_FALSE(ec);
            woke += k;
        });
    f.client.answer({}, gcra_granted(30'000));   // a: in 30 ms
    f.client.answer({}, gcra_granted(10'000));   // b: in 10 ms
    f.client.answer({}, gcra_granted(20'000));   // c: in 20 ms
    f.run();
    CHECK(tb.stats().waiting == 3);
    sluice_test::advance<clk>(f.io, 10ms);
    CHECK(woke == "b");
    sluice_test::advance<clk>(f.io, 9'999us);
    CHECK(woke == "b");
    sluice_test::advance<clk>(f.io, 1us);
    CHECK(woke == "bc");
    sluice_test::advance<clk>(f.io, 10ms);
    CHECK(woke == "bca");
    CHECK(f.client.calls.empty());   // no refund
    auto s = tb.stats();
    CHECK(s.admitted == 3);
    CHECK(s.waited == 3);
    CHECK(s.waiting == 0);
    CHECK(s.longest_wait == 30ms);
    CHECK(s.total_wait == 60ms);
}

TEST_CASE("fake client: close() completes every sleeper with closed and gives each slot back")
{
    fixture f;
    redis::token_bucket<fake_client, clk> tb(f.client, sluice::rate::per_second(10), 10);
    std::vector<error_code> got;
    for (int i = 0; i < 3; ++i)
        tb.async_acquire("k", 1, 1s, [&](error_code ec) { got.push_back(ec); });
    for (int i = 0; i < 3; ++i)
        f.client.answer({}, gcra_granted(10'000 * (i + 1), 100 + i));
    f.run();
    tb.close();
    f.run();
    REQUIRE(got.size() == 3);
    for (auto& ec : got)
        CHECK(ec == sluice::error::closed);
    REQUIRE(f.client.calls.size() == 3);   // three refunds, each against its own state
    for (int i = 0; i < 3; ++i)
        CHECK(f.client.calls[static_cast<std::size_t>(i)].args[3] == std::to_string(100 + i));
    CHECK(tb.stats().closed == 3);
}

TEST_CASE("fake client: a negative coalesce is invalid_option")
{
    fixture f;
    redis::shared_options o;
    o.coalesce = -1ns;
    try {
        redis::token_bucket<fake_client, clk> tb(f.client, sluice::rate::per_second(10), 10, o);
        FAIL("constructed");
    } catch (const boost::system::system_error& e) {
        CHECK(e.code() == sluice::error::invalid_option);
    }
}

TEST_CASE("fake client: a request beyond the burst in force is error::exceeds_limit after its round trip")
{
    fixture f;
    redis::token_bucket<fake_client, clk> tb(f.client, sluice::rate::per_second(10), 10);
    std::optional<error_code> got;
    tb.async_acquire("k", 11, 1s, [&](error_code ec) { got = ec; });
    f.client.answer({}, ints({0, 0, 10, 0, 1'000'000, 0, 0, 100'000, 10}));
    f.run();
    REQUIRE(got);
    CHECK(*got == sluice::error::exceeds_limit);
}

TEST_CASE("fake client: the window's waiter keeps its ticket across retries and leaves the queue when cancelled")
{
    fixture f;
    redis::sliding_window<fake_client, clk> w(f.client, 5, 1s);
    asio::cancellation_signal sig;
    std::optional<error_code> got;
    w.async_acquire("k", 2, 1s, asio::bind_cancellation_slot(sig.slot(), [&](error_code ec) { got = ec; }));
    REQUIRE(f.client.calls.size() == 1);
    const auto& first = f.client.calls[0];
    CHECK(first.keys == std::vector<std::string>{"{sluice:k}", "{sluice:k}:cfg", "{sluice:k}:q"});
    REQUIRE(first.args.size() == 5);
    CHECK(first.args[2] == "2");
    const std::string ticket = first.args[4];
    CHECK(ticket.find(":2:") != std::string::npos);   // deadline:n:id
    f.client.answer({}, ints({0, 3'000, 0, 0, 1'000'000, 0}));
    f.run();
    sluice_test::advance<clk>(f.io, 3ms);
    REQUIRE(f.client.calls.size() == 1);   // asks again, with the same ticket
    CHECK(f.client.calls[0].args[4] == ticket);
    f.client.answer({}, ints({0, 10'000, 0, 0, 1'000'000, 0}));
    f.run();
    sig.emit(asio::cancellation_type::terminal);
    f.run();
    REQUIRE(got);
    CHECK(*got == asio::error::operation_aborted);
    REQUIRE(f.client.calls.size() == 1);
    CHECK(f.client.calls[0].keys == std::vector<std::string>{"{sluice:k}:q"});
    CHECK(f.client.calls[0].args == std::vector<std::string>{ticket});
}

// The window's six integers for a try: granted, wait, remaining.
std::vector<std::int64_t> window_verdict(bool granted, std::int64_t wait, std::int64_t remaining)
{
    return {granted ? 1 : 0, wait, remaining, 100'000, 1'000'000, 0};
}

redis::reply batch_reply(std::vector<std::vector<std::int64_t>> vs)
{
    std::vector<std::int64_t> flat;
    for (auto& v : vs) flat.insert(flat.end(), v.begin(), v.end());
    return ints(flat);
}

TEST_CASE("fake client: the window's tries for one key wait for its call in flight and go together as the next call")
{
    fixture f;
    redis::sliding_window<fake_client, clk> w(f.client, 5, 1s);
    std::vector<std::optional<sluice::decision>> got(4);
    auto record = [&](int i) {
        return [&got, i](error_code ec, sluice::decision d) {
            CHECK_FALSE(ec);
            got[static_cast<std::size_t>(i)] = d;
        };
    };
    w.async_try_acquire("k", 1, record(0));
    REQUIRE(f.client.calls.size() == 1);
    CHECK(f.client.calls[0].args == std::vector<std::string>{"5", "1000000", "1"});
    // Three more while it is in flight (one of another key, which goes at once).
    w.async_try_acquire("k", 2, record(1));
    w.async_try_acquire("other", 1, record(3));
    w.async_try_acquire("k", 3, record(2));
    REQUIRE(f.client.calls.size() == 2);
    CHECK(f.client.calls[1].keys[0] == "{sluice:other}");
    f.client.answer({}, ints(window_verdict(true, 0, 4)));
    f.run();
    // The reply sends the next call: the two that waited, in order, no ticket.
    REQUIRE(f.client.calls.size() == 2);
    CHECK(f.client.calls[1].keys[0] == "{sluice:k}");
    CHECK(f.client.calls[1].args == std::vector<std::string>{"5", "1000000", "2", "", "", "3", ""});
    REQUIRE(got[0]);
    CHECK(got[0]->admitted);
    CHECK(got[0]->remaining == 4);
    CHECK_FALSE(got[1]);
    f.client.answer({}, ints(window_verdict(false, 10'000, 0)));   // "other"
    f.client.answer({}, batch_reply({window_verdict(true, 0, 2), window_verdict(false, 250'000, 0)}));
    f.run();
    CHECK(f.client.calls.empty());
    REQUIRE(got[1]);
    CHECK(got[1]->admitted);
    CHECK(got[1]->remaining == 2);
    REQUIRE(got[2]);
    CHECK_FALSE(got[2]->admitted);
    CHECK(got[2]->retry_after == 250ms);
    REQUIRE(got[3]);
    CHECK_FALSE(got[3]->admitted);
    auto st = w.stats();
    CHECK(st.backend.commands == 3);
    CHECK(st.try_admitted == 2);
    CHECK(st.try_refused == 2);

    // Nothing in flight any more: the next try goes at once, alone.
    w.async_try_acquire("k", 1, record(0));
    CHECK(f.client.calls.size() == 1);
    f.client.answer({}, ints(window_verdict(true, 0, 1)));
    f.run();
}

TEST_CASE("fake client: the window's batch is at most 64 requests; a waiting try cancelled is not sent")
{
    fixture f;
    redis::sliding_window<fake_client, clk> w(f.client, 1000, 1s);
    int admitted = 0, aborted = 0;
    auto on = [&](error_code ec, sluice::decision d) {
        if (ec == asio::error::operation_aborted) ++aborted;
        else if (!ec && d.admitted) ++admitted;
    };
    w.async_try_acquire("k", 1, on);
    asio::cancellation_signal sig;
    for (int i = 0; i < 70; ++i) {
        if (i == 10) w.async_try_acquire("k", 1, asio::bind_cancellation_slot(sig.slot(), on));
        else w.async_try_acquire("k", 1, on);
    }
    REQUIRE(f.client.calls.size() == 1);
    sig.emit(asio::cancellation_type::terminal);
    CHECK(aborted == 0);   // never inside the emit
    f.run();
    CHECK(aborted == 1);
    f.client.answer({}, ints(window_verdict(true, 0, 999)));
    f.run();
    REQUIRE(f.client.calls.size() == 1);
    CHECK(f.client.calls[0].args.size() == 5 + 2 * 63);   // 64 requests
    f.client.answer({}, batch_reply(std::vector<std::vector<std::int64_t>>(64, window_verdict(true, 0, 1))));
    f.run();
    REQUIRE(f.client.calls.size() == 1);
    CHECK(f.client.calls[0].args.size() == 5 + 2 * 4);   // the 5 left
    f.client.answer({}, batch_reply(std::vector<std::vector<std::int64_t>>(5, window_verdict(true, 0, 1))));
    f.run();
    CHECK(f.client.calls.empty());
    CHECK(admitted == 70);
    CHECK(w.stats().backend.commands == 3);
}

TEST_CASE("fake client: a window batch that fails fails each of its requests; one closed while waiting sends nothing")
{
    fixture f;
    redis::shared_options o;
    o.on_failure = redis::failure_policy::fail_closed;
    redis::sliding_window<fake_client, clk> w(f.client, 5, 1s, o);
    std::vector<error_code> ecs;
    auto on = [&](error_code ec, sluice::decision) { ecs.push_back(ec); };
    w.async_try_acquire("k", 1, on);
    w.async_try_acquire("k", 1, on);
    w.async_try_acquire("k", 1, on);
    f.client.answer({}, ints(window_verdict(true, 0, 4)));
    f.run();
    REQUIRE(f.client.calls.size() == 1);
    SUBCASE("Redis unreachable: the failure policy answers each")
    {
        f.client.answer(make_error_code(sluice::error::backend_unavailable));
        f.run();
        REQUIRE(ecs.size() == 3);
        CHECK_FALSE(ecs[0]);
        CHECK(ecs[1] == sluice::error::backend_unavailable);
        CHECK(ecs[2] == sluice::error::backend_unavailable);
    }
    SUBCASE("a reply of the wrong shape is believed by none")
    {
        f.client.answer({}, ints(window_verdict(true, 0, 4)));   // six integers for two requests
        f.run();
        REQUIRE(ecs.size() == 3);
        CHECK(ecs[1] == sluice::error::protocol_error);
        CHECK(ecs[2] == sluice::error::protocol_error);
    }
    SUBCASE("a batch's part that cannot answer a try is not believed")
    {
        // A grant with a wait: not an answer to a try.
        f.client.answer({}, batch_reply({window_verdict(true, 0, 3), {1, 5'000, 0, 0, 1'000'000, 0}}));
        f.run();
        REQUIRE(ecs.size() == 3);
        CHECK_FALSE(ecs[1]);
        CHECK(ecs[2] == sluice::error::protocol_error);
    }
    SUBCASE("closed while waiting: error::closed, nothing sent")
    {
        w.async_try_acquire("k", 1, on);
        w.close();
        f.client.answer({}, batch_reply({window_verdict(true, 0, 3), window_verdict(true, 0, 2)}));
        f.run();
        CHECK(f.client.calls.empty());   // the fourth was not sent
        REQUIRE(ecs.size() == 4);
        CHECK_FALSE(ecs[1]);
        CHECK_FALSE(ecs[2]);
        CHECK(ecs[3] == sluice::error::closed);
    }
}

TEST_CASE("fake client: leasing asks for a run, answers locally from it, prefetches in the background")
{
    fixture f;
    redis::shared_options o;
    o.lease_size = 8;
    redis::token_bucket<fake_client, clk> tb(f.client, sluice::rate::per_second(10000), 10, o);
    std::vector<sluice::decision> got;
    auto ask = [&] { tb.async_try_acquire("k", 1, [&](error_code, sluice::decision d) { got.push_back(d); }); };
    ask();
    REQUIRE(f.client.calls.size() == 1);
    CHECK(f.client.calls[0].args == std::vector<std::string>{"100", "10", "1", "250000", "lease"});
    ask();   // refused locally while the run is on its way
    f.run();
    REQUIRE(got.size() == 1);
    CHECK_FALSE(got[0].admitted);
    f.client.answer({}, ints({1, 0, 0, 1'000, 1'000'000, 1'000'000, 1, 100, 10}));
    f.run();
    REQUIRE(got.size() == 2);
    CHECK(got[1].admitted);
    // The run doubles (requests found it used up); the next is reserved in the background.
    REQUIRE(f.client.calls.size() == 1);
    CHECK(f.client.calls[0].args[2] == "2");
    CHECK(f.client.calls[0].args[4] == "lease");
    f.client.answer({}, ints({1, 100, 0, 1'100, 1'000'000, 1'000'100, 2, 100, 10}));   // slots now and in 100 us
    f.run();
    CHECK(tb.leased() == 2);
    ask();
    ask();
    f.run();
    REQUIRE(got.size() == 4);
    CHECK(got[2].admitted);
    CHECK_FALSE(got[3].admitted);
    CHECK(got[3].retry_after == 100us);
    // The one slot held ends within a spacing (plus two round trips) of now: the next run
    // is on its way already.
    CHECK(f.client.calls.size() == 1);
    CHECK(tb.stats().backend.commands == 3);
}

TEST_CASE("fake client: a verdict that cannot answer the call is not believed (found by fuzz/acquire_fsm, fuzz/lease_book)")
{
    fixture f;
    SUBCASE("a try granted with a wait: admitted now, before its time")
    {
        redis::token_bucket<fake_client, clk> tb(f.client, sluice::rate::per_second(10), 10);
        std::optional<error_code> got;
        tb.async_try_acquire("k", 1, [&](error_code ec, sluice::decision) { got = ec; });
        f.client.answer({}, gcra_granted(5'000));
        f.run();
        REQUIRE(got);
        CHECK(*got == sluice::error::protocol_error);
        CHECK(tb.stats().admitted == 0);
    }
    SUBCASE("a reservation beyond max_wait: the waiter would sleep past its deadline")
    {
        redis::token_bucket<fake_client, clk> tb(f.client, sluice::rate::per_second(10), 10);
        std::optional<error_code> got;
        tb.async_acquire("k", 1, 10ms, [&](error_code ec) { got = ec; });
        f.client.answer({}, gcra_granted(10'001));
        f.run();
        REQUIRE(got);
        CHECK(*got == sluice::error::protocol_error);
    }
    SUBCASE("a lease of more slots than asked: handed out as the server's")
    {
        redis::shared_options o;
        o.lease_size = 8;
        redis::token_bucket<fake_client, clk> tb(f.client, sluice::rate::per_second(10000), 10, o);
        std::optional<error_code> got;
        tb.async_try_acquire("k", 1, [&](error_code ec, sluice::decision) { got = ec; });
        REQUIRE(f.client.calls.size() == 1);
        CHECK(f.client.calls[0].args[2] == "1");
        f.client.answer({}, ints({1, 0, 0, 0, 1'000'000, 9, 1'000'000, 100, 10}));
        f.run();
        REQUIRE(got);
        CHECK(*got == sluice::error::protocol_error);
        CHECK(tb.leased() == 0);
        // The book is free again: the next try makes its own round trip.
        tb.async_try_acquire("k", 1, [](error_code, sluice::decision) {});
        f.run();
        CHECK(f.client.calls.size() == 1);
    }
}

TEST_SUITE_END();
