#include <sluice/rate.hpp>

#include <sluice/detail/base/arith.hpp>

#include <boost/system/system_error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace sluice {
namespace {

constexpr long double max_ns = static_cast<long double>(std::numeric_limits<std::int64_t>::max());

// Interval in ns for `count` permits per `period_ns`, rounded up; 0 when out of range.
std::int64_t interval_for(long double count, long double period_ns) noexcept
{
    if (!(count > 0) || !(period_ns > 0) || !std::isfinite(count) || !std::isfinite(period_ns))
        return 0;
    // Faster than one permit per ns is out of range, not rounded up to it.
    long double exact = period_ns / count;
    long double interval = std::ceil(exact);
    if (!(exact >= 1) || interval > max_ns)
        return 0;
    return static_cast<std::int64_t>(interval);
}

void throw_invalid_rate()
{
    throw boost::system::system_error(make_error_code(error::invalid_rate));
}

bool skip_space(std::string_view& s) noexcept
{
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
        s.remove_prefix(1);
    return !s.empty();
}

using detail::uint128;

// A non-negative decimal number as mantissa * 10^exponent, with at most 19 significant
// digits in the mantissa. A longer number keeps its first 19 and is marked inexact: its
// value then lies strictly between mantissa * 10^exponent and (mantissa + 1) * 10^exponent.
struct decimal {
    std::uint64_t mantissa = 0;
    std::int64_t exponent = 0;
    bool inexact = false;
};

constexpr std::size_t max_digits = 19;   // 10^19 - 1 < 2^64

// Parses digits with an optional fraction ("5", "5.", "5.25", ".25"), exactly.
bool parse_number(std::string_view& s, decimal& out) noexcept
{
    std::size_t i = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    std::string_view whole = s.substr(0, i), fraction;
    if (i < s.size() && s[i] == '.') {
        std::size_t f = ++i;
        while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
        fraction = s.substr(f, i - f);
    }
    std::size_t n = whole.size() + fraction.size();
    if (n == 0)
        return false;
    auto digit = [&](std::size_t k) { return k < whole.size() ? whole[k] : fraction[k - whole.size()]; };
    std::size_t first = 0, last = n;   // the significant digits: [first, last)
    while (first < n && digit(first) == '0') ++first;
    while (last > first && digit(last - 1) == '0') --last;
    decimal d;
    if (first < last) {
        std::size_t kept = std::min(last - first, max_digits);
        for (std::size_t k = first; k < first + kept; ++k)
            d.mantissa = d.mantissa * 10 + static_cast<std::uint64_t>(digit(k) - '0');
        // digits [first, first + kept) scaled by the digits after them, less the fraction.
        d.exponent = static_cast<std::int64_t>(n - (first + kept)) - static_cast<std::int64_t>(fraction.size());
        d.inexact = kept < last - first;   // what was dropped ends with a nonzero digit
    }
    out = d;
    s.remove_prefix(i);
    return true;
}

// ceil(period / count) for period = p * 10^pe * unit ns and count = c * 10^ce, exactly in
// 128 bits. False when zero, below 1 ns or above INT64_MAX ns.
bool exact_interval(std::uint64_t p, std::int64_t pe, std::uint64_t c, std::int64_t ce, std::uint64_t unit,
                    std::int64_t& out) noexcept
{
    if (p == 0 || c == 0)
        return false;
    constexpr uint128 max128 = ~uint128(0);
    uint128 num = uint128(p) * unit;   // < 2^64 * 2^55
    uint128 den = c;                   // < 2^64
    // Once num would pass 2^128 (den < 2^64), the interval is past 2^64 ns; once den would
    // (num < 2^119), it is below 1 ns: each loop stops within 40 steps.
    for (std::int64_t k = pe - ce; k > 0; --k) {
        if (num > max128 / 10) return false;
        num *= 10;
    }
    for (std::int64_t k = pe - ce; k < 0; ++k) {
        if (den > max128 / 10) return false;
        den *= 10;
    }
    if (num < den)
        return false;   // faster than one permit per ns: out of range, not rounded up to it
    uint128 q = num / den + (num % den != 0 ? 1 : 0);
    if (q > static_cast<uint128>(std::numeric_limits<std::int64_t>::max()))
        return false;
    out = static_cast<std::int64_t>(q);
    return true;
}

// Units in whole nanoseconds; 0 for an unknown one.
std::uint64_t unit_ns(std::string_view u) noexcept
{
    constexpr std::uint64_t s = 1'000'000'000;
    if (u == "ns") return 1;
    if (u == "us") return 1'000;
    if (u == "ms") return 1'000'000;
    if (u == "s" || u == "sec") return s;
    if (u == "m" || u == "min") return 60 * s;
    if (u == "h" || u == "hour") return 3600 * s;
    if (u == "d" || u == "day") return 86400 * s;
    if (u == "w" || u == "week") return 7 * 86400 * s;
    if (u == "y" || u == "year") return 365 * 86400 * s;
    return 0;
}

} // namespace

rate rate::per_second(double permits)
{
    std::int64_t i = interval_for(permits, 1e9L);
    if (i == 0)
        throw_invalid_rate();
    return rate{i};
}

rate rate::every(std::chrono::nanoseconds interval)
{
    if (interval.count() <= 0)
        throw_invalid_rate();
    return rate{interval.count()};
}

rate rate::from_period(std::uint64_t count, long double period_ns)
{
    auto r = checked(count, period_ns);
    if (!r)
        throw_invalid_rate();
    return *r;
}

boost::system::result<rate> rate::checked(std::uint64_t count, long double period_ns) noexcept
{
    std::int64_t i = interval_for(static_cast<long double>(count), period_ns);
    if (i == 0)
        return make_error_code(error::invalid_rate);
    return rate{i};
}

boost::system::result<rate> parse_rate(std::string_view text) noexcept
{
    auto bad = [] { return boost::system::result<rate>(make_error_code(error::parse_error)); };
    decimal count;
    if (!skip_space(text) || !parse_number(text, count) || !skip_space(text) || text.front() != '/')
        return bad();
    text.remove_prefix(1);
    if (!skip_space(text))
        return bad();
    decimal mult{1, 0, false};
    if (text.front() >= '0' && text.front() <= '9') {
        if (!parse_number(text, mult) || !skip_space(text))
            return bad();
    }
    while (!text.empty() && (text.back() == ' ' || text.back() == '\t'))
        text.remove_suffix(1);
    std::uint64_t unit = unit_ns(text);
    if (unit == 0)
        return bad();
    // Decimal, not binary, arithmetic: "1/0.1s" is 100,000,000 ns exactly. A number cut to
    // 19 digits lies between its mantissa and the next one: the shortest period over the
    // largest count and the longest over the smallest must then agree.
    std::int64_t lo = 0, hi = 0;
    bool lo_ok = exact_interval(mult.mantissa, mult.exponent, count.mantissa + (count.inexact ? 1 : 0),
                                count.exponent, unit, lo);
    bool hi_ok = exact_interval(mult.mantissa + (mult.inexact ? 1 : 0), mult.exponent, count.mantissa,
                                count.exponent, unit, hi);
    if (lo_ok != hi_ok || lo != hi)
        return bad();   // more digits than can decide the interval
    if (!lo_ok)
        return make_error_code(error::invalid_rate);
    return rate::every(std::chrono::nanoseconds{lo});
}

} // namespace sluice
