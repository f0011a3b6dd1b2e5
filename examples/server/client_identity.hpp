// Who the client of a request is, when proxies stand between it and the server: sans-io.
//
// A proxy names the client it got a request from in a header it adds: X-Forwarded-For (a
// de-facto standard: a comma-separated list of addresses, each proxy appending its peer)
// or Forwarded (RFC 7239: `for=` parameters, in the same order). Everything left of what
// the nearest proxy appended was written by someone further out, the client included, and
// can be anything: so the list is read from the right, over the hops the server trusts,
// and the first address that is not a trusted proxy is the client, as nginx's
// `real_ip_recursive on` and Envoy's trusted hops read it.
//
// - Repeated field lines are one list, in order (RFC 9110 5.3): a proxy that appends its
//   own line (HAProxy's `option forwardfor`) appends to the list all the same.
// - One header is read, the one the trusted proxies write (proxy_header): the other passes
//   through them unchanged from the client, so reading it, or letting either win when both
//   are there, would let a client name itself. A deployment whose proxies write Forwarded
//   says so (--proxy-header Forwarded in the example server).
// - A hop that names no address (garbage, `unknown`, an obfuscated identifier, a Forwarded
//   element without `for=`, a malformed line) stops the walk: the client is then the last
//   trusted hop reached (the peer itself when it is the nearest one), never a value from
//   further out. So is a walk past max_hops trusted hops. Empty list elements are skipped
//   (RFC 9110 5.6.1).
// - Addresses are compared and returned canonical: an IPv4-mapped IPv6 address is the IPv4
//   address, so one client is one key however it is written. A zone index (`%eth0`) is
//   not an address a proxy names a client by: a stop, like garbage.
#pragma once

#include <boost/asio/ip/address.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/message.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace server_check {

/// IPv4-mapped IPv6 (::ffff:a.b.c.d) as the IPv4 address it maps; any other unchanged.
inline boost::asio::ip::address canonical(const boost::asio::ip::address& a)
{
    if (a.is_v6() && a.to_v6().is_v4_mapped())
        return boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, a.to_v6());
    return a;
}

/// A set of address ranges, each an address or a CIDR block ("10.0.0.0/8", "fd00::/8"):
/// the trusted proxies, the clients allowed /metrics.
class networks {
public:
    /// Adds "ADDR" or "ADDR/BITS"; false, and nothing added, when `text` is neither, or when
    /// ADDR has bits set past BITS ("10.0.0.1/8": a typo more often than not).
    bool add(std::string_view text)
    {
        const auto slash = text.find('/');
        const auto addr = parse_plain(text.substr(0, slash));
        if (!addr) return false;
        range r{v6_bytes(*addr), 128};
        // BITS counts in the family the address is written in: "::ffff:10.0.0.0/104" is 10/8.
        const unsigned width = text.substr(0, slash).find(':') == std::string_view::npos ? 32 : 128;
        if (slash != std::string_view::npos) {
            const auto bits = text.substr(slash + 1);
            if (bits.empty() || bits.size() > 3 || !std::all_of(bits.begin(), bits.end(), is_digit)) return false;
            unsigned n = 0;
            for (char c : bits) n = n * 10 + static_cast<unsigned>(c - '0');
            if (n > width) return false;
            r.bits = n + (128 - width);
            if (masked(r.prefix, r.bits) != r.prefix) return false;
        }
        ranges_.push_back(r);
        return true;
    }

    bool contains(const boost::asio::ip::address& a) const noexcept
    {
        const auto b = v6_bytes(canonical(a));
        return std::any_of(ranges_.begin(), ranges_.end(), [&b](const range& r) { return masked(b, r.bits) == r.prefix; });
    }

    bool empty() const noexcept { return ranges_.empty(); }

    /// An address as text, strictly: dotted-quad IPv4 or IPv6, no brackets, no port, no
    /// zone index; canonical (see canonical()).
    static std::optional<boost::asio::ip::address> parse_plain(std::string_view s)
    {
        if (s.empty() || s.size() > 45 || s.find('%') != std::string_view::npos) return std::nullopt;
        boost::system::error_code ec;
        auto a = boost::asio::ip::make_address(std::string(s), ec);
        if (ec) return std::nullopt;
        return canonical(a);
    }

private:
    using bytes = std::array<unsigned char, 16>;
    struct range {
        bytes prefix;    // IPv4 as IPv4-mapped IPv6
        unsigned bits;   // of the 128
    };

    static bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }

    static bytes v6_bytes(const boost::asio::ip::address& a) noexcept
    {
        if (a.is_v4()) return boost::asio::ip::make_address_v6(boost::asio::ip::v4_mapped, a.to_v4()).to_bytes();
        return a.to_v6().to_bytes();
    }

    static bytes masked(bytes b, unsigned bits) noexcept
    {
        for (unsigned i = 0; i < 16; ++i) {
            const unsigned keep = bits >= 8 * (i + 1) ? 8 : bits > 8 * i ? bits - 8 * i : 0;
            b[i] = static_cast<unsigned char>(b[i] & (0xFF00u >> keep));
        }
        return b;
    }

    std::vector<range> ranges_;
};

/// The header the trusted proxies write, the one client_of reads.
enum class proxy_header { x_forwarded_for, forwarded };

/// Trusted hops walked at most; past them, the last one is the client.
inline constexpr std::size_t max_hops = 64;

namespace detail {

inline std::string_view trim(std::string_view v) noexcept
{
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
    return v;
}

inline bool is_tchar(char c) noexcept
{
    return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

inline bool is_port(std::string_view p) noexcept
{
    return !p.empty() && p.size() <= 5 && std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; });
}

/// An X-Forwarded-For element: IPv4, IPv4:port, IPv6, [IPv6], [IPv6]:port.
inline std::optional<boost::asio::ip::address> xff_node(std::string_view s)
{
    if (s.starts_with('[')) {
        const auto end = s.find(']');
        if (end == std::string_view::npos) return std::nullopt;
        const auto rest = s.substr(end + 1);
        if (!rest.empty() && !(rest.front() == ':' && is_port(rest.substr(1)))) return std::nullopt;
        const auto a = networks::parse_plain(s.substr(1, end - 1));
        if (!a || a->is_v4()) return std::nullopt;   // brackets are for IPv6
        return a;
    }
    if (const auto colon = s.find(':'); colon != std::string_view::npos && s.find(':', colon + 1) == std::string_view::npos) {
        if (!is_port(s.substr(colon + 1))) return std::nullopt;   // one colon: IPv4:port
        const auto a = networks::parse_plain(s.substr(0, colon));
        if (!a || !a->is_v4()) return std::nullopt;
        return a;
    }
    return networks::parse_plain(s);
}

/// A Forwarded `for=` node (RFC 7239 6): IPv4 or "[" IPv6 "]", then an optional ":" port
/// (digits, or an obfuscated "_..." one). `unknown` and obfuscated names are no address.
inline std::optional<boost::asio::ip::address> forwarded_node(std::string_view s)
{
    std::string_view name = s, port;
    if (s.starts_with('[')) {
        const auto end = s.find(']');
        if (end == std::string_view::npos) return std::nullopt;
        name = s.substr(0, end + 1);
        port = s.substr(end + 1);
    } else if (const auto colon = s.find(':'); colon != std::string_view::npos) {
        name = s.substr(0, colon);
        port = s.substr(colon);
    }
    if (!port.empty()) {
        if (port.front() != ':') return std::nullopt;
        port.remove_prefix(1);
        const bool obfuscated = port.size() > 1 && port.front() == '_' &&
                                std::all_of(port.begin() + 1, port.end(), [](char c) {
                                    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
                                });
        if (!is_port(port) && !obfuscated) return std::nullopt;
    }
    if (name.starts_with('[')) {
        if (!name.ends_with(']')) return std::nullopt;
        const auto a = networks::parse_plain(name.substr(1, name.size() - 2));
        if (!a || a->is_v4()) return std::nullopt;
        return a;
    }
    const auto a = networks::parse_plain(name);
    if (!a || !a->is_v4()) return std::nullopt;   // unknown, _obfuscated, a bare IPv6, garbage
    return a;
}

/// One hop of a list: its address, or none (a stop).
using hop = std::optional<boost::asio::ip::address>;

/// The hops of one X-Forwarded-For line, left to right; empty elements skipped.
inline void xff_hops(std::string_view line, std::vector<hop>& out)
{
    for (;;) {
        const auto comma = line.find(',');
        if (const auto e = trim(line.substr(0, comma)); !e.empty()) out.push_back(xff_node(e));
        if (comma == std::string_view::npos) return;
        line.remove_prefix(comma + 1);
    }
}

/// The hops of one Forwarded line (RFC 7239 4): elements separated by ",", each pairs
/// `token=value` separated by ";", a value a token or a quoted-string. An element without
/// `for` (or with two) is a stop; so is the rest of a line past a syntax error.
inline void forwarded_hops(std::string_view line, std::vector<hop>& out)
{
    std::size_t i = 0;
    const auto skip_ows = [&] {
        while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    };
    const auto bad = [&out] { out.push_back(std::nullopt); };
    for (;;) {
        // One element.
        std::optional<std::string> node;
        bool malformed = false, pairs = false;
        for (;;) {
            skip_ows();
            if (i == line.size() || line[i] == ',' || line[i] == ';') {   // an empty pair
                if (i < line.size() && line[i] == ';') {
                    ++i;
                    continue;
                }
                break;
            }
            const auto name_start = i;
            while (i < line.size() && is_tchar(line[i])) ++i;
            const auto name = line.substr(name_start, i - name_start);
            if (name.empty() || i == line.size() || line[i] != '=') return bad();
            ++i;
            std::string value;
            bool too_long = false;
            if (i < line.size() && line[i] == '"') {
                ++i;
                for (;;) {
                    if (i == line.size()) return bad();   // unterminated: the rest is unreadable
                    char c = line[i++];
                    if (c == '"') break;
                    if (c == '\\') {
                        if (i == line.size()) return bad();
                        c = line[i++];
                    }
                    if (value.size() < 64) value += c;   // longer is no node anyway
                    else too_long = true;
                }
            } else {
                const auto start = i;
                while (i < line.size() && is_tchar(line[i])) ++i;
                if (i == start) return bad();
                value = line.substr(start, i - start);
            }
            pairs = true;
            const bool is_for = name.size() == 3 && std::tolower(static_cast<unsigned char>(name[0])) == 'f' &&
                                std::tolower(static_cast<unsigned char>(name[1])) == 'o' &&
                                std::tolower(static_cast<unsigned char>(name[2])) == 'r';
            if (is_for) {
                if (node || too_long) malformed = true;   // RFC 7239 4: each parameter once an element
                node = std::move(value);
            }
            skip_ows();
            if (i < line.size() && line[i] == ';') {
                ++i;
                continue;
            }
            if (i < line.size() && line[i] != ',') return bad();
            break;
        }
        if (pairs) out.push_back(malformed || !node ? hop{} : forwarded_node(*node));
        if (i == line.size()) return;
        ++i;   // the ','
    }
}

} // namespace detail

/// The client a request comes from (see the top of this file): `peer` itself unless it is
/// one of `trusted`; else the list of `which`, walked from the right over the trusted hops.
/// The result is canonical (canonical()).
template <class Fields>
boost::asio::ip::address client_of(const boost::beast::http::request_header<Fields>& h,
                                   const boost::asio::ip::address& peer, const networks& trusted,
                                   proxy_header which = proxy_header::x_forwarded_for)
{
    auto client = canonical(peer);
    if (!trusted.contains(client)) return client;
    const auto [first, last] = which == proxy_header::forwarded ? h.equal_range(boost::beast::http::field::forwarded)
                                                                 : h.equal_range("X-Forwarded-For");
    std::vector<std::string_view> lines;
    for (auto it = first; it != last; ++it) lines.emplace_back(it->value().data(), it->value().size());
    std::size_t walked = 0;
    std::vector<detail::hop> hops;
    for (auto line = lines.rbegin(); line != lines.rend(); ++line) {
        hops.clear();
        if (which == proxy_header::forwarded) detail::forwarded_hops(*line, hops);
        else detail::xff_hops(*line, hops);
        for (auto hop = hops.rbegin(); hop != hops.rend(); ++hop) {
            if (!*hop || ++walked > max_hops) return client;   // a stop: the last trusted hop
            client = **hop;
            if (!trusted.contains(client)) return client;
        }
    }
    return client;   // every hop trusted: the farthest one
}

} // namespace server_check
