// A limiter whose rate follows the server: a token bucket that an adaptive_rate_controller
// moves, paused while the server has asked for a pause.
#pragma once

#include <sluice/adaptive_rate_controller.hpp>
#include <sluice/limiter_stats.hpp>
#include <sluice/policy/gcra.hpp>
#include <sluice/policy/pausable.hpp>
#include <sluice/rate_limiter.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>

namespace sluice {

namespace detail {

/// What adaptive_rate adds to its bucket: the controller, behind a mutex (on_response may
/// be called from any thread). Held apart so that the limiter stays movable.
struct adaptive_rate_control {
    explicit adaptive_rate_control(adaptive_rate_options opts)
        : state(std::make_unique<state_type>(std::move(opts)))
    {
    }

    struct state_type {
        explicit state_type(adaptive_rate_options opts) : controller(std::move(opts)) {}
        std::mutex mutex;
        adaptive_rate_controller controller;   // under mutex
    };

    std::unique_ptr<state_type> state;
};

} // namespace detail

/// A limiter whose rate follows what the server says: RateLimit / RateLimit-Policy fields
/// when it sends them, a pause on 429 or 503 with Retry-After, AIMD when it sends nothing
/// but refusals; always within [floor, ceiling]. See adaptive_rate_controller for the
/// control laws and benchmarks/RESULTS.md for what they reach in simulation.
///
///     sluice::adaptive_rate_options o;
///     o.initial = sluice::rate::per_second(50);
///     o.ceiling = sluice::rate::per_second(500);
///     sluice::adaptive_rate limiter(io, o);
///     co_await limiter.acquire();
///     auto res = co_await send(request);
///     limiter.on_response({res.result_int(), res["RateLimit-Policy"], res["RateLimit"], res["Retry-After"]});
///
/// It is a rate_limiter over a token bucket of `burst` (default 1: evenly spaced) at the
/// adapted rate, paused while the server asked for a pause (policy::pausable): every
/// operation, and every guarantee of the one wait engine, is rate_limiter's. Requests wait
/// in one FIFO; a pause makes the waiters give back their slots and queue again behind it
/// in the same order (those it makes wait past their max_wait complete with
/// error::timed_out); a request whose max_wait the pause alone outlasts fails at once with
/// error::timed_out, nothing consumed. stats() adds the controller's counters (the adaptive
/// group of limiter_stats). acquire_blocking is not offered: a blocked thread would not see
/// a pause that begins after it reserved.
///
/// Thread-safety: as rate_limiter; on_response may be called from any thread, its calls
/// are serialised by a mutex.
template <class Clock = default_clock, class Executor = boost::asio::any_io_executor>
class adaptive_rate : private detail::adaptive_rate_control,
                      public rate_limiter<policy::pausable<policy::gcra>, Clock, Executor> {
    using base = rate_limiter<policy::pausable<policy::gcra>, Clock, Executor>;

public:
    /// An instant on Clock.
    using time_point = typename Clock::time_point;

    /// The limiter's type on another executor type.
    template <class OtherExecutor>
    struct rebind_executor {
        /// The same limiter on another executor type.
        using other = adaptive_rate<Clock, OtherExecutor>;
    };

    /// adaptive_rate(ex or io_context, options, [burst], [limiter_options]). Throws
    /// system_error(error::invalid_option) for bad options (see adaptive_rate_options),
    /// error::invalid_limit for burst 0.
    template <class Target>
    adaptive_rate(Target&& target, adaptive_rate_options opts, std::uint64_t burst = 1, const limiter_options& lo = {})
        : detail::adaptive_rate_control(std::move(opts)),
          base(std::forward<Target>(target), state->controller.rate(), burst, std::chrono::nanoseconds{0}, lo)
    {
    }

    /// Takes over `other`'s limiter, waiters and controller; `other` may then only be
    /// destroyed or assigned to.
    adaptive_rate(adaptive_rate&&) noexcept = default;
    /// Closes this limiter (its waiters complete with error::closed), then takes over
    /// `other`'s.
    adaptive_rate& operator=(adaptive_rate&&) noexcept = default;

    /// Feeds one response, received now.
    adaptive_rate_feedback on_response(const http_response& res)
    {
        return on_response(res, Clock::now(), std::chrono::system_clock::now());
    }

    /// Feeds one response received at `now`; `wall_now` resolves an HTTP-date Retry-After.
    adaptive_rate_feedback on_response(const http_response& res, time_point now,
                                       std::chrono::system_clock::time_point wall_now)
    {
        std::lock_guard lock(state->mutex);
        return apply(state->controller.on_response(res, since_epoch(now), wall_now));
    }

    /// Feeds one response whose fields the caller has parsed.
    adaptive_rate_feedback on_response(const server_response& res, time_point now)
    {
        std::lock_guard lock(state->mutex);
        return apply(state->controller.on_response(res, since_epoch(now)));
    }

    /// Whether a pause lasts at `now`, and until when.
    bool paused(time_point now = Clock::now()) const noexcept
    {
        return since_epoch(now).count() < this->policy().paused_until();
    }

    /// When the last pause ends (or ended); before any pause, a time long past.
    time_point paused_until() const noexcept
    {
        return time_point{std::chrono::duration_cast<typename time_point::duration>(
            std::chrono::nanoseconds(this->policy().paused_until()))};
    }

    /// What callers were answered so far (see rate_limiter::stats), and the controller's
    /// counters in the adaptive group: responses, refusals, pauses, adaptations...
    limiter_stats stats() const
    {
        limiter_stats s = base::stats();
        std::lock_guard lock(state->mutex);
        s.adaptive = state->controller.stats();
        return s;
    }

private:
    using base::acquire_blocking;

    static std::chrono::nanoseconds since_epoch(time_point t) noexcept
    {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch());
    }

    // Under the mutex.
    adaptive_rate_feedback apply(const adaptive_rate_feedback& fb)
    {
        if (fb.rate_changed) this->set_rate(state->controller.rate());
        if (fb.paused) this->pause_until(state->controller.paused_until().count());
        return fb;
    }
};

/// An adaptive rate on default_clock and any_io_executor: `sluice::adaptive_rate l(io, o)`.
template <class Target, class... Args>
adaptive_rate(Target&&, adaptive_rate_options, Args&&...) -> adaptive_rate<>;

} // namespace sluice
