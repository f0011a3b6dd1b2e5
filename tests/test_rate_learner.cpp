// sluice::rate_learner step by step, and against simulated servers in simulated time (a
// manual clock: every event carries its instant): GCRA as nginx's limit_req runs it
// (bursts 0 to 50, refusing or delaying), fixed and sliding windows, with and without
// Retry-After, a limit that changes mid-run; driven as the API client (four workers
// behind one pace) and the crawler (pages retried after their Retry-After) drive it.
#include <sluice/rate_learner.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <queue>
#include <random>
#include <set>
#include <limits>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using sluice::rate_learner;
using sluice::rate_learner_options;
using ns = std::chrono::nanoseconds;

namespace {

double sec(ns d) { return std::chrono::duration<double>(d).count(); }
ns from_sec(double s) { return ns(static_cast<std::int64_t>(s * 1e9)); }

// What a simulated server says to one request arriving at `at`.
struct verdict {
    bool refused = false;
    ns delay{0};                      // admitted: served this much later
    std::optional<ns> retry_after{};  // refused: its Retry-After
};

struct server {
    virtual ~server() = default;
    virtual verdict offer(ns at) = 0;
    virtual std::string name() const = 0;
    virtual double limit(ns at) const = 0;   // requests per second it admits at most
};

// ngx_http_limit_req_lookup and _account for one client: excess in thousandths of a
// request on a millisecond clock; a refused request changes nothing; within the burst, an
// excess is delayed (without nodelay) or served at once (nodelay).
struct gcra_server : server {
    double rate;
    std::int64_t burst;
    bool nodelay;
    bool retry_after;
    std::optional<std::pair<ns, double>> change{};   // from then on, that rate
    std::int64_t excess = 0, last = -1;

    gcra_server(double r, std::int64_t b, bool nd, bool ra) : rate(r), burst(b), nodelay(nd), retry_after(ra) {}

    double limit(ns at) const override { return change && at >= change->first ? change->second : rate; }
    std::string name() const override
    {
        return "gcra " + std::to_string(static_cast<int>(rate)) + "/s burst " + std::to_string(burst) +
               (nodelay ? " nodelay" : " delaying") + (retry_after ? " Retry-After: 1" : "") +
               (change ? " then " + std::to_string(static_cast<int>(change->second)) + "/s" : "");
    }
    verdict offer(ns at) override
    {
        const auto rate_milli = static_cast<std::int64_t>(limit(at) * 1000);
        const std::int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(at).count();
        if (last < 0) {
            last = now;
            return {};
        }
        const std::int64_t ms = std::max<std::int64_t>(0, now - last);
        const std::int64_t e = std::max<std::int64_t>(0, excess - rate_milli * ms / 1000 + 1000);
        if (e > burst * 1000) return {true, 0ns, retry_after ? std::optional<ns>(1s) : std::nullopt};
        excess = e;
        if (ms) last = now;
        return {false, nodelay ? 0ns : std::chrono::milliseconds(e * 1000 / rate_milli), std::nullopt};
    }
};

// `quota` per `window`, counted in windows aligned on 0; Retry-After: until the next one.
struct fixed_window_server : server {
    std::uint64_t quota;
    ns window;
    bool retry_after;
    std::int64_t current = -1;
    std::uint64_t used = 0;
    fixed_window_server(std::uint64_t q, ns w, bool ra) : quota(q), window(w), retry_after(ra) {}
    double limit(ns) const override { return static_cast<double>(quota) / sec(window); }
    std::string name() const override
    {
        return "fixed window " + std::to_string(quota) + " per " + std::to_string(sec(window)) + " s" +
               (retry_after ? " Retry-After" : "");
    }
    verdict offer(ns at) override
    {
        const std::int64_t w = at / window;
        if (w != current) {
            current = w;
            used = 0;
        }
        if (used >= quota) return {true, 0ns, retry_after ? std::optional<ns>((w + 1) * window - at) : std::nullopt};
        ++used;
        return {};
    }
};

// At most `quota` admitted in any `window` (a log); Retry-After: until the oldest leaves.
struct sliding_log_server : server {
    std::uint64_t quota;
    ns window;
    bool retry_after;
    std::deque<ns> log;
    sliding_log_server(std::uint64_t q, ns w, bool ra) : quota(q), window(w), retry_after(ra) {}
    double limit(ns) const override { return static_cast<double>(quota) / sec(window); }
    std::string name() const override
    {
        return "sliding log " + std::to_string(quota) + " per " + std::to_string(sec(window)) + " s" +
               (retry_after ? " Retry-After" : "");
    }
    verdict offer(ns at) override
    {
        while (!log.empty() && log.front() <= at - window) log.pop_front();
        if (log.size() >= quota)
            return {true, 0ns, retry_after ? std::optional<ns>(log.front() + window - at) : std::nullopt};
        log.push_back(at);
        return {};
    }
};

// The API client's way: `workers` workers, each sends when a permit of a bucket at the
// learner's pace (burst 1) is due, waits for its answer, and goes again; refused requests
// are not retried; a pause holds every worker.
struct api_run {
    std::uint64_t sent = 0;
    ns first_refusal = ns::max();
    // Requests arriving from 3 s after the first refusal: admitted and refused.
    std::uint64_t late_admitted = 0, late_refused = 0;
    double late_seconds = 0;
    double quota_share = 0;     // admitted per second after then, over the limit
    double refused_share = 0;   // refused after then, over sent after then
    std::uint64_t refusals = 0;
    double final_pace = 0;
};

struct event {
    ns at;
    int kind;   // 0: a worker is free; 1: an answer
    unsigned worker;
    rate_learner::ticket t;
    verdict v;
    bool operator>(const event& o) const { return at > o.at || (at == o.at && kind < o.kind); }
};

api_run run_api(server& srv, rate_learner_options o, ns length, unsigned workers = 4, std::uint64_t seed = 1)
{
    rate_learner learner(o);
    const char* tr = std::getenv("RATE_LEARNER_TRACE");
    const bool trace = tr && srv.name() == tr && o.initial.per_second() == std::atof(std::getenv("RATE_LEARNER_START"));
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<std::int64_t> jitter(0, 1'000'000);   // up to 1 ms on the way
    std::priority_queue<event, std::vector<event>, std::greater<>> q;
    for (unsigned w = 0; w < workers; ++w) q.push({0ns, 0, w, {}, {}});
    ns next_permit{0};
    api_run r;
    struct arrival {
        ns at;
        bool refused;
    };
    std::vector<arrival> arrivals;
    while (!q.empty()) {
        event e = q.top();
        q.pop();
        if (e.kind == 1) {
            rate_learner::answer a;
            a.what = e.v.refused ? rate_learner::outcome::refused : rate_learner::outcome::admitted;
            a.retry_after = e.v.retry_after;
            learner.on_answer(e.at, e.t, a);
            if (trace)
                std::printf("  %8.4f seq %5llu sent %8.4f %s pace %6.2f lo %6.2f hi %6.2f %s\n", sec(e.at),
                            static_cast<unsigned long long>(e.t.seq), sec(e.t.at), e.v.refused ? "REFUSED " : "admitted",
                            learner.rate(), learner.limit_low(), learner.limit_high(),
                            learner.slow_start() ? "slow start" : learner.measuring() ? "descent" : "settled");
            q.push({e.at, 0, e.worker, {}, {}});
            continue;
        }
        // A free worker: after any pause, when the bucket's next permit is due.
        ns t = std::max({e.at, learner.paused_until(), next_permit});
        if (t >= length) continue;
        if (t > e.at) {   // answers due before then come first
            q.push({t, 0, e.worker, {}, {}});
            continue;
        }
        next_permit = t + from_sec(1 / learner.rate());
        auto tk = learner.on_sent(t);
        ++r.sent;
        const ns at = t + ns(jitter(rng));
        verdict v = srv.offer(at);
        arrivals.push_back({at, v.refused});
        if (v.refused && r.first_refusal == ns::max()) r.first_refusal = at;
        q.push({at + 500us + v.delay, 1, e.worker, tk, v});
    }
    const ns from = (r.first_refusal == ns::max() ? 0ns : r.first_refusal) + 3s;
    for (auto& a : arrivals) {
        r.refusals += a.refused;
        if (a.at < from) continue;
        (a.refused ? r.late_refused : r.late_admitted) += 1;
    }
    r.late_seconds = sec(length - from);
    r.quota_share = static_cast<double>(r.late_admitted) / r.late_seconds / srv.limit(length);
    r.refused_share = static_cast<double>(r.late_refused) / std::max<double>(1, static_cast<double>(r.late_admitted + r.late_refused));
    r.final_pace = learner.rate();
    return r;
}

rate_learner_options api_options(double start, double ceiling = 200)
{
    rate_learner_options o;
    o.initial = sluice::rate::per_second(start);
    o.ceiling = sluice::rate::per_second(ceiling);
    o.floor = sluice::rate::per_second(1);
    return o;
}

void check_api(server& srv, double start, ns length = 20s, double share = 0.95, double refused = 0.01)
{
    auto r = run_api(srv, api_options(start), length);
    INFO(srv.name(), " from ", start, "/s: ", r.quota_share * 100, " % of the quota from 3 s after the first refusal, ",
         r.refused_share * 100, " % refused then (", r.late_refused, " of ", r.late_admitted + r.late_refused, "), ",
         r.refusals, " refusals in all, final pace ", r.final_pace, "/s");
    if (std::getenv("RATE_LEARNER_TABLE"))
        std::printf("%-45s from %3.0f/s: %5.1f %% of the quota, %4.2f %% refused (%llu), %3llu refusals, pace %.1f/s\n",
                    srv.name().c_str(), start, r.quota_share * 100, r.refused_share * 100,
                    static_cast<unsigned long long>(r.late_refused), static_cast<unsigned long long>(r.refusals),
                    r.final_pace);
    CHECK(r.quota_share >= share);
    CHECK(r.refused_share <= refused);
}

} // namespace

TEST_CASE("rate_learner: the count admitted between two refusals bounds a GCRA's rate, whatever its burst")
{
    // Paced at 30/s against 20/s: after the burst, every third request is refused.
    for (std::int64_t burst : {0, 5, 50}) {
        rate_learner_options o;
        o.initial = sluice::rate::per_second(30);
        o.ceiling = sluice::rate::per_second(30);
        o.longest_descent = 100s;
        rate_learner l(o);
        gcra_server srv(20, burst, true, false);
        std::uint64_t refusals = 0;
        for (int i = 0; i < 900 && !l.limit_low(); ++i) {
            const ns at = from_sec(i / 30.0);
            auto t = l.on_sent(at);
            auto v = srv.offer(at);
            refusals += v.refused;
            l.on_answer(at + 1ms, t, {v.refused ? rate_learner::outcome::refused : rate_learner::outcome::admitted});
        }
        INFO("burst ", burst, ": bounds ", l.limit_low(), " ", l.limit_high());
        CHECK(l.limit_low() < 20.0);
        CHECK(l.limit_high() > 20.0);
        CHECK(refusals >= 2);
    }
}

TEST_CASE("rate_learner: after the measurement the pace goes straight under the limit, not by small steps")
{
    // limit_req rate=20r/s burst=5 nodelay, 429 with Retry-After: 1, a client up to 40/s.
    gcra_server srv(20, 5, true, true);
    rate_learner_options o;
    o.initial = sluice::rate::per_second(10);
    o.ceiling = sluice::rate::per_second(40);
    rate_learner l(o);
    ns at{0};
    double refused_at = 0;
    std::optional<ns> settled;
    double lowest = 1e9, highest = 0;
    std::uint64_t refused_after = 0;
    for (int i = 0; i < 600; ++i) {
        auto t = l.on_sent(at);
        auto v = srv.offer(at);
        if (v.refused && refused_at == 0) refused_at = t.pace;
        auto adv = l.on_answer(at + 1ms, t, {v.refused ? rate_learner::outcome::refused : rate_learner::outcome::admitted, v.retry_after});
        if (v.refused) CHECK(adv.retry_at == at + 1ms + 1s);   // the refused request's retry, no more
        CHECK_FALSE(adv.paused);                              // nginx admits the others meanwhile
        if (!settled && !l.slow_start() && !l.measuring()) settled = at;
        if (settled) {
            lowest = std::min(lowest, l.rate());
            highest = std::max(highest, l.rate());
            refused_after += v.refused;
        }
        if (std::getenv("RATE_LEARNER_STEPS"))
            std::printf("%.4f %s pace %.2f lo %.2f hi %.2f %s\n", sec(at), v.refused ? "R" : "a", l.rate(), l.limit_low(),
                        l.limit_high(), l.measuring() ? "descent" : "");
        at += from_sec(1 / l.rate());
    }
    INFO("first refused at ", refused_at, "/s; bounds ", l.limit_low(), "-", l.limit_high(), ", pace ", lowest, "-",
         highest, " once settled");
    REQUIRE(settled);
    CHECK(refused_at > 20);
    CHECK(sec(*settled) < 5);
    // Once settled: under the limit, within 5 % of it, and never refused again.
    CHECK(highest < 20.0);
    CHECK(lowest >= 0.95 * 20);
    CHECK(refused_after == 0);
    CHECK(l.burst() >= 3);   // burst=5: what the slow start got admitted beyond 20/s
    CHECK(l.burst() <= 6);
}

TEST_CASE("rate_learner: the API client's goals against simulated GCRA servers, from 25, 50 and 100/s up to 200/s")
{
    // nginx's limit_req, refusing (nodelay) or delaying, with and without Retry-After: >= 95 %
    // of the quota from 3 s after the first refusal, <= 1 % refused then.
    for (double start : {25.0, 50.0, 100.0}) {
        for (bool ra : {false, true}) {
            for (std::int64_t burst : {1, 5, 10, 20, 50}) {
                gcra_server nodelay(50, burst, true, ra);
                check_api(nodelay, start);
                gcra_server delaying(50, burst, false, ra);
                check_api(delaying, start);
            }
        }
    }
}

TEST_CASE("rate_learner: windows, fixed and sliding, are located less closely")
{
    // A window admits its quota at once: what it admitted between two refusals is known to
    // a window's length, and the pace settles lower; the refusals it met on the way are
    // bounded all the same.
    for (double start : {25.0, 50.0, 100.0}) {
        for (bool ra : {false, true}) {
            fixed_window_server fixed(50, 1s, ra);
            check_api(fixed, start, 20s, 0.70, 0.05);
            sliding_log_server sliding(50, 1s, ra);
            check_api(sliding, start, 20s, 0.25, 0.10);
        }
    }
}

TEST_CASE("rate_learner: a limit that halves, or doubles, mid-run is found again")
{
    for (double to : {25.0, 100.0}) {
        gcra_server srv(50, 10, true, true);
        srv.change = std::make_pair(ns(10s), to);
        rate_learner_options o = api_options(50);
        o.hold = 5s;   // probes start 5 s after settling: a risen limit is found by them
        o.probe = 0.05;
        auto r = run_api(srv, o, 40s);
        INFO("50/s then ", to, "/s: final pace ", r.final_pace, ", ", r.refusals, " refusals");
        CHECK(r.final_pace <= to);
        CHECK(r.final_pace >= 0.8 * std::min(to, 50.0) * (to > 50 ? 1.2 : 1.0));
    }
}

namespace {

// The crawler's way: `pages` pages to fetch from one host, four in flight behind the pace;
// a refused page goes back to the queue, not before its Retry-After (the learner's
// retry_at); a pause holds every fetch. Returns the seconds until the last page.
double run_crawl(server& srv, double ceiling, std::uint64_t pages, std::uint64_t seed = 1, ns spread = 1ms)
{
    rate_learner_options o;
    o.ceiling = sluice::rate::per_second(ceiling);
    o.initial = sluice::rate::per_second(std::max(ceiling / 8, std::min(ceiling / 2, 10.0)));   // the crawler's start
    o.floor = sluice::rate::per_second(std::min(0.05, o.initial.per_second()));
    o.resolution = 1ms;
    rate_learner learner(o);
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<std::int64_t> jitter(0, spread.count());
    std::priority_queue<event, std::vector<event>, std::greater<>> q;
    for (unsigned w = 0; w < 4; ++w) q.push({0ns, 0, w, {}, {}});
    std::uint64_t fresh = pages, done = 0;
    std::multiset<ns> retries;   // refused pages, each from when it may go again
    ns next_permit{0}, end{0};
    while (!q.empty() && done < pages) {
        event e = q.top();
        q.pop();
        if (e.kind == 1) {
            rate_learner::answer a;
            a.what = e.v.refused ? rate_learner::outcome::refused : rate_learner::outcome::admitted;
            a.retry_after = e.v.retry_after;
            auto adv = learner.on_answer(e.at, e.t, a);
            if (std::getenv("RATE_LEARNER_CRAWL") && srv.name() == std::getenv("RATE_LEARNER_CRAWL") && ceiling == 40)
                std::printf("  %8.4f seq %5llu %s pace %6.2f lo %6.2f hi %6.2f %s\n", sec(e.at),
                            static_cast<unsigned long long>(e.t.seq), e.v.refused ? "REFUSED " : "admitted", learner.rate(),
                            learner.limit_low(), learner.limit_high(),
                            learner.slow_start() ? "slow start" : learner.measuring() ? "descent" : "settled");
            if (e.v.refused) retries.insert(adv.retry_at);
            else if (++done == pages) end = e.at;
            q.push({e.at, 0, e.worker, {}, {}});
            continue;
        }
        ns t = std::max({e.at, learner.paused_until(), next_permit});
        const bool ready = fresh > 0 || (!retries.empty() && *retries.begin() <= t);
        if (!ready) {
            if (retries.empty()) continue;   // nothing left for this worker: the others finish
            t = std::max(t, *retries.begin());
        }
        if (t > e.at) {
            q.push({t, 0, e.worker, {}, {}});
            continue;
        }
        if (fresh > 0) --fresh;
        else retries.erase(retries.begin());
        next_permit = t + from_sec(1 / learner.rate());
        auto tk = learner.on_sent(t);
        const ns at = t + ns(jitter(rng));
        verdict v = srv.offer(at);
        q.push({at + 500us + v.delay, 1, e.worker, tk, v});
    }
    return sec(end);
}

} // namespace

TEST_CASE("rate_learner: the crawler's goal behind limit_req 20r/s: every page within 15 % of pages / min(pace, 20)")
{
    // Bursts 0, 5 and 20, refusing or delaying, 429 with Retry-After: 1 or 503 alone; the
    // crawler paced at 15, 40 and 100/s; 300 pages.
    for (double pace : {15.0, 40.0, 100.0}) {
        for (bool ra : {true, false}) {
            for (std::int64_t burst : {0, 5, 20}) {
                for (bool nodelay : {true, false}) {
                    gcra_server srv(20, burst, nodelay, ra);
                    const double ideal = 300 / std::min(pace, 20.0);
                    const double took = run_crawl(srv, pace, 300);
                    INFO(srv.name(), " paced at ", pace, "/s: ", took, " s, ideal ", ideal, " s");
                    if (std::getenv("RATE_LEARNER_TABLE"))
                        std::printf("crawl %-45s at %3.0f/s: %6.2f s, ideal %6.2f s (%+.1f %%)\n", srv.name().c_str(), pace,
                                    took, ideal, (took / ideal - 1) * 100);
                    CHECK(took <= 1.15 * ideal);
                }
            }
        }
    }
}

TEST_CASE("rate_learner: without a burst, requests that reach the host up to 4 ms late cost some pace, not the crawl")
{
    // A loaded network delays some requests: two requests sent 50 ms apart may arrive 46 ms
    // apart, and a host with no burst refuses the second. 300 pages at 20/s, paced at 40/s.
    for (bool ra : {true, false}) {
        gcra_server srv(20, 0, true, ra);
        const double took = run_crawl(srv, 40, 300, 1, 4ms);
        INFO("Retry-After: ", ra, ": ", took, " s, ideal 15 s");
        CHECK(took <= 1.15 * 15);
    }
}

TEST_CASE("rate_learner: Retry-After bounds the refused request's retry only, within max_pause")
{
    rate_learner_options o;
    o.initial = sluice::rate::per_second(10);
    o.max_pause = 30s;
    rate_learner l(o);
    auto t = l.on_sent(0ns);
    auto a = l.on_answer(1ms, t, {rate_learner::outcome::refused, ns(2s)});
    CHECK(a.retry_at == 1ms + 2s);
    CHECK_FALSE(a.paused);
    CHECK(l.paused_until() == ns::min());
    t = l.on_sent(100ms);
    a = l.on_answer(101ms, t, {rate_learner::outcome::refused, ns(std::chrono::hours(24 * 365))});   // a year
    CHECK(a.retry_at == 101ms + 30s);
    CHECK(l.stats().pauses_cut == 1);
    t = l.on_sent(200ms);
    a = l.on_answer(201ms, t, {rate_learner::outcome::refused, ns(-5s)});   // in the past: at once
    CHECK(a.retry_at == 201ms);
}

TEST_CASE("rate_learner: refusals with nothing admitted for `block` pause every send, until Retry-After or a doubling backoff")
{
    for (bool ra : {true, false}) {
        rate_learner_options o;
        o.initial = sluice::rate::per_second(20);
        o.block = 250ms;
        o.block_backoff = 500ms;
        rate_learner l(o);
        ns at{0};
        bool paused = false;
        int sent = 0;
        for (; sent < 20 && !paused; ++sent, at += 50ms) {
            auto t = l.on_sent(at);
            auto a = l.on_answer(at + 1ms, t, {rate_learner::outcome::refused, ra ? std::optional<ns>(3s) : std::nullopt});
            paused = a.paused;
        }
        INFO("Retry-After: ", ra);
        CHECK(paused);
        CHECK(sent == 6);   // the sixth refusal, 250 ms after the first
        CHECK(l.paused_until() == at - 50ms + 1ms + (ra ? ns(3s) : ns(500ms)));
        if (!ra) {
            // Still refused after it: the next block waits twice as long; one admitted resets it.
            const ns from = l.paused_until();
            for (int i = 0; i < 6; ++i) {
                auto t = l.on_sent(from + i * 50ms);
                l.on_answer(from + i * 50ms + 1ms, t, {rate_learner::outcome::refused});
            }
            CHECK(l.paused_until() == from + 250ms + 1ms + 1s);
        }
    }
}

TEST_CASE("rate_learner: announced quotas cap the pace; one used up pauses until its reset; absurd ones are counted")
{
    rate_learner_options o;
    o.initial = sluice::rate::per_second(100);
    o.ceiling = sluice::rate::per_second(200);
    o.max_pause = 60s;
    rate_learner l(o);
    rate_learner::quota q;
    q.name = "requests";
    q.limit = 600;
    q.window = 60s;
    auto a = l.announce(0ns, q);   // 600 per minute: 10/s
    CHECK(a.rate_changed);
    CHECK(l.rate() == doctest::Approx(10));
    // Tokens: 40,000 a minute left, 2,000 a request: 20 requests in 60 s.
    rate_learner::quota tokens;
    tokens.name = "tokens";
    tokens.per_request = false;
    tokens.remaining = 40000;
    tokens.reset = 60s;
    auto t = l.on_sent(1ms);
    for (int i = 0; i < 60; ++i) l.on_answer(2ms, t, {rate_learner::outcome::admitted, std::nullopt, 2000});
    l.announce(2ms, tokens);
    CHECK(l.rate() == doctest::Approx(20.0 / 60).epsilon(0.05));
    // Used up: no send until the reset; a reset far away is cut to max_pause.
    tokens.remaining = 0;
    tokens.reset = 10s;
    a = l.announce(3ms, tokens);
    CHECK(a.paused);
    CHECK(l.paused_until() == 3ms + 10s);
    tokens.reset = std::chrono::hours(1000);
    l.announce(4ms, tokens);
    CHECK(l.paused_until() == 4ms + 60s);
    CHECK(l.stats().pauses_cut == 1);
    // Nonsense changes nothing.
    const double before = l.rate();
    rate_learner::quota bad;
    bad.name = "requests";
    bad.remaining = -1;
    bad.reset = 1s;
    l.announce(5ms, bad);
    bad.remaining = std::numeric_limits<double>::quiet_NaN();
    l.announce(5ms, bad);
    bad.remaining = 5;
    bad.reset = -1s;
    l.announce(5ms, bad);
    CHECK(l.stats().bad_announcements == 3);
    CHECK(l.rate() == before);
    // Never above the ceiling, whatever is announced.
    rate_learner l2(o);
    q.limit = 1e12;
    l2.announce(0ns, q);
    CHECK(l2.rate() <= 200);
}

TEST_CASE("rate_learner: bad options are refused; follow and set_ceiling stay within the bounds")
{
    auto bad = [](auto change) {
        rate_learner_options o;
        change(o);
        CHECK_THROWS_AS(rate_learner{o}, boost::system::system_error);
    };
    bad([](auto& o) { o.initial = sluice::rate::per_second(2000); });
    bad([](auto& o) { o.floor = sluice::rate::per_second(2000); });
    bad([](auto& o) { o.margin = 0; });
    bad([](auto& o) { o.margin = 1.5; });
    bad([](auto& o) { o.precision = 0; });
    bad([](auto& o) { o.growth = std::numeric_limits<double>::infinity(); });
    bad([](auto& o) { o.max_pause = 0s; });
    bad([](auto& o) { o.block = -1s; });
    bad([](auto& o) { o.resolution = -1ms; });
    rate_learner_options o;
    o.ceiling = sluice::rate::per_second(50);
    rate_learner l(o);
    l.follow(1e9);
    CHECK(l.rate() == doctest::Approx(50));
    l.follow(-3);
    CHECK(l.rate() == doctest::Approx(o.floor.per_second()));
    l.follow(40);
    l.set_ceiling(5);
    CHECK(l.rate() == doctest::Approx(5));
    l.set_ceiling(std::numeric_limits<double>::quiet_NaN());   // ignored
    CHECK(l.rate() == doctest::Approx(5));
    // Answers that are not its own, or failures, teach nothing.
    const double before = l.rate();
    l.on_answer(1s, rate_learner::ticket{999, 0ns, 10}, {rate_learner::outcome::refused});
    auto t = l.on_sent(1s);
    l.on_answer(2s, t, {rate_learner::outcome::failed});
    CHECK(l.rate() == before);
    CHECK(l.stats().failed == 1);
    CHECK(l.stats().refused == 0);
}

TEST_CASE("rate_learner: the unloaded latency is the least of a long window, not of the last answers")
{
    rate_learner l(rate_learner_options{});
    auto answer = [&](ns at, ns latency) {
        auto t = l.on_sent(at);
        l.on_answer(at + latency, t, {});
    };
    CHECK(l.unloaded_latency() == ns{0});
    answer(0s, 50ms);   // alone
    // Then a steady load: every answer takes 88 ms. The least of them is not the unloaded
    // latency; the one answer alone is, for 30 to 60 s.
    ns t = 100ms;
    for (; t < 25s; t += 20ms) answer(t, 88ms);
    CHECK(l.unloaded_latency() == 50ms);
    for (; t < 55s; t += 20ms) answer(t, 88ms);
    CHECK(l.unloaded_latency() == 50ms);
    CHECK(std::chrono::abs(l.mean_latency() - 88ms) < 1ms);
    // Past the window, the loaded latency is all there is.
    for (; t < 95s; t += 20ms) answer(t, 88ms);
    CHECK(l.unloaded_latency() == 88ms);
    // A faster answer lowers it at once.
    answer(t, 40ms);
    CHECK(l.unloaded_latency() == 40ms);
    // Times at the ends of int64: no overflow, and a clock that goes back starts afresh.
    answer(ns::max() - 1s, 70ms);
    answer(ns::min() + 1s, 60ms);
    CHECK(l.unloaded_latency() == 60ms);
}
