// State of a Redis token bucket on top of limiter_core: the GCRA scripts and their fixed
// arguments, refunds and the leases.
#pragma once

#include <sluice/error.hpp>
#include <sluice/keyed.hpp>
#include <sluice/rate.hpp>
#include <sluice/redis/detail/limiter_core.hpp>
#include <sluice/redis/detail/verdict.hpp>
#include <sluice/redis/shared_options.hpp>
#include <sluice/redis/scripts.hpp>
#include <sluice/redis/script.hpp>
#include <sluice/token_bucket.hpp>

#include <boost/system/system_error.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace sluice::redis::detail {

template <class Client, class Clock>
class bucket_core
    : public limiter_core<Client, Clock, keyed<token_bucket<Clock, typename Client::executor_type>>>,
      public std::enable_shared_from_this<bucket_core<Client, Clock>> {
    using base_type = limiter_core<Client, Clock, keyed<token_bucket<Clock, typename Client::executor_type>>>;
    using base_type::mutex_;
    using base_type::now;

public:
    using typename base_type::executor_type;
    using typename base_type::fallback_type;

    static constexpr bool can_lease = true;

    bucket_core(Client& client, rate r, std::uint64_t burst, shared_options opts)
        : base_type(client, std::move(opts), burst,
                    [&](const executor_type& ex, const shared_options& o) {
                        return fallback_type(ex, fallback_rate(to_us(r, burst), o.expected_nodes),
                                             std::max<std::uint64_t>(1, burst / o.expected_nodes), o.fallback);
                    }),
          gcra_(std::string(lua::gcra)),
          refund_(std::string(lua::gcra_refund)),
          interval_us_(to_us(r, burst)),
          burst_(burst),
          interval_arg_(std::to_string(interval_us_)),
          burst_arg_(std::to_string(burst))
    {
    }

    const script& gcra_script() const noexcept { return gcra_; }
    const script& try_script() const noexcept { return gcra_; }

    // The arguments of async_try_acquire's script: a lease reserves lease_count(n)
    // permits at most lease_ttl ahead.
    std::vector<std::string> try_args(std::uint64_t n, bool leasing) const
    {
        return {interval_arg_, burst_arg_, std::to_string(leasing ? lease_count(n) : n),
                leasing ? lease_horizon_arg() : std::string("0"), leasing ? "reserve" : "try"};
    }

    const std::string& interval_arg() const noexcept { return interval_arg_; }
    const std::string& burst_arg() const noexcept { return burst_arg_; }
    std::int64_t interval_us() const noexcept { return interval_us_; }
    std::uint64_t burst() const noexcept { return burst_; }

    // Gives a reservation back in Redis where nothing later depends on it (fire and
    // forget: a refund that fails only leaves the permits consumed).
    void refund(const std::string& key, std::uint64_t n, std::int64_t state)
    {
        this->client().async_eval(refund_, {key}, {interval_arg_, burst_arg_, std::to_string(n), std::to_string(state)},
                                  [self = this->shared_from_this()](boost::system::error_code ec, auto&&) {
                                      if (ec) self->on_error();
                                  });
    }

    bool leasing() const noexcept { return this->options().lease_size > 0; }

    // How many permits a lease request for n reserves: lease_size, at least n, at most
    // the burst (a reservation never holds more than the bucket).
    std::uint64_t lease_count(std::uint64_t n) const noexcept
    {
        std::uint64_t k = std::max<std::uint64_t>(this->options().lease_size, n);
        return std::min<std::uint64_t>(k, burst_);
    }

    // How far ahead a lease may reserve: lease_ttl, in whole us.
    std::string lease_horizon_arg() const
    {
        return std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(this->options().lease_ttl).count());
    }

    enum class lease_step { local, local_prefetch, fetch };

    // Leasing: decides locally from the permits this process has reserved for `key`, or
    // from a refusal still in force (`local`; `local_prefetch` when the caller is also to
    // reserve more in the background); `fetch` when this request is to reserve.
    lease_step lease_take(const std::string& key, std::uint64_t n, decision& d)
    {
        std::int64_t t = now();
        std::lock_guard lock(mutex_);
        lease& e = leases_[key];
        d = decision{};
        while (!e.dues.empty() && e.dues.front() + ttl_ns() < t)
            e.dues.pop_front();   // held too long: dropped, never used late
        if (e.dues.size() >= n) {
            take_locked(e, n, t, d);
            return claim_prefetch_locked(e, t) ? lease_step::local_prefetch : lease_step::local;
        }
        if (t < e.retry_at) {
            d.retry_after = std::chrono::nanoseconds{e.retry_at - t};
            return lease_step::local;
        }
        if (e.fetching) {
            // One reservation per key in flight at a time.
            d.retry_after = std::chrono::nanoseconds{spacing_ns()};
            return lease_step::local;
        }
        e.fetching = true;
        return lease_step::fetch;
    }

    // The reply to a reservation of k permits made by a request for n (n = 0: a
    // background prefetch): the slots, one interval apart, end v.wait_us from now.
    decision lease_fill(const std::string& key, std::uint64_t n, std::uint64_t k, const verdict& v)
    {
        std::int64_t t = now();
        std::lock_guard lock(mutex_);
        lease& e = leases_[key];
        e.fetching = false;
        if (!v.allowed) {
            // Refused: the reservation would have been more than lease_ttl ahead.
            e.retry_at = t + std::max(v.wait_us * 1000 - ttl_ns(), spacing_ns());
            decision d = to_decision(v);
            d.retry_after = std::chrono::nanoseconds{e.retry_at - t};
            return d;
        }
        // Measured from the reply, so never earlier than the server's slots; kept in order.
        std::int64_t due = t + v.wait_us * 1000 - static_cast<std::int64_t>(k - 1) * spacing_ns();
        // Slots already past were in the bucket: usable now (and held from now for lease_ttl).
        for (std::uint64_t i = 0; i < k; ++i, due += spacing_ns())
            e.dues.push_back(std::max({due, t, e.dues.empty() ? t : e.dues.back()}));
        e.state = v.state;
        decision d;
        if (n > 0)
            take_locked(e, n, t, d);
        return d;
    }

    // After a reservation: true when the caller is to top the lease up in the background.
    bool lease_claim_prefetch(const std::string& key)
    {
        std::int64_t t = now();
        std::lock_guard lock(mutex_);
        return claim_prefetch_locked(leases_[key], t);
    }

    void lease_failed(const std::string& key)
    {
        std::lock_guard lock(mutex_);
        leases_[key].fetching = false;
    }

    // Reserves lease_count(1) more permits of `key` in the background.
    void prefetch(std::string key)
    {
        std::uint64_t k = lease_count(1);
        std::int64_t sent = system_now_us();
        this->client().async_eval(gcra_, {key}, {interval_arg_, burst_arg_, std::to_string(k), lease_horizon_arg(), "reserve"},
                                  [self = this->shared_from_this(), key, k, sent](boost::system::error_code ec, auto&& r) {
                                      auto v = ec ? std::nullopt : parse_verdict(r);
                                      if (!v) {
                                          self->lease_failed(key);
                                          if (ec == error::backend_unavailable || ec == error::timed_out)
                                              self->on_unavailable();
                                          else
                                              self->on_error();
                                          return;
                                      }
                                      self->on_reply(*v, sent);
                                      self->lease_fill(key, 0, k, *v);
                                      if (v->allowed && self->lease_claim_prefetch(key))
                                          self->prefetch(key);
                                  });
    }

    // Permits leased and not used yet, all keys together.
    std::uint64_t leased() const
    {
        std::int64_t t = now();
        std::lock_guard lock(mutex_);
        std::uint64_t sum = 0;
        for (const auto& [k, e] : leases_)
            for (std::int64_t due : e.dues)
                if (due + ttl_ns() >= t) ++sum;
        return sum;
    }

    // Wakes every waiting request (they complete with error::closed and give their
    // reservations back), gives unused leases back and closes the fallback; later
    // requests fail with error::closed.
    void close()
    {
        if (!this->mark_closed())
            return;
        std::vector<std::pair<std::string, lease>> unused;
        {
            std::int64_t t = now();
            std::lock_guard lock(mutex_);
            this->wake_waiters_locked();
            for (auto& [k, e] : leases_)
                if (!e.dues.empty() && t <= e.dues.back() + ttl_ns())
                    unused.emplace_back(k, e);
            leases_.clear();
        }
        for (auto& [k, e] : unused)
            refund(k, e.dues.size(), e.state);
        this->fallback().close();
    }

private:
    std::int64_t spacing_ns() const noexcept { return interval_us_ * 1000; }
    std::int64_t ttl_ns() const noexcept { return std::chrono::duration_cast<std::chrono::nanoseconds>(this->options().lease_ttl).count(); }

    struct lease;
    bool claim_prefetch_locked(lease& e, std::int64_t t) const noexcept
    {
        if (e.fetching || t < e.retry_at || e.dues.size() >= this->options().lease_size)
            return false;
        e.fetching = true;
        return true;
    }

    void take_locked(lease& e, std::uint64_t n, std::int64_t t, decision& d) noexcept
    {
        std::int64_t due = e.dues[n - 1];
        if (due <= t) {
            e.dues.erase(e.dues.begin(), e.dues.begin() + static_cast<std::ptrdiff_t>(n));
            d.allowed = true;
            d.remaining = e.dues.size();
        } else {
            d.retry_after = std::chrono::nanoseconds{due - t};
        }
    }

    // The server counts in whole microseconds: the interval is rounded up (never faster
    // than asked), and the scripts' limit on burst * interval applies.
    static std::int64_t to_us(rate r, std::uint64_t burst)
    {
        std::int64_t ns = r.interval().count();
        std::int64_t us = ns / 1000 + (ns % 1000 != 0 ? 1 : 0);
        if (us > lua::max_span_us)
            throw boost::system::system_error(make_error_code(error::invalid_rate));
        if (burst == 0 || burst > static_cast<std::uint64_t>(lua::max_span_us / us))
            throw boost::system::system_error(make_error_code(error::invalid_burst));
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
    std::int64_t interval_us_;
    std::uint64_t burst_;
    std::string interval_arg_;
    std::string burst_arg_;

    struct lease {
        std::deque<std::int64_t> dues;   // Clock ns: when each reserved permit may be used
        std::int64_t retry_at = 0;       // Clock ns: refused locally until then
        std::int64_t state = 0;      // the bucket's state after our last lease (refund)
        bool fetching = false;
    };

    std::unordered_map<std::string, lease> leases_;
};

} // namespace sluice::redis::detail
