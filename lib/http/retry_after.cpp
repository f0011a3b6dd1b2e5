#include <sluice/http/retry_after.hpp>

#include "civil.hpp"

#include <array>
#include <cstdint>
#include <limits>

namespace sluice::http {
namespace {

using detail::civil;
using detail::civil_from_days;
using detail::cursor;
using detail::days_from_civil;
using detail::days_in_month;
using detail::weekday_of;

constexpr std::array<std::string_view, 7> short_days{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
constexpr std::array<std::string_view, 7> long_days{"Sunday",   "Monday", "Tuesday", "Wednesday",
                                                    "Thursday", "Friday", "Saturday"};
constexpr std::array<std::string_view, 12> months{"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                  "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

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

std::chrono::nanoseconds retry_after::delay_ns_from(std::chrono::system_clock::time_point now) const noexcept
{
    using ns = std::chrono::nanoseconds;
    constexpr auto per_second = std::nano::den;
    const auto s = delay_from(now).count();
    if (s > ns::max().count() / per_second) return ns::max();
    if (s < ns::min().count() / per_second) return ns::min();
    return ns{s * per_second};
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
