// stats() must be a limiter_stats.
// expect: L = fake::limiter
// expect: .cl\.stats\(\). does not satisfy return-type-requirement
#define FAKE_STATS_TYPE int
#include "fake_limiter.hpp"

static_assert(sluice::limiter<fake::limiter>);
