// sluice::shm: limiters whose state every process of a host shares, in a named
// shared-memory segment (no server, no round trip).
#pragma once

#include <sluice/policy/shm_gcra.hpp>
#include <sluice/shm/keyed.hpp>
#include <sluice/shm/keyed_bucket.hpp>
#include <sluice/shm/keyed_gcra.hpp>
#include <sluice/shm/keyed_wait_options.hpp>
#include <sluice/shm/leaky_bucket.hpp>
#include <sluice/shm/segment.hpp>
#include <sluice/shm/token_bucket.hpp>
