// A token bucket kept in Redis: one quota shared by every process and host that uses
// the same key.
#pragma once

#include <sluice/error.hpp>
#include <sluice/rate.hpp>
#include <sluice/redis/detail/front/shared_limiter.hpp>
#include <sluice/redis/detail/store/bucket_backend.hpp>
#include <sluice/keyed.hpp>
#include <sluice/token_bucket.hpp>
#include <sluice/redis/detail/store/acquire_fsm.hpp>
#include <sluice/redis/shared_options.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>

namespace sluice::redis {

namespace detail {
// The state behind a redis::token_bucket: a keyed local token bucket decides while Redis is away.
template <class Client, class Clock>
using bucket_state = bucket_backend<Client, Clock, keyed<sluice::token_bucket<Clock, typename Client::executor_type>>>;
} // namespace detail

/// A token bucket (GCRA) per key, kept in Redis: `rate` permits a second, bursts up to
/// `burst`, for every process that uses the same prefix and key. Every decision is one
/// Lua script (sluice/redis/scripts.hpp) on the server's clock, so hosts need no clock
/// agreement; the state is one integer per key that expires once the bucket is full.
///
///     redis::connection conn(io, {.port = 6379});
///     redis::token_bucket<redis::connection> api(conn, rate::per_second(100), 10);
///     if (auto r = co_await api.acquire("user:42", 250ms); !r) { ... r.timed_out() ... }
///
/// `Client` is anything with `async_eval(script, keys, args, token)` completing with
/// void(error_code, reply) and `get_executor()`: redis::connection, or a cluster client
/// (keys carry a hash tag). The client must outlive the limiter and its operations.
///
/// Waiting: async_acquire reserves the slot in Redis (the script returns how long until
/// it is usable) and then waits locally until then: reservations from all processes queue
/// in one FIFO on the server, so per key a large request is never starved and a wake-up
/// needs no second round trip. max_wait is rounded down to whole us.
///
/// Operations: the contract of every sluice limiter (sluice::limiter, with the key
/// first), from its base: async_try_acquire(key, n, token), completing with
/// void(error_code, decision) after one round trip (with shared_options::lease_size,
/// usually none); async_acquire(key, n, max_wait, token), completing with
/// void(error_code); acquire(key, [n,] max_wait), an awaitable<acquire_result> that never
/// throws for an error_code; close(); stats(), a limiter_stats; get_executor();
/// redis_key(key), the Redis key that holds `key`'s state. Keys are copied into the
/// operations. There is no synchronous try_acquire: every decision is a round trip.
///
/// Tickets: async_try_admit(key, n, token) and async_admit(key, n, max_wait, token)
/// complete with void(error_code, admission); async_settle(ticket, actual, token) settles
/// one in one script call (lua::gcra_settle, as policy::gcra's settle: lower gives the
/// intervals back, never past a full bucket; higher is a debt past the burst), completing
/// with void(error_code): error::not_admitted, already_settled, foreign_admission,
/// closed, or the client's (nothing settled). A ticket carries no configuration epoch (a
/// key's configuration lives in Redis): it is settled in the key's intervals in force.
/// async_peek(key, n, token): what async_try_acquire would answer now, from a script call
/// that writes nothing; not counted in stats(), and error::backend_unavailable while Redis
/// is away (no failure policy).
///
/// stats(): requests (async_acquire, acquire) by outcome, each counted once when it is
/// answered (`waiting`: started and not answered yet, in a round trip or waiting for its
/// slot; a wait is the time from the request to its grant when it waited for a reserved
/// slot; a request the local fallback admits counts no wait); tries by decision (a try
/// that completes with an error_code took none and is not counted there); the `backend`
/// group (commands, errors, fallback decisions, leased slots expired, the last round
/// trip, the server's clock offset, degraded).
///
/// When Redis is unreachable or does not answer within the client's command timeout,
/// options.on_failure decides (fail_closed, fail_open, or a local token bucket per key
/// enforcing rate / expected_nodes) until a probe (one request per probe_interval) gets
/// an answer again; stats().backend counts those fallback decisions. No request waits
/// for a dead server longer than the command timeout, and the failure policy gets what is
/// left of max_wait: an async_acquire ends by max(max_wait, command timeout).
///
/// Executor: completions run on the handler's associated executor (the client's when it
/// has none), never inside the initiating call. Requests waiting for their reserved slot
/// share one timer per limiter (coalesced, shared_options::coalesce), on the client's
/// executor.
///
/// Cancellation: async_acquire honours terminal, partial and total cancellation. While it
/// waits locally for a reserved slot, it completes at once with
/// operation_aborted and gives the slot back in Redis if nothing reserved after it
/// depends on it (otherwise the slot stays consumed: never more than the quota). During a
/// round trip the cancellation takes effect when the reply arrives (within the client's
/// command timeout), for the same reason. async_try_acquire honours terminal and partial
/// cancellation, forwarded to the client: permits the server granted meanwhile stay
/// consumed. close() completes every waiting request with error::closed and gives its
/// slot back the same way.
///
/// Thread-safety: like the client: one limiter may be used from several threads only if
/// the client may (redis::connection dispatches to its executor); close() and the waiting
/// requests belong to the client's executor. stats() is safe from any thread.
///
/// Errors (completion handlers): error::invalid_count, error::exceeds_limit (bad
/// requests), error::timed_out (nothing consumed), error::closed,
/// error::backend_unavailable (fail_closed while Redis is away), error::backend_error (an
/// error reply: a wrong-type value at the key, a script error), error::protocol_error (a
/// reply of the wrong shape), asio::error::operation_aborted. Bad construction
/// parameters throw system_error: error::invalid_rate, invalid_limit (burst 0, or burst
/// times the interval in whole microseconds beyond 2^51 us), invalid_option.
template <class Client, class Clock = std::chrono::steady_clock>
class token_bucket : public detail::shared_limiter<detail::bucket_state<Client, Clock>, detail::bucket_acquire_fsm> {
    using base_type = detail::shared_limiter<detail::bucket_state<Client, Clock>, detail::bucket_acquire_fsm>;

public:
    /// The interval is rounded up to whole microseconds (the server's resolution).
    token_bucket(Client& client, rate r, std::uint64_t burst, shared_options opts = {})
        : base_type(std::make_shared<typename base_type::core_type>(client, r, burst, std::move(opts)))
    {
    }

    /// Changes the rate of `key` for every process: the new interval (rounded up to whole
    /// us) is stored with the key in Redis ("{prefix:key}:cfg", no expiry) and every
    /// script call on the key, from any process, uses it from then on (each process
    /// follows on its next round trip; a lease already held keeps its slots). The permits
    /// available now are kept, capped by the burst, and a debt stays a debt of the same
    /// number of permits, as sluice::token_bucket::set_rate. Other keys keep their
    /// configuration; the local fallback keeps this limiter's.
    ///
    /// Handler signature: void(boost::system::error_code): error::invalid_rate (an
    /// interval beyond 2^51 us), error::closed, the client's errors (Redis unreachable:
    /// nothing changed, or the reply was lost: retry, a change is idempotent).
    template <BOOST_ASIO_COMPLETION_TOKEN_FOR(void(boost::system::error_code))
                  Token = boost::asio::default_completion_token_t<typename base_type::executor_type>>
    auto async_set_rate(std::string_view key, rate r,
                        Token&& token = boost::asio::default_completion_token_t<typename base_type::executor_type>())
    {
        return this->async_set_span(key, r.interval(), std::forward<Token>(token));
    }

    /// Changes the burst of `key` for every process, as async_set_rate: the permits
    /// available now are kept, capped by the new burst; a debt is kept. error::invalid_limit
    /// for 0, or beyond what the scripts accept (interval x burst <= 2^51 us, checked by
    /// the script: then the reply is error::backend_error and nothing changes).
    template <BOOST_ASIO_COMPLETION_TOKEN_FOR(void(boost::system::error_code))
                  Token = boost::asio::default_completion_token_t<typename base_type::executor_type>>
    auto async_set_burst(std::string_view key, std::uint64_t burst,
                         Token&& token = boost::asio::default_completion_token_t<typename base_type::executor_type>())
    {
        return this->async_set_count(key, burst, std::forward<Token>(token));
    }

    /// Leasing: permits this process holds and has not handed out yet (all keys).
    std::uint64_t leased() const { return this->state_->leased(); }

    /// The time between two permits, in whole microseconds as the scripts use it (the
    /// constructor's rate rounded up). A key's own configuration in Redis (async_set_rate)
    /// may differ.
    std::chrono::microseconds interval() const noexcept { return this->state_->interval(); }
    /// The rate of interval().
    sluice::rate rate() const { return sluice::rate::every(interval()); }
    /// The most permits a key's bucket holds (the constructor's).
    std::uint64_t burst() const noexcept { return this->state_->burst(); }
};

} // namespace sluice::redis
