// fuzz-covers: include/sluice/redis/detail/store/sentinel_fsm.hpp
// Master discovery through Sentinel (sentinel_fsm) fed any Sentinel and ROLE replies and
// unreachable instances, over several rounds: each round asks the Sentinels in the order
// it started with, each once (so it ends within 2 x Sentinels + 1 steps); a role check is
// for the address the Sentinel just named, never one rejected earlier in the round; a
// master is the result only after its ROLE said master, and then the Sentinel that named
// it moves to the front, the others keeping their order; a failed round reports the
// failure furthest along.
#include "fuzz.hpp"

#include <sluice/redis/detail/store/sentinel_fsm.hpp>

#include <boost/asio/error.hpp>

#include <algorithm>
#include <vector>

namespace detail = sluice::redis::detail;
namespace redis = sluice::redis;
using fsm_t = detail::sentinel_fsm;
using fuzz::reply;
using fuzz::text_reply;

namespace {

// Mostly well-formed answers about a few addresses, so that rounds get far; sometimes any
// reply at all.
reply sentinel_answer(fuzz::input& in)
{
    std::uint8_t b = in.byte();
    if (b < 160) {
        reply r;
        r.type = reply::kind::array;
        r.elements = {text_reply("10.0.0." + std::to_string(b % 4)), text_reply(std::to_string(6379 + (b >> 2) % 3))};
        return r;
    }
    if (b < 176) return reply{};   // nil: the name is unknown
    return fuzz::any_reply(in);
}

reply role_answer(fuzz::input& in)
{
    std::uint8_t b = in.byte();
    if (b < 192) {
        reply r;
        r.type = reply::kind::array;
        const char* roles[] = {"master", "slave", "sentinel"};
        r.elements = {text_reply(roles[b % 3]), reply{}};
        return r;
    }
    return fuzz::any_reply(in);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    fuzz::input in(data, size);
    std::vector<redis::sentinel_address> list;
    for (std::size_t n = in.byte() % 6; list.size() < n;)
        list.push_back({"127.0.0.1", static_cast<std::uint16_t>(26000 + in.byte() % 8)});   // duplicates allowed
    fsm_t f(list, "m");

    for (int round = 0; round < 8 && !in.empty(); ++round) {
        const std::vector<redis::sentinel_address> order = f.sentinels();
        FUZZ_CHECK(std::is_permutation(order.begin(), order.end(), list.begin(), list.end()));
        std::size_t asked = 0;                   // Sentinels asked this round
        std::vector<std::pair<redis::sentinel_address, redis::sentinel_error>> rejected;
        auto worst = redis::sentinel_error::sentinels_unreachable;
        redis::sentinel_address candidate;
        auto a = f.start();
        for (int steps = 0;; ++steps) {
            FUZZ_CHECK(steps <= 2 * static_cast<int>(order.size()) + 1);
            if (a.what == fsm_t::step::done) {
                if (!a.ec) {
                    // The verified master; its Sentinel (the last asked) first.
                    FUZZ_CHECK(a.target == candidate);
                    std::vector<redis::sentinel_address> want = order;
                    std::rotate(want.begin(), want.begin() + static_cast<std::ptrdiff_t>(asked - 1),
                                want.begin() + static_cast<std::ptrdiff_t>(asked));
                    FUZZ_CHECK(f.sentinels() == want);
                } else {
                    FUZZ_CHECK(asked == order.size());
                    FUZZ_CHECK(a.ec == make_error_code(worst));
                    FUZZ_CHECK(f.sentinels() == order);
                }
                break;
            }
            if (a.what == fsm_t::step::ask_sentinel) {
                FUZZ_CHECK(asked < order.size());
                FUZZ_CHECK(a.target == order[asked]);
                ++asked;
                boost::system::error_code ec;
                if (in.byte() % 8 == 0) ec = boost::asio::error::timed_out;
                reply r = sentinel_answer(in);
                auto addr = fsm_t::parse_master_address(r);
                bool known_bad = false;
                if (!ec && !r.is_error() && r.type == reply::kind::nil)
                    worst = std::max(worst, redis::sentinel_error::unknown_master);
                a = f.on_sentinel_reply(ec, r);
                if (!ec && !r.is_error() && addr) {
                    for (const auto& [x, why] : rejected)
                        if (x == *addr) {
                            known_bad = true;
                            worst = std::max(worst, why);
                        }
                    if (!known_bad) {
                        FUZZ_CHECK(a.what == fsm_t::step::check_role);
                        FUZZ_CHECK(a.target == *addr);
                        candidate = *addr;
                        continue;
                    }
                }
                FUZZ_CHECK(a.what != fsm_t::step::check_role);
                continue;
            }
            // check_role
            FUZZ_CHECK(a.target == candidate);
            boost::system::error_code ec;
            if (in.byte() % 8 == 0) ec = boost::asio::error::connection_refused;
            reply r = role_answer(in);
            bool master = !ec && r.type == reply::kind::array && !r.elements.empty() &&
                          (r.elements[0].type == reply::kind::string || r.elements[0].type == reply::kind::status) &&
                          r.elements[0].str == "master";
            a = f.on_role_reply(ec, r);
            if (master) {
                FUZZ_CHECK(a.what == fsm_t::step::done && !a.ec);
            } else {
                auto why = ec ? redis::sentinel_error::master_unreachable : redis::sentinel_error::not_master;
                worst = std::max(worst, why);
                rejected.emplace_back(candidate, why);
                FUZZ_CHECK(a.what != fsm_t::step::check_role);
            }
        }
    }
    return 0;
}
