// A try that completes with a bool instead of a decision (or a permit) is rejected: the
// concept checks the completion signature, not only that the call compiles.
// expect: L = fake::limiter
// expect: try_completion
// expect: void\(boost::system::error_code, bool\)
#define FAKE_TRY_SIGNATURE void(boost::system::error_code, bool)
#include "fake_limiter.hpp"

static_assert(sluice::limiter<fake::limiter>);
