// State of a Redis token bucket on top of shared_backend: the GCRA scripts and their fixed
// arguments, refunds and the leases.
#pragma once

#include <sluice/admission.hpp>
#include <sluice/error.hpp>
#include <sluice/rate.hpp>
#include <sluice/redis/detail/store/lease_book.hpp>
#include <sluice/redis/detail/store/shared_backend.hpp>
#include <sluice/redis/detail/store/op_step.hpp>
#include <sluice/redis/detail/store/redis_op.hpp>
#include <sluice/redis/detail/store/try_fsm.hpp>
#include <sluice/redis/detail/store/verdict.hpp>
#include <sluice/redis/shared_options.hpp>
#include <sluice/redis/scripts.hpp>
#include <sluice/redis/script.hpp>

#include <boost/asio/compose.hpp>
#include <boost/asio/detached.hpp>
#include <boost/system/system_error.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace sluice::redis::detail {

using sluice::detail::admission_access;

/// `Fallback`: the local keyed limiter that decides while Redis is away (a keyed token
/// bucket, given by redis::token_bucket: the store does not include a limiter).
template <class Client, class Clock, class Fallback>
class bucket_backend
    : public shared_backend<Client, Clock, Fallback>,
      public std::enable_shared_from_this<bucket_backend<Client, Clock, Fallback>> {
    using base_type = shared_backend<Client, Clock, Fallback>;
    using base_type::mutex_;

public:
    using typename base_type::executor_type;
    using typename base_type::fallback_type;

    static constexpr bool can_lease = true;
    static constexpr script_kind replies = script_kind::gcra;
    using base_type::now;

    bucket_backend(Client& client, rate r, std::uint64_t burst, shared_options opts)
        : base_type(client, std::move(opts), static_cast<std::uint64_t>(lua::max_span_us),
                    [&](const executor_type& ex, const shared_options& o) {
                        return fallback_type(ex, fallback_rate(to_us(r, burst), o.expected_nodes),
                                             std::max<std::uint64_t>(1, burst / o.expected_nodes), o.fallback);
                    }),
          gcra_(std::string(lua::gcra)),
          refund_(std::string(lua::gcra_refund)),
          configure_(std::string(lua::gcra_configure)),
          settle_(std::string(lua::gcra_settle)),
          interval_us_(to_us(r, burst)),
          burst_(burst),
          interval_arg_(std::to_string(interval_us_)),
          burst_arg_(std::to_string(burst))
    {
    }

    const script& script_for(const eval_request& r) const noexcept
    {
        return r.how == eval_request::mode::configure ? configure_ : gcra_;
    }

    // A request's script call: one for each, its reply completes `h`.
    template <class Handler>
    void async_decide(const std::string& key, const eval_request& r, bool cancellable, Handler&& h)
    {
        this->eval(script_for(r), base_type::keys(key), args(r), cancellable, std::forward<Handler>(h));
    }

    // The script's arguments: this limiter's interval and burst (the key's configuration
    // in Redis, when it has one, replaces them), then the request.
    std::vector<std::string> args(const eval_request& r) const
    {
        if (r.how == eval_request::mode::configure)
            return {interval_arg_, burst_arg_, std::to_string(r.new_span_us), std::to_string(r.new_count)};
        static constexpr const char* modes[] = {"try", "reserve", "lease"};
        return {interval_arg_, burst_arg_, std::to_string(r.n), std::to_string(r.max_wait_us),
                r.peek ? "peek" : modes[static_cast<int>(r.how)]};
    }

    // set_rate / set_burst: the request, or the error of a bad value (bad_span for an
    // interval out of range).
    static constexpr error bad_span = error::invalid_rate;
    static std::pair<eval_request, boost::system::error_code> configure_request(std::int64_t interval_ns, std::uint64_t burst)
    {
        return detail::configure_request(interval_ns, burst, static_cast<std::uint64_t>(lua::max_span_us), lua::max_span_us,
                                        bad_span);
    }

    std::chrono::microseconds interval() const noexcept { return std::chrono::microseconds{interval_us_}; }
    std::uint64_t burst() const noexcept { return burst_; }

    // Gives a reservation back in Redis where nothing later depends on it (fire and
    // forget: a refund that fails only leaves the permits consumed).
    void refund(const std::string& key, std::uint64_t n, std::int64_t state)
    {
        base_type::send(this->shared_from_this(), refund_, this->keys(key),
                        {interval_arg_, burst_arg_, std::to_string(n), std::to_string(state)});
    }

    // Tickets: the key's bytes, the cost, and when (this host's clock). The epoch is 0:
    // a key's configuration lives in Redis and settle uses the one in force there.
    admission admitted(const std::string& key, std::uint64_t n)
    {
        decision d;
        d.admitted = true;
        return admitted(key, n, d);
    }

    admission admitted(const std::string& key, std::uint64_t n, const decision& d)
    {
        return admission_access::make(this, 0, n, now(), d, key);
    }

    // settle: the error of a ticket this limiter cannot settle (the ticket is settled
    // whatever the answer), else the script call that settles it, its reply to `h`.
    boost::system::error_code settle_check(admission& a) const noexcept
    {
        auto ec = admission_access::check(a, this, 0);
        if (!ec && this->closed()) ec = make_error_code(error::closed);
        if (admission_access::live(a)) admission_access::mark_settled(a);
        return ec;
    }

    template <class Handler>
    void async_settle_call(const admission& a, std::uint64_t actual, Handler&& h)
    {
        this->eval(settle_, base_type::keys(this->key_for(admission_access::key(a))),
                   {interval_arg_, burst_arg_, std::to_string(admission_access::cost(a)), std::to_string(actual)}, false,
                   std::forward<Handler>(h));
    }

    bool leasing() const noexcept { return this->options().lease_size > 0; }

    // How far ahead a lease may reserve: lease_ttl, in whole us.
    std::int64_t lease_horizon_us() const noexcept
    {
        return std::chrono::duration_cast<std::chrono::microseconds>(this->options().lease_ttl).count();
    }

    // Leasing: the book of `key` decides (see lease_book), at the operation's `now`.
    lease_book::take_result lease_take(const std::string& key, std::uint64_t n, std::int64_t now)
    {
        std::lock_guard lock(mutex_);
        return leases_[key].take(limits(), n, now);
    }

    lease_book::take_result lease_fill(const std::string& key, std::uint64_t n, const verdict& v, std::int64_t rtt_ns,
                                       std::int64_t now)
    {
        std::lock_guard lock(mutex_);
        return leases_[key].fill(limits(), n, v, now, rtt_ns);
    }

    void lease_failed(const std::string& key)
    {
        std::lock_guard lock(mutex_);
        leases_[key].failed();
    }

    // Reserves `count` more slots of `key` in the background (claimed in its book).
    void prefetch(const std::string& key, std::uint64_t count)
    {
        auto self = this->shared_from_this();
        auto ex = this->client().get_executor();
        boost::asio::async_compose<const boost::asio::detached_t&, void(boost::system::error_code, decision)>(
            redis_op<bucket_backend, try_fsm>{std::move(self), try_fsm::prefetch(key, count)}, boost::asio::detached, ex);
    }

    limiter_stats stats() const
    {
        limiter_stats s = base_type::stats();
        std::lock_guard lock(mutex_);
        s.backend.lease_expired = expired_closed_;
        for (const auto& [k, e] : leases_)
            s.backend.lease_expired += e.expired();
        return s;
    }

    // Slots leased and not used yet, all keys together.
    std::uint64_t leased() const
    {
        std::int64_t t = now();
        std::lock_guard lock(mutex_);
        std::uint64_t sum = 0;
        for (const auto& [k, e] : leases_)
            sum += e.held(limits(), t);
        return sum;
    }

    // Wakes every waiting request (they complete with error::closed and give their
    // reservations back), gives unused leases back and closes the fallback; later
    // requests fail with error::closed.
    void close()
    {
        if (!this->mark_closed())
            return;
        this->engine().close();
        std::vector<std::pair<std::string, lease_give_back>> unused;
        {
            std::int64_t t = now();
            std::lock_guard lock(mutex_);
            for (auto& [k, e] : leases_)
                if (auto g = e.close(limits(), t); g.count > 0)
                    unused.emplace_back(k, g);
            for (auto& [k, e] : leases_)
                expired_closed_ += e.expired();
            leases_.clear();
        }
        for (auto& [k, g] : unused)
            refund(k, g.count, g.state);
        this->fallback().close();
    }

private:
    lease_limits limits() const noexcept
    {
        return {interval_us_ * 1000, std::chrono::duration_cast<std::chrono::nanoseconds>(this->options().lease_ttl).count(),
                this->options().lease_size};
    }

    // The server counts in whole microseconds: the interval is rounded up (never faster
    // than asked), and the scripts' limit on burst * interval applies.
    static std::int64_t to_us(rate r, std::uint64_t burst)
    {
        std::int64_t ns = r.interval().count();
        std::int64_t us = ceil_us(ns);
        if (us > lua::max_span_us)
            throw boost::system::system_error(make_error_code(error::invalid_rate));
        if (burst == 0 || burst > static_cast<std::uint64_t>(lua::max_span_us / us))
            throw boost::system::system_error(make_error_code(error::invalid_limit));
        return us;
    }

    static rate fallback_rate(std::int64_t interval_us, std::uint64_t nodes)
    {
        std::int64_t ns = interval_us * 1000;
        if (nodes > static_cast<std::uint64_t>(INT64_MAX / ns))
            throw boost::system::system_error(make_error_code(error::invalid_option));
        return rate::every(std::chrono::nanoseconds{ns * static_cast<std::int64_t>(nodes)});
    }

    script gcra_;
    script refund_;
    script configure_;
    script settle_;
    std::int64_t interval_us_;
    std::uint64_t burst_;
    std::string interval_arg_;
    std::string burst_arg_;

    std::unordered_map<std::string, lease_book> leases_;
    std::uint64_t expired_closed_ = 0;   // lease_expired of the books close() dropped
};

} // namespace sluice::redis::detail
