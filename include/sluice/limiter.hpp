// The contract every limiter keeps, written as concepts that check the calls, their result
// types and their completion signatures.
#pragma once

#include <sluice/acquire_result.hpp>
#include <sluice/admission.hpp>
#include <sluice/decision.hpp>
#include <sluice/limiter_stats.hpp>

#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <concepts>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace sluice {

namespace detail {

/// A completion token that starts nothing: an initiating function called with it returns
/// probed<Signatures...>, the completion signatures it declares.
struct signature_probe {};

template <class... Signatures>
struct probed {};

/// What a try answers: a decision, or a permit (an acquire_result that holds slots).
template <class A>
concept try_answer = std::same_as<A, decision> || std::derived_from<A, acquire_result>;

template <class Op>
struct probed_acquire {
    static constexpr bool valid = false;
};

/// void(error_code): the awaitable's value is an acquire_result.
template <>
struct probed_acquire<probed<void(boost::system::error_code)>> {
    static constexpr bool valid = true;
    using value_type = acquire_result;
};

/// void(error_code, permit): the awaitable's value is the permit.
template <class Permit>
struct probed_acquire<probed<void(boost::system::error_code, Permit)>> {
    static constexpr bool valid = std::derived_from<Permit, acquire_result>;
    using value_type = Permit;
};

template <class Op>
struct probed_try {
    static constexpr bool valid = false;
};

template <class Answer>
struct probed_try<probed<void(boost::system::error_code, Answer)>> {
    static constexpr bool valid = try_answer<Answer>;
    using answer_type = Answer;
};

/// An async_acquire's completion: void(error_code), or void(error_code, permit).
template <class Op>
concept acquire_completion = probed_acquire<Op>::valid;

/// An async_try_acquire's completion: void(error_code, decision), or void(error_code, permit).
template <class Op>
concept try_completion = probed_try<Op>::valid;

template <class A>
struct awaitable_value {};

template <class T, class Executor>
struct awaitable_value<boost::asio::awaitable<T, Executor>> {
    using type = T;
};

/// An awaitable whose value is `T`.
template <class A, class T>
concept awaits = std::same_as<typename awaitable_value<A>::type, T>;

} // namespace detail

/// The contract of every sluice limiter: local (token_bucket, leaky_bucket, the windows,
/// all_of), keyed (sluice::keyed, shm::keyed_bucket), concurrency (concurrency_limit,
/// adaptive_concurrency), adaptive (adaptive_rate) and shared (shm::token_bucket,
/// redis::token_bucket, redis::sliding_window). `Key` is what names the quota in each call:
/// nothing for a limiter of one quota, the key for a keyed or shared one
/// (limiter<redis::token_bucket<redis::connection>, std::string_view>). Code written against
/// it runs on any of them: a program moves from a local limiter to a Redis one by changing
/// the limiter's type and constructor only. Every limiter keeps it through one front,
/// basic_limiter, where the verbs are documented.
///
/// - `async_try_acquire(key..., n, token)`: an answer without waiting; completes with
///   void(error_code, decision) (a concurrency limit: void(error_code, permit), the permit
///   empty when refused). The error_code is set only when no decision could be taken
///   (error::closed, a shared backend that failed); a refusal is a decision that converts
///   to false.
/// - `async_acquire(key..., n, max_wait, token)`: waits until n permits are admitted, or
///   fails with error::timed_out at once when the wait would exceed max_wait (nothing
///   consumed); completes with void(error_code), a concurrency limit with
///   void(error_code, permit).
/// - `acquire(key..., [n,] max_wait)`: the coroutine shorthand; its value is an
///   acquire_result (a concurrency limit's permit, which is one) and it never throws for
///   an error_code.
/// - `stats()`: a limiter_stats; `close()`: every waiter, and every later request,
///   completes with error::closed; `get_executor()`.
///
/// The completion signatures are checked, not only the calls: a limiter whose try completes
/// with anything but (error_code, decision or permit) is not a limiter.
///
/// An asynchronous operation owns its key: a key may be a temporary, or a view of a buffer
/// reused before a deferred operation starts.
template <class L, class... Key>
concept limiter = requires(L& l, const L& cl, const Key&... key, std::uint64_t n, std::chrono::nanoseconds max_wait) {
    typename L::executor_type;
    { cl.get_executor() } -> std::convertible_to<typename L::executor_type>;
    { l.async_try_acquire(key..., n, detail::signature_probe{}) } -> detail::try_completion;
    { l.async_acquire(key..., n, max_wait, detail::signature_probe{}) } -> detail::acquire_completion;
    { l.acquire(key..., max_wait) } -> detail::awaits<typename detail::probed_acquire<decltype(
        l.async_acquire(key..., n, max_wait, detail::signature_probe{}))>::value_type>;
    { l.acquire(key..., n, max_wait) } -> detail::awaits<typename detail::probed_acquire<decltype(
        l.async_acquire(key..., n, max_wait, detail::signature_probe{}))>::value_type>;
    { cl.stats() } -> std::same_as<limiter_stats>;
    l.close();
};

/// A limiter that also answers on the spot, with no I/O: `try_acquire(key..., n)` returns
/// what async_try_acquire completes with (a decision; a concurrency limit: a permit),
/// lock-free where the policy is. Every limiter but the Redis ones, whose state is
/// elsewhere.
template <class L, class... Key>
concept local_limiter = limiter<L, Key...> && requires(L& l, const Key&... key, std::uint64_t n) {
    { l.try_acquire(key..., n) } -> std::same_as<typename detail::probed_try<decltype(
        l.async_try_acquire(key..., n, detail::signature_probe{}))>::answer_type>;
};

/// A local limiter whose admissions carry a ticket to settle with the actual cost, and that
/// answers a look without taking (basic_limiter documents the verbs): `try_admit(key...,
/// n)` -> admission, `async_try_admit` and `async_admit` completing with
/// void(error_code, admission), `settle(admission&&, actual)` -> error_code,
/// `async_settle(admission, actual, token)` -> void(error_code), `peek(key..., n)` ->
/// decision and `async_peek(key..., n, token)` -> void(error_code, decision). The local rate
/// limiters (every policy, all_of) and sluice::keyed over them; not yet the shared ones
/// (shm, Redis) nor the concurrency limits, so it is not part of sluice::limiter.
template <class L, class... Key>
concept settling_limiter = local_limiter<L, Key...> &&
    requires(L& l, const L& cl, const Key&... key, std::uint64_t n, std::chrono::nanoseconds max_wait, admission&& a) {
        { l.try_admit(key..., n) } -> std::same_as<admission>;
        { l.async_try_admit(key..., n, detail::signature_probe{}) }
            -> std::same_as<detail::probed<void(boost::system::error_code, admission)>>;
        { l.async_admit(key..., n, max_wait, detail::signature_probe{}) }
            -> std::same_as<detail::probed<void(boost::system::error_code, admission)>>;
        { l.settle(std::move(a), n) } -> std::same_as<boost::system::error_code>;
        { l.async_settle(std::move(a), n, detail::signature_probe{}) }
            -> std::same_as<detail::probed<void(boost::system::error_code)>>;
        { cl.peek(key..., n) } -> std::same_as<decision>;
        { l.async_peek(key..., n, detail::signature_probe{}) }
            -> std::same_as<detail::probed<void(boost::system::error_code, decision)>>;
    };

} // namespace sluice

/// @cond
// The signatures an initiating function declares, without starting it (sluice::limiter).
template <class... Signatures>
class boost::asio::async_result<sluice::detail::signature_probe, Signatures...> {
public:
    using return_type = sluice::detail::probed<Signatures...>;

    template <class Initiation, class... Args>
    static return_type initiate(Initiation&&, sluice::detail::signature_probe, Args&&...)
    {
        return {};
    }
};
/// @endcond
