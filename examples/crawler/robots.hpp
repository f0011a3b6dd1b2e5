// robots.txt, as RFC 9309 defines it: the rules of the group whose user-agent matches the
// crawler's product token (case-insensitively; every such group merged), else those of the
// "*" groups; the longest matching pattern decides, an allow beating a disallow of the same
// length; "*" matches any characters and a final "$" the end of the path. Crawl-delay, not
// in the RFC but widely used, is read from the same group. Sans-io.
#pragma once

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstddef>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace crawl {

/// The product token of a User-Agent value (RFC 9309 section 2.2.1): its leading
/// letters, "_" and "-" ("sluice-crawler/0.2 (+info)" gives "sluice-crawler").
inline std::string product_token(std::string_view user_agent)
{
    std::string out;
    for (char c : user_agent) {
        if (!std::isalpha(static_cast<unsigned char>(c)) && c != '_' && c != '-') break;
        out += c;
    }
    return out;
}

class robots_rules {
public:
    /// Only the first 500 KiB are parsed: the least RFC 9309 (section 2.5) asks a crawler
    /// to parse. A longer text is cut after its last line end within them: a rule cut in
    /// the middle could say more than the file does ("Allow: /" of "Allow: /public/").
    static constexpr std::size_t max_size = 500 * 1024;
    /// What a reader of robots.txt keeps at most: one byte more than is parsed tells a
    /// longer file from one of exactly max_size bytes.
    static constexpr std::size_t read_size = max_size + 1;

    /// Everything allowed: no robots.txt (4xx), or an empty one.
    robots_rules() = default;

    /// Nothing allowed: robots.txt unreachable (5xx, network errors, given up), which RFC
    /// 9309 section 2.3.1.4 asks to treat as a complete disallow.
    static robots_rules disallow_all()
    {
        robots_rules r;
        r.all_disallowed_ = true;
        return r;
    }

    /// The rules `text` gives the crawler whose product token is `agent`, from its first
    /// `limit` bytes (max_size; the tests give less).
    static robots_rules parse(std::string_view text, std::string_view agent, std::size_t limit = max_size)
    {
        if (text.size() > limit) {
            text = text.substr(0, limit);
            const auto eol = text.find_last_of("\r\n");
            text = eol == std::string_view::npos ? std::string_view{} : text.substr(0, eol + 1);
        }
        struct group {
            std::vector<std::string> agents;
            std::vector<rule> rules;
            std::optional<double> delay;
        };
        std::vector<group> groups;
        bool in_agents = false;   // the last line was a user-agent line
        while (!text.empty()) {
            auto eol = text.find_first_of("\r\n");
            std::string_view line = text.substr(0, eol);
            text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
            line = line.substr(0, line.find('#'));
            auto colon = line.find(':');
            if (colon == std::string_view::npos) continue;
            const std::string key = lower(trim(line.substr(0, colon)));
            const std::string_view value = trim(line.substr(colon + 1));
            if (key == "user-agent") {
                if (!in_agents) groups.emplace_back();
                in_agents = true;
                groups.back().agents.push_back(value == "*" ? "*" : lower(product_token(value)));
                continue;
            }
            if (groups.empty()) continue;   // rules before any user-agent line belong to no group
            if (key == "allow" || key == "disallow") {
                in_agents = false;
                if (!value.empty()) groups.back().rules.push_back({encode(value), key == "allow"});
            } else if (key == "crawl-delay") {
                in_agents = false;
                double d = 0;
                auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), d);
                if (ec == std::errc{} && end == value.data() + value.size() && d >= 0) groups.back().delay = d;
            } else {
                in_agents = false;   // sitemap or an unknown key: ends the user-agent lines
            }
        }
        auto pick = [&](std::string_view who) {
            robots_rules r;
            bool found = false;
            for (auto& g : groups) {
                if (std::find(g.agents.begin(), g.agents.end(), who) == g.agents.end()) continue;
                found = true;
                r.rules_.insert(r.rules_.end(), g.rules.begin(), g.rules.end());
                if (g.delay) r.delay_ = std::max(r.delay_.value_or(0), *g.delay);
            }
            return found ? std::optional<robots_rules>(std::move(r)) : std::nullopt;
        };
        if (auto mine = pick(lower(product_token(agent))); mine && !product_token(agent).empty()) return *mine;
        if (auto any = pick("*")) return *any;
        return {};
    }

    /// Whether `target` (a request target: path and query, percent-encoded) may be fetched.
    bool allowed(std::string_view target) const
    {
        if (target == "/robots.txt") return true;
        if (all_disallowed_) return false;
        const std::string path = encode(target);
        std::size_t best = 0;   // length of the longest matching pattern
        bool matched = false, allow = true;
        for (const auto& r : rules_) {
            if (!matches(r.pattern, path)) continue;
            if (!matched || r.pattern.size() > best) allow = r.allow;
            else if (r.pattern.size() == best) allow = allow || r.allow;
            else continue;
            best = r.pattern.size();
            matched = true;
        }
        return allow;
    }

    /// Crawl-delay of the matching group, in seconds (the longest when merged).
    std::optional<double> crawl_delay() const noexcept { return delay_; }
    /// Allow and disallow rules that apply.
    std::size_t rule_count() const noexcept { return rules_.size(); }
    bool disallows_all() const noexcept { return all_disallowed_; }

    /// Whether pattern (with "*" and a final "$") matches the start of path.
    static bool matches(std::string_view pattern, std::string_view path)
    {
        const bool anchored = !pattern.empty() && pattern.back() == '$';
        if (anchored) pattern.remove_suffix(1);
        // The literal pieces between the "*"s, each taken at its leftmost place after the
        // one before (no later place leaves more for the rest): no backtracking, so a
        // hostile pattern costs one pass over the path per piece, not its length times the
        // path's.
        auto star = pattern.find('*');
        if (!path.starts_with(pattern.substr(0, star))) return false;
        if (star == std::string_view::npos) return !anchored || path.size() == pattern.size();
        std::size_t at = star;
        for (pattern.remove_prefix(star + 1);; pattern.remove_prefix(star + 1)) {
            star = pattern.find('*');
            const auto piece = pattern.substr(0, star);
            if (star == std::string_view::npos)   // the last piece: anywhere after, or at the end
                return anchored ? path.size() - at >= piece.size() && path.ends_with(piece) : find(path, piece, at);
            if (!find(path, piece, at)) return false;
        }
    }

private:
    struct rule {
        std::string pattern;
        bool allow;
    };

    // Finds piece in path at or after `at` (glibc's memmem: linear), and moves `at` past it.
    static bool find(std::string_view path, std::string_view piece, std::size_t& at)
    {
        if (piece.empty()) return true;
        const void* p = ::memmem(path.data() + at, path.size() - at, piece.data(), piece.size());
        if (!p) return false;
        at = static_cast<std::size_t>(static_cast<const char*>(p) - path.data()) + piece.size();
        return true;
    }

    static std::string_view trim(std::string_view s)
    {
        while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
        while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
        return s;
    }

    static std::string lower(std::string_view s)
    {
        std::string out(s);
        for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        return out;
    }

    // One form for patterns and paths (RFC 9309 section 2.2.2): bytes outside US-ASCII
    // percent-encoded, and percent-encodings in upper case.
    static std::string encode(std::string_view s)
    {
        static constexpr char hex[] = "0123456789ABCDEF";
        std::string out;
        for (std::size_t i = 0; i < s.size(); ++i) {
            const auto c = static_cast<unsigned char>(s[i]);
            if (c >= 0x80 || c <= 0x20) {
                out += '%';
                out += hex[c >> 4];
                out += hex[c & 15];
            } else if (c == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
                       std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
                out += '%';
                out += static_cast<char>(std::toupper(static_cast<unsigned char>(s[++i])));
                out += static_cast<char>(std::toupper(static_cast<unsigned char>(s[++i])));
            } else {
                out += static_cast<char>(c);
            }
        }
        return out;
    }

    std::vector<rule> rules_;
    std::optional<double> delay_;
    bool all_disallowed_ = false;
};

} // namespace crawl
