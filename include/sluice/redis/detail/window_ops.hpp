// async_acquire of the Redis sliding window: the log cannot reserve ahead, so a refused
// request sleeps on a local timer until the script's retry_after and asks again.
#pragma once

#include <sluice/detail/arith.hpp>
#include <sluice/error.hpp>
#include <sluice/redis/detail/bucket_ops.hpp>
#include <sluice/redis/detail/limiter_core.hpp>
#include <sluice/redis/detail/verdict.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/cancellation_state.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace sluice::redis::detail {

/// void(error_code). Nothing is consumed until the script grants, so every exit before
/// that (timeout, cancellation, close) leaves Redis untouched.
template <class Core>
struct window_acquire_op {
    enum class state { start, posted, evaluating, sleeping, falling_back };

    window_acquire_op(std::shared_ptr<Core> c, std::string k, std::uint64_t count, std::int64_t max_wait)
        : core(std::move(c)), key(std::move(k)), n(count), max_wait_ns(max_wait)
    {
    }

    std::shared_ptr<Core> core;
    std::string key;
    std::uint64_t n;
    std::int64_t max_wait_ns;
    std::int64_t deadline = 0;   // Clock ns
    std::int64_t sent_us = 0;
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
        if (st == state::start) {
            self.reset_cancellation_state(boost::asio::enable_total_cancellation());
            deadline = sluice::detail::sat_add(now(), max_wait_ns);
        }
        ec = core->check(n);
        if (!ec) {
            if (core->route()) {
                st = state::evaluating;
                sent_us = system_now_us();
                Core& c = *core;
                std::vector<std::string> keys{key};
                std::vector<std::string> args = c.try_args(n, false);
                // Not cancellable while in flight: a grant cannot be taken back, so the
                // reply decides (bounded by the client's command timeout).
                c.client().async_eval(c.try_script(), std::move(keys), std::move(args),
                                      boost::asio::bind_cancellation_slot(boost::asio::cancellation_slot(), std::move(self)));
                return;
            }
            if (acquire_locally(*this, self, left()))
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
            if (!acquire_locally(*this, self, left())) self.complete(ec);
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
        if (v->allowed) {
            // Granted permits are consumed whatever happened meanwhile: report them.
            core->count(true, false);
            return self.complete(boost::system::error_code{});
        }
        if (cancelled) return self.complete(boost::asio::error::operation_aborted);
        if (core->closed()) return self.complete(error::closed);
        // retry_after is a lower bound (entries only leave the window by time; others may
        // add more), so a wait beyond the deadline cannot end in a grant.
        std::int64_t wait_ns = sluice::detail::sat_mul(static_cast<std::uint64_t>(v->wait_us), 1000);
        if (wait_ns > left()) {
            core->count(false, false);
            return self.complete(error::would_exceed_timeout);
        }
        st = state::sleeping;
        timer = std::make_unique<typename Core::waiting_timer>(core);
        timer->timer().expires_after(std::chrono::nanoseconds{wait_ns + jitter(wait_ns, left() - wait_ns)});
        timer->timer().async_wait(std::move(self));
    }

    // The local timer, or the fallback limiter.
    template <class Self>
    void operator()(Self& self, boost::system::error_code e)
    {
        if (st == state::falling_back)
            return locally_acquired(*this, self, e);
        timer.reset();
        if (e || self.cancelled() != boost::asio::cancellation_type::none)
            return self.complete(core->closed() ? make_error_code(error::closed)
                                                : boost::system::error_code(boost::asio::error::operation_aborted));
        (*this)(self);   // ask again
    }

    // Every waiter of a key is told the same instant, and the first to ask then wins:
    // without a random delay the process with the shortest round trip would win every
    // time. Up to 2 ms (and within the deadline), small against any useful window.
    static std::int64_t jitter(std::int64_t wait_ns, std::int64_t slack_ns)
    {
        thread_local std::minstd_rand rng(std::random_device{}());
        std::int64_t cap = std::min<std::int64_t>({2'000'000, wait_ns, slack_ns});
        if (cap <= 0) return 0;
        return std::uniform_int_distribution<std::int64_t>(0, cap)(rng);
    }

    std::int64_t left() const noexcept
    {
        std::int64_t l = sluice::detail::sat_sub(deadline, now());
        return l < 0 ? 0 : l;
    }

    static std::int64_t now() noexcept
    {
        using clock = typename Core::timer_type::clock_type;
        return std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now().time_since_epoch()).count();
    }
};

} // namespace sluice::redis::detail
