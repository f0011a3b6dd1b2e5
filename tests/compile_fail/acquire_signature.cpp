// An acquire whose completion carries something that is not a permit is rejected.
// expect: L = fake::limiter
// expect: acquire_completion
#define FAKE_ACQUIRE_SIGNATURE void(boost::system::error_code, int)
#include "fake_limiter.hpp"

static_assert(sluice::limiter<fake::limiter>);
