// Why a Sentinel discovery found no master, in its own boost::system category.
#pragma once

#include <sluice/detail/base/error_category.hpp>

#include <boost/system/error_code.hpp>

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

/// sentinel_category(), found by argument-dependent lookup from a sentinel_error.
inline const boost::system::error_category& category_of(sentinel_error) noexcept { return sentinel_category(); }

/// `make_error_code(e)`: `e` as an error_code of sentinel_category() (found by
/// argument-dependent lookup).
using sluice::detail::make_error_code;

} // namespace sluice::redis
