// fuzz-covers: include/sluice/redis/detail/store/sentinel_events.hpp include/sluice/redis/detail/store/sentinel_list.hpp
// What Sentinels say about each other and about a failover (sentinel_list, sentinel_events)
// fed any SENTINEL SENTINELS replies, +sentinel and +switch-master payloads and Pub/Sub
// replies: the list always holds every configured Sentinel, no duplicate, at most
// max_discovered others; after a refresh from a SENTINEL SENTINELS reply the Sentinels it
// reports alive (and the one that answered) come before all others, and a discovered one it
// does not report is gone; promote moves only a known one, to the front; a parsed
// +switch-master reads back the same from its own text, and the switch decision is
// other_master exactly for another name, already_there exactly when the connection is on
// the announced instance.
#include "fuzz.hpp"

#include <sluice/redis/detail/store/sentinel_events.hpp>
#include <sluice/redis/detail/store/sentinel_list.hpp>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

namespace detail = sluice::redis::detail;
namespace redis = sluice::redis;
using fuzz::reply;
using fuzz::text_reply;

namespace {

redis::sentinel_address address(fuzz::input& in)
{
    return {"127.0.0.1", static_cast<std::uint16_t>(26000 + in.byte() % 24)};
}

// Mostly well-formed SENTINEL SENTINELS replies about a few ports; sometimes any reply.
reply peers(fuzz::input& in)
{
    std::uint8_t b = in.byte();
    if (b >= 200) return fuzz::any_reply(in);
    reply r;
    r.type = reply::kind::array;
    for (std::size_t n = b % 8; r.elements.size() < n;) {
        const char* flags[] = {"sentinel", "s_down,sentinel", "sentinel,disconnected", "o_down,s_down,sentinel"};
        auto a = address(in);
        reply e;
        e.type = reply::kind::array;
        e.elements = {text_reply("ip"),    text_reply(a.host), text_reply("port"), text_reply(std::to_string(a.port)),
                      text_reply("flags"), text_reply(flags[in.byte() % 4])};
        r.elements.push_back(std::move(e));
    }
    return r;
}

bool unique(const std::vector<redis::sentinel_address>& v)
{
    for (std::size_t i = 0; i < v.size(); ++i)
        for (std::size_t j = i + 1; j < v.size(); ++j)
            if (v[i] == v[j]) return false;
    return true;
}

bool has(const std::vector<redis::sentinel_address>& v, const redis::sentinel_address& a)
{
    return std::find(v.begin(), v.end(), a) != v.end();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    fuzz::input in(data, size);
    std::vector<redis::sentinel_address> configured;
    for (std::size_t n = in.byte() % 5; configured.size() < n;) configured.push_back(address(in));   // duplicates allowed
    detail::sentinel_list l(configured);

    for (int step = 0; step < 64 && !in.empty(); ++step) {
        const auto before = l.order();
        switch (in.byte() % 6) {
        case 0: {   // a SENTINEL SENTINELS reply
            auto from = address(in);
            reply r = peers(in);
            const bool changed = l.refresh(from, r);
            FUZZ_CHECK(changed == (l.order() != before));
            if (r.type != reply::kind::array) {
                FUZZ_CHECK(!changed);
                break;
            }
            auto alive = detail::sentinel_list::parse_sentinels(r);
            alive.push_back(from);
            bool past_alive = false;
            for (const auto& a : l.order()) {
                if (has(alive, a)) {
                    FUZZ_CHECK(!past_alive);
                } else {
                    past_alive = true;
                    FUZZ_CHECK(has(configured, a));   // a discovered one not reported is gone
                }
            }
            break;
        }
        case 1: {   // +sentinel
            auto a = address(in);
            const bool added = l.add(a);
            FUZZ_CHECK(added == (l.order().size() == before.size() + 1));
            if (added) FUZZ_CHECK(l.order().back() == a && !has(before, a));
            break;
        }
        case 2: {   // promote
            auto a = address(in);
            const bool known = has(before, a);
            FUZZ_CHECK(l.promote(a) == known);
            if (known) FUZZ_CHECK(l.order().front() == a);
            FUZZ_CHECK(std::is_permutation(before.begin(), before.end(), l.order().begin(), l.order().end()));
            break;
        }
        case 3: {   // a +switch-master payload, any text
            auto m = detail::parse_switch_master(in.text());
            if (!m) break;
            const std::string again = m->name + " " + m->from.host + " " + std::to_string(m->from.port) + " "
                + m->to.host + " " + std::to_string(m->to.port);
            auto n = detail::parse_switch_master(again);
            FUZZ_CHECK(n && n->name == m->name && n->from == m->from && n->to == m->to);
            std::optional<redis::sentinel_address> current;
            if (in.flag()) current = in.flag() ? m->to : address(in);
            const std::string name = in.flag() ? m->name : "other";
            auto v = detail::decide_switch(*m, name, current);
            if (name != m->name)
                FUZZ_CHECK(v == detail::switch_verdict::other_master);
            else
                FUZZ_CHECK((v == detail::switch_verdict::already_there)
                           == (current && detail::same_instance(*current, m->to)));
            break;
        }
        case 4: {   // a +sentinel payload, any text
            auto a = detail::parse_sentinel_added(in.text(), "m");
            if (a) FUZZ_CHECK(!a->host.empty() && a->port != 0);
            break;
        }
        default: {   // any reply on a subscribed link
            reply r = fuzz::any_reply(in);
            auto m = detail::parse_pubsub_message(r);
            if (!m) break;
            FUZZ_CHECK(r.elements.size() == 3 && r.elements[0].str == "message");
            // A message on a channel the watch subscribes to is read as that channel's.
            const auto sub = detail::sentinel_subscribe_command();
            FUZZ_CHECK(sub.size() == 3 && sub[0] == "SUBSCRIBE");
            if (m->channel == sub[1]) (void)detail::parse_switch_master(m->payload);
            if (m->channel == sub[2]) (void)detail::parse_sentinel_added(m->payload, "m");
            break;
        }
        }
        const auto& order = l.order();
        FUZZ_CHECK(unique(order));
        std::size_t discovered = 0;
        for (const auto& a : order) discovered += has(configured, a) ? 0 : 1;
        FUZZ_CHECK(discovered <= detail::sentinel_list::max_discovered);
        for (const auto& c : configured) FUZZ_CHECK(has(order, c));
    }
    return 0;
}
