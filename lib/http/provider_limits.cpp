#include <sluice/http/provider_limits.hpp>
#include <sluice/http/ratelimit_fields.hpp>
#include <sluice/http/retry_after.hpp>

#include <sluice/detail/base/arith.hpp>

#include "civil.hpp"

#include <array>
#include <limits>
#include <string>
#include <vector>

namespace sluice::http {
namespace {

using std::chrono::nanoseconds;
using sluice::detail::uint128;

constexpr std::uint64_t max_ns = std::numeric_limits<std::int64_t>::max();

bool is_digit(char c) { return c >= '0' && c <= '9'; }

std::string_view trim(std::string_view s)
{
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

// The unit of a Go duration, in nanoseconds; 0 for none.
std::uint64_t go_unit(std::string_view u)
{
    if (u == "ns") return 1;
    if (u == "us" || u == "\xc2\xb5s" || u == "\xce\xbcs") return 1'000;
    if (u == "ms") return 1'000'000;
    if (u == "s") return 1'000'000'000;
    if (u == "m") return 60'000'000'000;
    if (u == "h") return 3'600'000'000'000;
    return 0;
}

bool same_name(std::string_view a, std::string_view b)
{
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
        char c = a[i];
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
        if (c != b[i]) return false;
    }
    return true;
}

} // namespace

boost::system::result<nanoseconds> parse_go_duration(std::string_view text)
{
    // time.ParseDuration, less the sign; integers rather than Go's float for the fraction,
    // so that "0.1s" is exactly 100 ms.
    std::string_view s = trim(text);
    if (s == "0") return nanoseconds{0};
    if (s.empty()) return make_error_code(error::invalid_duration);
    std::uint64_t total = 0;
    bool overflow = false;
    while (!s.empty()) {
        if (!(is_digit(s[0]) || s[0] == '.')) return make_error_code(error::invalid_duration);
        std::uint64_t whole = 0;
        std::size_t i = 0;
        for (; i < s.size() && is_digit(s[i]); ++i) {
            const auto d = static_cast<std::uint64_t>(s[i] - '0');
            if (whole > (max_ns - d) / 10) overflow = true;
            else whole = whole * 10 + d;
        }
        const bool pre = i > 0;
        // The fraction: its first 18 digits exactly, the rest dropped (below a nanosecond of
        // any unit).
        std::uint64_t frac = 0, scale = 1;
        bool post = false;
        if (i < s.size() && s[i] == '.') {
            for (++i; i < s.size() && is_digit(s[i]); ++i) {
                post = true;
                if (scale <= std::numeric_limits<std::uint64_t>::max() / 10 / 10) {
                    frac = frac * 10 + static_cast<std::uint64_t>(s[i] - '0');
                    scale *= 10;
                }
            }
        }
        if (!pre && !post) return make_error_code(error::invalid_duration);
        std::size_t u = i;
        while (u < s.size() && !is_digit(s[u]) && s[u] != '.') ++u;
        const std::uint64_t unit = go_unit(s.substr(i, u - i));
        if (unit == 0) return make_error_code(error::invalid_duration);
        s.remove_prefix(u);
        if (overflow) continue; // the syntax is still checked to the end
        const uint128 v = uint128{whole} * unit + uint128{frac} * unit / scale;
        if (v > max_ns - total) overflow = true;
        else total += static_cast<std::uint64_t>(v);
    }
    if (overflow) return make_error_code(error::out_of_range);
    return nanoseconds{static_cast<std::int64_t>(total)};
}

boost::system::result<sys_nanoseconds> parse_rfc3339(std::string_view text)
{
    detail::cursor c{trim(text)};
    const std::int64_t year = c.digits(4);
    c.lit("-");
    const unsigned month = c.digits(2);
    c.lit("-");
    const unsigned day = c.digits(2);
    c.one_char_of("Tt");
    const unsigned hour = c.digits(2);
    c.lit(":");
    const unsigned minute = c.digits(2);
    c.lit(":");
    const unsigned second = c.digits(2);
    std::int64_t fraction = 0; // ns
    if (c.ok && !c.s.empty() && c.s[0] == '.') {
        c.s.remove_prefix(1);
        std::size_t n = 0;
        std::int64_t scale = 100'000'000;
        for (; n < c.s.size() && is_digit(c.s[n]); ++n, scale /= 10)
            fraction += (c.s[n] - '0') * scale; // scale reaches 0 past the 9th digit
        if (n == 0) c.ok = false;
        c.s.remove_prefix(n);
    }
    std::int64_t offset = 0; // seconds east of UTC
    const char zone = c.one_char_of("Zz+-");
    if (zone == '+' || zone == '-') {
        const unsigned oh = c.digits(2);
        c.lit(":");
        const unsigned om = c.digits(2);
        if (oh > 23 || om > 59) c.ok = false;
        offset = (zone == '+' ? 1 : -1) * static_cast<std::int64_t>(oh * 3600 + om * 60);
    }
    if (!c.ok || !c.s.empty() || month < 1 || month > 12 || day < 1 || day > detail::days_in_month(year, month) ||
        hour > 23 || minute > 59 || second > 60)
        return make_error_code(error::invalid_date_time);
    const std::int64_t secs =
        detail::days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second - offset;
    // In 128 bits: the earliest instant's seconds alone are out of range, not with its fraction.
    const sluice::detail::int128 ns = sluice::detail::int128{secs} * 1'000'000'000 + fraction;
    if (ns > std::numeric_limits<std::int64_t>::max() || ns < std::numeric_limits<std::int64_t>::min())
        return make_error_code(error::out_of_range);
    return sys_nanoseconds{nanoseconds{static_cast<std::int64_t>(ns)}};
}

boost::system::result<std::uint64_t> parse_unsigned(std::string_view text)
{
    const std::string_view s = trim(text);
    if (s.empty()) return make_error_code(error::invalid_integer);
    for (char ch : s)
        if (!is_digit(ch)) return make_error_code(error::invalid_integer);
    std::uint64_t v = 0;
    for (char ch : s) {
        const auto d = static_cast<std::uint64_t>(ch - '0');
        if (v > (std::numeric_limits<std::uint64_t>::max() - d) / 10) return make_error_code(error::out_of_range);
        v = v * 10 + d;
    }
    return v;
}

namespace {

enum quota_index { requests, tokens, input_tokens, output_tokens, quota_count };
enum part_index { limit, remaining, reset };

// The fields of one value each (a second line of one is malformed): OpenAI's, Anthropic's
// and Retry-After.
struct singleton {
    std::string_view name;
    quota_family family;
    quota_index quota;
    part_index part;
};

constexpr singleton singletons[] = {
    {"x-ratelimit-limit-requests", quota_family::openai, requests, limit},
    {"x-ratelimit-remaining-requests", quota_family::openai, requests, remaining},
    {"x-ratelimit-reset-requests", quota_family::openai, requests, reset},
    {"x-ratelimit-limit-tokens", quota_family::openai, tokens, limit},
    {"x-ratelimit-remaining-tokens", quota_family::openai, tokens, remaining},
    {"x-ratelimit-reset-tokens", quota_family::openai, tokens, reset},
    {"anthropic-ratelimit-requests-limit", quota_family::anthropic, requests, limit},
    {"anthropic-ratelimit-requests-remaining", quota_family::anthropic, requests, remaining},
    {"anthropic-ratelimit-requests-reset", quota_family::anthropic, requests, reset},
    {"anthropic-ratelimit-tokens-limit", quota_family::anthropic, tokens, limit},
    {"anthropic-ratelimit-tokens-remaining", quota_family::anthropic, tokens, remaining},
    {"anthropic-ratelimit-tokens-reset", quota_family::anthropic, tokens, reset},
    {"anthropic-ratelimit-input-tokens-limit", quota_family::anthropic, input_tokens, limit},
    {"anthropic-ratelimit-input-tokens-remaining", quota_family::anthropic, input_tokens, remaining},
    {"anthropic-ratelimit-input-tokens-reset", quota_family::anthropic, input_tokens, reset},
    {"anthropic-ratelimit-output-tokens-limit", quota_family::anthropic, output_tokens, limit},
    {"anthropic-ratelimit-output-tokens-remaining", quota_family::anthropic, output_tokens, remaining},
    {"anthropic-ratelimit-output-tokens-reset", quota_family::anthropic, output_tokens, reset},
    {"retry-after", quota_family::none, requests, limit},
};
constexpr std::size_t singleton_count = sizeof singletons / sizeof singletons[0];

struct seen {
    std::string_view value;
    unsigned lines = 0;
};

// One policy or service limit of the IETF fields, by name.
struct ietf_quota {
    std::string_view name;
    int quota = requests; // -1: a unit of no quota here
    std::optional<std::uint64_t> q, r;
    std::optional<std::chrono::seconds> w;
    std::optional<nanoseconds> t;
};

int quota_of_unit(const std::optional<std::string>& qu)
{
    if (!qu || *qu == "requests") return requests;
    if (*qu == "tokens") return tokens;
    if (*qu == "input-tokens") return input_tokens;
    if (*qu == "output-tokens") return output_tokens;
    return -1;
}

void read_ietf(const std::string& policy_text, const std::string& limit_text, provider_limits& out,
               std::array<quota_announcement, quota_count>& ietf)
{
    std::vector<quota_policy> policies;
    std::vector<service_limit> limits;
    if (auto p = parse_ratelimit_policy(policy_text)) policies = std::move(*p);
    else ++out.malformed;
    if (auto l = parse_ratelimit(limit_text)) {
        limits = std::move(*l);
        // A reset beyond what nanoseconds hold is no reset a client can wait for.
        for (const auto& s : limits)
            if (s.reset && *s.reset > max_ns / 1'000'000'000) {
                limits.clear();
                ++out.malformed;
                break;
            }
    } else {
        ++out.malformed;
    }

    std::vector<ietf_quota> all;
    all.reserve(policies.size() + limits.size());
    for (const auto& p : policies) {
        ietf_quota e;
        e.name = p.name;
        e.quota = quota_of_unit(p.quota_unit);
        e.q = p.quota;
        if (p.window) e.w = std::chrono::seconds(static_cast<std::int64_t>(*p.window));
        all.push_back(e);
    }
    const std::size_t named = all.size();
    for (const auto& s : limits) {
        ietf_quota* e = nullptr;
        for (std::size_t k = 0; k < named && !e; ++k)
            if (all[k].name == s.name) e = &all[k];
        if (!e) {
            all.push_back({});
            e = &all.back();
            e->name = s.name;
        }
        if (e->r) continue; // a second member for one policy: the first stands
        e->r = s.remaining;
        if (s.reset) e->t = std::chrono::seconds(static_cast<std::int64_t>(*s.reset));
    }
    // Of a quota's policies, the one with the fewest units left binds.
    std::array<const ietf_quota*, quota_count> binding{};
    for (const auto& e : all) {
        if (e.quota < 0) continue;
        const ietf_quota*& b = binding[static_cast<std::size_t>(e.quota)];
        if (!b || (e.r && (!b->r || *e.r < *b->r))) b = &e;
    }
    for (std::size_t k = 0; k < quota_count; ++k) {
        if (!binding[k]) continue;
        ietf[k] = {binding[k]->q, binding[k]->r, binding[k]->t, binding[k]->w, quota_family::ietf};
    }
}

} // namespace

provider_limits read_provider_limits(std::span<const field_line> fields, std::chrono::system_clock::time_point now)
{
    provider_limits out;
    std::array<seen, singleton_count> one{};
    std::string policy_text, limit_text; // every line, joined with ","
    bool any_ietf = false;
    for (const auto& f : fields) {
        if (same_name(f.name, "ratelimit-policy") || same_name(f.name, "ratelimit")) {
            std::string& joined = same_name(f.name, "ratelimit") ? limit_text : policy_text;
            if (!joined.empty()) joined += ',';
            joined += f.value;
            any_ietf = true;
            continue;
        }
        for (std::size_t k = 0; k < singleton_count; ++k)
            if (same_name(f.name, singletons[k].name)) {
                one[k].value = f.value;
                ++one[k].lines;
                break;
            }
    }

    const sys_nanoseconds wall = std::chrono::time_point_cast<nanoseconds>(now);
    std::array<quota_announcement, quota_count> openai{}, anthropic{}, ietf{};
    for (std::size_t k = 0; k < singleton_count; ++k) {
        if (one[k].lines == 0) continue;
        if (one[k].lines > 1) {
            ++out.malformed;
            continue;
        }
        const singleton& s = singletons[k];
        const std::string_view v = one[k].value;
        if (s.family == quota_family::none) { // Retry-After
            auto ra = parse_retry_after(v, now);
            const auto delay = ra ? ra->delay_from(now) : std::chrono::seconds{0};
            if (!ra || delay.count() > static_cast<std::int64_t>(max_ns / 1'000'000'000)) ++out.malformed;
            else out.retry_after = delay;
            continue;
        }
        quota_announcement& a = (s.family == quota_family::openai ? openai : anthropic)[s.quota];
        bool ok = true;
        if (s.part == limit || s.part == remaining) {
            auto n = parse_unsigned(v);
            ok = n.has_value();
            if (ok) (s.part == limit ? a.limit : a.remaining) = *n;
        } else if (s.family == quota_family::openai) {
            auto d = parse_go_duration(v);
            ok = d.has_value();
            if (ok) a.reset_after = *d;
        } else {
            auto t = parse_rfc3339(v);
            ok = t.has_value();
            if (ok) {
                // Saturated: `now` is the caller's, any instant at all.
                const std::int64_t left =
                    sluice::detail::sat_sub(t->time_since_epoch().count(), wall.time_since_epoch().count());
                a.reset_after = nanoseconds{left > 0 ? left : 0};
            }
        }
        if (ok) a.family = s.family;
        else ++out.malformed;
    }
    if (any_ietf) read_ietf(policy_text, limit_text, out, ietf);

    quota_announcement* quotas[quota_count] = {&out.requests, &out.tokens, &out.input_tokens, &out.output_tokens};
    for (std::size_t k = 0; k < quota_count; ++k)
        *quotas[k] = ietf[k].announced() ? ietf[k] : anthropic[k].announced() ? anthropic[k] : openai[k];
    return out;
}

} // namespace sluice::http
