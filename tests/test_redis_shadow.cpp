// Shadow mode on the Redis limiters, against a live twin on the same server (another
// prefix): each request goes to both; a live acquire that waits is cancelled, which gives
// its slot back in Redis, so the twin is charged only for what the shadow one admitted at
// once. Rates of a few an hour keep Redis's clock from moving any decision while the test
// runs; an idle gap is both keys deleted (the state of a long idle time).
#include "redis_limiter_support.hpp"

#include <sluice/redis/connection.hpp>
#include <sluice/redis/sliding_window.hpp>
#include <sluice/redis/token_bucket.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "rng.hpp"

namespace {

namespace asio = boost::asio;
namespace redis = sluice::redis;
using namespace std::chrono_literals;
using sluice::shadow_kind;
using sluice_test::acq_recorder;
using sluice_test::acq_result;
using sluice_test::run_until;
using sluice_test::try_recorder;
using sluice_test::try_result;

// A limiter that tells when a request sleeps on its timer (its reply is in).
template <class Limiter>
struct observed : Limiter {
    using Limiter::Limiter;
    std::size_t sleeping() const { return this->state_->engine().queued(); }
};

struct reports {
    std::vector<sluice::shadow_event> events;
    std::vector<std::string> keys;
};

template <class Limiter, class... Config>
void twins(std::uint64_t burst, std::uint64_t seed, Config... config)
{
    sluice_test::live_redis l;
    reports r;
    redis::shared_options live_opts;
    live_opts.prefix = "live";
    redis::shared_options shadow_opts;
    shadow_opts.prefix = "dark";
    shadow_opts.shadow = {true, [&r](const sluice::shadow_event& e) {
                              r.events.push_back(e);
                              r.keys.emplace_back(e.key);
                          }};
    observed<Limiter> live(l.conn, config..., live_opts);
    Limiter shadow(l.conn, config..., shadow_opts);

    auto dump = [&](const std::string& key) { return l.server.command({"DUMP", live.redis_key(key)}).str; };
    sluice_test::rng g(seed);
    sluice::limiter_stats::shadow_counts want{true};
    std::uint64_t admitted = 0;
    const std::int64_t int64_max = std::numeric_limits<std::int64_t>::max();
    for (int i = 0; i < 400; ++i) {
        CAPTURE(i);
        const std::string key = "k" + std::to_string(g.in(0, 1));
        if (g.in(0, 19) == 0) {   // a long idle gap: both back to fresh
            l.server.command({"DEL", live.redis_key(key)});
            l.server.command({"DEL", shadow.redis_key(key)});
        }
        const auto pick = g.in(0, 99);
        const std::uint64_t n = pick < 3   ? 0
                                : pick < 6 ? std::numeric_limits<std::uint64_t>::max()
                                : pick < 10 ? burst + 1
                                            : static_cast<std::uint64_t>(g.in(1, static_cast<std::int64_t>(burst)));
        CAPTURE(n);
        const std::size_t events = r.events.size();
        if (g.in(0, 1) == 0) {
            auto lt = std::make_shared<try_result>(), st = std::make_shared<try_result>();
            live.async_try_acquire(key, n, try_recorder(lt));
            shadow.async_try_acquire(key, n, try_recorder(st));
            REQUIRE(run_until(l.io, [&] { return lt->calls == 1 && st->calls == 1; }));
            if (n == 0) {
                CHECK(st->ec == sluice::error::invalid_count);
                CHECK(r.events.size() == events);
                continue;
            }
            CHECK(!st->ec);
            CHECK(st->d.admitted);
            if (lt->ec || !lt->d.admitted) {
                CHECK((!lt->ec || lt->ec == sluice::error::exceeds_limit));
                ++want.try_refused;
                REQUIRE(r.events.size() == events + 1);
                CHECK(r.events.back().what == shadow_kind::try_refused);
                CHECK(r.keys.back() == key);
            } else {
                CHECK(st->d.remaining == lt->d.remaining);
                CHECK(r.events.size() == events);
            }
        } else {
            const auto w = g.in(0, 5);
            const std::int64_t max_wait = w == 0   ? int64_max
                                          : w == 1 ? std::numeric_limits<std::int64_t>::min()
                                          : w == 2 ? 0
                                                   : g.in(1, 3'600'000'000'000);
            CAPTURE(max_wait);
            auto la = std::make_shared<acq_result>(), sa = std::make_shared<acq_result>();
            const std::string before = dump(key);
            asio::cancellation_signal sig;
            live.async_acquire(key, n, std::chrono::nanoseconds(max_wait),
                               asio::bind_cancellation_slot(sig.slot(), acq_recorder(la)));
            shadow.async_acquire(key, n, std::chrono::nanoseconds(max_wait), acq_recorder(sa));
            REQUIRE(run_until(l.io, [&] { return sa->calls == 1 && (la->calls == 1 || live.sleeping() > 0); }));
            if (n == 0) {
                CHECK(sa->ec == sluice::error::invalid_count);
                REQUIRE(run_until(l.io, [&] { return la->calls == 1; }));
                continue;
            }
            CHECK(!sa->ec);
            ++admitted;
            if (la->calls == 0) {   // it sleeps until its slot: let it go, the slot goes back
                ++want.waited;
                REQUIRE(r.events.size() == events + 1);
                CHECK(r.events.back().what == shadow_kind::waited);
                CHECK(r.events.back().wait > 0ns);
                CHECK(r.events.back().wait.count() <= max_wait);
                want.total_wait += r.events.back().wait;
                sig.emit(asio::cancellation_type::terminal);
                REQUIRE(run_until(l.io, [&] { return la->calls == 1; }));
                CHECK(la->ec == asio::error::operation_aborted);
                REQUIRE(run_until(l.io, [&] { return dump(key) == before; }));
            } else if (la->ec) {
                ++want.refused;
                REQUIRE(r.events.size() == events + 1);
                CHECK(r.events.back().what == shadow_kind::refused);
                CHECK(r.events.back().error == la->ec);
            } else {
                CHECK(r.events.size() == events);
            }
        }
        const auto s = shadow.stats();
        CHECK(s.shadow.try_refused == want.try_refused);
        CHECK(s.shadow.refused == want.refused);
        CHECK(s.shadow.waited == want.waited);
        CHECK(s.shadow.total_wait == want.total_wait);
        CHECK(s.admitted == admitted);
        CHECK(s.waited == 0);
    }
    CHECK(want.try_refused > 10);
    CHECK(want.refused > 10);
    CHECK(want.waited > 10);
    MESSAGE("waits ", want.waited, ", refusals ", want.refused, ", tries refused ", want.try_refused);
}

} // namespace

TEST_SUITE_BEGIN("redis");

TEST_CASE("redis shadow: token_bucket counts the refusals and waits of its live twin" * doctest::timeout(120))
{
    twins<redis::token_bucket<redis::connection>>(4, 11, sluice::rate::per(10, 1h), std::uint64_t{4});
}

TEST_CASE("redis shadow: sliding_window counts the refusals and waits of its live twin" * doctest::timeout(120))
{
    twins<redis::sliding_window<redis::connection>>(4, 12, std::uint64_t{4}, std::chrono::nanoseconds(1h));
}

TEST_CASE("redis shadow: shadow with leasing is invalid_option" * doctest::timeout(60))
{
    sluice_test::live_redis l;
    redis::shared_options o;
    o.shadow.enabled = true;
    o.lease_size = 8;
    bool invalid = false;
    try {
        redis::token_bucket<redis::connection> tb(l.conn, sluice::rate::per_second(10), 4, o);
    } catch (const boost::system::system_error& e) {
        invalid = e.code() == sluice::error::invalid_option;
    }
    CHECK(invalid);
}

TEST_SUITE_END();
