// fuzz-covers: lib/http/provider_limits.cpp
// A provider's quota fields (OpenAI's x-ratelimit-*, Anthropic's anthropic-ratelimit-*,
// RateLimit / RateLimit-Policy, Retry-After) as any response may send them, at any `now`.
// Checked, for read_provider_limits: the quotas the singleton families announce are
// exactly what the value parsers make of the one line of each field (a model built from
// parse_unsigned, parse_go_duration and parse_rfc3339), taken from the first of ietf,
// anthropic, openai; an IETF quota is one of the policies or limits sent; the malformed
// count is the model's, plus at most the two IETF fields; no reset is negative. For each
// value, the parsers alone: a Go duration is never negative, formats back (as Go writes
// it) to the same value, and one nanosecond more is one nanosecond later; an RFC 3339
// instant formats back (by the C library) to itself, and its offset replaced by Z moves it
// by exactly that offset; an integer is its digits.
//
// Input: `now` (8 bytes, ns since 1970), then fields: a byte (bit 7: the name's case
// changed; bits 0-6: one of the 21 names, or past them a name of the input's own), then
// the value (length-prefixed).
#include "fuzz.hpp"

#include <sluice/http/provider_limits.hpp>
#include <sluice/http/retry_after.hpp>

#include <array>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

namespace http = sluice::http;
using namespace std::chrono;

namespace {

constexpr std::array<std::string_view, 21> names{
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
    "anthropic-ratelimit-requests-limit",
    "anthropic-ratelimit-requests-remaining",
    "anthropic-ratelimit-requests-reset",
    "anthropic-ratelimit-tokens-limit",
    "anthropic-ratelimit-tokens-remaining",
    "anthropic-ratelimit-tokens-reset",
    "anthropic-ratelimit-input-tokens-limit",
    "anthropic-ratelimit-input-tokens-remaining",
    "anthropic-ratelimit-input-tokens-reset",
    "anthropic-ratelimit-output-tokens-limit",
    "anthropic-ratelimit-output-tokens-remaining",
    "anthropic-ratelimit-output-tokens-reset",
    "retry-after",
    "ratelimit",
    "ratelimit-policy",
};

std::string lower(std::string_view s)
{
    std::string out(s);
    for (char& c : out)
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    return out;
}

std::string_view trim(std::string_view s)
{
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

// As Go's time.Duration.String() writes a non-negative duration.
std::string go_format(nanoseconds d)
{
    auto v = static_cast<std::uint64_t>(d.count());
    char buf[64];
    if (v == 0) return "0s";
    if (v < 1'000'000'000) {
        // ns, µs or ms with a fraction: here always in ns, which Go also reads.
        std::snprintf(buf, sizeof buf, "%lluns", static_cast<unsigned long long>(v));
        return buf;
    }
    const auto h = v / 3'600'000'000'000, m = v / 60'000'000'000 % 60, s = v / 1'000'000'000 % 60,
               f = v % 1'000'000'000;
    std::string out;
    if (h) out += std::to_string(h) + "h";
    if (h || m) out += std::to_string(m) + "m";
    std::snprintf(buf, sizeof buf, "%llu.%09llus", static_cast<unsigned long long>(s), static_cast<unsigned long long>(f));
    return out + buf;
}

void check_duration(std::string_view text)
{
    auto d = http::parse_go_duration(text);
    if (!d) {
        FUZZ_CHECK(d.error() == http::error::invalid_duration || d.error() == http::error::out_of_range);
        return;
    }
    FUZZ_CHECK(d->count() >= 0);
    auto again = http::parse_go_duration(go_format(*d));
    FUZZ_CHECK(again && *again == *d);
    // One more component: exactly one nanosecond later (the text "0" alone has no unit).
    const std::string_view t = trim(text);
    if (t != "0") {
        auto more = http::parse_go_duration(std::string(t) + "1ns");
        if (*d == nanoseconds::max()) FUZZ_CHECK(!more && more.error() == http::error::out_of_range);
        else FUZZ_CHECK(more && *more == *d + 1ns);
    }
}

void check_instant(std::string_view text)
{
    auto t = http::parse_rfc3339(text);
    if (!t) {
        FUZZ_CHECK(t.error() == http::error::invalid_date_time || t.error() == http::error::out_of_range);
        return;
    }
    // Written back by the C library, in UTC with nine fraction digits: the same instant.
    const auto ns = t->time_since_epoch().count();
    std::int64_t secs = ns / 1'000'000'000, frac = ns % 1'000'000'000;
    if (frac < 0) {
        --secs;
        frac += 1'000'000'000;
    }
    const std::time_t tt = static_cast<std::time_t>(secs);
    std::tm tm{};
    FUZZ_CHECK(gmtime_r(&tt, &tm) != nullptr);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%09lldZ", tm.tm_year + 1900, tm.tm_mon + 1,
                  tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<long long>(frac));
    auto again = http::parse_rfc3339(buf);
    FUZZ_CHECK(again && *again == *t);
    // The offset replaced by Z: the same wall time in UTC, the offset later or earlier.
    const std::string_view s = trim(text);
    if (s.size() >= 6 && (s[s.size() - 6] == '+' || s[s.size() - 6] == '-') && s[s.size() - 3] == ':') {
        const int sign = s[s.size() - 6] == '+' ? 1 : -1;
        const auto offset = sign * (((s[s.size() - 5] - '0') * 10 + (s[s.size() - 4] - '0')) * 3600 +
                                    ((s[s.size() - 2] - '0') * 10 + (s[s.size() - 1] - '0')) * 60);
        auto utc = http::parse_rfc3339(std::string(s.substr(0, s.size() - 6)) + "Z");
        if (utc) FUZZ_CHECK(utc->time_since_epoch() - t->time_since_epoch() == seconds(offset));
        else FUZZ_CHECK(utc.error() == http::error::out_of_range);
    }
}

void check_integer(std::string_view text)
{
    auto n = http::parse_unsigned(text);
    if (!n) {
        FUZZ_CHECK(n.error() == http::error::invalid_integer || n.error() == http::error::out_of_range);
        return;
    }
    std::string_view digits = trim(text);
    while (digits.size() > 1 && digits[0] == '0') digits.remove_prefix(1);
    FUZZ_CHECK(std::to_string(*n) == digits);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    fuzz::input in(data, size);
    const system_clock::time_point now{system_clock::duration{in.integer<std::int64_t>()}};
    std::vector<std::string> name_text, value_text;
    while (!in.empty() && name_text.size() < 40) {
        const std::uint8_t b = in.byte();
        std::string name = (b & 0x7f) < names.size() ? std::string(names[b & 0x7f]) : in.text();
        if (b & 0x80)
            for (std::size_t i = 0; i < name.size(); i += 2)
                if (name[i] >= 'a' && name[i] <= 'z') name[i] = static_cast<char>(name[i] - 'a' + 'A');
        name_text.push_back(std::move(name));
        value_text.push_back(in.text());
    }
    std::vector<http::field_line> fields;
    for (std::size_t i = 0; i < name_text.size(); ++i) fields.push_back({name_text[i], value_text[i]});
    for (const auto& v : value_text) {
        check_duration(v);
        check_instant(v);
        check_integer(v);
    }

    const http::provider_limits got = http::read_provider_limits(fields, now);

    // The model of the singleton fields: each one's lines, then its value parsed alone.
    std::array<std::vector<std::string_view>, 19> lines;
    for (const auto& f : fields) {
        const std::string n = lower(f.name);
        for (std::size_t k = 0; k < 19; ++k)
            if (n == names[k]) lines[k].push_back(f.value);
    }
    unsigned malformed = 0;
    std::array<http::quota_announcement, 4> openai{}, anthropic{};
    for (std::size_t k = 0; k < 18; ++k) {
        if (lines[k].empty()) continue;
        if (lines[k].size() > 1) {
            ++malformed;
            continue;
        }
        const bool is_openai = k < 6;
        const std::size_t quota = is_openai ? k / 3 : (k - 6) / 3;
        const std::size_t part = k % 3; // limit, remaining, reset in both families
        auto& a = (is_openai ? openai : anthropic)[quota];
        const std::string_view v = lines[k][0];
        bool ok = false;
        if (part < 2) {
            if (auto n = http::parse_unsigned(v)) {
                ok = true;
                (part == 0 ? a.limit : a.remaining) = *n;
            }
        } else if (is_openai) {
            if (auto d = http::parse_go_duration(v)) {
                ok = true;
                a.reset_after = *d;
            }
        } else if (auto t = http::parse_rfc3339(v)) {
            ok = true;
            const auto now_ns = time_point_cast<nanoseconds>(now).time_since_epoch().count();
            const auto at = t->time_since_epoch().count();
            // Saturated at the ends of the clock.
            std::int64_t left;
            if (__builtin_sub_overflow(at, now_ns, &left)) left = at > now_ns ? INT64_MAX : 0;
            a.reset_after = nanoseconds{left > 0 ? left : 0};
        }
        if (ok) a.family = is_openai ? http::quota_family::openai : http::quota_family::anthropic;
        else ++malformed;
    }
    if (!lines[18].empty()) {
        bool ok = lines[18].size() == 1;
        if (ok) {
            auto ra = http::parse_retry_after(lines[18][0], now);
            ok = ra && ra->delay_from(now).count() <= INT64_MAX / 1'000'000'000;
            if (ok) FUZZ_CHECK(got.retry_after == ra->delay_from(now));
        }
        if (!ok) {
            ++malformed;
            FUZZ_CHECK(!got.retry_after);
        }
    } else {
        FUZZ_CHECK(!got.retry_after);
    }

    bool any_ietf = false;
    for (const auto& f : fields) {
        const std::string n = lower(f.name);
        any_ietf = any_ietf || n == "ratelimit" || n == "ratelimit-policy";
    }
    FUZZ_CHECK(got.malformed >= malformed && got.malformed <= malformed + (any_ietf ? 2 : 0));

    const http::quota_announcement* quotas[] = {&got.requests, &got.tokens, &got.input_tokens, &got.output_tokens};
    for (std::size_t q = 0; q < 4; ++q) {
        const auto& a = *quotas[q];
        FUZZ_CHECK(!a.reset_after || a.reset_after->count() >= 0);
        if (a.family == http::quota_family::ietf) {
            FUZZ_CHECK(any_ietf);
            FUZZ_CHECK(!a.window || a.window->count() > 0);
        } else {
            // Not announced in the IETF fields: exactly the model's.
            const auto& want = anthropic[q].announced() ? anthropic[q] : openai[q];
            FUZZ_CHECK(a == want);
        }
        if (!a.announced()) FUZZ_CHECK(!a.limit && !a.remaining && !a.reset_after && !a.window);
    }
    return 0;
}
