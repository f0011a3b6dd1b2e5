// llm_client's sans-io parts, step by step without a socket: the estimate of a call's
// tokens, the mirrors of a provider's quotas read from each family of fields (through
// sluice::http::read_provider_limits, as the client reads them), the waits after a refusal,
// announcements no quota can have, the usage read from hostile answers; and the mirrors
// against a simulated provider over ten minutes of a manual clock.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "chat.hpp"
#include "steering.hpp"

#include <sluice/manual_clock.hpp>
#include <sluice/token_bucket.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/json/src.hpp>
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using sluice::http::field_line;

namespace {

// A provider's quota as the fake provider keeps it: a token bucket of `limit` units, whole
// again in one `minute`.
struct provider_bucket {
    double limit, per_second, level, t = 0;
    provider_bucket(double l, double minute_s) : limit(l), per_second(l / minute_s), level(l) {}
    void refill(double now)
    {
        if (now > t) level = std::min(limit, level + (now - t) * per_second);
        t = std::max(t, now);
    }
    bool take(double n, double now)
    {
        refill(now);
        if (level < n) return false;
        level -= n;
        return true;
    }
    void give(double n, double now)
    {
        refill(now);
        level = std::min(limit, level + n);
    }
    std::uint64_t remaining(double now)
    {
        refill(now);
        return static_cast<std::uint64_t>(std::floor(level + 1e-9));
    }
    double reset(double now)
    {
        refill(now);
        return (limit - level) / per_second;
    }
};

enum class family { openai, anthropic, ietf };

// The fields a provider with these two buckets sends at `now` (seconds since it started,
// at wall time `base` + now), as fake_llm_provider.py writes them.
struct fields {
    std::vector<std::string> store;
    std::vector<field_line> lines;
    void add(std::string name, std::string value)
    {
        store.push_back(std::move(name));
        store.push_back(std::move(value));
    }
    const std::vector<field_line>& get()
    {
        lines.clear();
        for (std::size_t i = 0; i + 1 < store.size(); i += 2) lines.push_back({store[i], store[i + 1]});
        return lines;
    }
};

std::string seconds_text(double s)
{
    char b[64];
    std::snprintf(b, sizeof b, "%.6fs", s);
    return b;
}

std::string instant_text(double s)   // 2026-12-08T00:MM:SS.ffffffZ, s < 3600
{
    const auto us = static_cast<long long>(std::llround(s * 1e6));
    char b[64];
    std::snprintf(b, sizeof b, "2026-12-08T00:%02lld:%02lld.%06lldZ", us / 60000000, us / 1000000 % 60, us % 1000000);
    return b;
}

const std::chrono::system_clock::time_point base_wall = std::chrono::sys_days{std::chrono::year{2026} / 12 / 8};

std::chrono::system_clock::time_point wall(double now)
{
    return base_wall + std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::duration<double>(now));
}

sluice::http::provider_limits announce(family f, provider_bucket& rq, provider_bucket& tk, double minute, double now,
                                       const char* retry_after = nullptr)
{
    fields out;
    auto u = [](auto v) { return std::to_string(v); };
    switch (f) {
    case family::openai:
        out.add("x-ratelimit-limit-requests", u(static_cast<std::uint64_t>(rq.limit)));
        out.add("x-ratelimit-limit-tokens", u(static_cast<std::uint64_t>(tk.limit)));
        out.add("x-ratelimit-remaining-requests", u(rq.remaining(now)));
        out.add("x-ratelimit-remaining-tokens", u(tk.remaining(now)));
        out.add("x-ratelimit-reset-requests", seconds_text(rq.reset(now)));
        out.add("x-ratelimit-reset-tokens", seconds_text(tk.reset(now)));
        break;
    case family::anthropic:
        for (auto [name, q] : {std::pair{"requests", &rq}, std::pair{"tokens", &tk}}) {
            out.add(std::string("anthropic-ratelimit-") + name + "-limit", u(static_cast<std::uint64_t>(q->limit)));
            out.add(std::string("anthropic-ratelimit-") + name + "-remaining", u(q->remaining(now)));
            out.add(std::string("anthropic-ratelimit-") + name + "-reset", instant_text(now + q->reset(now)));
        }
        break;
    case family::ietf: {
        const auto w = u(std::max<long long>(1, std::llround(minute)));
        out.add("RateLimit-Policy", "\"rpm\";q=" + u(static_cast<std::uint64_t>(rq.limit)) + ";w=" + w + ", \"tpm\";q=" +
                                        u(static_cast<std::uint64_t>(tk.limit)) + ";qu=\"tokens\";w=" + w);
        out.add("RateLimit", "\"rpm\";r=" + u(rq.remaining(now)) + ";t=" + u(static_cast<long long>(std::ceil(rq.reset(now) - 1e-9))) +
                                 ", \"tpm\";r=" + u(tk.remaining(now)) + ";t=" +
                                 u(static_cast<long long>(std::ceil(tk.reset(now) - 1e-9))));
        break;
    }
    }
    if (retry_after) out.add("Retry-After", retry_after);
    return sluice::http::read_provider_limits(out.get(), wall(now));
}

sluice::http::quota_announcement openai_like(std::uint64_t limit, std::uint64_t remaining, std::chrono::nanoseconds reset)
{
    sluice::http::quota_announcement a;
    a.limit = limit;
    a.remaining = remaining;
    a.reset_after = reset;
    a.family = sluice::http::quota_family::openai;
    return a;
}

} // namespace

TEST_SUITE_BEGIN("llm_client");

TEST_CASE("estimate: 4 bytes a token until the provider counts, then the largest recent ratio")
{
    llm::token_estimator e;
    CHECK(e.estimate(400, 100) == 200);
    CHECK(e.prompt(1) == 1);
    CHECK(e.prompt(401) == 101);   // rounded up: a short estimate under-reserves
    CHECK(e.learn(400, 200));      // 2 bytes a token
    CHECK(e.prompt(400) == 200);
    CHECK(e.learn(400, 100));      // the largest recent ratio still holds
    CHECK(e.prompt(400) == 200);
    for (int i = 0; i < 16; ++i) CHECK(e.learn(400, 80));
    CHECK(e.prompt(400) == 80);    // the old one has left the recent calls
    CHECK_FALSE(e.learn(400, 400 + llm::token_estimator::slack + 1));   // no tokenizer does that
    CHECK_FALSE(e.learn(0, 5));
    CHECK(e.prompt(400) == 80);
}

TEST_CASE("mirror: nothing is known before a limit is announced")
{
    llm::quota_mirror m;
    CHECK_FALSE(m.known());
    CHECK(m.per_second() == 0);
    sluice::http::quota_announcement a;
    a.remaining = 5;
    auto u = m.on_announcement(a);
    CHECK_FALSE(u.configure);
    CHECK_FALSE(m.known());
}

TEST_CASE("mirror: a whole quota says its size, a rate per minute is assumed until one is measured")
{
    llm::quota_mirror m(1min, 1.0);
    auto u = m.on_announcement(openai_like(600, 600, 0ns));
    CHECK(u.configure);
    CHECK(u.drain == 0);
    CHECK(m.limit() == 600);
    CHECK(m.per_second() == doctest::Approx(10));
    CHECK_FALSE(m.measured());
    // 100 units short, whole again in 2 s: 50/s, bounded below by 99 / 2.
    u = m.on_announcement(openai_like(600, 500, 2s));
    CHECK(u.configure);
    CHECK(m.measured());
    CHECK(m.per_second() == doctest::Approx(49.5));
    // A looser bound changes nothing; a tighter one moves it.
    u = m.on_announcement(openai_like(600, 590, 200ms));
    CHECK_FALSE(u.configure);
    CHECK(m.per_second() == doctest::Approx(49.5));
    u = m.on_announcement(openai_like(600, 100, 10s));
    CHECK(u.configure);
    CHECK(m.per_second() == doctest::Approx(49.9));
}

TEST_CASE("mirror: a reset announced as an instant may be up to the call's round trip later")
{
    // 1500 a second; 150 short when the provider wrote the instant, 100 ms to whole, read
    // 20 ms later (the end of a call of 20 ms): 80 ms to whole by this side's clock.
    auto a = openai_like(3000, 2850, 80ms);
    a.family = sluice::http::quota_family::anthropic;
    llm::quota_mirror m(1min, 1.0);
    m.on_announcement(a, 20ms);
    CHECK(m.per_second() <= 1500);
    CHECK(m.per_second() == doctest::Approx(1490));
    llm::quota_mirror unaware(1min, 1.0);
    unaware.on_announcement(a);
    CHECK(unaware.per_second() > 1500);   // what the round trip is for
    a.family = sluice::http::quota_family::openai;   // a duration counts from when it was written
    llm::quota_mirror duration(1min, 1.0);
    duration.on_announcement(a, 20ms);
    CHECK(duration.per_second() == doctest::Approx(149 / 0.08));
}

TEST_CASE("mirror: the first announcement of a quota not whole drains what the provider counted")
{
    llm::quota_mirror m;
    auto u = m.on_announcement(openai_like(3000, 2850, 100ms));
    CHECK(u.configure);
    CHECK(u.drain == 150);
    u = m.on_announcement(openai_like(3000, 2000, 700ms));
    CHECK(u.drain == 0);   // once: the bucket counts the calls from then on
}

TEST_CASE("mirror: a new limit forgets what was measured of the old one")
{
    llm::quota_mirror m(1min, 1.0);
    m.on_announcement(openai_like(600, 100, 10s));
    CHECK(m.per_second() == doctest::Approx(49.9));
    auto u = m.on_announcement(openai_like(60, 60, 0ns));
    CHECK(u.configure);
    CHECK(m.limit() == 60);
    CHECK(m.per_second() == doctest::Approx(1));
}

TEST_CASE("mirror: announcements no quota can have are ignored and counted")
{
    llm::quota_mirror m(1min, 1.0);
    CHECK_FALSE(m.on_announcement(openai_like(0, 0, 1s)).configure);
    CHECK_FALSE(m.on_announcement(openai_like(llm::quota_mirror::max_limit + 1, 0, 1s)).configure);
    CHECK_FALSE(m.known());
    CHECK(m.ignored() == 2);
    m.on_announcement(openai_like(1000000, 0, 1ns));   // a million back in a nanosecond
    CHECK(m.ignored() == 3);
    CHECK_FALSE(m.measured());
    CHECK(m.per_second() == doctest::Approx(1000000.0 / 60));
}

TEST_CASE("steering: a refusal waits its Retry-After, cut to the longest wait; others do not wait")
{
    llm::steering s(5min, 1s);
    sluice::http::provider_limits l;
    CHECK_FALSE(s.on_response(200, l).wait);
    l.retry_after = 3s;
    auto d = s.on_response(429, l);
    REQUIRE(d.wait);
    CHECK(*d.wait == 3s);
    CHECK_FALSE(d.wait_cut);
    l.retry_after = std::chrono::hours(24 * 365);
    d = s.on_response(429, l);
    CHECK(*d.wait == 5min);
    CHECK(d.wait_cut);
    l.retry_after.reset();
    CHECK(*s.on_response(429, l).wait == 1s);   // no Retry-After: a backoff
    CHECK_FALSE(s.steered());
}

TEST_CASE("steering: calls without an answer back off, doubling, until the next answer")
{
    llm::steering s(1s);
    const auto first = llm::steering::first_failure_backoff;
    CHECK(s.on_failure() == first);
    CHECK(s.on_failure() == 2 * first);
    CHECK(s.on_failure() == 4 * first);
    for (int i = 0; i < 40; ++i) CHECK(s.on_failure() <= 1s);
    CHECK(s.on_failure() == 1s);
    s.on_response(500, {});
    CHECK(s.on_failure() == first);
}

TEST_CASE("steering: each family alone gives both quotas, their sizes and rates")
{
    for (auto f : {family::openai, family::anthropic, family::ietf}) {
        CAPTURE(static_cast<int>(f));
        provider_bucket rq(60, 2.0), tk(3000, 2.0);   // a minute of 2 s: 30 and 1500 a second
        llm::steering s;
        CHECK_FALSE(s.steered());
        rq.take(1, 0.0);
        tk.take(150, 0.0);
        auto d = s.on_response(200, announce(f, rq, tk, 2.0, 0.02));
        CHECK(s.steered());
        CHECK(d.requests.configure);
        CHECK(d.tokens.configure);
        CHECK(s.requests().limit() == 60);
        CHECK(s.tokens().limit() == 3000);
        CHECK(d.tokens.drain > 100);
        CHECK(d.tokens.drain <= 150);
        // A deep deficit: the tokens' rate is known within a percent and never above it.
        tk.take(2500, 0.1);
        s.on_response(200, announce(f, rq, tk, 2.0, 0.1));
        CHECK(s.tokens().per_second() <= 1500);
        CHECK(s.tokens().per_second() >= 0.98 * 1500);
        CHECK(s.tokens().measured());
    }
}

TEST_CASE("closed loop: the mirrors use the provider's quotas for ten minutes of a manual clock, never refused")
{
    // The provider of the end-to-end test: 60 requests and 3000 tokens a minute of 2 s; a
    // call charges prompt + max_tokens at admission and gives the unused output back when it
    // completes, 20 ms later, and the answer announces both quotas then. The client takes
    // from its mirrors first, and settles the tokens with the usage when the answer comes.
    using clock = sluice::basic_manual_clock<struct closed_loop>;
    for (auto f : {family::openai, family::anthropic, family::ietf}) {
        CAPTURE(static_cast<int>(f));
        clock::set(0ns);
        boost::asio::io_context io;
        provider_bucket rq(60, 2.0), tk(3000, 2.0);
        llm::steering s;
        llm::token_estimator est;
        std::optional<sluice::token_bucket<clock>> mr, mt;
        const std::uint64_t prompt_bytes = 400, max_tokens = 100;
        struct pending {
            std::int64_t due_ms;
            bool ok;
            std::uint64_t used;
            sluice::admission ticket;
        };
        std::vector<pending> flight;
        std::uint64_t refused_late = 0, calls = 0, used_late = 0, settle_errors = 0;
        unsigned seed = 1;
        auto answer = [&](pending& p, double now) {
            if (p.ok) tk.give(static_cast<double>(max_tokens + 100 - p.used), now);
            auto d = s.on_response(p.ok ? 200 : 429, announce(f, rq, tk, 2.0, now));
            if (p.ok) est.learn(prompt_bytes, 100);
            if (p.ticket && p.ok && mt->settle(std::move(p.ticket), p.used)) ++settle_errors;
            if (!s.steered()) return;
            const auto r_rate = sluice::rate::per_second(s.requests().per_second());
            const auto t_rate = sluice::rate::per_second(s.tokens().per_second());
            if (!mr) {
                mr.emplace(io, r_rate, s.requests().limit());
                mt.emplace(io, t_rate, s.tokens().limit());
                if (d.requests.drain) (void)mr->try_acquire(d.requests.drain);
                if (d.tokens.drain) (void)mt->try_acquire(d.tokens.drain);
                return;
            }
            if (d.requests.configure && mr->rate() != r_rate) mr->set_rate(r_rate);
            if (d.tokens.configure && mt->rate() != t_rate) mt->set_rate(t_rate);
        };
        for (std::int64_t ms = 0; ms < 20 * 1000; ++ms) {   // 20 s: ten minutes
            clock::set(std::chrono::milliseconds(ms));
            const double now = static_cast<double>(ms) / 1000;
            for (std::size_t i = 0; i < flight.size();) {
                if (flight[i].due_ms > ms) {
                    ++i;
                    continue;
                }
                answer(flight[i], now);
                flight.erase(flight.begin() + static_cast<std::ptrdiff_t>(i));
            }
            sluice::admission ticket;
            if (s.steered()) {
                if (!mr->try_acquire(1)) continue;
                ticket = mt->try_admit(est.estimate(prompt_bytes, max_tokens));
                if (!ticket) continue;   // a request permit lost: the mirror stays below
            } else if (calls > 0) {
                continue;   // one call at a time until both quotas are known
            }
            ++calls;
            const std::uint64_t completion = 1 + (seed = seed * 1103515245 + 12345) / 65536 % max_tokens;
            const bool ok = rq.take(1, now) && tk.take(100 + max_tokens, now);
            if (!ok && now >= 2.0) ++refused_late;
            if (ok && now >= 2.0) used_late += 100 + completion;
            flight.push_back({ms + 20, ok, 100 + completion, std::move(ticket)});
        }
        CHECK(refused_late == 0);
        // Only those in flight when the rate was refined, early on: a few of some 1,800.
        CHECK(settle_errors <= 20);
        CHECK(s.tokens().per_second() <= 1500);
        CHECK(s.tokens().per_second() >= 0.98 * 1500);
        CHECK(s.requests().per_second() <= 30);
        // The tokens bind (150 a call of 1500 a second: 10 calls a second of 30): over the
        // nine minutes after the first, 95 % of them at least.
        CHECK(static_cast<double>(used_late) >= 0.95 * 1500 * 18);
    }
}

TEST_CASE("usage: read from an answer, refused when it cannot be a call's")
{
    std::string why;
    auto u = llm::read_usage(R"({"id":"x","usage":{"prompt_tokens":100,"completion_tokens":7,"total_tokens":107}})", 100, why);
    REQUIRE(u);
    CHECK(u->prompt_tokens == 100);
    CHECK(u->completion_tokens == 7);
    CHECK(u->total() == 107);
    for (const char* bad : {"", "not json", "[1,2]", R"({"usage":5})", R"({"usage":{"prompt_tokens":1}})",
                            R"({"usage":{"prompt_tokens":-1,"completion_tokens":1}})",
                            R"({"usage":{"prompt_tokens":1.5,"completion_tokens":1}})",
                            R"({"usage":{"prompt_tokens":"1","completion_tokens":1}})",
                            R"({"usage":{"prompt_tokens":18446744073709551615,"completion_tokens":1}})",
                            R"({"usage":{"prompt_tokens":1,"completion_tokens":101}})",
                            R"({"usage":{"prompt_tokens":1,"completion_tokens":1}} trailing)"}) {
        CAPTURE(bad);
        why.clear();
        CHECK_FALSE(llm::read_usage(bad, 100, why));
        CHECK_FALSE(why.empty());
    }
    std::string deep(100000, '[');
    CHECK_FALSE(llm::read_usage(deep, 100, why));   // nesting is bounded, not a stack overflow
}

TEST_CASE("request: the JSON of a chat completion")
{
    auto body = llm::chat_request("m", "say \"hi\"\n", 42);
    boost::system::error_code ec;
    auto v = boost::json::parse(body, ec);
    REQUIRE_FALSE(ec);
    CHECK(v.at("max_tokens").to_number<std::uint64_t>() == 42);
    CHECK(v.at("messages").at(0).at("content").as_string() == "say \"hi\"\n");
    CHECK(v.at("messages").at(0).at("role").as_string() == "user");
}

TEST_SUITE_END();
