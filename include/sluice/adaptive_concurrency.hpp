// Adaptive concurrency limit: at most `limit()` operations in flight, the limit following
// the latency and the failures of the operations that hold its permits.
#pragma once

#include <sluice/adaptive_concurrency_controller.hpp>
#include <sluice/detail/adaptive_slot_queue.hpp>
#include <sluice/detail/initiate_acquire.hpp>
#include <sluice/detail/permit_error.hpp>
#include <sluice/detail/wait_engine.hpp>
#include <sluice/limiter_options.hpp>
#include <sluice/limiter_stats.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

namespace sluice {

/// A concurrency limit that finds its own limit: each permit measures the operation it
/// covers, from its grant to its release, and an adaptive_concurrency_controller (AIMD,
/// Vegas or Gradient2, see concurrency_algorithm) turns those samples into the limit. A
/// client caps its requests to a backend at what the backend serves without queueing; a
/// server sheds the load above what it can serve in time.
///
///     sluice::adaptive_concurrency cap(io, {.algorithm = sluice::concurrency_algorithm::vegas});
///     auto permit = co_await cap.acquire(100ms);   // empty on failure; permit.error() tells why
///     if (!permit) co_return send_503();
///     auto res = co_await call_backend();
///     if (res.overloaded()) permit.dropped();       // a timeout, a 503: the limit shrinks
///     // else the permit's destructor reports success and the latency
///
/// Waiting follows concurrency_limit's rules: FIFO, max_wait a deadline (0: fail at once
/// with error::timed_out when no slot is free), a queue bound
/// (limiter_options::max_queued), close(). A permit holds one slot.
///
/// Executor: completion handlers run on their associated executor (the limiter's when they
/// have none), never inside async_acquire or another completion, and never with the
/// limiter's lock held. The limiter's own executor runs its timer (the waiters'
/// deadlines). A granted permit whose handler is dropped unrun returns its slot without a
/// sample.
///
/// Cancellation: async_acquire honours terminal, partial and total cancellation while it
/// waits: it completes with asio::error::operation_aborted and an empty permit. close()
/// and the destructor complete every waiter with error::closed; permits already granted
/// stay valid and still report their samples.
///
/// Thread-safety: distinct objects safe; a shared limit may be used from any number of
/// threads and io_contexts at once (every operation takes a short mutex), and a permit may
/// be released on any thread. One permit object is not to be used by two threads at once.
template <class Clock = std::chrono::steady_clock, class Executor = boost::asio::any_io_executor>
class adaptive_concurrency {
    using state_type = detail::wait_engine<detail::adaptive_slot_queue, Clock, Executor>;
    struct permit_grant;

public:
    /// The clock the latencies and deadlines are measured on.
    using clock_type = Clock;
    /// The executor of the limiter's timer, and the default one of completion handlers.
    using executor_type = Executor;

    /// The limiter's type on another executor type, as on Asio's I/O objects.
    template <class OtherExecutor>
    struct rebind_executor {
        /// The same limiter on another executor type.
        using other = adaptive_concurrency<Clock, OtherExecutor>;
    };

    /// One slot, and the measure of the operation it covers. Ends in one of three ways:
    /// release() (or the destructor): success, its latency is a sample; dropped(): it
    /// failed from overload (a timeout, a 503, a refused connection), the limit shrinks;
    /// ignore(): it says nothing about load (a 404, a cancelled call), no sample. An empty
    /// permit (default-constructed, moved-from, ended, or from a failed acquire) holds
    /// nothing; from a failed acquire, error() tells why.
    class permit : public detail::permit_error {
    public:
        /// An empty permit.
        permit() noexcept = default;
        /// Takes over `other`'s slot (and error); `other` is left empty.
        permit(permit&& other) noexcept
            : detail::permit_error(std::move(other)), state_(std::move(other.state_)), start_(other.start_)
        {
        }
        /// Ends this permit with success, then takes over `other`'s.
        permit& operator=(permit&& other) noexcept
        {
            if (this != &other) {
                release();
                detail::permit_error::operator=(std::move(other));
                state_ = std::move(other.state_);
                start_ = other.start_;
            }
            return *this;
        }
        /// Ends the permit with success (see release()).
        ~permit() { release(); }

        /// The operation succeeded: its latency, from the grant to now, is a sample. The
        /// slot is returned (waking the next waiter).
        void release() noexcept { end(detail::sample_kind::success); }

        /// The operation failed from overload: the limit shrinks whatever its latency.
        void dropped() noexcept { end(detail::sample_kind::dropped); }

        /// The slot is returned without a sample: the operation tells nothing of load.
        void ignore() noexcept { end(detail::sample_kind::ignored); }

        /// The operation starts now: its latency is measured from here, not from the grant
        /// (for a permit taken before other waits, such as a rate limiter's).
        void restart_clock() noexcept
        {
            if (state_) start_ = state_type::now();
        }

        /// Whether the permit holds a slot.
        explicit operator bool() const noexcept { return state_ != nullptr; }

        /// When the slot was granted, on clock_type.
        typename Clock::time_point granted_at() const noexcept
        {
            return typename Clock::time_point(std::chrono::duration_cast<typename Clock::duration>(
                std::chrono::nanoseconds(start_)));
        }

    private:
        friend class adaptive_concurrency;
        friend struct permit_grant;
        permit(std::shared_ptr<state_type> s, std::int64_t start) noexcept : state_(std::move(s)), start_(start) {}
        explicit permit(const boost::system::error_code& ec) noexcept : detail::permit_error(ec) {}

        void end(detail::sample_kind kind) noexcept
        {
            if (state_) {
                give_back(*state_, start_, kind);
                state_.reset();
            }
        }

        std::shared_ptr<state_type> state_;
        std::int64_t start_ = 0;
    };

    /// Throws system_error(error::invalid_option) for adaptive options out of range (see
    /// adaptive_concurrency_options).
    adaptive_concurrency(const std::type_identity_t<Executor>& ex, const adaptive_concurrency_options& adaptive = {},
                               const limiter_options& opts = {})
        : state_(std::make_shared<state_type>(ex, opts, adaptive))
    {
    }

    /// The same, on the executor of an execution context (an io_context).
    template <detail::execution_context_ref Context>
    adaptive_concurrency(Context& ctx, const adaptive_concurrency_options& adaptive = {},
                               const limiter_options& opts = {})
        : adaptive_concurrency(Executor(ctx.get_executor()), adaptive, opts)
    {
    }

    /// Takes over `other`'s limit, waiters and permits out included; `other` may then only
    /// be destroyed.
    adaptive_concurrency(adaptive_concurrency&&) noexcept = default;
    adaptive_concurrency& operator=(adaptive_concurrency&&) = delete;

    /// Completes pending waiters with error::closed. Permits already out stay valid.
    ~adaptive_concurrency()
    {
        if (state_) state_->close();
    }

    /// The executor the limiter's timer runs on.
    executor_type get_executor() const noexcept { return state_->get_executor(); }

    /// A permit if a slot is free now and nobody is queued; else an empty one.
    permit try_acquire() { return state_->try_acquire(1) ? permit(state_, state_type::now()) : permit(); }

    /// Waits for a slot. Handler signature: void(boost::system::error_code, permit).
    /// Errors: error::timed_out (max_wait 0 and no slot free), error::timed_out
    /// (deadline reached while queued), error::queue_full, error::closed,
    /// asio::error::operation_aborted (cancelled). The permit is empty on error.
    template <BOOST_ASIO_COMPLETION_TOKEN_FOR(void(boost::system::error_code, permit))
                  Token = boost::asio::default_completion_token_t<executor_type>>
    auto async_acquire(std::chrono::nanoseconds max_wait,
                       Token&& token = boost::asio::default_completion_token_t<executor_type>())
    {
        return boost::asio::async_initiate<Token, void(boost::system::error_code, permit)>(
            detail::initiate_acquire<state_type, permit_grant>{state_}, token, std::uint64_t{1}, max_wait.count());
    }

    /// Waits for a slot for at most max_wait. On failure the permit is empty and its
    /// error() tells why. It never throws for an error_code.
    boost::asio::awaitable<permit> acquire(std::chrono::nanoseconds max_wait = wait_forever)
    {
        auto result = co_await async_acquire(max_wait, boost::asio::as_tuple(boost::asio::use_awaitable));
        co_return std::move(std::get<1>(result));
    }

    /// Completes every pending waiter with error::closed; later requests fail the same way.
    /// Permits already out stay valid.
    void close() { state_->close(); }

    /// The limit now.
    std::uint64_t limit() const
    {
        return state_->inspect([](const detail::adaptive_slot_queue& q) { return q.limit(); });
    }

    /// Slots held by permits now.
    std::uint64_t in_use() const
    {
        return state_->inspect([](const detail::adaptive_slot_queue& q) { return q.in_use(); });
    }

    /// Requests waiting now.
    std::size_t queued() const { return state_->queued(); }

    /// What callers were answered so far, and how long they waited (see limiter_stats).
    limiter_stats stats() const { return state_->stats(); }

    /// The controller's counters: samples, drops, increases and decreases of the limit.
    adaptive_concurrency_controller::statistics controller_stats() const
    {
        return state_->inspect([](const detail::adaptive_slot_queue& q) { return q.controller().stats(); });
    }

private:
    // The handler receives a permit stamped with its grant; a grant dropped unrun returns
    // its slot without a sample.
    struct permit_grant {
        static std::tuple<permit> make(const boost::system::error_code& ec, std::uint64_t,
                                       const std::shared_ptr<state_type>& s)
        {
            return {ec ? permit(ec) : permit(s, state_type::now())};
        }

        static void drop(state_type& s, const boost::system::error_code& ec, std::uint64_t) noexcept
        {
            if (!ec) give_back(s, 0, detail::sample_kind::ignored);
        }
    };

    static void give_back(state_type& s, std::int64_t start, detail::sample_kind kind) noexcept
    {
        s.update([start, kind](detail::adaptive_slot_queue& q, std::int64_t now, detail::completion_list& done) {
            q.complete(start, kind, now, done);
        });
    }

    std::shared_ptr<state_type> state_;
};

} // namespace sluice
