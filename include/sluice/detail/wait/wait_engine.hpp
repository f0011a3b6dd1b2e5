// The one driver of every waiting queue: it owns the lock, the timer and the clock, and
// completes waiters outside the lock. The queues (reserving_queue, retrying_queue,
// slot_queue) only say who is admitted, refused or due, and when to wake next.
#pragma once

#include <sluice/admission.hpp>
#include <sluice/decision.hpp>
#include <sluice/detail/base/arith.hpp>
#include <sluice/detail/wait/concrete_executor.hpp>
#include <sluice/detail/wait/queue_base.hpp>
#include <sluice/detail/wait/request_counters.hpp>
#include <sluice/detail/base/wait_traits.hpp>
#include <sluice/detail/wait/waiter.hpp>
#include <sluice/error.hpp>
#include <sluice/limiter_options.hpp>
#include <sluice/limiter_stats.hpp>
#include <sluice/manual_clock.hpp>

#include <boost/asio/basic_waitable_timer.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/system/error_code.hpp>
#include <boost/system/system_error.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

namespace sluice::detail {

/// Shadow mode with strict waits cannot mean anything (nobody waits): invalid_option.
inline void check_shadow(const limiter_options& o)
{
    if (o.shadow.enabled && o.strict)
        throw boost::system::system_error(make_error_code(error::invalid_option), "shadow mode with strict waits");
}

/// Drives a sans-io `Queue` for asynchronous and blocking waiters: one mutex around the
/// queue, one timer armed for the queue's next wake-up (coalesced, or strict: see
/// limiter_options), a generation counter that makes stale wake-ups harmless, cancellation,
/// close, the blocking wait and the counts of limiter_stats. Waiters the queue hands out
/// are counted under the lock and completed after it is released, each through its own
/// executor (waiter::complete): posted, or run at once from a timer wake-up when that
/// executor is running there. While anything waits, the engine counts one unit of work
/// on its executor for every waiter whose handler runs there (acquire_op counts the rest).
///
/// The Queue: see waiting_queue (and blocking_queue, for acquire_blocking).
///
/// Owned through a shared_ptr: every pending operation and timer wait holds a reference.
template <waiting_queue Queue, class Clock, class Executor>
class wait_engine : public std::enable_shared_from_this<wait_engine<Queue, Clock, Executor>> {
public:
    using queue_type = Queue;
    using clock_type = Clock;
    using executor_type = Executor;
    using engine_type = wait_engine;   // what an operation started here waits in
    using timer_type = boost::asio::basic_waitable_timer<Clock, boost::asio::wait_traits<Clock>, Executor>;

    /// The queue is built from (opts, args...). Throws system_error(error::invalid_option)
    /// for a negative coalesce, coalesce_max or strict_threshold, and for shadow with
    /// strict.
    template <class... Args>
    wait_engine(const Executor& ex, const limiter_options& opts, Args&&... args)
        : queue_(checked(opts), std::forward<Args>(args)...), opts_(opts), executor_(ex), timer_(ex)
    {
    }

    wait_engine(const wait_engine&) = delete;
    wait_engine& operator=(const wait_engine&) = delete;

    ~wait_engine()
    {
        // Only reached once no operation is pending (each holds a reference); anything
        // still queued was never handed to an executor.
        queue_.destroy_all();
    }

    Executor get_executor() const noexcept { return executor_; }

    static std::int64_t now() noexcept { return now_ns<Clock>(); }

    /// Shadow mode, as the options say (basic_limiter carries it out).
    const shadow_options& shadow() const noexcept { return opts_.shadow; }

    /// The queue, for what it allows without the lock (its policy, a lock-free try).
    Queue& queue() noexcept { return queue_; }
    const Queue& queue() const noexcept { return queue_; }

    /// The queue's try_acquire, under the lock only when the queue needs it. A closed
    /// engine refuses here only then; lock-free queues decide by their policy alone.
    [[gnu::always_inline]] auto try_acquire(std::uint64_t n) noexcept
        requires trying_queue<Queue>
    {
        auto d = try_acquire_uncounted(n);
        if (opts_.count_try_acquire) [[unlikely]]
            counters_.count_try(static_cast<bool>(d));
        return d;
    }

    /// try_acquire with a ticket (basic_limiter::try_admit): the same decision, counted the
    /// same, and on admission the ticket of n permits at the instant decided at.
    [[gnu::always_inline]] admission admit(std::uint64_t n)
        requires trying_queue<Queue> && settling_queue<Queue>
    {
        // The epoch before the decision: a reconfiguration racing with it makes the ticket
        // stale rather than settled against a configuration it was not decided on.
        const std::uint64_t epoch = epoch_.load(std::memory_order_acquire);
        const std::int64_t t = now();
        decision d = try_acquire_at(n, t);
        if (opts_.count_try_acquire) [[unlikely]]
            counters_.count_try(d.admitted);
        if (!d.admitted)
            return admission_access::refused(d);
        return admission_access::make(this, epoch, n, t, d);
    }

    /// The ticket of n permits an acquire that waited was granted (basic_limiter::async_admit).
    admission admitted(std::uint64_t n)
        requires settling_queue<Queue>
    {
        decision d;
        d.admitted = true;
        return admission_access::make(this, epoch_.load(std::memory_order_acquire), n, now(), d);
    }

    /// Settles a ticket of this engine with its actual cost (the policy's settle), then
    /// releases the waiters it lets in. Errors: the ticket's (admission_access::check), and
    /// error::closed after close().
    boost::system::error_code settle(admission& a, std::uint64_t actual)
        requires settling_queue<Queue>
    {
        completion_list done;
        work_type idle;
        boost::system::error_code ec;
        {
            std::lock_guard lock(mutex_);
            ec = admission_access::check(a, this, epoch_.load(std::memory_order_relaxed));
            if (!ec && closed_)
                ec = make_error_code(error::closed);
            if (!ec) {
                admission_access::mark_settled(a);
                std::int64_t t = now();
                queue_.settle(admission_access::cost(a), actual, admission_access::at(a), t, done);
                count_locked(done, t);
                arm_locked(queue_.wake_at(), t, false);
                track_work_locked(idle);
            }
        }
        done.complete_all();
        return ec;
    }

    /// Settles `cost` permits admitted at `at` with `actual`, for a ticket its owner checked
    /// (a keyed limiter's key engine), then releases the waiters it lets in.
    void settle_cost(std::uint64_t cost, std::uint64_t actual, std::int64_t at)
        requires settling_queue<Queue>
    {
        update([&](Queue& q, std::int64_t t, completion_list& done) { q.settle(cost, actual, at, t, done); });
    }

    /// What try_acquire(n) would answer now, nothing consumed or counted.
    [[gnu::always_inline]] decision peek(std::uint64_t n) const noexcept
        requires settling_queue<Queue>
    {
        if constexpr (Queue::lock_free_try) {
            return queue_.peek(n, now());
        } else {
            std::lock_guard lock(mutex_);
            if (closed_)
                return {};
            return queue_.peek(n, now());
        }
    }

    /// Starts an acquire for `w` (see initiate_acquire): `bind` attaches `w` to this
    /// engine, then it is answered at once (through its executor) or queued.
    template <class Bind>
    void start(waiter* w, std::uint64_t n, std::int64_t max_wait, Bind& bind)
    {
        bind(this->shared_from_this());
        start(w, n, max_wait);
    }

    /// Starts an acquire for `w`, already attached to this engine.
    void start(waiter* w, std::uint64_t n, std::int64_t max_wait)
    {
        bool queued = false;
        work_type idle;
        {
            std::lock_guard lock(mutex_);
            if (closed_) {
                w->n = n;
                w->result = make_error_code(error::closed);
            } else {
                std::int64_t t = now();
                bool was_empty = queue_.size() == 0;
                w->since = t;
                queued = queue_.enqueue(w, n, max_wait < 0 ? 0 : max_wait, t);
                // A timer armed while the queue was empty belongs to nobody: set it exactly.
                if (queued) {
                    arm_locked(queue_.wake_at(), t, was_empty);
                    track_work_locked(idle);
                }
            }
            if (!queued)
                counters_.count(w->result, 0);
        }
        if (!queued)
            w->complete(w, false);
    }

    /// Removes a waiter on cancellation. Called on the handler's executor, which is where
    /// the node is freed, so `w` is alive; it may already be on its way to completion.
    void cancel(waiter* w)
    {
        completion_list done;
        work_type idle;
        {
            std::lock_guard lock(mutex_);
            std::int64_t t = now();
            if (!queue_.cancel(w, t, done))
                return;
            count_locked(done, t);
            arm_locked(queue_.wake_at(), t, false);
            track_work_locked(idle);
        }
        done.complete_all();
    }

    /// Completes every waiter with error::closed (and wakes blocked threads); later
    /// requests fail the same way.
    void close()
    {
        completion_list done;
        work_type idle;
        {
            std::lock_guard lock(mutex_);
            closed_ = true;
            std::int64_t t = now();
            queue_.close(make_error_code(error::closed), t, done);
            count_locked(done, t);
            ++generation_;
            armed_ = false;
            timer_.cancel();
            track_work_locked(idle);
        }
        blocking_cv_.notify_all();
        done.complete_all();
    }

    bool closed() const
    {
        std::lock_guard lock(mutex_);
        return closed_;
    }

    /// Requests waiting now.
    std::size_t queued() const
    {
        return inspect([](const Queue& q) { return q.size(); });
    }

    /// The counts so far, as one snapshot.
    limiter_stats stats() const
    {
        std::lock_guard lock(mutex_);
        limiter_stats s = counters_.snapshot(queue_.size() + blocking_);
        if constexpr (requires { queue_.add_stats(s); })
            queue_.add_stats(s);   // what the queue counts itself (an adaptive controller's)
        return s;
    }

    /// f(queue) under the lock, for a query.
    template <class F>
    auto inspect(F&& f) const
    {
        std::lock_guard lock(mutex_);
        return f(std::as_const(queue_));
    }

    /// Runs f(queue, now, done) under the lock (a change of configuration, slots given
    /// back), re-arms the timer and completes what f released.
    template <class F>
    void update(F&& f)
    {
        completion_list done;
        work_type idle;
        {
            std::lock_guard lock(mutex_);
            std::int64_t t = now();
            f(queue_, t, done);
            count_locked(done, t);
            arm_locked(queue_.wake_at(), t, false);
            track_work_locked(idle);
        }
        done.complete_all();
    }

    /// queue.reconfigure(f, now, done) under the lock; see update.
    template <class F>
    void reconfigure(F&& f)
    {
        // Tickets admitted before no longer settle exactly (error::stale_admission).
        update([&](Queue& q, std::int64_t t, completion_list& done) {
            q.reconfigure(f, t, done);
            epoch_.fetch_add(1, std::memory_order_release);
        });
    }

    /// Waits on the calling thread until n permits are admitted, max_wait at most.
    /// Reserving queues commit the caller's slot in the same order as asynchronous
    /// waiters; others retry and let queued waiters go first. close() wakes it early.
    boost::system::error_code acquire_blocking(std::uint64_t n, std::int64_t max_wait)
        requires blocking_queue<Queue>
    {
        std::unique_lock lock(mutex_);
        const std::int64_t start = now();
        bool slept = false;
        ++blocking_;
        boost::system::error_code ec = wait_blocking(lock, n, sat_add(start, max_wait < 0 ? 0 : max_wait), slept);
        --blocking_;
        counters_.count(ec, slept ? sat_sub(now(), start) : 0);
        return ec;
    }

private:
    [[gnu::always_inline]] auto try_acquire_uncounted(std::uint64_t n) noexcept
        requires trying_queue<Queue>
    {
        if constexpr (Queue::lock_free_try) {
            return queue_.try_acquire(n, now());
        } else {
            std::lock_guard lock(mutex_);
            if (closed_)
                return decltype(queue_.try_acquire(n, 0)){};
            return queue_.try_acquire(n, now());
        }
    }

    // try_acquire_uncounted at an instant read by the caller (admit keeps it in the ticket).
    [[gnu::always_inline]] auto try_acquire_at(std::uint64_t n, std::int64_t t) noexcept
        requires trying_queue<Queue>
    {
        if constexpr (Queue::lock_free_try) {
            return queue_.try_acquire(n, t);
        } else {
            std::lock_guard lock(mutex_);
            if (closed_)
                return decltype(queue_.try_acquire(n, 0)){};
            return queue_.try_acquire(n, t);
        }
    }

    boost::system::error_code wait_blocking(std::unique_lock<std::mutex>& lock, std::uint64_t n, std::int64_t deadline,
                                            bool& slept)
    {
        for (;;) {
            if (closed_)
                return error::closed;
            std::int64_t t = now();
            reservation r = queue_.reserve_blocking(n, t, sat_sub(deadline, t));
            if (r.error)
                return r.error;
            slept = slept || r.at > t;
            if (!wait_until(lock, r.at)) {
                if (r.admitted)
                    queue_.unreserve_blocking(n, now());
                return error::closed;
            }
            if (r.admitted)
                return {};
        }
    }

    // Counts the requests answered in `done` at t.
    void count_locked(const completion_list& done, std::int64_t t) noexcept
    {
        done.for_each([&](const waiter* w) { counters_.count(w->result, sat_sub(t, w->since)); });
    }

    // Sleeps until `at` on Clock or until closed; false when closed.
    bool wait_until(std::unique_lock<std::mutex>& lock, std::int64_t at)
    {
        while (!closed_ && now() < at)
            blocking_cv_.wait_for(lock, std::chrono::nanoseconds{sat_sub(at, now())});
        return !closed_;
    }

    // Makes sure the timer wakes the engine by `at` (max_ns: nothing to wake for). A timer
    // armed earlier is kept unless `exact` (or strict mode): a wake-up that finds nothing
    // due costs less than moving the timer, which completes the old wait as well; in strict
    // mode, though, an early wake-up spins until its time.
    void arm_locked(std::int64_t at, std::int64_t t, bool exact)
    {
        if (at == max_ns || closed_)
            return;
        if (armed_ && (at == armed_at_ || (at > armed_at_ && !exact && !opts_.strict)))
            return;
        armed_ = true;
        armed_at_ = at;
        std::uint64_t gen = ++generation_;
        if (opts_.strict && sat_sub(at, t) <= opts_.strict_threshold.count()) {
            spin(gen);
            return;
        }
        std::int64_t wake = opts_.strict ? sat_sub(at, opts_.strict_threshold.count())
                                         : std::max(at, coalesced_until());
        timer_.expires_at(to_time_point<Clock>(wake));
        timer_.async_wait([self = this->shared_from_this(), gen](boost::system::error_code ec) {
            if (!ec) self->on_wake(gen);
        });
    }

    static const limiter_options& checked(const limiter_options& o)
    {
        if (o.coalesce.count() < 0 || o.coalesce_max.count() < 0 || o.strict_threshold.count() < 0)
            throw boost::system::system_error(make_error_code(error::invalid_option));
        check_shadow(o);
        return o;
    }

    // The earliest the next wake-up may come: `coalesce` after the last one, or later by
    // the window grown with the queue when its waiters hold committed slots (see
    // limiter_options::coalesce_max), but not past the queue's last slot: once every waiter
    // is due, a longer window saves no wake-up and only holds the last ones back.
    std::int64_t coalesced_until() const noexcept
    {
        const std::int64_t base = opts_.coalesce.count();
        const std::int64_t until = sat_add(last_wake_, base);
        if constexpr (committed_slots<Queue>) {
            const std::size_t q = queue_.size();
            if (q > 1) {
                const std::int64_t most = std::max(base, opts_.coalesce_max.count());
                const std::int64_t grown = sat_add(last_wake_, std::min(most, sat_mul(q, base)));
                return std::max(until, std::min(grown, queue_.last_slot()));
            }
        }
        return until;
    }

    // Strict mode: yield to the executor until the exact time.
    void spin(std::uint64_t gen)
    {
        post_to(executor_, [self = this->shared_from_this(), gen] { self->on_wake(gen); });
    }

    void on_wake(std::uint64_t gen)
    {
        completion_list done;
        work_type idle;
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
                        arm_locked(armed_at_, t, true);
                    }
                    return;
                }
                armed_ = false;
                last_wake_ = t;
                std::int64_t next = queue_.release_due(t, done);
                count_locked(done, t);
                arm_locked(next, t, true);
                track_work_locked(idle);
                break;
            }
        }
        done.complete_all(true);
    }

    // The engine's count of work while anything waits. An emptied queue hands the count to
    // `idle`, let go after the completions are posted (each one work itself), so that the
    // executor's count of work never touches zero in between.
    using work_type = std::optional<boost::asio::executor_work_guard<Executor>>;

    void track_work_locked(work_type& idle)
    {
        if (queue_.size() != 0) {
            if (!work_)
                work_.emplace(executor_);
        } else if (work_) {
            idle.emplace(std::move(*work_));
            work_.reset();
        }
    }

    // Strict mode busy-waits (on a steady clock) for at most this long before a due time.
    static constexpr std::int64_t strict_busy_ns = 30'000;

    Queue queue_;   // first: a padded policy leads it, on a cache line of its own
    limiter_options opts_;
    mutable std::mutex mutex_;
    Executor executor_;
    timer_type timer_;
    std::int64_t armed_at_ = 0;            // when the queue is due, as the timer is armed
    std::int64_t last_wake_ = min_ns;      // coalescing: the last timer wake-up
    std::uint64_t generation_ = 0;         // a wake-up of an older arming is stale
    std::atomic<std::uint64_t> epoch_{0};  // reconfigurations so far: a ticket's settle is exact within one
    bool armed_ = false;
    bool closed_ = false;
    std::size_t blocking_ = 0;             // threads in acquire_blocking
    std::condition_variable blocking_cv_;
    request_counters counters_;
    work_type work_;
};

} // namespace sluice::detail
