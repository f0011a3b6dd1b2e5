// The clock every limiter reads unless told otherwise.
#pragma once

#include <sluice/tsc_clock.hpp>

namespace sluice {

/// The default Clock of every limiter and of the wait engine's timer: tsc_clock, the
/// time-stamp counter where the CPU has an invariant TSC and the kernel keeps time with it
/// (clocksource `tsc`), steady_clock's reading elsewhere, decided once when the library is
/// loaded. Its time points are on steady_clock's time line (tsc_clock::to_steady converts).
///
/// Opting out: SLUICE_TSC_CLOCK=off in the environment (the whole process reads
/// steady_clock through it), or name the clock: `token_bucket<std::chrono::steady_clock>`.
using default_clock = tsc_clock;

} // namespace sluice
