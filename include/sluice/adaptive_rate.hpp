// A limiter whose sluice::rate follows the server: a token bucket that an adaptive_rate_controller
// moves, and a gate that holds every request while the server has asked for a pause.
#pragma once

#include <sluice/acquire_result.hpp>
#include <sluice/adaptive_rate_controller.hpp>
#include <sluice/basic_limiter.hpp>
#include <sluice/decision.hpp>
#include <sluice/detail/wait_traits.hpp>
#include <sluice/error.hpp>
#include <sluice/limiter_options.hpp>
#include <sluice/token_bucket.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/basic_waitable_timer.hpp>
#include <boost/asio/compose.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>

namespace sluice {

namespace detail {

template <class Clock, class Executor>
struct adaptive_rate_core {
    using timer_type = boost::asio::basic_waitable_timer<Clock, boost::asio::wait_traits<Clock>, Executor>;

    adaptive_rate_core(const Executor& ex, adaptive_rate_options opts, std::uint64_t burst, const limiter_options& lo)
        : controller(std::move(opts)), bucket(ex, controller.rate(), burst, lo), gate(ex)
    {
    }

    static std::int64_t now_ns() noexcept
    {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
    }

    std::mutex mutex;
    adaptive_rate_controller controller; // under mutex
    token_bucket<Clock, Executor> bucket;
    timer_type gate;                      // under mutex; expires when the pause ends
    std::atomic<std::int64_t> paused_until{std::numeric_limits<std::int64_t>::min()};
    std::atomic<bool> closed{false};
};

// Waits out a pause, then takes the permits from the bucket; a pause that began while it
// waited in the bucket forfeits the permits and sends it back to the gate.
template <class State>
struct adaptive_acquire_op {
    std::shared_ptr<State> s;
    std::uint64_t n;
    std::int64_t deadline; // clock ns; INT64_MAX: no limit
    enum class phase { start, gate, bucket, immediate } at = phase::start;
    boost::system::error_code immediate_ec{};

    template <class Self>
    void operator()(Self& self, boost::system::error_code ec = {})
    {
        switch (at) {
        case phase::start:
            self.reset_cancellation_state(boost::asio::enable_total_cancellation());
            if (s->closed.load()) return finish_later(self, error::closed);
            break;
        case phase::immediate: return self.complete(immediate_ec);
        case phase::gate:
            if (self.cancelled() != boost::asio::cancellation_type::none)
                return self.complete(boost::asio::error::operation_aborted);
            if (s->closed.load()) return self.complete(error::closed);
            break; // the pause ended, or the gate moved: look again
        case phase::bucket:
            if (ec) return self.complete(ec);
            if (State::now_ns() >= s->paused_until.load()) return self.complete(ec);
            break; // a pause began while it waited: the permits are forfeited
        }
        const std::int64_t now = State::now_ns();
        const std::int64_t until = s->paused_until.load();
        if (now < until) {
            if (until > deadline) return finish(self, error::timed_out);
            // `self` (and with it `s`) moves into the timer, whose handler may run on another
            // thread before the lock is released: keep the state alive until then.
            const auto keep = s;
            std::lock_guard lock(keep->mutex);
            using tp = typename State::timer_type::time_point;
            const tp end{std::chrono::duration_cast<typename tp::duration>(std::chrono::nanoseconds(until))};
            if (keep->gate.expiry() != end) keep->gate.expires_at(end); // wakes the other waiters: they look again
            at = phase::gate;
            keep->gate.async_wait(std::move(self));
            return;
        }
        at = phase::bucket;
        const auto max_wait =
            deadline == std::numeric_limits<std::int64_t>::max() ? wait_forever : std::chrono::nanoseconds(deadline - now);
        if (max_wait < std::chrono::nanoseconds::zero()) return finish(self, error::timed_out);
        const auto keep = s;
        keep->bucket.async_acquire(n, max_wait, std::move(self));
    }

private:
    // Completes now, unless still inside the initiating function: then through the executor.
    template <class Self>
    void finish(Self& self, error e)
    {
        if (at == phase::start) return finish_later(self, e);
        self.complete(make_error_code(e));
    }

    template <class Self>
    void finish_later(Self& self, error e)
    {
        at = phase::immediate;
        immediate_ec = make_error_code(e);
        auto ex = s->bucket.get_executor();
        boost::asio::post(ex, std::move(self));
    }
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
/// Requests are spaced by a token bucket of `burst` (default 1: evenly) at the adapted rate;
/// while a pause lasts, they wait at a gate and then queue for the bucket (in no particular
/// order among those held). A request that was already waiting in the bucket when a pause
/// began gives up its permit and waits again.
///
/// Executor: completion handlers run on their associated executor (the limiter's when they
/// have none), never inside async_acquire: a request answered at once (closed, or a pause
/// that outlasts max_wait) completes through the executor. The limiter's executor runs the
/// gate's timer and the bucket's.
///
/// Cancellation: async_acquire honours terminal, partial and total cancellation, at the
/// gate and in the bucket: it completes with asio::error::operation_aborted, and a permit
/// it had reserved in the bucket is given back. close() and the destructor complete every
/// request, at the gate or in the bucket, with error::closed.
///
/// Thread-safety: as basic_limiter. on_response may be called from any thread; calls are
/// serialised by a mutex.
template <class Clock = std::chrono::steady_clock, class Executor = boost::asio::any_io_executor>
class adaptive_rate {
    using state_type = detail::adaptive_rate_core<Clock, Executor>;

public:
    /// The clock of the bucket and of pauses.
    using clock_type = Clock;
    /// The executor of the timers, and the default one of completion handlers.
    using executor_type = Executor;
    /// An instant on Clock.
    using time_point = typename Clock::time_point;

    /// The limiter's type on another executor type, as on Asio's I/O objects (what
    /// `use_awaitable_t<>::as_default_on_t` needs).
    template <class OtherExecutor>
    struct rebind_executor {
        /// The same limiter on another executor type.
        using other = adaptive_rate<Clock, OtherExecutor>;
    };

    /// Throws system_error(error::invalid_option) for bad options (see
    /// adaptive_rate_options), error::invalid_limit for burst 0.
    adaptive_rate(const std::type_identity_t<Executor>& ex, adaptive_rate_options opts, std::uint64_t burst = 1,
                  const limiter_options& lo = {})
        : state_(std::make_shared<state_type>(ex, std::move(opts), burst, lo))
    {
    }

    /// The same, on the executor of an execution context (an io_context).
    template <class Context>
        requires std::is_convertible_v<Context&, boost::asio::execution_context&>
    adaptive_rate(Context& ctx, adaptive_rate_options opts, std::uint64_t burst = 1, const limiter_options& lo = {})
        : adaptive_rate(Executor(ctx.get_executor()), std::move(opts), burst, lo)
    {
    }

    /// Takes over `other`'s limiter; `other` may then only be destroyed or assigned to.
    adaptive_rate(adaptive_rate&&) noexcept = default;
    /// Closes this limiter (its requests complete with error::closed), then takes over
    /// `other`'s.
    adaptive_rate& operator=(adaptive_rate&& other) noexcept
    {
        if (this != &other) {
            if (state_) close();
            state_ = std::move(other.state_);
        }
        return *this;
    }

    /// Closes the limiter: pending requests complete with error::closed.
    ~adaptive_rate()
    {
        if (state_) close();
    }

    /// The executor the limiter's timers run on.
    executor_type get_executor() const noexcept { return state_->bucket.get_executor(); }

    /// Grants n permits now if possible. Refused while paused (retry_after: the rest of the
    /// pause).
    decision try_acquire(std::uint64_t n = 1) noexcept
    {
        const std::int64_t now = state_type::now_ns(), until = state_->paused_until.load();
        if (now < until) {
            decision d;
            d.retry_after = std::chrono::nanoseconds(until - now);
            return d;
        }
        return state_->bucket.try_acquire(n);
    }

    /// Waits for a pause to end, then for n permits.
    ///
    /// Handler signature: void(boost::system::error_code). Errors: as
    /// basic_limiter::async_acquire; error::timed_out also when the pause alone
    /// outlasts max_wait. Per-operation cancellation: terminal, partial and total, in the
    /// pause and in the bucket. The completion never runs inside this call.
    template <BOOST_ASIO_COMPLETION_TOKEN_FOR(void(boost::system::error_code))
                  Token = boost::asio::default_completion_token_t<executor_type>>
    auto async_acquire(std::uint64_t n, std::chrono::nanoseconds max_wait,
                       Token&& token = boost::asio::default_completion_token_t<executor_type>())
    {
        std::int64_t deadline = std::numeric_limits<std::int64_t>::max();
        if (max_wait != wait_forever) {
            const std::int64_t now = state_type::now_ns();
            deadline = max_wait.count() > std::numeric_limits<std::int64_t>::max() - now ? deadline
                                                                                          : now + max_wait.count();
        }
        return boost::asio::async_compose<Token, void(boost::system::error_code)>(
            detail::adaptive_acquire_op<state_type>{state_, n, deadline}, token, state_->gate);
    }

    /// Waits for one permit for at most max_wait; the result tells granted, timed out
    /// (also when the pause alone outlasts max_wait), closed or another error, as
    /// basic_limiter::acquire. It never throws for an error_code.
    boost::asio::awaitable<acquire_result> acquire(std::chrono::nanoseconds max_wait = wait_forever)
    {
        return acquire(1, max_wait);
    }

    /// Waits for n permits; see acquire(max_wait).
    boost::asio::awaitable<acquire_result> acquire(std::uint64_t n, std::chrono::nanoseconds max_wait = wait_forever)
    {
        auto [ec] = co_await async_acquire(n, max_wait, boost::asio::as_tuple(boost::asio::use_awaitable));
        co_return acquire_result(ec);
    }

    /// Feeds one response, received now.
    adaptive_rate_feedback on_response(const http_response& res)
    {
        return on_response(res, Clock::now(), std::chrono::system_clock::now());
    }

    /// Feeds one response received at `now`; `wall_now` resolves an HTTP-date Retry-After.
    adaptive_rate_feedback on_response(const http_response& res, time_point now,
                                       std::chrono::system_clock::time_point wall_now)
    {
        std::lock_guard lock(state_->mutex);
        return apply(state_->controller.on_response(res, since_epoch(now), wall_now));
    }

    /// Feeds one response whose fields the caller has parsed.
    adaptive_rate_feedback on_response(const server_response& res, time_point now)
    {
        std::lock_guard lock(state_->mutex);
        return apply(state_->controller.on_response(res, since_epoch(now)));
    }

    /// The rate the bucket runs at now.
    sluice::rate rate() const noexcept { return state_->bucket.rate(); }

    /// Whether a pause lasts at `now`, and until when.
    bool paused(time_point now = Clock::now()) const noexcept
    {
        return since_epoch(now).count() < state_->paused_until.load();
    }
    /// When the last pause ends (or ended); before any pause, a time long past.
    time_point paused_until() const noexcept
    {
        return time_point{std::chrono::duration_cast<typename time_point::duration>(
            std::chrono::nanoseconds(state_->paused_until.load()))};
    }

    /// The controller's counters (responses, refusals, pauses, adaptations...).
    adaptive_rate_controller::statistics stats() const
    {
        std::lock_guard lock(state_->mutex);
        return state_->controller.stats();
    }

    /// Completes every pending request with error::closed; later requests fail the same way.
    void close()
    {
        state_->closed.store(true);
        state_->bucket.close();
        std::lock_guard lock(state_->mutex);
        state_->gate.cancel();
    }

private:
    static std::chrono::nanoseconds since_epoch(time_point t) noexcept
    {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch());
    }

    // Under the mutex.
    adaptive_rate_feedback apply(const adaptive_rate_feedback& fb)
    {
        if (fb.rate_changed) state_->bucket.set_rate(state_->controller.rate());
        if (fb.paused) state_->paused_until.store(state_->controller.paused_until().count());
        return fb;
    }

    std::shared_ptr<state_type> state_;
};

} // namespace sluice
