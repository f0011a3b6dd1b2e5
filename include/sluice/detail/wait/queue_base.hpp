// What every waiting queue does the same way: the FIFO of waiters and its bounds,
// cancellation, close and teardown, and the contract the wait engine drives a queue by.
#pragma once

#include <sluice/decision.hpp>
#include <sluice/detail/wait/queue_support.hpp>
#include <sluice/detail/wait/waiter.hpp>
#include <sluice/limiter_options.hpp>

#include <boost/asio/error.hpp>
#include <boost/system/error_code.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>

namespace sluice::detail {

/// A sans-io waiting queue, as wait_engine drives it (every call but try_acquire under the
/// engine's lock, `now` an argument, waiters handed out in a completion_list):
/// - enqueue(w, n, max_wait, now): answers at once (false, w->result set) or queues `w`;
/// - cancel(w, now, done): takes a waiting `w` out with operation_aborted (false if it was
///   not waiting), and hands out whom that lets through;
/// - release_due(now, done): hands out the waiters due at `now`; returns wake_at();
/// - wake_at(): when release_due has work next (max_ns: nothing to wake for);
/// - close(ec, now, done): hands out every waiter with `ec`;
/// - size(), destroy_all(): waiters queued; free them unrun (the engine is torn down).
/// A queue that also answers without waiting is a trying_queue.
template <class Q>
concept waiting_queue = requires(Q& q, const Q& cq, waiter* w, std::uint64_t n, std::int64_t t, completion_list& done,
                                 boost::system::error_code ec) {
    { q.enqueue(w, n, t, t) } -> std::same_as<bool>;
    { q.cancel(w, t, done) } -> std::same_as<bool>;
    { q.release_due(t, done) } -> std::same_as<std::int64_t>;
    { cq.wake_at() } -> std::same_as<std::int64_t>;
    q.close(ec, t, done);
    { cq.size() } -> std::same_as<std::size_t>;
    q.destroy_all();
};

/// A waiting queue that also answers a try (the engine's try_acquire): try_acquire(n, now)
/// decides without waiting, and without the engine's lock when lock_free_try (the queue
/// reads what it needs from atomics or its policy's lock-free state).
template <class Q>
concept trying_queue = waiting_queue<Q> && requires(Q& q, std::uint64_t n, std::int64_t t) {
    { Q::lock_free_try } -> std::convertible_to<bool>;
    q.try_acquire(n, t);
};

/// A queue whose waiters hold slots committed when they queued (a reserving policy's): a
/// wake-up that comes late moves no later slot, so the engine may coalesce more while many
/// wait (limiter_options::coalesce_max), though not past last_slot(), when all are due.
template <class Q>
concept committed_slots = requires(const Q& cq) {
    requires Q::committed_slots;
    { cq.last_slot() } -> std::same_as<std::int64_t>;
};

/// A waiting queue that can also serve acquire_blocking: reserve_blocking commits (or
/// predicts) for a caller waiting on its own thread, unreserve_blocking gives back.
template <class Q>
concept blocking_queue = waiting_queue<Q> && requires(Q& q, std::uint64_t n, std::int64_t t) {
    { q.reserve_blocking(n, t, t) } -> std::same_as<reservation>;
    q.unreserve_blocking(n, t);
};

/// The FIFO of a waiting queue and what every queue does with it alike. `Derived` provides
/// remove(w, now, gives_back) (take `w` out of the FIFO and of its own books; gives_back:
/// it leaves without its admission, by cancellation or close, so what it holds goes back) and
/// release_due(now, done).
template <class Derived>
class queue_base {
public:
    explicit queue_base(const limiter_options& opts) noexcept : bounds_(opts) {}

    queue_base(const queue_base&) = delete;
    queue_base& operator=(const queue_base&) = delete;

    /// Removes a waiting `w` (false if it is not waiting): it completes with
    /// operation_aborted, gives back what it held, and whom that lets through goes too.
    bool cancel(waiter* w, std::int64_t now, completion_list& done)
    {
        if (!w->queued)
            return false;
        derived().remove(w, now, true);
        w->result = boost::asio::error::operation_aborted;
        done.push(w);
        derived().release_due(now, done);
        return true;
    }

    /// Completes every waiter with `ec`, giving back what each held.
    void close(boost::system::error_code ec, std::int64_t now, completion_list& done)
    {
        while (!list_.empty()) {
            waiter* w = list_.front();
            derived().remove(w, now, true);
            w->result = ec;
            done.push(w);
        }
    }

    /// Waiters queued.
    std::size_t size() const noexcept { return list_.size(); }

    /// Frees every waiter without completing it (the owner is torn down).
    void destroy_all() noexcept { list_.destroy_all(); }

protected:
    ~queue_base() = default;

    Derived& derived() noexcept { return static_cast<Derived&>(*this); }

    waiter_list list_;
    queue_bounds bounds_;
};

/// A waiting queue whose policy settles admissions (basic_limiter::settle) and answers a
/// peek: settle(cost, actual, at, now, done) changes the policy under the owner's lock and
/// moves the waiters it lets in to `done`; peek(n, now) answers what try_acquire would,
/// consuming nothing.
template <class Q>
concept settling_queue = requires(Q& q, const Q& cq, std::uint64_t n, std::int64_t t, completion_list& done) {
    q.settle(n, n, t, t, done);
    { cq.peek(n, t) } -> std::same_as<decision>;
};

/// A queue_base in front of a rate policy, the policy built from the queue's constructor
/// arguments after the options.
template <class Derived, class Policy>
class policy_queue_base : public queue_base<Derived> {
public:
    using policy_type = Policy;
    /// try_acquire needs no lock: a reserving queue's reservations are in the policy's
    /// state already, a retrying queue reads the permits queued from an atomic.
    static constexpr bool lock_free_try = true;

    template <class... Args>
    explicit policy_queue_base(const limiter_options& opts, Args&&... args)
        : queue_base<Derived>(opts), padded_(std::forward<Args>(args)...)
    {
    }

    Policy& policy() noexcept { return padded_.policy; }
    const Policy& policy() const noexcept { return padded_.policy; }

protected:
    ~policy_queue_base() = default;

private:
    padded_policy<Policy> padded_;
};

} // namespace sluice::detail
