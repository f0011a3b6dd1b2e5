// The former name of shm::keyed_bucket, kept for the code that uses it.
#pragma once

#include <sluice/default_clock.hpp>
#include <sluice/shm/keyed_bucket.hpp>

#include <boost/asio/any_io_executor.hpp>

namespace sluice::shm {

/// Deprecated: shm::keyed_bucket, the same class (a table of buckets, not a sluice::keyed<L>).
template <class Clock = default_clock, class Executor = boost::asio::any_io_executor>
using keyed [[deprecated("sluice::shm::keyed is now sluice::shm::keyed_bucket")]] = keyed_bucket<Clock, Executor>;

} // namespace sluice::shm
