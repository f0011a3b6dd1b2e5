// Parsing of the rate-limit response fields an API sends back: `RateLimit` and
// `RateLimit-Policy` (draft-ietf-httpapi-ratelimit-headers-08, RFC 8941 structured-field
// lists) and `Retry-After` (RFC 9110). No I/O: strings in, values out, so that every
// malformed header can be tested without a server.
//
// A field that is not a valid structured-field list is ignored as a whole (RFC 8941
// section 4.2: "fail parsing"); inside a valid list, a member whose name is not a string
// or whose q / w / r / t is not a non-negative integer is dropped on its own, unknown
// parameters are skipped, and a repeated parameter keeps its last value.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ratelimit {

/// One member of `RateLimit-Policy`: `"name";q=<quota>;w=<window seconds>`.
struct policy {
    std::string name;
    std::uint64_t quota = 0;             // q, required
    std::optional<std::uint64_t> window; // w, in seconds
};

/// One member of `RateLimit`: `"name";r=<remaining>;t=<seconds until reset>`.
struct limit {
    std::string name;
    std::uint64_t remaining = 0;        // r, required
    std::optional<std::uint64_t> reset; // t, in seconds
};

namespace sf {

/// A bare item of RFC 8941 (dates and display strings of RFC 9651 are not accepted).
struct bare_item {
    enum class kind { integer, decimal, string, token, bytes, boolean } type = kind::boolean;
    std::int64_t integer = 0;
    double decimal = 0;
    std::string text; // string, token or the base64 of a byte sequence
    bool boolean = true;
};

struct member {
    bare_item value;              // meaningless for an inner list
    bool inner_list = false;
    std::vector<bare_item> items; // of an inner list
    std::vector<std::pair<std::string, bare_item>> params;
};

namespace detail {

class list_parser {
public:
    explicit list_parser(std::string_view s) : s_(s) {}

    std::optional<std::vector<member>> parse()
    {
        std::vector<member> out;
        skip_sp();
        if (at_end()) return out; // an empty field is an empty list
        for (;;) {
            member m;
            if (peek() == '(') {
                if (!inner_list(m)) return std::nullopt;
            } else {
                if (!bare(m.value) || !parameters(m.params)) return std::nullopt;
            }
            out.push_back(std::move(m));
            skip_ows();
            if (at_end()) return out;
            if (next() != ',') return std::nullopt;
            skip_ows();
            if (at_end()) return std::nullopt; // trailing comma
        }
    }

private:
    bool at_end() const { return i_ >= s_.size(); }
    char peek() const { return at_end() ? '\0' : s_[i_]; }
    char next() { return at_end() ? '\0' : s_[i_++]; }
    void skip_sp()
    {
        while (peek() == ' ') ++i_;
    }
    void skip_ows()
    {
        while (peek() == ' ' || peek() == '\t') ++i_;
    }
    static bool is_digit(char c) { return c >= '0' && c <= '9'; }
    static bool is_lcalpha(char c) { return c >= 'a' && c <= 'z'; }
    static bool is_alpha(char c) { return is_lcalpha(c) || (c >= 'A' && c <= 'Z'); }
    static bool is_tchar(char c)
    {
        return is_alpha(c) || is_digit(c) || std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
    }

    bool inner_list(member& m)
    {
        ++i_; // '('
        m.inner_list = true;
        for (;;) {
            skip_sp();
            if (peek() == ')') {
                ++i_;
                return parameters(m.params);
            }
            bare_item item;
            std::vector<std::pair<std::string, bare_item>> ignored; // item parameters
            if (!bare(item) || !parameters(ignored)) return false;
            m.items.push_back(std::move(item));
            if (peek() != ' ' && peek() != ')') return false;
        }
    }

    bool parameters(std::vector<std::pair<std::string, bare_item>>& params)
    {
        while (peek() == ';') {
            ++i_;
            skip_sp();
            std::string key;
            if (!parse_key(key)) return false;
            bare_item value; // a parameter without a value is boolean true
            if (peek() == '=') {
                ++i_;
                if (!bare(value)) return false;
            }
            params.emplace_back(std::move(key), std::move(value));
        }
        return true;
    }

    bool parse_key(std::string& key)
    {
        if (!is_lcalpha(peek()) && peek() != '*') return false;
        while (!at_end()) {
            char c = peek();
            if (!is_lcalpha(c) && !is_digit(c) && c != '_' && c != '-' && c != '.' && c != '*') break;
            key.push_back(c);
            ++i_;
        }
        return true;
    }

    bool bare(bare_item& v)
    {
        char c = peek();
        if (c == '-' || is_digit(c)) return number(v);
        if (c == '"') return string(v);
        if (c == '*' || is_alpha(c)) return token(v);
        if (c == ':') return bytes(v);
        if (c == '?') return boolean(v);
        return false;
    }

    bool number(bare_item& v)
    {
        bool negative = false;
        if (peek() == '-') {
            negative = true;
            ++i_;
        }
        if (!is_digit(peek())) return false;
        std::int64_t int_part = 0;
        int int_digits = 0;
        while (is_digit(peek())) {
            if (++int_digits > 15) return false; // RFC 8941 integers have at most 15 digits
            int_part = int_part * 10 + (next() - '0');
        }
        if (peek() != '.') {
            v.type = bare_item::kind::integer;
            v.integer = negative ? -int_part : int_part;
            return true;
        }
        ++i_;
        if (int_digits > 12) return false;
        double fraction = 0, scale = 0.1;
        int frac_digits = 0;
        while (is_digit(peek())) {
            if (++frac_digits > 3) return false;
            fraction += (next() - '0') * scale;
            scale /= 10;
        }
        if (frac_digits == 0) return false;
        v.type = bare_item::kind::decimal;
        v.decimal = (static_cast<double>(int_part) + fraction) * (negative ? -1 : 1);
        return true;
    }

    bool string(bare_item& v)
    {
        ++i_; // '"'
        v.type = bare_item::kind::string;
        while (!at_end()) {
            char c = next();
            if (c == '\\') {
                char e = next();
                if (e != '"' && e != '\\') return false;
                v.text.push_back(e);
            } else if (c == '"') {
                return true;
            } else if (c < 0x20 || c > 0x7e) {
                return false;
            } else {
                v.text.push_back(c);
            }
        }
        return false; // unterminated
    }

    bool token(bare_item& v)
    {
        v.type = bare_item::kind::token;
        while (!at_end() && (is_tchar(peek()) || peek() == ':' || peek() == '/')) v.text.push_back(next());
        return true;
    }

    bool bytes(bare_item& v)
    {
        ++i_; // ':'
        v.type = bare_item::kind::bytes;
        while (!at_end() && peek() != ':') {
            char c = next();
            if (!is_alpha(c) && !is_digit(c) && c != '+' && c != '/' && c != '=') return false;
            v.text.push_back(c);
        }
        return next() == ':';
    }

    bool boolean(bare_item& v)
    {
        ++i_; // '?'
        v.type = bare_item::kind::boolean;
        char c = next();
        if (c != '0' && c != '1') return false;
        v.boolean = c == '1';
        return true;
    }

    std::string_view s_;
    std::size_t i_ = 0;
};

} // namespace detail

/// Parses an RFC 8941 List; nullopt when the text is not one.
inline std::optional<std::vector<member>> parse_list(std::string_view text)
{
    return detail::list_parser(text).parse();
}

} // namespace sf

namespace detail {

// The draft names policies with a String; a Token is accepted too, since nothing else
// could be meant by it.
inline std::optional<std::string> member_name(const sf::member& m)
{
    if (m.inner_list) return std::nullopt;
    if (m.value.type != sf::bare_item::kind::string && m.value.type != sf::bare_item::kind::token) return std::nullopt;
    return m.value.text;
}

// The value of parameter `key`: the last one wins (RFC 8941); false when present but not
// a non-negative integer.
inline bool uint_param(const sf::member& m, std::string_view key, std::optional<std::uint64_t>& out)
{
    for (auto it = m.params.rbegin(); it != m.params.rend(); ++it) {
        if (it->first != key) continue;
        if (it->second.type != sf::bare_item::kind::integer || it->second.integer < 0) return false;
        out = static_cast<std::uint64_t>(it->second.integer);
        return true;
    }
    return true;
}

} // namespace detail

/// The members of a `RateLimit-Policy` field (all field lines joined with ", "). Empty
/// when the field is not a valid list.
inline std::vector<policy> parse_policy_field(std::string_view text)
{
    std::vector<policy> out;
    auto list = sf::parse_list(text);
    if (!list) return out;
    for (const auto& m : *list) {
        auto name = detail::member_name(m);
        std::optional<std::uint64_t> q, w;
        if (!name || !detail::uint_param(m, "q", q) || !detail::uint_param(m, "w", w) || !q) continue;
        if (w && *w == 0) continue; // a quota per zero seconds means nothing
        out.push_back(policy{std::move(*name), *q, w});
    }
    return out;
}

/// The members of a `RateLimit` field. Empty when the field is not a valid list.
inline std::vector<limit> parse_limit_field(std::string_view text)
{
    std::vector<limit> out;
    auto list = sf::parse_list(text);
    if (!list) return out;
    for (const auto& m : *list) {
        auto name = detail::member_name(m);
        std::optional<std::uint64_t> r, t;
        if (!name || !detail::uint_param(m, "r", r) || !detail::uint_param(m, "t", t) || !r) continue;
        out.push_back(limit{std::move(*name), *r, t});
    }
    return out;
}

/// `Retry-After`: delta-seconds, or an IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT")
/// taken relative to `now` (a date in the past is 0 s). nullopt for anything else, and
/// for delays beyond a day, which no quota that a client should wait for produces.
inline std::optional<std::chrono::seconds> parse_retry_after(std::string_view text,
                                                            std::chrono::system_clock::time_point now)
{
    while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
    while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
    constexpr std::int64_t max_delay = 24 * 3600;
    if (text.empty()) return std::nullopt;
    if (text.front() >= '0' && text.front() <= '9') {
        std::int64_t v = 0;
        for (char c : text) {
            if (c < '0' || c > '9') return std::nullopt;
            v = v * 10 + (c - '0');
            if (v > max_delay) return std::nullopt;
        }
        return std::chrono::seconds{v};
    }
    // IMF-fixdate only: the obsolete RFC 850 and asctime forms are not sent by anyone today.
    if (text.size() != 29) return std::nullopt;
    std::string s(text);
    std::tm tm{};
    const char* end = ::strptime(s.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm);
    if (end == nullptr || *end != '\0') return std::nullopt;
    std::time_t when = ::timegm(&tm);
    if (when == static_cast<std::time_t>(-1)) return std::nullopt;
    auto delta = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::from_time_t(when) - now);
    if (delta.count() > max_delay) return std::nullopt;
    return std::max(delta, std::chrono::seconds{0});
}

} // namespace ratelimit
