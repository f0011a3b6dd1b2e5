// One generic function written against the contract of every limiter (sluice::limiter),
// run on each of them: local, keyed, concurrency, adaptive and shared.
#pragma once

#include <sluice/error.hpp>
#include <sluice/limiter.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace contract {

/// Drives a limiter that admits exactly `capacity` permits now (>= 1) and nothing more for
/// a long while (a burst or limit of `capacity`, a rate of a few an hour), through the
/// operations of the contract only, and checks what each answers. `key...` names the
/// quota (nothing, or one key). Closes the limiter.
// GCC 12 inlines the coroutine frame's allocation (Asio's recycling allocator,
// aligned_alloc on a miss) and then takes the frame's own operator delete for a mismatched
// pair: a false positive that comes and goes with the inlining (as in lib/redis/cluster.cpp).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
template <class L, class... Key>
    requires sluice::limiter<L, Key...>
boost::asio::awaitable<void> exercise(L& l, std::size_t capacity, const Key&... key)
{
    using namespace std::chrono_literals;
    using boost::asio::as_tuple;
    using boost::asio::use_awaitable;

    // A try that is admitted; for a concurrency limit the answer is a permit, held on to.
    auto [try_ec, first] = co_await l.async_try_acquire(key..., 1, as_tuple(use_awaitable));
    CHECK_FALSE(try_ec);
    CHECK(static_cast<bool>(first));

    // Acquires admitted at once (held on to), then one that cannot be within its max_wait:
    // error::timed_out at once, nothing consumed.
    std::vector<typename sluice::detail::awaitable_value<decltype(l.acquire(key..., 1, 1s))>::type> held;
    for (std::size_t i = 1; i < capacity; ++i) {
        held.push_back(co_await l.acquire(key..., 1, 1s));
        CHECK(static_cast<bool>(held.back()));
        CHECK_FALSE(held.back().error());
    }
    auto third = co_await l.acquire(key..., 0ns);
    CHECK_FALSE(static_cast<bool>(third));
    CHECK(third.timed_out());
    CHECK(third.error() == sluice::error::timed_out);

    // A deferred operation holds copies of its arguments: started later, with the key it
    // was made with gone (a temporary), it decides on the same quota.
    {
        auto op = [&] { return l.async_acquire(Key(key)..., 1, 0ns, boost::asio::deferred); }();
        auto result = co_await std::move(op)(as_tuple(use_awaitable));
        CHECK(std::get<0>(result) == sluice::error::timed_out);
    }

    // A refused try is a decision, not an error.
    auto [refused_ec, refused] = co_await l.async_try_acquire(key..., 1, as_tuple(use_awaitable));
    CHECK_FALSE(refused_ec);
    CHECK_FALSE(static_cast<bool>(refused));

    sluice::limiter_stats s = l.stats();
    CHECK(s.admitted == capacity - 1);
    CHECK(s.timed_out == 2);
    CHECK(s.refused == 0);
    CHECK(s.waiting == 0);

    // After close(), every request fails with error::closed, and is counted so.
    l.close();
    auto late = co_await l.acquire(key..., 1s);
    CHECK(late.closed());
    auto [closed_ec, closed_answer] = co_await l.async_try_acquire(key..., 1, as_tuple(use_awaitable));
    CHECK(closed_ec == sluice::error::closed);
    CHECK_FALSE(static_cast<bool>(closed_answer));
    CHECK(l.stats().closed == 1);
}

/// An asynchronous operation owns its key: made with a std::string_view of a buffer that is
/// overwritten, and then freed, before the operation starts, it decides on the key it was
/// made with (a view kept in the operation would read the new bytes, and then freed memory,
/// which AddressSanitizer reports). `l` admits exactly 2 permits of a key now.
template <class L>
    requires sluice::limiter<L, std::string_view>
boost::asio::awaitable<void> views_are_owned(L& l)
{
    using namespace std::chrono_literals;
    using boost::asio::as_tuple;
    using boost::asio::use_awaitable;

    // Longer than a string's inline buffer (the bytes live on the heap), and within
    // shm::keyed_bucket's 40 bytes.
    const std::string key = "contract:key-beyond-inline-size";
    auto buffer = std::make_unique<std::string>(key);
    const std::string_view view = *buffer;
    auto attempt = l.async_try_acquire(view, 1, boost::asio::deferred);
    auto wait = l.async_acquire(view, 1, 0ns, boost::asio::deferred);
    std::fill(buffer->begin(), buffer->end(), '#');   // the same bytes, another key
    auto [try_ec, d] = co_await std::move(attempt)(as_tuple(use_awaitable));
    CHECK_FALSE(try_ec);
    CHECK(static_cast<bool>(d));
    buffer.reset();
    auto [wait_ec] = co_await std::move(wait)(as_tuple(use_awaitable));
    CHECK_FALSE(wait_ec);
    // Both took a permit of `key` and of no other: `key` is spent, the other one is not.
    auto [spent_ec, spent] = co_await l.async_try_acquire(key, 1, as_tuple(use_awaitable));
    CHECK_FALSE(spent_ec);
    CHECK_FALSE(static_cast<bool>(spent));
    auto [other_ec, other] = co_await l.async_try_acquire(std::string(key.size(), '#'), 1, as_tuple(use_awaitable));
    CHECK_FALSE(other_ec);
    CHECK(static_cast<bool>(other));
}
#pragma GCC diagnostic pop

} // namespace contract
