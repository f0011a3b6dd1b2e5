// A sliding window kept in Redis: the strong guarantee for every process and host that
// uses the same key.
#pragma once

#include <sluice/error.hpp>
#include <sluice/redis/detail/front/shared_limiter.hpp>
#include <sluice/redis/detail/store/window_backend.hpp>
#include <sluice/keyed.hpp>
#include <sluice/sliding_window.hpp>
#include <sluice/redis/detail/store/acquire_fsm.hpp>
#include <sluice/redis/shared_options.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>

namespace sluice::redis {

namespace detail {
// The state behind a redis::sliding_window: a keyed local sliding window decides while Redis is away.
template <class Client, class Clock>
using window_state = window_backend<Client, Clock, keyed<sluice::sliding_window<Clock, typename Client::executor_type>>>;
} // namespace detail

/// A sliding window log per key, kept in Redis: never more than `limit` permits in ANY
/// `window`-long interval, for every process that uses the same prefix and key (as
/// sluice::sliding_window does in one process). Every decision is one Lua script
/// (lua::sliding_log) on the server's clock; the state is a sorted set of up to `limit`
/// timestamps per key that expires once the window is empty.
///
///     redis::connection conn(io, {.port = 6379});
///     redis::sliding_window<redis::connection> api(conn, 100, 1s);
///     if (auto r = co_await api.acquire("user:42", 250ms); !r) { ... r.timed_out() ... }
///
/// `Client` is as for redis::token_bucket (redis::connection or a cluster client); it must
/// outlive the limiter and its operations.
///
/// Waiting: the log cannot reserve ahead, so async_acquire asks, and when refused sleeps
/// locally until the script's retry_after (a lower bound: when enough of the oldest
/// entries leave the window) and asks again. From its first refusal on, a waiter holds a
/// ticket in the key's waiters' queue in Redis ("{prefix:key}:q"): a request is granted
/// only when the window has room for it and for every live ticket before it, so waiters
/// are served first come, first served across processes, and tries never overtake them.
/// Every exit before a grant (timeout, cancellation, close, the fallback) leaves the
/// queue; a ticket left behind by a process that died holds its place until its deadline.
/// A check that finds the time left shorter than the wait still needed completes with
/// error::timed_out.
///
/// Batching: at most one script call per key is in flight from a limiter. A request (a try,
/// or a waiter's re-check) for a key with no call in flight goes at once; those that come
/// while one is in flight wait for its reply and go together as the next call (up to 64; the
/// script decides them in order at one instant, as that many calls in a row would), so a
/// busy key pays the script's fixed part once per round trip, not once per request. A
/// request may wait for the call in flight before its own: up to two command timeouts.
///
/// Operations and stats(): those of redis::token_bucket (the contract of every sluice
/// limiter, sluice::limiter, with the key first); a try takes one round trip; a wait
/// counted in stats() is the time from the request to its grant when it slept before a
/// re-check.
///
/// Failure handling (options.on_failure, probing, stats().backend) is that of
/// redis::token_bucket;
/// local_fallback enforces a local sluice::sliding_window per key with limit /
/// expected_nodes (at least 1) permits per window. Permits granted by the fallback are
/// not in Redis: while Redis is away, the guarantee across processes is only as good as
/// expected_nodes. A check sent just before the deadline may still wait its command
/// timeout: an async_acquire ends by max_wait + the command timeout.
///
/// Executor: completions run on the handler's associated executor (the client's when it
/// has none), never inside the initiating call. Requests sleeping before a re-check share
/// one timer per limiter (coalesced, shared_options::coalesce), on the client's executor.
///
/// Cancellation: async_acquire honours terminal, partial and total cancellation. While it
/// sleeps before a re-check it completes at once with operation_aborted, having consumed
/// nothing. Cancelled during a round trip, a grant stands and completes with success, a
/// refusal completes with operation_aborted. async_try_acquire honours terminal and
/// partial cancellation: waiting for its key's call in flight, it completes at once with
/// operation_aborted, having sent nothing; its own call in flight is not cancelled (others'
/// requests ride in it) and it completes with its decision. close() completes every sleeping request with error::closed and lets a
/// request whose round trip is under way complete with its reply (a grant stands: it is
/// consumed in Redis).
///
/// Thread-safety: like the client: one limiter may be used from several threads only if
/// the client may (redis::connection dispatches to its executor); close() and the waiting
/// requests belong to the client's executor. stats() is safe from any thread.
///
/// Errors (completion handlers): error::invalid_count, error::exceeds_limit (n > limit),
/// error::timed_out (nothing consumed), error::closed,
/// error::backend_unavailable (fail_closed while Redis is away), error::backend_error,
/// error::protocol_error, asio::error::operation_aborted. Bad construction parameters
/// throw system_error: error::invalid_limit (limit 0 or above 2^24), error::invalid_duration
/// (window <= 0 or above 2^51 us), error::invalid_option.
template <class Client, class Clock = std::chrono::steady_clock>
class sliding_window : public detail::shared_limiter<detail::window_state<Client, Clock>, detail::window_acquire_fsm> {
    using base_type = detail::shared_limiter<detail::window_state<Client, Clock>, detail::window_acquire_fsm>;

public:
    /// The window is rounded up to whole microseconds (the server's resolution).
    sliding_window(Client& client, std::uint64_t limit, std::chrono::nanoseconds window, shared_options opts = {})
        : base_type(std::make_shared<typename base_type::core_type>(client, limit, window, std::move(opts)))
    {
    }

    /// Changes the limit of `key` for every process: stored with the key in Redis
    /// ("{prefix:key}:cfg", no expiry), used by every script call on the key from then on.
    /// The permits in the window stay counted (consumed stays consumed): lowering the
    /// limit below them refuses until enough leave the window. Other keys and the local
    /// fallback keep this limiter's configuration.
    ///
    /// Handler signature: void(boost::system::error_code): error::invalid_limit (0 or
    /// more than 2^24), error::closed, the client's errors.
    template <BOOST_ASIO_COMPLETION_TOKEN_FOR(void(boost::system::error_code))
                  Token = boost::asio::default_completion_token_t<typename base_type::executor_type>>
    auto async_set_limit(std::string_view key, std::uint64_t limit,
                         Token&& token = boost::asio::default_completion_token_t<typename base_type::executor_type>())
    {
        return this->async_set_count(key, limit, std::forward<Token>(token));
    }

    /// Changes the window of `key` for every process (rounded up to whole us), as
    /// async_set_limit. error::invalid_duration for a window <= 0 or beyond 2^51 us.
    template <BOOST_ASIO_COMPLETION_TOKEN_FOR(void(boost::system::error_code))
                  Token = boost::asio::default_completion_token_t<typename base_type::executor_type>>
    auto async_set_window(std::string_view key, std::chrono::nanoseconds window,
                          Token&& token = boost::asio::default_completion_token_t<typename base_type::executor_type>())
    {
        return this->async_set_span(key, window, std::forward<Token>(token));
    }

    /// The most permits of one key in any window-long interval (the constructor's).
    std::uint64_t limit() const noexcept { return this->state_->limit(); }
    /// The window, in whole microseconds as the scripts use it (the constructor's, rounded
    /// up).
    std::chrono::microseconds window() const noexcept { return this->state_->window(); }
};

} // namespace sluice::redis
