// The pace learner against a model of nginx's limit_req (the algorithm of
// ngx_http_limit_req_module: excess in thousandths of a request on a millisecond clock, a
// refused request changes nothing, an excess within the burst is delayed), driven the way
// the crawler and the API client drive it, in simulated time with a fixed seed: the pace
// settles under the limit, close to it, with few refusals.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "pace_learner.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <optional>
#include <random>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using examples::pace_learner;
using examples::pace_learner_options;
using ns = std::chrono::nanoseconds;

namespace {

double sec(ns d) { return std::chrono::duration<double>(d).count(); }
ns from_sec(double s) { return ns(static_cast<std::int64_t>(s * 1e9)); }

// ngx_http_limit_req_lookup and _account, for one client.
struct nginx_limit_req {
    std::int64_t rate_milli;   // rate=Nr/s: N * 1000
    std::int64_t burst_milli;  // burst=B: B * 1000
    bool nodelay = false;
    std::int64_t excess = 0;
    std::int64_t last = -1;    // ms; -1: no node yet

    // nullopt: refused; else the delay before the request is served.
    std::optional<ns> offer(ns arrival)
    {
        const std::int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(arrival).count();
        if (last < 0) {
            last = now;
            excess = 0;
            return 0ns;
        }
        std::int64_t ms = std::max<std::int64_t>(0, now - last);
        std::int64_t e = std::max<std::int64_t>(0, excess - rate_milli * ms / 1000 + 1000);
        if (e > burst_milli) return std::nullopt;
        excess = e;
        if (ms) last = now;
        if (nodelay) return 0ns;
        return std::chrono::milliseconds(e * 1000 / rate_milli);
    }
};

// A leaky bucket with no slack, as the examples configure it: grants one interval apart.
struct bucket {
    ns next{0};
    ns grant(ns now, double rate)
    {
        ns t = std::max(now, next);
        next = t + from_sec(1 / rate);
        return t;
    }
};

struct crawl_result {
    double seconds = 0;
    std::uint64_t refusals = 0;
    double final_pace = 0;
    double after_first_refusal = 0;   // the pace once the first refusal was answered
    bool above_refused = false;       // the pace was ever above the lowest rate refused
};

// One host, `pages` pages known after the first one (the seed links to them all), four
// requests in flight, requests leaving `jitter` (uniform) after their permit. A refusal
// with retry_after pauses the host that long; without, a full-jitter backoff (bound
// 200 ms x 2^(k-1) after the k-th refusal in a row), as the crawler's retry policy does.
crawl_result crawl(const pace_learner_options& o, double limit, bool retry_after, std::uint64_t pages, ns jitter,
                   std::uint64_t seed = 1)
{
    pace_learner learner(o);
    nginx_limit_req server{static_cast<std::int64_t>(limit * 1000), 0};
    bucket b;
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<std::int64_t> jit(0, jitter.count());
    ns now{0}, paused_until{0};
    std::uint64_t fetched = 0, known = 1, streak = 0;
    crawl_result r;
    // Sequential sends are enough: at these rates a response (0.5 ms) is back long before
    // the next permit, so four in flight would never be more than one.
    while (fetched < pages) {
        if (fetched >= known) break;
        ns t = b.grant(now, learner.rate());
        if (t < paused_until) {   // a permit inside a pause is dropped; queue again after it
            b.next = paused_until;
            now = paused_until;
            continue;
        }
        ns arrival = t + ns(jit(rng));
        auto s = learner.on_sent(arrival);
        auto answer = server.offer(arrival);
        now = arrival + 500us + answer.value_or(0ns);
        learner.on_answer(now, s, !answer);
        if (!answer && r.refusals == 0) r.after_first_refusal = learner.rate();
        if (learner.rate() > learner.refused_at() * (1 + 1e-9)) r.above_refused = true;
        if (answer) {
            ++fetched;
            streak = 0;
            if (fetched == 1) known = pages;
        } else {
            ++r.refusals;
            ++streak;
            ns pause = 1s;
            if (!retry_after) {
                double bound = std::min(30.0, 0.2 * static_cast<double>(1ull << std::min<std::uint64_t>(streak - 1, 20)));
                pause = from_sec(std::uniform_real_distribution<double>(0, bound)(rng));
            }
            paused_until = std::max(paused_until, now + pause);
        }
    }
    r.seconds = sec(now);
    r.final_pace = learner.rate();
    return r;
}

crawl_result crawl(double limit, double ceiling, double initial, bool retry_after, std::uint64_t pages, ns jitter,
                   std::uint64_t seed = 1)
{
    pace_learner_options o;
    o.ceiling = ceiling;
    o.initial = initial;
    return crawl(o, limit, retry_after, pages, jitter, seed);
}

// The crawler's options (examples/crawler: learner_options, options::start_per_second).
pace_learner_options crawler_options(double per_host_rate)
{
    pace_learner_options o;
    o.ceiling = per_host_rate;
    o.initial = std::max(per_host_rate / 8, std::min(per_host_rate / 2, 10.0));
    o.floor = 0.05;
    o.margin = 0.99;
    o.resolution = 1ms;
    return o;
}

// A client with four requests out at once, each answered `latency` after it is sent, pacing
// at the learner's rate against limit_req with no burst, for `seconds`: answers come back
// after later requests have left, so that what the server admitted after a refusal arrives
// after the pace was cut. No pause after a refusal (429 without Retry-After). The server's
// limit may drop from `earlier_limit` to `limit` at `limit_drops_at` (a reload, a quota now
// shared with others).
struct pipelined_result {
    double after_first_refusal = 0;   // the pace once every answer to the first overshoot was in
    double final_pace = 0;
    std::uint64_t refusals = 0;
    double lowest_refused = 1e300;
    std::uint64_t later_refusals = 0;   // once the first overshoot's answers were in
    bool above_refused = false;
};

pipelined_result pipelined(double limit, double start, double ceiling, ns latency, double seconds,
                           double earlier_limit = 0, ns limit_drops_at = 0ns)
{
    pace_learner_options o;
    o.ceiling = ceiling;
    o.initial = start;
    pace_learner learner(o);
    nginx_limit_req server{static_cast<std::int64_t>((earlier_limit > 0 ? earlier_limit : limit) * 1000), 0};
    bucket b;
    struct pending {
        ns done;
        pace_learner::sent s;
        bool refused;
    };
    std::deque<pending> out;   // in order of sending, and so of answering
    pipelined_result r;
    ns first_refusal_answered = ns::max();
    const ns end = from_sec(seconds);
    ns now{0};
    for (;;) {
        // The next request: a permit, once one of the four is free; answers due before it first.
        ns t = b.grant(out.size() == 4 ? std::max(now, out.front().done) : now, learner.rate());
        while (!out.empty() && out.front().done <= t) {
            const auto& a = out.front();
            learner.on_answer(a.done, a.s, a.refused);
            if (a.refused) {
                r.lowest_refused = std::min(r.lowest_refused, a.s.rate);
                if (first_refusal_answered == ns::max()) first_refusal_answered = a.done;
            }
            if (learner.rate() > learner.refused_at() * (1 + 1e-9)) r.above_refused = true;
            out.pop_front();
        }
        now = t;
        if (r.after_first_refusal == 0 && first_refusal_answered != ns::max() && t >= first_refusal_answered + latency)
            r.after_first_refusal = learner.rate();
        if (t >= end) break;
        if (t >= limit_drops_at) server.rate_milli = static_cast<std::int64_t>(limit * 1000);
        auto s = learner.on_sent(t);
        auto answer = server.offer(t);
        if (!answer) {
            ++r.refusals;
            if (r.after_first_refusal > 0) ++r.later_refusals;
        }
        out.push_back({t + latency, s, !answer});
    }
    r.final_pace = learner.rate();
    return r;
}

struct api_result {
    double rate = 0;          // accepted per second after the first `settle` seconds
    double refused_share = 0; // refusals among the requests sent after `settle`
    double final_pace = 0;
    std::uint64_t refused_total = 0;
};

// Four workers paced by one learner against limit_req burst=1 (delayed, not refused,
// within the burst), 429 without Retry-After: no pause, the pace alone answers.
api_result api(double limit, double initial, double ceiling, double seconds, double settle, ns jitter,
               std::uint64_t seed = 1)
{
    pace_learner_options o;
    o.ceiling = ceiling;
    o.initial = initial;
    pace_learner learner(o);
    nginx_limit_req server{static_cast<std::int64_t>(limit * 1000), 1000};
    bucket b;
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<std::int64_t> jit(0, jitter.count());
    struct worker {
        ns free_at{0};
    };
    std::vector<worker> workers(4);
    struct pending {
        ns done;
        pace_learner::sent s;
        bool refused;
    };
    std::deque<pending> in_flight;
    api_result r;
    std::uint64_t ok_after = 0, sent_after = 0, refused_after = 0;
    const ns end = from_sec(seconds), settle_at = from_sec(settle);
    ns now{0};
    for (;;) {
        // The next worker free asks for a permit; answers due before it are fed first.
        auto w = std::min_element(workers.begin(), workers.end(),
                                  [](const worker& a, const worker& b) { return a.free_at < b.free_at; });
        ns t = b.grant(std::max(now, w->free_at), learner.rate());
        std::sort(in_flight.begin(), in_flight.end(), [](auto& a, auto& b) { return a.done < b.done; });
        while (!in_flight.empty() && in_flight.front().done <= t) {
            learner.on_answer(in_flight.front().done, in_flight.front().s, in_flight.front().refused);
            in_flight.pop_front();
        }
        if (t >= end) break;
        now = t;
        ns arrival = t + ns(jit(rng));
        auto s = learner.on_sent(arrival);
        auto answer = server.offer(arrival);
        ns done = arrival + 300us + answer.value_or(0ns);
        in_flight.push_back({done, s, !answer});
        w->free_at = done;
        if (!answer) ++r.refused_total;
        if (t >= settle_at) {
            ++sent_after;
            if (answer) ++ok_after;
            else ++refused_after;
        }
    }
    r.rate = static_cast<double>(ok_after) / (seconds - settle);
    r.refused_share = sent_after ? static_cast<double>(refused_after) / static_cast<double>(sent_after) : 0;
    r.final_pace = learner.rate();
    return r;
}

} // namespace

TEST_CASE("pace_learner: the nginx model refuses as limit_req does")
{
    nginx_limit_req n{20'000, 0};
    CHECK(n.offer(0ms).has_value());
    CHECK_FALSE(n.offer(49ms).has_value());   // burst 0: 50 ms apart at 20 r/s
    CHECK(n.offer(50ms).has_value());
    CHECK_FALSE(n.offer(60ms).has_value());
    nginx_limit_req d{50'000, 1000};          // burst=1: one request early by up to 20 ms is delayed
    CHECK(d.offer(0ms) == 0ns);
    CHECK(d.offer(5ms) == 15ms);
    CHECK_FALSE(d.offer(10ms).has_value());
}

TEST_CASE("pace_learner: a crawl behind limit_req 20r/s settles just under it, with one or two refusals")
{
    // The learner's own defaults, from an eighth of the ceiling (the crawler's options are
    // tested below). The ideal is 15 s (300 pages at 20/s); a refusal with Retry-After: 1
    // costs a second of it, the slow start and the margin under the limit the rest.
    for (bool ra : {true, false}) {
        for (double ceiling : {40.0, 100.0}) {
            auto r = crawl(20, ceiling, ceiling / 8, ra, 300, 300us);
            MESSAGE("limit 20/s, paced at " << ceiling << "/s, " << std::string(ra ? "429 + Retry-After: 1" : "503 alone") << ": "
                                            << r.seconds << " s, " << r.refusals << " refusals, pace " << r.final_pace);
            CHECK(r.final_pace < 20);
            CHECK(r.final_pace > 20 * 0.93);
            CHECK(r.refusals <= 2);
            CHECK(r.seconds < 15 * (ra ? 1.2 : 1.15));
        }
    }
    // Under the limit: never refused, slow start to the ceiling.
    auto r = crawl(20, 15, 15.0 / 8, true, 300, 300us);
    MESSAGE("limit 20/s, paced at 15/s: " << r.seconds << " s");
    CHECK(r.refusals == 0);
    CHECK(r.final_pace == doctest::Approx(15));
    CHECK(r.seconds < 20 * 1.15);
}

TEST_CASE("pace_learner: the crawler's options behind limit_req 20r/s: within 15 % of pages / min(pace, 20) per s")
{
    // 300 pages and 3 other requests (robots.txt, a redirect, a file of another type), as
    // benchmarks/examples_vs_nginx.py crawls; a refusal with Retry-After: 1 costs 6.7 % of
    // the 15 s ideal, the slow start and the pace under the limit the rest. (The model's
    // server counts whole milliseconds, as nginx does.)
    for (bool ra : {true, false}) {
        for (double ceiling : {15.0, 40.0, 100.0}) {
            auto r = crawl(crawler_options(ceiling), 20, ra, 303, 300us);
            const double ideal = 300 / std::min(ceiling, 20.0);
            MESSAGE("crawler options at " << ceiling << "/s, " << std::string(ra ? "429 + Retry-After: 1" : "503 alone")
                                          << ": " << r.seconds << " s (" << (r.seconds / ideal - 1) * 100 << " % over "
                                          << ideal << " s), " << r.refusals << " refusals, pace " << r.final_pace);
            CHECK(r.seconds < ideal * 1.15);
            CHECK(r.refusals == (ceiling > 20 ? 1u : 0u));
            CHECK_FALSE(r.above_refused);
            if (ceiling > 20) {
                CHECK(r.final_pace < 20);
                CHECK(r.final_pace > 20 * 0.95);
            } else {
                CHECK(r.final_pace == doctest::Approx(ceiling));
            }
        }
    }
}

TEST_CASE("pace_learner: after the slow start's one refusal the pace settles a few % under the limit, wherever it is")
{
    // The slow start grows 5.5 % per request at 20/s (6.9 % at 16/s): the first refusal
    // brackets the limit that closely, and the pace settles under the last rate accepted
    // (less the crawler's millisecond and 1 %), never above the rate refused, with no second
    // overshoot after the pause. (A limit just above the start, 10/s, is crossed in steps of
    // 10 %: too coarse to settle at once, it takes a second refusal, as "a refusal far above
    // what was accepted" below shows.)
    for (double limit : {16.0, 18.0, 19.0, 21.0, 23.0, 27.0, 35.0}) {
        for (bool ra : {true, false}) {
            auto r = crawl(crawler_options(100), limit, ra, 600, 300us);
            MESSAGE("limit " << limit << "/s, " << std::string(ra ? "Retry-After" : "503") << ": pace "
                             << r.after_first_refusal << " after the refusal, " << r.final_pace << " at the end, "
                             << r.refusals << " refusals, " << r.seconds << " s");
            CHECK(r.refusals == 1);
            CHECK_FALSE(r.above_refused);
            CHECK(r.after_first_refusal < limit);
            CHECK(r.after_first_refusal > limit * 0.9);
            CHECK(r.final_pace == doctest::Approx(r.after_first_refusal));
        }
    }
}

TEST_CASE("pace_learner: refused at three times the host's rate, four in flight, it settles from what was admitted")
{
    // Paced at 60/s, its ceiling, until the server's limit drops from 100/s to 20/s (no
    // burst): the server then admits one request in three, 50 ms apart; their answers come
    // after the refusal's, and place the limit at 20/s, where the refusal alone says only
    // "under 60/s" (half of it, 30/s, would be refused again at once).
    auto r = pipelined(20, 60, 60, 60ms, 30, 100, 5s);
    MESSAGE("pace " << r.after_first_refusal << " once the first overshoot's answers were in, " << r.final_pace
                    << " after 30 s, " << r.refusals << " refusals (" << r.later_refusals
                    << " after the first overshoot), lowest rate refused " << r.lowest_refused);
    CHECK(r.after_first_refusal < 20);
    CHECK(r.after_first_refusal > 20 * 0.95);
    CHECK(r.final_pace < 20);
    CHECK(r.final_pace > 20 * 0.95);
    CHECK_FALSE(r.above_refused);
    // Between 20/s and 60/s it climbs once more, in steps of the slow start, to find how
    // close to 20/s it may go: one refusal, and after each cut one permit the bucket had
    // granted at the older pace.
    CHECK(r.later_refusals <= 3);
    CHECK(r.lowest_refused > 20);
}

TEST_CASE("pace_learner: an API client behind limit_req 50r/s burst=1 gets >= 95 % of it, <= 1 % refused once settled")
{
    for (double start : {25.0, 50.0, 100.0}) {
        auto r = api(50, start, 100, 60, 15, 300us);
        MESSAGE("started at " << start << "/s: " << r.rate << "/s after 15 s, refused " << r.refused_share * 100
                              << " %, " << r.refused_total << " refusals in all, pace " << r.final_pace);
        CHECK(r.rate >= 0.95 * 50);
        CHECK(r.refused_share <= 0.01);
    }
}

TEST_CASE("pace_learner: jitter of 2 ms on 50 ms spacing costs a little pace, not a storm of refusals")
{
    for (bool ra : {true, false}) {
        auto r = crawl(20, 40, 5, ra, 300, 2ms, 7);
        MESSAGE("2 ms jitter, " << std::string(ra ? "Retry-After" : "503") << ": " << r.seconds << " s, " << r.refusals
                                << " refusals, pace " << r.final_pace);
        CHECK(r.refusals <= 3);
        CHECK(r.seconds < 15 * 1.3);
    }
}

TEST_CASE("pace_learner: answers to requests sent before a cut, and idle sends, teach nothing")
{
    pace_learner_options o;
    o.ceiling = o.initial = 100;
    pace_learner l(o);
    auto a = l.on_sent(0ms);
    auto b = l.on_sent(10ms);
    auto c = l.on_sent(20ms);
    CHECK(b.busy);
    CHECK(b.rate == doctest::Approx(100));
    CHECK(l.on_answer(21ms, c, true));   // refused at 100/s, nothing accepted: half of it
    CHECK(l.rate() == doctest::Approx(50));
    CHECK_FALSE(l.on_answer(22ms, b, true));   // sent before the cut
    CHECK_FALSE(l.on_answer(22ms, a, false));
    auto idle = l.on_sent(5s);
    CHECK_FALSE(idle.busy);
    CHECK_FALSE(l.on_answer(5s + 1ms, idle, false));
    CHECK(l.rate() == doctest::Approx(50));
}

TEST_CASE("pace_learner: a refusal far above what was accepted restarts from what was accepted")
{
    pace_learner_options o;
    o.ceiling = 100;
    o.initial = 10;
    pace_learner l(o);
    ns t{0};
    for (int i = 0; i < 5; ++i) {   // accepted at 10/s: the pace grows in slow start
        auto s = l.on_sent(t);
        l.on_answer(t + 1ms, s, false);
        t += 100ms;
    }
    CHECK(l.slow_start());
    CHECK(l.rate() > 10);
    // Sent 50 ms after the last one, refused: a rate is only ever counted up to the pace it
    // was sent at (a shorter gap is jitter), and that is still well above the 10/s proven.
    const double paced = l.rate();
    CHECK(paced < 1.25 * 10 * 1.2);   // the pace stays within reach of the rates tested
    auto s = l.on_sent(t - 50ms);
    CHECK(l.on_answer(t, s, true));
    CHECK_FALSE(l.slow_start());
    CHECK(l.refused_at() == doctest::Approx(paced));
    CHECK(l.rate() == doctest::Approx(10 * 0.97));
    for (int i = 0; i < 50; ++i) {   // then climbs toward what was refused x 0.97
        auto a = l.on_sent(t);
        l.on_answer(t + 1ms, a, false);
        t += ns(static_cast<std::int64_t>(1e9 / l.rate()));
    }
    CHECK(l.rate() > 10);
    CHECK(l.rate() == doctest::Approx(paced * 0.97).epsilon(0.02));
}

TEST_CASE("pace_learner: the ceiling binds, bad options are refused")
{
    pace_learner_options o;
    o.ceiling = 10;
    o.initial = 10;
    pace_learner l(o);
    ns t{0};
    for (int i = 0; i < 1000; ++i) {
        auto s = l.on_sent(t);
        l.on_answer(t + 1ms, s, false);
        t += 100ms;
    }
    CHECK(l.rate() == doctest::Approx(10));
    l.set_ceiling(4);
    CHECK(l.rate() == doctest::Approx(4));
    o.initial = 11;
    CHECK_THROWS_AS(pace_learner{o}, std::invalid_argument);
    o.initial = 5;
    o.margin = 1;
    CHECK_THROWS_AS(pace_learner{o}, std::invalid_argument);
}

TEST_CASE("pace_learner: an accepted gap proves its rate less the server's resolution; a negative one is refused")
{
    pace_learner_options o;
    o.ceiling = o.initial = 20;
    o.resolution = 1ms;
    pace_learner l(o);
    auto a = l.on_sent(0ms);
    l.on_answer(1ms, a, false);
    auto b = l.on_sent(50ms);
    l.on_answer(51ms, b, false);
    auto c = l.on_sent(100ms);
    l.on_answer(101ms, c, false);
    CHECK(l.accepted_at() == doctest::Approx(1 / 0.051));   // 50 ms apart: 19.6/s, not 20/s
    auto d = l.on_sent(150ms);
    CHECK(l.on_answer(151ms, d, true));   // refused at 20/s, 19.6/s proven: close, settled under it
    CHECK(l.rate() == doctest::Approx(1 / 0.051 * o.margin));
    o.resolution = -1ms;
    CHECK_THROWS_AS(pace_learner{o}, std::invalid_argument);
}
