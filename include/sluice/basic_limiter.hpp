// The one front of every limiter: the verbs of the contract (sluice::limiter) written once,
// over a backend that takes the decisions and a way of answering that delivers them.
#pragma once

#include <sluice/acquire_result.hpp>
#include <sluice/decision.hpp>
#include <sluice/detail/wait/immediate.hpp>
#include <sluice/limiter_options.hpp>
#include <sluice/limiter_stats.hpp>

#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace sluice {

namespace detail {

/// What an operation that may outlive its call keeps of a key: a string for anything that
/// views characters (std::string_view, const char*, a literal), a decayed copy otherwise.
/// The synchronous try looks up by the caller's view and builds nothing.
template <class K>
struct owned_key {
    using type = std::conditional_t<std::is_convertible_v<const K&, std::string_view>, std::string, std::decay_t<K>>;
};

template <class Char, class Traits>
struct owned_key<std::basic_string_view<Char, Traits>> {
    using type = std::basic_string<Char, Traits>;
};

template <class K>
using owned_key_t = typename owned_key<K>::type;

/// A backend whose every call names a key (keyed, shm::keyed_bucket, the Redis limiters).
template <class State>
concept keyed_state = State::keyed;

/// A way of answering that decides a try in the call, with no I/O.
template <class Answers>
concept answers_at_once = Answers::at_once;

/// What acquire() yields for an async_acquire completing with `Signature`.
template <class Signature>
struct acquire_value;

template <>
struct acquire_value<void(boost::system::error_code)> {
    using type = acquire_result;
};

template <class Permit>
struct acquire_value<void(boost::system::error_code, Permit)> {
    using type = Permit;
};

} // namespace detail

/// The front of every limiter: the verbs of the contract (sluice::limiter) written once,
/// each named limiter deriving from it (rate_limiter and its aliases, keyed,
/// basic_concurrency_limit, shm::keyed_bucket, redis::token_bucket, redis::sliding_window).
/// Nobody builds a basic_limiter itself.
///
/// `State` is the backend, shared by the limiter and its pending operations: it takes the
/// decisions (`try_acquire(key..., n)`, and `start(...)` of an acquire that waits in a wait
/// engine), and has `get_executor()`, `closed()`, `close()` and `stats()`; `State::keyed`
/// when every call names a key. `Answers` is its way of answering: decided in the call and
/// posted, waiting in a wait engine (a local limiter's), or after a round trip (Redis's);
/// it fixes what a try answers (a decision, or a concurrency limit's permit) and what an
/// acquire hands over. A verb added here is added to every limiter, each backend supplying
/// only its decision.
///
/// Keys: the synchronous try looks a key up as given (a std::string_view builds no
/// string); an asynchronous operation owns its key (a view becomes a std::string), since it
/// may start after the call has returned (deferred, use_awaitable).
///
/// Moves: a limiter moved from may only be destroyed or assigned to; assigning closes the
/// limiter assigned to first. The destructor closes: pending waiters complete with
/// error::closed.
template <class State, class Answers>
class basic_limiter {
    static constexpr bool keyed = detail::keyed_state<State>;
    static constexpr bool at_once = detail::answers_at_once<Answers>;

public:
    /// The executor of the limiter's timers, and the default one of completion handlers.
    using executor_type = typename State::executor_type;
    /// What a try answers: a decision, or a concurrency limit's permit.
    using answer_type = typename Answers::answer_type;
    /// The completion signature of async_try_acquire.
    using try_signature = void(boost::system::error_code, answer_type);
    /// The completion signature of async_acquire: void(error_code), or a concurrency
    /// limit's void(error_code, permit).
    using acquire_signature = typename Answers::acquire_signature;
    /// What acquire() yields: an acquire_result, or a concurrency limit's permit (one too).
    using acquire_value_type = typename detail::acquire_value<acquire_signature>::type;

    /// The executor the limiter's timers run on.
    executor_type get_executor() const noexcept { return state_->get_executor(); }

    /// Admits n permits now if possible, without waiting (local limiters: no I/O). It
    /// answers by the backend alone, also after close().
    [[gnu::always_inline]] answer_type try_acquire(std::uint64_t n = 1) noexcept(noexcept(Answers::try_acquire(state_, n)))
        requires(at_once && !keyed)
    {
        return Answers::try_acquire(state_, n);
    }

    /// Admits n permits of `key` now if possible; `key` is anything the backend looks keys
    /// up by (a std::string_view for string keys): no key is built unless the key is new.
    template <class K>
    [[gnu::always_inline]] answer_type try_acquire(const K& key, std::uint64_t n = 1) noexcept(
        noexcept(Answers::try_acquire(state_, n, key)))
        requires(at_once && keyed)
    {
        return Answers::try_acquire(state_, n, key);
    }

    /// try_acquire as an asynchronous operation: the verb of every limiter, where a shared
    /// one needs a round trip.
    ///
    /// Handler signature: try_signature, void(boost::system::error_code, decision) (a
    /// concurrency limit: its permit, empty when refused). The error_code is set only when
    /// no decision could be taken: error::closed after close(), or a shared backend's
    /// failure; a refusal is an answer that converts to false. Completes through the
    /// handler's executor, never inside this call. A local limiter answers at once (nothing
    /// to cancel); a shared one after its round trip (see its class comment).
    template <BOOST_ASIO_COMPLETION_TOKEN_FOR(try_signature) Token =
                  boost::asio::default_completion_token_t<executor_type>>
    auto async_try_acquire(std::uint64_t n, Token&& token = boost::asio::default_completion_token_t<executor_type>())
        requires(!keyed)
    {
        return boost::asio::async_initiate<Token, try_signature>(Answers::try_initiation(state_), token, n);
    }

    /// The same for n permits of `key`; the operation owns a copy of the key.
    template <class K, BOOST_ASIO_COMPLETION_TOKEN_FOR(try_signature) Token =
                           boost::asio::default_completion_token_t<executor_type>>
    auto async_try_acquire(const K& key, std::uint64_t n,
                           Token&& token = boost::asio::default_completion_token_t<executor_type>())
        requires keyed
    {
        return boost::asio::async_initiate<Token, try_signature>(Answers::try_initiation(state_), token, n,
                                                                 detail::owned_key_t<K>(key));
    }

    /// Waits until n permits are admitted, for at most max_wait.
    ///
    /// Handler signature: acquire_signature, void(boost::system::error_code) (a concurrency
    /// limit: void(error_code, permit), the permit empty on error). Every completion token:
    /// use_awaitable, deferred, use_future, as_tuple, callbacks, the awaitable operators.
    /// Completes through the handler's executor, never inside this call.
    ///
    /// Errors: error::timed_out (the wait would exceed max_wait, nothing consumed; or the
    /// deadline passed while queued), error::queue_full, error::exceeds_limit and
    /// error::invalid_count (requests that can never be admitted), error::closed after
    /// close(), asio::error::operation_aborted when cancelled, and a backend's own (see the
    /// limiter's class comment, and docs/guide.md, "Errors").
    ///
    /// Per-operation cancellation: terminal, partial and total while the request waits; it
    /// gives back what it held and the waiters behind it move up. An answer given stands.
    template <BOOST_ASIO_COMPLETION_TOKEN_FOR(acquire_signature) Token =
                  boost::asio::default_completion_token_t<executor_type>>
    auto async_acquire(std::uint64_t n, std::chrono::nanoseconds max_wait,
                       Token&& token = boost::asio::default_completion_token_t<executor_type>())
        requires(!keyed)
    {
        return boost::asio::async_initiate<Token, acquire_signature>(Answers::acquire_initiation(state_), token, n,
                                                                     max_wait.count());
    }

    /// The same for n permits of `key`, per key; the operation owns a copy of the key.
    template <class K, BOOST_ASIO_COMPLETION_TOKEN_FOR(acquire_signature) Token =
                           boost::asio::default_completion_token_t<executor_type>>
    auto async_acquire(const K& key, std::uint64_t n, std::chrono::nanoseconds max_wait,
                       Token&& token = boost::asio::default_completion_token_t<executor_type>())
        requires keyed
    {
        return boost::asio::async_initiate<Token, acquire_signature>(Answers::acquire_initiation(state_), token, n,
                                                                     max_wait.count(), detail::owned_key_t<K>(key));
    }

    /// Waits for one permit for at most max_wait: the coroutine form of async_acquire. The
    /// result converts to true when admitted; otherwise it tells why not: timed_out(),
    /// closed(), or error() for the rest. It never throws for an error_code.
    boost::asio::awaitable<acquire_value_type> acquire(std::chrono::nanoseconds max_wait = wait_forever)
        requires(!keyed)
    {
        return acquire(1, max_wait);
    }

    /// Waits for n permits; see acquire(max_wait).
    boost::asio::awaitable<acquire_value_type> acquire(std::uint64_t n, std::chrono::nanoseconds max_wait = wait_forever)
        requires(!keyed)
    {
        return detail::await_acquire(async_acquire(n, max_wait, boost::asio::deferred));
    }

    /// Waits for one permit of `key`; see acquire(max_wait). The key is copied.
    template <class K>
    boost::asio::awaitable<acquire_value_type> acquire(const K& key, std::chrono::nanoseconds max_wait = wait_forever)
        requires keyed
    {
        return acquire(key, 1, max_wait);
    }

    /// Waits for n permits of `key`; see acquire(max_wait). The key is copied.
    template <class K>
    boost::asio::awaitable<acquire_value_type> acquire(const K& key, std::uint64_t n,
                                                       std::chrono::nanoseconds max_wait = wait_forever)
        requires keyed
    {
        return detail::await_acquire(async_acquire(key, n, max_wait, boost::asio::deferred));
    }

    /// Completes every pending waiter with error::closed; later requests fail the same way
    /// (a local try still answers by the backend).
    void close() { state_->close(); }

    /// What callers were answered so far, and how long they waited (see limiter_stats).
    limiter_stats stats() const { return state_->stats(); }

protected:
    /// Takes the backend a derived limiter built.
    explicit basic_limiter(std::shared_ptr<State> state) noexcept : state_(std::move(state)) {}

    /// Takes over `other`'s backend, waiters included.
    basic_limiter(basic_limiter&&) noexcept = default;

    /// Closes this limiter (its waiters complete with error::closed), then takes over
    /// `other`'s.
    basic_limiter& operator=(basic_limiter&& other) noexcept
    {
        if (this != &other) {
            if (state_) state_->close();
            state_ = std::move(other.state_);
        }
        return *this;
    }

    /// Closes the limiter: pending waiters complete with error::closed.
    ~basic_limiter()
    {
        if (state_) state_->close();
    }

    /// The backend.
    std::shared_ptr<State> state_;
};

} // namespace sluice
