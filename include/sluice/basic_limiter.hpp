// The one front of every limiter: the verbs of the contract (sluice::limiter) written once,
// over a backend that takes the decisions and a way of answering that delivers them.
#pragma once

#include <sluice/acquire_result.hpp>
#include <sluice/admission.hpp>
#include <sluice/decision.hpp>
#include <sluice/detail/wait/immediate.hpp>
#include <sluice/detail/wait/initiate_acquire.hpp>
#include <sluice/detail/wait/shadow.hpp>
#include <sluice/error.hpp>
#include <sluice/limiter_options.hpp>
#include <sluice/limiter_stats.hpp>

#include <boost/asio/async_result.hpp>
#include <boost/asio/compose.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <concepts>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
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

/// async_admit: an async_acquire, then the ticket of what it was granted. The key (none,
/// or one) rides along in `key`.
template <class State, class Answers, class... Key>
struct admit_op {
    std::shared_ptr<State> state;
    std::uint64_t n;
    std::int64_t max_wait;
    std::tuple<Key...> key;

    template <class Self>
    void operator()(Self& self)
    {
        std::apply([&](const Key&... k) { Answers::acquire_initiation(state)(std::move(self), n, max_wait, k...); }, key);
    }

    template <class Self>
    void operator()(Self& self, boost::system::error_code ec)
    {
        admission a;
        if (!ec) a = std::apply([&](const Key&... k) { return state->admitted(k..., n); }, key);
        auto s = std::move(state);
        self.complete(ec, std::move(a));
    }
};

/// async_try_admit where a try is a round trip: the try, then the ticket of its answer.
template <class State, class Answers, class Key>
struct try_admit_op {
    std::shared_ptr<State> state;
    std::uint64_t n;
    Key key;

    template <class Self>
    void operator()(Self& self)
    {
        Answers::try_initiation(state)(std::move(self), n, key);
    }

    template <class Self>
    void operator()(Self& self, boost::system::error_code ec, decision d)
    {
        admission a = !ec && d.admitted ? state->admitted(key, n, d) : detail::admission_access::refused(d);
        auto s = std::move(state);
        self.complete(ec, std::move(a));
    }
};

/// The shadow mode a backend was built with (its options' `shadow`), when it has one.
template <class State>
const shadow_options* shadow_of(const State& s) noexcept
{
    if constexpr (requires { { s.shadow() } -> std::convertible_to<const shadow_options&>; })
        return &s.shadow();
    else
        return nullptr;
}

/// Makes a refused answer admitted, charging nothing: a decision in place, a concurrency
/// limit's permit that holds no slot.
template <class State, class Answers>
struct admit_in_dark_as {
    std::shared_ptr<State> state;

    template <class Answer>
    void operator()(Answer& a, std::uint64_t n) const noexcept
    {
        if constexpr (std::is_same_v<Answer, decision>)
            admit_in_dark(a);
        else
            a = Answers::admitted_in_dark(state, n);
    }
};

/// basic_limiter's async_try_acquire: the backend's try, let through in shadow mode.
template <class State, class Answers>
struct shadow_try_initiation {
    std::shared_ptr<State> state;
    std::shared_ptr<shadow_state> shadow;

    using executor_type = typename State::executor_type;
    executor_type get_executor() const noexcept { return state->get_executor(); }

    template <class Handler, class... Key>
    void operator()(Handler&& handler, std::uint64_t n, const Key&... key) const
    {
        auto backend = Answers::try_initiation(state);
        if (!shadow)
            return backend(std::forward<Handler>(handler), n, key...);
        using admit = admit_in_dark_as<State, Answers>;
        backend(shadow_handler<true, std::decay_t<Handler>, admit, Key...>{std::forward<Handler>(handler), shadow,
                                                                            admit{state}, n, 0, {key...}},
                n, key...);
    }
};

/// basic_limiter's async_acquire: the backend's; in shadow mode its try, answered at once.
template <class State, class Answers>
struct shadow_acquire_initiation {
    std::shared_ptr<State> state;
    std::shared_ptr<shadow_state> shadow;

    using executor_type = typename State::executor_type;
    executor_type get_executor() const noexcept { return state->get_executor(); }

    template <class Handler, class... Key>
    void operator()(Handler&& handler, std::uint64_t n, std::int64_t max_wait, const Key&... key) const
    {
        if (!shadow)
            return Answers::acquire_initiation(state)(std::forward<Handler>(handler), n, max_wait, key...);
        using admit = admit_in_dark_as<State, Answers>;
        Answers::try_initiation(state)(shadow_handler<false, std::decay_t<Handler>, admit, Key...>{
                                           std::forward<Handler>(handler), shadow, admit{state}, n, max_wait, {key...}},
                                       n, key...);
    }
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
/// Shadow mode (the backend's options' `shadow`, see shadow_options) is written here once:
/// the backend decides as always; what it refuses is let through, counted (stats().shadow)
/// and reported, and an acquire is decided by the backend's try, answered at once.
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
        // Tested first, so that the answer goes back as the backend built it (a copy of it
        // to test would cost every try).
        if (shadow_) [[unlikely]]
            return shadow_try(n);
        return Answers::try_acquire(state_, n);
    }

    /// Admits n permits of `key` now if possible; `key` is anything the backend looks keys
    /// up by (a std::string_view for string keys): no key is built unless the key is new.
    template <class K>
    [[gnu::always_inline]] answer_type try_acquire(const K& key, std::uint64_t n = 1) noexcept(
        noexcept(Answers::try_acquire(state_, n, key)))
        requires(at_once && keyed)
    {
        if (shadow_) [[unlikely]]
            return shadow_try(n, key);
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
        return boost::asio::async_initiate<Token, try_signature>(try_initiation(), token, n);
    }

    /// The same for n permits of `key`; the operation owns a copy of the key.
    template <class K, BOOST_ASIO_COMPLETION_TOKEN_FOR(try_signature) Token =
                           boost::asio::default_completion_token_t<executor_type>>
    auto async_try_acquire(const K& key, std::uint64_t n,
                           Token&& token = boost::asio::default_completion_token_t<executor_type>())
        requires keyed
    {
        return boost::asio::async_initiate<Token, try_signature>(try_initiation(), token, n,
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
        return boost::asio::async_initiate<Token, acquire_signature>(acquire_initiation(), token, n,
                                                                     max_wait.count());
    }

    /// The same for n permits of `key`, per key; the operation owns a copy of the key.
    template <class K, BOOST_ASIO_COMPLETION_TOKEN_FOR(acquire_signature) Token =
                           boost::asio::default_completion_token_t<executor_type>>
    auto async_acquire(const K& key, std::uint64_t n, std::chrono::nanoseconds max_wait,
                       Token&& token = boost::asio::default_completion_token_t<executor_type>())
        requires keyed
    {
        return boost::asio::async_initiate<Token, acquire_signature>(acquire_initiation(), token, n,
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

    /// The completion signature of async_try_admit and async_admit.
    using admit_signature = void(boost::system::error_code, admission);
    /// The completion signature of async_peek.
    using peek_signature = void(boost::system::error_code, decision);
    /// The completion signature of async_settle.
    using settle_signature = void(boost::system::error_code);

    /// try_acquire with a ticket: admits n permits now if possible and returns a ticket
    /// that converts to true, to be settled later with the actual cost (settle); refused, an
    /// empty ticket whose answer() is the refusal. Costs what try_acquire costs, plus the
    /// ticket (and, for a keyed limiter, a copy of the key).
    [[gnu::always_inline]] admission try_admit(std::uint64_t n = 1)
        requires(at_once && !keyed && requires(State& s) { s.admit(n); })
    {
        return state_->admit(n);
    }

    /// The same for n permits of `key`; the ticket keeps a copy of the key.
    template <class K>
    admission try_admit(const K& key, std::uint64_t n = 1)
        requires(at_once && keyed && requires(State& s) { s.admit(key, n); })
    {
        return state_->admit(key, n);
    }

    /// try_admit as an asynchronous operation. Handler signature: admit_signature,
    /// void(error_code, admission); error::closed after close(), a refusal is an empty
    /// ticket. Completes through the handler's executor, never inside this call.
    template <BOOST_ASIO_COMPLETION_TOKEN_FOR(admit_signature) Token =
                  boost::asio::default_completion_token_t<executor_type>>
    auto async_try_admit(std::uint64_t n, Token&& token = boost::asio::default_completion_token_t<executor_type>())
        requires(at_once && !keyed && requires(State& s) { s.admit(n); })
    {
        return boost::asio::async_initiate<Token, admit_signature>(answer_at_once(), token,
                                                                   [n](State& s) { return s.admit(n); });
    }

    /// The same for n permits of `key`.
    template <class K, BOOST_ASIO_COMPLETION_TOKEN_FOR(admit_signature) Token =
                           boost::asio::default_completion_token_t<executor_type>>
    auto async_try_admit(const K& key, std::uint64_t n,
                         Token&& token = boost::asio::default_completion_token_t<executor_type>())
        requires(at_once && keyed && requires(State& s) { s.admit(key, n); })
    {
        return boost::asio::async_initiate<Token, admit_signature>(
            answer_at_once(), token, [n, k = detail::owned_key_t<K>(key)](State& s) { return s.admit(k, n); });
    }

    /// async_acquire with a ticket: waits until n permits are admitted, for at most
    /// max_wait, and completes with the ticket. Handler signature: admit_signature,
    /// void(error_code, admission), the ticket empty on error; the errors, executor and
    /// cancellation of async_acquire.
    template <BOOST_ASIO_COMPLETION_TOKEN_FOR(admit_signature) Token =
                  boost::asio::default_completion_token_t<executor_type>>
    auto async_admit(std::uint64_t n, std::chrono::nanoseconds max_wait,
                     Token&& token = boost::asio::default_completion_token_t<executor_type>())
        requires(at_once && !keyed && requires(State& s) { s.admitted(n); })
    {
        return boost::asio::async_compose<Token, admit_signature>(
            detail::admit_op<State, Answers>{state_, n, max_wait.count(), {}}, token, state_->get_executor());
    }

    /// The same for n permits of `key`; the operation owns a copy of the key.
    template <class K, BOOST_ASIO_COMPLETION_TOKEN_FOR(admit_signature) Token =
                           boost::asio::default_completion_token_t<executor_type>>
    auto async_admit(const K& key, std::uint64_t n, std::chrono::nanoseconds max_wait,
                     Token&& token = boost::asio::default_completion_token_t<executor_type>())
        requires(keyed && requires(State& s) { s.admitted(key, n); })
    {
        return boost::asio::async_compose<Token, admit_signature>(
            detail::admit_op<State, Answers, detail::owned_key_t<K>>{state_, n, max_wait.count(),
                                                                     {detail::owned_key_t<K>(key)}},
            token, state_->get_executor());
    }

    /// Settles an admission of this limiter with its actual cost: lower gives the
    /// difference back exactly as if only `actual` had been asked for, higher charges the
    /// difference as a debt later callers wait for (the policy's header defines both). The
    /// ticket is settled whatever the answer (it converts to false after). Errors:
    /// error::not_admitted, already_settled, foreign_admission, stale_admission (nothing
    /// changed), error::closed after close(). `actual` may be 0 (the work was not done).
    boost::system::error_code settle(admission&& a, std::uint64_t actual)
        requires(at_once && requires(State& s, admission& t) { s.settle(t, actual); })
    {
        return state_->settle(a, actual);
    }

    /// settle as an asynchronous operation, for every limiter (a shared one settles in one
    /// round trip). Handler signature: settle_signature, void(error_code), the errors of
    /// settle. Completes through the handler's executor, never inside this call.
    template <BOOST_ASIO_COMPLETION_TOKEN_FOR(settle_signature) Token =
                  boost::asio::default_completion_token_t<executor_type>>
    auto async_settle(admission a, std::uint64_t actual,
                      Token&& token = boost::asio::default_completion_token_t<executor_type>())
        requires(at_once && requires(State& s, admission& t) { s.settle(t, actual); })
    {
        return boost::asio::async_initiate<Token, settle_signature>(
            settle_at_once(), token, std::move(a), actual);
    }

    /// What try_acquire(n) would answer now (admitted, remaining, retry_after,
    /// reset_after), nothing consumed and nothing counted. Local limiters.
    [[gnu::always_inline]] decision peek(std::uint64_t n = 1) const noexcept
        requires(at_once && !keyed && requires(State& s) { s.peek(n); })
    {
        return state_->peek(n);
    }

    /// The same for n permits of `key`; a key never seen answers as a new one (it is not
    /// created).
    template <class K>
    decision peek(const K& key, std::uint64_t n = 1) const noexcept
        requires(at_once && keyed && requires(State& s) { s.peek(key, n); })
    {
        return state_->peek(key, n);
    }

    /// peek as an asynchronous operation, for every limiter (a shared one: a read-only
    /// round trip). Handler signature: peek_signature, void(error_code, decision);
    /// error::closed after close().
    template <BOOST_ASIO_COMPLETION_TOKEN_FOR(peek_signature) Token =
                  boost::asio::default_completion_token_t<executor_type>>
    auto async_peek(std::uint64_t n, Token&& token = boost::asio::default_completion_token_t<executor_type>())
        requires(at_once && !keyed && requires(State& s) { s.peek(n); })
    {
        return boost::asio::async_initiate<Token, peek_signature>(answer_at_once(), token,
                                                                  [n](State& s) { return s.peek(n); });
    }

    /// The same for n permits of `key`.
    template <class K, BOOST_ASIO_COMPLETION_TOKEN_FOR(peek_signature) Token =
                           boost::asio::default_completion_token_t<executor_type>>
    auto async_peek(const K& key, std::uint64_t n, Token&& token = boost::asio::default_completion_token_t<executor_type>())
        requires(at_once && keyed && requires(State& s) { s.peek(key, n); })
    {
        return boost::asio::async_initiate<Token, peek_signature>(
            answer_at_once(), token, [n, k = detail::owned_key_t<K>(key)](State& s) { return s.peek(k, n); });
    }

    /// async_try_admit of a limiter that answers after a round trip (Redis): an
    /// async_try_acquire, then the ticket of what it admitted (a refusal: an empty ticket
    /// whose answer() says why). Handler signature: admit_signature; the errors of
    /// async_try_acquire.
    template <class K, BOOST_ASIO_COMPLETION_TOKEN_FOR(admit_signature) Token =
                           boost::asio::default_completion_token_t<executor_type>>
    auto async_try_admit(const K& key, std::uint64_t n,
                         Token&& token = boost::asio::default_completion_token_t<executor_type>())
        requires(!at_once && keyed && requires(State& s, const decision& d) { s.admitted(key, n, d); })
    {
        return boost::asio::async_compose<Token, admit_signature>(
            detail::try_admit_op<State, Answers, detail::owned_key_t<K>>{state_, n, detail::owned_key_t<K>(key)}, token,
            state_->get_executor());
    }

    /// async_settle of a limiter that settles in one round trip (Redis: one script call,
    /// atomic). The errors of settle, and the backend's (Redis unreachable: nothing
    /// settled, the ticket is settled all the same).
    template <BOOST_ASIO_COMPLETION_TOKEN_FOR(settle_signature) Token =
                  boost::asio::default_completion_token_t<executor_type>>
    auto async_settle(admission a, std::uint64_t actual,
                      Token&& token = boost::asio::default_completion_token_t<executor_type>())
        requires(!at_once && requires(std::shared_ptr<State> p) { Answers::settle_initiation(p); })
    {
        return boost::asio::async_initiate<Token, settle_signature>(Answers::settle_initiation(state_), token,
                                                                    std::move(a), actual);
    }

    /// async_peek of a limiter that answers after a round trip (Redis: a script call that
    /// writes nothing): what async_try_acquire(key, n) would answer now.
    template <class K, BOOST_ASIO_COMPLETION_TOKEN_FOR(peek_signature) Token =
                           boost::asio::default_completion_token_t<executor_type>>
    auto async_peek(const K& key, std::uint64_t n, Token&& token = boost::asio::default_completion_token_t<executor_type>())
        requires(!at_once && keyed && requires(std::shared_ptr<State> p) { Answers::peek_initiation(p); })
    {
        return boost::asio::async_initiate<Token, peek_signature>(Answers::peek_initiation(state_), token, n,
                                                                  detail::owned_key_t<K>(key));
    }

    /// Completes every pending waiter with error::closed; later requests fail the same way
    /// (a local try still answers by the backend).
    void close() { state_->close(); }

    /// What callers were answered so far, and how long they waited (see limiter_stats).
    limiter_stats stats() const
    {
        limiter_stats s = state_->stats();
        if (shadow_) shadow_->add_to(s);
        return s;
    }

protected:
    /// The initiation of an answer taken in the call by f(state) and posted; a value-built
    /// answer with error::closed after close().
    struct at_once_initiation {
        /// The backend that answers.
        std::shared_ptr<State> state;

        /// The backend's executor, the default one of the handler.
        using executor_type = typename State::executor_type;
        /// The backend's executor.
        executor_type get_executor() const noexcept { return state->get_executor(); }

        /// Posts f(*state) to the handler, or error::closed after close().
        template <class Handler, class F>
        void operator()(Handler&& handler, F f) const
        {
            using value_type = std::decay_t<decltype(f(*state))>;
            if (state->closed())
                return detail::post_answer(std::move(handler), detail::operation_executor(*state),
                                           make_error_code(error::closed), value_type{});
            detail::post_answer(std::move(handler), detail::operation_executor(*state), boost::system::error_code(),
                                f(*state));
        }
    };

    /// The initiation of an answer taken in the call, over this limiter's backend.
    at_once_initiation answer_at_once() const { return {state_}; }

    /// The initiation of a settle taken in the call and posted.
    struct settle_initiation {
        /// The backend that settles.
        std::shared_ptr<State> state;

        /// The backend's executor, the default one of the handler.
        using executor_type = typename State::executor_type;
        /// The backend's executor.
        executor_type get_executor() const noexcept { return state->get_executor(); }

        /// Settles `a` at `actual` and posts the outcome to the handler.
        template <class Handler>
        void operator()(Handler&& handler, admission a, std::uint64_t actual) const
        {
            detail::post_answer(std::move(handler), detail::operation_executor(*state), state->settle(a, actual));
        }
    };

    /// The initiation of a settle taken in the call, over this limiter's backend.
    settle_initiation settle_at_once() const { return {state_}; }

    /// Takes the backend a derived limiter built, in shadow mode when its options say so.
    explicit basic_limiter(std::shared_ptr<State> state) : state_(std::move(state))
    {
        if (const shadow_options* o = detail::shadow_of(*state_); o && o->enabled)
            shadow_ = std::make_shared<detail::shadow_state>(*o);
    }

    /// Takes over `other`'s backend, waiters included.
    basic_limiter(basic_limiter&&) noexcept = default;

    /// Closes this limiter (its waiters complete with error::closed), then takes over
    /// `other`'s.
    basic_limiter& operator=(basic_limiter&& other) noexcept
    {
        if (this != &other) {
            if (state_) state_->close();
            state_ = std::move(other.state_);
            shadow_ = std::move(other.shadow_);
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

private:
    using try_initiation_type = detail::shadow_try_initiation<State, Answers>;
    using acquire_initiation_type = detail::shadow_acquire_initiation<State, Answers>;

    try_initiation_type try_initiation() const noexcept { return {state_, shadow_}; }
    acquire_initiation_type acquire_initiation() const noexcept { return {state_, shadow_}; }

    // A try in shadow mode: the backend's answer, let through when the limit refused it.
    template <class... Key>
    [[gnu::noinline]] answer_type shadow_try(std::uint64_t n, const Key&... key) const
        noexcept(noexcept(Answers::try_acquire(state_, n, key...)))
    {
        answer_type a = Answers::try_acquire(state_, n, key...);
        if (const detail::shadow_verdict v = detail::judge_try(a); v.dark) {
            shadow_->note(v, n, key...);
            detail::admit_in_dark_as<State, Answers>{state_}(a, n);
        }
        return a;
    }

    // Set in shadow mode only: its counts and report.
    std::shared_ptr<detail::shadow_state> shadow_;
};

} // namespace sluice
