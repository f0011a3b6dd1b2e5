// What the waiting queues share: the queue bounds, the answer to a request that finds
// the queue full, and a cache line of its own for a policy.
#pragma once

#include <sluice/decision.hpp>
#include <sluice/error.hpp>
#include <sluice/limiter_options.hpp>

#include <boost/system/error_code.hpp>

#include <cstddef>
#include <cstdint>
#include <utility>

namespace sluice::detail {

/// limiter_options::max_queued and max_queued_permits.
struct queue_bounds {
    std::size_t max_queued;
    std::uint64_t max_queued_permits;

    explicit queue_bounds(const limiter_options& o) noexcept
        : max_queued(o.max_queued), max_queued_permits(o.max_queued_permits)
    {
    }

    // Whether one more request of n permits may wait behind `queued` requests holding
    // `permits` (never more than max_queued_permits, so the subtraction cannot wrap).
    bool admit(std::size_t queued, std::uint64_t permits, std::uint64_t n) const noexcept
    {
        return queued < max_queued && permits <= max_queued_permits && n <= max_queued_permits - permits;
    }
};

/// The answer to a request that finds the queue full: only a request that needs no wait
/// at all (and so passes nobody) goes through; bad input is reported as such.
template <class Policy>
boost::system::error_code refuse_when_full(Policy& p, std::uint64_t n, std::int64_t now, bool queue_empty) noexcept
{
    reservation r = queue_empty ? p.reserve(n, now, 0, 0) : reservation{};
    if (r.admitted)
        return {};
    if (r.error && r.error != error::timed_out)
        return r.error;
    return make_error_code(error::queue_full);
}

/// The policy's state on a cache line of its own: lock-free try_acquire from other cores
/// then never bounces the line with the queue's bookkeeping or the engine's mutex.
template <class Policy>
struct alignas(64) padded_policy {
    template <class... Args>
    explicit padded_policy(Args&&... args) : policy(std::forward<Args>(args)...)
    {
    }

    Policy policy;
};

} // namespace sluice::detail
