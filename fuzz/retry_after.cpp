// fuzz-covers: lib/http/retry_after.cpp
// Retry-After (delay-seconds and the three HTTP-date forms) and HTTP-date on their own, at
// any `now` (the first 8 bytes, ns since the epoch). What parses formats back and parses
// to the same value (an IMF-fixdate without a leap second to the same text); the delay
// from `now` is never negative and never ends before the date ("never a retry before its
// time"), and is less than a second later than it.
#include "fuzz.hpp"

#include <sluice/http/retry_after.hpp>

#include <chrono>

namespace http = sluice::http;
using namespace std::chrono;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    fuzz::input in(data, size);
    const system_clock::time_point now{system_clock::duration{in.integer<std::int64_t>()}};
    const std::string_view text = in.rest();

    // 9999-12-31 23:59:60 is the first second of 10000, which IMF-fixdate cannot write (both
    // documented): the one date that parses and does not format.
    const http::sys_seconds year_10000{seconds{253402300800}};
    if (auto d = http::parse_http_date(text, now)) {
        auto f = http::format_http_date(*d);
        if (*d == year_10000) {
            FUZZ_CHECK(!f && f.error() == http::error::unserializable);
            return 0;
        }
        FUZZ_CHECK(f.has_value());   // every other date parsed has a year in 0000..9999
        auto again = http::parse_http_date(*f, now);
        FUZZ_CHECK(again && *again == *d);
        if (text.size() == 29 && text.substr(23, 2) != "60") FUZZ_CHECK(*f == text);
    }

    auto r = http::parse_retry_after(text, now);
    if (!r) {
        auto e = r.error();
        FUZZ_CHECK(e == http::error::invalid_retry_after || e == http::error::invalid_http_date ||
                   e == http::error::out_of_range);
        return 0;
    }
    auto f = http::format_retry_after(*r);
    if (r->kind == http::retry_after::form::http_date && r->date == year_10000) {
        FUZZ_CHECK(!f && f.error() == http::error::unserializable);
    } else {
        FUZZ_CHECK(f.has_value());
        auto again = http::parse_retry_after(*f, now);
        FUZZ_CHECK(again && *again == *r);
        FUZZ_CHECK(*http::format_retry_after(*again) == *f);
    }

    const seconds wait = r->delay_from(now);
    FUZZ_CHECK(wait >= seconds{0});
    // In nanoseconds: exact where they reach, saturated beyond (never wrapped).
    const auto wait_ns = r->delay_ns_from(now);
    if (wait.count() <= std::chrono::nanoseconds::max().count() / 1'000'000'000)
        FUZZ_CHECK(wait_ns == wait);
    else
        FUZZ_CHECK(wait_ns == std::chrono::nanoseconds::max());
    if (r->kind == http::retry_after::form::delay_seconds) {
        FUZZ_CHECK(wait == r->delay);
    } else {
        // In whole seconds, where nothing overflows: from a `now` before the date, the wait
        // ends exactly at it (ceil(date - now) = date - floor(now)); from one at or after
        // it, nothing to wait.
        const auto now_s = floor<seconds>(now).time_since_epoch().count();
        const auto date = r->date.time_since_epoch().count();
        if (date > now_s)
            FUZZ_CHECK(now_s + wait.count() == date);
        else
            FUZZ_CHECK(wait == seconds{0});
    }
    return 0;
}
