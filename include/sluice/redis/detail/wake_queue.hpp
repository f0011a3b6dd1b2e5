// The waiting queue of a Redis limiter in the one wait engine (sluice::detail::wait_engine):
// requests that wait locally until a time of their own: a token bucket's request until
// its reserved slot (the server's wait, from the reply on, on the limiter's clock), a
// sliding window's until its next check. The engine arms one timer for all of them.
// Sans-io, as every queue the engine drives: `now` is an argument.
#pragma once

#include <sluice/decision.hpp>
#include <sluice/detail/arith.hpp>
#include <sluice/detail/waiter.hpp>
#include <sluice/limiter_options.hpp>

#include <boost/asio/error.hpp>
#include <boost/system/error_code.hpp>

#include <cstddef>
#include <cstdint>

namespace sluice::redis::detail {

/// Waiters ordered by their wake-up time (waiter::deadline), whatever their key: the
/// slots of one key come in their order on the server, those of different keys
/// interleave. A waiter handed out (release_due) completes with success and goes on
/// (the bucket's request is granted, the window's asks again); one cancelled or closed
/// completes with operation_aborted or the close error, and its operation gives its slot
/// back (the refund script) or leaves the waiters' queue in Redis. Nothing is refused
/// here: the slot is already reserved when a request waits.
class wake_queue {
public:
    /// Not answering tries: every try of a Redis limiter is a round trip.
    static constexpr bool lock_free_try = true;

    explicit wake_queue(const limiter_options&) noexcept {}

    wake_queue(const wake_queue&) = delete;
    wake_queue& operator=(const wake_queue&) = delete;

    /// `w` waits `wait` ns from now (false, granted at once, when wait <= 0).
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

    /// Takes `w` out (what it holds in Redis its operation gives back).
    void remove(sluice::detail::waiter* w, std::int64_t /*now*/, bool /*gives_back*/) noexcept
    {
        heap_.erase(w);
        list_.erase(w);
    }

    /// Removes a waiting `w` (false if it is not waiting): it completes with
    /// operation_aborted.
    bool cancel(sluice::detail::waiter* w, std::int64_t now, sluice::detail::completion_list& done)
    {
        if (!w->queued)
            return false;
        remove(w, now, true);
        w->result = boost::asio::error::operation_aborted;
        done.push(w);
        return true;
    }

    /// Completes every waiter with `ec`.
    void close(boost::system::error_code ec, std::int64_t now, sluice::detail::completion_list& done)
    {
        while (!list_.empty()) {
            sluice::detail::waiter* w = list_.front();
            remove(w, now, true);
            w->result = ec;
            done.push(w);
        }
    }

    /// Waiters queued.
    std::size_t size() const noexcept { return list_.size(); }

    /// Frees every waiter without completing it (the engine is torn down).
    void destroy_all() noexcept { list_.destroy_all(); }

    /// A Redis limiter never asks the engine for a try (it is a round trip): refused.
    decision try_acquire(std::uint64_t, std::int64_t) const noexcept { return {}; }

private:
    sluice::detail::waiter_list list_;
    sluice::detail::deadline_heap heap_;
};

} // namespace sluice::redis::detail
