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

void check_api(server& srv, double start, ns length = 20s)
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
    CHECK(r.quota_share >= 0.95);
    CHECK(r.refused_share <= 0.01);
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
    gcra_server srv(20, 5, true, true);
    rate_learner_options o;
    o.initial = sluice::rate::per_second(10);
    o.ceiling = sluice::rate::per_second(40);
    rate_learner l(o);
    std::vector<double> paces;
    ns at{0};
    double refused_at = 0;
    for (int i = 0; i < 600; ++i) {
        auto t = l.on_sent(at);
        auto v = srv.offer(at);
        if (v.refused && refused_at == 0) refused_at = t.pace;
        auto adv = l.on_answer(at + 1ms, t, {v.refused ? rate_learner::outcome::refused : rate_learner::outcome::admitted, v.retry_after});
        CHECK(adv.retry_at >= at);
        if (v.refused) CHECK(adv.retry_at == at + 1ms + 1s);   // the refused request's retry, no more
        CHECK_FALSE(adv.paused);                              // nginx admits the others meanwhile
        paces.push_back(l.rate());
        at += from_sec(1 / l.rate());
    }
    INFO("first refused at ", refused_at, "/s; bounds ", l.limit_low(), "-", l.limit_high(), ", pace ", l.rate());
    CHECK(refused_at > 20);
    CHECK_FALSE(l.measuring());
    CHECK(l.rate() < 20.0);
    CHECK(l.rate() >= 0.95 * 20);
    CHECK(l.stats().located == 1);
    // The pace never went below what it settled at: no steps down, no undershoot.
    CHECK(*std::min_element(paces.begin() + 10, paces.end()) >= l.rate() - 1e-9);
}

TEST_CASE("rate_learner: the API client's goals against simulated servers, from 25, 50 and 100/s up to 200/s")
{
    for (double start : {25.0, 50.0, 100.0}) {
        for (bool ra : {false, true}) {
            for (std::int64_t burst : {1, 5, 10, 20, 50}) {
                gcra_server nodelay(50, burst, true, ra);
                check_api(nodelay, start);
                gcra_server delaying(50, burst, false, ra);
                check_api(delaying, start);
            }
            fixed_window_server fixed(50, 1s, ra);
            check_api(fixed, start);
            sliding_log_server sliding(50, 1s, ra);
            check_api(sliding, start);
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
