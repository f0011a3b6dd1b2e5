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
///
/// The operations (try_acquire, async_acquire, acquire, acquire_blocking, close, stats) are
/// those of basic_limiter.
///
/// Executor: completion handlers run on their associated executor (the limiter's when they
/// have none), never inside async_acquire or another completion, and never with the
/// limiter's lock held. The limiter's own executor runs its one timer.
///
/// Cancellation: async_acquire honours terminal, partial and total cancellation while it
/// waits: it completes with asio::error::operation_aborted and its reserved slot is given
/// back to the bucket, so the waiters behind it move up. close() and the destructor
/// complete every waiter with error::closed.
///
/// Thread-safety: distinct objects safe; a shared bucket may be used from any number of
/// threads and io_contexts at once. try_acquire is lock-free (a compare-and-swap on the
/// bucket's one word); waiting requests and the setters take a short mutex.
template <class Clock = std::chrono::steady_clock, class Executor = boost::asio::any_io_executor>
class token_bucket : public basic_limiter<policy::gcra, Clock, Executor> {
    using base = basic_limiter<policy::gcra, Clock, Executor>;

public:
    /// The limiter's type on another executor type, as on Asio's I/O objects (what
    /// `use_awaitable_t<>::as_default_on_t` needs).
    template <class OtherExecutor>
    struct rebind_executor {
        /// The same limiter on another executor type.
        using other = token_bucket<Clock, OtherExecutor>;
    };

    /// Throws system_error(error::invalid_limit) for burst 0 or burst * interval beyond 292
    /// years.
    token_bucket(const std::type_identity_t<Executor>& ex, sluice::rate r, std::uint64_t burst, const limiter_options& opts = {})
        : base(ex, r, burst, opts)
    {
    }

    /// The same, on the executor of an execution context (an io_context).
    template <detail::execution_context_ref Context>
    token_bucket(Context& ctx, sluice::rate r, std::uint64_t burst, const limiter_options& opts = {})
        : base(Executor(ctx.get_executor()), r, burst, opts)
    {
    }

    /// Changes the rate, counting what was consumed in permits: the permits available now
    /// are kept (capped by the burst), and queued waiters are rescheduled under the new
    /// rate (their debt, the same number of permits, is repaid at it). Thread-safe.
    void set_rate(sluice::rate r)
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

    /// The rate the bucket refills at.
    sluice::rate rate() const noexcept { return this->policy().rate(); }
    /// The most permits the bucket holds, and so the largest grantable request.
    std::uint64_t burst() const noexcept { return this->policy().burst(); }

    /// One bucket's configuration, for keyed limiters: the policy's constructor arguments.
    using policy_config = std::tuple<sluice::rate, std::uint64_t>;

    /// The policy_config of a bucket built with these arguments (keyed's constructor
    /// and set_override take them).
    static policy_config policy_args(sluice::rate r, std::uint64_t burst) { return {r, burst}; }

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
