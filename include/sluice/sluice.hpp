// Everything sluice offers but the Redis limiters (<sluice/redis/...>, library
// sluice_redis), in one include.
#pragma once

#include <sluice/acquire_result.hpp>
#include <sluice/adaptive_concurrency.hpp>
#include <sluice/adaptive_concurrency_controller.hpp>
#include <sluice/adaptive_rate.hpp>
#include <sluice/adaptive_rate_controller.hpp>
#include <sluice/all_of.hpp>
#include <sluice/rate_limiter.hpp>
#include <sluice/coarse_clock.hpp>
#include <sluice/concurrency_limit.hpp>
#include <sluice/decision.hpp>
#include <sluice/error.hpp>
#include <sluice/fixed_window.hpp>
#include <sluice/http/error.hpp>
#include <sluice/http/provider_limits.hpp>
#include <sluice/http/ratelimit_fields.hpp>
#include <sluice/http/retry_after.hpp>
#include <sluice/http/structured_field.hpp>
#include <sluice/keyed.hpp>
#include <sluice/keyed_options.hpp>
#include <sluice/leaky_bucket.hpp>
#include <sluice/limiter_options.hpp>
#include <sluice/limiter_stats.hpp>
#include <sluice/manual_clock.hpp>
#include <sluice/prometheus.hpp>
#include <sluice/rate_meter.hpp>
#include <sluice/rate.hpp>
#include <sluice/shm.hpp>
#include <sluice/sliding_window.hpp>
#include <sluice/sliding_window_counter.hpp>
#include <sluice/throttled_stream.hpp>
#include <sluice/time_wheel.hpp>
#include <sluice/token_bucket.hpp>
#include <sluice/tsc_clock.hpp>
#include <sluice/version.hpp>
