// What an API provider's response says of its quotas, read into one shape whichever family
// of fields announced them (sans-io: the fields and the time in, a value out):
//
//  - OpenAI and the servers compatible with it: x-ratelimit-{limit,remaining,reset}-
//    {requests,tokens}, the resets as Go durations ("1s", "6m0s", "20ms");
//  - Anthropic: anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-
//    {limit,remaining,reset}, the resets as RFC 3339 instants;
//  - the IETF RateLimit and RateLimit-Policy fields (ratelimit_fields.hpp), a policy's
//    quota unit saying which quota it is;
//  - Retry-After (retry_after.hpp).
//
// A provider's fields are input from outside: a malformed value is counted and ignored,
// never trusted and never thrown.
#pragma once

#include <sluice/http/error.hpp>

#include <boost/system/result.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace sluice::http {

/// Parses a duration as Go's time.ParseDuration reads it (and time.Duration.String writes
/// it): one or more decimal numbers, each with an optional fraction and a unit ("1s",
/// "6m0s", "20ms", "1h2m3.5s", "1.5us"), or "0" alone. Units: ns, us, µs (U+00B5), μs
/// (U+03BC), ms, s, m, h. Digits beyond a nanosecond are dropped (truncated, as Go does);
/// surrounding spaces and tabs are ignored. No sign: a provider's wait is never negative.
/// Errors: invalid_duration (empty, a sign, a number without a unit, an unknown unit, a
/// lone "."), out_of_range (beyond 2^63 - 1 nanoseconds, about 292 years).
boost::system::result<std::chrono::nanoseconds> parse_go_duration(std::string_view text);

/// An instant: nanoseconds since 1970-01-01 UTC.
using sys_nanoseconds = std::chrono::time_point<std::chrono::system_clock, std::chrono::nanoseconds>;

/// Parses an RFC 3339 date-time: "2024-05-01T12:00:30Z", "2024-05-01T14:00:30.25+02:00".
/// 'T' and 'Z' in either case (section 5.6); any number of fraction digits, those beyond a
/// nanosecond dropped; a leap second (:60) counts as the next second; "-00:00" is UTC;
/// surrounding spaces and tabs are ignored. Errors: invalid_date_time (bad syntax, a date
/// that does not exist, hour 24, an offset beyond 23:59), out_of_range (an instant
/// sys_nanoseconds cannot hold: before 1677-09-21 or after 2262-04-11).
boost::system::result<sys_nanoseconds> parse_rfc3339(std::string_view text);

/// Parses a non-negative decimal integer, as quota fields carry them ("60", "150000"):
/// digits only (leading zeros allowed), surrounding spaces and tabs ignored. Errors:
/// invalid_integer (empty, a sign, a fraction, an exponent, any other byte), out_of_range
/// (beyond 2^64 - 1).
boost::system::result<std::uint64_t> parse_unsigned(std::string_view text);

/// The family of fields a quota was announced in.
enum class quota_family : unsigned char {
    none,      ///< the response said nothing of this quota
    openai,    ///< x-ratelimit-*
    anthropic, ///< anthropic-ratelimit-*
    ietf,      ///< RateLimit and RateLimit-Policy
};

/// What a response said of one quota. A provider may send any of the parts; those it did
/// not send (or sent malformed) are empty.
struct quota_announcement {
    /// The quota: units per window (per minute for OpenAI and Anthropic; q of the policy).
    std::optional<std::uint64_t> limit;
    /// Units left when the response was sent (r of RateLimit).
    std::optional<std::uint64_t> remaining;
    /// From the response's `now`: until the quota is full again (OpenAI), until the
    /// announced instant (Anthropic; zero for an instant past), or t of RateLimit.
    std::optional<std::chrono::nanoseconds> reset_after;
    /// The window of the quota: w of RateLimit-Policy (the other families do not send one).
    std::optional<std::chrono::seconds> window;
    /// Where the parts came from; none when the response said nothing of the quota.
    quota_family family = quota_family::none;

    /// Whether the response said anything of this quota.
    bool announced() const noexcept { return family != quota_family::none; }

    /// Equal when every part is.
    friend bool operator==(const quota_announcement&, const quota_announcement&) = default;
};

/// One field line of a response: its name (in any case) and value.
struct field_line {
    std::string_view name;  ///< the field's name
    std::string_view value; ///< its value
};

/// What one response said of a provider's quotas.
struct provider_limits {
    quota_announcement requests;      ///< requests per window
    quota_announcement tokens;        ///< tokens per window (input and output together)
    quota_announcement input_tokens;  ///< input (prompt) tokens per window (Anthropic)
    quota_announcement output_tokens; ///< output (completion) tokens per window (Anthropic)
    /// Retry-After, from the response's `now` (zero for a date past).
    std::optional<std::chrono::nanoseconds> retry_after;
    /// Fields of these families ignored as malformed, each counted once: a value the
    /// parsers above refuse, RateLimit or RateLimit-Policy that parse_ratelimit or
    /// parse_ratelimit_policy refuses, a field other than those two given more than once.
    unsigned malformed = 0;

    /// Equal when every part is.
    friend bool operator==(const provider_limits&, const provider_limits&) = default;
};

/// Reads the quota fields among `fields` (all of a response's field lines, in any order; a
/// field that has several lines listed once per line) received at `now`, which resolves
/// Anthropic's instants and an HTTP-date Retry-After. Fields of no family above are
/// skipped; a malformed one is counted and skipped, the others are read all the same.
///
/// A quota announced by several families is taken whole from the first of ietf,
/// anthropic, openai that announces it. In RateLimit-Policy, a policy's `qu` names its
/// quota ("requests" or absent, "tokens", "input-tokens", "output-tokens"; other units are
/// skipped); a RateLimit member is matched to its policy by name (one of no policy counts
/// requests, the draft's default unit). Of several policies of one quota, the one with the
/// fewest units remaining binds and is taken (the first, when none says).
provider_limits read_provider_limits(std::span<const field_line> fields, std::chrono::system_clock::time_point now);

} // namespace sluice::http
