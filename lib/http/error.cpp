#include <sluice/http/error.hpp>

#include <string>

namespace sluice::http {
namespace {

class category final : public boost::system::error_category {
public:
    // A fixed id lets error codes compare equal across shared-library copies.
    category() noexcept : error_category(0x51a1ce0000000002ULL) {}

    const char* name() const noexcept override { return "sluice.http"; }

    std::string message(int ev) const override
    {
        switch (static_cast<error>(ev)) {
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
        }
        return "unknown sluice.http error";
    }
};

} // namespace

const boost::system::error_category& error_category() noexcept
{
    static const category instance;
    return instance;
}

} // namespace sluice::http
