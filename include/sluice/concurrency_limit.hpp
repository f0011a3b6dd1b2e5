// Concurrency limit: at most K operations in flight, each holding an RAII permit.
#pragma once

#include <sluice/detail/initiate_acquire.hpp>
#include <sluice/detail/permit_error.hpp>
#include <sluice/detail/slot_queue.hpp>
#include <sluice/detail/wait_engine.hpp>
#include <sluice/limiter_options.hpp>
#include <sluice/limiter_stats.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

namespace sluice {

/// Limits how many operations run at once: async_acquire yields a move-only permit that
/// holds its slots until it is destroyed or released. A crawler combines it with a rate
/// limiter (requests per second AND requests in flight).
///
/// Waiting follows the rate limiters' rules: FIFO (a large request is never starved),
/// a queue bound (limiter_options::max_queued), close(). The length of a wait cannot be predicted (it depends on when permits are
/// returned), so max_wait is a deadline: max_wait 0 fails at once with
/// error::timed_out when no slot is free, and a waiter still queued at its
/// deadline completes with error::timed_out (as late as limiter_options::coalesce, never
/// early).
///
///     sluice::concurrency_limit cap(io, 8);
///     auto permit = co_await cap.acquire(2s);   // empty on failure; permit.error() tells why
///     if (!permit) co_return;
///
/// Executor: completion handlers run on their associated executor (the limiter's when they
/// have none), never inside async_acquire or another completion, and never with the
/// limiter's lock held. The limiter's own executor runs its timer (the waiters'
/// deadlines). A granted permit whose handler is dropped unrun (its executor shut down)
/// returns its slots.
///
/// Cancellation: async_acquire honours terminal, partial and total cancellation while it
/// waits: it completes with asio::error::operation_aborted and an empty permit (a waiter
/// holds no slot), and the waiters behind it move up. close() and the destructor complete
/// every waiter with error::closed; permits already granted stay valid and return their
/// slots when released.
///
/// Thread-safety: distinct objects safe; a shared limit may be used from any number of
/// threads and io_contexts at once. Every operation, try_acquire included, takes a short
/// mutex, and a permit may be released on any thread. One permit object is not to be
/// used by two threads at once.
template <class Clock = std::chrono::steady_clock, class Executor = boost::asio::any_io_executor>
class concurrency_limit {
    using state_type = detail::wait_engine<detail::slot_queue, Clock, Executor>;
    struct permit_grant;

public:
    /// The clock the deadlines are measured on.
    using clock_type = Clock;
    /// The executor of the limiter's timer, and the default one of completion handlers.
    using executor_type = Executor;

    /// The limiter's type on another executor type, as on Asio's I/O objects (what
    /// `use_awaitable_t<>::as_default_on_t` needs).
    template <class OtherExecutor>
    struct rebind_executor {
        /// The same limiter on another executor type.
        using other = concurrency_limit<Clock, OtherExecutor>;
    };

    /// Slots held by one grant; returns them when destroyed or released. An empty permit
    /// (default-constructed, moved-from, or from a failed acquire) holds nothing; from a
    /// failed acquire, error() tells why.
    class permit : public detail::permit_error {
    public:
        /// An empty permit.
        permit() noexcept = default;
        /// Takes over `other`'s slots (and error); `other` is left empty.
        permit(permit&& other) noexcept
            : detail::permit_error(std::move(other)), state_(std::move(other.state_)), n_(std::exchange(other.n_, 0))
        {
        }
        /// Releases the slots held, then takes over `other`'s; `other` is left empty.
        permit& operator=(permit&& other) noexcept
        {
            if (this != &other) {
                release();
                detail::permit_error::operator=(std::move(other));
                state_ = std::move(other.state_);
                n_ = std::exchange(other.n_, 0);
            }
            return *this;
        }
        /// Releases the slots held.
        ~permit() { release(); }

        /// Returns the slots now (waking the next waiter).
        void release() noexcept
        {
            if (state_) {
                give_back(*state_, n_);
                state_.reset();
                n_ = 0;
            }
        }

        /// Slots held (0 when empty).
        std::uint64_t count() const noexcept { return n_; }
        /// Whether the permit holds slots.
        explicit operator bool() const noexcept { return state_ != nullptr; }

    private:
        friend class concurrency_limit;
        friend struct permit_grant;
        permit(std::shared_ptr<state_type> s, std::uint64_t n) noexcept : state_(std::move(s)), n_(n) {}
        explicit permit(const boost::system::error_code& ec) noexcept : detail::permit_error(ec) {}

        std::shared_ptr<state_type> state_;
        std::uint64_t n_ = 0;
    };

    /// Throws system_error(error::invalid_limit) for a limit of 0.
    concurrency_limit(const std::type_identity_t<Executor>& ex, std::uint64_t limit, const limiter_options& opts = {})
        : state_(std::make_shared<state_type>(ex, opts, check(limit)))
    {
    }

    /// The same, on the executor of an execution context (an io_context).
    template <detail::execution_context_ref Context>
    concurrency_limit(Context& ctx, std::uint64_t limit, const limiter_options& opts = {})
        : concurrency_limit(Executor(ctx.get_executor()), limit, opts)
    {
    }

    /// Takes over `other`'s limit, waiters and permits out included; `other` may then only
    /// be destroyed.
    concurrency_limit(concurrency_limit&&) noexcept = default;
    concurrency_limit& operator=(concurrency_limit&&) = delete;

    /// Completes pending waiters with error::closed. Permits already out stay valid.
    ~concurrency_limit()
    {
        if (state_) state_->close();
    }

    /// The executor the limiter's timer runs on.
    executor_type get_executor() const noexcept { return state_->get_executor(); }

    /// A permit for n slots if they are free now and nobody is queued; else an empty one.
    permit try_acquire(std::uint64_t n = 1)
    {
        return state_->try_acquire(n) ? permit(state_, n) : permit();
    }

    /// Waits for n slots. Handler signature: void(boost::system::error_code, permit).
    /// Errors: error::timed_out (max_wait 0 and no slot free), error::timed_out
    /// (deadline reached while queued), error::queue_full, error::exceeds_limit (n above
    /// the limit), error::invalid_count (n == 0), error::closed,
    /// asio::error::operation_aborted (cancelled). The permit is empty on error.
    template <BOOST_ASIO_COMPLETION_TOKEN_FOR(void(boost::system::error_code, permit))
                  Token = boost::asio::default_completion_token_t<executor_type>>
    auto async_acquire(std::uint64_t n, std::chrono::nanoseconds max_wait,
                       Token&& token = boost::asio::default_completion_token_t<executor_type>())
    {
        return boost::asio::async_initiate<Token, void(boost::system::error_code, permit)>(
            detail::initiate_acquire<state_type, permit_grant>{state_}, token, n, max_wait.count());
    }

    /// Waits for one slot for at most max_wait. On failure the permit is empty and its
    /// error() tells why (timed_out(), closed(), or another error, operation_aborted when
    /// cancelled). It never throws for an error_code.
    boost::asio::awaitable<permit> acquire(std::chrono::nanoseconds max_wait = wait_forever)
    {
        return acquire(1, max_wait);
    }

    /// Waits for n slots; see acquire(max_wait).
    boost::asio::awaitable<permit> acquire(std::uint64_t n, std::chrono::nanoseconds max_wait = wait_forever)
    {
        // A failed acquire's permit is empty and carries the error.
        auto result = co_await async_acquire(n, max_wait, boost::asio::as_tuple(boost::asio::use_awaitable));
        co_return std::move(std::get<1>(result));
    }

    /// Changes the limit; permits out stay valid, waiters are granted as slots allow. A
    /// waiter asking for more than the new limit completes with error::exceeds_limit.
    void set_limit(std::uint64_t limit)
    {
        check(limit);
        state_->update([limit](detail::slot_queue& q, std::int64_t, detail::completion_list& done) {
            q.set_limit(limit, done);
        });
    }

    /// Completes every pending waiter with error::closed; later requests fail the same way.
    /// Permits already out stay valid.
    void close() { state_->close(); }

    /// Slots held by permits now.
    std::uint64_t in_use() const
    {
        return state_->inspect([](const detail::slot_queue& q) { return q.in_use(); });
    }

    /// The most slots held at once.
    std::uint64_t limit() const
    {
        return state_->inspect([](const detail::slot_queue& q) { return q.limit(); });
    }

    /// Requests waiting now.
    std::size_t queued() const { return state_->queued(); }

    /// What callers were answered so far, and how long they waited (see limiter_stats).
    limiter_stats stats() const { return state_->stats(); }

private:
    // The handler receives a permit owning the granted slots; a grant dropped unrun (its
    // executor shut down) frees them.
    struct permit_grant {
        static std::tuple<permit> make(const boost::system::error_code& ec, std::uint64_t n,
                                       const std::shared_ptr<state_type>& s)
        {
            return {ec ? permit(ec) : permit(s, n)};
        }

        static void drop(state_type& s, const boost::system::error_code& ec, std::uint64_t n) noexcept
        {
            if (!ec) give_back(s, n);
        }
    };

    static void give_back(state_type& s, std::uint64_t n) noexcept
    {
        s.update([n](detail::slot_queue& q, std::int64_t, detail::completion_list& done) { q.release(n, done); });
    }

    static std::uint64_t check(std::uint64_t limit)
    {
        if (limit == 0)
            throw boost::system::system_error(make_error_code(error::invalid_limit));
        return limit;
    }

    std::shared_ptr<state_type> state_;
};

} // namespace sluice
