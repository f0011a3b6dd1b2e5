// The old name of policy::shm_gcra: a policy lives in policy::, wherever its state is.
#pragma once

#include <sluice/policy/shm_gcra.hpp>

namespace sluice::shm {

/// Deprecated: use sluice::policy::shm_gcra (<sluice/policy/shm_gcra.hpp>), the same type.
using gcra [[deprecated("use sluice::policy::shm_gcra")]] = sluice::policy::shm_gcra;

} // namespace sluice::shm
