// Errors of the HTTP field parsers and formatters (sluice::http), in their own category
// "sluice.http": a malformed header is the server's fault, not a limiter's, and a caller
// that logs and ignores it can tell the two apart by category.
#pragma once

#include <sluice/detail/base/error_category.hpp>

#include <boost/system/error_code.hpp>

namespace sluice::http {

/// Errors reported by the parsers and formatters of sluice/http/.
enum class error {
    /// The text is not an RFC 8941 List (bad syntax, an integer of more than 15 digits,
    /// a decimal of more than 3 fraction digits, a non-ASCII byte, a trailing comma...).
    invalid_structured_field = 1,

    /// A member of RateLimit or RateLimit-Policy is not a String Item with parameters (an
    /// inner list, or a policy name that is a Token, a number...).
    invalid_member,

    /// A required parameter is absent: q in RateLimit-Policy, r in RateLimit.
    missing_parameter,

    /// A parameter has the wrong type or range: q, r and t must be non-negative Integers,
    /// w a positive Integer, qu a String, pk a Byte Sequence.
    invalid_parameter,

    /// Retry-After is neither delay-seconds nor an HTTP-date.
    invalid_retry_after,

    /// Not an HTTP-date (IMF-fixdate, RFC 850 or asctime form), or not a real date
    /// (February 30, a weekday that does not match the date, hour 24).
    invalid_http_date,

    /// A well-formed value beyond what the result type holds (delay-seconds beyond
    /// 2^63 - 1 seconds, a duration beyond 2^63 - 1 nanoseconds, an integer beyond
    /// 2^64 - 1, an instant outside 1677 to 2262).
    out_of_range,

    /// A value cannot be serialised: an integer beyond 15 digits, a string with a byte
    /// outside printable ASCII, an invalid key or token, a year beyond 9999.
    unserializable,

    /// Not a duration as Go writes it ("1s", "6m0s", "20ms", "1h2m3.5s"): a number without
    /// a unit, an unknown unit, a sign, any other byte.
    invalid_duration,

    /// Not an RFC 3339 date-time ("2024-05-01T12:00:30.5Z"), or not a real one (February
    /// 30, hour 24, an offset beyond 23:59).
    invalid_date_time,

    /// Not a non-negative decimal integer (empty, a sign, a fraction, any other byte).
    invalid_integer,
};

/// The category of sluice::http::error; its name() is "sluice.http".
const boost::system::error_category& error_category() noexcept;

/// error_category(), found by argument-dependent lookup from a sluice::http::error.
inline const boost::system::error_category& category_of(error) noexcept { return error_category(); }

/// `make_error_code(e)`: `e` as an error_code of the "sluice.http" category.
using sluice::detail::make_error_code;

} // namespace sluice::http
