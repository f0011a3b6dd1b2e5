// Retry-After (RFC 9110 section 10.2.3) and HTTP-date (section 5.6.7): parsing all three
// date forms a recipient must accept (IMF-fixdate, the obsolete RFC 850 and asctime
// forms), formatting IMF-fixdate. Dates are converted with integer civil-calendar
// arithmetic: no time zone, locale or timegm().
#pragma once

#include <sluice/http/error.hpp>

#include <boost/system/result.hpp>

#include <chrono>
#include <string>
#include <string_view>

namespace sluice::http {

/// Whole seconds of UTC since 1970-01-01 (std::chrono::sys_seconds).
using sys_seconds = std::chrono::time_point<std::chrono::system_clock, std::chrono::seconds>;

/// Parses an HTTP-date. `now` resolves the two-digit year of the RFC 850 form: a date that
/// would be more than 50 years in the future is taken in the previous century (RFC 9110).
/// A leap second (:60) is accepted and counts as the next second. Errors:
/// invalid_http_date (bad syntax, an impossible date, a weekday that does not match).
boost::system::result<sys_seconds> parse_http_date(std::string_view text, std::chrono::system_clock::time_point now);

/// IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT". Errors: unserializable outside the
/// years 0000 to 9999.
boost::system::result<std::string> format_http_date(sys_seconds when);

/// A Retry-After value: a delay, or a date.
struct retry_after {
    /// Which of the two forms the field had.
    enum class form {
        delay_seconds, ///< a number of seconds
        http_date,     ///< an HTTP-date
    };
    /// The form of this value; `delay` or `date` holds it.
    form kind = form::delay_seconds;
    std::chrono::seconds delay{0}; ///< delay_seconds
    sys_seconds date{};            ///< http_date

    /// How long to wait from `now`: the delay, or the time until the date (zero for a
    /// date in the past), rounded up to whole seconds.
    std::chrono::seconds delay_from(std::chrono::system_clock::time_point now) const noexcept;

    /// delay_from(now) in nanoseconds, what a steady clock's timer waits in, saturated at
    /// std::chrono::nanoseconds::max() (about 292 years): delay-seconds go up to 2^63 - 1
    /// and dates to the year 9999, and neither fits in nanoseconds. Never negative for a
    /// parsed value; a delay set by hand below zero saturates at nanoseconds::min().
    std::chrono::nanoseconds delay_ns_from(std::chrono::system_clock::time_point now) const noexcept;

    /// Equal when form, delay and date all are.
    friend bool operator==(const retry_after&, const retry_after&) = default;
};

/// Parses a Retry-After value (surrounding spaces and tabs ignored). Errors:
/// invalid_retry_after, invalid_http_date (it starts like a date but is not one),
/// out_of_range (delay-seconds beyond 2^63 - 1).
boost::system::result<retry_after> parse_retry_after(std::string_view text,
                                                     std::chrono::system_clock::time_point now);

/// Delay-seconds, or the date as IMF-fixdate. Errors: unserializable (a negative delay,
/// a year beyond 9999).
boost::system::result<std::string> format_retry_after(const retry_after& value);

} // namespace sluice::http
