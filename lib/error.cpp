#include <sluice/error.hpp>

namespace sluice {
namespace {

const char* describe(error e) noexcept
{
    switch (e) {
    case error::invalid_rate: return "invalid rate";
    case error::invalid_limit: return "invalid limit";
    case error::invalid_duration: return "invalid duration";
    case error::invalid_count: return "a request must ask for at least one permit";
    case error::exceeds_limit: return "the request exceeds the limit: it can never be granted";
    case error::timed_out: return "the request could not be granted within its maximum wait";
    case error::queue_full: return "the waiting queue is full";
    case error::closed: return "the limiter is closed";
    case error::parse_error: return "malformed input";
    case error::invalid_option: return "invalid option";
    case error::backend_unavailable: return "the shared backend is unavailable";
    case error::backend_error: return "the shared backend answered with an error";
    case error::protocol_error: return "unexpected reply from the shared backend";
    case error::shm_invalid_name: return "invalid shared-memory segment name or size";
    case error::shm_config_mismatch: return "the shared-memory segment exists with another configuration";
    case error::shm_incompatible: return "the shared-memory segment has another layout or version";
    case error::shm_permission: return "no permission to open the shared-memory segment";
    case error::shm_unavailable: return "the shared-memory segment could not be created or mapped";
    case error::shm_table_full: return "the shared-memory key table is full and no key is idle";
    case error::shm_key_too_long: return "the key is longer than the shared-memory key table stores";
    case error::shm_string_key: return "a string key on a shared-memory table of integer keys";
    case error::shm_foreign: return "the shared-memory segment belongs to another user or is open to more users than asked";
    case error::shm_truncated: return "the shared-memory segment was truncated under this process: its state is gone";
    case error::shm_lock_timeout: return "a lock in the shared-memory segment was not free in time";
    case error::shm_corrupt: return "the shared-memory segment holds bytes this library never writes";
    case error::not_admitted: return "the admission admitted nothing";
    case error::already_settled: return "the admission was settled already";
    case error::foreign_admission: return "the admission belongs to another limiter";
    case error::stale_admission: return "the admission predates a change of the limiter: it cannot be settled";
    }
    return nullptr;
}

} // namespace

const boost::system::error_category& error_category() noexcept
{
    static const detail::enum_category<error> instance(0x51a1ce0000000001ULL, "sluice", describe);
    return instance;
}

} // namespace sluice
