// sluice::adaptive_rate_controller by simulation: a client sends at the controller's rate
// (evenly, pausing when told) to a simulated server, with manual time and no io_context.
// Each server answers with the fields a real one would send, formatted and parsed by
// sluice::http. After convergence, the figures measured are the share of requests refused
// and the share of the server's quota used; the goals are <= 1 % and >= 95 %.
#include <sluice/adaptive_rate_controller.hpp>
#include <sluice/http/ratelimit_fields.hpp>
#include <sluice/http/retry_after.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <memory>
#include <string>

namespace http = sluice::http;
using namespace std::chrono_literals;

namespace {

struct reply {
    unsigned status = 200;
    std::string policy, limit, retry_after;
};

std::string policy_field(std::uint64_t q, std::uint64_t w, std::optional<std::uint64_t> burst = {})
{
    http::quota_policy p{"default", q, w, {}, {}, {}};
    if (burst) p.extensions.push_back({"sluice-burst", {http::sf::bare_item::kind::integer,
                                                        static_cast<std::int64_t>(*burst), {}, true}});
    return http::format_ratelimit_policy(std::span<const http::quota_policy>(&p, 1)).value();
}

std::string limit_field(std::uint64_t r, std::uint64_t t)
{
    http::service_limit l{"default", r, t, {}, {}};
    return http::format_ratelimit(std::span<const http::service_limit>(&l, 1)).value();
}

std::uint64_t ceil_s(double s) { return s <= 0 ? 0 : static_cast<std::uint64_t>(std::ceil(s - 1e-9)); }

struct server {
    virtual ~server() = default;
    virtual reply handle(double now) = 0;
    virtual double quota(double from, double to) const = 0; // units the server would grant in [from, to)
};

// A token bucket (rate, burst) as sluice's example server describes itself: the policy's
// q / w is the rate, sluice-burst the burst, r the whole tokens left, t the seconds until
// full; a refusal says Retry-After (at least 1 s, as the example server does) unless told not to.
struct token_bucket_server : server {
    double rate, burst, tokens, last = 0;
    bool headers = true, retry_after = true;
    double advertise = 1; // > 1: the policy claims more than the bucket grants

    token_bucket_server(double r, double b) : rate(r), burst(b), tokens(b) {}

    reply handle(double now) override
    {
        tokens = std::min(burst, tokens + (now - last) * rate);
        last = now;
        reply out;
        if (tokens >= 1) {
            tokens -= 1;
        } else {
            out.status = 429;
            if (retry_after) out.retry_after = std::to_string(std::max<std::uint64_t>(1, ceil_s((1 - tokens) / rate)));
        }
        if (headers) {
            out.policy = policy_field(static_cast<std::uint64_t>(rate * advertise), 1, static_cast<std::uint64_t>(burst));
            out.limit = limit_field(static_cast<std::uint64_t>(tokens), ceil_s((burst - tokens) / rate));
        }
        return out;
    }
    double quota(double from, double to) const override { return rate * (to - from); }
};

// q per window of w seconds, windows aligned on multiples of w (plus a phase).
struct fixed_window_server : server {
    std::uint64_t q, w;
    double phase;
    std::int64_t window = -1;
    std::uint64_t used = 0;

    fixed_window_server(std::uint64_t q_, std::uint64_t w_, double ph) : q(q_), w(w_), phase(ph) {}

    reply handle(double now) override
    {
        auto k = static_cast<std::int64_t>(std::floor((now - phase) / static_cast<double>(w)));
        if (k != window) {
            window = k;
            used = 0;
        }
        double end = phase + static_cast<double>((k + 1) * static_cast<std::int64_t>(w));
        reply out;
        if (used < q) {
            ++used;
        } else {
            out.status = 429;
            out.retry_after = std::to_string(ceil_s(end - now));
        }
        out.policy = policy_field(q, w);
        out.limit = limit_field(q - used, ceil_s(end - now));
        return out;
    }
    double quota(double from, double to) const override
    {
        return static_cast<double>(q) * (to - from) / static_cast<double>(w);
    }
};

// A token bucket whose RateLimit says the quota is always full, or whose fields are garbage.
struct lying_server : token_bucket_server {
    enum class lie { always_full, garbage } how;
    lying_server(double r, double b, lie l) : token_bucket_server(r, b), how(l) { retry_after = false; }

    reply handle(double now) override
    {
        reply out = token_bucket_server::handle(now);
        if (how == lie::always_full) {
            out.limit = limit_field(static_cast<std::uint64_t>(burst), 0);
        } else {
            out.policy = "lots; of=requests";
            out.limit = "\"default\";r=-1";
        }
        return out;
    }
};

struct figures {
    std::uint64_t sent = 0, refused = 0;
    double admitted = 0, quota = 0;
    double refused_share() const { return sent ? static_cast<double>(refused) / static_cast<double>(sent) : 0; }
    double used_share() const { return quota > 0 ? admitted / quota : 0; }
};

struct client {
    sluice::adaptive_rate_controller ctl;
    double t = 0;

    explicit client(double initial, double floor = 0.5, double ceiling = 100000)
        : ctl([&] {
              sluice::adaptive_rate_options o;
              o.initial = sluice::rate::per_second(initial);
              o.floor = sluice::rate::per_second(floor);
              o.ceiling = sluice::rate::per_second(ceiling);
              return o;
          }())
    {
    }

    static std::chrono::nanoseconds ns(double s) { return std::chrono::nanoseconds(std::llround(s * 1e9)); }

    // Runs for `seconds`, measuring the last `measure` seconds. Each request reaches the
    // server `latency` / 2 after it is sent and its response comes back `latency` after:
    // the controller acts on news that old, with requests in flight.
    figures run(server& srv, double seconds, double measure, double latency = 0)
    {
        figures f;
        const double end = t + seconds, from = end - measure;
        auto wall = std::chrono::system_clock::from_time_t(1780000000);
        std::deque<std::pair<double, reply>> in_flight; // (arrival, reply), in order
        double last_send = t;
        auto deliver = [&](double at, const reply& r) {
            ctl.on_response(sluice::http_response{r.status, r.policy, r.limit, r.retry_after}, ns(at),
                            wall + std::chrono::duration_cast<std::chrono::system_clock::duration>(ns(at)));
        };
        while (true) {
            double next = last_send + 1.0 / ctl.rate().per_second();
            if (ctl.paused_until() != std::chrono::nanoseconds::min())
                next = std::max(next, std::chrono::duration<double>(ctl.paused_until()).count());
            if (!in_flight.empty() && in_flight.front().first <= next) {
                auto [at, r] = in_flight.front();
                in_flight.pop_front();
                t = at;
                deliver(at, r);
                continue;
            }
            if (next >= end) break;
            t = last_send = next;
            reply r = srv.handle(t + latency / 2);
            if (t >= from) {
                ++f.sent;
                if (r.status == 429) ++f.refused;
                else f.admitted += 1;
            }
            if (latency > 0) in_flight.emplace_back(t + latency, std::move(r));
            else deliver(t, r);
        }
        t = end;
        f.quota = srv.quota(from + latency / 2, end + latency / 2);
        return f;
    }
};

void report(const char* what, const figures& f, const client& c)
{
    std::printf("%-46s sent %7llu  refused %6.3f %%  quota used %6.2f %%  final rate %9.2f/s  pauses %llu\n", what,
                static_cast<unsigned long long>(f.sent), 100 * f.refused_share(), 100 * f.used_share(),
                c.ctl.exact_rate(), static_cast<unsigned long long>(c.ctl.stats().pauses));
}

} // namespace

TEST_SUITE_BEGIN("adaptive_rate");

TEST_CASE("token bucket server with RateLimit fields: <= 1 % refused, >= 95 % of the quota used")
{
    struct setup {
        double rate, burst, initial;
    };
    for (auto s : {setup{5, 10, 100}, setup{20, 10, 100}, setup{100, 10, 10}, setup{100, 10, 1000},
                   setup{1000, 50, 100}, setup{2, 60, 50}, setup{50, 2, 500}}) {
        token_bucket_server srv(s.rate, s.burst);
        client c(s.initial);
        auto f = c.run(srv, 120, 60);
        char what[96];
        std::snprintf(what, sizeof what, "token bucket %g/s burst %g, start %g/s", s.rate, s.burst, s.initial);
        report(what, f, c);
        CAPTURE(what);
        CHECK(f.refused_share() <= 0.01);
        CHECK(f.used_share() >= 0.95);
    }
}

TEST_CASE("fixed window server with RateLimit fields: <= 1 % refused, >= 95 % of the quota used")
{
    struct setup {
        std::uint64_t q, w;
        double phase, initial;
    };
    for (auto s : {setup{100, 10, 0.37, 50}, setup{600, 60, 12.5, 50}, setup{1000, 10, 3.1, 10},
                   setup{50, 5, 0.9, 1000}}) {
        fixed_window_server srv(s.q, s.w, s.phase);
        client c(s.initial);
        auto f = c.run(srv, 20.0 * static_cast<double>(s.w), 10.0 * static_cast<double>(s.w));
        char what[96];
        std::snprintf(what, sizeof what, "fixed window %llu per %llu s, start %g/s",
                      static_cast<unsigned long long>(s.q), static_cast<unsigned long long>(s.w), s.initial);
        report(what, f, c);
        CAPTURE(what);
        CHECK(f.refused_share() <= 0.01);
        CHECK(f.used_share() >= 0.95);
    }
}

TEST_SUITE_END();

TEST_SUITE_BEGIN("adaptive_rate");

TEST_CASE("with a round trip of 50 ms (requests in flight, news that old): the goals still hold")
{
    // 100/s with 50 ms of latency: 5 requests in flight when the controller hears of one.
    for (double rate : {20.0, 100.0, 1000.0}) {
        token_bucket_server srv(rate, 10);
        client c(rate * 5);
        auto f = c.run(srv, 120, 60, 0.050);
        char what[96];
        std::snprintf(what, sizeof what, "token bucket %g/s burst 10, 50 ms round trip", rate);
        report(what, f, c);
        CAPTURE(rate);
        CHECK(f.refused_share() <= 0.01);
        CHECK(f.used_share() >= 0.95);
    }
    fixed_window_server fw(100, 10, 0.37);
    client c(50);
    auto f = c.run(fw, 200, 100, 0.050);
    report("fixed window 100 per 10 s, 50 ms round trip", f, c);
    CHECK(f.refused_share() <= 0.01);
    CHECK(f.used_share() >= 0.95);
}

TEST_CASE("a server that sends no fields, only 429: AIMD, and what it reaches")
{
    // AIMD cannot know the quota: it finds it by being refused, so it oscillates below it.
    // What it reaches: benchmarks/RESULTS.md, "Adaptive rate (simulation)" (the bucket's
    // burst absorbs part of the overshoot at low rates). Asserted: <= 1 %
    // refused (the goal holds) and >= 75 % used: the 95 % goal is not asserted, since
    // nothing tells AIMD where the quota is but the refusals it causes.
    for (double rate : {10.0, 100.0, 1000.0}) {
        token_bucket_server srv(rate, 10);
        srv.headers = false;
        srv.retry_after = false;
        client c(rate * 3);
        auto f = c.run(srv, 300, 200);
        char what[96];
        std::snprintf(what, sizeof what, "no fields (AIMD), token bucket %g/s burst 10", rate);
        report(what, f, c);
        CAPTURE(rate);
        CHECK(f.refused_share() <= 0.01);
        CHECK(f.used_share() >= 0.75);
        CHECK(c.ctl.stats().decreases > 0);
    }
}

TEST_CASE("a server whose policy claims twice the quota it grants: the gain finds the real one")
{
    token_bucket_server srv(50, 10);
    srv.advertise = 2;
    client c(100);
    auto f = c.run(srv, 120, 60);
    report("policy claims 2x, token bucket 50/s burst 10", f, c);
    CHECK(f.refused_share() <= 0.01);
    CHECK(f.used_share() >= 0.95);
}

TEST_CASE("a server whose RateLimit says 'full' while it refuses: not believed, AIMD instead")
{
    lying_server srv(50, 10, lying_server::lie::always_full);
    client c(200);
    auto f = c.run(srv, 300, 200);
    report("RateLimit always full (a lie), 50/s burst 10", f, c);
    CHECK(c.ctl.stats().distrusted > 0);
    CHECK(f.refused_share() <= 0.01);
    CHECK(f.used_share() >= 0.75);
}

TEST_CASE("a server whose fields are garbage: ignored (and reported), AIMD instead")
{
    lying_server srv(50, 10, lying_server::lie::garbage);
    client c(200);
    auto f = c.run(srv, 300, 200);
    report("garbage fields, 50/s burst 10", f, c);
    CHECK(c.ctl.stats().malformed_fields >= 2 * c.ctl.stats().responses);
    CHECK(c.ctl.stats().with_fields == 0);
    CHECK(f.refused_share() <= 0.01);
    CHECK(f.used_share() >= 0.75);
}

TEST_CASE("the quota shrinks, then grows: the rate follows within seconds")
{
    token_bucket_server srv(200, 20);
    client c(50);
    c.run(srv, 30, 10);
    CHECK(c.ctl.exact_rate() == doctest::Approx(200).epsilon(0.05));
    srv.rate = 20;
    srv.tokens = std::min(srv.tokens, 20.0);
    c.run(srv, 10, 10);
    auto f = c.run(srv, 30, 20);
    report("after the quota drops 200/s -> 20/s", f, c);
    CHECK(f.refused_share() <= 0.01);
    CHECK(f.used_share() >= 0.95);
    srv.rate = 400;
    c.run(srv, 20, 10);
    f = c.run(srv, 30, 20);
    report("after it rises 20/s -> 400/s", f, c);
    CHECK(f.used_share() >= 0.95);
}

TEST_CASE("ceiling and floor bound the rate whatever the server says")
{
    token_bucket_server srv(1000, 50);
    client c(10, 1, 100);
    auto f = c.run(srv, 30, 10);
    CHECK(c.ctl.exact_rate() == doctest::Approx(100));
    CHECK(f.refused == 0);

    sluice::adaptive_rate_controller ctl([] {
        sluice::adaptive_rate_options o;
        o.initial = sluice::rate::per_second(100);
        o.floor = sluice::rate::per_second(20);
        o.ceiling = sluice::rate::per_second(150);
        return o;
    }());
    auto now = 1s;
    for (int i = 0; i < 10; ++i) ctl.on_response(sluice::server_response{429}, now + i * 1s);
    CHECK(ctl.exact_rate() == doctest::Approx(20));
    CHECK(ctl.rate() == sluice::rate::per_second(20));
    for (int i = 10; i < 400; ++i) ctl.on_response(sluice::server_response{200}, now + i * 1s);
    CHECK(ctl.exact_rate() == doctest::Approx(150));
}

TEST_CASE("AIMD steps: one decrease per hold-off, increase by a share of the rate before it")
{
    sluice::adaptive_rate_controller ctl([] {
        sluice::adaptive_rate_options o;
        o.initial = sluice::rate::per_second(100);
        o.floor = sluice::rate::per_second(1);
        o.ceiling = sluice::rate::per_second(1000);
        return o;
    }());
    auto t = 10s;
    auto fb = ctl.on_response(sluice::server_response{429}, t);
    CHECK(fb.rate_changed);
    CHECK(ctl.exact_rate() == doctest::Approx(70));
    CHECK_FALSE(ctl.on_response(sluice::server_response{503}, t + 100ms).rate_changed); // within the hold-off
    CHECK(ctl.exact_rate() == doctest::Approx(70));
    ctl.on_response(sluice::server_response{429}, t + 300ms);
    CHECK(ctl.exact_rate() == doctest::Approx(49));
    // +5 % of 70 (the rate before the last decrease) per second.
    for (int i = 1; i <= 10; ++i) ctl.on_response(sluice::server_response{200}, t + 300ms + i * 1s);
    CHECK(ctl.exact_rate() == doctest::Approx(49 + 10 * 3.5));
    CHECK(ctl.stats().decreases == 2);
}

TEST_CASE("Retry-After pauses on 429 and 503, delay-seconds or HTTP-date, cut at max_pause")
{
    sluice::adaptive_rate_options o;
    o.max_pause = 60s;
    sluice::adaptive_rate_controller ctl(o);
    auto wall = std::chrono::system_clock::from_time_t(784111777); // Sun, 06 Nov 1994 08:49:37 GMT
    auto t = 100s;
    auto fb = ctl.on_response(sluice::http_response{429, {}, {}, "5"}, t, wall);
    CHECK(fb.paused);
    CHECK(ctl.paused_until() == t + 5s);
    CHECK(ctl.paused(t + 4s));
    CHECK_FALSE(ctl.paused(t + 5s));
    fb = ctl.on_response(sluice::http_response{503, {}, {}, "Sun, 06 Nov 1994 08:49:47 GMT"}, t + 1s, wall + 1s);
    CHECK(fb.paused);
    CHECK(ctl.paused_until() == t + 10s);
    // A shorter pause does not shorten the current one; a 200's Retry-After is not a pause.
    CHECK_FALSE(ctl.on_response(sluice::http_response{429, {}, {}, "1"}, t + 2s, wall).paused);
    CHECK_FALSE(ctl.on_response(sluice::http_response{200, {}, {}, "30"}, t + 2s, wall).paused);
    CHECK(ctl.paused_until() == t + 10s);
    fb = ctl.on_response(sluice::http_response{429, {}, {}, "99999999"}, t + 3s, wall);
    CHECK(fb.paused);
    CHECK(ctl.paused_until() == t + 3s + 60s);
    CHECK(ctl.stats().pauses_cut == 1);
    // A malformed Retry-After is reported, not a pause.
    fb = ctl.on_response(sluice::http_response{429, {}, {}, "soon"}, t + 4s, wall);
    CHECK_FALSE(fb.paused);
    CHECK(fb.retry_after_error == http::error::invalid_http_date); // it starts like a date
    fb = ctl.on_response(sluice::http_response{429, {}, {}, "1.5"}, t + 4s, wall);
    CHECK(fb.retry_after_error == http::error::invalid_retry_after);
    CHECK_FALSE(fb.paused);
    sluice::adaptive_rate_options po;
    po.refusal_pause = 1s;
    sluice::adaptive_rate_controller with_default(po);
    CHECK(with_default.on_response(sluice::http_response{503, {}, {}, "garbage"}, t, wall).paused);
    CHECK(with_default.paused_until() == t + 1s);
    fb = ctl.on_response(sluice::http_response{429, "\"a\";w=1", "\"a\";r=x", {}}, t + 4s, wall);
    CHECK(fb.policy_error == http::error::missing_parameter);
    CHECK(fb.ratelimit_error == http::error::invalid_parameter);
    // Times at the end of the range: the pause saturates instead of overflowing.
    auto late = std::chrono::nanoseconds::max() - 1s;
    CHECK(ctl.on_response(sluice::http_response{429, {}, {}, "30"}, late, wall).paused);
    CHECK(ctl.paused_until() == std::chrono::nanoseconds::max());
}

TEST_CASE("several policies: the most restrictive binds; `policy` follows just one")
{
    std::vector<http::quota_policy> ps{{"a", 100, 2, {}, {}, {}}, {"b", 10, 1, {}, {}, {}}};
    std::vector<http::service_limit> ls{{"a", 49, 1, {}, {}}, {"b", 4, 1, {}, {}}};
    sluice::adaptive_rate_options o;
    o.initial = sluice::rate::per_second(100);
    sluice::adaptive_rate_controller all(o);
    all.on_response(sluice::server_response{200, ps, ls, {}}, 1s);
    // a: 50/s found half full -> 50/s; b: 10/s found half full -> 10/s.
    CHECK(all.exact_rate() == doctest::Approx(10));
    o.policy = "a";
    sluice::adaptive_rate_controller one(o);
    one.on_response(sluice::server_response{200, ps, ls, {}}, 1s);
    CHECK(one.exact_rate() == doctest::Approx(50));
}

TEST_CASE("a server that names a new policy on every response: the controller keeps working, in bounded state")
{
    sluice::adaptive_rate_options o;
    o.initial = sluice::rate::per_second(100);
    sluice::adaptive_rate_controller ctl(o);
    for (int i = 0; i < 100000; ++i) {
        std::string name = "p";   // appended: GCC 12 -O3 warns falsely (-Wrestrict) on "p" + s
        name += std::to_string(i);
        std::vector<http::quota_policy> ps{{name, 100, 1, {}, {}, {}}};
        std::vector<http::service_limit> ls{{name, 49, 1, {}, {}}};
        ctl.on_response(sluice::server_response{200, ps, ls, {}}, std::chrono::milliseconds(10 * i));
    }
    CHECK(ctl.exact_rate() == doctest::Approx(100)); // found half full at 100/s
}

TEST_CASE("bad options throw invalid_option")
{
    auto throws = [](auto change) {
        sluice::adaptive_rate_options o;
        change(o);
        try {
            sluice::adaptive_rate_controller c(o);
        } catch (const boost::system::system_error& e) {
            return e.code() == sluice::error::invalid_option;
        }
        return false;
    };
    CHECK(throws([](auto& o) { o.floor = sluice::rate::per_second(2000); }));
    CHECK(throws([](auto& o) { o.initial = sluice::rate::per_second(0.5); }));
    CHECK(throws([](auto& o) { o.initial = sluice::rate::per_second(5000); }));
    CHECK(throws([](auto& o) { o.decrease = 1; }));
    CHECK(throws([](auto& o) { o.decrease = std::nan(""); }));
    CHECK(throws([](auto& o) { o.increase = 0; }));
    CHECK(throws([](auto& o) { o.max_pause = 0s; }));
    CHECK(throws([](auto& o) { o.refusal_pause = -1s; }));
    CHECK_FALSE(throws([](auto&) {}));
}

TEST_SUITE_END();
