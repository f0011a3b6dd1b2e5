// A rate of permits per unit of time, held as the whole-nanosecond interval between
// two permits.
#pragma once

#include <sluice/error.hpp>

#include <boost/system/result.hpp>

#include <chrono>
#include <cstdint>
#include <string_view>

namespace sluice {

/// A rate, stored as the interval between two permits in whole nanoseconds, rounded
/// up so that a limiter never runs faster than asked. The interval is exact for every
/// rate that divides 10^9 per second (1/s, 3/s is 333,333,334 ns: 2e-9 slow); in
/// general the achieved rate is below the requested one by less than rate / 10^9
/// (0.1 % at 10^6/s). Valid rates run from one permit per 292 years to 10^9 per second.
/// parse_rate() reads decimals exactly; per_second() takes its double as the binary value
/// it is (0.1 is not 1/10).
class rate {
public:
    /// `permits` per second. Throws boost::system::system_error(error::invalid_rate) for
    /// zero, negative, NaN, infinite or out-of-range values.
    static rate per_second(double permits);

    /// `count` permits per `period`. Throws system_error(error::invalid_rate) when count
    /// or period is zero or negative, or the interval is outside [1 ns, INT64_MAX ns].
    template <class Rep, class Period>
    static rate per(std::uint64_t count, std::chrono::duration<Rep, Period> period)
    {
        using ld = std::chrono::duration<long double, std::nano>;
        return from_period(count, std::chrono::duration_cast<ld>(period).count());
    }

    /// The same as per(), reporting bad input as an error instead of throwing.
    template <class Rep, class Period>
    static boost::system::result<rate> make(std::uint64_t count,
                                            std::chrono::duration<Rep, Period> period) noexcept
    {
        using ld = std::chrono::duration<long double, std::nano>;
        return checked(count, std::chrono::duration_cast<ld>(period).count());
    }

    /// Builds a rate from its interval. Throws system_error(error::invalid_rate) unless
    /// the interval is positive.
    static rate every(std::chrono::nanoseconds interval);

    /// Time between two permits, in whole nanoseconds (>= 1).
    constexpr std::chrono::nanoseconds interval() const noexcept
    {
        return std::chrono::nanoseconds{interval_ns_};
    }

    /// Permits per second (for display; limiters never use floating point).
    double per_second() const noexcept { return 1e9 / static_cast<double>(interval_ns_); }

    /// Rates are equal when their intervals are (100/s equals 6000/min).
    friend constexpr bool operator==(rate, rate) noexcept = default;

private:
    constexpr explicit rate(std::int64_t interval_ns) noexcept : interval_ns_(interval_ns) {}

    static rate from_period(std::uint64_t count, long double period_ns);
    static boost::system::result<rate> checked(std::uint64_t count, long double period_ns) noexcept;

    std::int64_t interval_ns_;
};

/// Parses "100/s", "5/min", "2500/h", "1/d", "10/250ms", "0.5/s", "3 / 2h". Units: ns, us,
/// ms, s, min (or m), h, d, w, y (365 days). The numbers are decimals, read exactly (no
/// binary floating point): the interval is ceil(period / count) in whole ns, so "1/0.1s"
/// is 100,000,000 ns. Returns error::parse_error for malformed text, or for a number with
/// more than 19 significant digits whose extra digits could change the interval, and
/// error::invalid_rate for a rate outside the range of sluice::rate (never a clamp).
boost::system::result<rate> parse_rate(std::string_view text) noexcept;

} // namespace sluice
