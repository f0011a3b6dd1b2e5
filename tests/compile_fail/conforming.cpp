// The control: the fake limiter as it is keeps the contract, so what the other cases take
// away is what makes them fail.
// expect: (compiles)
#include "fake_limiter.hpp"

static_assert(sluice::limiter<fake::limiter>);
