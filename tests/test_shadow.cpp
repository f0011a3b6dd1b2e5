// Shadow mode against a live twin: every request goes to a limiter in shadow mode and to a
// live one of the same configuration, which is fed only what the shadow one admitted at
// once (a live acquire that has to wait is cancelled, which gives its slot back). The
// shadow limiter must count exactly the refusals and waits the live one made, admit
// everyone at once, and keep the same state. Manual clock: nothing here moves time but
// the idle gaps drawn.
#include <sluice/all_of.hpp>
#include <sluice/concurrency_limit.hpp>
#include <sluice/fixed_window.hpp>
#include <sluice/keyed.hpp>
#include <sluice/leaky_bucket.hpp>
#include <sluice/manual_clock.hpp>
#include <sluice/shm/keyed_bucket.hpp>
#include <sluice/sliding_window.hpp>
#include <sluice/sliding_window_counter.hpp>
#include <sluice/time_wheel.hpp>
#include <sluice/token_bucket.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "async_support.hpp"
#include "rng.hpp"
#include "shm_support.hpp"

namespace {

using namespace std::chrono_literals;
using clk = sluice::basic_manual_clock<struct shadow_test_tag>;
using sluice::shadow_kind;
using sluice_test::drain;

constexpr std::int64_t int64_max = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t int64_min = std::numeric_limits<std::int64_t>::min();

/// What the report callback received. The callback runs on the handler's executor, another
/// thread for use_future: writes are locked, and read once the operations are complete.
struct reports {
    std::mutex mutex;
    std::vector<sluice::shadow_event> events;
    std::vector<std::string> keys;   // each event's key, kept past the call
};

sluice::shadow_options shadow_to(reports& r)
{
    return {true, [&r](const sluice::shadow_event& e) {
                std::lock_guard lock(r.mutex);
                r.events.push_back(e);
                r.keys.emplace_back(e.key);
            }};
}

/// One request of the random sequence.
struct step {
    bool is_try = true;
    std::uint64_t n = 1;
    std::int64_t max_wait = 0;
    std::int64_t gap = 0;   // idle time before it
    std::string key;
};

// Random n (0, within the burst, beyond it, the uint64 end), max_wait (0, short, long, both
// int64 ends) and gaps (none, short, long).
step draw(sluice_test::rng& g, std::uint64_t burst, int keys)
{
    step s;
    s.is_try = g.in(0, 1) == 0;
    const auto pick = g.in(0, 99);
    s.n = pick < 2     ? 0
          : pick < 4   ? std::numeric_limits<std::uint64_t>::max()
          : pick < 12  ? static_cast<std::uint64_t>(g.in(static_cast<std::int64_t>(burst) + 1, 2 * static_cast<std::int64_t>(burst)))
                       : static_cast<std::uint64_t>(g.in(1, static_cast<std::int64_t>(burst)));
    const auto w = g.in(0, 9);
    s.max_wait = w == 0 ? int64_max : w == 1 ? int64_min : w < 4 ? 0 : w < 7 ? g.in(1, 300'000'000) : g.in(1, 5'000'000'000);
    const auto gap = g.in(0, 19);
    s.gap = gap < 8 ? 0 : gap < 18 ? g.in(1, 400'000'000) : g.in(1, 3'600'000'000'000);
    s.key = "k" + std::to_string(g.in(0, keys - 1));
    return s;
}

template <class L>
constexpr bool keyed_limiter = requires(L& l) { l.try_acquire(std::string_view(), 1); };

template <class L>
auto try_of(L& l, const std::string& key, std::uint64_t n)
{
    if constexpr (keyed_limiter<L>)
        return l.try_acquire(std::string_view(key), n);
    else
        return l.try_acquire(n);
}

template <class L, class Handler>
void acquire_of(L& l, const std::string& key, std::uint64_t n, std::int64_t max_wait, Handler&& h)
{
    if constexpr (keyed_limiter<L>)
        l.async_acquire(key, n, std::chrono::nanoseconds(max_wait), std::forward<Handler>(h));
    else
        l.async_acquire(n, std::chrono::nanoseconds(max_wait), std::forward<Handler>(h));
}

// The shadow counts the live twin's answers call for.
struct expected {
    sluice::limiter_stats::shadow_counts counts{true};
    std::uint64_t admitted = 0;   // shadow acquires answered admitted
    std::size_t events = 0;
};

void check_counts(const sluice::limiter_stats& s, const expected& e, const reports& r)
{
    CHECK(s.shadow.enabled);
    CHECK(s.shadow.try_refused == e.counts.try_refused);
    CHECK(s.shadow.refused == e.counts.refused);
    CHECK(s.shadow.waited == e.counts.waited);
    CHECK(s.shadow.total_wait == e.counts.total_wait);
    CHECK(s.admitted == e.admitted);
    CHECK(s.waited == 0);
    CHECK(s.waiting == 0);
    CHECK(r.events.size() == e.events);
}

/// Drives a limiter whose answer is a decision (rate limiters, keyed, shm) and its live
/// twin through `steps` random requests.
template <class Live, class Shadow>
void run_twins(boost::asio::io_context& io, Live& live, Shadow& shadow, const reports& r, std::uint64_t burst,
               int keys, std::uint64_t seed, int steps = 3000)
{
    sluice_test::rng g(seed);
    expected e;
    std::uint64_t waits = 0, refusals = 0, tries_refused = 0;
    for (int i = 0; i < steps; ++i) {
        const step s = draw(g, burst, keyed_limiter<Live> ? keys : 1);
        CAPTURE(i);
        CAPTURE(s.is_try);
        CAPTURE(s.n);
        CAPTURE(s.max_wait);
        if (s.gap != 0)
            sluice_test::advance<clk>(io, std::chrono::nanoseconds(s.gap));
        const auto before = clk::now();
        if (s.is_try) {
            const sluice::decision d = try_of(live, s.key, s.n);
            const sluice::decision t = try_of(shadow, s.key, s.n);
            if (s.n == 0) {
                CHECK(!t.admitted);   // invalid_count stays an error
                CHECK(t.error == sluice::error::invalid_count);
            } else {
                CHECK(t.admitted);
                CHECK(t.retry_after == 0ns);
                CHECK(!t.error);
                CHECK(t.remaining == d.remaining);   // same state, charged alike
                if (!d.admitted) {
                    ++e.counts.try_refused;
                    ++tries_refused;
                    REQUIRE(r.events.size() == e.events + 1);
                    const auto& ev = r.events.back();
                    CHECK(ev.what == shadow_kind::try_refused);
                    CHECK(ev.n == s.n);
                    CHECK(ev.wait == d.retry_after);
                    CHECK(ev.error == d.error);
                    if (keyed_limiter<Live>) CHECK(r.keys.back() == s.key);
                    ++e.events;
                }
            }
        } else {
            auto [so, sh] = sluice_test::make_recorder<clk>();
            acquire_of(shadow, s.key, s.n, s.max_wait, sh);
            boost::asio::cancellation_signal sig;
            auto [lo, lh] = sluice_test::make_recorder<clk>();
            acquire_of(live, s.key, s.n, s.max_wait, boost::asio::bind_cancellation_slot(sig.slot(), lh));
            drain(io);
            REQUIRE(so->done());   // nobody waits in shadow mode
            if (s.n == 0) {
                CHECK(*so->ec == sluice::error::invalid_count);
                CHECK(*lo->ec == sluice::error::invalid_count);
            } else {
                CHECK(so->ok());
                ++e.admitted;
                if (!lo->done()) {   // the live one waits: let it go, its slot goes back
                    ++e.counts.waited;
                    ++waits;
                    REQUIRE(r.events.size() == e.events + 1);
                    const auto& ev = r.events.back();
                    CHECK(ev.what == shadow_kind::waited);
                    CHECK(ev.wait > 0ns);
                    CHECK(ev.wait.count() <= std::max<std::int64_t>(s.max_wait, 0));
                    e.counts.total_wait = std::chrono::nanoseconds(
                        sluice::detail::sat_add(e.counts.total_wait.count(), ev.wait.count()));
                    ++e.events;
                    sig.emit(boost::asio::cancellation_type::terminal);
                    drain(io);
                    REQUIRE(lo->done());
                    CHECK(*lo->ec == boost::asio::error::operation_aborted);
                } else if (*lo->ec) {
                    ++e.counts.refused;
                    ++refusals;
                    REQUIRE(r.events.size() == e.events + 1);
                    const auto& ev = r.events.back();
                    CHECK(ev.what == shadow_kind::refused);
                    CHECK(ev.error == *lo->ec);
                    ++e.events;
                }
            }
        }
        CHECK(clk::now() == before);   // every answer came without time moving
        check_counts(shadow.stats(), e, r);
    }
    // The sequence must have met every case.
    CHECK(waits > 10);
    CHECK(refusals > 10);
    CHECK(tries_refused > 10);
    MESSAGE("waits ", waits, ", refusals ", refusals, ", tries refused ", tries_refused);
}

template <class Make>
void twins_of(Make make, std::uint64_t burst, std::uint64_t seed)
{
    boost::asio::io_context io;
    clk::set(std::chrono::nanoseconds(1'000'000'000));
    reports r;
    sluice::limiter_options live_opts;
    sluice::limiter_options shadow_opts;
    shadow_opts.shadow = shadow_to(r);
    auto live = make(io, live_opts);
    auto shadow = make(io, shadow_opts);
    run_twins(io, live, shadow, r, burst, 1, seed);
}

} // namespace

TEST_SUITE_BEGIN("shadow");

TEST_CASE("shadow: token_bucket counts the refusals and waits of its live twin, admits everyone at once")
{
    twins_of([](auto& io, const sluice::limiter_options& o) { return sluice::token_bucket<clk>(io, sluice::rate::per_second(20), 8, o); },
             8, 1);
}

TEST_CASE("shadow: leaky_bucket")
{
    twins_of([](auto& io, const sluice::limiter_options& o) {
        return sluice::leaky_bucket<clk>(io, sluice::rate::per_second(10), 50ms, o);
    }, 1, 2);
}

TEST_CASE("shadow: fixed_window, sliding_window, sliding_window_counter, time_wheel")
{
    twins_of([](auto& io, const sluice::limiter_options& o) { return sluice::fixed_window<clk>(io, 10, 1s, o); }, 10, 3);
    twins_of([](auto& io, const sluice::limiter_options& o) { return sluice::sliding_window<clk>(io, 10, 1s, o); }, 10, 4);
    twins_of([](auto& io, const sluice::limiter_options& o) {
        return sluice::sliding_window_counter<clk>(io, 10, 1s, o);
    }, 10, 5);
    twins_of([](auto& io, const sluice::limiter_options& o) { return sluice::time_wheel<clk>(io, 10, 100ms, 10, o); }, 10, 6);
}

TEST_CASE("shadow: all_of")
{
    twins_of([](auto& io, const sluice::limiter_options& o) {
        return sluice::basic_all_of<clk, boost::asio::any_io_executor, sluice::policy::gcra, sluice::policy::fixed_counter>(
            io, std::tuple{sluice::rate::per_second(20), 6}, std::tuple{30, 2s}, o);
    }, 6, 7);
}

TEST_CASE("shadow: keyed, the key in each report")
{
    boost::asio::io_context io;
    clk::set(std::chrono::nanoseconds(1'000'000'000));
    reports r;
    sluice::keyed_options live_opts{.max_keys = 64};
    sluice::keyed_options shadow_opts{.max_keys = 64};
    shadow_opts.limiter.shadow = shadow_to(r);
    sluice::keyed<sluice::token_bucket<clk>> live(io, sluice::rate::per_second(20), 5, live_opts);
    sluice::keyed<sluice::token_bucket<clk>> shadow(io, sluice::rate::per_second(20), 5, shadow_opts);
    run_twins(io, live, shadow, r, 5, 4, 8);
}

TEST_CASE("shadow: shm::keyed_bucket")
{
    boost::asio::io_context io;
    clk::set(std::chrono::nanoseconds(1'000'000'000));
    reports r;
    sluice_test::shm_name live_name("shadow-live"), shadow_name("shadow-dark");
    sluice::shm::keyed_wait_options live_waits;
    sluice::shm::keyed_wait_options shadow_waits;
    shadow_waits.limiter.shadow = shadow_to(r);
    sluice::shm::keyed_bucket<clk> live(io, live_name.str(), sluice::rate::per_second(20), 5, {}, {}, live_waits);
    sluice::shm::keyed_bucket<clk> shadow(io, shadow_name.str(), sluice::rate::per_second(20), 5, {}, {},
                                          shadow_waits);
    run_twins(io, live, shadow, r, 5, 4, 9);
}

TEST_CASE("shadow: concurrency_limit lets through what it refuses, with permits that hold no slot")
{
    boost::asio::io_context io;
    clk::set(std::chrono::nanoseconds(1'000'000'000));
    reports r;
    sluice::limiter_options so;
    so.shadow = shadow_to(r);
    using limit = sluice::concurrency_limit<clk>;
    limit live(io, 6);
    limit shadow(io, 6, so);
    using permit = limit::permit;
    std::vector<std::pair<permit, permit>> held;   // (live, shadow) admitted alike
    sluice_test::rng g(10);
    expected e;
    std::uint64_t waits = 0, refusals = 0;
    for (int i = 0; i < 3000; ++i) {
        CAPTURE(i);
        const auto op = g.in(0, 2);
        const auto n = static_cast<std::uint64_t>(g.in(1, 4));
        if (op == 0 && !held.empty()) {   // an operation ends, on both
            held.erase(held.begin() + g.in(0, static_cast<std::int64_t>(held.size()) - 1));
        } else if (op == 1) {
            permit l = live.try_acquire(n);
            permit s = shadow.try_acquire(n);
            CHECK(s);
            if (l) {
                CHECK(s.count() == n);
                held.emplace_back(std::move(l), std::move(s));
            } else {
                CHECK(s.count() == 0);   // holds nothing: its end gives nothing back
                ++e.counts.try_refused;
                ++e.events;
            }
        } else {
            const std::int64_t max_wait = g.in(0, 1) == 0 ? 0 : g.in(1, int64_max);
            std::optional<std::pair<boost::system::error_code, permit>> sa, la;
            shadow.async_acquire(n, std::chrono::nanoseconds(max_wait),
                                 [&](boost::system::error_code ec, permit p) { sa.emplace(ec, std::move(p)); });
            boost::asio::cancellation_signal sig;
            live.async_acquire(n, std::chrono::nanoseconds(max_wait),
                               boost::asio::bind_cancellation_slot(sig.slot(), [&](boost::system::error_code ec, permit p) {
                                   la.emplace(ec, std::move(p));
                               }));
            drain(io);
            REQUIRE(sa);
            CHECK(!sa->first);
            CHECK(sa->second);
            ++e.admitted;
            if (!la) {
                ++e.counts.waited;
                ++waits;
                ++e.events;
                CHECK(r.events.back().what == shadow_kind::waited);
                CHECK(sa->second.count() == 0);
                sig.emit(boost::asio::cancellation_type::terminal);
                drain(io);
                REQUIRE(la);
                CHECK(la->first == boost::asio::error::operation_aborted);
            } else if (la->first) {
                CHECK(la->first == sluice::error::timed_out);
                ++e.counts.refused;
                ++refusals;
                ++e.events;
                CHECK(r.events.back().what == shadow_kind::refused);
                CHECK(r.events.back().error == sluice::error::timed_out);
                CHECK(sa->second.count() == 0);
            } else {
                CHECK(sa->second.count() == n);
                held.emplace_back(std::move(la->second), std::move(sa->second));
            }
        }
        CHECK(shadow.in_use() == live.in_use());
        check_counts(shadow.stats(), e, r);
    }
    CHECK(waits > 10);
    CHECK(refusals > 10);
    CHECK(e.counts.try_refused > 10);
}

TEST_CASE("shadow: async_try_acquire and every completion token answer admitted")
{
    boost::asio::io_context io;
    clk::set(std::chrono::nanoseconds(1'000'000'000));
    reports r;
    sluice::limiter_options so;
    so.shadow = shadow_to(r);
    sluice::token_bucket<clk> b(io, sluice::rate::per_second(1), 1, so);
    REQUIRE(b.try_acquire().admitted);

    std::optional<sluice::decision> d;
    b.async_try_acquire(1, [&](boost::system::error_code ec, sluice::decision x) {
        CHECK(!ec);
        d = x;
    });
    CHECK(!d);   // never inside the call
    drain(io);
    REQUIRE(d);
    CHECK(d->admitted);
    auto f = b.async_acquire(1, 0ns, boost::asio::use_future);
    auto deferred = b.async_acquire(1, 1h, boost::asio::deferred);
    bool ran = false;
    std::move(deferred)([&](boost::system::error_code ec) { ran = !ec; });
    drain(io);
    CHECK(ran);
    CHECK_NOTHROW(f.get());
    auto s = b.stats();
    CHECK(s.shadow.try_refused == 1);
    CHECK(s.shadow.refused == 1);
    CHECK(s.shadow.waited == 1);
    CHECK(s.shadow.total_wait == 1s);
    CHECK(s.shadow.longest_wait == 1s);
    CHECK(s.admitted == 2);
    REQUIRE(r.events.size() == 3);   // use_future's handler runs on another thread: any order
    for (const auto& ev : r.events) {
        CHECK(ev.wait == 1s);
        CHECK((ev.what == shadow_kind::refused) == (ev.error == sluice::error::timed_out));
    }

    b.close();   // errors that are no refusal stay errors
    std::optional<boost::system::error_code> closed;
    b.async_acquire(1, 1h, [&](boost::system::error_code ec) { closed = ec; });
    drain(io);
    REQUIRE(closed);
    CHECK(*closed == sluice::error::closed);
    CHECK(b.stats().closed == 1);
}

TEST_CASE("shadow: exceeds_limit is let through, counted as a refusal")
{
    boost::asio::io_context io;
    reports r;
    sluice::limiter_options so;
    so.shadow = shadow_to(r);
    sluice::token_bucket<clk> b(io, sluice::rate::per_second(1), 4, so);
    CHECK(b.try_acquire(5).admitted);
    std::optional<boost::system::error_code> ec;
    b.async_acquire(5, 1h, [&](boost::system::error_code e) { ec = e; });
    drain(io);
    REQUIRE(ec);
    CHECK(!*ec);
    REQUIRE(r.events.size() == 2);
    CHECK(r.events[0].error == sluice::error::exceeds_limit);
    CHECK(r.events[1].what == shadow_kind::refused);
    CHECK(r.events[1].error == sluice::error::exceeds_limit);
    CHECK(b.try_acquire(4).remaining == 0);   // nothing was charged for either
}

TEST_CASE("shadow: keys as text in the report: integers and strings")
{
    boost::asio::io_context io;
    reports r;
    sluice::keyed_options o;
    o.limiter.shadow = shadow_to(r);
    sluice::keyed<sluice::token_bucket<clk>, std::int64_t> by_id(io, sluice::rate::per_second(1), 1, o);
    CHECK(by_id.try_acquire(-42).admitted);
    CHECK(by_id.try_acquire(-42).admitted);
    CHECK(by_id.try_acquire(int64_min).admitted);
    CHECK(by_id.try_acquire(int64_min).admitted);
    REQUIRE(r.keys.size() == 2);
    CHECK(r.keys[0] == "-42");
    CHECK(r.keys[1] == "-9223372036854775808");
}

TEST_CASE("shadow: bad combinations are refused at construction")
{
    boost::asio::io_context io;
    sluice::limiter_options o;
    o.shadow.enabled = true;
    o.strict = true;
    auto invalid = [](auto f) {
        try {
            f();
        } catch (const boost::system::system_error& e) {
            return e.code() == sluice::error::invalid_option;
        }
        return false;
    };
    CHECK(invalid([&] { sluice::token_bucket<clk> b(io, sluice::rate::per_second(1), 1, o); }));
    CHECK(invalid([&] { sluice::concurrency_limit<clk> c(io, 1, o); }));
    sluice::keyed_options k;
    k.limiter = o;
    CHECK(invalid([&] { sluice::keyed<sluice::token_bucket<clk>> b(io, sluice::rate::per_second(1), 1, k); }));
    sluice_test::shm_name name("shadow-strict");
    sluice::shm::keyed_wait_options w;
    w.limiter = o;
    CHECK(invalid([&] { sluice::shm::keyed_bucket<clk> b(io, name.str(), sluice::rate::per_second(1), 1, {}, {}, w); }));
    o.strict = false;   // shadow alone is fine
    CHECK_NOTHROW(sluice::token_bucket<clk>(io, sluice::rate::per_second(1), 1, o));
}

TEST_SUITE_END();

TEST_SUITE_BEGIN("shadow");

TEST_CASE("shadow: threads trying and acquiring at once: every refusal counted once, the burst admitted once")
{
    boost::asio::io_context io;
    clk::set(std::chrono::nanoseconds(1'000'000'000));
    std::atomic<std::uint64_t> reported{0};
    sluice::limiter_options o;
    o.shadow = {true, [&](const sluice::shadow_event&) { reported.fetch_add(1, std::memory_order_relaxed); }};
    sluice::token_bucket<clk> b(io, sluice::rate::per_second(1), 100, o);   // the clock stands still
    constexpr int threads = 4, each = 5000;
    std::atomic<std::uint64_t> tries_refused{0}, completed{0};
    auto guard = boost::asio::make_work_guard(io);
    std::vector<std::thread> runners;
    for (int t = 0; t < 2; ++t) runners.emplace_back([&] { io.run(); });
    std::vector<std::thread> callers;
    for (int t = 0; t < threads; ++t) {
        callers.emplace_back([&, t] {
            for (int i = 0; i < each; ++i) {
                if ((i + t) % 2 == 0) {
                    const sluice::decision d = b.try_acquire();
                    if (!d.admitted) tries_refused.fetch_add(1, std::memory_order_relaxed);
                } else {
                    b.async_acquire(1, (i % 4 == 1) ? 0ns : 1h, [&](boost::system::error_code ec) {
                        CHECK(!ec);
                        completed.fetch_add(1, std::memory_order_relaxed);
                    });
                }
            }
        });
    }
    for (auto& c : callers) c.join();
    guard.reset();
    for (auto& r : runners) r.join();
    CHECK(tries_refused == 0);   // every try answered admitted
    CHECK(completed == threads * each / 2);
    const auto s = b.stats();
    // 100 admitted by the limit, the rest let through: each counted once, reported once.
    CHECK(s.shadow.try_refused + s.shadow.refused + s.shadow.waited == threads * each - 100);
    CHECK(reported == threads * each - 100);
    CHECK(s.admitted == threads * each / 2);
    CHECK(s.shadow.waited > 0);
    CHECK(s.shadow.refused > 0);
    CHECK(!b.try_acquire(1).error);
    CHECK(b.stats().shadow.try_refused == s.shadow.try_refused + 1);   // still empty: nothing more was charged
}

TEST_SUITE_END();
