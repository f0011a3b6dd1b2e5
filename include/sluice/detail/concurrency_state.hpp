// Shared state of a concurrency limit: permits in use, the FIFO of waiters, and one timer
// for the earliest deadline.
#pragma once

#include <sluice/detail/arith.hpp>
#include <sluice/detail/wait_traits.hpp>
#include <sluice/detail/waiter.hpp>
#include <sluice/error.hpp>
#include <sluice/limiter_options.hpp>
#include <sluice/manual_clock.hpp>

#include <boost/asio/basic_waitable_timer.hpp>
#include <boost/asio/error.hpp>

#include <cstdint>
#include <memory>
#include <mutex>

namespace sluice::detail {

template <class Clock, class Executor>
class concurrency_state : public std::enable_shared_from_this<concurrency_state<Clock, Executor>> {
public:
    using timer_type = boost::asio::basic_waitable_timer<Clock, boost::asio::wait_traits<Clock>, Executor>;

    concurrency_state(const Executor& ex, std::uint64_t limit, const limiter_options& opts)
        : limit_(limit), opts_(opts), executor_(ex), timer_(ex)
    {
    }

    ~concurrency_state()
    {
        queue_.destroy_all();
    }

    Executor get_executor() const noexcept { return executor_; }

    // The handler receives a permit owning the granted slots (see concurrency_limit).
    template <class Handler>
    static void deliver(Handler&& h, boost::system::error_code ec, std::uint64_t n,
                        std::shared_ptr<concurrency_state>&& self);

    // A granted completion dropped unrun (its executor shut down): free its slots.
    void drop(const boost::system::error_code& ec, std::uint64_t n) noexcept
    {
        if (!ec) release(n);
    }

    bool try_acquire(std::uint64_t n) noexcept
    {
        std::lock_guard lock(mutex_);
        if (closed_ || n == 0 || !queue_.empty() || in_use_ + n > limit_)
            return false;
        in_use_ += n;
        return true;
    }

    void start(waiter* w, std::uint64_t n, std::int64_t max_wait)
    {
        w->n = n;
        bool queued = false;
        {
            std::lock_guard lock(mutex_);
            if (closed_)
                w->result = error::closed;
            else if (n == 0)
                w->result = error::invalid_count;
            else if (n > limit_)
                w->result = error::exceeds_burst;
            else if (queue_.empty() && in_use_ + n <= limit_) {
                in_use_ += n;
                w->result = {};
            } else if (max_wait <= 0)
                w->result = error::would_exceed_timeout;   // it would have to wait at all
            else if (queue_.size() >= opts_.max_queued || queued_permits_ + n > opts_.max_queued_permits)
                w->result = error::queue_full;
            else {
                std::int64_t t = now_ns<Clock>();
                w->deadline = sat_add(t, max_wait);
                queue_.push_back(w);
                deadlines_.push(w);
                queued_permits_ += n;
                arm_locked();
                queued = true;
            }
        }
        if (!queued)
            w->complete(w);
    }

    void release(std::uint64_t n) noexcept
    {
        completion_list done;
        {
            std::lock_guard lock(mutex_);
            in_use_ -= n;
            grant_locked(done);
        }
        done.complete_all();
    }

    void cancel(waiter* w)
    {
        completion_list done;
        {
            std::lock_guard lock(mutex_);
            if (!w->queued)
                return;
            remove_locked(w);
            w->result = boost::asio::error::operation_aborted;
            done.push(w);
            grant_locked(done);   // a large head gone may let smaller ones in
        }
        done.complete_all();
    }

    void close()
    {
        completion_list done;
        {
            std::lock_guard lock(mutex_);
            closed_ = true;
            while (!queue_.empty()) {
                waiter* w = queue_.front();
                remove_locked(w);
                w->result = error::closed;
                done.push(w);
            }
            ++generation_;
            armed_ = false;
            timer_.cancel();
        }
        done.complete_all();
    }

    void set_limit(std::uint64_t limit)
    {
        completion_list done;
        {
            std::lock_guard lock(mutex_);
            limit_ = limit;
            grant_locked(done);
        }
        done.complete_all();
    }

    std::uint64_t in_use() const
    {
        std::lock_guard lock(mutex_);
        return in_use_;
    }

    std::uint64_t limit() const
    {
        std::lock_guard lock(mutex_);
        return limit_;
    }

    std::size_t queued() const
    {
        std::lock_guard lock(mutex_);
        return queue_.size();
    }

private:
    void remove_locked(waiter* w) noexcept
    {
        deadlines_.erase(w);
        queue_.erase(w);
        queued_permits_ -= w->n;
    }

    // Strict FIFO: only the head may take slots, so a large request is never starved.
    void grant_locked(completion_list& done)
    {
        while (!queue_.empty() && in_use_ + queue_.front()->n <= limit_) {
            waiter* w = queue_.front();
            remove_locked(w);
            in_use_ += w->n;
            w->result = {};
            done.push(w);
        }
    }

    void arm_locked()
    {
        if (deadlines_.empty())
            return;
        std::int64_t at = deadlines_.top()->deadline;
        if (at == max_ns || (armed_ && armed_at_ <= at))
            return;
        armed_ = true;
        armed_at_ = at;
        std::uint64_t gen = ++generation_;
        timer_.expires_at(to_time_point<Clock>(at));
        timer_.async_wait([self = this->shared_from_this(), gen](boost::system::error_code ec) {
            if (!ec) self->on_deadline(gen);
        });
    }

    void on_deadline(std::uint64_t gen)
    {
        completion_list done;
        {
            std::lock_guard lock(mutex_);
            if (gen != generation_ || closed_)
                return;
            armed_ = false;
            std::int64_t t = now_ns<Clock>();
            while (!deadlines_.empty() && deadlines_.top()->deadline <= t) {
                waiter* w = deadlines_.top();
                remove_locked(w);
                w->result = error::timed_out;
                done.push(w);
            }
            grant_locked(done);
            arm_locked();
        }
        done.complete_all();
    }

    std::uint64_t limit_;
    limiter_options opts_;
    mutable std::mutex mutex_;
    Executor executor_;
    timer_type timer_;
    waiter_list queue_;
    deadline_heap deadlines_;
    std::uint64_t in_use_ = 0;
    std::uint64_t queued_permits_ = 0;
    std::int64_t armed_at_ = 0;
    bool armed_ = false;
    std::uint64_t generation_ = 0;
    bool closed_ = false;
};

} // namespace sluice::detail
