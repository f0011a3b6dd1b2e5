// Token bucket: up to `burst` permits at once, refilled at `rate`.
#pragma once

#include <sluice/policy/gcra.hpp>
#include <sluice/rate_limiter.hpp>

namespace sluice {

/// Asynchronous token bucket on GCRA (policy::gcra): one atomic word, lock-free
/// try_acquire, reservations committed when a waiter queues. Built as
/// token_bucket(ex or io_context, rate, burst, [limiter_options]); throws
/// system_error(error::invalid_limit) for burst 0 or burst * interval beyond 292 years.
/// Everything else (the operations, set_rate, set_burst, rate(), burst()) is
/// rate_limiter's.
///
///     sluice::token_bucket bucket(io, sluice::rate::per_second(100), 10);
///     if (co_await bucket.acquire(250ms)) { ... }
template <class Clock = default_clock, class Executor = boost::asio::any_io_executor>
using token_bucket = rate_limiter<policy::gcra, Clock, Executor>;

} // namespace sluice
