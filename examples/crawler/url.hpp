// URLs as the crawler needs them: a reference found in a page, cleaned as a browser would,
// resolved against the page's URL (RFC 3986 section 5.2) and normalized (section 6.2.2) by
// uriparser, then taken apart into host, port and request target. Sans-io.
#pragma once

#include <uriparser/Uri.h>

#include <arpa/inet.h>

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace crawl {

/// An absolute http URL: what the crawler fetches.
struct url {
    std::string host;           // lower case; an IPv6 address without its brackets
    std::uint16_t port = 80;
    std::string target = "/";   // path and query, percent-encoded; never empty, no fragment

    /// host[:port], the port left out when it is 80: the Host field, and the key of a
    /// host's limits.
    std::string authority() const
    {
        std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
        return port == 80 ? h : h + ":" + std::to_string(port);
    }
    std::string str() const { return "http://" + authority() + target; }
};

namespace detail {

// One parsed URI, freed when it goes.
struct uri {
    UriUriA u{};
    bool parsed = false;
    explicit uri(std::string_view s)
    {
        const char* error = nullptr;
        parsed = uriParseSingleUriExA(&u, s.data(), s.data() + s.size(), &error) == URI_SUCCESS;
    }
    uri() = default;
    uri(const uri&) = delete;
    uri& operator=(const uri&) = delete;
    ~uri() { uriFreeUriMembersA(&u); }

    std::string str() const
    {
        int chars = 0;
        if (uriToStringCharsRequiredA(&u, &chars) != URI_SUCCESS) return {};
        std::string out(static_cast<std::size_t>(chars) + 1, '\0');
        if (uriToStringA(out.data(), &u, chars + 1, nullptr) != URI_SUCCESS) return {};
        out.resize(static_cast<std::size_t>(chars));
        return out;
    }
};

inline std::string_view text(const UriTextRangeA& r)
{
    return r.first ? std::string_view(r.first, static_cast<std::size_t>(r.afterLast - r.first)) : std::string_view{};
}

inline bool is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

} // namespace detail

/// A reference as written in a page (an href), made a valid URI reference the way browsers
/// read it: surrounding whitespace dropped, tabs and newlines inside removed, and every
/// byte a URI cannot hold percent-encoded (spaces, non-ASCII bytes, "<>\"{}|\\^`", a "%"
/// not followed by two hex digits, a second "#", and square brackets outside the
/// authority).
inline std::string clean_reference(std::string_view raw)
{
    auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; };
    while (!raw.empty() && space(raw.front())) raw.remove_prefix(1);
    while (!raw.empty() && space(raw.back())) raw.remove_suffix(1);
    // Where the authority ends, if the reference has one: brackets are allowed there only.
    std::size_t authority_end = 0;
    if (auto p = raw.find("//"); p != std::string_view::npos && raw.substr(0, p).find_first_of("/?#") == std::string_view::npos)
        authority_end = std::min(raw.find_first_of("/?#", p + 2), raw.size());
    std::string out;
    bool fragment = false;
    static constexpr char hex[] = "0123456789ABCDEF";
    for (std::size_t i = 0; i < raw.size(); ++i) {
        const char c = raw[i];
        const auto u = static_cast<unsigned char>(c);
        if (c == '\t' || c == '\n' || c == '\r') continue;
        bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    std::string_view("-._~:/?@!$&'()*+,;=").find(c) != std::string_view::npos;
        if (c == '%') keep = i + 2 < raw.size() && detail::is_hex(raw[i + 1]) && detail::is_hex(raw[i + 2]);
        if (c == '#') keep = !fragment, fragment = true;
        if (c == '[' || c == ']') keep = i < authority_end;
        if (keep) {
            out += c;
        } else {
            out += '%';
            out += hex[u >> 4];
            out += hex[u & 15];
        }
    }
    return out;
}

/// Resolves `reference` against the absolute URI `base` (RFC 3986 section 5.2, strictly)
/// and normalizes the result (section 6.2.2: case, percent-encoding, dot segments).
/// Fragments are kept. nullopt when either does not parse or base is not absolute.
inline std::optional<std::string> resolve(std::string_view base, std::string_view reference)
{
    detail::uri b(base), r(reference);
    if (!b.parsed || !r.parsed || !b.u.scheme.first) return std::nullopt;
    detail::uri out;
    if (uriAddBaseUriExA(&out.u, &r.u, &b.u, URI_RESOLVE_STRICTLY) != URI_SUCCESS) return std::nullopt;
    if (uriNormalizeSyntaxA(&out.u) != URI_SUCCESS) return std::nullopt;
    auto text = out.str();
    // Without an authority, a path that starts with "//" reads back as one: "http:/.//h/x"
    // resolves to the path "//h/x", written "http://h/x", a URL of host h. RFC 3986
    // section 3.3 allows no such URI; it is no link.
    detail::uri back(text);
    if (!back.parsed || (back.u.hostText.first != nullptr) != (out.u.hostText.first != nullptr)) return std::nullopt;
    return text;
}

/// Parses an absolute URL the crawler can fetch: http, a host and an optional port, no
/// user information; normalized, the fragment dropped. On failure, nullopt and why.
inline std::optional<url> parse_http_url(std::string_view text, std::string& why)
{
    // "localhost:8080/" parses as scheme "localhost": without "://" it is no URL a user meant.
    if (detail::uri raw(text); !raw.parsed || !raw.u.scheme.first || text.find("://") == std::string_view::npos) {
        why = raw.parsed || text.find("://") == std::string_view::npos ? "not an absolute URL: it needs http://HOST[:PORT]/"
                                                                        : "not a valid URL (RFC 3986)";
        return std::nullopt;
    }
    auto normal = resolve(text, "");
    if (!normal) {
        why = "not a valid URL (RFC 3986)";
        return std::nullopt;
    }
    detail::uri u(*normal);
    auto scheme = detail::text(u.u.scheme);
    if (scheme != "http") {
        why = scheme == "https" ? "https is not supported: this crawler speaks plain HTTP only"
                                : "scheme '" + std::string(scheme) + "' is not supported: http only";
        return std::nullopt;
    }
    if (!detail::text(u.u.userInfo).empty()) {
        why = "user information in the URL (user@host) is not supported";
        return std::nullopt;
    }
    url out;
    out.host = std::string(detail::text(u.u.hostText));
    if (u.u.hostData.ip6) {   // uriparser writes every group in full: the short form instead
        char buf[INET6_ADDRSTRLEN];
        if (::inet_ntop(AF_INET6, u.u.hostData.ip6->data, buf, sizeof buf)) out.host = buf;
    }
    if (out.host.empty()) {
        why = "no host";
        return std::nullopt;
    }
    if (auto port = detail::text(u.u.portText); !port.empty()) {
        unsigned p = 0;
        auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
        if (ec != std::errc{} || end != port.data() + port.size() || p == 0 || p > 65535) {
            why = "bad port '" + std::string(port) + "' (1-65535)";
            return std::nullopt;
        }
        out.port = static_cast<std::uint16_t>(p);
    }
    // The target is what follows the authority in the normalized text.
    std::string_view s = *normal;
    s.remove_prefix(std::string_view("http://").size());
    auto start = s.find_first_of("/?#");
    std::string_view rest = start == std::string_view::npos ? std::string_view{} : s.substr(start);
    rest = rest.substr(0, rest.find('#'));
    out.target = rest.empty() || rest.front() != '/' ? "/" + std::string(rest) : std::string(rest);
    return out;
}

} // namespace crawl
