// fuzz-covers: lib/redis/cluster_replies.hpp
// What a Redis Cluster says about its slots: MOVED / ASK errors (any text) and CLUSTER
// SLOTS replies (mostly of the right shape, any values). A redirection names one of the
// 16384 slots and a host:port with a port in 1..65535, and reads back the same from its
// own text; every range of a slot map lies within the slots, first <= last, its master at
// such an address (the node asked, when the host is empty), and a range is dropped only
// when malformed.
#include "fuzz.hpp"

#include "redis/cluster_replies.hpp"

namespace detail = sluice::redis::detail;
using fuzz::reply;

namespace {

bool port_suffix(const std::string& addr)
{
    auto colon = addr.rfind(':');
    return colon != std::string::npos && detail::valid_port(std::string_view(addr).substr(colon + 1));
}

reply integer(std::int64_t v)
{
    reply r;
    r.type = reply::kind::integer;
    r.integer = v;
    return r;
}

// [first, last, [host, port, id], replica...]: each part may be of another kind.
reply range(fuzz::input& in)
{
    if (in.byte() % 8 == 0) return fuzz::any_reply(in);
    reply r;
    r.type = reply::kind::array;
    r.elements.push_back(integer(in.number() % 20000));
    r.elements.push_back(integer(in.number() % 20000));
    reply master;
    master.type = reply::kind::array;
    reply host;
    host.type = in.flag() ? reply::kind::string : reply::kind::integer;
    host.str = in.text();
    master.elements.push_back(host);
    master.elements.push_back(in.flag() ? integer(in.number()) : fuzz::any_reply(in));
    r.elements.push_back(master);
    return r;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    fuzz::input in(data, size);
    if (in.flag()) {
        const char* kind = in.flag() ? "MOVED" : "ASK";
        const auto text = in.rest();
        auto to = detail::parse_redirect(text, kind);
        if (!to) return 0;
        FUZZ_CHECK(to->first < sluice::redis::cluster_slots);
        FUZZ_CHECK(port_suffix(to->second));
        FUZZ_CHECK(text.ends_with(" " + to->second));
        auto again = detail::parse_redirect(std::string(kind) + " " + std::to_string(to->first) + " " + to->second, kind);
        FUZZ_CHECK(again && *again == *to);
        return 0;
    }
    const std::string asked = in.flag() ? "10.0.0.1" : "";
    reply slots;
    slots.type = in.flag() ? reply::kind::array : reply::kind::nil;
    for (std::size_t n = in.byte() % 16; n > 0; --n) slots.elements.push_back(range(in));
    auto ranges = detail::parse_cluster_slots(slots, asked);
    FUZZ_CHECK(ranges.size() <= slots.elements.size());
    if (slots.type != reply::kind::array) FUZZ_CHECK(ranges.empty());
    std::size_t k = 0;
    for (const auto& e : slots.elements) {
        // A range of the right shape with a master at a valid port is never dropped.
        bool good = e.type == reply::kind::array && e.elements.size() >= 3 &&
                    e.elements[0].type == reply::kind::integer && e.elements[1].type == reply::kind::integer &&
                    e.elements[0].integer >= 0 && e.elements[0].integer <= e.elements[1].integer &&
                    e.elements[1].integer < sluice::redis::cluster_slots && e.elements[2].type == reply::kind::array &&
                    e.elements[2].elements.size() >= 2 &&
                    (e.elements[2].elements[0].type == reply::kind::string ||
                     e.elements[2].elements[0].type == reply::kind::status) &&
                    e.elements[2].elements[1].type == reply::kind::integer && e.elements[2].elements[1].integer >= 1 &&
                    e.elements[2].elements[1].integer <= 65535;
        if (!good || slots.type != reply::kind::array) continue;
        FUZZ_CHECK(k < ranges.size());
        const auto& r = ranges[k++];
        FUZZ_CHECK(r.first == e.elements[0].integer && r.last == e.elements[1].integer);
        const std::string host = e.elements[2].elements[0].str.empty() ? asked : e.elements[2].elements[0].str;
        FUZZ_CHECK(r.address == host + ":" + std::to_string(e.elements[2].elements[1].integer));
    }
    for (const auto& r : ranges) {
        FUZZ_CHECK(r.first <= r.last && r.last < sluice::redis::cluster_slots);
        FUZZ_CHECK(port_suffix(r.address));
    }
    return 0;
}
