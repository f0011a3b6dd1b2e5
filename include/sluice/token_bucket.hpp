// Token bucket: up to `burst` permits at once, refilled at `rate`.
#pragma once

#include <sluice/basic_limiter.hpp>
#include <sluice/policy/gcra.hpp>
#include <sluice/rate.hpp>

#include <tuple>
#include <utility>

namespace sluice {

/// Asynchronous token bucket on GCRA (policy::gcra): one atomic word, lock-free
/// try_acquire, reservations committed when a waiter queues.
///
///     sluice::token_bucket bucket(io, sluice::rate::per_second(100), 10);
///     if (co_await bucket.acquire(250ms)) { ... }
template <class Clock = std::chrono::steady_clock, class Executor = boost::asio::any_io_executor>
class token_bucket : public basic_limiter<policy::gcra, Clock, Executor> {
    using base = basic_limiter<policy::gcra, Clock, Executor>;

public:
    template <class OtherExecutor>
    struct rebind_executor {
        /// The same limiter on another executor type.
        using other = token_bucket<Clock, OtherExecutor>;
    };

    /// Throws system_error(error::invalid_burst) for burst 0 or burst * interval beyond 292
    /// years.
    token_bucket(const std::type_identity_t<Executor>& ex, rate r, std::uint64_t burst, const limiter_options& opts = {})
        : base(ex, r, burst, opts)
    {
    }

    template <detail::execution_context_ref Context>
    token_bucket(Context& ctx, rate r, std::uint64_t burst, const limiter_options& opts = {})
        : base(Executor(ctx.get_executor()), r, burst, opts)
    {
    }

    /// Changes the rate, counting what was consumed in permits: the permits available now
    /// are kept (capped by the burst), and queued waiters are rescheduled under the new
    /// rate (their debt, the same number of permits, is repaid at it). Thread-safe.
    void set_rate(rate r)
    {
        this->reconfigure([r](policy::gcra& p, std::int64_t now) { return p.set_rate(r, now); });
    }

    /// Changes the burst. The permits available now are kept, capped by the new burst: a
    /// bucket that grows refills to it at the rate; queued waiters keep their slots.
    /// Thread-safe.
    void set_burst(std::uint64_t burst)
    {
        this->reconfigure([burst](policy::gcra& p, std::int64_t now) {
            p.set_burst(burst, now);
            return std::pair<std::int64_t, std::int64_t>{1, 1};
        });
    }

    rate get_rate() const noexcept { return this->policy().get_rate(); }
    std::uint64_t burst() const noexcept { return this->policy().burst(); }

    /// One bucket's configuration, for keyed limiters: the policy's constructor arguments.
    using policy_config = std::tuple<rate, std::uint64_t>;

    static policy_config policy_args(rate r, std::uint64_t burst) { return {r, burst}; }

    /// Applies `c` to a live bucket, keeping what it has consumed, in permits (see set_rate
    /// and set_burst).
    static std::pair<std::int64_t, std::int64_t> apply_config(policy::gcra& p, std::int64_t now, const policy_config& c)
    {
        auto factor = p.set_rate(std::get<0>(c), now);
        p.set_burst(std::get<1>(c), now);
        return factor;
    }
};

} // namespace sluice
