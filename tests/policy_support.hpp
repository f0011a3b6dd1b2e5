// Shared pieces of the policy tests: 128-bit arithmetic for reference models, a seeded
// generator, and decision comparison.
#pragma once

#include <sluice/decision.hpp>

#include <boost/system/system_error.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <limits>

namespace sluice_test {

__extension__ typedef __int128 i128;

constexpr std::int64_t i64_min = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t i64_max = std::numeric_limits<std::int64_t>::max();

struct rng {
    std::uint64_t s;
    std::uint64_t next()
    {
        std::uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
    }
    std::int64_t in(std::int64_t lo, std::int64_t hi) { return lo + static_cast<std::int64_t>(next() % static_cast<std::uint64_t>(hi - lo + 1)); }
};

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
