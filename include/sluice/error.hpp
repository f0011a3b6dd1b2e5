// Error codes of sluice, in their own boost::system category named "sluice".
#pragma once

#include <sluice/detail/config.hpp>
#include <boost/system/error_code.hpp>

#include <type_traits>

namespace sluice {

/// Errors reported by sluice. Completion handlers receive them as
/// boost::system::error_code; constructors throw them as boost::system::system_error.
enum class error {
    /// A rate is zero, negative, NaN, infinite, or faster than one permit per nanosecond.
    invalid_rate = 1,

    /// A burst, limit or capacity is zero or larger than the policy can hold.
    invalid_burst,

    /// A request asked for zero permits.
    invalid_count,

    /// A request asked for more permits than the limiter can ever grant at once.
    exceeds_burst,

    /// Granting the request would take longer than its maximum wait; nothing was consumed.
    would_exceed_timeout,

    /// The limiter's waiting queue is full; nothing was consumed.
    queue_full,

    /// The limiter was closed; pending and new requests complete with this error.
    closed,

    /// A wait whose length cannot be predicted (a concurrency limit) reached its maximum wait.
    timed_out,

    /// A text could not be parsed (a rate such as "100/s").
    parse_error,

    /// A shared backend (Redis) could not be reached in time.
    backend_unavailable,

    /// An option is out of its range (keyed_options), or a setting cannot change while in
    /// use (the window of a tracked key).
    invalid_option,

    /// The shared backend (Redis) answered with an error reply (a wrong-type value at the
    /// key, a script error, an out-of-memory refusal).
    backend_error,

    /// A reply from the shared backend did not have the expected shape (garbage, a wrong
    /// type, a value out of range).
    protocol_error,
};

/// The category of sluice::error; its name() is "sluice".
const boost::system::error_category& error_category() noexcept;

/// `e` as an error_code of error_category(); found by argument-dependent lookup, so that
/// `ec == error::closed` compiles.
inline boost::system::error_code make_error_code(error e) noexcept
{
    return {static_cast<int>(e), error_category()};
}

} // namespace sluice

/// \cond boost_traits (Boost's, not part of sluice's reference)
template <>
struct boost::system::is_error_code_enum<sluice::error> : std::true_type {};
/// \endcond
