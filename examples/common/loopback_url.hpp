// `http://127.x.y.z:PORT/path` for the example clients, which talk to loopback only.
#pragma once

#include <boost/asio/ip/address_v4.hpp>

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

namespace examples {

struct loopback_url {
    boost::asio::ip::address_v4 address;
    std::uint16_t port = 0;
    std::string target = "/"; // path and query
    std::string host_field;   // the Host field to send
};

/// Parses `HOST:PORT`, HOST being `localhost` or an IPv4 address in 127.0.0.0/8, into
/// address and port. On failure returns false and says why in `why`.
inline bool parse_loopback_endpoint(std::string_view authority, loopback_url& out, std::string& why)
{
    auto colon = authority.rfind(':');
    if (colon == std::string_view::npos) {
        why = "an explicit port is needed (127.0.0.1:PORT)";
        return false;
    }
    std::string host(authority.substr(0, colon));
    std::string_view port_text = authority.substr(colon + 1);
    unsigned port = 0;
    auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc{} || end != port_text.data() + port_text.size() || port == 0 || port > 65535) {
        why = "bad port '" + std::string(port_text) + "'";
        return false;
    }
    boost::system::error_code aec;
    out.address = host == "localhost" ? boost::asio::ip::address_v4::loopback()
                                      : boost::asio::ip::make_address_v4(host, aec);
    if (aec || !out.address.is_loopback()) {
        why = "host '" + host + "' is not a loopback IPv4 address (127.0.0.0/8): these examples talk to this machine only";
        return false;
    }
    out.port = static_cast<std::uint16_t>(port);
    return true;
}

/// Parses `http://HOST:PORT[/target]` (HOST as for parse_loopback_endpoint). On failure
/// returns nullopt and says why in `why`.
inline std::optional<loopback_url> parse_loopback_url(std::string_view url, std::string& why)
{
    constexpr std::string_view scheme = "http://";
    if (url.substr(0, scheme.size()) != scheme) {
        why = "the URL must start with http:// (no TLS in these examples)";
        return std::nullopt;
    }
    url.remove_prefix(scheme.size());
    auto slash = url.find('/');
    std::string_view authority = url.substr(0, slash);
    loopback_url out;
    if (slash != std::string_view::npos) out.target = std::string(url.substr(slash));
    if (!parse_loopback_endpoint(authority, out, why)) {
        if (authority.rfind(':') == std::string_view::npos)
            why = "the URL needs an explicit port (http://127.0.0.1:PORT/...)";
        return std::nullopt;
    }
    out.host_field = std::string(authority);
    return out;
}

/// `--url` of the example clients: parsed, or nullopt after saying why on stderr.
inline std::optional<loopback_url> client_url(const char* program, const std::string& url)
{
    if (url.empty()) {
        std::fprintf(stderr, "%s: --url is required (or --spawn-server); see --help\n", program);
        return std::nullopt;
    }
    std::string why;
    auto out = parse_loopback_url(url, why);
    if (!out) std::fprintf(stderr, "%s: --url %s: %s\n", program, url.c_str(), why.c_str());
    return out;
}

} // namespace examples
