#include <sluice/rate.hpp>

#include <boost/system/system_error.hpp>

#include <charconv>
#include <cmath>
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

// Parses a non-negative decimal number (digits with an optional fraction).
bool parse_number(std::string_view& s, long double& out) noexcept
{
    std::size_t i = 0;
    bool digits = false;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') { ++i; digits = true; }
    if (i < s.size() && s[i] == '.') {
        ++i;
        while (i < s.size() && s[i] >= '0' && s[i] <= '9') { ++i; digits = true; }
    }
    if (!digits)
        return false;
    double v = 0;
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + i, v);
    if (ec != std::errc{} || ptr != s.data() + i)
        return false;
    out = v;
    s.remove_prefix(i);
    return true;
}

long double unit_ns(std::string_view u) noexcept
{
    constexpr long double s = 1e9L;
    if (u == "ns") return 1;
    if (u == "us") return 1e3L;
    if (u == "ms") return 1e6L;
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
    long double count = 0;
    if (!skip_space(text) || !parse_number(text, count) || !skip_space(text) || text.front() != '/')
        return bad();
    text.remove_prefix(1);
    if (!skip_space(text))
        return bad();
    long double mult = 1;
    if (text.front() >= '0' && text.front() <= '9') {
        if (!parse_number(text, mult) || !skip_space(text))
            return bad();
    }
    while (!text.empty() && (text.back() == ' ' || text.back() == '\t'))
        text.remove_suffix(1);
    long double unit = unit_ns(text);
    if (unit == 0)
        return bad();
    std::int64_t i = interval_for(count, mult * unit);
    if (i == 0)
        return make_error_code(error::invalid_rate);
    return rate::every(std::chrono::nanoseconds{i});
}

} // namespace sluice
