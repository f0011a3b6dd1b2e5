// One function written against the contract of every limiter (sluice::limiter), run on
// each of them: the same calls, result types, errors and stats whatever keeps the state.
//
//     asio::co_spawn(io, sluice_test::exercise_contract(limiter, {}, key), ...);   // keyed, shared
//     asio::co_spawn(io, sluice_test::exercise_contract(limiter, {}), ...);        // one quota
#pragma once

#include <sluice/error.hpp>
#include <sluice/limiter.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace sluice_test {

/// What exercise_contract needs of its limiter.
struct contract_limits {
    /// Permits the limiter holds for the key now, and none more for at least a minute (a
    /// bucket of that burst at a permit a minute, a window of that limit a minute...).
    std::uint64_t capacity = 3;
    /// Whether tries are counted in stats() (a local limiter: count_try_acquire).
    bool counts_tries = true;
};

/// Exercises the contract on `lim` with `key...` (nothing for a limiter of one quota),
/// checking each answer; `lim` is closed at the end. In order:
/// - a try made with a deferred token on a copy of the key that is gone before the try
///   starts (arguments are decay-copied), then capacity - 2 tries and one acquire: all
///   admitted (the answers are kept: a concurrency limit's permits hold their slot);
/// - a try refused (a decision's retry_after is positive), an acquire that times out
///   (timed_out(), nothing consumed), an acquire of more than the limiter ever grants
///   (exceeds_limit), an acquire of 0 (invalid_count);
/// - stats(): those requests and tries by outcome, nothing waiting;
/// - an acquire still pending at close() and the calls after it: error::closed;
/// - stats() again.
// GCC 12 inlines the frame's allocation (Asio's recycling allocator, aligned_alloc on a
// miss) and then takes the frame's own operator delete for a mismatched pair: a false
// positive with frames this large (as in lib/redis/cluster.cpp).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
template <class... Key>
boost::asio::awaitable<void> exercise_contract(sluice::limiter<Key...> auto& lim, contract_limits lim_of,
                                               const Key&... key)
{
    using namespace std::chrono_literals;
    namespace asio = boost::asio;
    constexpr auto nothrow = asio::as_tuple(asio::use_awaitable);
    const std::uint64_t cap = lim_of.capacity;
    REQUIRE(cap >= 2);

    // A deferred try whose key (a copy, on the heap) is destroyed before the try starts.
    auto deferred_try = [&] {
        if constexpr (sizeof...(Key) == 1 && (std::is_constructible_v<std::string, const Key&> && ...)) {
            std::string gone(key...);
            gone.reserve(64);   // on the heap, never in the string object itself
            auto op = lim.async_try_acquire(Key(gone)..., 1, asio::deferred);
            gone.assign(gone.size(), '#');
            return op;
        } else {
            return lim.async_try_acquire(Key(key)..., 1, asio::deferred);
        }
    }();
    auto [ec0, first] = co_await std::move(deferred_try)(nothrow);
    CHECK_FALSE(ec0);
    CHECK(static_cast<bool>(first));

    // The rest of the capacity: tries, and one acquire.
    std::vector<decltype(first)> held;
    for (std::uint64_t i = 0; i + 2 < cap; ++i) {
        auto [ec, a] = co_await lim.async_try_acquire(key..., 1, nothrow);
        CHECK_FALSE(ec);
        CHECK(static_cast<bool>(a));
        held.push_back(std::move(a));
    }
    auto granted = co_await lim.acquire(key..., 1, 1s);
    CHECK(static_cast<bool>(granted));
    CHECK_FALSE(granted.error());

    // Full: a refusal, a timeout, requests that can never be granted.
    auto [ec1, refused] = co_await lim.async_try_acquire(key..., 1, nothrow);
    CHECK_FALSE(ec1);
    CHECK_FALSE(static_cast<bool>(refused));
    if constexpr (requires { refused.retry_after; })
        CHECK(refused.retry_after > 0ns);
    auto late = co_await lim.acquire(key..., 1ms);
    CHECK_FALSE(static_cast<bool>(late));
    CHECK(late.timed_out());
    auto beyond = co_await lim.acquire(key..., cap + 1, 1s);
    CHECK(beyond.error() == sluice::error::exceeds_limit);
    auto none = co_await lim.acquire(key..., 0, 1s);
    CHECK(none.error() == sluice::error::invalid_count);

    sluice::limiter_stats s = lim.stats();
    CHECK(s.admitted == 1);
    CHECK(s.timed_out == 1);
    CHECK(s.refused == 2);
    CHECK(s.cancelled == 0);
    CHECK(s.closed == 0);
    CHECK(s.waiting == 0);
    CHECK(s.waited == 0);
    CHECK(s.total_wait == 0ns);
    if (lim_of.counts_tries) {
        CHECK(s.try_admitted == cap - 1);
        CHECK(s.try_refused == 1);
    }

    // A waiter pending at close(), and the calls after it.
    auto ex = co_await asio::this_coro::executor;
    std::optional<sluice::acquire_result> pending;
    asio::co_spawn(
        ex, [&]() -> asio::awaitable<void> { pending = co_await lim.acquire(key..., 1, std::chrono::hours(1)); },
        asio::detached);
    for (int i = 0; i < 8; ++i)
        co_await asio::post(ex, asio::use_awaitable);   // it starts (nothing has to have happened)
    CHECK_FALSE(pending.has_value());
    lim.close();
    while (!pending)
        co_await asio::post(ex, asio::use_awaitable);
    CHECK(pending->closed());
    auto after = co_await lim.acquire(key..., 1s);
    CHECK(after.closed());
    auto [ec2, tried] = co_await lim.async_try_acquire(key..., 1, nothrow);
    CHECK(ec2 == sluice::error::closed);
    CHECK_FALSE(static_cast<bool>(tried));

    s = lim.stats();
    CHECK(s.admitted == 1);
    CHECK(s.closed == 2);
    CHECK(s.waiting == 0);
}
#pragma GCC diagnostic pop

} // namespace sluice_test
