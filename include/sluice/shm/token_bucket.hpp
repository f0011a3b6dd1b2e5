// A token bucket shared by every process of a host, in a named shared-memory segment.
#pragma once

#include <sluice/rate_limiter.hpp>
#include <sluice/policy/shm_gcra.hpp>

namespace sluice::shm {

/// sluice::token_bucket whose state is shared by every process of the host that names the
/// same segment: rate_limiter<policy::shm_gcra>, so waiting, cancellation, executors, stats and
/// close are those of every rate limiter (each process waits on its own timer; the slots
/// are committed in the shared word, so grants follow the order of reservations across
/// processes). Built as token_bucket(ex or io_context, name or segment_options, rate,
/// burst, [limiter_options]); throws as policy::shm_gcra.
///
///     sluice::shm::token_bucket<> bucket(io, "/myapp-quota", sluice::rate::per_second(100), 10);
///     if (co_await bucket.acquire(250ms)) { ... }
///
/// Clock: default_clock (tsc_clock), as every limiter: within tsc_clock::max_drift (50 us)
/// of steady_clock in each process, so two processes disagree by at most 100 us, and a
/// process whose clock reads ahead admits at most 100 us / interval permits early (at
/// 100,000/s: 10); the count over any longer span is unchanged. After a counter anomaly
/// (see tsc_clock) one process may run up to 8 ms ahead until it works it off. Name
/// std::chrono::steady_clock for exact agreement, at the cost of a slower try_acquire.
template <class Clock = default_clock, class Executor = boost::asio::any_io_executor>
using token_bucket = rate_limiter<policy::shm_gcra, Clock, Executor>;

} // namespace sluice::shm
