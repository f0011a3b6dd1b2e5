// The clock every limiter reads unless told otherwise.
#pragma once

#include <chrono>

namespace sluice {

/// The default Clock of every limiter and of the wait engine's timer.
using default_clock = std::chrono::steady_clock;

} // namespace sluice
