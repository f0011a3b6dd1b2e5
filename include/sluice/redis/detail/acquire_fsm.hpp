// async_acquire of the Redis limiters, sans-io: what to do from the request, the reply,
// the local timer and the failure policy. The token bucket reserves its slot in Redis and
// sleeps until it (one round trip); the sliding window cannot reserve ahead, so a refused
// request sleeps until the script's retry_after and asks again. `Ctx` is the limiter's
// core (check, route, counters, refund), which touches no timer for any of these calls.
#pragma once

#include <sluice/detail/arith.hpp>
#include <sluice/error.hpp>
#include <sluice/redis/detail/op_step.hpp>
#include <sluice/redis/detail/verdict.hpp>
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

/// What the two acquire machines share: the request, the result, the failure policy and
/// the end of a wait on the fallback.
class acquire_fsm_base {
public:
    static constexpr bool with_decision = false;
    static constexpr bool total_cancellation = true;

    const std::string& key() const noexcept { return key_; }
    std::uint64_t count() const noexcept { return n_; }
    bool posted() const noexcept { return st_ == state::posted; }
    const boost::system::error_code& error() const noexcept { return ec_; }

protected:
    enum class state { start, posted, evaluating, sleeping, falling_back, done };

    acquire_fsm_base(std::string key, std::uint64_t n) : key_(std::move(key)), n_(n) {}

    op_step finish(boost::system::error_code ec, bool initiating) noexcept
    {
        ec_ = ec;
        st_ = initiating ? state::posted : state::done;
        return initiating ? op_step::post() : op_step::complete();
    }

    // Redis cannot answer: the failure policy decides, waiting at most max_wait_ns on the
    // local limiter.
    template <class Ctx>
    op_step by_policy(Ctx& c, std::int64_t max_wait_ns, bool initiating)
    {
        switch (c.options().on_failure) {
        case failure_policy::fail_closed:
            return finish(error::backend_unavailable, initiating);
        case failure_policy::fail_open:
            c.count(true, true);
            return finish({}, initiating);
        case failure_policy::local_fallback:
            break;
        }
        st_ = state::falling_back;
        return op_step::fall_back(max_wait_ns);
    }

    template <class Ctx>
    op_step fallback_done(Ctx& c, const boost::system::error_code& e)
    {
        if (!e || e == error::timed_out)
            c.count(!e, true);
        return finish(e, false);
    }

    // A reply that ends the operation whatever it asked: Redis unreachable (cancelled,
    // closed, or the failure policy waiting at most max_wait_ns), an error, a malformed
    // reply, a request beyond the burst in force. Empty when *v is the caller's to read
    // (the reply is counted then).
    template <class Ctx>
    std::optional<op_step> unusable(Ctx& c, const boost::system::error_code& e, const verdict* v, bool cancelled,
                                    round_trip rt, std::int64_t max_wait_ns)
    {
        if (unreachable(e)) {
            c.on_unavailable();
            if (cancelled) return finish(boost::asio::error::operation_aborted, false);
            if (c.closed()) return finish(error::closed, false);
            return by_policy(c, max_wait_ns, false);
        }
        if (e || !v) {
            c.on_error();
            return finish(e ? e : make_error_code(error::protocol_error), false);
        }
        c.on_reply(*v, rt);
        if (v->exceeds())
            return finish(error::exceeds_limit, false);
        return std::nullopt;
    }

    static boost::system::error_code ended(bool closed) noexcept
    {
        return closed ? make_error_code(error::closed) : boost::system::error_code(boost::asio::error::operation_aborted);
    }

    std::string key_;
    std::uint64_t n_;
    state st_ = state::start;
    boost::system::error_code ec_;
};

/// The token bucket: one reservation, then a local timer until the slot.
class bucket_acquire_fsm : public acquire_fsm_base {
public:
    bucket_acquire_fsm(std::string key, std::uint64_t n, std::int64_t max_wait_ns)
        : acquire_fsm_base(std::move(key), n), max_wait_ns_(std::max<std::int64_t>(0, max_wait_ns))
    {
    }

    template <class Ctx>
    op_step start(Ctx& c, std::int64_t /*now*/)
    {
        if (auto ec = c.check(n_))
            return finish(ec, true);
        if (!c.route())
            return by_policy(c, max_wait_ns_, true);
        st_ = state::evaluating;
        // Not cancellable while in flight: the reply says whether a slot was reserved, and
        // only then can it be given back.
        return op_step::eval({eval_request::mode::reserve, n_, max_wait_us()}, false);
    }

    template <class Ctx>
    op_step on_reply(Ctx& c, const boost::system::error_code& e, const verdict* v, bool cancelled,
                     round_trip rt, std::int64_t /*now*/)
    {
        if (auto s = unusable(c, e, v, cancelled, rt, max_wait_ns_))
            return *s;
        if (!v->admitted) {
            c.count(false, false);
            return finish(error::timed_out, false);
        }
        if (cancelled || c.closed()) {
            c.refund(key_, n_, v->state);
            return finish(ended(!cancelled), false);
        }
        // Counted when the reply is in: the slot is ours unless given back.
        c.count(true, false);
        if (v->wait_us == 0)
            return finish({}, false);
        reserved_ = v->state;
        st_ = state::sleeping;
        return op_step::sleep(v->wait_us * 1000);
    }

    /// The local timer (e: cancelled or closed), or the wait on the fallback.
    template <class Ctx>
    op_step on_wake(Ctx& c, const boost::system::error_code& e, bool /*cancelled*/, std::int64_t /*now*/)
    {
        if (st_ == state::falling_back)
            return fallback_done(c, e);
        if (e) {
            // The slot goes back where nothing later depends on it.
            c.refund(key_, n_, reserved_);
            return finish(ended(c.closed()), false);
        }
        return finish({}, false);
    }

private:
    std::int64_t max_wait_us() const noexcept
    {
        // Rounded down: never wait longer than allowed.
        return std::min<std::int64_t>(max_wait_ns_ / 1000, lua::max_span_us);
    }

    std::int64_t max_wait_ns_;
    std::int64_t reserved_ = 0;   // the bucket's state after our reservation (for a refund)
};

/// The sliding window: ask, sleep until the retry_after, ask again, within the deadline,
/// holding a ticket in the key's waiters' queue from the first refusal on (first come,
/// first served across processes; see lua::sliding_log). Nothing is consumed until the
/// script grants; every exit before that (timeout, cancellation, close, the fallback)
/// leaves the queue.
class window_acquire_fsm : public acquire_fsm_base {
public:
    window_acquire_fsm(std::string key, std::uint64_t n, std::int64_t max_wait_ns)
        : acquire_fsm_base(std::move(key), n), max_wait_ns_(std::max<std::int64_t>(0, max_wait_ns))
    {
    }

    template <class Ctx>
    op_step start(Ctx& c, std::int64_t now)
    {
        deadline_ = sluice::detail::sat_add(now, max_wait_ns_);
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
            return fallback_done(c, e);
        if (e || cancelled)
            return settle(c, finish(ended(c.closed()), false));
        return settle(c, ask(c, now, false));
    }

    const std::string& ticket() const noexcept { return ticket_; }

private:
    template <class Ctx>
    op_step decide(Ctx& c, const boost::system::error_code& e, const verdict* v, bool cancelled, round_trip rt,
                   std::int64_t now)
    {
        if (auto s = unusable(c, e, v, cancelled, rt, left(now)))
            return *s;
        if (v->admitted) {
            // Granted permits are consumed whatever happened meanwhile: report them (the
            // script took the ticket out of the queue).
            queued_ = false;
            c.count(true, false);
            return finish({}, false);
        }
        queued_ = true;
        if (cancelled || c.closed())
            return finish(ended(!cancelled), false);
        // retry_after is a lower bound (entries only leave the window by time; others may
        // add more), so a wait beyond the deadline cannot end in a grant.
        std::int64_t wait_ns = sluice::detail::sat_mul(static_cast<std::uint64_t>(v->wait_us), 1000);
        if (wait_ns > left(now)) {
            c.count(false, false);
            return finish(error::timed_out, false);
        }
        st_ = state::sleeping;
        return op_step::sleep(wait_ns);
    }

    template <class Ctx>
    op_step ask(Ctx& c, std::int64_t now, bool initiating)
    {
        if (auto ec = c.check(n_))
            return finish(ec, initiating);
        if (!c.route())
            return by_policy(c, left(now), initiating);
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

    std::int64_t left(std::int64_t now) const noexcept
    {
        std::int64_t l = sluice::detail::sat_sub(deadline_, now);
        return l < 0 ? 0 : l;
    }

    std::int64_t max_wait_ns_;
    std::int64_t deadline_ = 0;   // Clock ns
    std::string ticket_;
    bool queued_ = false;         // the ticket may be in the queue
};

/// A change of a key's configuration (set_rate, set_burst, set_limit, set_window): one
/// script call; the failure policy does not apply (a change Redis did not see did not
/// happen).
class configure_fsm : public acquire_fsm_base {
public:
    /// `invalid`: the request's own error (a bad rate or burst), reported without a call.
    configure_fsm(std::string key, eval_request r, boost::system::error_code invalid)
        : acquire_fsm_base(std::move(key), 1), request_(r), invalid_(invalid)
    {
    }

    static constexpr bool total_cancellation = false;

    template <class Ctx>
    op_step start(Ctx& c, std::int64_t /*now*/)
    {
        if (invalid_)
            return finish(invalid_, true);
        if (c.closed())
            return finish(error::closed, true);
        st_ = state::evaluating;
        return op_step::eval(request_, true);
    }

    template <class Ctx>
    op_step on_reply(Ctx& c, const boost::system::error_code& e, const verdict* v, bool /*cancelled*/,
                     round_trip rt, std::int64_t /*now*/)
    {
        if (unreachable(e)) {
            c.on_unavailable();
            return finish(e, false);
        }
        if (e) {
            c.on_error();
            return finish(e, false);
        }
        if (!v || !v->admitted) {
            c.on_error();
            return finish(error::protocol_error, false);
        }
        c.on_reply(*v, rt);
        return finish({}, false);
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
