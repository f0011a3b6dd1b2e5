// Asynchronous time wheel: a sliding window counted in slots, bounded memory.
#pragma once

#include <sluice/basic_limiter.hpp>
#include <sluice/policy/slot_ring.hpp>

#include <tuple>

namespace sluice {

/// Asynchronous time wheel (policy::slot_ring): never more than `limit` permits in any
/// `slots` consecutive slots of `slot_duration`. A ring of per-slot counters; a short
/// critical section per decision. Waiters are retried when old slots leave the turn.
///
/// The operations (try_acquire, async_acquire, acquire, acquire_blocking, close, stats) are
/// those of basic_limiter.
///
/// Executor: completion handlers run on their associated executor (the limiter's when they
/// have none), never inside async_acquire or another completion, and never with the
/// limiter's lock held. The limiter's own executor runs its one timer, armed for the time
/// the head of the queue may be granted.
///
/// Cancellation: async_acquire honours terminal, partial and total cancellation while it
/// waits: it completes with asio::error::operation_aborted, having consumed nothing (a
/// waiter holds no reservation), and the waiters behind it move up. close() and the
/// destructor complete every waiter with error::closed.
///
/// Thread-safety: distinct objects safe; a shared limiter may be used from any number of
/// threads and io_contexts at once. try_acquire takes the policy's mutex for a short
/// critical section; waiting requests and set_limit take the limiter's.
template <class Clock = std::chrono::steady_clock, class Executor = boost::asio::any_io_executor>
class time_wheel : public basic_limiter<policy::slot_ring, Clock, Executor> {
    using base = basic_limiter<policy::slot_ring, Clock, Executor>;

public:
    /// The limiter's type on another executor type, as on Asio's I/O objects (what
    /// `use_awaitable_t<>::as_default_on_t` needs).
    template <class OtherExecutor>
    struct rebind_executor {
        /// The same limiter on another executor type.
        using other = time_wheel<Clock, OtherExecutor>;
    };

    /// At most `limit` permits per `slots` slots of `slot_duration`. Throws
    /// system_error(error::invalid_limit) for a limit outside the policy's range,
    /// error::invalid_rate for a slot_duration <= 0 or a slot count outside its range.
    time_wheel(const std::type_identity_t<Executor>& ex, std::uint64_t limit, std::chrono::nanoseconds slot_duration,
       std::uint32_t slots, const limiter_options& opts = {})
        : base(ex, limit, slot_duration, slots, opts)
    {
    }

    /// The same, on the executor of an execution context (an io_context).
    template <detail::execution_context_ref Context>
    time_wheel(Context& ctx, std::uint64_t limit, std::chrono::nanoseconds slot_duration, std::uint32_t slots,
       const limiter_options& opts = {})
        : base(Executor(ctx.get_executor()), limit, slot_duration, slots, opts)
    {
    }

    /// One wheel's configuration, for keyed limiters: the policy's constructor arguments.
    using policy_config = std::tuple<std::uint64_t, std::chrono::nanoseconds, std::uint32_t>;

    /// The policy_config of a wheel built with these arguments (keyed's constructor and
    /// set_override take them).
    static policy_config policy_args(std::uint64_t limit, std::chrono::nanoseconds slot_duration, std::uint32_t slots)
    {
        return {limit, slot_duration, slots};
    }

    /// Applies `c` to a live wheel: a new limit at once. Its slots cannot change while it
    /// is in use: system_error(error::invalid_option).
    static void apply_config(policy::slot_ring& p, std::int64_t, const policy_config& c)
    {
        if (std::get<1>(c) != p.slot_duration() || std::get<2>(c) != p.slots())
            throw boost::system::system_error(make_error_code(error::invalid_option));
        p.set_limit(std::get<0>(c));
    }

    /// Changes the limit; permits already counted stay counted and waiters are retried
    /// under the new limit. Thread-safe.
    void set_limit(std::uint64_t limit)
    {
        this->reconfigure([limit](policy::slot_ring& p, std::int64_t) { p.set_limit(limit); });
    }

    /// The most permits granted in any `slots` consecutive slots.
    std::uint64_t limit() const noexcept { return this->policy().limit(); }
    /// The length of one slot.
    std::chrono::nanoseconds slot_duration() const noexcept { return this->policy().slot_duration(); }
    /// Slots in one turn of the wheel.
    std::uint32_t slots() const noexcept { return this->policy().slots(); }
    /// One turn: slots() * slot_duration().
    std::chrono::nanoseconds window() const noexcept { return this->policy().window(); }
};

} // namespace sluice
