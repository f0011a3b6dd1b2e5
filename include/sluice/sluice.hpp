// Everything sluice offers, in one include.
#pragma once

#include <sluice/all_of.hpp>
#include <sluice/basic_limiter.hpp>
#include <sluice/concurrency_limit.hpp>
#include <sluice/decision.hpp>
#include <sluice/error.hpp>
#include <sluice/fixed_window.hpp>
#include <sluice/keyed.hpp>
#include <sluice/leaky_bucket.hpp>
#include <sluice/limiter_options.hpp>
#include <sluice/manual_clock.hpp>
#include <sluice/rate_meter.hpp>
#include <sluice/rate.hpp>
#include <sluice/sliding_window.hpp>
#include <sluice/sliding_window_counter.hpp>
#include <sluice/time_wheel.hpp>
#include <sluice/token_bucket.hpp>
