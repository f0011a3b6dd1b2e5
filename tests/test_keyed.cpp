// Keyed limiters on the manual clock: per-key decisions equal a single policy's, only idle
// keys are evicted, the store stays at its cap under a flood of new keys, overrides,
// overflow, waiting per key, shutdown. Also the eviction wheel on its own.
#include "async_support.hpp"
#include "rng.hpp"

#include <sluice/detail/store/idle_wheel.hpp>
#include <sluice/keyed.hpp>
#include <sluice/time_wheel.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/ip/address_v4.hpp>
#include <boost/asio/ip/address_v6.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <new>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using clk = sluice::basic_manual_clock<struct keyed_tag>;
using sluice_test::advance;
using sluice_test::drain;
using sluice_test::ns;
using sluice_test::outcome;

// Counts allocations made by this thread while `counting` is set. GCC cannot see that
// the replaced operator new and operator delete are a pair.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
namespace {
thread_local bool counting = false;
thread_local long allocations = 0;
} // namespace

void* operator new(std::size_t n)
{
    if (counting) ++allocations;
    if (void* p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace {

constexpr auto t0 = std::chrono::seconds(1000);

template <class L>
using keyed_of = sluice::keyed<L>;

sluice::keyed_options small_wheel(std::size_t max_keys = 100'000, std::size_t shards = 4)
{
    sluice::keyed_options o;
    o.max_keys = max_keys;
    o.shards = shards;
    o.tick = 1ms;
    o.wheel_slots = 64;
    return o;
}

// One configuration per limiter kind: the keyed limiter and the bare policy it must equal.
struct token_bucket_kind {
    using limiter = sluice::token_bucket<clk>;
    static constexpr const char* name = "token_bucket";
    static auto make(boost::asio::io_context& io, const sluice::keyed_options& o)
    {
        return sluice::keyed<limiter>(io, sluice::rate::per_second(50), 5, o);
    }
    static auto policy() { return std::make_unique<sluice::policy::gcra>(sluice::rate::per_second(50), 5); }
};

struct leaky_bucket_kind {
    using limiter = sluice::leaky_bucket<clk>;
    static constexpr const char* name = "leaky_bucket";
    static auto make(boost::asio::io_context& io, const sluice::keyed_options& o)
    {
        return sluice::keyed<limiter>(io, sluice::rate::per_second(40), 30ms, o);
    }
    static auto policy() { return std::make_unique<sluice::policy::gcra>(sluice::rate::per_second(40), 1, 30ms); }
};

struct fixed_window_kind {
    using limiter = sluice::fixed_window<clk>;
    static constexpr const char* name = "fixed_window";
    static auto make(boost::asio::io_context& io, const sluice::keyed_options& o)
    {
        return sluice::keyed<limiter>(io, 7, 100ms, o);
    }
    static auto policy() { return std::make_unique<sluice::policy::fixed_counter>(7, 100ms); }
};

struct sliding_window_kind {
    using limiter = sluice::sliding_window<clk>;
    static constexpr const char* name = "sliding_window";
    static auto make(boost::asio::io_context& io, const sluice::keyed_options& o)
    {
        return sluice::keyed<limiter>(io, 7, 100ms, o);
    }
    static auto policy() { return std::make_unique<sluice::policy::sliding_log>(7, 100ms); }
};

struct sliding_window_counter_kind {
    using limiter = sluice::sliding_window_counter<clk>;
    static constexpr const char* name = "sliding_window_counter";
    static auto make(boost::asio::io_context& io, const sluice::keyed_options& o)
    {
        return sluice::keyed<limiter>(io, 7, 100ms, o);
    }
    static auto policy() { return std::make_unique<sluice::policy::weighted_counter>(7, 100ms); }
};

struct time_wheel_kind {
    using limiter = sluice::time_wheel<clk>;
    static constexpr const char* name = "time_wheel";
    static auto make(boost::asio::io_context& io, const sluice::keyed_options& o)
    {
        return sluice::keyed<limiter>(io, 7, 20ms, 5u, o);
    }
    static auto policy() { return std::make_unique<sluice::policy::slot_ring>(7, 20ms, 5); }
};

void check_same(const sluice::decision& got, const sluice::decision& want)
{
    CHECK(got.admitted == want.admitted);
    CHECK(got.retry_after == want.retry_after);
    CHECK(got.remaining == want.remaining);
    CHECK(got.reset_after == want.reset_after);
    CHECK(got.error == want.error);
}

struct wheel_node {
    std::int64_t idle = 0;   // when it may go
    int visits = 0;
    bool gone = false;
};


// Keys of other types than strings, made from a number, for the tests that run every type.
template <class Key>
Key key_of(std::uint64_t i)
{
    if constexpr (std::is_same_v<Key, std::string>) {
        // Around the inline limit of 15 characters: short, exactly 15, 16 and long keys.
        std::string k(i % 4 == 0 ? 3 : i % 4 == 1 ? 15 : i % 4 == 2 ? 16 : 40, 'k');
        k.replace(0, std::to_string(i).size(), std::to_string(i));
        return k;
    } else if constexpr (std::is_same_v<Key, boost::asio::ip::address_v4>) {
        return Key(static_cast<std::uint32_t>(0xC0A8'0000u + i));
    } else if constexpr (std::is_same_v<Key, boost::asio::ip::address_v6>) {
        typename Key::bytes_type b{};
        b[0] = 0x20;
        b[1] = 0x01;
        for (int j = 0; j < 8; ++j) b[15 - j] = static_cast<unsigned char>(i >> (8 * j));
        return Key(b);
    } else {
        return Key((Key(0x2001'0db8) << 48 << 48) | Key(i));   // 128-bit: beyond 64 bits
    }
}

// A hash with many collisions: every key of a key type lands on one of four values.
struct four_hashes {
    std::size_t operator()(std::uint64_t k) const noexcept { return k % 4; }
};

} // namespace

TEST_SUITE_BEGIN("keyed");

__extension__ typedef unsigned __int128 u128;

TEST_CASE_TEMPLATE("keyed: keys of every type decide exactly as their own policy, through evictions", Key,
                   std::string, std::uint64_t, boost::asio::ip::address_v4, boost::asio::ip::address_v6, u128)
{
    boost::asio::io_context io;
    clk::set(t0);
    sluice::keyed<sluice::token_bucket<clk>, Key> keyed(io, sluice::rate::per_second(50), 5, small_wheel(300));
    std::map<std::uint64_t, std::unique_ptr<sluice::policy::gcra>> model;
    sluice_test::rng rng{7};
    for (int step = 0; step < 30'000; ++step) {
        std::uint64_t r = rng() % 1000;
        clk::advance(std::chrono::nanoseconds(r < 900 ? rng() % 2'000'000 : rng() % 300'000'000));
        std::int64_t now = sluice_test::now_ns<clk>();
        std::uint64_t i = rng() % 4 == 0 ? rng() % 200 : rng() % 8;
        std::uint64_t n = 1 + rng() % 3;
        auto& p = model[i];
        if (!p) p = std::make_unique<sluice::policy::gcra>(sluice::rate::per_second(50), 5);
        check_same(keyed.try_acquire(key_of<Key>(i), n), p->try_acquire(n, now));
    }
    auto st = keyed.stats();
    CHECK(st.keys.evicted > 500);
    CHECK(st.keys.tracked == st.keys.created - st.keys.evicted);
    CHECK(st.keys.overflow_requests == 0);
    clk::advance(1s);
    keyed.sweep();
    CHECK(keyed.stats().keys.tracked == 0);   // every key idle: all gone (long keys' heap copies too)
}

TEST_CASE("keyed: long string keys (beyond 15 characters) are stored apart and behave as short ones")
{
    boost::asio::io_context io;
    clk::set(t0);
    sluice::keyed<sluice::token_bucket<clk>> k(io, sluice::rate::per_second(1), 2, small_wheel());
    std::string long_key(100, 'x'), fifteen(15, 'y'), sixteen(16, 'y');
    for (const std::string& key : {long_key, fifteen, sixteen}) {
        CAPTURE(key);
        CHECK(k.try_acquire(key, 2).admitted);
        CHECK(!k.try_acquire(std::string_view(key)).admitted);
        CHECK(k.contains(key));
    }
    CHECK(!k.contains(std::string(99, 'x')));   // a prefix is another key
    CHECK(!k.contains(std::string(15, 'x')));
    CHECK(k.stats().keys.tracked == 3);
    k.set_override(long_key, sluice::rate::per_second(100), 1);
    clk::advance(10ms);
    CHECK(k.try_acquire(long_key).admitted);   // the override refilled it
    clk::advance(2s);
    k.sweep();
    CHECK(k.stats().keys.tracked == 0);
}

TEST_CASE("keyed: keys of equal hashes are told apart and each is evicted once idle")
{
    boost::asio::io_context io;
    clk::set(t0);
    sluice::keyed<sluice::token_bucket<clk>, std::uint64_t, four_hashes> k(io, sluice::rate::per_second(1), 2,
                                                                           small_wheel(1000, 1));
    for (std::uint64_t i = 0; i < 100; ++i) {
        CHECK(k.try_acquire(i, 2).admitted);
        CHECK(!k.try_acquire(i).admitted);
    }
    CHECK(k.stats().keys.tracked == 100);
    // Half the keys stay throttled (each permit taken as it comes: never full again); the
    // others go idle.
    for (int t = 0; t < 30; ++t) {
        clk::advance(100ms);
        for (std::uint64_t i = 0; i < 100; i += 2) k.try_acquire(i);
        k.sweep();
    }
    for (std::uint64_t i = 0; i < 100; ++i) {
        CAPTURE(i);
        CHECK(k.contains(i) == (i % 2 == 0));
    }
    CHECK(k.stats().keys.evicted == 50);
    clk::advance(3s);
    k.sweep();
    CHECK(k.stats().keys.tracked == 0);
    CHECK(k.stats().keys.evicted == 100);
}

TEST_CASE("keyed: the compact state decides as policy::gcra, also at the ends of the clock, and moves to it exactly")
{
    // Buckets small and huge (one permit a year, a burst of 200 years), leaky ones with
    // slack; times near 0 and near both ends of int64, stepping back and forth.
    struct config {
        sluice::rate r;
        std::uint64_t burst;
        std::chrono::nanoseconds slack;
    };
    const config configs[] = {{sluice::rate::per_second(50), 5, 0ns},
                              {sluice::rate::per_second(40), 1, 30ms},
                              {sluice::rate::every(std::chrono::hours(24 * 365)), 200, 0ns},
                              {sluice::rate::every(1ns), 1000, 0ns}};
    const std::int64_t bases[] = {0, 1'000'000'000, sluice::detail::min_ns + 5, sluice::detail::max_ns - 5'000'000'000,
                                  sluice::detail::min_ns / 2};
    sluice_test::rng rng{11};
    int widened = 0;
    for (const config& c : configs) {
        for (std::int64_t base : bases) {
            sluice::policy::gcra model(c.r, c.burst, c.slack);
            sluice::detail::compact_state<sluice::policy::gcra> compact(model);
            std::uint64_t word = compact.fresh;
            sluice::policy::gcra shadow(c.r, c.burst, c.slack);   // the compact key moved to a whole policy
            bool wide = false;
            std::int64_t now = base;
            for (int step = 0; step < 3000; ++step) {
                std::int64_t d = static_cast<std::int64_t>(rng() % 40'000'000) - 10'000'000;   // back up to 10 ms
                now = sluice::detail::sat_add(now, d);
                std::uint64_t n = 1 + rng() % 3;
                sluice::decision want = model.try_acquire(n, now);
                sluice::decision got;
                if (!wide) {
                    if (auto r = compact.try_acquire(word, n, now)) {
                        got = *r;
                        CHECK(compact.idle_at(word) == model.idle_at(now));
                    } else {
                        compact.restore(shadow, word);
                        CHECK(shadow.empty_at() == (word == compact.fresh ? sluice::detail::min_ns
                                                                          : static_cast<std::int64_t>(word)));
                        wide = true;
                        ++widened;
                    }
                }
                if (wide) got = shadow.try_acquire(n, now);
                check_same(got, want);
            }
        }
    }
    CHECK(widened > 0);   // the low end of the clock is beyond the compact range
}

TEST_CASE("keyed: an override on an idle key lets no burst through: it decides as a new bucket with the new settings")
{
    // The leaky buckets of the issue, on an idle key that is compact (moved to a whole
    // policy by the override) or already wide (an earlier override): after the change the
    // key decides as a new bucket with the new settings, at once and later (no slack
    // credit stored up while idle). A wheel of one-hour ticks keeps the idle keys in the
    // store, so that the reconfigured key decides, not a new one.
    struct change_case {
        const char* name;
        sluice::rate from, to;
        std::chrono::nanoseconds slack_from, slack_to;
    };
    const change_case cases[] = {
        // Granted at once before the fix: 11, 3, and 11 (up to 20 just under 1 ms later).
        {"10,000/s then 20,000/s (1 ms slack)", sluice::rate::per_second(10'000), sluice::rate::per_second(20'000), 1ms, 1ms},
        {"100/s then 200/s (25 ms slack)", sluice::rate::per_second(100), sluice::rate::per_second(200), 25ms, 25ms},
        {"10,000/s, slack 1 ms then 2 ms", sluice::rate::per_second(10'000), sluice::rate::per_second(10'000), 1ms, 2ms},
    };
    sluice::keyed_options o = small_wheel();
    o.tick = std::chrono::hours(1);
    for (const change_case& c : cases) {
        for (bool wide : {false, true}) {
            for (auto later : {0ns, std::chrono::nanoseconds(999us), std::chrono::nanoseconds(10ms)}) {
                CAPTURE(std::string(c.name));
                CAPTURE(wide);
                CAPTURE(later.count());
                boost::asio::io_context io;
                clk::set(t0);
                sluice::keyed<sluice::leaky_bucket<clk>> k(io, c.from, c.slack_from, o);
                if (wide) k.set_override("a", c.from, c.slack_from);
                REQUIRE(k.try_acquire("a").admitted);
                clk::advance(1s);   // idle
                k.set_override("a", c.to, c.slack_to);
                clk::advance(later);
                sluice::policy::gcra fresh(c.to, 1, c.slack_to);
                // Drained at one instant, then probed at every part of an interval.
                std::uint64_t at_once = 0;
                for (int i = 0; i < 100 && k.try_acquire("a").admitted; ++i) ++at_once;
                CHECK(at_once == 1);
                CHECK(fresh.try_acquire(1, sluice_test::now_ns<clk>()).admitted);
                for (int i = 0; i < 400; ++i) {
                    clk::advance(c.to.interval() / 4 + std::chrono::nanoseconds(i % 7));
                    check_same(k.try_acquire("a"), fresh.try_acquire(1, sluice_test::now_ns<clk>()));
                }
                CHECK(k.stats().keys.evicted == 0);
            }
        }
    }
}

TEST_CASE("keyed: a compact key that has to wait moves to a whole policy with the same state")
{
    boost::asio::io_context io;
    clk::set(t0);
    sluice::keyed<sluice::token_bucket<clk>> k(io, sluice::rate::per_second(10), 4, small_wheel());
    REQUIRE(k.try_acquire("a", 3).admitted);   // 1 left, 3 owed: full again 300 ms on
    auto [o1, h1] = sluice_test::make_recorder<clk>();
    auto [o2, h2] = sluice_test::make_recorder<clk>();
    k.async_acquire("a", 1, 1s, h1);   // the last permit, now
    k.async_acquire("a", 2, 1s, h2);   // 200 ms on
    drain(io);
    CHECK(o1->ok());
    CHECK(!o2->done());
    CHECK(k.queued("a") == 1);
    advance<clk>(io, 199ms);
    CHECK(!o2->done());
    advance<clk>(io, 1ms);
    CHECK(o2->ok());
    CHECK(o2->at == ns(t0 + 200ms));
    CHECK(!k.try_acquire("a").admitted);   // empty, as one bucket would be
    advance<clk>(io, 2s);
    k.sweep();
    CHECK(!k.contains("a"));
    CHECK(k.stats().keys.waiting == 0);
}

TEST_CASE("keyed: threads racing over shared keys at the cap: exact totals, no key over its burst")
{
    boost::asio::io_context io;
    clk::set(t0);   // frozen: a key that consumed never goes idle, so nothing is evicted
    sluice::keyed_options o = small_wheel(256, 8);
    sluice::keyed<sluice::token_bucket<clk>, std::uint64_t> k(io, sluice::rate::per_second(1), 3, o);
    constexpr int threads = 4, keys = 1000;
    std::vector<std::vector<std::uint64_t>> granted(threads, std::vector<std::uint64_t>(keys));
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
            for (int round = 0; round < 3; ++round)
                for (int i = 0; i < keys; ++i) {
                    std::uint64_t key = static_cast<std::uint64_t>((i * 7 + t * 13) % keys);
                    granted[t][key] += k.try_acquire(key).admitted;
                }
        });
    for (auto& th : pool) th.join();
    auto st = k.stats();
    CHECK(st.keys.tracked == 256);
    CHECK(st.keys.created == 256);
    CHECK(st.keys.evicted == 0);
    std::uint64_t total = 0;
    for (int key = 0; key < keys; ++key) {
        std::uint64_t g = 0;
        for (int t = 0; t < threads; ++t) g += granted[t][key];
        if (k.contains(static_cast<std::uint64_t>(key))) CHECK(g == 3);   // 12 tries, burst 3
        total += g;
    }
    CHECK(st.keys.overflow_admitted == 3);   // the overflow bucket: one key's configuration
    CHECK(total == 256 * 3 + 3);
}

TEST_CASE("keyed: short strings and 128-bit keys are stored in 16 bytes")
{
    CHECK(sizeof(sluice::detail::inline_string) == 16);
    CHECK(sizeof(sluice::detail::split_uint128) == 16);
    CHECK(alignof(sluice::detail::split_uint128) == 8);
    sluice::detail::inline_string a("0123456789abcde"), b(std::string(300, 'z')), c(a), d(std::move(b));
    CHECK(!a.on_heap());
    CHECK(d.on_heap());
    CHECK(c.view() == "0123456789abcde");
    CHECK(d.view() == std::string(300, 'z'));
    c = d;
    CHECK(c.view() == d.view());
}

TEST_CASE("idle wheel: an entry is looked at once its tick has passed, never before, and filed again")
{
    sluice::detail::idle_wheel<wheel_node*> w(10, 8, 1000);   // ticks of 10 ns, 8 slots
    wheel_node a, b, far;
    a.idle = 1015;
    b.idle = 1000;
    far.idle = 5000;   // beyond one turn (80 ns): filed in the last slot, looked at again
    w.schedule(&a, a.idle);
    w.schedule(&b, b.idle);
    w.schedule(&far, far.idle);
    auto visit = [](wheel_node* n, std::int64_t now) -> std::optional<std::int64_t> {
        ++n->visits;
        if (n->idle <= now) {
            n->gone = true;
            return std::nullopt;
        }
        return n->idle;
    };
    CHECK(!w.due(1009));
    CHECK(w.advance(1009, 100, visit) == 0);
    CHECK(w.advance(1010, 100, visit) == 1);   // b's tick [1000, 1010) has passed
    CHECK(b.gone);
    CHECK(w.advance(1019, 100, visit) == 0);
    CHECK(w.advance(1020, 100, visit) == 1);
    CHECK(a.gone);
    for (std::int64_t t = 1020; t <= 6000; t += 7)
        w.advance(t, 100, visit);
    CHECK(far.gone);
    CHECK(far.visits <= 5000 / 80 + 2);   // once a turn at most, then gone
}

TEST_CASE("idle wheel: the budget bounds the work of one call; the rest is done by the next")
{
    sluice::detail::idle_wheel<wheel_node*> w(10, 4, 0);
    std::vector<wheel_node> nodes(100);
    for (auto& n : nodes)
        w.schedule(&n, 0);
    int gone = 0;
    auto visit = [&](wheel_node* n, std::int64_t) -> std::optional<std::int64_t> {
        n->gone = true;
        ++gone;
        return std::nullopt;
    };
    CHECK(w.advance(10, 30, visit) == 30);
    CHECK(w.due(10));
    CHECK(w.advance(10, 30, visit) == 30);
    CHECK(w.advance(10, 1000, visit) == 40);
    CHECK(gone == 100);
    CHECK(!w.due(19));
}

TEST_CASE("idle wheel: after an idle spell of many turns every entry is looked at once, in bounded steps")
{
    sluice::detail::idle_wheel<wheel_node*> w(10, 8, 0);
    wheel_node n;
    n.idle = 1'000'000'000;
    w.schedule(&n, n.idle);
    int visits = 0;
    auto visit = [&](wheel_node* x, std::int64_t) -> std::optional<std::int64_t> {
        ++visits;
        return x->idle;
    };
    w.advance(500'000'000, 100, visit);   // 50 million ticks later: one pass over 8 slots
    CHECK(visits == 1);
    w.advance(500'000'000 + 80, 100, visit);
    CHECK(visits == 2);
}

TEST_CASE("keyed: bad options and bad configurations are refused at construction")
{
    boost::asio::io_context io;
    auto invalid = [&](auto f, sluice::error e) {
        try {
            f();
            FAIL("no exception");
        } catch (const boost::system::system_error& x) {
            CHECK(x.code() == e);
        }
    };
    using kb = sluice::keyed<sluice::token_bucket<clk>>;
    sluice::keyed_options o;
    o.max_keys = 0;
    invalid([&] { kb(io, sluice::rate::per_second(1), 1, o); }, sluice::error::invalid_option);
    o = {};
    o.tick = 999ns;
    invalid([&] { kb(io, sluice::rate::per_second(1), 1, o); }, sluice::error::invalid_option);
    o = {};
    o.wheel_slots = 1;
    invalid([&] { kb(io, sluice::rate::per_second(1), 1, o); }, sluice::error::invalid_option);
    o.wheel_slots = (1u << 20) + 1;
    invalid([&] { kb(io, sluice::rate::per_second(1), 1, o); }, sluice::error::invalid_option);
    invalid([&] { kb(io, sluice::rate::per_second(1), 0); }, sluice::error::invalid_limit);
    invalid([&] { sluice::keyed<sluice::fixed_window<clk>>(io, 1, 0s); }, sluice::error::invalid_duration);
    kb k(io, sluice::rate::per_second(1), 1);
    invalid([&] { k.set_override("a", sluice::rate::per_second(1), 0); }, sluice::error::invalid_limit);
    invalid([&] { k.set_overflow(sluice::rate::per_second(1), 0); }, sluice::error::invalid_limit);
    sluice::keyed<sluice::fixed_window<clk>> f(io, 5, 1s);
    CHECK(f.try_acquire("a").admitted);
    invalid([&] { f.set_override("a", 5, 2s); }, sluice::error::invalid_option);   // a tracked key's window
    f.set_override("b", 5, 2s);   // an untracked key takes any window
    CHECK(f.try_acquire("a", 0).error == sluice::error::invalid_count);
    CHECK(f.try_acquire("a", 6).error == sluice::error::exceeds_limit);
    o = {};
    o.max_keys = 3;
    CHECK(kb(io, sluice::rate::per_second(1), 1, o).shards() == 3);   // never more shards than keys
}

TEST_CASE_TEMPLATE("keyed: every key decides exactly as its own policy fed the same arrivals, through evictions", K,
                   token_bucket_kind, leaky_bucket_kind, fixed_window_kind, sliding_window_kind,
                   sliding_window_counter_kind, time_wheel_kind)
{
    boost::asio::io_context io;
    clk::set(t0);
    auto keyed = K::make(io, small_wheel());
    std::map<std::string, decltype(K::policy())> model;
    sluice_test::rng rng{42};
    std::uint64_t checks = 0;
    for (int step = 0; step < 60'000; ++step) {
        // Bursts, short gaps and long idle spells, over a few hot and many cold keys.
        std::uint64_t r = rng() % 1000;
        std::chrono::nanoseconds gap = r < 700 ? std::chrono::nanoseconds(rng() % 2'000'000)
                                     : r < 990 ? std::chrono::nanoseconds(rng() % 50'000'000)
                                               : std::chrono::nanoseconds(rng() % 2'000'000'000);
        clk::advance(gap);
        std::int64_t now = sluice_test::now_ns<clk>();
        // Appended, not "k" + ...: GCC 12 at -O3 warns a false -Wrestrict on the latter.
        std::string key = "k";
        key += std::to_string(rng() % 4 == 0 ? rng() % 500 : rng() % 8);
        std::uint64_t n = 1 + rng() % 3;
        auto& p = model[key];
        if (!p) p = K::policy();
        sluice::decision want = p->try_acquire(n, now);
        sluice::decision got = keyed.try_acquire(std::string_view(key), n);
        check_same(got, want);
        ++checks;
        if (step % 5000 == 0) keyed.sweep();
    }
    auto st = keyed.stats();
    CAPTURE(K::name);
    CHECK(checks == 60'000);
    CHECK(st.keys.evicted > 1000);   // eviction happened all along, and never showed
    CHECK(st.keys.tracked == st.keys.created - st.keys.evicted);
    CHECK(st.keys.overflow_requests == 0);
}

TEST_CASE("keyed: a throttled key is never evicted; it goes once it is back to fresh")
{
    boost::asio::io_context io;
    clk::set(t0);
    sluice::keyed<sluice::token_bucket<clk>> k(io, sluice::rate::per_second(1), 3, small_wheel());
    REQUIRE(k.try_acquire("a", 3).admitted);   // empty: full again 3 s from now
    for (int i = 0; i < 2999; ++i) {
        clk::advance(1ms);
        k.sweep();
        REQUIRE(k.contains("a"));
    }
    CHECK(!k.try_acquire("a", 3).admitted);     // 2.999 s: still throttled, still tracked
    clk::advance(1ms);                         // 3 s: full, fresh again
    k.sweep();
    CHECK(k.contains("a"));                    // its slot's tick has not passed yet
    clk::advance(2ms);
    k.sweep();
    CHECK(!k.contains("a"));
    CHECK(k.stats().keys.evicted == 1);
    CHECK(k.try_acquire("a", 3).admitted);      // a new key is what the old one was: full
}

TEST_CASE("keyed: eviction happens by itself as requests come, a little at a time")
{
    boost::asio::io_context io;
    clk::set(t0);
    sluice::keyed<sluice::token_bucket<clk>> k(io, sluice::rate::per_second(100), 1, small_wheel());
    for (int i = 0; i < 1000; ++i)
        REQUIRE(k.try_acquire("cold" + std::to_string(i)).admitted);
    CHECK(k.stats().keys.tracked == 1000);
    // Idle 10 ms later; a hot key's requests alone drive the wheels of its shard.
    for (int i = 0; i < 5000; ++i) {
        clk::advance(100us);
        k.try_acquire("hot");
    }
    // Only the hot key's shard is swept by its requests: a quarter of the cold keys, at
    // most `sweep_budget` a request.
    auto st = k.stats();
    CHECK(st.keys.evicted > 100);
    k.sweep();
    CHECK(k.stats().keys.tracked == 1);   // everything cold is gone, the hot key stays
}

TEST_CASE("keyed: a flood of 1,000,000 new keys keeps the store at its cap; the overflow limiter serves the rest")
{
    boost::asio::io_context io;
    clk::set(t0);
    sluice::keyed_options o = small_wheel(1000);
    sluice::keyed<sluice::token_bucket<clk>> k(io, sluice::rate::per_second(10), 10, o);
    k.set_overflow(sluice::rate::per_second(100), 100);
    k.set_override("victim", sluice::rate::per_second(1), 10);
    REQUIRE(k.try_acquire("victim", 10).admitted);   // a real client, throttled for 10 s
    std::uint64_t admitted = 0;
    std::size_t most = 0;
    const int total = 1'000'000;
    for (int i = 0; i < total; ++i) {
        clk::advance(1us);   // 1,000,000 new keys a second for one second
        admitted += k.try_acquire("attacker-" + std::to_string(i)).admitted;
        if (i % 1000 == 0) most = std::max(most, k.stats().keys.tracked);
    }
    auto st = k.stats();
    CHECK(most <= 1000);
    CHECK(st.keys.tracked <= 1000);
    CHECK(st.keys.created + st.keys.overflow_requests == total + 1);
    CHECK(st.keys.overflow_requests > 900'000);
    // Overflow: burst 100 + 100/s for 1 s. Tracked keys: 1000 at a time, each 10 at once.
    CHECK(st.keys.overflow_admitted <= 100 + 100 + 1);
    CHECK(admitted == st.keys.overflow_admitted + (st.keys.created - 1));
    CHECK(k.contains("victim"));                    // never evicted while throttled,
    CHECK(!k.try_acquire("victim", 2).admitted);     // and still throttled (1/s, 1 s on)...
    clk::advance(1s);
    CHECK(k.try_acquire("victim", 2).admitted);      // ...refilled at its own rate only
}

TEST_CASE("keyed: a string_view of a tracked key is looked up without allocating")
{
    boost::asio::io_context io;
    clk::set(t0);
    sluice::keyed<sluice::token_bucket<clk>> k(io, sluice::rate::per_second(1e6), 1000);
    std::string key(64, 'x');   // long enough that a std::string would allocate
    REQUIRE(k.try_acquire(key).admitted);
    std::string_view view(key);
    counting = true;
    allocations = 0;
    for (int i = 0; i < 100; ++i)
        k.try_acquire(view);
    counting = false;
    CHECK(allocations == 0);
}

TEST_CASE("keyed: the example of the class comment compiles and does what it says")
{
    boost::asio::io_context io;
    int refused = 0;
    auto too_many_requests = [&] { return ++refused, 429; };
    // From here on as in keyed.hpp.
    // 10 requests a second per client, bursts of 20; one client held to 1 a second.
    sluice::keyed<sluice::token_bucket<>> per_client(io, sluice::rate::per_second(10), 20,
                                                     sluice::keyed_options{.max_keys = 100'000});
    per_client.set_override("203.0.113.7", sluice::rate::per_second(1), 5);

    auto handle = [&](std::string_view peer_address) {
        // In the request handler (peer_address: a std::string_view, no std::string built):
        if (!per_client.try_acquire(peer_address))
            return too_many_requests();
        return 200;
    };
    // Real time: a burst is granted whole; asking on and on is refused long before a
    // thousand requests (which would take 100 s at 10 a second).
    for (int i = 0; i < 20; ++i)
        CHECK(handle("198.51.100.1") == 200);
    for (int i = 0; i < 5; ++i)
        CHECK(handle("203.0.113.7") == 200);
    int before = refused;
    for (int i = 0; i < 1000 && refused == before; ++i)
        handle("198.51.100.1");
    CHECK(refused == before + 1);
    for (int i = 0; i < 1000 && refused == before + 1; ++i)
        handle("203.0.113.7");
    CHECK(refused == before + 2);
}

TEST_CASE("keyed: a per-key override applies at once, survives eviction and can be cleared")
{
    boost::asio::io_context io;
    clk::set(t0);
    sluice::keyed<sluice::token_bucket<clk>> k(io, sluice::rate::per_second(10), 10, small_wheel());
    k.set_override("slow", sluice::rate::per_second(1), 1);
    CHECK(k.try_acquire("slow").admitted);
    CHECK(!k.try_acquire("slow").admitted);
    CHECK(k.try_acquire("fast", 10).admitted);
    clk::advance(5s);
    k.sweep();
    CHECK(!k.contains("slow"));                    // idle: evicted...
    CHECK(k.try_acquire("slow").admitted);
    CHECK(!k.try_acquire("slow").admitted);          // ...and the override still holds
    k.set_override("fast", sluice::rate::per_second(1), 2);   // a tracked key changes at once
    CHECK(k.try_acquire("fast", 2).admitted);
    CHECK(!k.try_acquire("fast").admitted);
    k.clear_override("slow");
    CHECK(!k.try_acquire("slow").admitted);       // what it consumed stays consumed
    clk::advance(1s);
    CHECK(k.try_acquire("slow", 10).admitted);    // back to 10/s, burst 10
    CHECK(!k.try_acquire("slow").admitted);
}

TEST_CASE("keyed: each key waits in its own FIFO; slots per key are exact; keys do not block each other")
{
    boost::asio::io_context io;
    clk::set(t0);
    sluice::keyed<sluice::leaky_bucket<clk>> k(io, sluice::rate::per_second(10), 0ns, small_wheel());
    sluice_test::outcomes a, b;
    for (int i = 0; i < 3; ++i) {
        auto [o, h] = sluice_test::make_recorder<clk>();
        k.async_acquire("a", 1, 10s, h);
        a.push_back(o);
    }
    auto [ob, hb] = sluice_test::make_recorder<clk>();
    k.async_acquire(std::string("b"), 1, 10s, hb);
    drain(io);
    CHECK(a[0]->ok());
    CHECK(ob->ok());
    CHECK(!a[1]->done());
    CHECK(k.queued("a") == 2);
    CHECK(k.stats().keys.waiting == 1);
    advance<clk>(io, 99ms);
    CHECK(!a[1]->done());
    advance<clk>(io, 1ms);
    CHECK(a[1]->ok());
    CHECK(a[1]->at == ns(t0 + 100ms));
    advance<clk>(io, 100ms);
    CHECK(a[2]->ok());
    CHECK(a[2]->at == ns(t0 + 200ms));
    // Fail fast beyond max_wait, nothing consumed.
    auto [oc, hc] = sluice_test::make_recorder<clk>();
    k.async_acquire("a", 1, 50ms, hc);
    drain(io);
    CHECK(oc->ec == sluice::error::timed_out);
    advance<clk>(io, 100ms);
    CHECK(k.try_acquire("a").admitted);   // the failed request took nothing
    // Once nobody waits, the wheel frees the key's queue, then the key.
    advance<clk>(io, 1s);
    k.sweep();
    CHECK(k.stats().keys.waiting == 0);
    CHECK(!k.contains("a"));
}

TEST_CASE("keyed: a key with waiters is never evicted; cancelling a waiter gives its slot back")
{
    boost::asio::io_context io;
    clk::set(t0);
    sluice::keyed<sluice::token_bucket<clk>> k(io, sluice::rate::per_second(1), 1, small_wheel());
    REQUIRE(k.try_acquire("a").admitted);
    boost::asio::cancellation_signal sig;
    auto [o1, h1] = sluice_test::make_recorder<clk>();
    auto [o2, h2] = sluice_test::make_recorder<clk>();
    k.async_acquire("a", 1, 100s, boost::asio::bind_cancellation_slot(sig.slot(), h1));   // at +1 s
    k.async_acquire("a", 1, 100s, h2);                                                   // at +2 s
    drain(io);
    for (int i = 0; i < 500; ++i) {
        advance<clk>(io, 1ms);
        k.sweep();
        REQUIRE(k.contains("a"));
    }
    sig.emit(boost::asio::cancellation_type::terminal);
    drain(io);
    CHECK(o1->ec == boost::asio::error::operation_aborted);
    advance<clk>(io, 499ms);
    CHECK(!o2->done());
    advance<clk>(io, 1ms);                // moved up to +1 s
    CHECK(o2->ok());
    CHECK(o2->at == ns(t0 + 1s));
}

TEST_CASE("keyed: window policies wait per key too, and try_acquire does not barge past a key's waiters")
{
    boost::asio::io_context io;
    clk::set(t0);
    sluice::keyed<sluice::fixed_window<clk>> k(io, 2, 1s, small_wheel());
    clk::set(t0);
    REQUIRE(k.try_acquire("a", 2).admitted);
    auto [o, h] = sluice_test::make_recorder<clk>();
    k.async_acquire("a", 2, 5s, h);
    drain(io);
    CHECK(!o->done());
    advance<clk>(io, 1s);
    CHECK(o->ok());
    CHECK(!k.try_acquire("a").admitted);   // the waiter took the new window
    CHECK(k.try_acquire("b", 2).admitted);
}

TEST_CASE("keyed: requests beyond the cap wait on the overflow limiter with the same contract")
{
    boost::asio::io_context io;
    clk::set(t0);
    sluice::keyed<sluice::token_bucket<clk>> k(io, sluice::rate::per_second(1), 1, small_wheel(2, 1));
    k.set_overflow(sluice::rate::per_second(10), 1);
    REQUIRE(k.try_acquire("a").admitted);
    REQUIRE(k.try_acquire("b").admitted);
    auto [o1, h1] = sluice_test::make_recorder<clk>();
    auto [o2, h2] = sluice_test::make_recorder<clk>();
    k.async_acquire("c", 1, 1s, h1);
    k.async_acquire("d", 1, 1s, h2);
    drain(io);
    CHECK(o1->ok());
    CHECK(!o2->done());
    advance<clk>(io, 100ms);
    CHECK(o2->ok());
    auto st = k.stats();
    CHECK(st.keys.overflow_requests == 2);
    CHECK(st.keys.overflow_admitted == 2);
    CHECK(!k.contains("c"));
}

TEST_CASE("keyed: closing completes every waiter of every key with error::closed, exactly once")
{
    boost::asio::io_context io;
    clk::set(t0);
    sluice_test::handler_stats hs;
    {
        sluice::keyed<sluice::token_bucket<clk>> k(io, sluice::rate::per_second(1), 1, small_wheel(3, 1));
        for (int key = 0; key < 5; ++key)
            for (int i = 0; i < 20; ++i)
                k.async_acquire("key" + std::to_string(key), 1, 1000s, sluice_test::counted_handler(hs));
        drain(io);
        CHECK(hs.runs == 4);   // the first of each tracked key, and one for the two in the overflow
        // destroyed here: the keyed limiter closes
    }
    drain(io);
    CHECK(hs.twice == 0);
    CHECK(hs.runs == 100);
    CHECK(hs.dropped == 0);
    CHECK(hs.live == 0);
}

TEST_CASE("keyed: after close(), acquires fail with error::closed")
{
    boost::asio::io_context io;
    clk::set(t0);
    sluice::keyed<sluice::token_bucket<clk>> k(io, sluice::rate::per_second(1), 1);
    k.close();
    auto [o, h] = sluice_test::make_recorder<clk>();
    k.async_acquire("a", 1, 1s, h);
    drain(io);
    CHECK(o->ec == sluice::error::closed);
}

TEST_SUITE_END();
