// A sliding window kept in Redis: the strong guarantee for every process and host that
// uses the same key.
#pragma once

#include <sluice/basic_limiter.hpp>
#include <sluice/decision.hpp>
#include <sluice/redis/detail/bucket_ops.hpp>
#include <sluice/redis/detail/window_core.hpp>
#include <sluice/redis/detail/window_ops.hpp>
#include <sluice/redis/limiter_options.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/compose.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace sluice::redis {

/// A sliding window log per key, kept in Redis: never more than `limit` permits in ANY
/// `window`-long interval, for every process that uses the same prefix and key (as
/// sluice::sliding_window does in one process). Every decision is one Lua script
/// (lua::sliding_log) on the server's clock; the state is a sorted set of up to `limit`
/// timestamps per key that expires once the window is empty.
///
///     redis::connection conn(io, {.port = 6379});
///     redis::sliding_window<redis::connection> api(conn, 100, 1s);
///     if (co_await api.acquire("user:42", 250ms)) { ... }
///
/// `Client` is as for redis::token_bucket (redis::connection or a cluster client); it must
/// outlive the limiter and its operations.
///
/// Waiting: the log cannot reserve ahead, so async_acquire asks, and when refused sleeps
/// on a local timer until the script's retry_after (when enough of the oldest entries
/// leave the window) and asks again. Waiters are not queued: across processes the
/// first to ask after a slot frees gets it, so a request for many permits may lose to
/// smaller ones. A random delay of up to 2 ms on each re-check lets processes take
/// turns at random rather than the fastest one always winning, but nothing guarantees a
/// share: a waiter may lose until its max_wait runs out. Prefer redis::token_bucket
/// (one FIFO of reservations on the server) when fair waiting matters more than the
/// strict window.
///
/// Failure handling (options.on_failure, probing, stats()) is that of redis::token_bucket;
/// local_fallback enforces a local sluice::sliding_window per key with limit /
/// expected_nodes (at least 1) permits per window. Permits granted by the fallback are
/// not in Redis: while Redis is away, the guarantee across processes is only as good as
/// expected_nodes.
///
/// Executor, thread-safety: as redis::token_bucket.
///
/// Errors (completion handlers): error::invalid_count, error::exceeds_burst (n > limit),
/// error::would_exceed_timeout (nothing consumed), error::closed,
/// error::backend_unavailable (fail_closed while Redis is away), error::backend_error,
/// error::protocol_error, asio::error::operation_aborted. Bad construction parameters
/// throw system_error: error::invalid_burst (limit 0 or above 2^24), error::invalid_rate
/// (window <= 0 or above 2^51 us), error::invalid_option.
template <class Client, class Clock = std::chrono::steady_clock>
class sliding_window {
    using core_type = detail::window_core<Client, Clock>;

public:
    using client_type = Client;
    using executor_type = typename Client::executor_type;
    using clock_type = Clock;

    /// The window is rounded up to whole microseconds (the server's resolution).
    sliding_window(Client& client, std::uint64_t limit, std::chrono::nanoseconds window, limiter_options opts = {})
        : core_(std::make_shared<core_type>(client, limit, window, std::move(opts)))
    {
    }

    sliding_window(sliding_window&&) noexcept = default;
    sliding_window& operator=(sliding_window&& other) noexcept
    {
        if (this != &other) {
            if (core_) core_->close();
            core_ = std::move(other.core_);
        }
        return *this;
    }

    /// Closes: pending waiters complete with error::closed.
    ~sliding_window()
    {
        if (core_) core_->close();
    }

    executor_type get_executor() const noexcept { return core_->client().get_executor(); }

    /// Grants n permits of `key` now if the window has room for them; one round trip.
    ///
    /// Handler signature: void(boost::system::error_code, decision). A refusal is
    /// `decision.allowed == false` with its retry_after: when enough of the oldest entries
    /// leave the window (rounded up to whole us).
    /// Per-operation cancellation: terminal and partial, forwarded to the client (permits
    /// the server granted meanwhile stay consumed).
    template <BOOST_ASIO_COMPLETION_TOKEN_FOR(void(boost::system::error_code, decision))
                  Token = boost::asio::default_completion_token_t<executor_type>>
    auto async_try_acquire(std::string_view key, std::uint64_t n,
                           Token&& token = boost::asio::default_completion_token_t<executor_type>())
    {
        return boost::asio::async_compose<Token, void(boost::system::error_code, decision)>(
            detail::try_op<core_type>{core_, core_->key_for(key), n}, token, core_->client().get_executor());
    }

    /// Waits until n permits of `key` are granted, for at most max_wait.
    ///
    /// Handler signature: void(boost::system::error_code). Fail fast: when the window's
    /// retry_after already lies beyond max_wait it completes after the round trip with
    /// error::would_exceed_timeout; the same when a later check finds the remaining time
    /// too short. Nothing is consumed unless it succeeds.
    ///
    /// Per-operation cancellation: terminal, partial and total. While sleeping between
    /// checks the request completes at once with operation_aborted. During a round trip
    /// the cancellation takes effect when the reply arrives (bounded by the client's
    /// command timeout): a grant stands and completes with success, a refusal completes
    /// with operation_aborted.
    template <BOOST_ASIO_COMPLETION_TOKEN_FOR(void(boost::system::error_code))
                  Token = boost::asio::default_completion_token_t<executor_type>>
    auto async_acquire(std::string_view key, std::uint64_t n, std::chrono::nanoseconds max_wait,
                       Token&& token = boost::asio::default_completion_token_t<executor_type>())
    {
        return boost::asio::async_compose<Token, void(boost::system::error_code)>(
            detail::window_acquire_op<core_type>{core_, core_->key_for(key), n, max_wait.count() < 0 ? 0 : max_wait.count()},
            token, core_->client().get_executor());
    }

    /// Waits for one permit of `key` for at most max_wait: true when granted, false when
    /// the wait would have exceeded max_wait (nothing consumed). Other errors throw.
    boost::asio::awaitable<bool> acquire(std::string key, std::chrono::nanoseconds max_wait = wait_forever)
    {
        return acquire(std::move(key), 1, max_wait);
    }

    boost::asio::awaitable<bool> acquire(std::string key, std::uint64_t n, std::chrono::nanoseconds max_wait = wait_forever)
    {
        auto [ec] = co_await async_acquire(key, n, max_wait, boost::asio::as_tuple(boost::asio::use_awaitable));
        if (!ec)
            co_return true;
        if (ec == error::would_exceed_timeout)
            co_return false;
        throw boost::system::system_error(ec);
    }

    /// Completes every sleeping request with error::closed; later requests fail the same
    /// way. A request whose round trip is under way completes with its reply (a grant
    /// stands: it is consumed in Redis).
    void close() { core_->close(); }

    limiter_stats stats() const noexcept { return core_->stats(); }

    /// The Redis key that holds `key`'s log.
    std::string redis_key(std::string_view key) const { return core_->key_for(key); }

    std::uint64_t limit() const noexcept { return core_->limit(); }
    std::chrono::microseconds window() const noexcept { return std::chrono::microseconds{core_->window_us()}; }

private:
    std::shared_ptr<core_type> core_;
};

} // namespace sluice::redis
