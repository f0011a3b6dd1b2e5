// Saturating and floor arithmetic on int64 nanoseconds: limiter states live anywhere in
// the int64 range (a clock near its end, a state that says "long ago"), so no step may
// overflow.
#pragma once

#include <cstdint>
#include <limits>

namespace sluice::detail {

// 128-bit intermediates for products of two int64 values (GCC/Clang builtin types).
__extension__ typedef __int128 int128;
__extension__ typedef unsigned __int128 uint128;

inline constexpr std::int64_t min_ns = std::numeric_limits<std::int64_t>::min();
inline constexpr std::int64_t max_ns = std::numeric_limits<std::int64_t>::max();

constexpr std::int64_t sat_add(std::int64_t a, std::int64_t b) noexcept
{
    std::int64_t r;
    if (__builtin_add_overflow(a, b, &r))
        return b > 0 ? max_ns : min_ns;
    return r;
}

constexpr std::int64_t sat_sub(std::int64_t a, std::int64_t b) noexcept
{
    std::int64_t r;
    if (__builtin_sub_overflow(a, b, &r))
        return b > 0 ? min_ns : max_ns;
    return r;
}

/// n * interval, saturated at max_ns (both are non-negative).
constexpr std::int64_t sat_mul(std::uint64_t n, std::int64_t interval) noexcept
{
    std::int64_t r;
    if (n > static_cast<std::uint64_t>(max_ns) ||
        __builtin_mul_overflow(static_cast<std::int64_t>(n), interval, &r))
        return max_ns;
    return r;
}

/// v narrowed to int64, saturated at both ends (for 128-bit intermediates).
constexpr std::int64_t sat_narrow(int128 v) noexcept
{
    if (v > max_ns) return max_ns;
    if (v < min_ns) return min_ns;
    return static_cast<std::int64_t>(v);
}

/// Floor division for a possibly negative numerator and a positive divisor.
constexpr std::int64_t floor_div(std::int64_t a, std::int64_t b) noexcept
{
    std::int64_t q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}

/// ceil(a / b) for a >= 0, b > 0.
constexpr std::int64_t ceil_div(std::int64_t a, std::int64_t b) noexcept
{
    return a / b + (a % b != 0 ? 1 : 0);
}

} // namespace sluice::detail
