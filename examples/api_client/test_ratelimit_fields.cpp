// The parsing of RateLimit / RateLimit-Policy / Retry-After and the adaptive controller,
// without a server.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "adaptive_rate.hpp"
#include "ratelimit_fields.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <random>
#include <string>

using namespace ratelimit;
using namespace std::chrono_literals;

TEST_SUITE_BEGIN("ratelimit_fields");

TEST_CASE("the draft's examples")
{
    auto p = parse_policy_field(R"("default";q=100;w=10)");
    REQUIRE(p.size() == 1);
    CHECK(p[0].name == "default");
    CHECK(p[0].quota == 100);
    CHECK(p[0].window == 10u);

    auto l = parse_limit_field(R"("default";r=50;t=30)");
    REQUIRE(l.size() == 1);
    CHECK(l[0].name == "default");
    CHECK(l[0].remaining == 50);
    CHECK(l[0].reset == 30u);
}

TEST_CASE("parameters in any order, unknown ones skipped, spaces after ';' and ','")
{
    auto p = parse_policy_field(R"("burst";w=1;qu="requests";q=10, "day";  q=1000;w=86400;pk=:cHsdsRa894==:)");
    REQUIRE(p.size() == 2);
    CHECK(p[0].name == "burst");
    CHECK(p[0].quota == 10);
    CHECK(p[0].window == 1u);
    CHECK(p[1].name == "day");
    CHECK(p[1].quota == 1000);
    CHECK(p[1].window == 86400u);

    auto l = parse_limit_field("\"a\";t=3;r=7 ,\t\"b\";r=0");
    REQUIRE(l.size() == 2);
    CHECK(l[0].remaining == 7);
    CHECK(l[0].reset == 3u);
    CHECK(l[1].name == "b");
    CHECK(l[1].remaining == 0);
    CHECK_FALSE(l[1].reset);
}

TEST_CASE("quoted names with escapes; tokens accepted as names")
{
    auto p = parse_policy_field(R"("per \"user\", \\ ok";q=5;w=1, tok/en:x;q=1;w=1)");
    REQUIRE(p.size() == 2);
    CHECK(p[0].name == R"(per "user", \ ok)");
    CHECK(p[1].name == "tok/en:x");
}

TEST_CASE("a repeated parameter keeps its last value")
{
    auto l = parse_limit_field(R"("x";r=1;r=9)");
    REQUIRE(l.size() == 1);
    CHECK(l[0].remaining == 9);
}

TEST_CASE("bad members are dropped, the others kept")
{
    // Negative, decimal, string, boolean, missing required parameter, inner list, number as name.
    auto l = parse_limit_field(R"("neg";r=-1, "dec";r=1.5, "str";r="5", "bool";r, "no-r";t=3, ("a" "b");r=1, 7;r=1, "good";r=4;t=2)");
    REQUIRE(l.size() == 1);
    CHECK(l[0].name == "good");

    auto p = parse_policy_field(R"("zero-window";q=5;w=0, "no-q";w=1, "ok";q=0;w=1)");
    REQUIRE(p.size() == 1);
    CHECK(p[0].name == "ok");
}

TEST_CASE("a field that is not a structured list is ignored as a whole")
{
    const char* bad[] = {
        R"("unterminated;r=1)",
        R"("a";r=1,)",                 // trailing comma
        R"("a";r=1,,"b";r=2)",         // empty member
        R"("a";R=1)",                  // upper-case key
        R"("a";r=1234567890123456)",   // 16 digits
        R"("a";r=1.2345)",             // 4 fraction digits
        R"("a";r=1.)",                 // no fraction digits
        R"("a" junk)",
        R"("bad\escape";r=1)",
        "\"ctl\x01\";r=1",
        "\"high\xc3\xa9\";r=1",
        R"(:not base64!:;r=1)",
        R"(?2;r=1)",
        R"(@1659578233;r=1)",          // a date (RFC 9651), not in RFC 8941
        "limit=100, remaining=50, reset=30", // the draft -07 dictionary form
        ";r=1",
        "(",
        "\"a\";",
        "\"a\";r=",
    };
    for (const char* text : bad) {
        CAPTURE(text);
        CHECK(parse_limit_field(text).empty());
        CHECK(parse_policy_field(text).empty());
    }
    CHECK(parse_limit_field("").empty());
    CHECK(parse_limit_field("   ").empty());
}

TEST_CASE("random bytes never crash the parser")
{
    std::mt19937 gen(42);
    const std::string alphabet = "\"\\;=,() \t:?*-.0123456789abcqrtwAZ@\x01\xff";
    for (int i = 0; i < 20000; ++i) {
        std::string s(gen() % 40, ' ');
        for (auto& c : s) c = alphabet[gen() % alphabet.size()];
        for (const auto& l : parse_limit_field(s)) CHECK(!l.name.empty() + l.name.empty() == 1);
        (void)parse_policy_field(s);
        (void)parse_retry_after(s, std::chrono::system_clock::now());
    }
}

TEST_CASE("Retry-After")
{
    auto now = std::chrono::system_clock::from_time_t(784111777); // Sun, 06 Nov 1994 08:49:37 GMT
    CHECK(parse_retry_after("120", now) == 120s);
    CHECK(parse_retry_after(" 0 ", now) == 0s);
    CHECK(parse_retry_after("Sun, 06 Nov 1994 08:49:47 GMT", now) == 10s);
    CHECK(parse_retry_after("Sun, 06 Nov 1994 08:49:27 GMT", now) == 0s); // in the past
    CHECK_FALSE(parse_retry_after("", now));
    CHECK_FALSE(parse_retry_after("-1", now));
    CHECK_FALSE(parse_retry_after("1.5", now));
    CHECK_FALSE(parse_retry_after("12abc", now));
    CHECK_FALSE(parse_retry_after("99999999999999999999999", now)); // no overflow
    CHECK_FALSE(parse_retry_after("86401", now));                   // more than a day
    CHECK_FALSE(parse_retry_after("Sun, 06 Nov 1994 08:49:47 UTC", now));
    CHECK_FALSE(parse_retry_after("Foo, 99 Bar 1994 08:49:47 GMT", now));
    CHECK_FALSE(parse_retry_after("Sunday, 06-Nov-94 08:49:37 GMT", now));
}

TEST_SUITE_END();

TEST_SUITE_BEGIN("adaptive_rate");

namespace {

// A token bucket server (rate, burst) as the spec's example server describes itself, and a
// client sending evenly at the controller's rate; counts the rejected requests in the last
// `tail` seconds of each run.
struct simulation {
    double server_rate, burst;
    double tokens;
    adaptive_rate ctl;
    std::uint64_t sent = 0, rejected = 0, tail_sent = 0, tail_rejected = 0;
    double t = 0, last = 0; // simulated time, kept across runs

    simulation(double rate, double b, double initial)
        : server_rate(rate), burst(b), tokens(b), ctl(initial, 1, initial * 10)
    {
    }

    void run(double seconds, double tail)
    {
        adaptive_rate::clock::time_point now{};
        now += 1s; // not the epoch, which means "never" to the controller
        const double end = t + seconds;
        seconds = end;
        while (t < end) {
            t += 1.0 / ctl.rate();
            tokens = std::min(burst, tokens + (t - last) * server_rate);
            last = t;
            bool ok = tokens >= 1;
            if (ok) tokens -= 1;
            ++sent;
            if (!ok) ++rejected;
            if (t > seconds - tail) {
                ++tail_sent;
                if (!ok) ++tail_rejected;
            }
            auto r = static_cast<std::uint64_t>(tokens);
            auto reset = static_cast<std::uint64_t>(std::ceil((burst - tokens) / server_rate));
            auto window = static_cast<std::uint64_t>(std::ceil(burst / server_rate));
            auto at = now + std::chrono::duration_cast<adaptive_rate::clock::duration>(std::chrono::duration<double>(t));
            ctl.on_response(at, {policy{"default", static_cast<std::uint64_t>(burst), window}},
                            {limit{"default", r, reset}}, !ok);
        }
    }
};

} // namespace

TEST_CASE("converges to a quota below the initial guess, with almost no rejection at the end")
{
    // q=10;w=1 announces 10/s, the bucket refills at 20/s: the integral part finds the rest.
    for (double server : {5.0, 20.0, 50.0}) {
        CAPTURE(server);
        simulation s(server, 10, 100);
        s.run(30, 10);
        CHECK(s.ctl.rate() > server * 0.7);
        CHECK(s.ctl.rate() < server * 1.3);
        CHECK(static_cast<double>(s.tail_rejected) <= 0.02 * static_cast<double>(s.tail_sent));
        CHECK(s.ctl.adaptations() > 0);
    }
}

TEST_CASE("a tiny burst whose whole-second window understates the rate 25x: the gain finds it")
{
    simulation s(50, 2, 100); // announced q=2;w=1
    s.run(30, 10);
    CHECK(s.ctl.rate() > 35);
    CHECK(s.ctl.rate() < 65);
    CHECK(static_cast<double>(s.tail_rejected) <= 0.05 * static_cast<double>(s.tail_sent));
}

TEST_CASE("no wind-up at the ceiling: once the quota shrinks, the rate follows within seconds")
{
    simulation s(1000, 100, 50); // ceiling 500/s, far below the quota: pinned at the ceiling
    s.run(10, 1);
    CHECK(s.ctl.rate() == doctest::Approx(500));
    s.server_rate = 20;
    s.burst = 10;
    s.tokens = std::min(s.tokens, 10.0);
    s.tail_sent = s.tail_rejected = 0;
    s.run(10, 5);
    CHECK(s.ctl.rate() < 30);
    CHECK(static_cast<double>(s.tail_rejected) <= 0.05 * static_cast<double>(s.tail_sent));
}

TEST_CASE("backs up when the quota refills: a guess far below the quota grows")
{
    simulation s(50, 10, 5);
    s.run(20, 5);
    CHECK(s.ctl.rate() > 35);
    CHECK(s.tail_rejected <= s.tail_sent / 50);
}

TEST_CASE("several policies: the most restrictive binds")
{
    adaptive_rate ctl(100, 1, 1000);
    auto now = adaptive_rate::clock::time_point{} + 1s;
    // A: 50/s, found half full (49 left + this one) -> 50/s. B: 10/s, found half full -> 10/s.
    ctl.on_response(now, {{"a", 100, 2}, {"b", 10, 1}}, {{"a", 49, 1}, {"b", 4, 1}}, false);
    CHECK(ctl.rate() == doctest::Approx(10));
    // Now A (10/s) is nearly empty, B full: A binds at about half its rate, 5.1/s.
    ctl.on_response(now + 10ms, {{"a", 100, 10}, {"b", 10, 1}}, {{"a", 0, 10}, {"b", 9, 0}}, false);
    CHECK(ctl.rate() == doctest::Approx(5.1).epsilon(0.02));
}

TEST_CASE("a quota of 1 leaves r at 0 after every request: the client keeps to q / w, not the floor")
{
    adaptive_rate ctl(100, 0.1, 1000);
    auto now = adaptive_rate::clock::time_point{} + 1s;
    for (int i = 0; i < 100; ++i) ctl.on_response(now + i * 200ms, {{"default", 1, 1}}, {{"default", 0, 1}}, false);
    CHECK(ctl.rate() == doctest::Approx(1));
}

TEST_CASE("without RateLimit fields: a 429 halves the rate, quiet seconds bring it back, within bounds")
{
    adaptive_rate ctl(100, 20, 150);
    auto now = adaptive_rate::clock::time_point{} + 1s;
    CHECK(ctl.on_response(now, {}, {}, true));
    CHECK(ctl.rate() == doctest::Approx(50));
    CHECK(ctl.on_response(now, {}, {}, true));
    CHECK(ctl.on_response(now, {}, {}, true));
    CHECK(ctl.rate() == doctest::Approx(20)); // the floor
    CHECK_FALSE(ctl.on_response(now + 500ms, {}, {}, false));
    CHECK(ctl.on_response(now + 1s, {}, {}, false));
    CHECK(ctl.rate() == doctest::Approx(22));
    for (int i = 2; i < 60; ++i) ctl.on_response(now + std::chrono::seconds(i), {}, {}, false);
    CHECK(ctl.rate() == doctest::Approx(150)); // the ceiling
}

TEST_CASE("a RateLimit member without a policy: remaining over reset")
{
    adaptive_rate ctl(100, 1, 1000);
    ctl.on_response(adaptive_rate::clock::time_point{} + 1s, {}, {{"x", 30, 10}}, false);
    CHECK(ctl.rate() == doctest::Approx(3));
}

TEST_SUITE_END();
