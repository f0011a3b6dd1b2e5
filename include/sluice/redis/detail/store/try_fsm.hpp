// async_try_acquire of every Redis limiter, and the background reservation of a lease:
// what to do from the request, the lease book and the reply. Sans-io: `Ctx` is the
// limiter's core (check, route, counters, the lease books, the fallback), which touches
// no socket or timer for any of these calls.
#pragma once

#include <sluice/decision.hpp>
#include <sluice/error.hpp>
#include <sluice/redis/detail/store/lease_book.hpp>
#include <sluice/redis/detail/store/op_fsm.hpp>
#include <sluice/redis/detail/store/op_step.hpp>
#include <sluice/redis/detail/store/verdict.hpp>
#include <sluice/redis/shared_options.hpp>

#include <boost/system/error_code.hpp>

#include <cstdint>
#include <string>
#include <utility>

namespace sluice::redis::detail {

class try_fsm : public op_fsm {
public:
    static constexpr bool with_decision = true;
    static constexpr bool total_cancellation = false;

    /// A request for n permits of `key` (the Redis key).
    try_fsm(std::string key, std::uint64_t n) : op_fsm(std::move(key), n) {}

    /// A background reservation of `count` slots for the lease book of `key` (claimed
    /// by the caller): no request waits for it.
    static try_fsm prefetch(std::string key, std::uint64_t count)
    {
        try_fsm f(std::move(key), 0);
        f.background_ = true;
        f.leasing_ = true;
        f.count_ = count;
        return f;
    }

    /// What a try of n permits of `key` would answer now, nothing consumed nor counted
    /// (async_peek): no lease, no failure policy (Redis unreachable is
    /// error::backend_unavailable).
    static try_fsm peek(std::string key, std::uint64_t n)
    {
        try_fsm f(std::move(key), n);
        f.peek_ = true;
        return f;
    }

    /// The decision (when error() is empty).
    const decision& result() const noexcept { return d_; }

    template <class Ctx>
    op_step start(Ctx& c, std::int64_t now)
    {
        if constexpr (Ctx::can_lease) {
            if (background_)
                return op_step::eval({eval_request::mode::lease, count_, c.lease_horizon_us()}, false);
        }
        if (auto ec = c.check(n_))
            return end(ec, true);
        if (peek_) {
            if (!c.route())
                return end(make_error_code(error::backend_unavailable), true);
            eval_request r{eval_request::mode::try_now, n_, 0};
            r.peek = true;
            return op_step::eval(r, true);
        }
        if (!c.route()) {
            decide_locally(c);
            return end(ec_, true);
        }
        if constexpr (Ctx::can_lease) {
            if (c.leasing()) {
                auto t = c.lease_take(key_, n_, now);
                if (t.next == lease_book::step::local) {
                    d_ = t.d;
                    c.count_try(d_.admitted, false);
                    if (t.prefetch)
                        c.prefetch(key_, t.count);
                    return end({}, true);
                }
                leasing_ = true;
                count_ = t.count;
                return op_step::eval({eval_request::mode::lease, count_, c.lease_horizon_us()}, true);
            }
        }
        return op_step::eval({eval_request::mode::try_now, n_, 0}, true);
    }

    template <class Ctx>
    op_step on_reply(Ctx& c, const boost::system::error_code& e, const verdict* v, bool /*cancelled*/,
                     round_trip rt, std::int64_t now)
    {
        if constexpr (Ctx::can_lease) {
            // Every reply that does not fill the book ends its reservation all the same:
            // a book left waiting would refuse the key locally for good.
            if (leasing_ && (!v || v->exceeds()))
                c.lease_failed(key_);
        }
        switch (read(c, e, v, rt)) {
        case reply_is::unreachable:
            if (background_ || peek_) ec_ = e;
            else decide_locally(c);
            break;
        case reply_is::failed:
        case reply_is::exceeding:
            break;
        case reply_is::usable:
            d_ = to_decision(*v);
            if (peek_) break;
            if constexpr (Ctx::can_lease) {
                if (leasing_) {
                    auto f = c.lease_fill(key_, n_, *v, (rt.received_us - rt.sent_us) * 1000, now);
                    d_ = f.d;
                    if (f.prefetch)
                        c.prefetch(key_, f.count);
                }
            }
            if (!background_) c.count_try(d_.admitted, false);
            break;
        }
        return op_step::complete();
    }

    template <class Ctx>
    op_step on_wake(Ctx&, const boost::system::error_code&, bool, std::int64_t)
    {
        return op_step::complete();   // never sleeps
    }

private:
    // The failure policy's answer while Redis cannot give one.
    template <class Ctx>
    void decide_locally(Ctx& c)
    {
        switch (by_policy(c)) {
        case policy_says::refuse:
            return;
        case policy_says::admit:
            d_ = decision{};
            d_.admitted = true;
            break;
        case policy_says::ask_fallback:
            d_ = c.fallback_try(key_, n_);
            break;
        }
        c.count_try(d_.admitted, true);
    }

    std::uint64_t count_ = 0;   // slots a lease reservation asks for
    bool leasing_ = false;
    bool background_ = false;
    bool peek_ = false;
    decision d_;
};

} // namespace sluice::redis::detail
