// sluice::http provider quota fields: Go durations, RFC 3339 instants, integers, and
// read_provider_limits over OpenAI's, Anthropic's and the IETF fields, Retry-After;
// exact values on valid input, hostile input counted as malformed and skipped.
#include <sluice/http/provider_limits.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <ctime>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "rng.hpp"

namespace http = sluice::http;
using namespace std::chrono_literals;
using http::error;
using http::quota_family;
using std::chrono::nanoseconds;

namespace {

boost::system::error_code duration_error(std::string_view text)
{
    auto r = http::parse_go_duration(text);
    return r ? boost::system::error_code{} : r.error();
}

boost::system::error_code date_error(std::string_view text)
{
    auto r = http::parse_rfc3339(text);
    return r ? boost::system::error_code{} : r.error();
}

boost::system::error_code integer_error(std::string_view text)
{
    auto r = http::parse_unsigned(text);
    return r ? boost::system::error_code{} : r.error();
}

// 2024-05-01T12:00:00Z
const std::chrono::system_clock::time_point noon{std::chrono::seconds{1714564800}};

http::provider_limits read(std::vector<http::field_line> fields,
                           std::chrono::system_clock::time_point now = noon)
{
    return http::read_provider_limits(fields, now);
}

} // namespace

TEST_SUITE_BEGIN("http");

TEST_CASE("the new errors of sluice.http have their own messages")
{
    std::set<std::string> seen;
    for (auto e : {error::invalid_duration, error::invalid_date_time, error::invalid_integer, error::out_of_range}) {
        const std::string m = make_error_code(e).message();
        CHECK(m.find("unknown") == std::string::npos);
        CHECK(seen.insert(m).second);
    }
}

TEST_CASE("Go durations: what OpenAI sends, exactly")
{
    CHECK(http::parse_go_duration("1s").value() == 1s);
    CHECK(http::parse_go_duration("6m0s").value() == 6min);
    CHECK(http::parse_go_duration("20ms").value() == 20ms);
    CHECK(http::parse_go_duration("1h2m3.5s").value() == 1h + 2min + 3500ms);
    CHECK(http::parse_go_duration("0s").value() == 0s);
    CHECK(http::parse_go_duration("0").value() == 0s);
    CHECK(http::parse_go_duration("7.66s").value() == 7660ms);
    CHECK(http::parse_go_duration("2m59.56s").value() == 2min + 59560ms);
    CHECK(http::parse_go_duration("1.5us").value() == 1500ns);
    CHECK(http::parse_go_duration("1.5\xc2\xb5s").value() == 1500ns); // µ U+00B5
    CHECK(http::parse_go_duration("1.5\xce\xbcs").value() == 1500ns); // μ U+03BC
    CHECK(http::parse_go_duration("3ns").value() == 3ns);
    CHECK(http::parse_go_duration(".5s").value() == 500ms);
    CHECK(http::parse_go_duration("5.s").value() == 5s);
    CHECK(http::parse_go_duration("0.1s").value() == 100ms); // exact, not a float's 99.999...
    CHECK(http::parse_go_duration("1h1h").value() == 2h);     // Go adds repeated units
    CHECK(http::parse_go_duration(" 30s\t").value() == 30s);
    // Beyond a nanosecond: truncated, as Go does.
    CHECK(http::parse_go_duration("1.9999999999ns").value() == 1ns);
    CHECK(http::parse_go_duration("0.0000000019s").value() == 1ns);
    CHECK(http::parse_go_duration("1.000000000000000000000000001s").value() == 1s);
    // The largest: 2^63 - 1 ns, as Go's "2562047h47m16.854775807s".
    CHECK(http::parse_go_duration("2562047h47m16.854775807s").value() == nanoseconds::max());
    CHECK(http::parse_go_duration("9223372036854775807ns").value() == nanoseconds::max());
}

TEST_CASE("Go durations: garbage, signs and overflow refused")
{
    for (const char* bad : {"", " ", "s", "1", "10", "00", "1x", "1S", "1 s", "1s ms", "-1s", "+1s", "-0s", ".s",
                            "1..5s", "1.5.s", "1e3s", "1_000s", "one s", "1sec", "1mn", "1s1", "0x10s", "1\xc2s",
                            "\xb5s", "1\xc2\xb5", "1hh", "∞s", "NaNs", "1,5s"}) {
        CAPTURE(bad);
        CHECK(duration_error(bad) == error::invalid_duration);
    }
    for (const char* big : {"9223372036854775808ns", "2562047h47m16.854775808s", "2562048h", "106751991167301d",
                            "99999999999999999999999s", "9223372036854775807ns1ns", "100000000000000000000h"}) {
        CAPTURE(big);
        CHECK(duration_error(big) == (std::string_view(big).ends_with("d") ? error::invalid_duration
                                                                              : error::out_of_range));
    }
    // Overflow then garbage: the garbage is reported (the syntax is read to the end).
    CHECK(duration_error("99999999999999999999999sx") == error::invalid_duration);
}

TEST_CASE("RFC 3339: instants with offsets and fractions, exactly")
{
    const auto at = [](std::int64_t s, std::int64_t ns = 0) { return http::sys_nanoseconds{nanoseconds{s * 1'000'000'000 + ns}}; };
    CHECK(http::parse_rfc3339("2024-05-01T12:00:00Z").value() == at(1714564800));
    CHECK(http::parse_rfc3339("2024-05-01t12:00:00z").value() == at(1714564800));
    CHECK(http::parse_rfc3339("2024-05-01T14:00:00+02:00").value() == at(1714564800));
    CHECK(http::parse_rfc3339("2024-05-01T06:30:00-05:30").value() == at(1714564800));
    CHECK(http::parse_rfc3339("2024-05-01T12:00:00-00:00").value() == at(1714564800));
    CHECK(http::parse_rfc3339("2024-05-01T12:00:00.5Z").value() == at(1714564800, 500'000'000));
    CHECK(http::parse_rfc3339("2024-05-01T12:00:00.123456789Z").value() == at(1714564800, 123'456'789));
    CHECK(http::parse_rfc3339("2024-05-01T12:00:00.1234567899999Z").value() == at(1714564800, 123'456'789));
    CHECK(http::parse_rfc3339("1970-01-01T00:00:00Z").value() == at(0));
    CHECK(http::parse_rfc3339("1969-12-31T23:59:59.75Z").value() == at(-1, 750'000'000));
    CHECK(http::parse_rfc3339("2024-02-29T00:00:00Z").value() == at(1709164800));
    CHECK(http::parse_rfc3339("2016-12-31T23:59:60Z").value() == at(1483228800));   // a leap second
    CHECK(http::parse_rfc3339("2000-01-01T00:00:00+23:59").value() == at(946684800 - 86340));
    CHECK(http::parse_rfc3339(" 2024-05-01T12:00:00Z ").value() == at(1714564800));
    // The ends of what nanoseconds since 1970 hold.
    CHECK(http::parse_rfc3339("2262-04-11T23:47:16.854775807Z").value().time_since_epoch() == nanoseconds::max());
    CHECK(http::parse_rfc3339("1677-09-21T00:12:43.145224192Z").value().time_since_epoch() == nanoseconds::min());
}

TEST_CASE("RFC 3339: invalid dates refused")
{
    for (const char* bad :
         {"", "2024-05-01", "2024-05-01T12:00:00", "2024-05-01 12:00:00Z", "2024-5-01T12:00:00Z",
          "24-05-01T12:00:00Z", "2024-05-01T12:00Z", "2024-05-01T12:00:00.Z", "2024-05-01T12:00:00,5Z",
          "2024-05-01T12:00:00+0200", "2024-05-01T12:00:00+02", "2024-05-01T12:00:00 Z", "2024-05-01T12:00:00ZZ",
          "2024-05-01T12:00:00UTC", "2024-02-30T00:00:00Z", "2023-02-29T00:00:00Z", "2024-13-01T00:00:00Z",
          "2024-00-01T00:00:00Z", "2024-05-00T00:00:00Z", "2024-04-31T00:00:00Z", "2024-05-01T24:00:00Z",
          "2024-05-01T12:60:00Z", "2024-05-01T12:00:61Z", "2024-05-01T12:00:00+24:00", "2024-05-01T12:00:00+01:60",
          "-2024-05-01T12:00:00Z", "+2024-05-01T12:00:00Z", "2024-05-01T12:00:00.5.5Z", "2024-05-01T1a:00:00Z",
          "Wed, 01 May 2024 12:00:00 GMT", "1714564800"}) {
        CAPTURE(bad);
        CHECK(date_error(bad) == error::invalid_date_time);
    }
    CHECK(date_error(std::string_view("2024-05-01T12:00:00Z\0", 21)) == error::invalid_date_time);
    CHECK(date_error("2262-04-11T23:47:16.854775808Z") == error::out_of_range);
    CHECK(date_error("1677-09-21T00:12:43.145224191Z") == error::out_of_range);
    CHECK(date_error("9999-12-31T23:59:59Z") == error::out_of_range);
    CHECK(date_error("0000-01-01T00:00:00Z") == error::out_of_range);
}

TEST_CASE("RFC 3339: random instants agree with the C library (timegm)")
{
    sluice_test::rng rng(7);
    for (int i = 0; i < 2000; ++i) {
        // 1678 to 2261, any second, any offset.
        const std::int64_t secs = rng.in(-9'200'000'000LL, 9'200'000'000LL);
        const auto ns = static_cast<std::int64_t>(rng.in(0, 999'999'999));
        const int off_min = static_cast<int>(rng.in(-(23 * 60 + 59), 23 * 60 + 59));
        const std::time_t local = static_cast<std::time_t>(secs + off_min * 60);
        std::tm tm{};
        REQUIRE(gmtime_r(&local, &tm) != nullptr);
        char text[64];
        const int a = off_min < 0 ? -off_min : off_min;
        std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%09lld%c%02d:%02d", tm.tm_year + 1900,
                      tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<long long>(ns),
                      off_min < 0 ? '-' : '+', a / 60, a % 60);
        CAPTURE(text);
        auto r = http::parse_rfc3339(text);
        REQUIRE(r.has_value());
        CHECK(r->time_since_epoch().count() == secs * 1'000'000'000 + ns);
    }
}

TEST_CASE("integers: digits only, up to 2^64 - 1")
{
    CHECK(http::parse_unsigned("60").value() == 60);
    CHECK(http::parse_unsigned("0").value() == 0);
    CHECK(http::parse_unsigned("007").value() == 7);
    CHECK(http::parse_unsigned(" 150000 ").value() == 150000);
    CHECK(http::parse_unsigned("18446744073709551615").value() == std::numeric_limits<std::uint64_t>::max());
    CHECK(integer_error("18446744073709551616") == error::out_of_range);
    CHECK(integer_error("99999999999999999999999999") == error::out_of_range);
    for (const char* bad : {"", " ", "-1", "+1", "1.5", "1.0", "1e3", "0x10", "1 000", "1,000", "ten", "１", "5s"}) {
        CAPTURE(bad);
        CHECK(integer_error(bad) == error::invalid_integer);
    }
}

TEST_CASE("OpenAI's fields: limits, remaining, resets as durations")
{
    const auto l = read({
        {"x-ratelimit-limit-requests", "60"},
        {"x-ratelimit-limit-tokens", "150000"},
        {"x-ratelimit-remaining-requests", "59"},
        {"x-ratelimit-remaining-tokens", "149984"},
        {"x-ratelimit-reset-requests", "1s"},
        {"x-ratelimit-reset-tokens", "6m0s"},
        {"content-type", "application/json"},
    });
    CHECK(l.requests == http::quota_announcement{60, 59, 1s, std::nullopt, quota_family::openai});
    CHECK(l.tokens == http::quota_announcement{150000, 149984, 6min, std::nullopt, quota_family::openai});
    CHECK_FALSE(l.input_tokens.announced());
    CHECK_FALSE(l.output_tokens.announced());
    CHECK_FALSE(l.retry_after);
    CHECK(l.malformed == 0);
}

TEST_CASE("Anthropic's fields: resets as instants, from now; an instant past is zero")
{
    const auto l = read({
        {"anthropic-ratelimit-requests-limit", "50"},
        {"anthropic-ratelimit-requests-remaining", "49"},
        {"anthropic-ratelimit-requests-reset", "2024-05-01T12:00:01Z"},
        {"anthropic-ratelimit-tokens-limit", "100000"},
        {"anthropic-ratelimit-tokens-remaining", "90000"},
        {"anthropic-ratelimit-tokens-reset", "2024-05-01T14:00:06.5+02:00"},
        {"anthropic-ratelimit-input-tokens-limit", "80000"},
        {"anthropic-ratelimit-input-tokens-remaining", "79000"},
        {"anthropic-ratelimit-input-tokens-reset", "2024-05-01T11:59:00Z"},
        {"anthropic-ratelimit-output-tokens-limit", "20000"},
        {"anthropic-ratelimit-output-tokens-remaining", "11000"},
        {"anthropic-ratelimit-output-tokens-reset", "2024-05-01T12:00:00Z"},
        {"retry-after", "7"},
    });
    CHECK(l.requests == http::quota_announcement{50, 49, 1s, std::nullopt, quota_family::anthropic});
    CHECK(l.tokens == http::quota_announcement{100000, 90000, 6500ms, std::nullopt, quota_family::anthropic});
    CHECK(l.input_tokens == http::quota_announcement{80000, 79000, 0s, std::nullopt, quota_family::anthropic});
    CHECK(l.output_tokens == http::quota_announcement{20000, 11000, 0s, std::nullopt, quota_family::anthropic});
    CHECK(l.retry_after == 7s);
    CHECK(l.malformed == 0);

    // From a `now` with a fraction of a second, to the nanosecond.
    const auto l2 = read({{"anthropic-ratelimit-requests-reset", "2024-05-01T12:00:01Z"}}, noon + 250ms);
    CHECK(l2.requests.reset_after == 750ms);
    CHECK_FALSE(l2.requests.limit);
    // From a `now` at the ends of the clock: saturated, never wrapped.
    const auto far = read({{"anthropic-ratelimit-requests-reset", "2262-04-11T23:47:16Z"}},
                          std::chrono::system_clock::time_point::min());
    CHECK(far.requests.reset_after == nanoseconds::max());
}

TEST_CASE("the IETF fields: a policy's unit says which quota it is")
{
    const auto l = read({
        {"RateLimit-Policy", R"("rpm";q=60;w=60, "tpm";q=100000;qu="tokens";w=60)"},
        {"RateLimit", R"("rpm";r=10;t=6, "tpm";r=5000;t=3)"},
    });
    CHECK(l.requests == http::quota_announcement{60, 10, 6s, 60s, quota_family::ietf});
    CHECK(l.tokens == http::quota_announcement{100000, 5000, 3s, 60s, quota_family::ietf});
    CHECK(l.malformed == 0);

    // RateLimit alone: requests (the draft's default unit); two lines of a field joined.
    const auto alone = read({{"ratelimit", R"("a";r=3)"}, {"RATELIMIT", R"("b";r=2;t=1)"}});
    CHECK(alone.requests == http::quota_announcement{std::nullopt, 2, 1s, std::nullopt, quota_family::ietf});

    // Several policies of one quota: the one with the fewest units left binds.
    const auto two = read({
        {"RateLimit-Policy", R"("min";q=60;w=60, "day";q=1000;w=86400, "bytes";q=1;qu="content-bytes")"},
        {"RateLimit", R"("min";r=40;t=20, "day";r=7;t=3600, "bytes";r=0)"},
    });
    CHECK(two.requests == http::quota_announcement{1000, 7, 3600s, 86400s, quota_family::ietf});
    CHECK_FALSE(two.tokens.announced());
    // Input and output tokens by their units.
    const auto io = read({{"RateLimit-Policy", R"("i";q=8;qu="input-tokens", "o";q=9;qu="output-tokens")"}});
    CHECK(io.input_tokens == http::quota_announcement{8, std::nullopt, std::nullopt, std::nullopt, quota_family::ietf});
    CHECK(io.output_tokens.limit == 9u);
}

TEST_CASE("several families: each quota taken whole from the first of ietf, anthropic, openai")
{
    const auto l = read({
        {"x-ratelimit-limit-requests", "60"},
        {"x-ratelimit-remaining-requests", "1"},
        {"x-ratelimit-limit-tokens", "1000"},
        {"anthropic-ratelimit-tokens-remaining", "900"},
        {"RateLimit", R"("default";r=30)"},
    });
    CHECK(l.requests == http::quota_announcement{std::nullopt, 30, std::nullopt, std::nullopt, quota_family::ietf});
    CHECK(l.tokens == http::quota_announcement{std::nullopt, 900, std::nullopt, std::nullopt, quota_family::anthropic});
}

TEST_CASE("hostile values: counted as malformed, skipped, the rest read")
{
    // Huge, negative, fractional, garbage: each one counted, the good ones kept.
    const auto l = read({
        {"x-ratelimit-limit-requests", "99999999999999999999999"},
        {"x-ratelimit-remaining-requests", "-5"},
        {"x-ratelimit-reset-requests", "1.5"},
        {"x-ratelimit-limit-tokens", "1.5"},
        {"x-ratelimit-remaining-tokens", "400"},
        {"x-ratelimit-reset-tokens", "-1s"},
        {"anthropic-ratelimit-requests-reset", "tomorrow"},
        {"anthropic-ratelimit-requests-limit", "1e3"},
        {"retry-after", "-3"},
    });
    CHECK(l.malformed == 8);
    CHECK_FALSE(l.requests.announced());
    CHECK(l.tokens == http::quota_announcement{std::nullopt, 400, std::nullopt, std::nullopt, quota_family::openai});
    CHECK_FALSE(l.retry_after);

    // A field of one value given twice is malformed, whatever the values (even equal ones).
    const auto twice = read({
        {"x-ratelimit-limit-requests", "60"},
        {"X-RateLimit-Limit-Requests", "60"},
        {"x-ratelimit-remaining-requests", "5"},
        {"Retry-After", "1"},
        {"retry-after", "2"},
    });
    CHECK(twice.malformed == 2);
    CHECK(twice.requests == http::quota_announcement{std::nullopt, 5, std::nullopt, std::nullopt, quota_family::openai});
    CHECK_FALSE(twice.retry_after);

    // Names in any case; values with spaces around.
    const auto mixed = read({{"X-RATELIMIT-LIMIT-TOKENS", " 10 "}, {"Anthropic-RateLimit-Requests-Remaining", "3"}});
    CHECK(mixed.tokens.limit == 10u);
    CHECK(mixed.requests.remaining == 3u);
    CHECK(mixed.malformed == 0);

    // Names that only look like the fields.
    const auto near = read({{"x-ratelimit-limit-request", "1"}, {"x-ratelimit-limit-requests ", "1"},
                            {"xratelimit-limit-requests", "1"}, {"anthropic-ratelimit-tokens", "1"},
                            {"ratelimit-policies", "\"a\";q=1"}, {"", ""}});
    CHECK(near == http::provider_limits{});

    // IETF: a malformed field is ignored whole; so is a reset no nanosecond count holds.
    const auto bad_ietf = read({{"RateLimit-Policy", R"("a";q=-1)"}, {"RateLimit", R"("a";r=1;t=999999999999999)"}});
    CHECK(bad_ietf.malformed == 2);
    CHECK_FALSE(bad_ietf.requests.announced());
    const auto half = read({{"RateLimit-Policy", "garbage("}, {"RateLimit", R"("a";r=1;t=9223372036)"}});
    CHECK(half.malformed == 1);
    CHECK(half.requests.reset_after == 9223372036s);

    // A malformed field of the first family lets the next one announce the quota.
    const auto fallback = read({{"RateLimit", "r=1"}, {"x-ratelimit-remaining-requests", "12"}});
    CHECK(fallback.malformed == 1);
    CHECK(fallback.requests.family == quota_family::openai);

    // Retry-After: a date, and one too far for nanoseconds.
    CHECK(read({{"retry-after", "Wed, 01 May 2024 12:00:30 GMT"}}).retry_after == 30s);
    CHECK(read({{"retry-after", "Sun, 01 May 2022 12:00:30 GMT"}}).retry_after == 0s);
    const auto far = read({{"retry-after", "9999999999999"}});
    CHECK(far.malformed == 1);
    CHECK_FALSE(far.retry_after);
    CHECK(read({{"retry-after", "9223372036"}}).retry_after == 9223372036s);
}

TEST_SUITE_END();
