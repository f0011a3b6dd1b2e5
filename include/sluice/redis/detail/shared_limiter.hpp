// The public face every Redis-backed limiter shares (redis::token_bucket,
// redis::sliding_window): the contract of every limiter (sluice::limiter, with the key
// first) over a shared core, moves and closing. The named limiters derive from it and add
// their constructors, setters and accessors.
#pragma once

#include <sluice/acquire_result.hpp>
#include <sluice/decision.hpp>
#include <sluice/error.hpp>
#include <sluice/limiter_options.hpp>
#include <sluice/limiter_stats.hpp>
#include <sluice/redis/detail/acquire_fsm.hpp>
#include <sluice/redis/detail/op_step.hpp>
#include <sluice/redis/detail/redis_op.hpp>
#include <sluice/redis/detail/try_fsm.hpp>
#include <sluice/redis/shared_options.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/compose.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

namespace sluice::redis::detail {

/// `Core`: a limiter_core with script_for() and args() (see redis_op); `AcquireFsm`: the
/// state machine behind async_acquire, which differs per limiter (reserve ahead, or ask
/// again).
template <class Core, class AcquireFsm>
class shared_limiter {
public:
    using client_type = typename Core::client_type;
    using executor_type = typename Core::executor_type;
    using clock_type = typename Core::clock_type;

    shared_limiter(shared_limiter&&) noexcept = default;
    shared_limiter& operator=(shared_limiter&& other) noexcept
    {
        if (this != &other) {
            if (core_) core_->close();
            core_ = std::move(other.core_);
        }
        return *this;
    }

    executor_type get_executor() const noexcept { return core_->client().get_executor(); }

    /// Grants n permits of `key` now if the limiter has room for them; one round trip.
    /// The key is copied: the operation owns it (a deferred operation may start later).
    ///
    /// Handler signature: void(boost::system::error_code, decision). The error_code is
    /// set only when no decision could be taken (see the class comment); a refusal is
    /// `decision.admitted == false` with its retry_after (rounded up to whole us): when the
    /// bucket holds n permits again, or when enough of the oldest entries leave the window.
    /// Per-operation cancellation: terminal and partial, forwarded to the client (permits
    /// the server granted meanwhile stay consumed).
    template <BOOST_ASIO_COMPLETION_TOKEN_FOR(void(boost::system::error_code, decision))
                  Token = boost::asio::default_completion_token_t<executor_type>>
    auto async_try_acquire(std::string_view key, std::uint64_t n,
                           Token&& token = boost::asio::default_completion_token_t<executor_type>())
    {
        return boost::asio::async_compose<Token, void(boost::system::error_code, decision)>(
            redis_op<Core, try_fsm>{core_, try_fsm(core_->key_for(key), n)}, token, core_->client().get_executor());
    }

    /// Waits until n permits of `key` are granted, for at most max_wait (how it waits, and
    /// what happens to a grant when the wait ends early: see the class comment). The key is
    /// copied: the operation owns it.
    ///
    /// Handler signature: void(boost::system::error_code). Fail fast: when the permits
    /// cannot be had within max_wait it completes after the round trip with
    /// error::timed_out, and nothing is consumed.
    ///
    /// Per-operation cancellation: terminal, partial and total. While waiting locally the
    /// request completes at once with operation_aborted. During a round trip the
    /// cancellation takes effect when the reply arrives (bounded by the client's command
    /// timeout).
    template <BOOST_ASIO_COMPLETION_TOKEN_FOR(void(boost::system::error_code))
                  Token = boost::asio::default_completion_token_t<executor_type>>
    auto async_acquire(std::string_view key, std::uint64_t n, std::chrono::nanoseconds max_wait,
                       Token&& token = boost::asio::default_completion_token_t<executor_type>())
    {
        return boost::asio::async_compose<Token, void(boost::system::error_code)>(
            redis_op<Core, AcquireFsm>{core_, AcquireFsm(core_->key_for(key), n, max_wait.count())}, token,
            core_->client().get_executor());
    }

    /// Waits for one permit of `key` for at most max_wait. The result converts to true when
    /// granted; otherwise it tells why not: timed_out() (the wait would have exceeded
    /// max_wait, nothing consumed), closed(), or error() for the rest (the backend's errors,
    /// exceeds_limit, operation_aborted when cancelled). It never throws for an error_code.
    /// The key is copied before this returns.
    boost::asio::awaitable<acquire_result> acquire(std::string_view key,
                                                   std::chrono::nanoseconds max_wait = wait_forever)
    {
        return acquire_for(std::string(key), 1, max_wait);
    }

    /// Waits for n permits of `key`; see acquire(key, max_wait).
    boost::asio::awaitable<acquire_result> acquire(std::string_view key, std::uint64_t n,
                                                   std::chrono::nanoseconds max_wait = wait_forever)
    {
        return acquire_for(std::string(key), n, max_wait);
    }

    /// Completes every waiting request with error::closed; later requests fail the same
    /// way (what becomes of a request whose round trip is under way: see the class comment).
    void close() { core_->close(); }

    /// What this process's requests and tries were answered, and the backend's counters
    /// (see limiter_stats). Safe from any thread.
    limiter_stats stats() const { return core_->stats(); }

    /// The Redis key that holds `key`'s state.
    std::string redis_key(std::string_view key) const { return core_->key_for(key); }

protected:
    using core_type = Core;

    // set_rate, set_window: a new span (interval, window) for `key`, rounded up to whole
    // us; one that is not positive is Core::bad_span. One configure script call.
    template <class Token>
    auto async_set_span(std::string_view key, std::chrono::nanoseconds span, Token&& token)
    {
        auto req = Core::configure_request(span.count(), 0);
        if (span.count() <= 0) req.second = make_error_code(Core::bad_span);
        return async_configure(key, req, std::forward<Token>(token));
    }

    // set_burst, set_limit: a new count for `key`; 0 is error::invalid_limit.
    template <class Token>
    auto async_set_count(std::string_view key, std::uint64_t count, Token&& token)
    {
        auto req = Core::configure_request(0, count);
        if (count == 0) req.second = make_error_code(error::invalid_limit);
        return async_configure(key, req, std::forward<Token>(token));
    }

    template <class Token>
    auto async_configure(std::string_view key, std::pair<eval_request, boost::system::error_code> r, Token&& token)
    {
        return boost::asio::async_compose<Token, void(boost::system::error_code)>(
            redis_op<Core, configure_fsm>{core_, configure_fsm(core_->key_for(key), r.first, r.second)}, token,
            core_->client().get_executor());
    }

    explicit shared_limiter(std::shared_ptr<Core> core) noexcept : core_(std::move(core)) {}

    // The coroutine behind acquire(), owning its key.
    boost::asio::awaitable<acquire_result> acquire_for(std::string key, std::uint64_t n,
                                                       std::chrono::nanoseconds max_wait)
    {
        auto [ec] = co_await async_acquire(key, n, max_wait, boost::asio::as_tuple(boost::asio::use_awaitable));
        co_return acquire_result(ec);
    }

    /// Closes: pending waiters complete with error::closed.
    ~shared_limiter()
    {
        if (core_) core_->close();
    }

    std::shared_ptr<Core> core_;
};

} // namespace sluice::redis::detail
