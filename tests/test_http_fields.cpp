// sluice::http: RateLimit / RateLimit-Policy (draft-ietf-httpapi-ratelimit-headers-11),
// RFC 8941 Lists, Retry-After and HTTP-date. Exact values on valid input, the documented
// error on invalid input.
#include <sluice/http/ratelimit_fields.hpp>
#include <sluice/http/retry_after.hpp>
#include <sluice/http/structured_field.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <string>

#include "rng.hpp"

namespace http = sluice::http;
using namespace std::chrono_literals;
using http::error;

namespace {

boost::system::error_code policy_error(std::string_view text)
{
    auto r = http::parse_ratelimit_policy(text);
    return r ? boost::system::error_code{} : r.error();
}

boost::system::error_code limit_error(std::string_view text)
{
    auto r = http::parse_ratelimit(text);
    return r ? boost::system::error_code{} : r.error();
}

std::string canonical_policy(std::string_view text)
{
    auto p = http::parse_ratelimit_policy(text);
    REQUIRE(p.has_value());
    auto f = http::format_ratelimit_policy(*p);
    REQUIRE(f.has_value());
    return *f;
}

} // namespace

TEST_SUITE_BEGIN("http");

TEST_CASE("the draft's examples")
{
    auto p = http::parse_ratelimit_policy(R"("default";q=100;w=10)");
    REQUIRE(p.has_value());
    REQUIRE(p->size() == 1);
    CHECK((*p)[0].name == "default");
    CHECK((*p)[0].quota == 100);
    CHECK((*p)[0].window == 10u);
    CHECK_FALSE((*p)[0].quota_unit);

    auto two = http::parse_ratelimit_policy(R"("permin";q=50;w=60,"perhr";q=1000;w=3600)");
    REQUIRE(two.has_value());
    REQUIRE(two->size() == 2);
    CHECK((*two)[1].name == "perhr");
    CHECK((*two)[1].quota == 1000);

    auto pk = http::parse_ratelimit_policy(R"("peruser";q=65535;qu="content-bytes";w=10;pk=:sdfjLJUOUH==:)");
    REQUIRE(pk.has_value());
    CHECK((*pk)[0].quota_unit == "content-bytes");
    REQUIRE((*pk)[0].partition_key);
    CHECK((*pk)[0].partition_key->size() == 7); // 10 base64 digits with 2 "=": 7 bytes

    auto l = http::parse_ratelimit(R"("default";r=50;t=30)");
    REQUIRE(l.has_value());
    REQUIRE(l->size() == 1);
    CHECK((*l)[0].remaining == 50);
    CHECK((*l)[0].reset == 30u);

    auto nokey = http::parse_ratelimit(R"("default";r=999;pk=:dHJpYWwxMjEzMjM=:)");
    REQUIRE(nokey.has_value());
    CHECK((*nokey)[0].partition_key == "trial121323");
    CHECK_FALSE((*nokey)[0].reset);
}

TEST_CASE("an absent field is an empty list; spaces around members and after ';'")
{
    auto e = http::parse_ratelimit("");
    REQUIRE(e.has_value());
    CHECK(e->empty());
    auto s = http::parse_ratelimit("   ");
    REQUIRE(s.has_value());
    CHECK(s->empty());
    auto l = http::parse_ratelimit(" \"a\";t=3;r=7 ,\t\"b\";  r=0");
    REQUIRE(l.has_value());
    REQUIRE(l->size() == 2);
    CHECK((*l)[0].remaining == 7);
    CHECK((*l)[0].reset == 3u);
    CHECK((*l)[1].name == "b");
    CHECK((*l)[1].remaining == 0);
}

TEST_CASE("unknown parameters are kept as extensions; a repeated one keeps its first place and last value")
{
    auto p = http::parse_ratelimit_policy(R"("d";sluice-burst=10;q=100;w=1;acme=?0;sluice-burst=12)");
    REQUIRE(p.has_value());
    const auto& d = (*p)[0];
    CHECK(d.quota == 100);
    REQUIRE(d.extensions.size() == 2);
    CHECK(d.extensions[0].key == "sluice-burst");
    CHECK(http::uint_extension(d.extensions, "sluice-burst") == 12u);
    CHECK(d.extensions[1].key == "acme");
    CHECK_FALSE(http::uint_extension(d.extensions, "acme"));
    CHECK_FALSE(http::uint_extension(d.extensions, "missing"));
    CHECK(canonical_policy(R"("d";sluice-burst=10;q=100;w=1;acme=?0;sluice-burst=12)") ==
          R"("d";q=100;w=1;sluice-burst=12;acme=?0)");
}

TEST_CASE("each kind of invalid input gets its error")
{
    // Not an RFC 8941 List.
    for (const char* text : {R"("unterminated;q=1)", R"("a";q=1,)", R"("a";q=1,,"b";q=2)", R"("a";Q=1)",
                             R"("a";q=1234567890123456)", R"("a";q=1.2345)", R"("a";q=1.)", R"("a" junk)",
                             R"("bad\escape";q=1)", "\"ctl\x01\";q=1", "\"high\xc3\xa9\";q=1", R"(:not base64!:;q=1)",
                             R"(?2;q=1)", R"(@1659578233;q=1)", R"(%"display";q=1)", ";q=1", "(", "\"a\";",
                             "\"a\";q=", "\"a\";q=-", "\"a\"\t;q=1", "\t\"a\";q=1"}) {
        CAPTURE(text);
        CHECK(policy_error(text) == error::invalid_structured_field);
        CHECK(limit_error(text) == error::invalid_structured_field);
    }
    // The -07 dictionary form is a valid List of tokens with parameters, not of Strings.
    CHECK(limit_error("limit=100, remaining=50, reset=30") == error::invalid_structured_field);
    CHECK(limit_error("limit, remaining") == error::invalid_member);
    // Members that are not String items.
    CHECK(policy_error(R"(default;q=1)") == error::invalid_member);
    CHECK(policy_error(R"(("a" "b");q=1)") == error::invalid_member);
    CHECK(limit_error(R"(7;r=1)") == error::invalid_member);
    // Required parameters.
    CHECK(policy_error(R"("a";w=1)") == error::missing_parameter);
    CHECK(limit_error(R"("a";t=1)") == error::missing_parameter);
    CHECK(policy_error(R"("good";q=1, "bad";w=1)") == error::missing_parameter);
    // Types and ranges.
    for (const char* text : {R"("a";q=-1)", R"("a";q=1.5)", R"("a";q="5")", R"("a";q)", R"("a";q=1;w=0)",
                             R"("a";q=1;w=-3)", R"("a";q=1;qu=requests)", R"("a";q=1;pk="key")"}) {
        CAPTURE(text);
        CHECK(policy_error(text) == error::invalid_parameter);
    }
    for (const char* text : {R"("a";r=-1)", R"("a";r=1;t=-1)", R"("a";r=1;t=?1)", R"("a";r=1;pk=tok)"}) {
        CAPTURE(text);
        CHECK(limit_error(text) == error::invalid_parameter);
    }
    CHECK(limit_error(R"("a";r=0;t=0)") == boost::system::error_code{});
    CHECK(std::string(make_error_code(error::missing_parameter).category().name()) == "sluice.http");
    CHECK_FALSE(make_error_code(error::invalid_parameter).message().empty());
}

TEST_CASE("the limits of RFC 8941 numbers are exact")
{
    auto p = http::parse_ratelimit_policy(R"("a";q=999999999999999;w=999999999999999)");
    REQUIRE(p.has_value());
    CHECK((*p)[0].quota == 999'999'999'999'999u);
    CHECK(policy_error(R"("a";q=1000000000000000)") == error::invalid_structured_field);
    auto l = http::sf::parse_list("-999999999999.999, 0.5, -0, 007, 1.10");
    REQUIRE(l.has_value());
    CHECK((*l)[0].value.value.number == -999'999'999'999'999);
    CHECK((*l)[1].value.value.number == 500);
    CHECK(*http::sf::serialize_list(*l) == "-999999999999.999, 0.5, 0, 7, 1.1");
    CHECK_FALSE(http::sf::parse_list("1234567890123.0").has_value());
}

TEST_CASE("formatting: canonical values, and values the field cannot carry are refused")
{
    std::vector<http::quota_policy> ps{{"default", 100, 1, std::nullopt, std::nullopt, {}},
                                       {"day \"quoted\" \\", 5000, 86400, "requests", std::string("\x00\xff", 2), {}}};
    ps[0].extensions.push_back({"sluice-burst", {http::sf::bare_item::kind::integer, 10, {}, true}});
    auto text = http::format_ratelimit_policy(ps);
    REQUIRE(text.has_value());
    CHECK(*text == R"("default";q=100;w=1;sluice-burst=10, "day \"quoted\" \\";q=5000;qu="requests";w=86400;pk=:AP8=:)");
    auto back = http::parse_ratelimit_policy(*text);
    REQUIRE(back.has_value());
    CHECK(*back == ps);

    std::vector<http::service_limit> ls{{"default", 0, 0, std::nullopt, {}}, {"x", 7, std::nullopt, "k", {}}};
    auto lt = http::format_ratelimit(ls);
    REQUIRE(lt.has_value());
    CHECK(*lt == R"("default";r=0;t=0, "x";r=7;pk=:aw==:)");
    CHECK(*http::parse_ratelimit(*lt) == ls);

    auto refuse = [](http::quota_policy p) {
        auto r = http::format_ratelimit_policy(std::span<const http::quota_policy>(&p, 1));
        return r ? boost::system::error_code{} : r.error();
    };
    CHECK(refuse({"a", 1'000'000'000'000'000, 1, {}, {}, {}}) == error::unserializable);
    CHECK(refuse({"a", 1, 0, {}, {}, {}}) == error::invalid_parameter);
    CHECK(refuse({"caf\xc3\xa9", 1, 1, {}, {}, {}}) == error::unserializable);
    CHECK(refuse({"tab\t", 1, 1, {}, {}, {}}) == error::unserializable);
    http::quota_policy dup{"a", 1, 1, {}, {}, {}};
    dup.extensions.push_back({"q", {}});
    CHECK(refuse(dup) == error::invalid_parameter);
    http::quota_policy badkey{"a", 1, 1, {}, {}, {}};
    badkey.extensions.push_back({"Upper", {}});
    CHECK(refuse(badkey) == error::unserializable);
}

TEST_CASE("Retry-After: delay-seconds")
{
    auto now = std::chrono::system_clock::from_time_t(784111777); // Sun, 06 Nov 1994 08:49:37 GMT
    auto delay = [&](std::string_view s) {
        auto r = http::parse_retry_after(s, now);
        REQUIRE(r.has_value());
        CHECK(r->kind == http::retry_after::form::delay_seconds);
        return r->delay_from(now);
    };
    CHECK(delay("120") == 120s);
    CHECK(delay(" 0\t") == 0s);
    CHECK(delay("0007") == 7s);
    CHECK(delay("9223372036854775807") == std::chrono::seconds(INT64_MAX));
    auto err = [&](std::string_view s) {
        auto r = http::parse_retry_after(s, now);
        return r ? boost::system::error_code{} : r.error();
    };
    CHECK(err("9223372036854775808") == error::out_of_range);
    CHECK(err("99999999999999999999999") == error::out_of_range);
    for (const char* bad : {"", "  ", "-1", "+1", "1.5", "12abc", "1 2", "0x10", ",", "\"5\""}) {
        CAPTURE(bad);
        CHECK(err(bad) == error::invalid_retry_after);
    }
    CHECK(*http::format_retry_after({http::retry_after::form::delay_seconds, 42s, {}}) == "42");
}

TEST_CASE("HTTP-date: the three forms of RFC 9110, exact")
{
    auto now = std::chrono::system_clock::from_time_t(784111777);
    const http::sys_seconds expected{784111777s};
    for (const char* text : {"Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994"}) {
        CAPTURE(text);
        auto d = http::parse_http_date(text, now);
        REQUIRE(d.has_value());
        CHECK(*d == expected);
        auto r = http::parse_retry_after(text, now - 10s);
        REQUIRE(r.has_value());
        CHECK(r->kind == http::retry_after::form::http_date);
        CHECK(r->delay_from(now - 10s) == 10s);
        CHECK(r->delay_from(now + 5s) == 0s); // in the past
        CHECK(r->delay_from(now - 1500ms) == 2s); // rounded up
    }
    CHECK(*http::format_http_date(expected) == "Sun, 06 Nov 1994 08:49:37 GMT");
    // Leap day, year 2000, the epoch, before it, and the ends of the 4-digit year.
    CHECK(http::parse_http_date("Tue, 29 Feb 2000 00:00:00 GMT", now).value().time_since_epoch() == 951782400s);
    CHECK(http::parse_http_date("Thu, 01 Jan 1970 00:00:00 GMT", now).value().time_since_epoch() == 0s);
    CHECK(http::parse_http_date("Wed, 31 Dec 1969 23:59:59 GMT", now).value().time_since_epoch() == -1s);
    CHECK(http::parse_http_date("Sat, 01 Jan 0000 00:00:00 GMT", now).value().time_since_epoch() == -62167219200s);
    CHECK(http::parse_http_date("Fri, 31 Dec 9999 23:59:59 GMT", now).value().time_since_epoch() == 253402300799s);
    CHECK(*http::format_http_date(http::sys_seconds{-62167219200s}) == "Sat, 01 Jan 0000 00:00:00 GMT");
    CHECK(*http::format_http_date(http::sys_seconds{253402300799s}) == "Fri, 31 Dec 9999 23:59:59 GMT");
    CHECK(http::format_http_date(http::sys_seconds{253402300800s}).error() == error::unserializable);
    CHECK(http::format_http_date(http::sys_seconds{-62167219201s}).error() == error::unserializable);
    // A leap second counts as the next second.
    CHECK(http::parse_http_date("Sat, 31 Dec 2016 23:59:60 GMT", now).value().time_since_epoch() == 1483228800s);
    // RFC 850 two-digit years: more than 50 years ahead means the previous century.
    auto in_2026 = std::chrono::system_clock::from_time_t(1780000000); // 2026-05-28
    CHECK(http::parse_http_date("Wednesday, 01-Jan-76 00:00:00 GMT", in_2026).value().time_since_epoch() ==
          http::parse_http_date("Wed, 01 Jan 2076 00:00:00 GMT", now).value().time_since_epoch());
    CHECK(http::parse_http_date("Saturday, 01-Jan-77 00:00:00 GMT", in_2026).value().time_since_epoch() ==
          http::parse_http_date("Sat, 01 Jan 1977 00:00:00 GMT", now).value().time_since_epoch());
}

TEST_CASE("Retry-After: a date beyond 2262 (past nanoseconds since 1970) waits until it, without overflow")
{
    // Found by fuzz/retry_after: the date was converted to now's nanoseconds to compare.
    auto now = std::chrono::system_clock::from_time_t(1780000000);   // 2026-05-28
    for (const char* text : {"Fri, 31 Dec 9999 23:59:59 GMT", "Tue Apr 24 22:22:22 7145"}) {
        CAPTURE(text);
        auto r = http::parse_retry_after(text, now);
        REQUIRE(r.has_value());
        CHECK(r->delay_from(now) == r->date.time_since_epoch() - 1780000000s);
        CHECK(r->delay_from(now + 500ms) == r->date.time_since_epoch() - 1780000000s);
    }
    CHECK(http::parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT", now)->delay_from(now) == 251622300799s);
}

TEST_CASE("Retry-After: in nanoseconds, saturated where they end (2262), never wrapped")
{
    using ns = std::chrono::nanoseconds;
    auto now = std::chrono::system_clock::from_time_t(1780000000);   // 2026-05-28
    auto wait = [&](std::string_view s, std::chrono::system_clock::time_point at) {
        auto r = http::parse_retry_after(s, at);
        REQUIRE(r.has_value());
        return r->delay_ns_from(at);
    };
    CHECK(wait("120", now) == 120s);
    CHECK(wait("0", now) == ns{0});
    // The last whole second that fits, and the first that does not.
    CHECK(wait("9223372036", now) == 9223372036s);
    CHECK(wait("9223372037", now) == ns::max());
    CHECK(wait("9223372036854775807", now) == ns::max());
    // Dates: near, in the past, and far beyond 2262 (where now's nanoseconds end).
    CHECK(wait("Thu, 28 May 2026 20:26:50 GMT", now) == 10s);
    CHECK(wait("Thu, 28 May 2026 20:26:40 GMT", now - 1500ms) == 2s);   // rounded up
    CHECK(wait("Sun, 06 Nov 1994 08:49:37 GMT", now) == ns{0});
    CHECK(wait("Sat, 01 Jan 0000 00:00:00 GMT", now) == ns{0});
    CHECK(wait("Fri, 31 Dec 9999 23:59:59 GMT", now) == ns::max());
    CHECK(wait("Fri, 31 Dec 9999 23:59:59 GMT", std::chrono::system_clock::time_point::min()) == ns::max());
    CHECK(wait("Sat, 01 Jan 0000 00:00:00 GMT", std::chrono::system_clock::time_point::max()) == ns{0});
    // Built by hand below zero: saturated the other way, not wrapped.
    CHECK((http::retry_after{http::retry_after::form::delay_seconds, -5s, {}}.delay_ns_from(now)) == -5s);
    CHECK((http::retry_after{http::retry_after::form::delay_seconds, std::chrono::seconds(INT64_MIN), {}}.delay_ns_from(now)) ==
          ns::min());
}

TEST_CASE("HTTP-date: invalid dates are refused")
{
    auto now = std::chrono::system_clock::from_time_t(784111777);
    for (const char* bad : {"Sun, 06 Nov 1994 08:49:37 UTC", "Mon, 06 Nov 1994 08:49:37 GMT", // weekday
                            "Foo, 06 Nov 1994 08:49:37 GMT", "Sun, 06 Bar 1994 08:49:37 GMT",
                            "sun, 06 Nov 1994 08:49:37 GMT", "Sun, 06 nov 1994 08:49:37 GMT",
                            "Sun, 6 Nov 1994 08:49:37 GMT",  "Sun,  6 Nov 1994 08:49:37 GMT",
                            "Thu, 29 Feb 1900 00:00:00 GMT", "Tue, 31 Apr 1994 00:00:00 GMT",
                            "Sun, 00 Nov 1994 08:49:37 GMT", "Sun, 06 Nov 1994 24:00:00 GMT",
                            "Sun, 06 Nov 1994 08:60:00 GMT", "Sun, 06 Nov 1994 08:49:61 GMT",
                            "Sun, 06 Nov 1994 08:49:37 GMT ", "Sunday, 06-Nov-1994 08:49:37 GMT",
                            "Sun, 06-Nov-94 08:49:37 GMT",   "Sun Nov 06 08:49:37 1994 ",
                            "Sun Nov 6 08:49:37 1994",       "Sun Nov  6 08:49:37 94",
                            "Sun, 06 Nov 1994 08:49 GMT",    "Sun, 06 Nov 1994 8:49:37 GMT", ""}) {
        CAPTURE(bad);
        auto d = http::parse_http_date(bad, now);
        REQUIRE_FALSE(d.has_value());
        CHECK(d.error() == error::invalid_http_date);
    }
    CHECK(http::parse_retry_after("Mon, 06 Nov 1994 08:49:37 GMT", now).error() == error::invalid_http_date);
}

TEST_CASE("HTTP-date: random instants round-trip through all three forms (model: the C library)")
{
    sluice_test::rng gen{7};
    auto now = std::chrono::system_clock::from_time_t(784111777);
    for (int i = 0; i < 20000; ++i) {
        // From year 0 to 9999, with extra weight near the epoch and on day boundaries.
        std::int64_t s = static_cast<std::int64_t>(gen() % 315537897600ULL) - 62167219200LL;
        if (i % 4 == 0) s = s % 86400 * 86400;
        if (i % 7 == 0) s = static_cast<std::int64_t>(gen() % 200000) - 100000;
        http::sys_seconds t{std::chrono::seconds{s}};
        auto text = http::format_http_date(t);
        REQUIRE(text.has_value());
        CAPTURE(*text);
        auto back = http::parse_http_date(*text, now);
        REQUIRE(back.has_value());
        CHECK(*back == t);
        // The same instant in asctime form, built from the IMF-fixdate fields.
        // Appended piece by piece: GCC 12 at -O3 reports a false -Wrestrict on
        // `" " + std::string`.
        std::string a = text->substr(0, 3);
        a += ' ';
        a += text->substr(8, 3);
        a += ' ';
        if (text->at(5) == '0') {
            a += ' ';
            a += text->substr(6, 1);
        } else {
            a += text->substr(5, 2);
        }
        a += ' ';
        a += text->substr(17, 8);
        a += ' ';
        a += text->substr(12, 4);
        auto asc = http::parse_http_date(a, now);
        REQUIRE(asc.has_value());
        CHECK(*asc == t);
        if (s >= 0 && s < 2147483647) { // the C library as an independent model, where time_t is safe
            std::time_t tt = static_cast<std::time_t>(s);
            std::tm tm{};
            gmtime_r(&tt, &tm);
            char buf[64];
            std::strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
            CHECK(*text == buf);
        }
    }
}

TEST_SUITE_END();
