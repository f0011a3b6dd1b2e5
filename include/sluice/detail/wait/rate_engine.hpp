// The wait engine of a rate policy: which queue of the one engine a policy waits in. Here
// rather than in rate_limiter.hpp so that the stores (a key's engine in keyed_store, the
// shared-memory table's) reach it without including a limiter.
#pragma once

#include <sluice/detail/wait/reserving_queue.hpp>
#include <sluice/detail/wait/retrying_queue.hpp>
#include <sluice/detail/wait/wait_engine.hpp>

#include <type_traits>

namespace sluice::detail {

/// The waiting queue of a rate policy: slots committed ahead (GCRA) or the head retried
/// (window policies).
template <class Policy>
using rate_queue = std::conditional_t<Policy::reserves_ahead, reserving_queue<Policy>, retrying_queue<Policy>>;

/// The engine of a rate limiter over Policy (a policy_ref<P> for a key of a keyed limiter).
template <class Policy, class Clock, class Executor>
using rate_engine = wait_engine<rate_queue<Policy>, Clock, Executor>;

} // namespace sluice::detail
