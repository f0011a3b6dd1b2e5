// async_acquire of the Redis limiters, sans-io: what to do from the request, the reply,
// the local timer and the failure policy. The token bucket reserves its slot in Redis and
// sleeps until it (one round trip); the sliding window cannot reserve ahead, so a refused
// request sleeps until the script's retry_after and asks again. `Ctx` is the limiter's
// core (check, route, counters, refund), which touches no timer for any of these calls.
#pragma once

#include <sluice/detail/base/arith.hpp>
#include <sluice/error.hpp>
#include <sluice/redis/detail/store/op_fsm.hpp>
#include <sluice/redis/detail/store/op_step.hpp>
#include <sluice/redis/detail/store/verdict.hpp>
#include <sluice/redis/scripts.hpp>
#include <sluice/redis/shared_options.hpp>

#include <boost/asio/error.hpp>
#include <boost/system/error_code.hpp>

#include <algorithm>
#include <optional>
#include <cstdint>
#include <string>
#include <utility>

namespace sluice::redis::detail {

/// What the two acquire machines share: the failure policy, the end of a wait on the
/// fallback, the replies that end any acquire, and the count of each request's outcome
/// (once, when it is answered; its wait when it slept).
class acquire_fsm_base : public op_fsm {
public:
    static constexpr bool with_decision = false;
    static constexpr bool total_cancellation = true;

    /// A request for n permits of `key` (the Redis key), waiting at most max_wait_ns.
    acquire_fsm_base(std::string key, std::uint64_t n, std::int64_t max_wait_ns)
        : op_fsm(std::move(key), n), max_wait_ns_(std::max<std::int64_t>(0, max_wait_ns))
    {
    }

protected:
    enum class state { start, evaluating, sleeping, falling_back, done };

    // The request starts at `now`.
    template <class Ctx>
    void begin(Ctx& c, std::int64_t now)
    {
        since_ = now;
        c.request_started();
    }

    // Ends the request with `ec` at `now`, counted (with its wait, when it slept).
    template <class Ctx>
    op_step finish(Ctx& c, boost::system::error_code ec, std::int64_t now, bool initiating = false)
    {
        st_ = state::done;
        c.count_request(ec, slept_ ? sluice::detail::sat_sub(now, since_) : 0);
        return end(ec, initiating);
    }

    // Sleeps wait_ns on the limiter's clock.
    op_step sleep(std::int64_t wait_ns) noexcept
    {
        st_ = state::sleeping;
        slept_ = true;
        return op_step::sleep(wait_ns);
    }

    // Redis cannot answer: the failure policy decides, waiting at most max_wait_ns on the
    // local limiter.
    template <class Ctx>
    op_step fail_over(Ctx& c, std::int64_t max_wait_ns, std::int64_t now, bool initiating)
    {
        switch (by_policy(c)) {
        case policy_says::refuse:
            return finish(c, ec_, now, initiating);
        case policy_says::admit:
            c.count_fallback();
            return finish(c, {}, now, initiating);
        case policy_says::ask_fallback:
            break;
        }
        st_ = state::falling_back;
        return op_step::fall_back(max_wait_ns);
    }

    // The wait on the fallback ended with `e`.
    template <class Ctx>
    op_step fallback_done(Ctx& c, const boost::system::error_code& e, std::int64_t now)
    {
        if (!e || e == error::timed_out)
            c.count_fallback();
        return finish(c, e, now);
    }

    // A reply that ends the operation whatever it asked: Redis unreachable (cancelled,
    // closed, or the failure policy waiting at most max_wait_ns), an error, a malformed
    // reply, a request beyond the burst in force. Empty when *v is the caller's to read.
    template <class Ctx>
    std::optional<op_step> unusable(Ctx& c, const boost::system::error_code& e, const verdict* v, bool cancelled,
                                    round_trip rt, std::int64_t max_wait_ns, std::int64_t now)
    {
        switch (read(c, e, v, rt)) {
        case reply_is::unreachable:
            if (cancelled) return finish(c, boost::asio::error::operation_aborted, now);
            if (c.closed()) return finish(c, error::closed, now);
            return fail_over(c, max_wait_ns, now, false);
        case reply_is::failed:
        case reply_is::exceeding:
            return finish(c, ec_, now);
        case reply_is::usable:
            break;
        }
        return std::nullopt;
    }

    // What is left of max_wait at `now` (0 once it is spent): the failure policy after a
    // failed round trip gets only this, so that the wait for a dead server (at most the
    // command timeout) and the wait on the fallback add up to no more than max_wait, or
    // the command timeout when that is longer.
    std::int64_t left(std::int64_t now) const noexcept
    {
        std::int64_t l = sluice::detail::sat_sub(sluice::detail::sat_add(since_, max_wait_ns_), now);
        return l < 0 ? 0 : l;
    }

    static boost::system::error_code ended(bool closed) noexcept
    {
        return closed ? make_error_code(error::closed) : boost::system::error_code(boost::asio::error::operation_aborted);
    }

    std::int64_t max_wait_ns_;
    std::int64_t since_ = 0;   // Clock ns: when the request started
    state st_ = state::start;
    bool slept_ = false;       // it waited locally (for its slot, or before a re-check)
};

/// The token bucket: one reservation, then a local wait until the slot.
class bucket_acquire_fsm : public acquire_fsm_base {
public:
    using acquire_fsm_base::acquire_fsm_base;

    template <class Ctx>
    op_step start(Ctx& c, std::int64_t now)
    {
        begin(c, now);
        if (auto ec = c.check(n_))
            return finish(c, ec, now, true);
        if (!c.route())
            return fail_over(c, max_wait_ns_, now, true);
        st_ = state::evaluating;
        // Not cancellable while in flight: the reply says whether a slot was reserved, and
        // only then can it be given back.
        return op_step::eval({eval_request::mode::reserve, n_, max_wait_us()}, false);
    }

    template <class Ctx>
    op_step on_reply(Ctx& c, const boost::system::error_code& e, const verdict* v, bool cancelled,
                     round_trip rt, std::int64_t now)
    {
        if (auto s = unusable(c, e, v, cancelled, rt, left(now), now))
            return *s;
        if (!v->admitted)
            return finish(c, error::timed_out, now);
        if (cancelled || c.closed()) {
            c.refund(key_, n_, v->state);
            return finish(c, ended(!cancelled), now);
        }
        if (v->wait_us == 0)
            return finish(c, {}, now);
        reserved_ = v->state;
        return sleep(v->wait_us * 1000);
    }

    /// The end of the local wait (e: cancelled or closed), or of the wait on the fallback.
    template <class Ctx>
    op_step on_wake(Ctx& c, const boost::system::error_code& e, bool /*cancelled*/, std::int64_t now)
    {
        if (st_ == state::falling_back)
            return fallback_done(c, e, now);
        if (e) {
            // The slot goes back where nothing later depends on it.
            c.refund(key_, n_, reserved_);
            return finish(c, ended(c.closed()), now);
        }
        return finish(c, {}, now);
    }

private:
    std::int64_t max_wait_us() const noexcept
    {
        // Rounded down: never wait longer than allowed.
        return std::min<std::int64_t>(max_wait_ns_ / 1000, lua::max_span_us);
    }

    std::int64_t reserved_ = 0;   // the bucket's state after our reservation (for a refund)
};

/// The sliding window: ask, sleep until the retry_after, ask again, within the deadline,
/// holding a ticket in the key's waiters' queue from the first refusal on (first come,
/// first served across processes; see lua::sliding_log). Nothing is consumed until the
/// script grants; every exit before that (timeout, cancellation, close, the fallback)
/// leaves the queue.
class window_acquire_fsm : public acquire_fsm_base {
public:
    using acquire_fsm_base::acquire_fsm_base;

    template <class Ctx>
    op_step start(Ctx& c, std::int64_t now)
    {
        begin(c, now);
        ticket_ = c.make_ticket(n_, max_wait_ns_);
        return ask(c, now, true);
    }

    template <class Ctx>
    op_step on_reply(Ctx& c, const boost::system::error_code& e, const verdict* v, bool cancelled,
                     round_trip rt, std::int64_t now)
    {
        return settle(c, decide(c, e, v, cancelled, rt, now));
    }

    template <class Ctx>
    op_step on_wake(Ctx& c, const boost::system::error_code& e, bool cancelled, std::int64_t now)
    {
        if (st_ == state::falling_back)
            return fallback_done(c, e, now);
        if (e || cancelled)
            return settle(c, finish(c, ended(c.closed()), now));
        return settle(c, ask(c, now, false));
    }

    const std::string& ticket() const noexcept { return ticket_; }

private:
    template <class Ctx>
    op_step decide(Ctx& c, const boost::system::error_code& e, const verdict* v, bool cancelled, round_trip rt,
                   std::int64_t now)
    {
        if (auto s = unusable(c, e, v, cancelled, rt, left(now), now))
            return *s;
        if (v->admitted) {
            // Granted permits are consumed whatever happened meanwhile: report them (the
            // script took the ticket out of the queue).
            queued_ = false;
            return finish(c, {}, now);
        }
        queued_ = true;
        if (cancelled || c.closed())
            return finish(c, ended(!cancelled), now);
        // retry_after is a lower bound (entries only leave the window by time; others may
        // add more), so a wait beyond the deadline cannot end in a grant.
        std::int64_t wait_ns = sluice::detail::sat_mul(static_cast<std::uint64_t>(v->wait_us), 1000);
        if (wait_ns > left(now))
            return finish(c, error::timed_out, now);
        // The wait counts from when the script ran, after the request left: waking that long
        // after the request left brings the next one to Redis about when the room opens, not
        // a round trip later. A window does not reserve: a retry that comes late leaves the
        // room unused meanwhile, and its entry, later by as much, opens the next room later.
        const std::uint64_t took_us = rt.received_us > rt.sent_us
                                          ? static_cast<std::uint64_t>(rt.received_us) - static_cast<std::uint64_t>(rt.sent_us)
                                          : 0;
        return sleep(std::max<std::int64_t>(0, wait_ns - sluice::detail::sat_mul(took_us, 1000)));
    }

    template <class Ctx>
    op_step ask(Ctx& c, std::int64_t now, bool initiating)
    {
        if (auto ec = c.check(n_))
            return finish(c, ec, now, initiating);
        if (!c.route())
            return fail_over(c, left(now), now, initiating);
        st_ = state::evaluating;
        // Not cancellable while in flight: a grant cannot be taken back, so the reply
        // decides (bounded by the client's command timeout).
        eval_request r{eval_request::mode::try_now, n_, 0};
        r.ticket = &ticket_;
        return op_step::eval(r, false);
    }

    // Every step that stops asking Redis (a result, the fallback) gives up the place in
    // the queue, fire and forget: a ticket left behind only holds its place until its
    // deadline.
    template <class Ctx>
    op_step settle(Ctx& c, op_step s)
    {
        if (queued_ && s.next != op_step::kind::sleep && s.next != op_step::kind::eval) {
            c.leave_queue(key_, ticket_);
            queued_ = false;
        }
        return s;
    }

    std::string ticket_;
    bool queued_ = false;         // the ticket may be in the queue
};

/// A change of a key's configuration (set_rate, set_burst, set_limit, set_window): one
/// script call; the failure policy does not apply (a change Redis did not see did not
/// happen), and it is not a request (not counted in stats()).
class configure_fsm : public op_fsm {
public:
    static constexpr bool with_decision = false;
    static constexpr bool total_cancellation = false;

    /// `invalid`: the request's own error (a bad rate or burst), reported without a call.
    configure_fsm(std::string key, eval_request r, boost::system::error_code invalid)
        : op_fsm(std::move(key), 1), request_(r), invalid_(invalid)
    {
    }

    template <class Ctx>
    op_step start(Ctx& c, std::int64_t /*now*/)
    {
        if (invalid_)
            return end(invalid_, true);
        if (c.closed())
            return end(error::closed, true);
        return op_step::eval(request_, true);
    }

    template <class Ctx>
    op_step on_reply(Ctx& c, const boost::system::error_code& e, const verdict* v, bool /*cancelled*/,
                     round_trip rt, std::int64_t /*now*/)
    {
        switch (read(c, e, v, rt)) {
        case reply_is::unreachable:
            return end(e, false);
        case reply_is::failed:
            return end(ec_, false);
        case reply_is::exceeding:
        case reply_is::usable:
            break;
        }
        if (!v->admitted) {
            // A change is always applied: any other answer is not the script's.
            c.on_error();
            return end(error::protocol_error, false);
        }
        return end({}, false);
    }

    template <class Ctx>
    op_step on_wake(Ctx&, const boost::system::error_code&, bool, std::int64_t)
    {
        return op_step::complete();   // never sleeps
    }

private:
    eval_request request_;
    boost::system::error_code invalid_;
};

} // namespace sluice::redis::detail
