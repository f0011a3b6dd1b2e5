// A limiter that keeps the contract (sluice::limiter) in every way, written by hand, for the
// compile-fail tests: each test takes one thing away or gets one signature wrong by a macro
// before including this, and the concept must then reject the type.
#pragma once

#include <sluice/acquire_result.hpp>
#include <sluice/decision.hpp>
#include <sluice/limiter.hpp>
#include <sluice/limiter_stats.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstdint>

#ifndef FAKE_TRY_SIGNATURE
#define FAKE_TRY_SIGNATURE void(boost::system::error_code, sluice::decision)
#endif
#ifndef FAKE_ACQUIRE_SIGNATURE
#define FAKE_ACQUIRE_SIGNATURE void(boost::system::error_code)
#endif
#ifndef FAKE_STATS_TYPE
#define FAKE_STATS_TYPE sluice::limiter_stats
#endif

namespace fake {

struct start_nothing {
    template <class Handler, class... Args>
    void operator()(Handler&&, Args&&...) const
    {
    }
};

template <class Signature, class Token>
auto initiate(Token&& token)
{
    return boost::asio::async_initiate<Token, Signature>(start_nothing{}, token);
}

struct limiter {
    using executor_type = boost::asio::any_io_executor;
    executor_type get_executor() const noexcept { return {}; }

#ifndef FAKE_NO_TRY
    template <class Token>
    auto async_try_acquire(std::uint64_t, Token&& token)
    {
        return initiate<FAKE_TRY_SIGNATURE>(token);
    }
#endif

    template <class Token>
    auto async_acquire(std::uint64_t, std::chrono::nanoseconds, Token&& token)
    {
        return initiate<FAKE_ACQUIRE_SIGNATURE>(token);
    }

    boost::asio::awaitable<sluice::acquire_result> acquire(std::chrono::nanoseconds);
    boost::asio::awaitable<sluice::acquire_result> acquire(std::uint64_t, std::chrono::nanoseconds);
    FAKE_STATS_TYPE stats() const { return {}; }
    void close() {}
};

} // namespace fake
