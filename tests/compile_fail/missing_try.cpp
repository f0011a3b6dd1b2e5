// A limiter without async_try_acquire is not a limiter.
// expect: L = fake::limiter
// expect: required expression .l\.async_try_acquire\(.* is invalid
#define FAKE_NO_TRY
#include "fake_limiter.hpp"

static_assert(sluice::limiter<fake::limiter>);
