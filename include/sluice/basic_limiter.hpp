// The asynchronous limiter: an Asio I/O object around a policy, on which coroutines and
// callbacks wait for capacity on a timer instead of a sleeping thread.
#pragma once

#include <sluice/acquire_result.hpp>
#include <sluice/decision.hpp>
#include <sluice/detail/initiate_acquire.hpp>
#include <sluice/detail/reserving_queue.hpp>
#include <sluice/detail/retrying_queue.hpp>
#include <sluice/detail/trailing_options.hpp>
#include <sluice/detail/wait_engine.hpp>
#include <sluice/error.hpp>
#include <sluice/limiter_options.hpp>
#include <sluice/limiter_stats.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

namespace sluice {

namespace detail {

/// The waiting queue of a rate policy: slots committed ahead (GCRA) or the head retried
/// (window policies).
template <class Policy>
using rate_queue = std::conditional_t<Policy::reserves_ahead, reserving_queue<Policy>, retrying_queue<Policy>>;

/// The engine of a rate limiter over Policy (a policy_ref<P> for a key of a keyed limiter).
template <class Policy, class Clock, class Executor>
using rate_engine = wait_engine<rate_queue<Policy>, Clock, Executor>;

} // namespace detail

/// An asynchronous limiter over a policy (see sluice/policy/). The named limiters
/// (token_bucket, leaky_bucket, fixed_window, sliding_window, sliding_window_counter,
/// time_wheel, all_of) derive from it and add their constructors and setters.
///
/// Waiting: requests queue in FIFO order, so a large request is never starved by a
/// stream of small ones, and try_acquire never barges ahead of queued waiters. One timer
/// per limiter, armed for the earliest waiter, releases every waiter whose time has come
/// in one pass. Reserving policies (GCRA) commit each waiter's slot when it queues: a
/// wake-up needs no re-check, and a late wake-up does not delay later slots. Window
/// policies retry the head of the queue when its window, or the oldest log entry, frees
/// enough capacity.
///
/// Executor: every completion handler runs on its associated executor (a strand, another
/// io_context), or on the limiter's executor when it has none. It is never invoked from
/// inside async_acquire or from inside another completion, and no lock of the limiter is
/// held when it runs. The limiter's own executor runs its timer.
///
/// Cancellation: async_acquire supports per-operation cancellation, terminal, partial
/// and total, while the request waits: it completes with asio::error::operation_aborted,
/// gives back what it had reserved, and the waiters behind it move up. Once a request is
/// answered (granted, or failed fast) its result stands, even when a cancellation arrives
/// before its handler runs. close() completes every waiter, and every later request, with
/// error::closed.
///
/// Thread-safety: distinct objects safe; a shared limiter is safe to use from any number
/// of threads and io_contexts at once (try_acquire is lock-free for lock-free policies,
/// the waiter queue takes a short mutex). The limiter must be destroyed before the
/// execution contexts its handlers use. Destroying it completes pending waiters with
/// error::closed.
template <class Policy, class Clock = std::chrono::steady_clock, class Executor = boost::asio::any_io_executor>
class basic_limiter {
    using state_type = detail::rate_engine<Policy, Clock, Executor>;

public:
    /// The policy that decides (a sans-io core of sluice/policy/).
    using policy_type = Policy;
    /// The clock `now` is read from (std::chrono::steady_clock by default).
    using clock_type = Clock;
    /// The executor of the limiter's timer, and the default one of completion handlers.
    using executor_type = Executor;

    /// Builds the limiter and its policy from `args`, optionally followed by a
    /// limiter_options object: basic_limiter(ex, policy args..., [options]). The options
    /// must be a named object or `sluice::limiter_options{...}` (a braced list cannot be
    /// deduced into the pack).
    template <class... Args>
    explicit basic_limiter(const executor_type& ex, Args&&... args)
        : state_(detail::with_trailing_options<limiter_options>(
              [&ex](const limiter_options& opts, auto&&... policy_args) {
                  return std::make_shared<state_type>(ex, opts, std::forward<decltype(policy_args)>(policy_args)...);
              },
              std::forward<Args>(args)...))
    {
    }

    /// The limiter's type on another executor type, as on Asio's I/O objects (what
    /// `use_awaitable_t<>::as_default_on_t` needs).
    template <class OtherExecutor>
    struct rebind_executor {
        /// The same limiter on another executor type.
        using other = basic_limiter<Policy, Clock, OtherExecutor>;
    };

    /// Takes over `other`'s limiter, waiters included; `other` may then only be destroyed
    /// or assigned to.
    basic_limiter(basic_limiter&&) noexcept = default;
    /// Closes this limiter (its waiters complete with error::closed), then takes over
    /// `other`'s.
    basic_limiter& operator=(basic_limiter&& other) noexcept
    {
        if (this != &other) {
            if (state_) state_->close();
            state_ = std::move(other.state_);
        }
        return *this;
    }

    /// Closes the limiter: pending waiters complete with error::closed.
    ~basic_limiter()
    {
        if (state_) state_->close();
    }

    /// The executor the limiter's timer runs on.
    executor_type get_executor() const noexcept { return state_->get_executor(); }

    /// Grants n permits now if possible, without waiting. Lock-free for lock-free policies.
    decision try_acquire(std::uint64_t n = 1) noexcept { return state_->try_acquire(n); }

    /// Waits until n permits are granted.
    ///
    /// Handler signature: void(boost::system::error_code). Works with use_awaitable,
    /// deferred, use_future, as_tuple, callbacks and the awaitable operators.
    ///
    /// Errors: error::timed_out at once (nothing consumed) when the predicted
    /// wait, counting every request queued before this one, exceeds max_wait; error::
    /// queue_full at once when the limiter's queue bound is reached; error::exceeds_limit /
    /// error::invalid_count for requests that can never be granted; error::closed after
    /// close(); asio::error::operation_aborted when cancelled.
    ///
    /// Per-operation cancellation: terminal, partial and total are all honoured while the
    /// request waits; the permits it had reserved are given back, so later waiters move up.
    /// As everywhere in Asio, emit the signal on the handler's executor: on an io_context
    /// run by several threads, give the waiting coroutine (and its `||` partner) a strand.
    ///
    /// Executor: see the class comment. The completion never runs inside this call.
    template <BOOST_ASIO_COMPLETION_TOKEN_FOR(void(boost::system::error_code))
                  Token = boost::asio::default_completion_token_t<executor_type>>
    auto async_acquire(std::uint64_t n, std::chrono::nanoseconds max_wait,
                       Token&& token = boost::asio::default_completion_token_t<executor_type>())
    {
        return boost::asio::async_initiate<Token, void(boost::system::error_code)>(
            detail::initiate_acquire<state_type>{state_}, token, n, max_wait.count());
    }

    /// Waits for one permit for at most max_wait. The result converts to true when granted;
    /// otherwise it tells why not: timed_out() (the wait would have exceeded max_wait,
    /// nothing consumed), closed(), or error() for the rest (queue_full, exceeds_limit,
    /// operation_aborted when cancelled). It never throws for an error_code.
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

    /// Waits on the calling thread (no event loop needed) for n permits. Returns the same
    /// errors as async_acquire; error::closed wakes it early. Reserving policies queue in
    /// the same FIFO as asynchronous waiters; others retry and let queued waiters go first.
    boost::system::error_code acquire_blocking(std::uint64_t n = 1, std::chrono::nanoseconds max_wait = wait_forever)
    {
        return state_->acquire_blocking(n, max_wait.count());
    }

    /// Completes every pending waiter with error::closed; later requests fail the same way.
    void close() { state_->close(); }

    /// Requests waiting now.
    std::size_t queued() const { return state_->queued(); }

    /// What callers were answered so far, and how long they waited (see limiter_stats).
    limiter_stats stats() const { return state_->stats(); }

    /// The policy, for inspection. Its thread-safe queries may be called at any time; use
    /// the limiter's setters to change it, so that waiters are rescheduled.
    const Policy& policy() const noexcept { return state_->queue().policy(); }

protected:
    /// For the setters of derived limiters: runs f(policy, now) under the queue lock, then
    /// reschedules the waiters under the policy's new state.
    template <class F>
    void reconfigure(F&& f)
    {
        state_->reconfigure([&](std::int64_t now) { return f(state_->queue().policy(), now); });
    }

private:
    std::shared_ptr<state_type> state_;
};

} // namespace sluice
