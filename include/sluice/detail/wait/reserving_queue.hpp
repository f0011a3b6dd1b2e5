// The waiting queue of a policy that reserves ahead (GCRA): each waiter's slot is
// committed in the policy's state when it queues, so a wake-up only hands out the waiters
// whose slot has come. Sans-io: no lock, no timer, no clock; `now` is an argument.
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

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace sluice::detail {

/// FIFO of waiters over a policy with reserves_ahead (reserve() commits a future slot,
/// refund() gives one back). A waiter's slot is `ready`, less the refunds of cancelled
/// waiters ahead of it: a refund moves every later waiter up by the time it gave back,
/// recorded once on the next waiter (`shift`) and passed down as waiters leave, so a
/// cancellation is O(1).
///
/// Every member but policy() and try_acquire() is called under the owner's lock.
template <class Policy>
class reserving_queue : public policy_queue_base<reserving_queue<Policy>, Policy> {
    friend class queue_base<reserving_queue>;
    using base = policy_queue_base<reserving_queue, Policy>;
    using base::bounds_, base::list_;

public:
    using base::base, base::policy;

    /// Each waiter's slot is committed when it queues.
    static constexpr bool committed_slots = true;

    /// Admits n permits at `now` if the policy holds them. Safe without the lock; never
    /// passes a waiter, whose slot is committed.
    [[gnu::always_inline]] decision try_acquire(std::uint64_t n, std::int64_t now) noexcept
    {
        return policy().try_acquire(n, now);
    }

    /// What try_acquire(n, now) would answer, consuming nothing. Safe without the lock.
    [[gnu::always_inline]] decision peek(std::uint64_t n, std::int64_t now) const noexcept
    {
        return policy().check(n, now);
    }

    /// Settles an admission of `cost` permits at `at` with its `actual` cost (the policy's
    /// settle). What a lower cost gives back moves every queued slot up, as a cancelled
    /// waiter's refund does; a higher one is a debt behind the slots already committed.
    void settle(std::uint64_t cost, std::uint64_t actual, std::int64_t at, std::int64_t now, completion_list& done)
    {
        std::int64_t moved = policy().settle(cost, actual, at, now);
        if (moved > 0 && !list_.empty()) {
            list_.front()->shift += moved;
            pending_shift_ += moved;
        }
        release_due(now, done);
    }

    /// Asks for n permits within max_wait (>= 0) of now. Returns false when answered at
    /// once (w->result: empty when admitted), true when `w` waits for its slot.
    bool enqueue(waiter* w, std::uint64_t n, std::int64_t max_wait, std::int64_t now)
    {
        w->n = n;
        if (!bounds_.admit(list_.size(), permits_, n)) {
            w->result = refuse_when_full(policy(), n, now, list_.empty());
            return false;
        }
        reservation r = policy().reserve(n, now, max_wait);
        if (r.error || r.at <= now) {
            w->result = r.error;
            return false;
        }
        w->ready = r.at;
        if constexpr (requires(const Policy& p) { p.last_reservation(); }) w->order = policy().last_reservation();
        w->deadline = sat_add(now, max_wait);
        // r.at already counts every refund so far, including those still on their way
        // down the queue (pending_shift_): offset them, or they would count twice.
        w->shift = -pending_shift_;
        pending_shift_ = 0;
        list_.push_back(w);
        permits_ += n;
        return true;
    }

    /// Moves every waiter whose slot has come to `done` (admitted). Returns wake_at().
    std::int64_t release_due(std::int64_t now, completion_list& done)
    {
        while (!list_.empty()) {
            waiter* w = list_.front();
            if (slot(w) > now)
                break;
            remove(w, now, false);
            w->result = {};
            done.push(w);
        }
        return wake_at();
    }

    /// When release_due has work next: the head's slot; max_ns when nobody waits.
    std::int64_t wake_at() const noexcept { return list_.empty() ? max_ns : slot(list_.front()); }

    /// The last queued waiter's slot (max_ns when nobody waits): by then every waiter queued
    /// so far is due. The refunds not yet passed down to it are pending_shift_.
    std::int64_t last_slot() const noexcept
    {
        return list_.empty() ? max_ns : sat_sub(list_.back()->ready, pending_shift_);
    }

    /// Runs f(now), a change of the policy's configuration, and reschedules the waiters.
    /// When f returns {num, den} (the policy rescaled its debt around now by num / den, as
    /// gcra::set_rate does), the queued slots and pending refunds are rescaled the same way.
    template <class F>
    void reconfigure(F&& f, std::int64_t now, completion_list& done)
    {
        if constexpr (std::is_void_v<decltype(f(now))>) {
            f(now);
        } else {
            // Not a structured binding: clang before 16 cannot capture one in a lambda.
            const auto factor = f(now);
            const auto num = factor.first, den = factor.second;
            if (num != den) {
                pending_shift_ = 0;
                list_.for_each([&](waiter* w) {
                    if (w->ready > now)
                        w->ready = scale(now, w->ready, num, den);
                    w->shift = static_cast<std::int64_t>(static_cast<int128>(w->shift) * num / den);
                    pending_shift_ += w->shift;
                });
            }
        }
        release_due(now, done);
    }

    /// Runs f(now), a change after which every queued slot must be reserved again (a pause
    /// that begins): the reservations are given back, newest first, so that the policy is
    /// as if none had been made; f runs; then each waiter reserves again in its turn, with
    /// what is left of its max_wait. A waiter that no longer fits completes with the
    /// policy's error (error::timed_out); FIFO order is kept.
    template <class F>
    void reschedule(F&& f, std::int64_t now, completion_list& done)
    {
        for (waiter* w = list_.back(); w; w = w->prev)
            policy().refund(w->n, now);
        f(now);
        pending_shift_ = 0;
        for (waiter* w = list_.front(); w;) {
            waiter* next = w->next;
            w->shift = 0;
            reservation r = policy().reserve(w->n, now, w->deadline > now ? w->deadline - now : 0);
            if (r.error || r.at <= now) {
                permits_ -= w->n;
                list_.erase(w);
                w->result = r.error;
                done.push(w);
            } else {
                w->ready = r.at;
            }
            w = next;
        }
    }

    /// For a caller that waits on its own thread: commits n permits usable from r.at, in
    /// the same order as the waiters (after those queued, before those to come).
    reservation reserve_blocking(std::uint64_t n, std::int64_t now, std::int64_t max_wait) noexcept
    {
        return policy().reserve(n, now, max_wait);
    }

    /// Gives back what reserve_blocking committed (the blocked caller gave up).
    void unreserve_blocking(std::uint64_t n, std::int64_t now) noexcept { policy().refund(n, now); }

    /// Permits the queued waiters ask for.
    std::uint64_t queued_permits() const noexcept { return permits_; }

private:
    static std::int64_t slot(const waiter* w) noexcept { return sat_sub(w->ready, w->shift); }

    static std::int64_t scale(std::int64_t t, std::int64_t x, std::int64_t num, std::int64_t den) noexcept
    {
        int128 d = static_cast<int128>(x - t) * num / den;
        return d > max_ns - t ? max_ns : t + static_cast<std::int64_t>(d);
    }

    // Takes `w` out; one that leaves without its admission gives its permits back, and what
    // the policy moved back is passed to the next waiter (and so to every later one).
    void remove(waiter* w, std::int64_t now, bool refund)
    {
        std::int64_t moved = refund ? refund_of(w, now) : 0;
        if (w->next) {
            w->next->shift += w->shift + moved;
            pending_shift_ += moved;
        } else {
            pending_shift_ -= w->shift;
        }
        permits_ -= w->n;
        list_.erase(w);
    }

    // A policy shared with other holders (policy::shm_gcra) is told which of its reservations
    // comes back: whether another holder committed after that one decides the refund.
    std::int64_t refund_of(const waiter* w, std::int64_t now) noexcept
    {
        if constexpr (requires(const Policy& p) { p.last_reservation(); })
            return policy().refund(w->n, now, w->order);
        else
            return policy().refund(w->n, now);
    }

    std::uint64_t permits_ = 0;
    std::int64_t pending_shift_ = 0;   // the sum of the queued waiters' shift
};

} // namespace sluice::detail
