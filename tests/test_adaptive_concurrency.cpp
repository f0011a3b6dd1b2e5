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
    // The latency without load (1 ms to begin with).
    void set_base(double b) { base_ = b; }

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
    double base_ = 1.0 * ms;
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
    bad([](auto& o) { o.probe_round_trips = 0; });
    bad([](auto& o) { o.tolerance = 0.9; });
    bad([](auto& o) { o.smoothing = 0; });
    bad([](auto& o) { o.smoothing = 1.5; });
    bad([](auto& o) { o.queue_size = -1; });
    bad([](auto& o) { o.queue_size = std::numeric_limits<double>::infinity(); });
    bad([](auto& o) { o.latency_ratio = 1; });
    bad([](auto& o) { o.latency_ratio = -2; });
    bad([](auto& o) { o.latency_ratio = std::numeric_limits<double>::infinity(); });
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

TEST_CASE("aimd: latency_ratio: slower than that multiple of the latency of operations alone is overload")
{
    auto o = with(concurrency_algorithm::aimd);
    o.initial_limit = 4;
    o.latency_ratio = 2;
    adaptive_concurrency_controller c(o);
    // An operation alone from start to end: 10 ms is the unloaded latency.
    c.on_sample({0, 10 * ms, 1, false});
    // 19 ms under load: not overload (a round trip's worth: +1); 21 ms: overload.
    for (int i = 0; i < 5; ++i)
        c.on_sample({20 * ms, 39 * ms, 4, false});
    CHECK(c.limit() == 5);
    c.on_sample({40 * ms, 61 * ms, 5, false});
    CHECK(c.limit() == 4);
    // One that ends alone after a crowd ended around it is not alone: its 50 ms (overload)
    // does not become the baseline, and 60 ms after it is overload again (at 2 x 50 ms it
    // would not be).
    c.on_sample({70 * ms, 80 * ms, 2, false});
    c.on_sample({65 * ms, 115 * ms, 1, false});
    CHECK(c.limit() == 3);
    c.on_sample({120 * ms, 180 * ms, 3, false});
    CHECK(c.limit() == 2);
}

TEST_CASE("aimd: slots full but few operations running (waiting for a pace after their permit) do not grow the limit")
{
    auto o = with(concurrency_algorithm::aimd);
    o.initial_limit = 4;
    o.latency_threshold = 100ms;
    adaptive_concurrency_controller c(o);
    // Four slots held, but each operation runs 10 ms of every 50: one at a time at most.
    for (std::int64_t i = 0; i < 40; ++i)
        c.on_sample({i * 50 * ms, i * 50 * ms + 10 * ms, 4, false});
    CHECK(c.limit() == 4);
    // Four running at once (ends 2.5 ms apart, 10 ms each): once that shows over a round
    // trip of samples, the limit grows.
    for (std::int64_t i = 0; i < 12; ++i)
        c.on_sample({3000 * ms + i * 2500000, 3010 * ms + i * 2500000, 4, false});
    CHECK(c.limit() > 4);
}

TEST_CASE("aimd: back at a limit that was overloaded, only operations started at it raise it")
{
    auto o = with(concurrency_algorithm::aimd);
    o.initial_limit = 5;
    o.latency_threshold = 95ms;
    adaptive_concurrency_controller c(o);
    // Overload at 5: down to 4.
    c.on_sample({0, 100 * ms, 5, false});
    CHECK(c.limit() == 4);
    // A round trip at 4 within the threshold (88 ms, ending 22 ms apart): back to 5.
    std::int64_t end = 100 * ms;
    for (int i = 0; i < 5; ++i) {
        end += 22 * ms;
        c.on_sample({end - 88 * ms, end, 4, false});
    }
    CHECK(c.limit() == 5);
    const std::int64_t raised = end;
    // Those started before it rose still come back within the threshold for a round trip:
    // they say nothing of 5 (counted, they would raise it to 6 before the first answer at
    // 5 came back).
    for (int i = 0; i < 5; ++i) {
        end += 15 * ms;
        REQUIRE(end - 90 * ms < raised);
        c.on_sample({end - 90 * ms, end, 5, false});
    }
    CHECK(c.limit() == 5);
    // Started at 5 and within the threshold: 5 is fine after all; a round trip of them, +1.
    end = raised + 90 * ms;
    for (int i = 0; i < 6; ++i) {
        end += 20 * ms;
        c.on_sample({end - 90 * ms, end, 5, false});
    }
    CHECK(c.limit() == 6);
}

TEST_CASE("aimd: latency_ratio: the unloaded latency is also the least of any operation lately")
{
    auto o = with(concurrency_algorithm::aimd);
    o.initial_limit = 4;
    o.latency_ratio = 1.8;
    adaptive_concurrency_controller c(o);
    // The one operation alone answered late (70 ms); one among others took 52 ms: the
    // unloaded latency is at most that, and 100 ms is overload (1.8 x 70 ms would not be).
    c.on_sample({0, 70 * ms, 1, false});
    c.on_sample({100 * ms, 152 * ms, 3, false});
    c.on_sample({200 * ms, 300 * ms, 4, false});
    CHECK(c.limit() == 3);
}

TEST_CASE("simulation: AIMD on latency_ratio holds a host whose latency grows with its load under 1.8x")
{
    // latency = base x (1 + (in flight - 1) / k): it doubles at k + 1 in flight.
    for (double k : {4.0, 8.0}) {
        auto o = with(concurrency_algorithm::aimd);
        o.initial_limit = 1;
        o.max_limit = 16;
        o.latency_ratio = 1.8;
        adaptive_concurrency_controller c(o);
        struct op {
            std::int64_t start, end;
        };
        std::vector<op> running;
        std::int64_t now = 0, worst = 0;
        std::uint64_t done = 0;
        const std::int64_t base = 50 * ms;
        while (now < 30'000 * ms) {
            while (running.size() < c.limit()) {
                const double n = static_cast<double>(running.size() + 1);
                running.push_back({now, now + static_cast<std::int64_t>(static_cast<double>(base) * (1 + (n - 1) / k))});
            }
            auto first = std::min_element(running.begin(), running.end(), [](auto& a, auto& b) { return a.end < b.end; });
            const op o1 = *first;
            const std::uint64_t inflight = running.size();
            running.erase(first);
            now = o1.end;
            c.on_sample({o1.start, o1.end, inflight, false});
            if (now > 5'000 * ms) {
                worst = std::max(worst, o1.end - o1.start);
                ++done;
            }
        }
        const double rate = static_cast<double>(done) / 25.0, doubling = (k + 1) / (2 * 0.05);
        INFO("k ", k, ": ", rate, "/s against ", doubling, "/s where latency doubles; worst ", worst / ms, " ms");
        CHECK(rate >= 0.85 * doubling);
        CHECK(worst <= 2 * base);
    }
}

TEST_CASE("simulation: AIMD on latency_ratio, behind a pace that starts slow, holds a slowing host's p99 under 2x")
{
    // A crawler against a host whose latency is base x (1 + (in flight - 1) / k): each
    // fetch takes its slot first, then waits for its host's pace (which starts at 12.5/s
    // and triples a second up to `pace`), and its sample starts when it is sent
    // (restart_clock). While the pace is slow the slots are full and the host sees one or
    // two: a limit grown on full slots alone then let the host's load jump past the knee
    // once the pace caught up. The client sees each latency a little late (0.2-3 ms, and
    // one in 50 a scheduling delay of 15 ms more). Goal (issue 41): p99 at the host at
    // most twice the unloaded latency, and at least 85 % of the throughput where the
    // latency doubles, the start included.
    struct case_t {
        double k, pace;
    };
    for (auto [k, pace] : {case_t{4, 100}, case_t{2, 100}}) {
        CAPTURE(k);
        auto o = with(concurrency_algorithm::aimd);
        o.initial_limit = 1;
        o.max_limit = 16;
        o.latency_ratio = 1.8;
        adaptive_concurrency_controller c(o);
        sluice_test::rng rng{11};
        struct op {
            std::int64_t start, end;
        };
        std::vector<op> at_host;
        std::vector<double> host_latency;
        const std::int64_t base = 50 * ms;
        const int pages = 1000;
        std::int64_t now = 0, last_send = INT64_MIN, first_send = -1;
        std::uint64_t held = 0, waiting = 0;
        int started = 0;
        for (;;) {
            while (held < c.limit() && started + static_cast<int>(waiting) < pages) {
                ++held;
                ++waiting;
            }
            const double rate = first_send < 0 ? 12.5 : std::min(pace, 12.5 * std::pow(3.0, static_cast<double>(now - first_send) / 1e9));
            const std::int64_t next_send = waiting == 0 ? INT64_MAX
                                           : last_send == INT64_MIN ? now
                                                                    : std::max(now, last_send + static_cast<std::int64_t>(1e9 / rate));
            auto first = std::min_element(at_host.begin(), at_host.end(), [](auto& a, auto& b) { return a.end < b.end; });
            if (first == at_host.end() && waiting == 0) break;
            if (first != at_host.end() && first->end <= next_send) {
                const op done = *first;
                at_host.erase(first);
                now = done.end;
                c.on_sample({done.start, done.end, held, false});
                --held;
                continue;
            }
            now = next_send;
            if (first_send < 0) first_send = now;
            last_send = now;
            --waiting;
            ++started;
            const double n = static_cast<double>(at_host.size() + 1);
            const double host = static_cast<double>(base) * (1 + (n - 1) / k);
            host_latency.push_back(host);
            const double late = rng.uniform(0.2, 3.0) * ms + (rng.next() % 50 == 0 ? 15.0 * ms : 0.0);
            at_host.push_back({now, now + static_cast<std::int64_t>(host + late)});
        }
        std::sort(host_latency.begin(), host_latency.end());
        const double p99 = host_latency[host_latency.size() * 99 / 100];
        const double rate = pages / (static_cast<double>(now - first_send) / 1e9), doubling = (k + 1) / (2 * 0.05);
        MESSAGE("k " << k << ": " << rate << "/s against " << doubling << "/s where latency doubles; p99 at the host "
                     << p99 / ms << " ms");
        CHECK(p99 <= 2.0 * static_cast<double>(base));
        CHECK(rate >= 0.85 * doubling);
    }
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
    o.probe_round_trips = 1000;   // no drain in this test
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
    o.probe_round_trips = 1;   // a drain within a round trip (40 samples)
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

TEST_CASE("gradient2: flat latency grows it by queue_size a round trip; a slower round trip cuts it, by smoothing x at most half a round trip")
{
    auto o = with(concurrency_algorithm::gradient2);
    o.initial_limit = 50;
    o.probe_round_trips = 1000;   // no drain in this test
    adaptive_concurrency_controller c(o);
    // The baseline is the first latency until a drain: 10 ms, the gradient 1. A round
    // trip at the baseline: newLimit = limit + queue_size, taken in full (+4 over 50
    // samples of 4 / limit each: 53.8).
    for (int i = 0; i < 50; ++i)
        c.on_sample({0, 10 * ms, 50, false});
    CHECK(c.limit() == 53);
    const double before = static_cast<double>(c.limit());
    // Latency triples. The round trip's mean (an average over about limit samples) gets
    // to 2x the baseline within a round trip and the gradient to its floor of 0.5: each
    // round trip takes away at most smoothing x (half the limit - queue_size), 10 %.
    for (int i = 0; i < 3 * 53; ++i)
        c.on_sample({0, 30 * ms, c.limit(), false});
    const double after = static_cast<double>(c.limit());
    CHECK(after < before * 0.9);
    CHECK(after >= std::floor(before * 0.9 * 0.9 * 0.9));
    // Back to 10 ms: the baseline did not move (only a drain raises it); growth again.
    for (int i = 0; i < 20 * 53; ++i)
        c.on_sample({0, 10 * ms, c.limit(), false});
    CHECK(static_cast<double>(c.limit()) > before);
    // A faster backend (5 ms): the baseline follows it at once, so that 10 ms is a queue.
    for (int i = 0; i < 5 * 60; ++i)
        c.on_sample({0, 5 * ms, c.limit(), false});
    const auto fast = c.limit();
    for (int i = 0; i < 3 * 60; ++i)
        c.on_sample({0, 10 * ms, c.limit(), false});
    CHECK(c.limit() < fast);
}

TEST_CASE("gradient2: a drain halves the limit for two round trips and takes their mean latency as the baseline")
{
    auto o = with(concurrency_algorithm::gradient2);
    o.initial_limit = 40;
    o.probe_round_trips = 1;   // a drain every round trip or less
    adaptive_concurrency_controller c(o);
    std::int64_t t = 0;
    // The backend slows from 10 ms to 30 ms for good. Without a drain the old baseline
    // would read every latency as 3x the baseline and halve the limit for ever.
    for (int i = 0; i < 20; ++i, t += ms)
        c.on_sample({t, t + 10 * ms, 40, false});
    int drains = 0;
    bool was_draining = false;
    std::uint64_t before_drain = 0;
    int drained_samples = 0;
    for (int i = 0; i < 3000; ++i, t += ms) {
        const auto limit = c.limit();
        // Operations started in a drain take 29 or 31 ms: the baseline is their mean.
        c.on_sample({t, t + 30 * ms + (i % 2 ? ms : -ms), limit, false});
        if (c.probing() && !was_draining) {
            ++drains;
            CHECK(c.limit() == limit / 2);
            before_drain = limit;
            drained_samples = 0;
        }
        if (c.probing() && was_draining)
            ++drained_samples;
        if (!c.probing() && was_draining) {
            CHECK(c.limit() == before_drain);   // restored after the drain
            CHECK(drained_samples + 1 >= static_cast<int>(before_drain / 2 * 2));   // two round trips' worth
        }
        was_draining = c.probing();
    }
    CHECK(drains >= 2);
    // The baseline is 30 ms now (the mean, not the least of 29 and 31: with 29 every
    // 31 ms round trip would be a queue): the limit grew back, by queue_size a round trip.
    CHECK(c.limit() >= 60);
}

TEST_CASE("simulation: AIMD, Vegas and Gradient2 settle within 20 % of the knee and follow it when it moves")
{
    struct case_t {
        concurrency_algorithm algorithm;
        const char* name;
    };
    for (auto [algorithm, label] : {case_t{concurrency_algorithm::aimd, "aimd"}, case_t{concurrency_algorithm::vegas, "vegas"},
                                    case_t{concurrency_algorithm::gradient2, "gradient2"}}) {
        const std::string name = label;
        CAPTURE(name);
        auto o = with(algorithm);
        o.max_limit = 10'000;
        // AIMD needs to be told what latency is too much: 20 % above the 1 ms baseline.
        // Vegas and Gradient2 are not told anything.
        o.latency_threshold = 1200us;
        adaptive_concurrency_controller c(o);
        knee_server_sim sim(c, 100, 42);
        for (double knee : {100.0, 200.0, 50.0, 400.0}) {
            CAPTURE(knee);
            sim.set_knee(knee);
            // Settles within ~200 round trips, then stays.
            const auto s = run(sim, c, static_cast<int>(knee) * 300, static_cast<int>(knee) * 100);
            MESSAGE(name << " knee " << knee << ": limit " << s.low << " to " << s.high << ", mean " << s.mean);
            CHECK(s.low >= 0.8 * knee);
            CHECK(s.high <= 1.2 * knee);
        }
    }
}

TEST_CASE("simulation: Vegas and Gradient2 follow a latency without load that doubles, then halves")
{
    // A slower backend with the same knee (every operation takes twice as long at any
    // load), then a faster one: the limit must come back to the knee, not read the new
    // latency as a queue (or the lack of one) for ever.
    for (auto a : {concurrency_algorithm::vegas, concurrency_algorithm::gradient2}) {
        const std::string name = a == concurrency_algorithm::vegas ? "vegas" : "gradient2";
        CAPTURE(name);
        auto o = with(a);
        o.max_limit = 10'000;
        adaptive_concurrency_controller c(o);
        knee_server_sim sim(c, 100, 42);
        run(sim, c, 20'000, 1);
        for (double base : {2.0 * ms, 1.0 * ms}) {
            CAPTURE(base);
            sim.set_base(base);
            // Back within 20 % of the knee within 100 round trips, and staying there.
            int last_out = -1;
            for (int i = 0; i < 10'000; ++i) {
                sim.step();
                if (!c.probing() && (c.limit() < 80 || c.limit() > 120))
                    last_out = i;
            }
            const auto s = run(sim, c, 10'000, 10'000);
            MESSAGE(name << " base " << base / ms << " ms: back within 20 % after " << last_out + 1
                         << " samples; then limit " << s.low << " to " << s.high << ", mean " << s.mean);
            CHECK(s.low >= 80);
            CHECK(s.high <= 120);
        }
    }
}

TEST_CASE("simulation: a client that sends little does not grow the limit")
{
    for (auto a : {concurrency_algorithm::aimd, concurrency_algorithm::vegas, concurrency_algorithm::gradient2}) {
        auto o = with(a);
        o.initial_limit = 100;
        o.probe_round_trips = 1000;
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
        o.probe_round_trips = 1;
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
