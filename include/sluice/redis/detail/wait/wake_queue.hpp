// The waiting queue of a Redis limiter in the one wait engine (sluice::detail::wait_engine):
// requests that wait locally until a time of their own: a token bucket's request until
// its reserved slot (the server's wait, from the reply on, on the limiter's clock), a
// sliding window's until its next check. The engine arms one timer for all of them.
// Sans-io, as every queue the engine drives: `now` is an argument.
#pragma once

#include <sluice/detail/base/arith.hpp>
#include <sluice/detail/wait/queue_base.hpp>
#include <sluice/detail/wait/waiter.hpp>
#include <sluice/limiter_options.hpp>

#include <cstdint>

namespace sluice::redis::detail {

/// Waiters ordered by their wake-up time (waiter::deadline), whatever their key: the
/// slots of one key come in their order on the server, those of different keys
/// interleave. A waiter handed out (release_due) completes with success and goes on
/// (the bucket's request is granted, the window's asks again); one cancelled or closed
/// completes with operation_aborted or the close error, and its operation gives its slot
/// back (the refund script) or leaves the waiters' queue in Redis. Nothing is refused
/// here: the slot is already reserved when a request waits, so the queue bounds of
/// limiter_options do not apply. There is no try: every try of a Redis limiter is a round
/// trip, made by its own operation (the engine offers try_acquire only over a queue that
/// has one).
class wake_queue : public sluice::detail::queue_base<wake_queue> {
    friend class sluice::detail::queue_base<wake_queue>;

public:
    explicit wake_queue(const limiter_options& opts) noexcept : queue_base(opts) {}

    /// `w` waits `wait` ns from now (false, done at once, when wait <= 0).
    bool enqueue(sluice::detail::waiter* w, std::uint64_t n, std::int64_t wait, std::int64_t now)
    {
        w->n = n;
        if (wait <= 0) {
            w->result = {};
            return false;
        }
        w->deadline = sluice::detail::sat_add(now, wait);
        list_.push_back(w);
        heap_.push(w);
        return true;
    }

    /// Hands out every waiter whose time has come (with success). Returns wake_at().
    std::int64_t release_due(std::int64_t now, sluice::detail::completion_list& done)
    {
        while (!heap_.empty() && heap_.top()->deadline <= now) {
            sluice::detail::waiter* w = heap_.top();
            remove(w, now, false);
            w->result = {};
            done.push(w);
        }
        return wake_at();
    }

    /// The earliest wake-up time; max_ns when nobody waits.
    std::int64_t wake_at() const noexcept { return heap_.empty() ? sluice::detail::max_ns : heap_.top()->deadline; }

private:
    // Takes `w` out; what it holds in Redis its operation gives back (queue_base's cancel
    // and close hand it out with its error).
    void remove(sluice::detail::waiter* w, std::int64_t /*now*/, bool /*gives_back*/) noexcept
    {
        heap_.erase(w);
        list_.erase(w);
    }

    sluice::detail::deadline_heap heap_;
};

} // namespace sluice::redis::detail
