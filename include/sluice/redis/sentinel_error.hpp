// Why a Sentinel discovery found no master, in its own boost::system category.
#pragma once

#include <boost/system/error_code.hpp>

#include <type_traits>

namespace sluice::redis {

/// Why a discovery through Sentinel ended without a verified master. When Sentinels gave
/// different failures, the one furthest along is reported (not_master over
/// master_unreachable over unknown_master over sentinels_unreachable).
enum class sentinel_error {
    /// No Sentinel answered in time (refused, timed out, or an error reply such as NOAUTH).
    sentinels_unreachable = 1,

    /// Every Sentinel that answered replied nil: it monitors no master of that name.
    unknown_master,

    /// The master a Sentinel named could not be reached to check its ROLE in time (it died,
    /// and the Sentinels have not yet promoted a replica).
    master_unreachable,

    /// The instance a Sentinel named is not a master (its ROLE is slave or sentinel): a
    /// stale Sentinel, or a master demoted by a failover. It is never used.
    not_master,
};

/// The category of sentinel_error; its name() is "sluice.redis.sentinel".
const boost::system::error_category& sentinel_category() noexcept;

/// `e` as an error_code of sentinel_category() (found by argument-dependent lookup).
inline boost::system::error_code make_error_code(sentinel_error e) noexcept
{
    return {static_cast<int>(e), sentinel_category()};
}

} // namespace sluice::redis

/// \cond boost_traits (Boost's, not part of sluice's reference)
template <>
struct boost::system::is_error_code_enum<sluice::redis::sentinel_error> : std::true_type {};
/// \endcond
