// Adaptive concurrency limit: at most `limit()` operations in flight, the limit following
// the latency and the failures of the operations that hold its permits.
#pragma once

#include <sluice/adaptive_concurrency_controller.hpp>
#include <sluice/concurrency_limit.hpp>
#include <sluice/detail/wait/adaptive_slot_queue.hpp>

namespace sluice {

/// A concurrency limit that finds its own limit: each permit measures the operation it
/// covers, from its admission to its end, and an adaptive_concurrency_controller (AIMD, Vegas
/// or Gradient2, see concurrency_algorithm) turns those samples into the limit. Built as
/// adaptive_concurrency(ex or io_context, [adaptive_concurrency_options],
/// [limiter_options]); everything else is basic_concurrency_limit's, the front end of every
/// concurrency limit.
template <class Clock = default_clock, class Executor = boost::asio::any_io_executor>
using adaptive_concurrency = basic_concurrency_limit<detail::adaptive_slot_queue, Clock, Executor>;

} // namespace sluice
