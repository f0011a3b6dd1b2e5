// sluice::shm::keyed_bucket's waiting per key on the manual clock: slots in the order of
// reservations across limiters on one table (each its own waiting queues, as in two
// processes), cancellation and its refund, close, the bound on waiting queues, a key
// evicted from the table around its waiters, executors and every completion token.
#include <sluice/shm/keyed_bucket.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/system/system_error.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <future>
#include <thread>
#include <vector>
#include <memory>
#include <optional>
#include <string>

#include "async_support.hpp"
#include "shm_support.hpp"

using namespace std::chrono_literals;
using clk = sluice::basic_manual_clock<struct shm_keyed_async_tag>;
using sluice_test::advance;
using sluice_test::drain;
using sluice_test::make_recorder;
using sluice_test::ns;
using sluice_test::outcome;
using sluice_test::shm_name;
namespace asio = boost::asio;

namespace {

constexpr auto t0 = std::chrono::seconds(1000);
using ct = asio::cancellation_type;
using keyed = sluice::shm::keyed_bucket<clk>;

template <class K>
std::shared_ptr<outcome> request(keyed& l, const K& key, std::uint64_t n = 1, std::chrono::nanoseconds max_wait = 10s)
{
    auto [o, h] = make_recorder<clk>();
    l.async_acquire(key, n, max_wait, h);
    return o;
}

template <class K>
std::shared_ptr<outcome> cancellable(keyed& l, const K& key, asio::cancellation_signal& sig, std::uint64_t n = 1)
{
    auto [o, h] = make_recorder<clk>();
    l.async_acquire(key, n, 1000s, asio::bind_cancellation_slot(sig.slot(), h));
    return o;
}

void run_until(asio::io_context& io, const std::shared_ptr<outcome>& o, std::chrono::nanoseconds limit)
{
    auto end = sluice_test::now_ns<clk>() + limit.count();
    while (!o->done() && sluice_test::now_ns<clk>() < end) advance<clk>(io, 1ms);
}

// The key's state in the table: the instant its bucket is empty (nullopt: not tracked).
std::optional<std::int64_t> empty_at(const keyed& l, const std::string& key)
{
    for (const auto& k : l.table().keys())
        if (!k.integer && k.key == key) return k.empty_at;
    return std::nullopt;
}

} // namespace

TEST_SUITE_BEGIN("shm");

TEST_CASE("shm::keyed_bucket: a key's waiters get their slots; a cancelled one gives its slot back, later ones move up")
{
    for (ct type : {ct::terminal, ct::partial, ct::total}) {
        for (int victim = 0; victim < 3; ++victim) {
            CAPTURE(victim);
            shm_name name("kw-cancel");
            asio::io_context io;
            clk::set(t0);
            keyed l(io, name.str(), sluice::rate::per_second(10), 1);
            REQUIRE(l.try_acquire("k").admitted);
            REQUIRE(l.try_acquire("other").admitted);
            asio::cancellation_signal sig[3];
            std::shared_ptr<outcome> q[3];
            for (int i = 0; i < 3; ++i) q[i] = cancellable(l, std::string("k"), sig[i]);   // +100, +200, +300 ms
            auto o = request(l, std::string("other"));                                         // +100 ms, apart
            drain(io);
            CHECK(l.queued("k") == 3);
            CHECK(l.queued("other") == 1);
            CHECK(empty_at(l, "k") == ns(t0 + 300ms));
            advance<clk>(io, 50ms);
            sig[victim].emit(type);
            drain(io);
            REQUIRE(q[victim]->done());
            CHECK(q[victim]->ec == asio::error::operation_aborted);
            // Exactly as if the victim had never asked.
            CHECK(empty_at(l, "k") == ns(t0 + 200ms));
            std::int64_t expect = ns(t0 + 100ms);
            for (int i = 0; i < 3; ++i) {
                if (i == victim) continue;
                run_until(io, q[i], 1s);
                REQUIRE(q[i]->ok());
                CHECK(q[i]->at == expect);
                expect += ns(100ms);
            }
            REQUIRE(o->ok());
            CHECK(o->at == ns(t0 + 100ms));
            auto st = l.stats();
            CHECK(st.admitted == 3);
            CHECK(st.cancelled == 1);
            CHECK(st.waited == 3);
            CHECK(st.waiting == 0);
            CHECK(st.keys.tracked == 2);
        }
    }
}

TEST_CASE("shm::keyed_bucket: two limiters on one table (two processes' queues) serve a key in the order of reservations")
{
    shm_name name("kw-order");
    asio::io_context io;
    clk::set(t0);
    keyed a(io, name.str(), sluice::rate::per_second(10), 1);
    keyed b(io, name.str(), sluice::rate::per_second(10), 1);
    REQUIRE(a.try_acquire(std::uint64_t{7}).admitted);
    CHECK_FALSE(b.try_acquire(std::uint64_t{7}).admitted);
    auto qa = request(a, 7);    // +100 ms
    auto qb = request(b, 7);    // +200 ms
    auto qa2 = request(a, 7);   // +300 ms
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
    // A timeout is predicted against every reservation of both, nothing consumed.
    auto qb2 = request(b, 7);            // +400 ms
    auto late = request(a, 7, 1, 150ms);   // would be +500 ms: beyond its 150 ms
    drain(io);
    CHECK(late->ec == sluice::error::timed_out);
    run_until(io, qb2, 1s);
    CHECK(qb2->at == ns(t0 + 400ms));
    CHECK(a.stats().timed_out == 1);
    CHECK(a.stats().admitted == 2);
    CHECK(b.stats().admitted == 2);
}

TEST_CASE("shm::keyed_bucket: a cancellation refunds only when no other limiter reserved on the key after it")
{
    shm_name name("kw-refund");
    asio::io_context io;
    clk::set(t0);
    keyed a(io, name.str(), sluice::rate::per_second(10), 1);
    keyed b(io, name.str(), sluice::rate::per_second(10), 1);
    REQUIRE(a.try_acquire("k").admitted);
    asio::cancellation_signal sig;
    auto qa = cancellable(a, std::string("k"), sig);   // +100 ms
    auto qb = request(b, std::string("k"));            // +200 ms
    drain(io);
    sig.emit(ct::terminal);
    drain(io);
    CHECK(qa->ec == asio::error::operation_aborted);
    // b's waiter keeps its slot: a refund would let a new request take +200 ms too.
    CHECK(empty_at(a, "k") == ns(t0 + 200ms));
    CHECK_FALSE(b.try_acquire("k").admitted);
    run_until(io, qb, 1s);
    CHECK(qb->at == ns(t0 + 200ms));
    // The last reservation on the key is refunded exactly.
    asio::cancellation_signal sig2;
    auto qa2 = cancellable(a, std::string("k"), sig2);   // +300 ms
    drain(io);
    CHECK(empty_at(a, "k") == ns(t0 + 300ms));
    sig2.emit(ct::total);
    drain(io);
    CHECK(qa2->ec == asio::error::operation_aborted);
    CHECK(empty_at(a, "k") == ns(t0 + 200ms));
    advance<clk>(io, 100ms);
    CHECK(b.try_acquire("k").admitted);
    CHECK_FALSE(b.try_acquire("k").admitted);
}

TEST_CASE("shm::keyed_bucket: close completes every waiter of every key with closed, gives their slots back")
{
    shm_name name("kw-close");
    asio::io_context io;
    clk::set(t0);
    keyed l(io, name.str(), sluice::rate::per_second(10), 2);
    keyed other(io, name.str(), sluice::rate::per_second(10), 2);
    std::vector<std::shared_ptr<outcome>> q;
    for (std::string k : {"a", "b", "c"}) {
        REQUIRE(l.try_acquire(k, 2).admitted);
        for (int i = 0; i < 3; ++i) q.push_back(request(l, k));
    }
    auto o = request(other, std::string("a"));   // another limiter's waiter, after l's: +400 ms
    drain(io);
    CHECK(l.waiting_keys() == 3);
    CHECK(l.stats().waiting == 9);
    CHECK(empty_at(l, "b") == ns(t0 + 300ms));
    l.close();
    drain(io);
    for (auto& r : q) {
        REQUIRE(r->done());
        CHECK(r->ec == sluice::error::closed);
    }
    // Nothing reserved after them on b and c: all given back; on a the other waiter
    // keeps its slot (and the ones before it stay taken).
    CHECK(empty_at(l, "b") == ns(t0));
    CHECK(empty_at(l, "c") == ns(t0));
    CHECK(empty_at(l, "a") == ns(t0 + 400ms));
    auto after = request(l, std::string("b"));
    drain(io);
    CHECK(after->ec == sluice::error::closed);
    CHECK(l.try_acquire("b").admitted == false);   // try still decides: b is empty at t0
    advance<clk>(io, 100ms);
    CHECK(l.try_acquire("b").admitted);
    CHECK_FALSE(o->done());
    run_until(io, o, 1s);
    CHECK(o->ok());
    CHECK(o->at == ns(t0 + 400ms));
    auto st = l.stats();
    CHECK(st.closed == 10);
    CHECK(st.waiting == 0);
    // The destructor closes too.
    std::shared_ptr<outcome> pending;
    {
        keyed d(io, name.str(), sluice::rate::per_second(10), 2);
        pending = request(d, std::string("a"));
        drain(io);
        CHECK_FALSE(pending->done());
    }
    drain(io);
    CHECK(pending->ec == sluice::error::closed);
}

TEST_CASE("shm::keyed_bucket: at most max_waiting_keys waiting queues; an empty one is let go for a new key")
{
    shm_name name("kw-bound");
    asio::io_context io;
    clk::set(t0);
    keyed l(io, name.str(), sluice::rate::per_second(10), 1, {}, {}, {.max_waiting_keys = 2});
    for (std::uint64_t k : {1, 2, 3}) REQUIRE(l.try_acquire(k).admitted);
    auto q1 = request(l, 1);
    auto q2 = request(l, 2);
    auto q3 = request(l, 3);
    drain(io);
    CHECK(q3->ec == sluice::error::queue_full);
    CHECK_FALSE(q1->done());
    CHECK(l.waiting_keys() == 2);
    // A request answered at once needs no queue, even at the bound.
    CHECK(request(l, 4)->calls == 0);
    drain(io);
    run_until(io, q1, 1s);
    run_until(io, q2, 1s);
    CHECK(q1->ok());
    CHECK(q2->ok());
    // q3 reserved nothing: 3 has refilled by now.
    CHECK(l.try_acquire(std::uint64_t{3}).admitted);
    // 3 waits now; the queues of 1 and 2, empty, were let go for it.
    auto q3b = request(l, 3);
    drain(io);
    CHECK_FALSE(q3b->done());
    CHECK(l.waiting_keys() == 1);
    run_until(io, q3b, 1s);
    CHECK(q3b->ok());
    auto st = l.stats();
    CHECK(st.refused == 1);
    CHECK(st.admitted == 4);
    // Bad options and no executor: clear errors.
    shm_name other("kw-bad");
    CHECK_THROWS_AS(keyed(io, other.str(), sluice::rate::per_second(10), 1, {}, {}, {.max_waiting_keys = 0}),
                    boost::system::system_error);
    CHECK_THROWS_AS(keyed(io, other.str(), sluice::rate::per_second(10), 1, {}, {},
                          {.limiter = {.coalesce = std::chrono::nanoseconds{-1}}}),
                    boost::system::system_error);
    keyed bare(other.str(), sluice::rate::per_second(10), 1);
    CHECK(bare.try_acquire("x").admitted);
    try {
        bare.async_acquire(std::string("x"), 1, 1s, [](boost::system::error_code) {});
        FAIL("no exception");
    } catch (const boost::system::system_error& e) {
        CHECK(e.code() == sluice::error::invalid_option);
    }
    CHECK(bare.stats().keys.tracked == 1);
}

TEST_CASE("shm::keyed_bucket: errors of a request: too long a key, n beyond the burst, a full table")
{
    shm_name name("kw-errors");
    asio::io_context io;
    clk::set(t0);
    keyed l(io, name.str(), sluice::rate::per_second(10), 2, {.max_keys = 1, .shards = 1});
    auto longkey = request(l, std::string(41, 'x'));
    auto big = request(l, std::string("a"), 3);
    auto zero = request(l, std::string("a"), 0);
    drain(io);
    CHECK(longkey->ec == sluice::error::shm_key_too_long);
    CHECK(big->ec == sluice::error::exceeds_limit);
    CHECK(zero->ec == sluice::error::invalid_count);
    REQUIRE(l.try_acquire("a", 2).admitted);
    auto full = request(l, std::string("b"));
    drain(io);
    CHECK(full->ec == sluice::error::shm_table_full);
    auto st = l.stats();
    CHECK(st.refused == 4);

    // A table of integer keys refuses a string key, however short, and waits on none.
    shm_name ints("kw-errors-int");
    keyed li(io, ints.str(), sluice::rate::per_second(10), 2, {.max_keys = 16, .shards = 1, .integer_keys = true});
    auto str = request(li, std::string("7"));
    drain(io);
    CHECK(str->ec == sluice::error::shm_string_key);
    CHECK(li.waiting_keys() == 0);
    CHECK(li.stats().refused == 1);
}

// The table evicts only idle keys: a key with a slot still to come is never evicted; once
// its last slot has come (the waiter's timer not yet run) it may be, and then the waiter
// is still admitted once, or, cancelled, gives nothing back.
TEST_CASE("shm::keyed_bucket: a key evicted from the table around its waiters neither loses nor doubles an admission")
{
    for (bool cancel : {false, true}) {
        CAPTURE(cancel);
        shm_name name("kw-evict");
        asio::io_context io;
        clk::set(t0);
        keyed l(io, name.str(), sluice::rate::per_second(10), 1, {.max_keys = 1, .shards = 1});
        keyed other(io, name.str(), sluice::rate::per_second(10), 1, {.max_keys = 1, .shards = 1});
        REQUIRE(l.try_acquire("a").admitted);
        asio::cancellation_signal sig;
        auto w = cancellable(l, std::string("a"), sig);   // slot +100 ms; "a" idle from +200 ms
        drain(io);
        // Not idle while the slot is to come, nor until the bucket is full again.
        for (auto t : {50ms, 100ms, 199ms}) {
            clk::set(t0 + t);
            sluice::decision d = other.try_acquire("b");
            CHECK(d.error == sluice::error::shm_table_full);
            CHECK(d.retry_after == 200ms - t);
        }
        // +200 ms, the waiter's timer not run yet: "a" is idle, and "b" takes its room.
        clk::set(t0 + 200ms);
        REQUIRE(other.try_acquire("b").admitted);
        CHECK_FALSE(l.table().contains("a"));
        const auto b_state = empty_at(other, "b");
        if (cancel) sig.emit(ct::terminal);
        drain(io);
        REQUIRE(w->done());
        if (cancel) {
            CHECK(w->ec == asio::error::operation_aborted);
        } else {
            CHECK(w->ok());
        }
        // Nothing given back on the key that holds the slot now, nothing taken from it.
        CHECK(empty_at(other, "b") == b_state);
        CHECK_FALSE(other.try_acquire("b").admitted);
        auto st = l.stats();
        CHECK(st.admitted == (cancel ? 0 : 1));
        CHECK(st.cancelled == (cancel ? 1 : 0));
        // "a" comes back as a new key once "b" is idle, with a full bucket (1), no more.
        clk::set(t0 + 300ms);
        CHECK(l.try_acquire("a").admitted);
        CHECK_FALSE(l.try_acquire("a").admitted);
    }
}

TEST_CASE("shm::keyed_bucket: completion tokens: callback, deferred, use_awaitable (acquire), use_future, as_tuple")
{
    shm_name name("kw-tokens");
    asio::io_context io;
    clk::set(t0);
    keyed l(io, name.str(), sluice::rate::per_second(10), 1);
    // Deferred: nothing happens until launched.
    auto op = l.async_acquire(std::string("d"), 1, 1s, asio::deferred);
    CHECK(l.try_acquire("d").admitted);
    std::optional<boost::system::error_code> got;
    std::move(op)([&](boost::system::error_code ec) { got = ec; });
    drain(io);
    CHECK_FALSE(got);
    advance<clk>(io, 100ms);
    CHECK(got == boost::system::error_code());
    // use_awaitable through acquire(): string and integer keys, one that waits.
    std::vector<sluice::acquire_result> results;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        results.push_back(co_await l.acquire(std::string("c")));
        results.push_back(co_await l.acquire(std::uint64_t{9}, 1, 1s));
        results.push_back(co_await l.acquire("c", 1s));   // waits 100 ms
        results.push_back(co_await l.acquire("c", 2, 1s));
        auto [ec] = co_await l.async_acquire(std::string("c"), 1, 0ns, asio::as_tuple(asio::use_awaitable));
        results.emplace_back(ec);
    }, asio::detached);
    drain(io);
    CHECK(results.size() == 2);
    advance<clk>(io, 100ms);
    REQUIRE(results.size() == 5);
    CHECK(results[0]);
    CHECK(results[1]);
    CHECK(results[2]);
    CHECK(results[3].error() == sluice::error::exceeds_limit);
    CHECK(results[4].timed_out());
    // use_future: answered at once, and after a wait.
    std::future<void> now_f = l.async_acquire(std::string("f"), 1, 1s, asio::use_future);
    std::future<void> later_f = l.async_acquire(std::string("f"), 1, 1s, asio::use_future);
    // use_future's handlers run on the system executor's threads: waited for, bounded.
    drain(io);
    REQUIRE(now_f.wait_for(10s) == std::future_status::ready);
    CHECK_NOTHROW(now_f.get());
    CHECK(later_f.wait_for(0s) == std::future_status::timeout);   // its slot is +100 ms
    advance<clk>(io, 100ms);
    REQUIRE(later_f.wait_for(10s) == std::future_status::ready);
    CHECK_NOTHROW(later_f.get());
    std::future<void> bad = l.async_acquire(std::string("f"), 0, 1s, asio::use_future);
    drain(io);
    try {
        bad.get();
        FAIL("no exception");
    } catch (const boost::system::system_error& e) {
        CHECK(e.code() == sluice::error::invalid_count);
    }
}

TEST_CASE("shm::keyed_bucket: a handler runs on its own executor, never inside the initiating call")
{
    shm_name name("kw-executor");
    asio::io_context io, elsewhere;
    clk::set(t0);
    keyed l(io, name.str(), sluice::rate::per_second(10), 1);
    int now_calls = 0, later_calls = 0;
    l.async_acquire(std::string("e"), 1, 1s, asio::bind_executor(elsewhere, [&](boost::system::error_code ec) {
                        CHECK_FALSE(ec);
                        ++now_calls;
                    }));
    CHECK(now_calls == 0);   // admitted at once, but posted
    l.async_acquire(std::string("e"), 1, 1s, asio::bind_executor(elsewhere, [&](boost::system::error_code ec) {
                        CHECK_FALSE(ec);
                        ++later_calls;
                    }));
    drain(io);
    CHECK(now_calls == 0);
    drain(elsewhere);
    CHECK(now_calls == 1);
    advance<clk>(io, 100ms);   // the timer runs on l's executor, the handler on its own
    CHECK(later_calls == 0);
    drain(elsewhere);
    CHECK(later_calls == 1);
}


// The refund rule looks between the cancelled reservation and the process's last one: a's
// first slot, with b's after it and a's second after that, is not given back (a's second
// would move up onto b's slot: two grants at one instant from a bucket of one).
TEST_CASE("shm::keyed_bucket: a cancelled reservation with another limiter's between it and a later one of its own keeps its slot")
{
    shm_name name("kw-between");
    asio::io_context io;
    clk::set(t0);
    keyed a(io, name.str(), sluice::rate::per_second(10), 1);
    keyed b(io, name.str(), sluice::rate::per_second(10), 1);
    REQUIRE(a.try_acquire("k").admitted);
    asio::cancellation_signal sig, sig2;
    auto a1 = cancellable(a, std::string("k"), sig);    // +100 ms
    auto b1 = request(b, std::string("k"));             // +200 ms
    auto a2 = cancellable(a, std::string("k"), sig2);   // +300 ms
    auto a3 = request(a, std::string("k"));             // +400 ms
    drain(io);
    sig.emit(ct::terminal);
    drain(io);
    CHECK(a1->ec == asio::error::operation_aborted);
    CHECK(empty_at(a, "k") == ns(t0 + 400ms));   // nothing given back
    // a2 and a3 were reserved after b's: a2 comes back exactly, a3 moves up into its slot.
    sig2.emit(ct::terminal);
    drain(io);
    CHECK(a2->ec == asio::error::operation_aborted);
    CHECK(empty_at(a, "k") == ns(t0 + 300ms));
    run_until(io, b1, 1s);
    run_until(io, a3, 1s);
    CHECK(b1->at == ns(t0 + 200ms));
    CHECK(a3->at == ns(t0 + 300ms));
}

// Threads start, and io threads complete, waits on two limiters of one table (two
// processes' queues) while the clock moves and one limiter is closed halfway: every
// handler runs once, each key admits no more than its bucket allows over the run, and the
// counts agree (ThreadSanitizer runs this in the async suite).
TEST_CASE("shm::keyed_bucket: threads waiting through two limiters on one table, one closed halfway")
{
    shm_name name("kw-threads");
    constexpr int producers = 4, each = 100, nkeys = 3;
    constexpr std::uint64_t burst = 5;
    clk::set(t0);
    asio::io_context io(2);
    auto work = asio::make_work_guard(io);
    std::vector<std::thread> runners;
    for (int t = 0; t < 2; ++t) runners.emplace_back([&] { io.run(); });
    sluice_test::handler_stats hs;
    std::atomic<int> granted[nkeys] = {};
    std::atomic<int> closed{0}, started{0};
    {
        keyed a(io, name.str(), sluice::rate::per_second(1000), burst);
        keyed b(io, name.str(), sluice::rate::per_second(1000), burst);
        std::vector<std::thread> threads;
        for (int p = 0; p < producers; ++p) {
            threads.emplace_back([&, p] {
                keyed& l = p % 2 ? a : b;
                for (int i = 0; i < each; ++i) {
                    int k = (p + i) % nkeys;
                    l.async_acquire("key-" + std::to_string(k), 1, sluice::wait_forever,
                                    [&, k, h = sluice_test::counted_handler(hs)](boost::system::error_code ec) mutable {
                                        if (!ec)
                                            granted[k].fetch_add(1);
                                        else if (ec == sluice::error::closed)
                                            closed.fetch_add(1);
                                        h(ec);
                                    });
                    started.fetch_add(1);
                    if (i % 10 == 0) l.try_acquire("key-" + std::to_string(k));
                }
            });
        }
        // Every request is started before the clock moves (the io threads answer the first
        // ones meanwhile); then the clock, by hand, 100 us a step until every handler ran,
        // `a` closed at t0 + 40 ms: by then at most 3 x (5 + 40) of the 400 are admitted, so
        // at least 65 of a's 200 still wait (the io threads may lag behind the clock).
        for (auto& t : threads) t.join();
        CHECK(started.load() == producers * each);
        bool was_closed = false;
        auto until = std::chrono::steady_clock::now() + 60s;
        while (hs.runs.load() < producers * each && std::chrono::steady_clock::now() < until) {
            if (!was_closed && clk::now().time_since_epoch() >= t0 + 40ms) {
                a.close();
                was_closed = true;
            }
            clk::advance(100us);
            std::this_thread::yield();
        }
        CHECK(was_closed);
        auto sa = a.stats(), sb = b.stats();
        CHECK(sa.admitted + sa.closed + sb.admitted == static_cast<std::uint64_t>(producers * each));
        CHECK(sb.closed == 0);
        CHECK(sa.waiting + sb.waiting == 0);
    }
    work.reset();
    for (auto& t : runners) t.join();
    CHECK(hs.runs == producers * each);
    CHECK(hs.twice == 0);
    CHECK(hs.dropped == 0);
    CHECK(closed.load() > 0);
    // No key admitted more than its bucket allows over the run (tries included: at most one
    // in ten requests, so the bound below counts waits only and tries as slack).
    const auto run = clk::now().time_since_epoch() - t0;
    const auto allowed = static_cast<int>(burst) + static_cast<int>(run / 1ms);
    int sum = 0;
    for (int k = 0; k < nkeys; ++k) {
        CAPTURE(k);
        CHECK(granted[k].load() <= allowed);
        sum += granted[k].load();
    }
    CHECK(sum + closed.load() == producers * each);
}

TEST_SUITE_END();
