// The waiting queue of a concurrency limit: slots in use out of a limit, a FIFO of
// waiters for slots, and their deadlines. Sans-io: no lock, no timer, no clock; `now` is
// an argument.
#pragma once

#include <sluice/detail/base/arith.hpp>
#include <sluice/detail/wait/queue_base.hpp>
#include <sluice/detail/wait/queue_support.hpp>
#include <sluice/detail/wait/waiter.hpp>
#include <sluice/error.hpp>
#include <sluice/limiter_options.hpp>

#include <boost/asio/error.hpp>
#include <boost/system/error_code.hpp>
#include <boost/system/system_error.hpp>

#include <cstddef>
#include <cstdint>

namespace sluice::detail {

/// How a permit of a concurrency limit ended (an adaptive limit's sample).
enum class sample_kind { success, dropped, ignored };

/// At most `limit` slots in use. Strict FIFO: only the head may take slots, so a large
/// request is never starved by small ones. The length of a wait cannot be predicted (it
/// depends on when slots are returned), so max_wait is a deadline: a waiter still queued
/// at now + max_wait completes with error::timed_out.
///
/// Every member is called under the owner's lock.
class slot_queue : public queue_base<slot_queue> {
    friend class queue_base<slot_queue>;

public:
    /// try_acquire reads the queue: it needs the lock.
    static constexpr bool lock_free_try = false;
    /// What the limit is built from: the number of slots.
    using config_type = std::uint64_t;
    /// Permits need no sample (no clock read at their admission).
    static constexpr bool samples = false;
    /// A limit has no default.
    static constexpr bool default_config = false;

    /// Throws system_error(error::invalid_limit) for a limit of 0.
    slot_queue(const limiter_options& opts, std::uint64_t limit) : queue_base(opts), limit_(check(limit)) {}

    /// `limit`, or system_error(error::invalid_limit) for 0.
    static std::uint64_t check(std::uint64_t limit)
    {
        if (limit == 0)
            throw boost::system::system_error(make_error_code(error::invalid_limit));
        return limit;
    }

    /// Takes n slots if they are free and nobody waits.
    bool try_acquire(std::uint64_t n, std::int64_t /*now*/) noexcept
    {
        if (n == 0 || !list_.empty() || in_use_ > limit_ || n > limit_ - in_use_)
            return false;
        in_use_ += n;
        return true;
    }

    /// Asks for n slots within max_wait (>= 0) of now. Returns false when answered at once
    /// (w->result: empty when admitted, the slots taken), true when `w` waits.
    bool enqueue(waiter* w, std::uint64_t n, std::int64_t max_wait, std::int64_t now)
    {
        w->n = n;
        if (n == 0)
            w->result = make_error_code(error::invalid_count);
        else if (n > limit_)
            w->result = make_error_code(error::exceeds_limit);
        else if (try_acquire(n, now))
            w->result = {};
        else if (max_wait <= 0)
            w->result = make_error_code(error::timed_out);   // it would have to wait at all
        else if (!bounds_.admit(list_.size(), permits_, n))
            w->result = make_error_code(error::queue_full);
        else {
            w->deadline = sat_add(now, max_wait);
            deadlines_.push(w);   // first: the only step that allocates
            list_.push_back(w);
            permits_ += n;
            return true;
        }
        return false;
    }

    /// Returns n slots taken earlier; the waiters that now fit are admitted.
    void release(std::uint64_t n, completion_list& done)
    {
        in_use_ -= n;
        grant(done);
    }

    /// A permit of n slots ended (a fixed limit takes no sample): release(n).
    void complete(std::uint64_t n, std::int64_t /*start*/, sample_kind, std::int64_t /*now*/, completion_list& done)
    {
        release(n, done);
    }

    /// Changes the limit; slots in use stay in use, waiters are admitted as slots allow. A
    /// head asking for more than the new limit completes with error::exceeds_limit, as it
    /// would have had it asked now.
    void set_limit(std::uint64_t limit, completion_list& done)
    {
        limit_ = limit;
        grant(done);
    }

    /// Gives up on the waiters past their deadline (timed_out) and admits those that fit.
    /// Returns wake_at().
    std::int64_t release_due(std::int64_t now, completion_list& done)
    {
        while (!deadlines_.empty() && deadlines_.top()->deadline <= now) {
            waiter* w = deadlines_.top();
            remove(w);
            w->result = make_error_code(error::timed_out);
            done.push(w);
        }
        grant(done);
        return wake_at();
    }

    /// The earliest deadline; max_ns when none (returned slots, not time, wake waiters).
    std::int64_t wake_at() const noexcept { return deadlines_.empty() ? max_ns : deadlines_.top()->deadline; }

    std::uint64_t in_use() const noexcept { return in_use_; }
    std::uint64_t limit() const noexcept { return limit_; }

    /// Slots the queued waiters ask for.
    std::uint64_t queued_permits() const noexcept { return permits_; }

private:
    // Takes `w` out; a waiter holds no slot, so nothing goes back (slots in use stay so).
    void remove(waiter* w, std::int64_t = 0, bool = false) noexcept
    {
        deadlines_.erase(w);
        list_.erase(w);
        permits_ -= w->n;
    }

    void grant(completion_list& done)
    {
        while (!list_.empty()) {
            waiter* w = list_.front();
            if (w->n > limit_) {
                remove(w);
                w->result = make_error_code(error::exceeds_limit);
                done.push(w);
                continue;
            }
            if (in_use_ > limit_ || w->n > limit_ - in_use_)
                return;
            remove(w);
            in_use_ += w->n;
            w->result = {};
            done.push(w);
        }
    }

    std::uint64_t limit_;
    std::uint64_t in_use_ = 0;
    std::uint64_t permits_ = 0;
    deadline_heap deadlines_;
};

} // namespace sluice::detail
