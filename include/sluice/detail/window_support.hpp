// What the policies that never reserve ahead (the window policies) do alike: validate
// their limit and window, and answer reserve() with a grant now or a prediction.
#pragma once

#include <sluice/decision.hpp>
#include <sluice/error.hpp>

#include <boost/system/system_error.hpp>

#include <chrono>
#include <cstdint>

namespace sluice::detail {

/// `limit`, or system_error(error::invalid_limit) unless 1 <= limit <= max_limit.
inline std::uint64_t checked_limit(std::uint64_t limit, std::uint64_t max_limit)
{
    if (limit == 0 || limit > max_limit)
        throw boost::system::system_error(make_error_code(error::invalid_limit));
    return limit;
}

/// The window in ns, or system_error(error::invalid_duration) unless it is positive.
inline std::int64_t checked_window(std::chrono::nanoseconds w)
{
    if (w.count() <= 0)
        throw boost::system::system_error(make_error_code(error::invalid_duration));
    return w.count();
}

/// reserve() of a policy that never commits in the future: grants at once when nothing is
/// `ahead` and grant() succeeds; otherwise nothing is consumed and the request may be
/// retried at predict() (error::timed_out beyond max_wait). Bad counts are reported as such.
template <class Grant, class Predict>
reservation reserve_now_or_later(std::uint64_t limit, std::uint64_t n, std::int64_t now, std::int64_t max_wait,
                                 std::uint64_t ahead, Grant&& grant, Predict&& predict) noexcept
{
    if (n == 0) return invalid_reservation(error::invalid_count);
    if (n > limit) return invalid_reservation(error::exceeds_limit);
    if (ahead == 0 && grant())
        return {true, now, {}};
    return deferred_reservation(predict(), now, max_wait);
}

} // namespace sluice::detail
