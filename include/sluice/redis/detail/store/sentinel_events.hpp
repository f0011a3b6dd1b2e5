// What a Sentinel announces on its Pub/Sub channels and what the client does about it,
// without I/O: the messages of `+switch-master` (a failover is done: the master moved) and
// `+sentinel` (another Sentinel joined), and whether an announced switch concerns the
// connection's master. lib/redis/sentinel.cpp reads the messages from a subscription to
// each known Sentinel; the pipeline carries out the switch.
#pragma once

#include <sluice/redis/detail/store/sentinel_list.hpp>
#include <sluice/redis/reply.hpp>
#include <sluice/redis/sentinel_config.hpp>

#include <boost/asio/ip/address.hpp>

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::redis::detail {

/// The channels subscribed to on every Sentinel.
inline constexpr std::string_view switch_master_channel = "+switch-master";
inline constexpr std::string_view sentinel_added_channel = "+sentinel";

/// SUBSCRIBE to both channels.
inline std::vector<std::string> sentinel_subscribe_command()
{
    return {"SUBSCRIBE", std::string(switch_master_channel), std::string(sentinel_added_channel)};
}

/// A Pub/Sub message: ["message", channel, payload].
struct pubsub_message {
    std::string channel;
    std::string payload;
};

/// The message of a reply read on a subscribed link; nullopt for anything else (the
/// confirmations of SUBSCRIBE, a malformed reply).
inline std::optional<pubsub_message> parse_pubsub_message(const reply& r)
{
    if (r.type != reply::kind::array || r.elements.size() != 3) return std::nullopt;
    for (const auto& e : r.elements)
        if (e.type != reply::kind::string && e.type != reply::kind::status) return std::nullopt;
    if (r.elements[0].str != "message") return std::nullopt;
    return pubsub_message{r.elements[1].str, r.elements[2].str};
}

/// `+switch-master`: `<master-name> <old-ip> <old-port> <new-ip> <new-port>`.
struct master_switch {
    std::string name;
    sentinel_address from;
    sentinel_address to;
};

namespace events_detail {

// Splits on single spaces into exactly N non-empty words; false otherwise.
template <std::size_t N>
bool words(std::string_view s, std::array<std::string_view, N>& out)
{
    for (std::size_t i = 0; i < N; ++i) {
        auto sp = s.find(' ');
        out[i] = s.substr(0, sp);
        if (out[i].empty()) return false;
        if (sp == std::string_view::npos) return i + 1 == N;
        s.remove_prefix(sp + 1);
    }
    return false;   // more words than N
}

} // namespace events_detail

/// The payload of a +switch-master message; nullopt if malformed (not five words, a port
/// out of range).
inline std::optional<master_switch> parse_switch_master(std::string_view payload)
{
    std::array<std::string_view, 5> w;
    if (!events_detail::words(payload, w)) return std::nullopt;
    auto old_port = sentinel_list::parse_port(w[2]);
    auto new_port = sentinel_list::parse_port(w[4]);
    if (!old_port || !new_port) return std::nullopt;
    return master_switch{std::string(w[0]), {std::string(w[1]), *old_port}, {std::string(w[3]), *new_port}};
}

/// The Sentinel a +sentinel message announces for `master_name`: the payload is
/// `sentinel <id> <ip> <port> @ <master-name> <master-ip> <master-port>`. nullopt if
/// malformed or about another master.
inline std::optional<sentinel_address> parse_sentinel_added(std::string_view payload,
                                                            std::string_view master_name)
{
    std::array<std::string_view, 8> w;
    if (!events_detail::words(payload, w)) return std::nullopt;
    if (w[0] != "sentinel" || w[4] != "@" || w[5] != master_name) return std::nullopt;
    auto port = sentinel_list::parse_port(w[3]);
    if (!port) return std::nullopt;
    return sentinel_address{std::string(w[2]), *port};
}

/// What an announced switch means for a connection.
enum class switch_verdict {
    other_master,   ///< about another master name: ignored
    already_there,  ///< the connection is on (or connecting to) the new master already
    switch_now,     ///< leave the current master for the announced one at once
};

/// Same instance: equal addresses when both are numeric (so that "::1" and "0:0::1"
/// agree), equal text otherwise; and equal ports.
inline bool same_instance(const sentinel_address& a, const sentinel_address& b)
{
    if (a.port != b.port) return false;
    boost::system::error_code ea, eb;
    auto x = boost::asio::ip::make_address(a.host, ea);
    auto y = boost::asio::ip::make_address(b.host, eb);
    if (!ea && !eb) return x == y;
    return a.host == b.host;
}

/// Whether the connection whose master is named `master_name`, and which is on (or
/// connecting to) `current` (nullopt: no master yet), follows the announcement. It does
/// whenever it is not on the new master, wherever it is: the announcement is the newest
/// word, and the handshake's ROLE check still guards against a stale one.
inline switch_verdict decide_switch(const master_switch& m, std::string_view master_name,
                                    const std::optional<sentinel_address>& current)
{
    if (m.name != master_name) return switch_verdict::other_master;
    if (current && same_instance(*current, m.to)) return switch_verdict::already_there;
    return switch_verdict::switch_now;
}

} // namespace sluice::redis::detail
