// The waiting queue of a policy that cannot commit ahead (the window policies, all_of):
// the head of the FIFO is retried when the policy predicts it fits, and a waiter that
// reaches its deadline first gives up. Sans-io: no lock, no timer, no clock; `now` is an
// argument.
#pragma once

#include <sluice/decision.hpp>
#include <sluice/detail/base/arith.hpp>
#include <sluice/detail/wait/queue_base.hpp>
#include <sluice/detail/wait/queue_support.hpp>
#include <sluice/detail/wait/waiter.hpp>
#include <sluice/error.hpp>
#include <sluice/limiter_options.hpp>

#include <boost/asio/error.hpp>
#include <boost/system/error_code.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace sluice::detail {

/// FIFO of waiters over a policy whose reserve() admits only at once (else predicts when
/// to retry, counting the permits queued ahead). Only the head is ever admitted, so a large
/// request is not starved by later small ones; each waiter also sits in a deadline heap
/// and completes with timed_out if it is still queued at now + max_wait (the
/// prediction was a lower bound).
///
/// Every member but policy() and try_acquire() is called under the owner's lock.
template <class Policy>
class retrying_queue : public policy_queue_base<retrying_queue<Policy>, Policy> {
    friend class queue_base<retrying_queue>;
    using base = policy_queue_base<retrying_queue, Policy>;
    using base::bounds_, base::list_;

public:
    using base::base, base::policy;

    /// Admits n permits at `now` if the policy has room and nobody waits: it never passes
    /// a queued waiter (FIFO holds for try_acquire too). Safe without the lock.
    decision try_acquire(std::uint64_t n, std::int64_t now) noexcept
    {
        std::uint64_t ahead = permits_.load(std::memory_order_acquire);
        if (ahead == 0)
            return policy().try_acquire(n, now);
        decision d = policy().check(n, now);
        if (d.error)
            return d;
        std::int64_t at = policy().predict(n, now, ahead);
        d.admitted = false;
        d.retry_after = std::chrono::nanoseconds{at > now ? sat_sub(at, now) : 1};
        return d;
    }

    /// What try_acquire(n, now) would answer, consuming nothing. Safe without the lock.
    decision peek(std::uint64_t n, std::int64_t now) const noexcept
    {
        std::uint64_t ahead = permits_.load(std::memory_order_acquire);
        decision d = policy().check(n, now);
        if (ahead == 0 || d.error)
            return d;
        std::int64_t at = policy().predict(n, now, ahead);
        d.admitted = false;
        d.retry_after = std::chrono::nanoseconds{at > now ? sat_sub(at, now) : 1};
        return d;
    }

    /// Settles an admission of `cost` permits at `at` with its `actual` cost (the policy's
    /// settle), then retries the head: what came back may let it in.
    void settle(std::uint64_t cost, std::uint64_t actual, std::int64_t at, std::int64_t now, completion_list& done)
    {
        policy().settle(cost, actual, at, now);
        release_due(now, done);
    }

    /// Asks for n permits within max_wait (>= 0) of now. Returns false when answered at
    /// once (w->result: empty when admitted), true when `w` waits.
    bool enqueue(waiter* w, std::uint64_t n, std::int64_t max_wait, std::int64_t now)
    {
        w->n = n;
        std::uint64_t ahead = permits_.load(std::memory_order_relaxed);
        if (!bounds_.admit(list_.size(), ahead, n)) {
            w->result = refuse_when_full(policy(), n, now, list_.empty());
            return false;
        }
        reservation r = policy().reserve(n, now, max_wait, ahead);
        if (r.admitted || r.error) {
            w->result = r.error;
            return false;
        }
        w->deadline = sat_add(now, max_wait);
        deadlines_.push(w);   // first: the only step that allocates
        if (list_.empty())
            retry_at_ = r.at;
        list_.push_back(w);
        permits_.fetch_add(n, std::memory_order_relaxed);
        return true;
    }

    /// Admits the head while it fits, and gives up on waiters past their deadline, moving
    /// them to `done`. A head the policy can never admit any more (its limit was lowered
    /// below the request) completes with the policy's error. Returns wake_at().
    std::int64_t release_due(std::int64_t now, completion_list& done)
    {
        for (;;) {
            while (!list_.empty()) {
                waiter* w = list_.front();
                reservation r = policy().reserve(w->n, now, max_ns, 0);
                if (!r.admitted && (!r.error || r.error == error::timed_out)) {
                    retry_at_ = r.at;
                    break;
                }
                remove(w, now);
                w->result = r.error;
                done.push(w);
            }
            if (list_.empty() || deadlines_.top()->deadline > now)
                break;
            // Waited as long as allowed without reaching the front in time.
            waiter* late = deadlines_.top();
            remove(late, now);
            late->result = make_error_code(error::timed_out);
            done.push(late);
        }
        return wake_at();
    }

    /// When release_due has work next: the head's retry time or the earliest deadline;
    /// max_ns when nobody waits.
    std::int64_t wake_at() const noexcept
    {
        if (list_.empty())
            return max_ns;
        std::int64_t d = deadlines_.top()->deadline;
        return retry_at_ < d ? retry_at_ : d;
    }

    /// Runs f(now), a change of the policy's configuration, and retries the head at once.
    template <class F>
    void reconfigure(F&& f, std::int64_t now, completion_list& done)
    {
        f(now);
        release_due(now, done);
    }

    /// For a caller that waits on its own thread: admits at once when nothing is queued
    /// and the policy has room, else says when to try again. Nothing is committed ahead.
    reservation reserve_blocking(std::uint64_t n, std::int64_t now, std::int64_t max_wait) noexcept
    {
        return policy().reserve(n, now, max_wait, permits_.load(std::memory_order_relaxed));
    }

    /// reserve_blocking never commits ahead: nothing to give back.
    void unreserve_blocking(std::uint64_t, std::int64_t) noexcept {}

    /// Permits the queued waiters ask for.
    std::uint64_t queued_permits() const noexcept { return permits_.load(std::memory_order_relaxed); }

private:
    // Takes `w` out; a waiter holds no reservation, so nothing goes back.
    void remove(waiter* w, std::int64_t now, bool = false) noexcept
    {
        deadlines_.erase(w);
        if (w == list_.front())
            retry_at_ = now;   // the next head is tried at once
        permits_.fetch_sub(w->n, std::memory_order_relaxed);
        list_.erase(w);
    }

    // Read by try_acquire without the lock, so that it does not pass queued waiters.
    std::atomic<std::uint64_t> permits_{0};
    deadline_heap deadlines_;
    std::int64_t retry_at_ = 0;   // when the head may be admitted (a lower bound)
};

} // namespace sluice::detail
