// Concurrency limits: at most `limit` operations in flight, each holding an RAII permit.
// One front end for the fixed limit (concurrency_limit) and the adaptive one
// (adaptive_concurrency.hpp), which differ only in their queue.
#pragma once

#include <sluice/acquire_result.hpp>
#include <sluice/default_clock.hpp>
#include <sluice/detail/immediate.hpp>
#include <sluice/detail/initiate_acquire.hpp>
#include <sluice/detail/slot_queue.hpp>
#include <sluice/detail/wait_engine.hpp>
#include <sluice/limiter_options.hpp>
#include <sluice/limiter_stats.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/deferred.hpp>

#include <chrono>
#include <concepts>
#include <cstdint>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

namespace sluice {

/// Limits how many operations run at once: async_acquire yields a move-only permit that
/// holds its slots until it is released or destroyed. `Queue` decides the limit: fixed
/// (concurrency_limit) or moved by an adaptive_concurrency_controller from the latency and
/// the outcome of the operations the permits cover (adaptive_concurrency). A crawler
/// combines it with a rate limiter (requests per second AND requests in flight); a client
/// caps its requests to a backend at what the backend serves without queueing; a server
/// sheds the load above what it can serve in time. It keeps the contract of every sluice
/// limiter (sluice::local_limiter), with a permit where a rate limiter has a decision.
///
///     sluice::concurrency_limit cap(io, 8);
///     auto permit = co_await cap.acquire(2s);   // empty on failure; permit.error() tells why
///     if (!permit) co_return;
///
///     sluice::adaptive_concurrency shed(io, {.algorithm = sluice::concurrency_algorithm::vegas});
///     auto p = co_await shed.acquire(100ms);
///     if (!p) co_return send_503();
///     auto res = co_await call_backend();
///     if (res.overloaded()) p.drop();   // a timeout, a 503: the limit shrinks
///     // else the permit's destructor reports success and the latency
///
/// Waiting follows the rate limiters' rules: FIFO (a large request is never starved), a
/// queue bound (limiter_options::max_queued), close(). The length of a wait cannot be
/// predicted (it depends on when permits are returned), so max_wait is a deadline:
/// max_wait 0 fails at once with error::timed_out when no slot is free, and a waiter still
/// queued at its deadline completes with error::timed_out (as late as
/// limiter_options::coalesce, never early).
///
/// Executor: completion handlers run on their associated executor (the limiter's when they
/// have none), never inside the initiating function, and never with the limiter's lock
/// held. The limiter's own executor runs its timer (the waiters' deadlines). An admitted
/// permit whose handler is dropped unrun (its executor shut down) returns its slots
/// without a sample.
///
/// Cancellation: async_acquire honours terminal, partial and total cancellation while it
/// waits: it completes with asio::error::operation_aborted and an empty permit (a waiter
/// holds no slot), and the waiters behind it move up. close() and the destructor complete
/// every waiter with error::closed; permits already admitted stay valid, return their slots
/// and report their samples when released.
///
/// Thread-safety: distinct objects safe; a shared limit may be used from any number of
/// threads and io_contexts at once. Every operation, try_acquire included, takes a short
/// mutex, and a permit may be released on any thread. One permit object is not to be used
/// by two threads at once.
template <class Queue, class Clock = default_clock, class Executor = boost::asio::any_io_executor>
class basic_concurrency_limit {
    using state_type = detail::wait_engine<Queue, Clock, Executor>;
    struct permit_grant;

public:
    /// The clock deadlines (and an adaptive limit's latencies) are measured on.
    using clock_type = Clock;
    /// The executor of the limiter's timer, and the default one of completion handlers.
    using executor_type = Executor;
    /// What decides the limit: a number of slots (concurrency_limit), or
    /// adaptive_concurrency_options.
    using config_type = typename Queue::config_type;

    /// The limiter's type on another executor type, as on Asio's I/O objects (what
    /// `use_awaitable_t<>::as_default_on_t` needs).
    template <class OtherExecutor>
    struct rebind_executor {
        /// The same limiter on another executor type.
        using other = basic_concurrency_limit<Queue, Clock, OtherExecutor>;
    };

    /// Slots held by one admission, and the measure of the operation they cover, from the
    /// admission to the end. A permit is an acquire_result: from a failed acquire it is empty
    /// and error(), timed_out(), closed() tell why. It ends in one of three ways, which
    /// return its slots (waking the next waiter): release() or the destructor, success (an
    /// adaptive limit takes its latency as a sample); drop(), it failed from overload (a
    /// timeout, a 503, a refused connection: an adaptive limit shrinks); ignore(), it says
    /// nothing about load (a 404, a cancelled call: no sample). A fixed limit treats the
    /// three alike. An empty permit (default-constructed, moved-from, ended, or from a
    /// failed acquire) holds nothing.
    class permit : public acquire_result {
    public:
        /// An empty permit.
        permit() noexcept = default;

        /// Takes over `other`'s slots (and error); `other` is left empty.
        permit(permit&& other) noexcept
            : acquire_result(std::exchange(static_cast<acquire_result&>(other), acquire_result())),
              state_(std::move(other.state_)), n_(std::exchange(other.n_, 0)), start_(other.start_)
        {
        }

        /// Ends this permit with success, then takes over `other`'s.
        permit& operator=(permit&& other) noexcept
        {
            if (this != &other) {
                release();
                static_cast<acquire_result&>(*this) = std::exchange(static_cast<acquire_result&>(other), acquire_result());
                state_ = std::move(other.state_);
                n_ = std::exchange(other.n_, 0);
                start_ = other.start_;
            }
            return *this;
        }

        /// Ends the permit with success (see release()).
        ~permit() { release(); }

        /// The operation succeeded: the slots go back; an adaptive limit takes the latency,
        /// from the admission (or restart_clock()) to now, as a sample.
        void release() noexcept { end(detail::sample_kind::success); }

        /// The operation failed from overload: the slots go back and an adaptive limit
        /// shrinks whatever the latency.
        void drop() noexcept { end(detail::sample_kind::dropped); }

        /// The slots go back without a sample: the operation tells nothing of load.
        void ignore() noexcept { end(detail::sample_kind::ignored); }

        /// The operation starts now: its latency is measured from here, not from the admission
        /// (for a permit taken before other waits, such as a rate limiter's).
        void restart_clock() noexcept
        {
            if (state_) start_ = state_type::now();
        }

        /// Slots held (0 when empty).
        std::uint64_t count() const noexcept { return n_; }

        /// Whether the permit holds slots.
        explicit operator bool() const noexcept { return state_ != nullptr; }

        /// When the slots were admitted (or restart_clock() last ran), on clock_type. An
        /// adaptive limit's permits only: a fixed limit does not read the clock for them.
        typename Clock::time_point granted_at() const noexcept
        {
            return typename Clock::time_point(
                std::chrono::duration_cast<typename Clock::duration>(std::chrono::nanoseconds(start_)));
        }

    private:
        friend class basic_concurrency_limit;
        friend struct permit_grant;

        permit(std::shared_ptr<state_type> s, std::uint64_t n) noexcept
            : state_(std::move(s)), n_(n), start_(Queue::samples ? state_type::now() : 0)
        {
        }

        explicit permit(const boost::system::error_code& ec) noexcept : acquire_result(ec) {}

        void end(detail::sample_kind kind) noexcept
        {
            if (state_) {
                give_back(*state_, n_, start_, kind);
                state_.reset();
                n_ = 0;
            }
        }

        std::shared_ptr<state_type> state_;
        std::uint64_t n_ = 0;
        std::int64_t start_ = 0;
    };

    /// Builds the limit from `config`: concurrency_limit(ex or io_context, limit,
    /// [limiter_options]); adaptive_concurrency(ex or io_context, [adaptive options],
    /// [limiter_options]). Throws system_error(error::invalid_limit) for a limit of 0,
    /// error::invalid_option for adaptive options out of range.
    basic_concurrency_limit(const std::type_identity_t<Executor>& ex, const config_type& config,
                            const limiter_options& opts = {})
        : state_(std::make_shared<state_type>(ex, opts, config))
    {
    }

    /// The same, on the executor of an execution context (an io_context).
    template <detail::execution_context_ref Context>
    basic_concurrency_limit(Context& ctx, const config_type& config, const limiter_options& opts = {})
        : basic_concurrency_limit(Executor(ctx.get_executor()), config, opts)
    {
    }

    /// With the default configuration (adaptive_concurrency: default options).
    template <detail::execution_context_ref Context>
        requires Queue::default_config
    explicit basic_concurrency_limit(Context& ctx) : basic_concurrency_limit(Executor(ctx.get_executor()), config_type{})
    {
    }

    /// Takes over `other`'s limit, waiters and permits out included; `other` may then only
    /// be destroyed.
    basic_concurrency_limit(basic_concurrency_limit&&) noexcept = default;
    basic_concurrency_limit& operator=(basic_concurrency_limit&&) = delete;

    /// Completes pending waiters with error::closed. Permits already out stay valid.
    ~basic_concurrency_limit()
    {
        if (state_) state_->close();
    }

    /// The executor the limiter's timer runs on.
    executor_type get_executor() const noexcept { return state_->get_executor(); }

    /// A permit for n slots if they are free now and nobody is queued; else an empty one.
    permit try_acquire(std::uint64_t n = 1) { return state_->try_acquire(n) ? permit(state_, n) : permit(); }

    /// try_acquire as an asynchronous operation, for code written against the contract of
    /// every limiter (sluice::limiter). Handler signature: void(boost::system::error_code,
    /// permit): error::closed after close(), else the permit (empty when refused).
    /// Completes through the handler's executor, never inside this call.
    template <BOOST_ASIO_COMPLETION_TOKEN_FOR(void(boost::system::error_code, permit))
                  Token = boost::asio::default_completion_token_t<executor_type>>
    auto async_try_acquire(std::uint64_t n, Token&& token = boost::asio::default_completion_token_t<executor_type>())
    {
        return boost::asio::async_initiate<Token, void(boost::system::error_code, permit)>(
            [](auto handler, std::shared_ptr<state_type> s, std::uint64_t n) {
                if (s->closed())
                    return detail::post_answer(std::move(handler), s->get_executor(), error::closed,
                                               permit(make_error_code(error::closed)));
                permit p = s->try_acquire(n) ? permit(s, n) : permit();
                detail::post_answer(std::move(handler), s->get_executor(), boost::system::error_code(), std::move(p));
            },
            token, state_, n);
    }

    /// Waits for n slots. Handler signature: void(boost::system::error_code, permit).
    /// Errors: error::timed_out (max_wait 0 and no slot free, or the deadline reached while
    /// queued), error::queue_full, error::exceeds_limit (n above the limit),
    /// error::invalid_count (n == 0), error::closed, asio::error::operation_aborted
    /// (cancelled). The permit is empty on error.
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
    boost::asio::awaitable<permit> acquire(std::chrono::nanoseconds max_wait = wait_forever) { return acquire(1, max_wait); }

    /// Waits for n slots; see acquire(max_wait).
    boost::asio::awaitable<permit> acquire(std::uint64_t n, std::chrono::nanoseconds max_wait = wait_forever)
    {
        return detail::await_acquire(async_acquire(n, max_wait, boost::asio::deferred));
    }

    /// Changes the limit (concurrency_limit); permits out stay valid, waiters are admitted
    /// as slots allow. A waiter asking for more than the new limit completes with
    /// error::exceeds_limit. Throws system_error(error::invalid_limit) for 0.
    void set_limit(std::uint64_t limit)
        requires(!Queue::samples)
    {
        detail::slot_queue::check(limit);
        state_->update([limit](Queue& q, std::int64_t, detail::completion_list& done) { q.set_limit(limit, done); });
    }

    /// Completes every pending waiter with error::closed; later requests fail the same way.
    /// Permits already out stay valid.
    void close() { state_->close(); }

    /// The most slots held at once, now.
    std::uint64_t limit() const
    {
        return state_->inspect([](const Queue& q) { return q.limit(); });
    }

    /// Slots held by permits now.
    std::uint64_t in_use() const
    {
        return state_->inspect([](const Queue& q) { return q.in_use(); });
    }

    /// Requests waiting now.
    std::size_t queued() const { return state_->queued(); }

    /// What callers were answered so far and how long they waited, and for an adaptive
    /// limit its controller's counters (the adaptive group: samples, drops, increases and
    /// decreases of the limit). See limiter_stats.
    limiter_stats stats() const { return state_->stats(); }

private:
    // The handler receives a permit owning the admitted slots; an admission dropped unrun (its
    // executor shut down) returns them without a sample.
    struct permit_grant {
        static std::tuple<permit> make(const boost::system::error_code& ec, std::uint64_t n,
                                       const std::shared_ptr<state_type>& s)
        {
            return {ec ? permit(ec) : permit(s, n)};
        }

        static void drop(state_type& s, const boost::system::error_code& ec, std::uint64_t n) noexcept
        {
            if (!ec) give_back(s, n, 0, detail::sample_kind::ignored);
        }
    };

    static void give_back(state_type& s, std::uint64_t n, std::int64_t start, detail::sample_kind kind) noexcept
    {
        s.update([=](Queue& q, std::int64_t now, detail::completion_list& done) { q.complete(n, start, kind, now, done); });
    }

    std::shared_ptr<state_type> state_;
};

/// A fixed limit of concurrent operations: concurrency_limit(ex or io_context, limit,
/// [limiter_options]).
template <class Clock = default_clock, class Executor = boost::asio::any_io_executor>
using concurrency_limit = basic_concurrency_limit<detail::slot_queue, Clock, Executor>;

} // namespace sluice
