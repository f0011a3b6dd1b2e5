// Asynchronous time wheel: a sliding window counted in slots, bounded memory.
#pragma once

#include <sluice/policy/slot_ring.hpp>
#include <sluice/rate_limiter.hpp>

namespace sluice {

/// Asynchronous time wheel (policy::slot_ring): never more than `limit` permits in any
/// `slots` consecutive slots of `slot_duration`. A ring of per-slot counters; a short
/// critical section per decision. Waiters are retried when old slots leave the turn.
/// Built as time_wheel(ex or io_context, limit, slot_duration, slots, [limiter_options]);
/// window() is one turn. Everything else is rate_limiter's.
template <class Clock = default_clock, class Executor = boost::asio::any_io_executor>
using time_wheel = rate_limiter<policy::slot_ring, Clock, Executor>;

} // namespace sluice
