// The Sentinels a client knows, kept up to date from the Sentinels themselves, without I/O:
// the configured ones, those a Sentinel reports (SENTINEL SENTINELS, the +sentinel event),
// in the order a discovery asks them. lib/redis/sentinel.cpp feeds it replies and events;
// the tests feed them by hand.
#pragma once

#include <sluice/redis/reply.hpp>
#include <sluice/redis/sentinel_config.hpp>

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::redis::detail {

/// The Sentinels to ask, in order. The configured ones are never forgotten (they are the
/// fallback when every discovered one is gone); discovered ones are at most
/// max_discovered, deduplicated by host text and port (a configured host name and the
/// address a Sentinel reports for the same instance count as two). A refresh puts the
/// Sentinels known to be alive first, so that a configured Sentinel that went away is
/// asked last instead of costing every discovery its timeout.
class sentinel_list {
public:
    /// Discovered Sentinels beyond the configured ones, at most: a deployment has a
    /// handful, and a confused or hostile Sentinel must not make the client open
    /// thousands of connections.
    static constexpr std::size_t max_discovered = 16;

    explicit sentinel_list(std::vector<sentinel_address> configured)
    {
        for (auto& a : configured)
            if (!contains(configured_, a)) configured_.push_back(std::move(a));
        order_ = configured_;
    }

    /// In the order the next discovery asks them.
    const std::vector<sentinel_address>& order() const noexcept { return order_; }

    bool known(const sentinel_address& a) const { return contains(order_, a); }

    /// `a` (the Sentinel whose answer was verified, or that announced a switch) is asked
    /// first next time; the others keep their order. False if it is not known.
    bool promote(const sentinel_address& a)
    {
        auto it = std::find(order_.begin(), order_.end(), a);
        if (it == order_.end()) return false;
        std::rotate(order_.begin(), it, it + 1);
        return true;
    }

    /// A Sentinel announced by another (+sentinel): added last, if new and within the bound.
    /// True if the list changed.
    bool add(const sentinel_address& a)
    {
        if (a.host.empty() || a.port == 0 || known(a) || discovered() >= max_discovered) return false;
        order_.push_back(a);
        return true;
    }

    /// `from` answered and reports `others` alive (parse_sentinels of its SENTINEL
    /// SENTINELS reply). The new order: the Sentinels known to be alive in their previous
    /// order (`from` among them), then the newly reported ones, then the configured ones
    /// that were not reported. A discovered Sentinel that is no longer reported is
    /// dropped. True if the list changed.
    bool merge(const sentinel_address& from, const std::vector<sentinel_address>& others)
    {
        std::vector<sentinel_address> alive{from};
        for (const auto& a : others)
            if (!contains(alive, a)) alive.push_back(a);

        std::vector<sentinel_address> next;
        for (const auto& a : order_)
            if (contains(alive, a)) next.push_back(a);
        std::size_t extra = 0;
        for (const auto& a : next) extra += contains(configured_, a) ? 0 : 1;
        for (const auto& a : alive)
            if (!contains(next, a) && (contains(configured_, a) || extra++ < max_discovered))
                next.push_back(a);
        for (const auto& a : order_)
            if (contains(configured_, a) && !contains(next, a)) next.push_back(a);
        if (next == order_) return false;
        order_ = std::move(next);
        return true;
    }

    /// merge(from, parse_sentinels(r)) when `r` is a SENTINEL SENTINELS reply (an array);
    /// nothing for an error reply (an older or misconfigured Sentinel): that says nothing
    /// about which Sentinels are alive. True if the list changed.
    bool refresh(const sentinel_address& from, const reply& r)
    {
        return r.type == reply::kind::array && merge(from, parse_sentinels(r));
    }

    /// The healthy Sentinels of a SENTINEL SENTINELS reply (an array of [field, value, ...]
    /// arrays): those with an ip and a valid port whose flags say neither s_down nor
    /// o_down. A reply of another shape (an error, unknown master) gives none; malformed
    /// entries are skipped.
    static std::vector<sentinel_address> parse_sentinels(const reply& r)
    {
        std::vector<sentinel_address> out;
        if (r.type != reply::kind::array) return out;
        for (const auto& e : r.elements) {
            if (e.type != reply::kind::array) continue;
            const reply* ip = field(e, "ip");
            const reply* port = field(e, "port");
            const reply* flags = field(e, "flags");
            if (!ip || !port || ip->str.empty()) continue;
            if (flags && !healthy(flags->str)) continue;
            auto p = parse_port(port->str);
            if (!p) continue;
            sentinel_address a{ip->str, *p};
            if (!contains(out, a)) out.push_back(std::move(a));
        }
        return out;
    }

    /// A decimal TCP port in [1, 65535]; nullopt otherwise.
    static std::optional<std::uint16_t> parse_port(std::string_view s)
    {
        unsigned value = 0;
        const char* end = s.data() + s.size();
        auto [p, err] = std::from_chars(s.data(), end, value);
        if (s.empty() || err != std::errc() || p != end || value == 0 || value > 65535) return std::nullopt;
        return static_cast<std::uint16_t>(value);
    }

private:
    static bool contains(const std::vector<sentinel_address>& v, const sentinel_address& a)
    {
        return std::find(v.begin(), v.end(), a) != v.end();
    }

    std::size_t discovered() const
    {
        return static_cast<std::size_t>(std::count_if(
            order_.begin(), order_.end(), [&](const auto& a) { return !contains(configured_, a); }));
    }

    static const reply* field(const reply& map, std::string_view name)
    {
        for (std::size_t i = 0; i + 1 < map.elements.size(); i += 2) {
            const auto& k = map.elements[i];
            const auto& v = map.elements[i + 1];
            if (k.str == name && (v.type == reply::kind::string || v.type == reply::kind::status)) return &v;
        }
        return nullptr;
    }

    static bool healthy(std::string_view flags)
    {
        while (!flags.empty()) {
            auto comma = flags.find(',');
            auto f = flags.substr(0, comma);
            // Not "disconnected": a Sentinel opens its links to the others lazily, so a
            // live peer is often reported so for a while.
            if (f == "s_down" || f == "o_down") return false;
            if (comma == std::string_view::npos) break;
            flags.remove_prefix(comma + 1);
        }
        return true;
    }

    std::vector<sentinel_address> configured_;
    std::vector<sentinel_address> order_;
};

} // namespace sluice::redis::detail
