// Asynchronous sliding window counter: approximate, cheap.
#pragma once

#include <sluice/policy/weighted_counter.hpp>
#include <sluice/rate_limiter.hpp>

namespace sluice {

/// Asynchronous sliding window counter (policy::weighted_counter): two fixed windows
/// weighted by overlap, one atomic word, approximate. Waiters are retried when the
/// estimate drops enough. Built as sliding_window_counter(ex or io_context, limit, window,
/// [limiter_options]). Everything else is rate_limiter's.
template <class Clock = default_clock, class Executor = boost::asio::any_io_executor>
using sliding_window_counter = rate_limiter<policy::weighted_counter, Clock, Executor>;

} // namespace sluice
