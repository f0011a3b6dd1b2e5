// adaptive_concurrency_controller: each algorithm's steps, and a simulation against a
// server with a concurrency knee (latency flat below it, growing with the load above it).
#include <sluice/adaptive_concurrency_controller.hpp>
#include <sluice/error.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdint>
#include <functional>
#include <queue>
#include <string>
#include <vector>

#include "rng.hpp"

using namespace std::chrono_literals;
using sluice::adaptive_concurrency_controller;
using sluice::adaptive_concurrency_options;
using sluice::concurrency_algorithm;
using sluice::concurrency_sample;

namespace {

constexpr std::int64_t ms = 1'000'000;

adaptive_concurrency_options with(concurrency_algorithm a)
{
    adaptive_concurrency_options o;
    o.algorithm = a;
    return o;
}

void check_rejected(const adaptive_concurrency_options& o)
{
    try {
        adaptive_concurrency_controller c(o);
        FAIL("accepted options out of range");
    } catch (const boost::system::system_error& e) {
        CHECK(e.code() == sluice::error::invalid_option);
    }
}

// A closed loop against a server whose latency is base x max(1, load / knee) x (1 + noise):
// clients always have more to send than the limit lets out (a new operation starts the
// moment the limit allows), each operation's latency set by the load when it started.
class knee_server_sim {
public:
    knee_server_sim(adaptive_concurrency_controller& c, double knee, std::uint64_t seed) : c_(c), knee_(knee), rng_(seed)
    {
        fill();
    }

    void set_knee(double k) { knee_ = k; }

    // Completes the next operation, feeds its sample, starts what the limit allows.
    void step()
    {
        op o = ops_.top();
        ops_.pop();
        now_ = o.end;
        c_.on_sample({o.start, o.end, inflight_, false});
        --inflight_;
        fill();
    }

private:
    struct op {
        std::int64_t end, start;
        bool operator>(const op& x) const { return end > x.end; }
    };

    void fill()
    {
        while (inflight_ < c_.limit()) {
            ++inflight_;
            const double latency = base_ * std::max(1.0, static_cast<double>(inflight_) / knee_) * (1 + rng_.uniform(0, 0.05));
            ops_.push({now_ + static_cast<std::int64_t>(latency), now_});
        }
    }

    adaptive_concurrency_controller& c_;
    double knee_;
    sluice_test::rng rng_;
    const double base_ = 1.0 * ms;
    std::int64_t now_ = 0;
    std::uint64_t inflight_ = 0;
    std::priority_queue<op, std::vector<op>, std::greater<>> ops_;
};

struct span_stats {
    double low = 1e18, high = 0, mean = 0;
};

// Runs `steps` samples and reports the limit over the last `measure` of them (outside
// Vegas's probes, which halve it on purpose for a round trip).
span_stats run(knee_server_sim& sim, const adaptive_concurrency_controller& c, int steps, int measure)
{
    span_stats s;
    double sum = 0;
    int n = 0;
    for (int i = 0; i < steps; ++i) {
        sim.step();
        if (i >= steps - measure && !c.probing()) {
            const double l = static_cast<double>(c.limit());
            s.low = std::min(s.low, l);
            s.high = std::max(s.high, l);
            sum += l;
            ++n;
        }
    }
    s.mean = n ? sum / n : 0;
    return s;
}

} // namespace

TEST_SUITE_BEGIN("adaptive");

TEST_CASE("adaptive_concurrency_controller: options out of range are refused")
{
    auto o = adaptive_concurrency_options{};
    CHECK_NOTHROW(adaptive_concurrency_controller{o});
    auto bad = [](auto change) {
        adaptive_concurrency_options o;
        change(o);
        check_rejected(o);
    };
    bad([](auto& o) { o.min_limit = 0; });
    bad([](auto& o) { o.min_limit = 30; });   // above initial_limit 20
    bad([](auto& o) { o.initial_limit = 2000; });
    bad([](auto& o) { o.max_limit = 10; });
    bad([](auto& o) { o.backoff = 1; });
    bad([](auto& o) { o.backoff = 0; });
    bad([](auto& o) { o.backoff = std::nan(""); });
    bad([](auto& o) { o.latency_threshold = -1ns; });
    bad([](auto& o) { o.vegas_alpha = 0; });
    bad([](auto& o) { o.vegas_beta = 2; });   // below alpha 3
    bad([](auto& o) { o.vegas_probe_multiplier = 0; });
    bad([](auto& o) { o.tolerance = 0.9; });
    bad([](auto& o) { o.smoothing = 0; });
    bad([](auto& o) { o.smoothing = 1.5; });
    bad([](auto& o) { o.long_window = 0; });
    bad([](auto& o) { o.queue_size = -1; });
    bad([](auto& o) { o.queue_size = std::numeric_limits<double>::infinity(); });
    bad([](auto& o) { o.algorithm = static_cast<concurrency_algorithm>(7); });
}

TEST_CASE("aimd: +1 a round trip while used, one backoff a round trip on overload")
{
    auto o = with(concurrency_algorithm::aimd);
    o.initial_limit = 10;
    o.latency_threshold = 5ms;
    adaptive_concurrency_controller c(o);
    // Eleven fast samples at full use: a round trip's worth (1/limit each), +1.
    for (int i = 0; i < 11; ++i)
        c.on_sample({0, 1 * ms, 10, false});
    CHECK(c.limit() == 11);
    // Used less than half: nothing learnt.
    for (int i = 0; i < 100; ++i)
        c.on_sample({0, 1 * ms, 5, false});
    CHECK(c.limit() == 11);
    // A burst of slow answers that all started before the first decrease: one decrease.
    for (int i = 0; i < 11; ++i)
        c.on_sample({2 * ms, 10 * ms + i, 11, false});
    CHECK(c.limit() == 9);   // floor(11.x * 0.9)
    // One that started after it may decrease again; a drop counts as slow.
    c.on_sample({11 * ms, 12 * ms, 9, true});
    CHECK(c.limit() == 8);
    CHECK(c.stats().dropped == 1);
    CHECK(c.stats().decreases == 2);
}

TEST_CASE("aimd: bounded by min_limit and max_limit")
{
    auto o = with(concurrency_algorithm::aimd);
    o.initial_limit = 3;
    o.min_limit = 2;
    o.max_limit = 4;
    adaptive_concurrency_controller c(o);
    for (int i = 0; i < 1000; ++i)
        c.on_sample({0, 1 * ms, 4, false});
    CHECK(c.limit() == 4);
    for (std::int64_t i = 0; i < 100; ++i)
        c.on_sample({i * ms, i * ms + 1, 4, true});
    CHECK(c.limit() == 2);
}

TEST_CASE("vegas: grows without a queue, shrinks above beta, keeps between alpha and beta")
{
    auto o = with(concurrency_algorithm::vegas);
    o.initial_limit = 100;
    o.vegas_probe_multiplier = 1000;   // no probe in this test
    adaptive_concurrency_controller c(o);
    c.on_sample({0, 10 * ms, 100, false});   // the baseline: 10 ms
    CHECK(c.limit() == 100);
    // No queue (latency at the baseline): beta x log10(limit) = 12 a round trip.
    for (int i = 0; i < 100; ++i)
        c.on_sample({0, 10 * ms, 100, false});
    CHECK(c.limit() >= 111);
    CHECK(c.limit() <= 112);
    // A queue of limit x (1 - 10/20) = ~56 above beta (12): shrinks by half the excess
    // (~22) a round trip.
    const auto before = c.limit();
    for (std::uint64_t i = 0; i < before; ++i)
        c.on_sample({0, 20 * ms, before, false});
    CHECK(c.limit() <= before - 15);
    CHECK(c.limit() >= before - 30);
    // A queue between alpha and beta (3 and 6 x log10(limit), rounded down): no change.
    const auto l = static_cast<double>(c.limit());
    const double step = std::max(1.0, std::floor(std::log10(l)));
    const auto r = static_cast<std::int64_t>(10.0 * ms / (1.0 - 4.5 * step / l));
    const auto held = c.limit();
    for (int i = 0; i < 500; ++i)
        c.on_sample({0, r, held, false});
    CHECK(c.limit() == held);
    // A drop: -log10 a round trip.
    for (std::uint64_t i = 0; i < held; ++i)
        c.on_sample({0, 10 * ms, held, true});
    CHECK(c.limit() < held);
}

TEST_CASE("vegas: a probe halves the limit for a round trip and relearns the baseline")
{
    auto o = with(concurrency_algorithm::vegas);
    o.initial_limit = 40;
    o.vegas_probe_multiplier = 1;   // a probe within 40 samples
    adaptive_concurrency_controller c(o);
    std::int64_t t = 0;
    int probes = 0;
    // The backend slows from 10 ms to 30 ms for good. Without a probe the old baseline
    // would read 2/3 of every limit as queue and shrink the limit for ever.
    for (int i = 0; i < 20; ++i, t += ms)
        c.on_sample({t, t + 10 * ms, 40, false});
    bool was_probing = false;
    std::uint64_t before_probe = 0;
    for (int i = 0; i < 2000; ++i, t += ms) {
        const auto limit = c.limit();
        c.on_sample({t, t + 30 * ms, limit, false});
        if (c.probing() && !was_probing) {
            ++probes;
            CHECK(c.limit() == limit / 2);
            before_probe = limit;
        }
        if (!c.probing() && was_probing)
            CHECK(c.limit() == before_probe);   // restored after the probe
        was_probing = c.probing();
    }
    CHECK(probes >= 2);
    // The baseline is 30 ms now: no queue seen, the limit grew back.
    CHECK(c.limit() >= 40);
}

TEST_CASE("gradient2: flat latency grows it by queue_size x smoothing a round trip; a jump cuts it, at most by half")
{
    auto o = with(concurrency_algorithm::gradient2);
    o.initial_limit = 50;
    adaptive_concurrency_controller c(o);
    for (int i = 0; i < 50; ++i)
        c.on_sample({0, 10 * ms, 50, false});
    CHECK(c.limit() == 50);   // +0.8 a round trip: 50.8
    for (int i = 0; i < 200; ++i)
        c.on_sample({0, 10 * ms, c.limit(), false});
    CHECK(c.limit() >= 53);
    const double before = static_cast<double>(c.limit());
    // Latency triples: the gradient is clamped at 0.5: each round trip takes away at
    // most smoothing x (half the limit) - smoothing x queue_size.
    for (int i = 0; i < 60; ++i)
        c.on_sample({0, 30 * ms, c.limit(), false});
    CHECK(static_cast<double>(c.limit()) < before * 0.95);
    CHECK(static_cast<double>(c.limit()) > before * 0.85);
}

TEST_CASE("simulation: AIMD and Vegas settle within 20 % of the knee and follow it when it moves")
{
    struct case_t {
        concurrency_algorithm algorithm;
        const char* name;
    };
    for (auto [algorithm, name] : {case_t{concurrency_algorithm::aimd, "aimd"}, case_t{concurrency_algorithm::vegas, "vegas"}}) {
        CAPTURE(name);
        auto o = with(algorithm);
        o.max_limit = 10'000;
        // AIMD needs to be told what latency is too much: 20 % above the 1 ms baseline.
        o.latency_threshold = 1200us;
        adaptive_concurrency_controller c(o);
        knee_server_sim sim(c, 100, 42);
        for (double knee : {100.0, 200.0, 50.0, 400.0}) {
            CAPTURE(knee);
            sim.set_knee(knee);
            // Settles within ~200 round trips, then stays.
            const auto s = run(sim, c, static_cast<int>(knee) * 300, static_cast<int>(knee) * 100);
            MESSAGE(std::string(name) << " knee " << knee << ": limit " << s.low << " to " << s.high << ", mean " << s.mean);
            CHECK(s.low >= 0.8 * knee);
            CHECK(s.high <= 1.2 * knee);
        }
    }
}

TEST_CASE("simulation: Gradient2 does not find a knee where latency grows with the load (a property of the algorithm)")
{
    // Gradient2 compares the latency with its own long-term average, which follows the
    // latency the limit causes: above the knee it keeps growing until the average lags
    // the growth by `tolerance`. It protects against a backend that slows down (see the
    // test above), not against a knee. Pinned here so that the guide's statement stays true.
    auto o = with(concurrency_algorithm::gradient2);
    o.max_limit = 10'000;
    adaptive_concurrency_controller c(o);
    knee_server_sim sim(c, 100, 42);
    const auto s = run(sim, c, 60'000, 10'000);
    MESSAGE("gradient2 knee 100: limit " << s.low << " to " << s.high << ", mean " << s.mean);
    CHECK(s.low > 1.2 * 100);
}

TEST_CASE("simulation: a client that sends little does not grow the limit")
{
    for (auto a : {concurrency_algorithm::aimd, concurrency_algorithm::vegas, concurrency_algorithm::gradient2}) {
        auto o = with(a);
        o.initial_limit = 100;
        o.vegas_probe_multiplier = 1000;
        adaptive_concurrency_controller c(o);
        for (std::int64_t i = 0; i < 100'000; ++i)
            c.on_sample({i * ms, i * ms + ms, 10, false});   // 10 of 100 used
        CHECK(c.limit() == 100);
    }
}

TEST_SUITE_END();

TEST_CASE("adaptive_concurrency_controller: any sample, times at the ends of int64 included, keeps the limit in bounds")
{
    sluice_test::rng rng{7};
    const std::int64_t edges[] = {INT64_MIN, INT64_MIN + 1, -1, 0, 1, INT64_MAX - 1, INT64_MAX};
    for (auto a : {concurrency_algorithm::aimd, concurrency_algorithm::vegas, concurrency_algorithm::gradient2}) {
        auto o = with(a);
        o.min_limit = 3;
        o.max_limit = 70;
        o.latency_threshold = 1ms;
        o.vegas_probe_multiplier = 1;
        adaptive_concurrency_controller c(o);
        for (int i = 0; i < 200'000; ++i) {
            auto pick = [&]() -> std::int64_t {
                switch (rng() % 4) {
                case 0: return edges[rng() % std::size(edges)];
                case 1: return static_cast<std::int64_t>(rng());
                default: return static_cast<std::int64_t>(rng() % (10 * ms));
                }
            };
            const std::int64_t start = pick(), end = pick();
            const auto limit = c.on_sample({start, end, rng() % 100, rng() % 16 == 0});
            REQUIRE(limit >= 3);
            REQUIRE(limit <= 70);
            REQUIRE(limit == c.limit());
        }
        CHECK(c.stats().samples == 200'000);
    }
}
