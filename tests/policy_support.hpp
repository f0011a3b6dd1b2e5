// Shared pieces of the policy tests: 128-bit arithmetic for reference models, the seeded
// generator, and decision comparison.
#pragma once

#include <sluice/decision.hpp>

#include <boost/system/system_error.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <limits>

#include "rng.hpp"

namespace sluice_test {

__extension__ typedef __int128 i128;

constexpr std::int64_t i64_min = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t i64_max = std::numeric_limits<std::int64_t>::max();

std::int64_t clamp64(i128 v) { return v > i64_max ? i64_max : v < i64_min ? i64_min : static_cast<std::int64_t>(v); }

i128 floor_div(i128 a, i128 b) { return a / b - ((a % b != 0 && a < 0) ? 1 : 0); }

void check_same(const sluice::decision& got, const sluice::decision& want)
{
    CHECK(got.admitted == want.admitted);
    CHECK(got.retry_after.count() == want.retry_after.count());
    CHECK(got.remaining == want.remaining);
    CHECK(got.reset_after.count() == want.reset_after.count());
    CHECK(got.error == want.error);
    if (!got.admitted) CHECK(got.retry_after.count() > 0);
}

template <class F>
boost::system::error_code thrown(F&& f)
{
    try {
        f();
    } catch (const boost::system::system_error& e) {
        return e.code();
    }
    return {};
}

} // namespace sluice_test
