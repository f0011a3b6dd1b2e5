// Asynchronous sliding window limiter: the strong guarantee.
#pragma once

#include <sluice/policy/sliding_log.hpp>
#include <sluice/rate_limiter.hpp>

namespace sluice {

/// Asynchronous sliding window (policy::sliding_log): never more than `limit` permits in
/// ANY window-long interval. Keeps `limit` timestamps; a short critical section per
/// decision (no allocation). Waiters are retried when the oldest timestamps leave the
/// window. Built as sliding_window(ex or io_context, limit, window, [limiter_options]).
/// Everything else is rate_limiter's.
template <class Clock = default_clock, class Executor = boost::asio::any_io_executor>
using sliding_window = rate_limiter<policy::sliding_log, Clock, Executor>;

} // namespace sluice
