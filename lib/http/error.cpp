#include <sluice/http/error.hpp>

namespace sluice::http {
namespace {

const char* describe(error e) noexcept
{
    switch (e) {
    case error::invalid_structured_field: return "not an RFC 8941 structured-field list";
    case error::invalid_member: return "a RateLimit member is not a String item with parameters";
    case error::missing_parameter: return "a required RateLimit parameter (q or r) is missing";
    case error::invalid_parameter:
        return "a RateLimit parameter has the wrong type or range (q, r, t: non-negative integer; w: positive "
               "integer; qu: string; pk: byte sequence)";
    case error::invalid_retry_after: return "Retry-After is neither delay-seconds nor an HTTP-date";
    case error::invalid_http_date: return "not a valid HTTP-date";
    case error::out_of_range: return "value out of range";
    case error::unserializable: return "value cannot be serialised as a structured field";
    case error::invalid_duration: return "not a duration such as 1s, 6m0s or 20ms";
    case error::invalid_date_time: return "not a valid RFC 3339 date-time";
    case error::invalid_integer: return "not a non-negative decimal integer";
    }
    return nullptr;
}

} // namespace

const boost::system::error_category& error_category() noexcept
{
    static const sluice::detail::enum_category<error> instance(0x51a1ce0000000002ULL, "sluice.http", describe);
    return instance;
}

} // namespace sluice::http
