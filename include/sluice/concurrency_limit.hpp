// Concurrency limits: at most `limit` operations in flight, each holding an RAII permit.
// One front end for the fixed limit (concurrency_limit) and the adaptive one
// (adaptive_concurrency.hpp), which differ only in their queue.
#pragma once

#include <sluice/acquire_result.hpp>
#include <sluice/basic_limiter.hpp>
#include <sluice/default_clock.hpp>
#include <sluice/detail/wait/initiate_acquire.hpp>
#include <sluice/detail/wait/local_answers.hpp>
#include <sluice/detail/wait/slot_queue.hpp>
#include <sluice/detail/wait/wait_engine.hpp>
#include <sluice/limiter_options.hpp>
#include <sluice/limiter_stats.hpp>

#include <boost/asio/any_io_executor.hpp>

#include <chrono>
#include <concepts>
#include <cstdint>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

namespace sluice {

namespace detail {

/// What a concurrency limit's try and acquire hand over: a Permit owning the admitted slots
/// (empty when refused, or carrying the error). An admission dropped unrun (its executor
/// shut down) returns its slots without a sample.
template <class Permit>
struct permit_grant {
    using answer_type = Permit;
    using signature = void(boost::system::error_code, Permit);

    template <class State>
    static Permit answer(const std::shared_ptr<State>& s, bool admitted, std::uint64_t n) noexcept
    {
        return admitted ? Permit(s, n) : Permit();
    }

    static Permit refused(const boost::system::error_code& ec) noexcept { return Permit(ec); }

    // Shadow mode: an admitted permit that holds no slot, so gives none back.
    template <class State>
    static Permit admitted_in_dark(const std::shared_ptr<State>& s, std::uint64_t) noexcept
    {
        return Permit(s, 0);
    }

    template <class State>
    static std::tuple<Permit> make(const boost::system::error_code& ec, std::uint64_t n, const std::shared_ptr<State>& s)
    {
        return {ec ? Permit(ec) : Permit(s, n)};
    }

    template <class State>
    static void drop(State& s, const boost::system::error_code& ec, std::uint64_t n) noexcept
    {
        if (!ec) Permit::give_back(s, n, 0, sample_kind::ignored);
    }
};

} // namespace detail

/// Slots held by one admission, and the measure of the operation they cover, from the
/// admission to the end. A permit is an acquire_result: from a failed acquire it is empty
/// and error(), timed_out(), closed() tell why. It ends in one of three ways, which
/// return its slots (waking the next waiter): release() or the destructor, success (an
/// adaptive limit takes its latency as a sample); drop(), it failed from overload (a
/// timeout, a 503, a refused connection: an adaptive limit shrinks); ignore(), it says
/// nothing about load (a 404, a cancelled call: no sample). A fixed limit treats the
/// three alike. An empty permit (default-constructed, moved-from, ended, or from a
/// failed acquire) holds nothing.
template <class Queue, class Clock, class Executor>
class concurrency_permit : public acquire_result {
    using state_type = detail::wait_engine<Queue, Clock, Executor>;

public:
    /// An empty permit.
    concurrency_permit() noexcept = default;

    /// Takes over `other`'s slots (and error); `other` is left empty.
    concurrency_permit(concurrency_permit&& other) noexcept
        : acquire_result(std::exchange(static_cast<acquire_result&>(other), acquire_result())),
          state_(std::move(other.state_)), n_(std::exchange(other.n_, 0)), start_(other.start_)
    {
    }

    /// Ends this permit with success, then takes over `other`'s.
    concurrency_permit& operator=(concurrency_permit&& other) noexcept
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
    ~concurrency_permit() { release(); }

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

    /// Slots held (0 when empty, and for a permit let through in shadow mode).
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
    template <class>
    friend struct detail::permit_grant;

    concurrency_permit(std::shared_ptr<state_type> s, std::uint64_t n) noexcept
        : state_(std::move(s)), n_(n), start_(Queue::samples ? state_type::now() : 0)
    {
    }

    explicit concurrency_permit(const boost::system::error_code& ec) noexcept : acquire_result(ec) {}

    void end(detail::sample_kind kind) noexcept
    {
        if (state_) {
            if (n_ != 0)   // a permit let through in shadow mode holds nothing
                give_back(*state_, n_, start_, kind);
            state_.reset();
            n_ = 0;
        }
    }

    static void give_back(state_type& s, std::uint64_t n, std::int64_t start, detail::sample_kind kind) noexcept
    {
        s.update([=](Queue& q, std::int64_t now, detail::completion_list& done) { q.complete(n, start, kind, now, done); });
    }

    std::shared_ptr<state_type> state_;
    std::uint64_t n_ = 0;
    std::int64_t start_ = 0;
};

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
/// stats(): what callers were answered and how long they waited, and for an adaptive limit
/// its controller's counters (the adaptive group: samples, drops, increases and decreases
/// of the limit).
///
/// Thread-safety: distinct objects safe; a shared limit may be used from any number of
/// threads and io_contexts at once. Every operation, try_acquire included, takes a short
/// mutex, and a permit may be released on any thread. One permit object is not to be used
/// by two threads at once.
template <class Queue, class Clock = default_clock, class Executor = boost::asio::any_io_executor>
class basic_concurrency_limit
    : public basic_limiter<detail::wait_engine<Queue, Clock, Executor>,
                           detail::local_answers<detail::permit_grant<concurrency_permit<Queue, Clock, Executor>>>> {
    using state_type = detail::wait_engine<Queue, Clock, Executor>;
    using base_type = basic_limiter<state_type,
                                    detail::local_answers<detail::permit_grant<concurrency_permit<Queue, Clock, Executor>>>>;

public:
    /// The clock deadlines (and an adaptive limit's latencies) are measured on.
    using clock_type = Clock;
    /// The executor of the limiter's timer, and the default one of completion handlers.
    using executor_type = Executor;
    /// Slots held by one admission: see concurrency_permit.
    using permit = concurrency_permit<Queue, Clock, Executor>;
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

    /// Builds the limit from `config`: concurrency_limit(ex or io_context, limit,
    /// [limiter_options]); adaptive_concurrency(ex or io_context, [adaptive options],
    /// [limiter_options]). Throws system_error(error::invalid_limit) for a limit of 0,
    /// error::invalid_option for adaptive options out of range.
    basic_concurrency_limit(const std::type_identity_t<Executor>& ex, const config_type& config,
                            const limiter_options& opts = {})
        : base_type(std::make_shared<state_type>(ex, opts, config))
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

    /// Changes the limit (concurrency_limit); permits out stay valid, waiters are admitted
    /// as slots allow. A waiter asking for more than the new limit completes with
    /// error::exceeds_limit. Throws system_error(error::invalid_limit) for 0.
    void set_limit(std::uint64_t limit)
        requires(!Queue::samples)
    {
        detail::slot_queue::check(limit);
        this->state_->update([limit](Queue& q, std::int64_t, detail::completion_list& done) { q.set_limit(limit, done); });
    }

    /// The most slots held at once, now.
    std::uint64_t limit() const
    {
        return this->state_->inspect([](const Queue& q) { return q.limit(); });
    }

    /// Slots held by permits now.
    std::uint64_t in_use() const
    {
        return this->state_->inspect([](const Queue& q) { return q.in_use(); });
    }

    /// Requests waiting now.
    std::size_t queued() const { return this->state_->queued(); }
};

/// A fixed limit of concurrent operations: concurrency_limit(ex or io_context, limit,
/// [limiter_options]).
template <class Clock = default_clock, class Executor = boost::asio::any_io_executor>
using concurrency_limit = basic_concurrency_limit<detail::slot_queue, Clock, Executor>;

} // namespace sluice
