#include <sluice/error.hpp>

namespace sluice {
namespace {

class category final : public boost::system::error_category {
public:
    // A fixed id lets error codes compare equal across shared-library copies.
    category() noexcept : error_category(0x51a1ce0000000001ULL) {}

    const char* name() const noexcept override { return "sluice"; }

    std::string message(int ev) const override
    {
        switch (static_cast<error>(ev)) {
        case error::invalid_rate: return "invalid rate";
        case error::invalid_burst: return "invalid burst or limit";
        case error::invalid_count: return "a request must ask for at least one permit";
        case error::exceeds_burst: return "request exceeds the burst: it can never be granted";
        case error::would_exceed_timeout: return "granting the request would exceed its maximum wait";
        case error::queue_full: return "the waiting queue is full";
        case error::closed: return "the limiter is closed";
        case error::timed_out: return "the maximum wait elapsed";
        case error::parse_error: return "malformed input";
        case error::backend_unavailable: return "the shared backend is unavailable";
        case error::invalid_option: return "invalid option";
        case error::backend_error: return "the shared backend answered with an error";
        case error::protocol_error: return "unexpected reply from the shared backend";
        }
        return "unknown sluice error";
    }
};

} // namespace

const boost::system::error_category& error_category() noexcept
{
    static const category instance;
    return instance;
}

} // namespace sluice
