// Shared state of an asynchronous limiter: the policy, the FIFO of waiters and the one
// timer that wakes the earliest of them.
#pragma once

#include <sluice/decision.hpp>
#include <sluice/detail/arith.hpp>
#include <sluice/detail/wait_traits.hpp>
#include <sluice/detail/waiter.hpp>
#include <sluice/error.hpp>
#include <sluice/limiter_options.hpp>
#include <sluice/manual_clock.hpp>

#include <boost/asio/basic_waitable_timer.hpp>
#include <boost/asio/post.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>

namespace sluice::detail {

template <class Policy, class Clock, class Executor>
class limiter_state : public std::enable_shared_from_this<limiter_state<Policy, Clock, Executor>> {
public:
    using timer_type = boost::asio::basic_waitable_timer<Clock, boost::asio::wait_traits<Clock>, Executor>;
    static constexpr bool reserves = Policy::reserves_ahead;

    template <class... Args>
    limiter_state(const Executor& ex, const limiter_options& opts, Args&&... args)
        : padded_(std::forward<Args>(args)...), opts_(opts), executor_(ex), timer_(ex)
    {
    }

    ~limiter_state()
    {
        // Only reached once no operation is pending (each holds a reference); anything
        // still queued was never handed to an executor.
        queue_.destroy_all();
    }

    // How a completion reaches the handler (see acquire_op).
    template <class Handler>
    static void deliver(Handler&& h, boost::system::error_code ec, std::uint64_t, std::shared_ptr<limiter_state>&& owner)
    {
        // Let go before the handler runs: once it has (a use_future promise set on Asio's
        // system thread), the caller may destroy the limiter and its io_context, and a
        // last reference dropped after that would destroy the timer after its service.
        owner.reset();
        std::move(h)(ec);
    }

    // A grant dropped unrun: rate permits were spent at their time, nothing to give back.
    void drop(const boost::system::error_code&, std::uint64_t) noexcept {}

    Policy& policy() noexcept { return padded_.policy; }
    const Policy& policy() const noexcept { return padded_.policy; }
    Executor get_executor() const noexcept { return executor_; }

    static std::int64_t now() noexcept { return now_ns<Clock>(); }

    decision try_acquire(std::uint64_t n) noexcept
    {
        std::int64_t t = now();
        if constexpr (!reserves) {
            // No barging past queued waiters: FIFO holds for try_acquire too.
            std::uint64_t ahead = queued_permits_.load(std::memory_order_acquire);
            if (ahead > 0) {
                decision d = policy_.check(n, t);
                if (d.error) return d;
                std::int64_t at = policy_.predict(n, t, ahead);
                d.allowed = false;
                d.retry_after = std::chrono::nanoseconds{at > t ? at - t : 1};
                return d;
            }
        }
        return policy_.try_acquire(n, t);
    }

    // Starts an acquire for `w`. Completes it (through its executor) unless it queues.
    void start(waiter* w, std::uint64_t n, std::int64_t max_wait)
    {
        w->n = n;
        bool queued;
        {
            std::lock_guard lock(mutex_);
            queued = enqueue_locked(w, n, max_wait < 0 ? 0 : max_wait);
        }
        if (!queued)
            w->complete(w);
    }

    // Removes a waiter on cancellation. Called on the handler's executor, which is where
    // the node is freed, so `w` is alive; it may already be on its way to completion.
    void cancel(waiter* w)
    {
        completion_list done;
        {
            std::lock_guard lock(mutex_);
            if (!w->queued)
                return;
            std::int64_t t = now();
            remove_locked(w, t, true);
            w->result = boost::asio::error::operation_aborted;
            done.push(w);
            // A removed head may let the next one go at once (window policies).
            if (!queue_.empty())
                schedule_locked(t, done);
        }
        done.complete_all();
    }

    // Completes every waiter with error::closed; later requests fail the same way.
    void close()
    {
        completion_list done;
        {
            std::lock_guard lock(mutex_);
            closed_ = true;
            std::int64_t t = now();
            while (!queue_.empty()) {
                waiter* w = queue_.front();
                remove_locked(w, t, true);
                w->result = make_error_code(error::closed);
                done.push(w);
            }
            ++generation_;
            armed_ = false;
            timer_.cancel();
        }
        blocking_cv_.notify_all();
        done.complete_all();
    }

    bool closed() const
    {
        std::lock_guard lock(mutex_);
        return closed_;
    }

    std::size_t queued() const
    {
        std::lock_guard lock(mutex_);
        return queue_.size();
    }

    // Applies a configuration change to the policy and reschedules the waiters. `f` returns
    // {new interval, old interval} for reserving policies (the debt was rescaled around now).
    template <class F>
    void reconfigure(F&& f)
    {
        completion_list done;
        {
            std::lock_guard lock(mutex_);
            std::int64_t t = now();
            if constexpr (reserves) {
                auto [num, den] = f(t);
                if (num != den) {
                    pending_shift_ = 0;
                    queue_.for_each([&](waiter* w) {
                        if (w->ready > t)
                            w->ready = scale(t, w->ready, num, den);
                        w->shift = static_cast<std::int64_t>(static_cast<int128>(w->shift) * num / den);
                        pending_shift_ += w->shift;
                    });
                }
            } else {
                f(t);
            }
            if (!queue_.empty()) {
                armed_ = false;   // the time of the head may have moved either way
                schedule_locked(t, done);
            }
        }
        done.complete_all();
    }

    // Waits on the calling thread. Reserving policies take their place in the same FIFO as
    // asynchronous waiters (the reservation); others retry and yield to queued waiters.
    boost::system::error_code acquire_blocking(std::uint64_t n, std::int64_t max_wait)
    {
        std::unique_lock lock(mutex_);
        std::int64_t start = now();
        std::int64_t deadline = sat_add(start, max_wait);
        for (;;) {
            if (closed_)
                return error::closed;
            std::int64_t t = now();
            std::uint64_t ahead = reserves ? 0 : queued_permits_.load(std::memory_order_relaxed);
            reservation r = policy_.reserve(n, t, sat_sub(deadline, t), ahead);
            if (r.granted) {
                if constexpr (reserves) {
                    if (!wait_until(lock, r.at)) {
                        policy_.refund(n, now());
                        return error::closed;
                    }
                }
                return {};
            }
            if (r.error)
                return r.error;
            if (!wait_until(lock, r.at))
                return error::closed;
        }
    }

private:
    static std::int64_t scale(std::int64_t t, std::int64_t x, std::int64_t num, std::int64_t den) noexcept
    {
        int128 d = static_cast<int128>(x - t) * num / den;
        return d > max_ns - t ? max_ns : t + static_cast<std::int64_t>(d);
    }

    // Sleeps until `at` on Clock or until closed; false when closed.
    bool wait_until(std::unique_lock<std::mutex>& lock, std::int64_t at)
    {
        while (!closed_ && now() < at)
            blocking_cv_.wait_for(lock, std::chrono::nanoseconds{at - now()});
        return !closed_;
    }

    // Returns false when the request was answered at once (w->result says how).
    bool enqueue_locked(waiter* w, std::uint64_t n, std::int64_t max_wait)
    {
        if (closed_) {
            w->result = make_error_code(error::closed);
            return false;
        }
        std::int64_t t = now();
        if (queue_.size() >= opts_.max_queued ||
            queued_permits_.load(std::memory_order_relaxed) + n > opts_.max_queued_permits) {
            // Full: only a request that needs no wait at all (and jumps no queue) goes through.
            reservation r = queue_.empty() ? policy_.reserve(n, t, 0, 0) : reservation{};
            w->result = r.granted ? boost::system::error_code{}
                      : (r.error && r.error != error::would_exceed_timeout) ? r.error
                                                                            : make_error_code(error::queue_full);
            return false;
        }
        bool was_empty = queue_.empty();
        if constexpr (reserves) {
            reservation r = policy_.reserve(n, t, max_wait);
            if (r.error) {
                w->result = r.error;
                return false;
            }
            if (r.at <= t) {
                w->result = {};
                return false;
            }
            w->ready = r.at;
            // r.at already counts every refund so far, including those still on their way
            // down the queue (pending_shift_): offset them, or they would count twice.
            w->shift = -pending_shift_;
            pending_shift_ = 0;
            queue_.push_back(w);
            queued_permits_.fetch_add(n, std::memory_order_relaxed);
            if (was_empty || !armed_ || r.at < armed_at_)
                arm_locked(r.at, t);
        } else {
            reservation r = policy_.reserve(n, t, max_wait, queued_permits_.load(std::memory_order_relaxed));
            if (r.granted || r.error) {
                w->result = r.error;
                return false;
            }
            w->deadline = sat_add(t, max_wait);
            queue_.push_back(w);
            deadlines_.push(w);
            queued_permits_.fetch_add(n, std::memory_order_relaxed);
            if (was_empty)
                head_retry_ = r.at;
            std::int64_t next = was_empty ? r.at : head_retry_;
            if (deadlines_.top()->deadline < next) next = deadlines_.top()->deadline;
            if (!armed_ || next < armed_at_)
                arm_locked(next, t);
        }
        return true;
    }

    // Takes `w` out of the queue; a cancelled reserving waiter gives its permits back and
    // lets every later waiter move up by what was refunded.
    void remove_locked(waiter* w, std::int64_t t, bool refund)
    {
        if constexpr (reserves) {
            std::int64_t moved = refund ? policy_.refund(w->n, t) : 0;
            if (w->next) {
                w->next->shift += w->shift + moved;
                pending_shift_ += moved;
            } else {
                pending_shift_ -= w->shift;
            }
        } else {
            deadlines_.erase(w);
            if (w == queue_.front())
                head_retry_ = t;   // the next head is tried at once
        }
        queued_permits_.fetch_sub(w->n, std::memory_order_relaxed);
        queue_.erase(w);
    }

    // Releases every waiter whose time has come and arms the timer for the next one.
    void schedule_locked(std::int64_t t, completion_list& done)
    {
        if constexpr (reserves) {
            while (!queue_.empty()) {
                waiter* w = queue_.front();
                std::int64_t ready = w->ready - w->shift;
                if (ready > t) {
                    arm_locked(ready, t);
                    return;
                }
                remove_locked(w, t, false);
                w->result = {};
                done.push(w);
            }
        } else {
            for (;;) {
                while (!queue_.empty()) {
                    waiter* w = queue_.front();
                    reservation r = policy_.reserve(w->n, t, max_ns, 0);
                    if (!r.granted) {
                        head_retry_ = r.at;
                        break;
                    }
                    remove_locked(w, t, false);
                    w->result = {};
                    done.push(w);
                }
                if (queue_.empty() || deadlines_.top()->deadline > t)
                    break;
                // Waited as long as allowed without reaching the front in time.
                waiter* late = deadlines_.top();
                remove_locked(late, t, false);
                late->result = make_error_code(error::would_exceed_timeout);
                done.push(late);
            }
            if (!queue_.empty()) {
                std::int64_t next = head_retry_;
                if (deadlines_.top()->deadline < next) next = deadlines_.top()->deadline;
                arm_locked(next, t);
            }
        }
    }

    void arm_locked(std::int64_t at, std::int64_t t)
    {
        if (armed_ && armed_at_ == at)
            return;
        armed_ = true;
        armed_at_ = at;
        std::uint64_t gen = ++generation_;
        if (opts_.strict && at - t <= opts_.strict_threshold.count()) {
            spin(gen);
            return;
        }
        std::int64_t wake = opts_.strict ? sat_sub(at, opts_.strict_threshold.count())
                                         : std::max(at, sat_add(last_wake_, opts_.coalesce.count()));
        timer_.expires_at(to_time_point<Clock>(wake));
        timer_.async_wait([self = this->shared_from_this(), gen](boost::system::error_code ec) {
            if (!ec) self->on_wake(gen);
        });
    }

    // Strict mode: yield to the executor until the exact time.
    void spin(std::uint64_t gen)
    {
        boost::asio::post(executor_, [self = this->shared_from_this(), gen] { self->on_wake(gen); });
    }

    void on_wake(std::uint64_t gen)
    {
        completion_list done;
        {
            std::unique_lock lock(mutex_);
            for (;;) {
                if (gen != generation_ || closed_)
                    return;
                std::int64_t t = now();
                if (opts_.strict && t < armed_at_) {
                    std::int64_t left = armed_at_ - t;
                    if (Clock::is_steady && left <= strict_busy_ns) {
                        // The last microseconds: a re-post costs a reactor round trip (an
                        // epoll_wait) each, so watch the clock here, without the lock.
                        std::int64_t at = armed_at_;
                        lock.unlock();
                        while (now() < at) {}
                        lock.lock();
                        continue;
                    }
                    if (left <= opts_.strict_threshold.count()) {
                        spin(gen);
                    } else {
                        armed_ = false;   // woke far too early: sleep again
                        arm_locked(armed_at_, t);
                    }
                    return;
                }
                armed_ = false;
                last_wake_ = t;
                schedule_locked(t, done);
                break;
            }
        }
        done.complete_all();
    }

    // Strict mode busy-waits (on a steady clock) for at most this long before a due time.
    static constexpr std::int64_t strict_busy_ns = 30'000;

    // The policy's state takes a cache line of its own: lock-free try_acquire from other
    // cores then never bounces the line with the queue's mutex.
    struct alignas(64) padded_policy {
        template <class... Args>
        explicit padded_policy(Args&&... args) : policy(std::forward<Args>(args)...)
        {
        }

        Policy policy;
    };

    padded_policy padded_;
    Policy& policy_ = padded_.policy;
    limiter_options opts_;
    mutable std::mutex mutex_;
    Executor executor_;
    timer_type timer_;
    waiter_list queue_;
    deadline_heap deadlines_;              // policies that do not reserve ahead
    std::atomic<std::uint64_t> queued_permits_{0};
    std::int64_t pending_shift_ = 0;       // reserving policies: sum of the queued waiters' shift
    std::int64_t head_retry_ = 0;          // when the head may be retried (same)
    std::int64_t armed_at_ = 0;            // when the head is due
    std::int64_t last_wake_ = min_ns;      // coalescing: the last timer wake-up
    bool armed_ = false;
    std::uint64_t generation_ = 0;         // a wake-up of an older arming is stale
    bool closed_ = false;
    std::condition_variable blocking_cv_;
};

} // namespace sluice::detail
