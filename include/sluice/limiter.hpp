// The contract every limiter keeps, written as concepts.
#pragma once

#include <sluice/acquire_result.hpp>
#include <sluice/limiter_stats.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <concepts>
#include <cstdint>
#include <type_traits>

namespace sluice {

namespace detail {

template <class A>
struct awaitable_value {};

template <class T, class Executor>
struct awaitable_value<boost::asio::awaitable<T, Executor>> {
    using type = T;
};

/// An awaitable whose value is an acquire_result (or a permit, which is one).
template <class A>
concept awaits_acquire_result = requires { typename awaitable_value<A>::type; } &&
                                std::derived_from<typename awaitable_value<A>::type, acquire_result>;

/// What a try answers: at least whether the request was admitted (a decision, a permit).
template <class T>
concept answer = std::constructible_from<bool, T>;

/// An awaitable whose value is an answer.
template <class A>
concept awaits_answer = requires { typename awaitable_value<A>::type; } && answer<typename awaitable_value<A>::type>;

} // namespace detail

/// The contract of every sluice limiter: local (token_bucket, leaky_bucket, the windows,
/// all_of), keyed (sluice::keyed), concurrency (concurrency_limit, adaptive_concurrency),
/// adaptive (adaptive_rate) and shared (redis::token_bucket, redis::sliding_window). `Key`
/// is what names the quota in each call: nothing for a limiter of one quota, the key for a
/// keyed or shared one (limiter<redis::token_bucket<redis::connection>, std::string_view>).
/// Code written against it runs on any of them: a program moves from a local limiter to a
/// Redis one by changing the limiter's type and constructor only.
///
/// - `async_try_acquire(key..., n, token)`: an answer without waiting; completes with
///   void(error_code, decision) (a concurrency limit: void(error_code, permit), the permit
///   empty when refused). The error_code is set only when no decision could be taken
///   (error::closed, a shared backend that failed); a refusal is a decision that converts
///   to false. Local limiters answer at once (through the handler's executor), shared ones
///   after one round trip.
/// - `async_acquire(key..., n, max_wait, token)`: waits until n permits are admitted, or
///   fails with error::timed_out at once when the wait would exceed max_wait (nothing
///   consumed); completes with void(error_code), a concurrency limit with
///   void(error_code, permit). Every completion token (use_awaitable, deferred, use_future,
///   callbacks); per-operation cancellation; the completion never runs inside the call.
/// - `acquire(key..., [n,] max_wait)`: the coroutine shorthand; its value is an
///   acquire_result (a concurrency limit's permit is one) and it never throws for an
///   error_code.
/// - `stats()`: a limiter_stats; `close()`: every waiter, and every later request,
///   completes with error::closed; `get_executor()`.
///
/// Arguments are decay-copied, as Asio's initiating functions do: a key may be a
/// temporary even when the operation starts later (deferred).
///
/// The rules of the operations (executor, cancellation, thread-safety, errors) are written
/// once per front end: rate_limiter (every rate limiter, keyed per key, adaptive_rate),
/// basic_concurrency_limit (concurrency_limit, adaptive_concurrency) and the Redis
/// limiters' headers. docs/guide.md ("Errors") tabulates every error.
template <class L, class... Key>
concept limiter = requires(L& l, const L& cl, const Key&... key, std::uint64_t n, std::chrono::nanoseconds max_wait) {
    typename L::executor_type;
    { cl.get_executor() } -> std::convertible_to<typename L::executor_type>;
    l.async_try_acquire(key..., n, boost::asio::deferred);
    { l.async_try_acquire(key..., n, boost::asio::use_awaitable) } -> detail::awaits_answer;
    l.async_acquire(key..., n, max_wait, boost::asio::deferred);
    l.async_acquire(key..., n, max_wait, boost::asio::use_awaitable);
    { l.acquire(key..., max_wait) } -> detail::awaits_acquire_result;
    { l.acquire(key..., n, max_wait) } -> detail::awaits_acquire_result;
    { cl.stats() } -> std::same_as<limiter_stats>;
    l.close();
};

/// A limiter that also answers on the spot, with no I/O: `try_acquire(key..., n)` returns
/// a decision (a concurrency limit: a permit), lock-free where the policy is. Every limiter
/// but the shared ones, whose state is elsewhere.
template <class L, class... Key>
concept local_limiter = limiter<L, Key...> && requires(L& l, const Key&... key, std::uint64_t n) {
    { l.try_acquire(key..., n) } -> detail::answer;
};

} // namespace sluice
