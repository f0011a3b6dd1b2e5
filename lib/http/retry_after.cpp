#include <sluice/http/retry_after.hpp>

#include <array>
#include <cstdint>
#include <limits>

namespace sluice::http {
namespace {

constexpr std::array<std::string_view, 7> short_days{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
constexpr std::array<std::string_view, 7> long_days{"Sunday",   "Monday", "Tuesday", "Wednesday",
                                                    "Thursday", "Friday", "Saturday"};
constexpr std::array<std::string_view, 12> months{"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                  "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
constexpr std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) noexcept
{
    y -= m <= 2;
    const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
    const auto yoe = static_cast<unsigned>(y - era * 400);
    const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

struct civil {
    std::int64_t year;
    unsigned month, day;
};

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

constexpr unsigned weekday_of(std::int64_t days) noexcept // 0 = Sunday
{
    return static_cast<unsigned>(days >= -4 ? (days + 4) % 7 : (days + 5) % 7 + 6);
}

constexpr unsigned days_in_month(std::int64_t y, unsigned m) noexcept
{
    constexpr unsigned d[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return m == 2 && leap ? 29 : d[m - 1];
}

// A cursor over the date text: each step consumes an exact piece or fails.
struct cursor {
    std::string_view s;
    bool ok = true;

    bool lit(std::string_view x)
    {
        if (ok && s.substr(0, x.size()) == x) {
            s.remove_prefix(x.size());
            return true;
        }
        ok = false;
        return false;
    }
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

struct fields {
    unsigned weekday = 0, day = 0, month = 0, hour = 0, minute = 0, second = 0;
    std::int64_t year = 0;
};

// "Sun, 06 Nov " (IMF-fixdate) or "Sunday, 06-Nov-" (RFC 850): the weekday, then the day
// and the month, each followed by `sep`.
template <std::size_t N>
void weekday_day_month(cursor& c, fields& f, const std::array<std::string_view, N>& days, std::string_view sep)
{
    f.weekday = c.one_of(days);
    c.lit(", ");
    f.day = c.digits(2);
    c.lit(sep);
    f.month = c.one_of(months);
    c.lit(sep);
}

void time_of_day(cursor& c, fields& f)
{
    f.hour = c.digits(2);
    c.lit(":");
    f.minute = c.digits(2);
    c.lit(":");
    f.second = c.digits(2);
}

} // namespace

boost::system::result<sys_seconds> parse_http_date(std::string_view text, std::chrono::system_clock::time_point now)
{
    cursor c{text};
    fields f;
    if (text.size() == 29 && text.size() > 3 && text[3] == ',') {
        // IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT
        weekday_day_month(c, f, short_days, " ");
        f.year = c.digits(4);
        c.lit(" ");
        time_of_day(c, f);
        c.lit(" GMT");
    } else if (text.size() == 24 && text.size() > 3 && text[3] == ' ') {
        // asctime: Sun Nov  6 08:49:37 1994
        f.weekday = c.one_of(short_days);
        c.lit(" ");
        f.month = c.one_of(months);
        c.lit(" ");
        if (c.ok && !c.s.empty() && c.s[0] == ' ') {
            c.lit(" ");
            f.day = c.digits(1);
        } else {
            f.day = c.digits(2);
        }
        c.lit(" ");
        time_of_day(c, f);
        c.lit(" ");
        f.year = c.digits(4);
    } else {
        // RFC 850: Sunday, 06-Nov-94 08:49:37 GMT
        weekday_day_month(c, f, long_days, "-");
        unsigned yy = c.digits(2);
        c.lit(" ");
        time_of_day(c, f);
        c.lit(" GMT");
        if (c.ok) {
            auto today = civil_from_days(
                std::chrono::floor<std::chrono::days>(now.time_since_epoch()).count());
            f.year = today.year - today.year % 100 + yy;
            if (f.year > today.year + 50) f.year -= 100;
        }
    }
    if (!c.ok || !c.s.empty()) return make_error_code(error::invalid_http_date);
    ++f.month;
    if (f.day < 1 || f.day > days_in_month(f.year, f.month) || f.hour > 23 || f.minute > 59 || f.second > 60)
        return make_error_code(error::invalid_http_date);
    const std::int64_t days = days_from_civil(f.year, f.month, f.day);
    if (weekday_of(days) != f.weekday) return make_error_code(error::invalid_http_date);
    return sys_seconds{std::chrono::seconds{days * 86400 + f.hour * 3600 + f.minute * 60 + f.second}};
}

boost::system::result<std::string> format_http_date(sys_seconds when)
{
    const std::int64_t secs = when.time_since_epoch().count();
    const std::int64_t days = secs >= 0 ? secs / 86400 : (secs - 86399) / 86400;
    const std::int64_t rest = secs - days * 86400;
    const civil d = civil_from_days(days);
    if (d.year < 0 || d.year > 9999) return make_error_code(error::unserializable);
    auto two = [](std::string& out, std::int64_t v) {
        out.push_back(static_cast<char>('0' + v / 10));
        out.push_back(static_cast<char>('0' + v % 10));
    };
    std::string out;
    out.reserve(29);
    out += short_days[weekday_of(days)];
    out += ", ";
    two(out, d.day);
    out += ' ';
    out += months[d.month - 1];
    out += ' ';
    two(out, d.year / 100);
    two(out, d.year % 100);
    out += ' ';
    two(out, rest / 3600);
    out += ':';
    two(out, rest / 60 % 60);
    out += ':';
    two(out, rest % 60);
    out += " GMT";
    return out;
}

std::chrono::seconds retry_after::delay_from(std::chrono::system_clock::time_point now) const noexcept
{
    if (kind == form::delay_seconds) return delay;
    // In whole seconds: nanoseconds since 1970 end in 2262, an HTTP-date in 9999, so `now`
    // comes down to the date's unit rather than the date up to now's (which overflowed).
    // For a date after now, ceil(date - now) = date - floor(now).
    const auto now_s = std::chrono::floor<std::chrono::seconds>(now);
    return date > now_s ? date - now_s : std::chrono::seconds{0};
}

boost::system::result<retry_after> parse_retry_after(std::string_view text, std::chrono::system_clock::time_point now)
{
    while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
    while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
    if (text.empty()) return make_error_code(error::invalid_retry_after);
    retry_after out;
    if (text.front() >= '0' && text.front() <= '9') {
        std::int64_t v = 0;
        bool overflow = false;
        for (char ch : text) {
            if (ch < '0' || ch > '9') return make_error_code(error::invalid_retry_after);
            const int digit = ch - '0';
            if (v > (std::numeric_limits<std::int64_t>::max() - digit) / 10) overflow = true;
            else v = v * 10 + digit;
        }
        if (overflow) return make_error_code(error::out_of_range);
        out.delay = std::chrono::seconds{v};
        return out;
    }
    const char first = text.front();
    if (!((first >= 'A' && first <= 'Z') || (first >= 'a' && first <= 'z')))
        return make_error_code(error::invalid_retry_after);
    auto date = parse_http_date(text, now);
    if (!date) return date.error();
    out.kind = retry_after::form::http_date;
    out.date = *date;
    return out;
}

boost::system::result<std::string> format_retry_after(const retry_after& value)
{
    if (value.kind == retry_after::form::http_date) return format_http_date(value.date);
    if (value.delay.count() < 0) return make_error_code(error::unserializable);
    return std::to_string(value.delay.count());
}

} // namespace sluice::http
