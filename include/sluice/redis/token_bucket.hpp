// A token bucket kept in Redis: one quota shared by every process and host that uses
// the same key.
#pragma once

#include <sluice/basic_limiter.hpp>
#include <sluice/decision.hpp>
#include <sluice/rate.hpp>
#include <sluice/redis/detail/bucket_core.hpp>
#include <sluice/redis/detail/bucket_ops.hpp>
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

/// A token bucket (GCRA) per key, kept in Redis: `rate` permits a second, bursts up to
/// `burst`, for every process that uses the same prefix and key. Every decision is one
/// Lua script (sluice/redis/scripts.hpp) on the server's clock, so hosts need no clock
/// agreement; the state is one integer per key that expires once the bucket is full.
///
///     redis::connection conn(io, {.port = 6379});
///     redis::token_bucket<redis::connection> api(conn, rate::per_second(100), 10);
///     if (co_await api.acquire("user:42", 250ms)) { ... }
///
/// `Client` is anything with `async_eval(script, keys, args, token)` completing with
/// void(error_code, reply) and `get_executor()`: redis::connection, or a cluster client
/// (keys carry a hash tag). The client must outlive the limiter and its operations.
///
/// Waiting: async_acquire reserves the slot in Redis (the script returns how long until
/// it is usable) and then waits on a local timer: reservations from all processes queue
/// in one FIFO on the server, so per key a large request is never starved and a wake-up
/// needs no second round trip.
///
/// When Redis is unreachable or does not answer within the client's command timeout,
/// options.on_failure decides (fail_closed, fail_open, or a local token bucket per key
/// enforcing rate / expected_nodes) until a probe (one request per probe_interval) gets
/// an answer again; stats() counts those fallback decisions. No request waits for a dead
/// server longer than the command timeout.
///
/// Executor: completions run on the handler's associated executor (or the client's), never
/// inside the initiating call. Thread-safety: like the client: one limiter may be used
/// from several threads only if the client may (redis::connection dispatches to its
/// executor); close() and the waiting timers belong to the client's executor. stats() is
/// safe from any thread.
///
/// Errors (completion handlers): error::invalid_count, error::exceeds_burst (bad
/// requests), error::would_exceed_timeout (nothing consumed), error::closed,
/// error::backend_unavailable (fail_closed while Redis is away), error::backend_error (an
/// error reply: a wrong-type value at the key, a script error), error::protocol_error (a
/// reply of the wrong shape), asio::error::operation_aborted. Bad construction
/// parameters throw system_error: error::invalid_rate, invalid_burst (burst 0, or burst
/// times the interval in whole microseconds beyond 2^51 us), invalid_option.
template <class Client, class Clock = std::chrono::steady_clock>
class token_bucket {
    using core_type = detail::bucket_core<Client, Clock>;

public:
    using client_type = Client;
    using executor_type = typename Client::executor_type;
    using clock_type = Clock;

    /// The interval is rounded up to whole microseconds (the server's resolution).
    token_bucket(Client& client, rate r, std::uint64_t burst, limiter_options opts = {})
        : core_(std::make_shared<core_type>(client, r, burst, std::move(opts)))
    {
    }

    token_bucket(token_bucket&&) noexcept = default;
    token_bucket& operator=(token_bucket&& other) noexcept
    {
        if (this != &other) {
            if (core_) core_->close();
            core_ = std::move(other.core_);
        }
        return *this;
    }

    /// Closes: pending waiters complete with error::closed.
    ~token_bucket()
    {
        if (core_) core_->close();
    }

    executor_type get_executor() const noexcept { return core_->client().get_executor(); }

    /// Grants n permits of `key` now if its bucket holds them; one round trip.
    ///
    /// Handler signature: void(boost::system::error_code, decision). The error_code is
    /// set only when no decision could be taken (see the class comment); a refusal is
    /// `decision.allowed == false` with its retry_after (rounded up to whole us).
    /// Per-operation cancellation: terminal and partial, forwarded to the client (a
    /// permit the server granted meanwhile stays consumed).
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
    /// Handler signature: void(boost::system::error_code). Fail fast: when the slot the
    /// server would reserve is more than max_wait away (max_wait is rounded down to whole
    /// us), it completes at once (after the round trip) with error::would_exceed_timeout
    /// and nothing is consumed.
    ///
    /// Per-operation cancellation: terminal, partial and total. While waiting for its
    /// slot the request completes at once with operation_aborted and gives the slot back
    /// in Redis if nothing reserved after it depends on it (otherwise it stays consumed:
    /// never more than the quota). During the round trip the cancellation takes effect
    /// when the reply arrives (bounded by the client's command timeout), for the same
    /// reason.
    template <BOOST_ASIO_COMPLETION_TOKEN_FOR(void(boost::system::error_code))
                  Token = boost::asio::default_completion_token_t<executor_type>>
    auto async_acquire(std::string_view key, std::uint64_t n, std::chrono::nanoseconds max_wait,
                       Token&& token = boost::asio::default_completion_token_t<executor_type>())
    {
        return boost::asio::async_compose<Token, void(boost::system::error_code)>(
            detail::acquire_op<core_type>{core_, core_->key_for(key), n, max_wait.count() < 0 ? 0 : max_wait.count()},
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

    /// Completes every waiting request with error::closed (their slots go back to Redis
    /// where possible); later requests fail the same way.
    void close() { core_->close(); }

    limiter_stats stats() const noexcept { return core_->stats(); }

    /// Leasing: permits this process holds and has not handed out yet (all keys).
    std::uint64_t leased() const { return core_->leased(); }

    /// The Redis key that holds `key`'s bucket.
    std::string redis_key(std::string_view key) const { return core_->key_for(key); }

    std::int64_t interval_us() const noexcept { return core_->interval_us(); }
    std::uint64_t burst() const noexcept { return core_->burst(); }

private:
    std::shared_ptr<core_type> core_;
};

} // namespace sluice::redis
