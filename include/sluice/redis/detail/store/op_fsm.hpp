// What the state machines of every Redis limiter operation share (try_fsm, the acquire
// machines, configure_fsm): the request, how it ended, how a reply is read and what the
// failure policy says while Redis cannot answer. Sans-io: `Ctx` is the limiter's core.
#pragma once

#include <sluice/error.hpp>
#include <sluice/redis/detail/store/op_step.hpp>
#include <sluice/redis/detail/store/verdict.hpp>
#include <sluice/redis/shared_options.hpp>

#include <boost/system/error_code.hpp>

#include <cstdint>
#include <string>
#include <utility>

namespace sluice::redis::detail {

class op_fsm {
public:
    /// The Redis key of the request.
    const std::string& key() const noexcept { return key_; }
    /// The permits asked for.
    std::uint64_t count() const noexcept { return n_; }
    /// The result was decided in the initiating call: it completes through a post.
    bool posted() const noexcept { return posted_; }
    /// Why the operation failed (empty: it did not).
    const boost::system::error_code& error() const noexcept { return ec_; }

protected:
    op_fsm(std::string key, std::uint64_t n) : key_(std::move(key)), n_(n) {}

    // Ends the operation with `ec`; `initiating`: decided in the initiating call.
    op_step end(boost::system::error_code ec, bool initiating) noexcept
    {
        ec_ = ec;
        posted_ = initiating;
        return initiating ? op_step::post() : op_step::complete();
    }

    // What a reply is, its news about Redis recorded in the core (unreachable, an error,
    // or a reply and its server time).
    enum class reply_is {
        unreachable,   // Redis cannot answer now: the failure policy decides
        failed,        // an error reply or a malformed one: error() says which
        exceeding,     // n is beyond the burst (limit) in force: error() is exceeds_limit
        usable,        // a verdict to act on
    };

    template <class Ctx>
    reply_is read(Ctx& c, const boost::system::error_code& e, const verdict* v, round_trip rt)
    {
        if (unreachable(e)) {
            c.on_unavailable();
            return reply_is::unreachable;
        }
        if (e || !v) {
            c.on_error();
            ec_ = e ? e : make_error_code(error::protocol_error);
            return reply_is::failed;
        }
        c.on_reply(*v, rt);
        if (v->exceeds()) {
            ec_ = error::exceeds_limit;
            return reply_is::exceeding;
        }
        return reply_is::usable;
    }

    // What options().on_failure answers while Redis cannot: a refusal (fail_closed: error()
    // is backend_unavailable), an admission (fail_open), or the local fallback's answer.
    enum class policy_says { refuse, admit, ask_fallback };

    template <class Ctx>
    policy_says by_policy(const Ctx& c) noexcept
    {
        switch (c.options().on_failure) {
        case failure_policy::fail_closed:
            ec_ = error::backend_unavailable;
            return policy_says::refuse;
        case failure_policy::fail_open:
            return policy_says::admit;
        case failure_policy::local_fallback:
            break;
        }
        return policy_says::ask_fallback;
    }

    std::string key_;
    std::uint64_t n_;
    boost::system::error_code ec_;
    bool posted_ = false;
};

} // namespace sluice::redis::detail
