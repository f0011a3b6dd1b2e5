// The decisions of a master discovery through Redis Sentinel, without I/O: which Sentinel
// to ask next, what its answer means, whether the master it named is one, and which
// Sentinel to ask first next time. The Asio operation (lib/redis/sentinel.cpp) performs
// the steps and feeds the results back; the tests feed them by hand.
#pragma once

#include <sluice/redis/reply.hpp>
#include <sluice/redis/sentinel_config.hpp>
#include <sluice/redis/sentinel_error.hpp>

#include <boost/system/error_code.hpp>

#include <algorithm>
#include <cassert>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sluice::redis::detail {

/// One discovery round, after Sentinel's client guidelines: the Sentinels are asked in
/// order (SENTINEL get-master-addr-by-name); the address one names is checked with ROLE
/// on that instance; the first verified answer ends the round and moves its Sentinel to
/// the front of the list, so that the next round starts where the last one succeeded.
///
/// Two choices differ from the guidelines' letter, for the same reason (a stale Sentinel
/// must not be able to stall discovery):
/// - a Sentinel is promoted only once its answer is verified, not as soon as it replies:
///   otherwise a Sentinel that keeps naming a demoted master would be asked first forever;
/// - an unverified answer moves on to the next Sentinel at once instead of starting over
///   from the first one after a pause: the pause is the caller's reconnection backoff,
///   between rounds. An address rejected in this round is not checked again (after a
///   master dies every Sentinel names it until the failover ends).
class sentinel_fsm {
public:
    /// What to do next.
    enum class step {
        ask_sentinel,   ///< send sentinel_command() to `target`, then on_sentinel_reply
        check_role,     ///< send role_command() to `target`, then on_role_reply
        done,           ///< the round is over: `target` is the master, or `ec` says why not
    };

    /// The next step and its target.
    struct action {
        /// What to do.
        step what = step::done;
        /// The Sentinel to ask, the instance to check, or (done) the verified master.
        sentinel_address target;
        /// done: empty on success, else a sentinel_error.
        boost::system::error_code ec;
    };

    sentinel_fsm(std::vector<sentinel_address> sentinels, std::string master_name)
        : list_(std::move(sentinels)), name_(std::move(master_name))
    {
    }

    /// The Sentinels in the order the next round asks them.
    const std::vector<sentinel_address>& sentinels() const noexcept { return list_; }

    /// SENTINEL get-master-addr-by-name <master_name>.
    std::vector<std::string> sentinel_command() const
    {
        return {"SENTINEL", "get-master-addr-by-name", name_};
    }

    /// ROLE.
    static std::vector<std::string> role_command() { return {"ROLE"}; }

    /// Starts a round at the first Sentinel (a round in progress is abandoned).
    action start()
    {
        next_ = 0;
        rejected_.clear();
        worst_ = sentinel_error::sentinels_unreachable;
        return ask_next();
    }

    /// The reply of the Sentinel asked; `ec` when it could not be reached in time.
    action on_sentinel_reply(const boost::system::error_code& ec, const reply& r)
    {
        assert(expecting_ == step::ask_sentinel);
        if (ec || r.is_error()) return ask_next();   // unreachable, NOAUTH, not a Sentinel
        if (r.type == reply::kind::nil) {
            note(sentinel_error::unknown_master);
            return ask_next();
        }
        auto addr = parse_master_address(r);
        if (!addr) return ask_next();                 // a malformed answer counts as none
        for (const auto& [a, why] : rejected_)
            if (a == *addr) {
                note(why);
                return ask_next();
            }
        candidate_ = std::move(*addr);
        expecting_ = step::check_role;
        return {step::check_role, candidate_, {}};
    }

    /// The ROLE reply of the instance named; `ec` when it could not be reached in time.
    action on_role_reply(const boost::system::error_code& ec, const reply& r)
    {
        assert(expecting_ == step::check_role);
        if (!ec && is_master_role(r)) {
            // Verified: this Sentinel is asked first next time, the others keep their order.
            auto first = list_.begin();
            std::rotate(first, first + static_cast<std::ptrdiff_t>(next_ - 1),
                        first + static_cast<std::ptrdiff_t>(next_));
            expecting_ = step::done;
            return {step::done, candidate_, {}};
        }
        auto why = ec ? sentinel_error::master_unreachable : sentinel_error::not_master;
        note(why);
        rejected_.emplace_back(candidate_, why);
        return ask_next();
    }

    /// The [host, port] pair of a get-master-addr-by-name reply; nullopt if malformed.
    static std::optional<sentinel_address> parse_master_address(const reply& r)
    {
        if (r.type != reply::kind::array || r.elements.size() != 2) return std::nullopt;
        const auto& host = r.elements[0];
        const auto& port = r.elements[1];
        if (!is_text(host) || !is_text(port) || host.str.empty()) return std::nullopt;
        unsigned value = 0;
        const char* end = port.str.data() + port.str.size();
        auto [p, err] = std::from_chars(port.str.data(), end, value);
        if (err != std::errc() || p != end || value == 0 || value > 65535) return std::nullopt;
        return sentinel_address{host.str, static_cast<std::uint16_t>(value)};
    }

    /// Whether a ROLE reply says "master" (a replica says "slave", a Sentinel "sentinel").
    static bool is_master_role(const reply& r)
    {
        return r.type == reply::kind::array && !r.elements.empty() && is_text(r.elements[0])
            && r.elements[0].str == "master";
    }

private:
    static bool is_text(const reply& r)
    {
        return r.type == reply::kind::string || r.type == reply::kind::status;
    }

    action ask_next()
    {
        if (next_ >= list_.size()) {
            expecting_ = step::done;
            return {step::done, {}, make_error_code(worst_)};
        }
        expecting_ = step::ask_sentinel;
        return {step::ask_sentinel, list_[next_++], {}};
    }

    // The round's failure so far: the one furthest along wins.
    void note(sentinel_error e) { worst_ = std::max(worst_, e); }

    std::vector<sentinel_address> list_;
    std::string name_;
    std::size_t next_ = 0;   // the next Sentinel to ask; next_ - 1 is the one asked last
    sentinel_address candidate_;
    std::vector<std::pair<sentinel_address, sentinel_error>> rejected_;
    sentinel_error worst_ = sentinel_error::sentinels_unreachable;
    step expecting_ = step::done;
};

} // namespace sluice::redis::detail
