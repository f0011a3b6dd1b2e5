// Calendar arithmetic and a text cursor shared by the date parsers of sluice::http
// (HTTP-date in retry_after.cpp, RFC 3339 in provider_limits.cpp): integer civil-calendar
// arithmetic, no time zone, locale or timegm().
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace sluice::http::detail {

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
constexpr std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) noexcept
{
    y -= m <= 2;
    const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
    const auto yoe = static_cast<unsigned>(y - era * 400);
    const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

/// A date of the proleptic Gregorian calendar.
struct civil {
    std::int64_t year;
    unsigned month, day;
};

/// The date `z` days after 1970-01-01.
constexpr civil civil_from_days(std::int64_t z) noexcept
{
    z += 719468;
    const std::int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    const auto doe = static_cast<unsigned>(z - era * 146097);
    const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    const unsigned mp = (5 * doy + 2) / 153;
    const unsigned d = doy - (153 * mp + 2) / 5 + 1;
    const unsigned m = mp < 10 ? mp + 3 : mp - 9;
    return {static_cast<std::int64_t>(yoe) + era * 400 + (m <= 2), m, d};
}

static_assert(days_from_civil(1970, 1, 1) == 0);
static_assert(days_from_civil(2000, 3, 1) == 11017);

/// The day of the week of `days` since 1970-01-01; 0 is Sunday.
constexpr unsigned weekday_of(std::int64_t days) noexcept
{
    return static_cast<unsigned>(days >= -4 ? (days + 4) % 7 : (days + 5) % 7 + 6);
}

/// The days of month `m` (1 to 12) of year `y`.
constexpr unsigned days_in_month(std::int64_t y, unsigned m) noexcept
{
    constexpr unsigned d[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return m == 2 && leap ? 29 : d[m - 1];
}

/// A cursor over a date's text: each step consumes an exact piece or fails, and once failed
/// stays failed (so that a parser reads the whole form and checks `ok` once).
struct cursor {
    std::string_view s;
    bool ok = true;

    /// Consumes `x`.
    bool lit(std::string_view x)
    {
        if (ok && s.substr(0, x.size()) == x) {
            s.remove_prefix(x.size());
            return true;
        }
        ok = false;
        return false;
    }
    /// Consumes one of the bytes of `set`; returns it ('\0' on failure).
    char one_char_of(std::string_view set)
    {
        if (ok && !s.empty() && set.find(s[0]) != std::string_view::npos) {
            const char c = s[0];
            s.remove_prefix(1);
            return c;
        }
        ok = false;
        return '\0';
    }
    /// Consumes exactly `n` decimal digits (n <= 9) and returns their value.
    unsigned digits(std::size_t n)
    {
        unsigned v = 0;
        if (!ok || s.size() < n) {
            ok = false;
            return 0;
        }
        for (std::size_t k = 0; k < n; ++k) {
            if (s[k] < '0' || s[k] > '9') {
                ok = false;
                return 0;
            }
            v = v * 10 + static_cast<unsigned>(s[k] - '0');
        }
        s.remove_prefix(n);
        return v;
    }
    /// Consumes the first of `names` the text starts with; returns its index.
    template <std::size_t N>
    unsigned one_of(const std::array<std::string_view, N>& names)
    {
        for (unsigned k = 0; ok && k < N; ++k)
            if (s.substr(0, names[k].size()) == names[k]) {
                s.remove_prefix(names[k].size());
                return k;
            }
        ok = false;
        return 0;
    }
};

} // namespace sluice::http::detail
