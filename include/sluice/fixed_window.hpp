// Asynchronous fixed window limiter.
#pragma once

#include <sluice/policy/fixed_counter.hpp>
#include <sluice/rate_limiter.hpp>

namespace sluice {

/// Asynchronous fixed window limiter (policy::fixed_counter): at most `limit` permits in
/// each fixed window; the weak guarantee (2 * limit may pass around a boundary). Lock-free
/// try_acquire; waiters are retried when the next window opens. Built as
/// fixed_window(ex or io_context, limit, window, [limiter_options]). Everything else is
/// rate_limiter's.
template <class Clock = default_clock, class Executor = boost::asio::any_io_executor>
using fixed_window = rate_limiter<policy::fixed_counter, Clock, Executor>;

} // namespace sluice
