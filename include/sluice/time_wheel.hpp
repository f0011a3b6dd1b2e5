// Asynchronous time wheel: a sliding window counted in slots, bounded memory.
#pragma once

#include <sluice/basic_limiter.hpp>
#include <sluice/policy/time_wheel.hpp>

#include <tuple>

namespace sluice {

/// Asynchronous time wheel (policy::time_wheel): never more than `limit` permits in any
/// `slots` consecutive slots of `slot_duration`. A ring of per-slot counters; a short
/// critical section per decision. Waiters are retried when old slots leave the turn.
template <class Clock = std::chrono::steady_clock, class Executor = boost::asio::any_io_executor>
class time_wheel : public basic_limiter<policy::time_wheel, Clock, Executor> {
    using base = basic_limiter<policy::time_wheel, Clock, Executor>;

public:
    template <class OtherExecutor>
    struct rebind_executor {
        /// The same limiter on another executor type.
        using other = time_wheel<Clock, OtherExecutor>;
    };

    /// At most `limit` permits per `slots` slots of `slot_duration`. Throws
    /// system_error(error::invalid_burst) for a limit outside the policy's range,
    /// error::invalid_rate for a slot_duration <= 0 or a slot count outside its range.
    time_wheel(const std::type_identity_t<Executor>& ex, std::uint64_t limit, std::chrono::nanoseconds slot_duration,
       std::uint32_t slots, const limiter_options& opts = {})
        : base(ex, limit, slot_duration, slots, opts)
    {
    }

    template <detail::execution_context_ref Context>
    time_wheel(Context& ctx, std::uint64_t limit, std::chrono::nanoseconds slot_duration, std::uint32_t slots,
       const limiter_options& opts = {})
        : base(Executor(ctx.get_executor()), limit, slot_duration, slots, opts)
    {
    }

    /// One wheel's configuration, for keyed limiters: the policy's constructor arguments.
    using policy_config = std::tuple<std::uint64_t, std::chrono::nanoseconds, std::uint32_t>;

    static policy_config policy_args(std::uint64_t limit, std::chrono::nanoseconds slot_duration, std::uint32_t slots)
    {
        return {limit, slot_duration, slots};
    }

    /// Applies `c` to a live wheel: a new limit at once. Its slots cannot change while it
    /// is in use: system_error(error::invalid_option).
    static void apply_config(policy::time_wheel& p, std::int64_t, const policy_config& c)
    {
        if (std::get<1>(c) != p.slot_duration() || std::get<2>(c) != p.slots())
            throw boost::system::system_error(make_error_code(error::invalid_option));
        p.set_limit(std::get<0>(c));
    }

    /// Changes the limit; permits already counted stay counted and waiters are retried
    /// under the new limit. Thread-safe.
    void set_limit(std::uint64_t limit)
    {
        this->reconfigure([limit](policy::time_wheel& p, std::int64_t) { p.set_limit(limit); });
    }

    std::uint64_t limit() const noexcept { return this->policy().limit(); }
    std::chrono::nanoseconds slot_duration() const noexcept { return this->policy().slot_duration(); }
    std::uint32_t slots() const noexcept { return this->policy().slots(); }
    std::chrono::nanoseconds window() const noexcept { return this->policy().window(); }
};

} // namespace sluice
