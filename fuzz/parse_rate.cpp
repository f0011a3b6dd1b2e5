// fuzz-covers: lib/rate.cpp
// sluice::parse_rate against an independent model: the grammar read again by hand and the
// interval computed with arbitrary-precision integers. What parses is exactly
// ceil(period / count) in whole ns; what the model finds out of range is invalid_rate;
// parse_error only for malformed text or a number of more than 19 significant digits.
// Round trip: the interval printed as "1/<ns>ns" parses to the same rate. The numeric
// constructors with the text's numbers: per() and make() agree with each other, succeed
// exactly when the exact interval is in range (within one ns of it: they divide in long
// double), per_second() likewise for the count as a double, every() is the interval.
#include "fuzz.hpp"

#include <sluice/rate.hpp>

#include <boost/multiprecision/cpp_int.hpp>

#include <boost/system/system_error.hpp>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <optional>

namespace {

using big = boost::multiprecision::cpp_int;

struct number {
    big value;        // the digits as an integer...
    int scale = 0;    // ...times 10^-scale
    int significant = 0;
};

bool space(char c) { return c == ' ' || c == '\t'; }
bool digit(char c) { return c >= '0' && c <= '9'; }

std::optional<number> read_number(std::string_view& s)
{
    std::string digits;
    std::size_t i = 0;
    int scale = 0;
    while (i < s.size() && digit(s[i])) digits += s[i++];
    if (i < s.size() && s[i] == '.') {
        ++i;
        while (i < s.size() && digit(s[i])) {
            digits += s[i++];
            ++scale;
        }
    }
    if (digits.empty()) return std::nullopt;
    s.remove_prefix(i);
    number n;
    for (char c : digits) n.value = n.value * 10 + (c - '0');   // (a string with a leading 0 would be octal)
    n.scale = scale;
    auto first = digits.find_first_not_of('0');
    if (first != std::string::npos)
        n.significant = static_cast<int>(digits.find_last_not_of('0') - first + 1);
    return n;
}

void skip(std::string_view& s)
{
    while (!s.empty() && space(s.front())) s.remove_prefix(1);
}

std::uint64_t unit_of(std::string_view u)
{
    constexpr std::uint64_t s = 1'000'000'000;
    struct { std::string_view name; std::uint64_t ns; } units[] = {
        {"ns", 1}, {"us", 1000}, {"ms", 1'000'000}, {"s", s}, {"sec", s}, {"m", 60 * s}, {"min", 60 * s},
        {"h", 3600 * s}, {"hour", 3600 * s}, {"d", 86400 * s}, {"day", 86400 * s}, {"w", 604800 * s},
        {"week", 604800 * s}, {"y", 31536000 * s}, {"year", 31536000 * s}};
    for (auto& x : units)
        if (x.name == u) return x.ns;
    return 0;
}

struct model {
    bool well_formed = false;
    number count, mult;
    std::uint64_t unit = 0;
    bool long_number = false;   // more than 19 significant digits somewhere
    std::optional<std::int64_t> interval;   // nullopt: out of range
};

model expect(std::string_view s)
{
    model m;
    skip(s);
    auto count = read_number(s);
    if (!count) return m;
    skip(s);
    if (s.empty() || s.front() != '/') return m;
    s.remove_prefix(1);
    skip(s);
    if (s.empty()) return m;
    number mult{1, 0, 1};
    if (digit(s.front())) {
        auto n = read_number(s);
        if (!n) return m;
        mult = *n;
        skip(s);
        if (s.empty()) return m;
    }
    while (!s.empty() && space(s.back())) s.remove_suffix(1);
    std::uint64_t unit = unit_of(s);
    if (unit == 0) return m;
    m.well_formed = true;
    m.count = *count;
    m.mult = mult;
    m.unit = unit;
    m.long_number = count->significant > 19 || mult.significant > 19;
    // interval = ceil(mult * unit / count) with the scales: (M / 10^ms) * unit / (C / 10^cs)
    big num = mult.value * unit * pow(big(10), count->scale);
    big den = count->value * pow(big(10), mult.scale);
    if (num == 0 || den == 0 || num < den) return m;
    big q = num / den + (num % den != 0 ? 1 : 0);
    if (q > big(INT64_MAX)) return m;
    m.interval = static_cast<std::int64_t>(q);
    return m;
}

// rate::per and rate::make for `count` permits per `period_ns`, whole numbers: the same
// result, an error exactly when the exact interval is below 1 ns or above INT64_MAX ns
// (either, within a ns of those), and otherwise within one ns of it.
void check_numeric(const big& count, const big& period_ns)
{
    if (count > big(UINT64_MAX) || period_ns > big(INT64_MAX) || period_ns == 0) return;
    const auto c = static_cast<std::uint64_t>(count);
    const std::chrono::nanoseconds p{static_cast<std::int64_t>(period_ns)};
    auto made = sluice::rate::make(c, p);
    std::optional<sluice::rate> per;
    try {
        per = sluice::rate::per(c, p);
    } catch (const boost::system::system_error& e) {
        FUZZ_CHECK(e.code() == sluice::error::invalid_rate);
    }
    FUZZ_CHECK(made.has_value() == per.has_value());
    if (!made) {
        FUZZ_CHECK(made.error() == sluice::error::invalid_rate);
        FUZZ_CHECK(c == 0 || period_ns < count || period_ns / count >= big(INT64_MAX) - 1);
        return;
    }
    FUZZ_CHECK(*made == *per);
    FUZZ_CHECK(c > 0 && period_ns >= count);
    const big interval = made->interval().count();
    FUZZ_CHECK(interval >= period_ns / count && interval <= period_ns / count + 1);
}

// rate::per_second: the double as the binary value it is, 10^9 / permits rounded up.
void check_per_second(double permits)
{
    std::optional<sluice::rate> r;
    try {
        r = sluice::rate::per_second(permits);
    } catch (const boost::system::system_error& e) {
        FUZZ_CHECK(e.code() == sluice::error::invalid_rate);
    }
    const long double exact = 1e9L / permits;
    const bool in_range = permits > 0 && std::isfinite(permits) && exact >= 1 &&
                          std::ceil(exact) <= static_cast<long double>(INT64_MAX);
    FUZZ_CHECK(r.has_value() == in_range);
    FUZZ_CHECK(!r || static_cast<long double>(r->interval().count()) == std::ceil(exact));
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    if (size > 256) return 0;   // digits beyond this prove nothing more, and cost the model
    std::string_view text(reinterpret_cast<const char*>(data), size);
    auto r = sluice::parse_rate(text);
    model m = expect(text);
    if (r) {
        FUZZ_CHECK(m.well_formed);
        FUZZ_CHECK(m.interval.has_value());
        FUZZ_CHECK(r->interval().count() == *m.interval);
        // Printed and read again: the same rate.
        auto again = sluice::parse_rate("1/" + std::to_string(r->interval().count()) + "ns");
        FUZZ_CHECK(again && *again == *r);
        FUZZ_CHECK(sluice::rate::every(r->interval()) == *r);
    }
    for (std::int64_t bad : {std::int64_t{0}, -(r ? r->interval().count() : 1)}) {
        try {
            (void)sluice::rate::every(std::chrono::nanoseconds{bad});
            FUZZ_CHECK(bad > 0);   // every() takes a positive interval only
        } catch (const boost::system::system_error& e) {
            FUZZ_CHECK(e.code() == sluice::error::invalid_rate);
        }
    }
    if (m.well_formed) {
        // The text's numbers as the numeric constructors take them: whole numbers only.
        const big ten_c = pow(big(10), m.count.scale), ten_m = pow(big(10), m.mult.scale);
        if (m.count.value % ten_c == 0 && (m.mult.value * m.unit) % ten_m == 0)
            check_numeric(m.count.value / ten_c, m.mult.value * m.unit / ten_m);
        if (m.mult.value == ten_m && m.unit == 1'000'000'000)   // "C/s", "C/1s": per_second(C)
            check_per_second(std::strtod(std::string(text.substr(0, text.find('/'))).c_str(), nullptr));
    }
    if (r) {
    } else if (r.error() == sluice::error::invalid_rate) {
        FUZZ_CHECK(m.well_formed);
        FUZZ_CHECK(!m.interval.has_value());
    } else {
        FUZZ_CHECK(r.error() == sluice::error::parse_error);
        // Malformed, or digits beyond 19 that could decide the interval.
        FUZZ_CHECK(!m.well_formed || m.long_number);
    }
    return 0;
}
