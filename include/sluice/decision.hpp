// What a limiter answers to a request: the result of try_acquire and reserve.
#pragma once

#include <sluice/detail/base/config.hpp>
#include <sluice/error.hpp>

#include <chrono>
#include <cstdint>
#include <limits>

namespace sluice {

/// The answer to a non-blocking request.
struct decision {
    /// Whether the permits were admitted (and consumed).
    bool admitted = false;

    /// When rejected: how long until the same request would be admitted if nothing else
    /// consumed in between; exact and rounded up, never 0. nanoseconds::max() when it
    /// can never be admitted (see `error`). Zero when admitted.
    std::chrono::nanoseconds retry_after{0};

    /// Permits that could still be admitted at once after this decision.
    std::uint64_t remaining = 0;

    /// How long until the limiter is back to its full, idle state.
    std::chrono::nanoseconds reset_after{0};

    /// Set when the request is invalid: error::invalid_count (n == 0) or
    /// error::exceeds_limit (n larger than the limiter ever admits at once).
    boost::system::error_code error;

    /// Whether the permits were admitted (`admitted`).
    explicit operator bool() const noexcept { return admitted; }
};

/// The answer to reserve(n, now, max_wait): either the permits are committed and become
/// usable at `at`, or nothing was consumed and `at` is the earliest predicted time.
struct reservation {
    /// True when the permits are committed (consumed) and usable from `at` on.
    bool admitted = false;

    /// Nanoseconds on the limiter's clock: the ready time when admitted, else the
    /// predicted earliest time the request could be admitted.
    std::int64_t at = 0;

    /// error::timed_out when the predicted wait is longer than max_wait;
    /// error::invalid_count / error::exceeds_limit for bad requests. Empty when admitted,
    /// or when the policy cannot commit ahead and asks to be retried at `at`.
    boost::system::error_code error;
};

namespace detail {

inline decision invalid_decision(error e) noexcept
{
    decision d;
    d.retry_after = std::chrono::nanoseconds::max();
    d.error = make_error_code(e);
    return d;
}

inline reservation invalid_reservation(error e) noexcept
{
    reservation r;
    r.at = std::numeric_limits<std::int64_t>::max();
    r.error = make_error_code(e);
    return r;
}

// A reservation that consumed nothing: the request may be retried at `at`.
inline reservation deferred_reservation(std::int64_t at, std::int64_t now, std::int64_t max_wait) noexcept
{
    reservation r;
    r.at = at;
    std::int64_t wait;
    if (__builtin_sub_overflow(at, now, &wait) || wait > max_wait)
        r.error = make_error_code(error::timed_out);
    return r;
}

} // namespace detail
} // namespace sluice
