// Asynchronous composite limiter: several limits admitted together, all or nothing.
#pragma once

#include <sluice/policy/composite.hpp>
#include <sluice/rate_limiter.hpp>

namespace sluice {

/// Asynchronous composite (policy::composite): admits n permits only when every part
/// admits them, and never consumes from one part when another rejects. Waiters are
/// retried when the latest of the parts' predictions comes. Built from a tuple of each
/// part's constructor arguments, optionally followed by limiter_options; update<I>(f)
/// reconfigures one part. Everything else is rate_limiter's.
///
///     sluice::all_of<policy::gcra, policy::sliding_log> limit(io,
///         std::tuple{rate::per_second(10), 10}, std::tuple{1000, 1h});
template <class... P>
using all_of = rate_limiter<policy::composite<P...>>;

/// all_of on another Clock and Executor.
template <class Clock, class Executor, class... P>
using basic_all_of = rate_limiter<policy::composite<P...>, Clock, Executor>;

} // namespace sluice
