// Where a Redis Cluster says its slots live, read from its replies (MOVED and ASK errors,
// CLUSTER SLOTS): sans-io, tested and fuzzed on its own; cluster.cpp acts on it. A node's
// address is "host:port" with a port in 1..65535: anything else is not an address to
// connect to (a port taken modulo 2^16 would be someone else's).
#pragma once

#include <sluice/redis/hash_slot.hpp>
#include <sluice/redis/reply.hpp>

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::redis::detail {

/// A port number of 1 to 65535, in decimal digits only.
inline bool valid_port(std::string_view text) noexcept
{
    unsigned port = 0;
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
    return ec == std::errc() && p == text.data() + text.size() && port >= 1 && port <= 65535;
}

/// "MOVED 3999 127.0.0.1:6381" / "ASK 3999 127.0.0.1:6381" (kind "MOVED" or "ASK") -> (3999,
/// "127.0.0.1:6381"); nullopt unless the slot is one of the 16384 and the address is
/// host:port (the host may be empty: the node asked).
inline std::optional<std::pair<std::uint16_t, std::string>> parse_redirect(std::string_view err, std::string_view kind)
{
    if (err.size() <= kind.size() + 1 || !err.starts_with(kind) || err[kind.size()] != ' ')
        return std::nullopt;
    auto rest = err.substr(kind.size() + 1);
    auto sp = rest.find(' ');
    if (sp == std::string_view::npos) return std::nullopt;
    unsigned slot = 0;
    auto [p, ec] = std::from_chars(rest.data(), rest.data() + sp, slot);
    if (ec != std::errc() || p != rest.data() + sp || slot >= cluster_slots) return std::nullopt;
    auto addr = rest.substr(sp + 1);
    auto colon = addr.rfind(':');
    if (colon == std::string_view::npos || !valid_port(addr.substr(colon + 1))) return std::nullopt;
    return std::pair{static_cast<std::uint16_t>(slot), std::string(addr)};
}

/// Slots first..last (inclusive) served by the master at `address` ("host:port").
struct slot_range {
    std::uint16_t first = 0;
    std::uint16_t last = 0;
    std::string address;
};

/// The ranges of a CLUSTER SLOTS reply ([first, last, [host, port, ...], replicas...] each)
/// whose slots and master are well formed; a master's empty host is `asked_host` (the node
/// that answered). Malformed ranges are skipped.
inline std::vector<slot_range> parse_cluster_slots(const reply& slots, std::string_view asked_host)
{
    std::vector<slot_range> out;
    if (slots.type != reply::kind::array) return out;
    for (const auto& range : slots.elements) {
        if (range.type != reply::kind::array || range.elements.size() < 3) continue;
        const auto& lo = range.elements[0];
        const auto& hi = range.elements[1];
        const auto& master = range.elements[2];
        if (lo.type != reply::kind::integer || hi.type != reply::kind::integer || master.type != reply::kind::array ||
            master.elements.size() < 2 || lo.integer < 0 || hi.integer >= cluster_slots || lo.integer > hi.integer)
            continue;
        const auto& host = master.elements[0];
        const auto& port = master.elements[1];
        if ((host.type != reply::kind::string && host.type != reply::kind::status) ||
            port.type != reply::kind::integer || port.integer < 1 || port.integer > 65535)
            continue;
        out.push_back({static_cast<std::uint16_t>(lo.integer), static_cast<std::uint16_t>(hi.integer),
                       (host.str.empty() ? std::string(asked_host) : host.str) + ":" + std::to_string(port.integer)});
    }
    return out;
}

} // namespace sluice::redis::detail
