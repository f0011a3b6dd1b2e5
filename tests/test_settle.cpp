// Settle and peek on every local rate limiter, against a model: a limiter whose admissions
// were settled must decide exactly as one that was asked for the settled costs, and a peek
// must change nothing. Time is driven by hand (two manual clocks: the limiter's and the
// model's replay), no sleeps.
#include <sluice/admission.hpp>
#include <sluice/all_of.hpp>
#include <sluice/detail/base/wait_traits.hpp>
#include <sluice/fixed_window.hpp>
#include <sluice/keyed.hpp>
#include <sluice/leaky_bucket.hpp>
#include <sluice/limiter.hpp>
#include <sluice/manual_clock.hpp>
#include <sluice/sliding_window.hpp>
#include <sluice/sliding_window_counter.hpp>
#include <sluice/time_wheel.hpp>
#include <sluice/token_bucket.hpp>

#include <boost/asio/deferred.hpp>
#include <boost/asio/io_context.hpp>
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "async_support.hpp"
#include "rng.hpp"

using namespace std::chrono_literals;
using sluice::admission;
using sluice::decision;
using sluice::error;
using sluice::rate;

namespace {

struct a_tag {};
struct b_tag {};
using clock_a = sluice::basic_manual_clock<a_tag>;   // the limiter under test
using clock_b = sluice::basic_manual_clock<b_tag>;   // the model's replay

// One limiter type per policy, with its scale of time and its largest request.
struct token_bucket_case {
    template <class C>
    static auto make(boost::asio::io_context& io) { return sluice::token_bucket<C>(io, rate::per_second(100), 20); }
    static constexpr std::int64_t span = 200'000'000;   // a full refill
    static constexpr std::uint64_t limit = 20;
    static constexpr const char* name = "token_bucket";
    static constexpr std::uint64_t least = 0;   // the lowest settled cost drawn
    // GCRA: exact for the newest admission only (see gcra::settle).
    static constexpr bool newest_only = true;
    static constexpr bool debt_any_order = true;
};

struct leaky_bucket_case {
    template <class C>
    static auto make(boost::asio::io_context& io) { return sluice::leaky_bucket<C>(io, rate::per_second(100), 30ms); }
    static constexpr std::int64_t span = 40'000'000;
    static constexpr std::uint64_t limit = 1;
    static constexpr const char* name = "leaky_bucket";
    // A grant that restarted the schedule (after idleness) stays restarted when settled
    // to 0: the state it came from is gone (see gcra::settle).
    static constexpr std::uint64_t least = 1;
    // GCRA: exact for the newest admission only (see gcra::settle).
    static constexpr bool newest_only = true;
    static constexpr bool debt_any_order = true;
};

struct fixed_window_case {
    template <class C>
    static auto make(boost::asio::io_context& io) { return sluice::fixed_window<C>(io, 20, 100ms); }
    static constexpr std::int64_t span = 100'000'000;
    static constexpr std::uint64_t limit = 20;
    static constexpr const char* name = "fixed_window";
    static constexpr std::uint64_t least = 0;   // the lowest settled cost drawn
    static constexpr bool newest_only = false;
    static constexpr bool debt_any_order = true;
};

struct sliding_window_case {
    template <class C>
    static auto make(boost::asio::io_context& io) { return sluice::sliding_window<C>(io, 20, 100ms); }
    static constexpr std::int64_t span = 100'000'000;
    static constexpr std::uint64_t limit = 20;
    static constexpr const char* name = "sliding_window";
    static constexpr std::uint64_t least = 0;   // the lowest settled cost drawn
    static constexpr bool newest_only = false;
    // The log keeps `limit` stamps: a debt beyond them is forgotten, and a later settle
    // lower of another admission gives back from what is left (documented).
    static constexpr bool debt_any_order = false;
};

struct sliding_window_counter_case {
    template <class C>
    static auto make(boost::asio::io_context& io) { return sluice::sliding_window_counter<C>(io, 20, 100ms); }
    static constexpr std::int64_t span = 100'000'000;
    static constexpr std::uint64_t limit = 20;
    static constexpr const char* name = "sliding_window_counter";
    static constexpr std::uint64_t least = 0;   // the lowest settled cost drawn
    static constexpr bool newest_only = false;
    static constexpr bool debt_any_order = true;
};

struct time_wheel_case {
    template <class C>
    static auto make(boost::asio::io_context& io) { return sluice::time_wheel<C>(io, 20, 10ms, 10); }
    static constexpr std::int64_t span = 100'000'000;
    static constexpr std::uint64_t limit = 20;
    static constexpr const char* name = "time_wheel";
    static constexpr std::uint64_t least = 0;   // the lowest settled cost drawn
    static constexpr bool newest_only = false;
    static constexpr bool debt_any_order = true;
};

struct all_of_case {
    template <class C>
    static auto make(boost::asio::io_context& io)
    {
        return sluice::basic_all_of<C, boost::asio::any_io_executor, sluice::policy::gcra, sluice::policy::fixed_counter>(
            io, std::tuple{rate::per_second(200), 20}, std::tuple{30, 100ms});
    }
    static constexpr std::int64_t span = 100'000'000;
    static constexpr std::uint64_t limit = 20;
    static constexpr const char* name = "all_of";
    static constexpr std::uint64_t least = 0;   // the lowest settled cost drawn
    // GCRA: exact for the newest admission only (see gcra::settle).
    static constexpr bool newest_only = true;
    static constexpr bool debt_any_order = true;
};

// One key of a keyed limiter, as the model run drives a single limiter.
template <class L>
struct one_key {
    L l;
    static constexpr std::string_view key = "user:1";
    decision peek(std::uint64_t n) const { return l.peek(key, n); }
    decision try_acquire(std::uint64_t n) { return l.try_acquire(key, n); }
    admission try_admit(std::uint64_t n) { return l.try_admit(key, n); }
    boost::system::error_code settle(admission&& a, std::uint64_t actual) { return l.settle(std::move(a), actual); }
};

// A keyed token bucket: the compact path (one word per key).
struct keyed_bucket_case {
    template <class C>
    static auto make(boost::asio::io_context& io)
    {
        using L = sluice::keyed<sluice::token_bucket<C>>;
        return one_key<L>{L(io, rate::per_second(100), 20)};
    }
    static constexpr std::int64_t span = 200'000'000;
    static constexpr std::uint64_t limit = 20;
    static constexpr const char* name = "keyed token_bucket";
    static constexpr bool newest_only = true;
    static constexpr bool debt_any_order = true;
    static constexpr std::uint64_t least = 0;
};

// A keyed sliding window counter: a whole policy per key.
struct keyed_counter_case {
    template <class C>
    static auto make(boost::asio::io_context& io)
    {
        using L = sluice::keyed<sluice::sliding_window_counter<C>>;
        return one_key<L>{L(io, 20, 100ms)};
    }
    static constexpr std::int64_t span = 100'000'000;
    static constexpr std::uint64_t limit = 20;
    static constexpr const char* name = "keyed sliding_window_counter";
    static constexpr bool newest_only = false;
    static constexpr bool debt_any_order = true;
    static constexpr std::uint64_t least = 0;
};

bool same(const decision& x, const decision& y)
{
    return x.admitted == y.admitted && x.retry_after == y.retry_after && x.remaining == y.remaining &&
           x.reset_after == y.reset_after && x.error == y.error;
}

// One admission of the history: when, what was asked, and what it costs in the end.
struct event {
    std::int64_t at;
    std::uint64_t asked;
    std::uint64_t cost;
};

// The model: a fresh limiter of the same configuration on its own clock, asked at each
// admission's instant for its final cost (a debt beyond what it could admit: asked, then
// settled at once, the definition the directed tests pin down). A lower cost leaves the
// model less loaded than the limiter was in between, so it admits whatever the limiter did.
template <class Case>
auto replay(boost::asio::io_context& io, const std::vector<event>& history)
{
    auto b = Case::template make<clock_b>(io);
    for (const event& e : history) {
        clock_b::set(std::chrono::nanoseconds{e.at});
        if (e.cost == 0)
            continue;
        if (e.cost <= e.asked || b.peek(e.cost).admitted) {
            decision d = b.try_acquire(e.cost);
            CHECK(d.admitted);
        } else {
            admission a = b.try_admit(e.asked);
            REQUIRE(a);
            CHECK_FALSE(b.settle(std::move(a), e.cost));
        }
    }
    return b;
}

template <class L>
std::vector<decision> probe(L& l, std::uint64_t limit)
{
    std::vector<decision> out;
    for (std::uint64_t n : {std::uint64_t{1}, (limit + 1) / 2, limit})
        out.push_back(l.peek(n));
    return out;
}

template <class Case>
void model_run(std::uint64_t seed, std::int64_t start)
{
    const std::string name = Case::name;
    CAPTURE(name);
    CAPTURE(seed);
    CAPTURE(start);
    sluice_test::rng rng(seed);
    boost::asio::io_context io;
    clock_a::set(std::chrono::nanoseconds{start});
    auto a = Case::template make<clock_a>(io);
    std::vector<event> history;
    std::vector<std::pair<admission, std::size_t>> open;   // tickets not settled yet
    auto now = [] { return clock_a::now().time_since_epoch().count(); };

    auto compare = [&] {
        auto b = replay<Case>(io, history);
        const std::int64_t t = now();
        for (std::int64_t ahead : {std::int64_t{0}, Case::span / 3, Case::span}) {
            clock_a::set(std::chrono::nanoseconds{t + ahead});
            clock_b::set(std::chrono::nanoseconds{t + ahead});
            auto pa = probe(a, Case::limit);
            auto pb = probe(b, Case::limit);
            for (std::size_t i = 0; i < pa.size(); ++i) {
                CAPTURE(ahead);
                CAPTURE(i);
                CHECK(same(pa[i], pb[i]));
            }
        }
        clock_a::set(std::chrono::nanoseconds{t});
    };

    for (int step = 0; step < 400; ++step) {
        const int op = static_cast<int>(rng.below(100));
        if (op < 35) {
            std::uint64_t n = 1 + rng.below(Case::limit);
            // A peek answers what the try is about to: the same decision, nothing taken.
            decision before = a.peek(n);
            CHECK(same(before, a.peek(n)));
            admission t = a.try_admit(n);
            CHECK(t.answer().admitted == before.admitted);
            CHECK(same(t.answer(), before));
            if (t) {
                CHECK(t.cost() == n);
                CHECK(t.admitted_at() == now());
                history.push_back({now(), n, n});
                open.emplace_back(std::move(t), history.size() - 1);
            } else {
                CHECK(t.cost() == 0);
                CHECK(a.settle(std::move(t), n) == error::not_admitted);
            }
        } else if (op < 60 && !open.empty() && (!Case::newest_only || open.back().second + 1 == history.size())) {
            std::size_t i = Case::newest_only ? open.size() - 1 : rng.below(open.size());
            auto [t, h] = std::move(open[i]);
            open.erase(open.begin() + static_cast<std::ptrdiff_t>(i));
            const std::uint64_t asked = history[h].asked;
            // Higher only for the newest admission: the model charges a debt at the
            // admission's instant, so no admission may have been decided in between.
            const bool up = h + 1 == history.size() && (Case::debt_any_order || open.empty()) && rng.chance(40);
            const std::uint64_t actual = up ? asked + 1 + rng.below(Case::limit)
                                            : Case::least + rng.below(asked + 1 - Case::least);
            CHECK_FALSE(a.settle(std::move(t), actual));
            CHECK(t.settled());
            CHECK_FALSE(t);
            CHECK(a.settle(std::move(t), actual) == error::already_settled);
            history[h].cost = actual;
        } else if (op < 75) {
            clock_a::advance(std::chrono::nanoseconds{rng.in(0, Case::span + Case::span / 2)});
        } else if (op < 90) {
            clock_a::advance(std::chrono::nanoseconds{rng.in(0, Case::span / 20)});
        } else {
            compare();
        }
    }
    compare();
}

template <class Case>
void model_runs()
{
    constexpr std::int64_t lo = std::numeric_limits<std::int64_t>::min();
    constexpr std::int64_t hi = std::numeric_limits<std::int64_t>::max();
    model_run<Case>(1, 0);
    model_run<Case>(2, 1'000'000'000'000);
    model_run<Case>(3, lo + 1);                        // the clock's first instant
    model_run<Case>(4, hi - 400 * Case::span * 2);     // ends near its last
}

} // namespace

static_assert(sluice::settling_limiter<sluice::token_bucket<clock_a>>);
static_assert(sluice::settling_limiter<sluice::leaky_bucket<clock_a>>);
static_assert(sluice::settling_limiter<sluice::fixed_window<clock_a>>);
static_assert(sluice::settling_limiter<sluice::sliding_window<clock_a>>);
static_assert(sluice::settling_limiter<sluice::sliding_window_counter<clock_a>>);
static_assert(sluice::settling_limiter<sluice::time_wheel<clock_a>>);
static_assert(sluice::settling_limiter<sluice::all_of<sluice::policy::gcra, sluice::policy::sliding_log>>);
static_assert(sluice::settling_limiter<sluice::keyed<sluice::token_bucket<clock_a>>, std::string_view>);
static_assert(sluice::settling_limiter<sluice::keyed<sluice::fixed_window<clock_a>>, std::string>);

TEST_SUITE_BEGIN("settle");

TEST_CASE_TEMPLATE("a settled admission decides as one asked for the settled cost; peek takes nothing", Case,
                   token_bucket_case, leaky_bucket_case, fixed_window_case, sliding_window_case,
                   sliding_window_counter_case, time_wheel_case, all_of_case, keyed_bucket_case, keyed_counter_case)
{
    model_runs<Case>();
}

TEST_CASE("keyed: a ticket keeps its key; an evicted key settles lower as nothing, higher as a debt from now")
{
    boost::asio::io_context io;
    clock_a::set(std::chrono::nanoseconds{0});
    sluice::keyed<sluice::token_bucket<clock_a>> k(io, rate::per_second(100), 20);
    admission t = k.try_admit(std::string_view("a"), 20);
    REQUIRE(t);
    CHECK(t.key() == "a");
    CHECK_FALSE(k.peek(std::string_view("a"), 1).admitted);
    CHECK(k.peek(std::string_view("b"), 20).admitted);   // a key never seen: a new one
    CHECK_FALSE(k.contains(std::string_view("b")));       // ...and not made
    CHECK_FALSE(k.settle(std::move(t), 10));
    CHECK(k.peek(std::string_view("a"), 10).admitted);
    CHECK_FALSE(k.peek(std::string_view("a"), 11).admitted);

    admission u = k.try_admit(std::string_view("c"), 5);
    admission v = k.try_admit(std::string_view("d"), 5);
    clock_a::advance(1s);
    k.sweep();
    REQUIRE_FALSE(k.contains(std::string_view("c")));
    CHECK_FALSE(k.settle(std::move(u), 0));
    CHECK_FALSE(k.contains(std::string_view("c")));
    CHECK_FALSE(k.settle(std::move(v), 45));   // 40 of debt, from now: 400 ms
    CHECK(k.contains(std::string_view("d")));
    CHECK(k.peek(std::string_view("d"), 1).retry_after == 210ms);

    sluice::keyed<sluice::token_bucket<clock_a>> other(io, rate::per_second(100), 20);
    admission w = k.try_admit(std::string_view("e"), 1);
    CHECK(other.settle(std::move(w), 0) == error::foreign_admission);
}

TEST_CASE_TEMPLATE("settling higher than the limit is a debt later callers wait for", Case, token_bucket_case,
                   fixed_window_case, sliding_window_case, sliding_window_counter_case, time_wheel_case, all_of_case)
{
    boost::asio::io_context io;
    clock_a::set(std::chrono::nanoseconds{0});
    auto a = Case::template make<clock_a>(io);
    admission t = a.try_admit(1);
    REQUIRE(t);
    // Ten times the limit: more than could ever be asked for at once, never refused.
    CHECK_FALSE(a.settle(std::move(t), 10 * Case::limit));
    decision d = a.peek(1);
    CHECK_FALSE(d.admitted);
    CHECK(d.retry_after > 0ns);
    CHECK(d.remaining == 0);
}

TEST_CASE("token bucket: a debt is repaid at the rate")
{
    boost::asio::io_context io;
    clock_a::set(std::chrono::nanoseconds{0});
    auto a = token_bucket_case::make<clock_a>(io);   // 100/s, burst 20
    admission t = a.try_admit(20);
    REQUIRE(t);
    CHECK_FALSE(a.settle(std::move(t), 50));   // 30 permits of debt: 300 ms, then one refills
    CHECK(a.peek(1).retry_after == 310ms);
    clock_a::advance(310ms);
    CHECK(a.peek(1).admitted);
    CHECK_FALSE(a.peek(2).admitted);
}

TEST_CASE("settling to zero gives everything back")
{
    boost::asio::io_context io;
    clock_a::set(std::chrono::nanoseconds{0});
    auto a = fixed_window_case::make<clock_a>(io);
    admission t = a.try_admit(20);
    REQUIRE(t);
    CHECK_FALSE(a.peek(1).admitted);
    CHECK_FALSE(a.settle(std::move(t), 0));
    CHECK(a.peek(20).admitted);
    CHECK(a.peek(20).remaining == 0);
}

TEST_CASE("a ticket settles only on its own limiter, once, and not after a reconfiguration or close")
{
    boost::asio::io_context io;
    clock_a::set(std::chrono::nanoseconds{0});
    auto a = token_bucket_case::make<clock_a>(io);
    auto b = token_bucket_case::make<clock_a>(io);
    admission t = a.try_admit(5);
    REQUIRE(t);
    CHECK(b.settle(std::move(t), 1) == error::foreign_admission);
    CHECK(t);   // refused: still a's to settle
    CHECK_FALSE(a.settle(std::move(t), 1));
    CHECK(a.settle(std::move(t), 1) == error::already_settled);
    admission empty;
    CHECK(a.settle(std::move(empty), 1) == error::not_admitted);

    admission moved = a.try_admit(1);
    admission taker(std::move(moved));
    CHECK(a.settle(std::move(moved), 0) == error::already_settled);

    a.set_rate(rate::per_second(50));
    CHECK(a.settle(std::move(taker), 0) == error::stale_admission);

    admission u = a.try_admit(1);
    REQUIRE(u);
    a.close();
    CHECK(a.settle(std::move(u), 0) == error::closed);
}

TEST_CASE("settling lower lets a queued waiter in: its slot moves up (GCRA), the head is retried (windows)")
{
    boost::asio::io_context io;
    clock_a::set(std::chrono::nanoseconds{0});
    {
        auto a = token_bucket_case::make<clock_a>(io);   // 100/s, burst 20
        admission t = a.try_admit(20);
        REQUIRE(t);
        auto [out, rec] = sluice_test::make_recorder<clock_a>();
        a.async_acquire(5, 1s, rec);   // 50 ms away
        sluice_test::drain(io);
        CHECK_FALSE(out->done());
        CHECK_FALSE(a.settle(std::move(t), 15));   // 5 back: the waiter's slot is now
        sluice_test::drain(io);
        CHECK(out->ok());
    }
    {
        auto a = fixed_window_case::make<clock_a>(io);
        admission t = a.try_admit(20);
        REQUIRE(t);
        auto [out, rec] = sluice_test::make_recorder<clock_a>();
        a.async_acquire(5, 1s, rec);
        sluice_test::drain(io);
        CHECK_FALSE(out->done());
        // The waiter is ahead of any try: a peek says so too.
        CHECK_FALSE(a.peek(1).admitted);
        CHECK_FALSE(a.settle(std::move(t), 10));
        sluice_test::drain(io);
        CHECK(out->ok());
        CHECK(a.peek(5).admitted);
        CHECK_FALSE(a.peek(6).admitted);
    }
}

TEST_CASE("the asynchronous verbs: async_try_admit, async_admit, async_settle, async_peek")
{
    boost::asio::io_context io;
    clock_a::set(std::chrono::nanoseconds{0});
    auto a = token_bucket_case::make<clock_a>(io);
    std::optional<admission> got;
    a.async_try_admit(20, [&](boost::system::error_code ec, admission t) {
        CHECK_FALSE(ec);
        got.emplace(std::move(t));
    });
    CHECK_FALSE(got);   // never inside the call
    sluice_test::drain(io);
    REQUIRE(got);
    REQUIRE(*got);

    std::optional<admission> waited;
    a.async_admit(10, 1s, [&](boost::system::error_code ec, admission t) {
        CHECK_FALSE(ec);
        waited.emplace(std::move(t));
    });
    sluice_test::drain(io);
    CHECK_FALSE(waited);
    sluice_test::advance<clock_a>(io, 100ms);
    REQUIRE(waited);
    CHECK(*waited);
    CHECK(waited->cost() == 10);
    CHECK(waited->admitted_at() == 100'000'000);

    std::optional<boost::system::error_code> settled;
    a.async_settle(std::move(*got), 0, [&](boost::system::error_code ec) { settled = ec; });
    CHECK_FALSE(settled);
    sluice_test::drain(io);
    REQUIRE(settled);
    CHECK_FALSE(*settled);

    std::optional<decision> peeked;
    a.async_peek(20, [&](boost::system::error_code ec, decision d) {
        CHECK_FALSE(ec);
        peeked = d;
    });
    sluice_test::drain(io);
    REQUIRE(peeked);
    CHECK(same(*peeked, a.peek(20)));
    CHECK(peeked->admitted);

    // Deferred: nothing runs until started.
    auto op = a.async_settle(std::move(*waited), 20, boost::asio::deferred);
    std::optional<boost::system::error_code> late;
    std::move(op)([&](boost::system::error_code ec) { late = ec; });
    sluice_test::drain(io);
    REQUIRE(late);
    CHECK_FALSE(*late);

    a.close();
    std::optional<boost::system::error_code> closed;
    a.async_peek(1, [&](boost::system::error_code ec, decision) { closed = ec; });
    sluice_test::drain(io);
    REQUIRE(closed);
    CHECK(*closed == error::closed);
}

// Threads admitting 2 and settling 1 at once, the clock stopped: every admission nets one
// permit, so what is left is the burst less the admissions, whatever the interleaving.
template <class L, class... Key>
void conserve(L& l, std::uint64_t burst, const Key&... key)
{
    std::atomic<std::uint64_t> admitted{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < 2; ++i)
        threads.emplace_back([&] {
            for (int k = 0; k < 20000; ++k) {
                admission t = l.try_admit(key..., 2);
                if (!t) continue;
                admitted.fetch_add(1);
                CHECK_FALSE(l.settle(std::move(t), 1));
                (void)l.peek(key..., 1);
            }
        });
    for (auto& t : threads) t.join();
    CHECK(admitted.load() >= burst - 1);
    CHECK(l.peek(key..., 1).remaining + 1 == burst - admitted.load());
}

TEST_CASE("settling from several threads at once loses nothing and counts nothing twice")
{
    boost::asio::io_context io;
    clock_a::set(std::chrono::nanoseconds{0});
    {
        sluice::token_bucket<clock_a> b(io, rate::per_second(1), 5000);
        conserve(b, 5000);
    }
    {
        sluice::fixed_window<clock_a> w(io, 5000, 1s);
        conserve(w, 5000);
    }
    {
        sluice::keyed<sluice::token_bucket<clock_a>> k(io, rate::per_second(1), 5000);
        conserve(k, 5000, std::string_view("k"));
    }
}

TEST_SUITE_END();
