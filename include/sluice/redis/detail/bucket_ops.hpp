// The asynchronous operations of the Redis token bucket, as composed operations: one
// script round trip, then (acquire) a local timer until the reserved slot. try_op serves
// every Redis limiter (Core: a limiter_core with try_script(), try_args() and can_lease).
#pragma once

#include <sluice/error.hpp>
#include <sluice/redis/detail/limiter_core.hpp>
#include <sluice/redis/detail/verdict.hpp>
#include <sluice/redis/scripts.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/cancellation_state.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sluice::redis::detail {

inline bool unreachable(const boost::system::error_code& ec) noexcept
{
    return ec == error::backend_unavailable || ec == error::timed_out;
}

/// async_try_acquire: void(error_code, decision).
template <class Core>
struct try_op {
    try_op(std::shared_ptr<Core> c, std::string k, std::uint64_t count)
        : core(std::move(c)), key(std::move(k)), n(count)
    {
    }

    std::shared_ptr<Core> core;
    std::string key;
    std::uint64_t n;
    std::int64_t sent_us = 0;
    bool posted = false;
    bool leasing = false;
    boost::system::error_code ec;
    decision d;

    template <class Self>
    void operator()(Self& self)
    {
        if (posted) {
            self.complete(ec, d);
            return;
        }
        ec = core->check(n);
        if (!ec) {
            if (core->route()) {
                if constexpr (Core::can_lease) {
                    if (core->leasing()) {
                        auto step = core->lease_take(key, n, d);
                        if (step != Core::lease_step::fetch) {
                            if (step == Core::lease_step::local_prefetch)
                                core->prefetch(key);
                            core->count(d.allowed, false);
                            posted = true;
                            boost::asio::post(std::move(self));
                            return;
                        }
                        leasing = true;
                    }
                }
                sent_us = system_now_us();
                Core& c = *core;
                std::vector<std::string> keys{key};
                std::vector<std::string> args = c.try_args(n, leasing);
                c.client().async_eval(c.try_script(), std::move(keys), std::move(args), std::move(self));
                return;
            }
            decide_locally();
        }
        // Never complete inside the initiating call.
        posted = true;
        boost::asio::post(std::move(self));
    }

    template <class Self, class Reply>
    void operator()(Self& self, boost::system::error_code e, Reply r)
    {
        auto v = e ? std::nullopt : parse_verdict(r);
        if constexpr (Core::can_lease) {
            if (leasing && !v)
                core->lease_failed(key);
        }
        if (unreachable(e)) {
            core->on_unavailable();
            decide_locally();
        } else if (e) {
            core->on_error();
            ec = e;
        } else if (v) {
            core->on_reply(*v, sent_us);
            d = to_decision(*v);
            if constexpr (Core::can_lease) {
                if (leasing) {
                    d = core->lease_fill(key, n, core->lease_count(n), *v);
                    if (v->allowed && core->lease_claim_prefetch(key))
                        core->prefetch(key);
                }
            }
            core->count(d.allowed, false);
        } else {
            core->on_error();
            ec = error::protocol_error;
        }
        self.complete(ec, d);
    }

    void decide_locally()
    {
        switch (core->options().on_failure) {
        case failure_policy::fail_closed:
            ec = error::backend_unavailable;
            return;
        case failure_policy::fail_open:
            d = decision{};
            d.allowed = true;
            break;
        case failure_policy::local_fallback:
            d = core->fallback().try_acquire(key, n);
            break;
        }
        core->count(d.allowed, true);
    }
};

/// A waiting request while Redis is unreachable: applies the failure policy. Op has
/// core, key, n, ec and a `state` with falling_back. True when a wait on the local
/// fallback was started (it completes `self` with void(error_code), then
/// locally_acquired() finishes); false when op.ec is the result.
template <class Op, class Self>
bool acquire_locally(Op& op, Self& self, std::int64_t max_wait_ns)
{
    switch (op.core->options().on_failure) {
    case failure_policy::fail_closed:
        op.ec = error::backend_unavailable;
        return false;
    case failure_policy::fail_open:
        op.core->count(true, true);
        op.ec = {};
        return false;
    case failure_policy::local_fallback:
        op.st = Op::state::falling_back;
        // The key is copied: `self` (holding op) moves into the operation.
        std::string k = op.key;
        auto& fallback = op.core->fallback();
        fallback.async_acquire(k, op.n, std::chrono::nanoseconds{max_wait_ns}, std::move(self));
        return true;
    }
    return false;
}

template <class Op, class Self>
void locally_acquired(Op& op, Self& self, boost::system::error_code e)
{
    if (!e || e == error::would_exceed_timeout)
        op.core->count(!e, true);
    self.complete(e);
}

/// async_acquire: void(error_code). Reserves in Redis, then waits on a local timer.
template <class Core>
struct bucket_acquire_op {
    enum class state { start, posted, evaluating, sleeping, falling_back };

    bucket_acquire_op(std::shared_ptr<Core> c, std::string k, std::uint64_t count, std::int64_t max_wait)
        : core(std::move(c)), key(std::move(k)), n(count), max_wait_ns(max_wait)
    {
    }

    std::shared_ptr<Core> core;
    std::string key;
    std::uint64_t n;
    std::int64_t max_wait_ns;
    std::int64_t sent_us = 0;
    std::int64_t reserved = 0;   // the bucket's state after our reservation (for a refund)
    state st = state::start;
    boost::system::error_code ec;
    std::unique_ptr<typename Core::waiting_timer> timer;

    template <class Self>
    void operator()(Self& self)
    {
        if (st == state::posted) {
            self.complete(ec);
            return;
        }
        self.reset_cancellation_state(boost::asio::enable_total_cancellation());
        ec = core->check(n);
        if (!ec) {
            if (core->route()) {
                st = state::evaluating;
                sent_us = system_now_us();
                Core& c = *core;
                // Built before `self` moves (argument evaluation order is unspecified).
                std::vector<std::string> keys{key};
                std::vector<std::string> args{c.interval_arg(), c.burst_arg(), std::to_string(n), max_wait_arg(), "reserve"};
                // Not cancellable while in flight: the reply says whether a slot was
                // reserved, and only then can it be given back.
                c.client().async_eval(c.gcra_script(), std::move(keys), std::move(args),
                                      boost::asio::bind_cancellation_slot(boost::asio::cancellation_slot(), std::move(self)));
                return;
            }
            if (fall_back(self))
                return;
        }
        st = state::posted;
        boost::asio::post(std::move(self));
    }

    // The script's reply.
    template <class Self, class Reply>
    void operator()(Self& self, boost::system::error_code e, Reply r)
    {
        bool cancelled = self.cancelled() != boost::asio::cancellation_type::none;
        if (unreachable(e)) {
            core->on_unavailable();
            if (cancelled) return self.complete(boost::asio::error::operation_aborted);
            if (core->closed()) return self.complete(error::closed);
            if (!fall_back(self)) self.complete(ec);
            return;
        }
        if (e) {
            core->on_error();
            return self.complete(e);
        }
        auto v = parse_verdict(r);
        if (!v) {
            core->on_error();
            return self.complete(error::protocol_error);
        }
        core->on_reply(*v, sent_us);
        if (!v->allowed) {
            core->count(false, false);
            return self.complete(error::would_exceed_timeout);
        }
        if (cancelled || core->closed()) {
            core->refund(key, n, v->state);
            return self.complete(cancelled ? boost::system::error_code(boost::asio::error::operation_aborted)
                                           : make_error_code(error::closed));
        }
        if (v->wait_us == 0) {
            core->count(true, false);
            return self.complete(boost::system::error_code{});
        }
        // Counted when the reply is in: the slot is ours unless given back.
        core->count(true, false);
        reserved = v->state;
        st = state::sleeping;
        timer = std::make_unique<typename Core::waiting_timer>(core);
        timer->timer().expires_after(std::chrono::microseconds{v->wait_us});
        timer->timer().async_wait(std::move(self));
    }

    // The local timer, or the fallback limiter.
    template <class Self>
    void operator()(Self& self, boost::system::error_code e)
    {
        if (st == state::falling_back)
            return locally_acquired(*this, self, e);
        timer.reset();
        if (e) {
            // Cancelled or closed while waiting: the slot goes back where nothing later
            // depends on it.
            core->refund(key, n, reserved);
            return self.complete(core->closed() ? make_error_code(error::closed)
                                                : boost::system::error_code(boost::asio::error::operation_aborted));
        }
        self.complete(e);
    }

    template <class Self>
    bool fall_back(Self& self)
    {
        return acquire_locally(*this, self, max_wait_ns);
    }

    std::string max_wait_arg() const
    {
        std::int64_t us = max_wait_ns / 1000;   // rounded down: never wait longer than allowed
        if (us > lua::max_span_us) us = lua::max_span_us;
        return std::to_string(us < 0 ? 0 : us);
    }
};

} // namespace sluice::redis::detail
