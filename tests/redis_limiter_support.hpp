// What the Redis limiter tests (redis::token_bucket, redis::sliding_window) share: a live
// server with a connected client, bounded runs of the io_context, and handlers that record
// how they completed.
#pragma once

#include "redis_support.hpp"

#include <sluice/decision.hpp>
#include <sluice/redis/connection.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/system/error_code.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>

namespace sluice_test {

/// Runs the io_context until pred() holds or `limit` passes; false on timeout.
inline bool run_until(boost::asio::io_context& io, const std::function<bool()>& pred,
                      std::chrono::milliseconds limit = std::chrono::milliseconds(5000))
{
    auto end = std::chrono::steady_clock::now() + limit;
    while (!pred()) {
        if (std::chrono::steady_clock::now() >= end) return false;
        run_slice(io, std::chrono::milliseconds(2));
    }
    return true;
}

inline void run_for(boost::asio::io_context& io, std::chrono::milliseconds d) { run_slice(io, d); }

inline bool wait_connected(boost::asio::io_context& io, sluice::redis::connection& c)
{
    return run_until(io, [&] { return c.connected(); });
}

/// What an async_try_acquire handler saw, and how often it ran.
struct try_result {
    int calls = 0;
    boost::system::error_code ec;
    sluice::decision d;
};

inline auto try_recorder(std::shared_ptr<try_result> r)
{
    return [r](boost::system::error_code ec, sluice::decision d) {
        ++r->calls;
        r->ec = ec;
        r->d = d;
    };
}

/// What an async_acquire handler saw, how often and when it ran.
struct acq_result {
    int calls = 0;
    boost::system::error_code ec;
    std::chrono::steady_clock::time_point at;
};

inline auto acq_recorder(std::shared_ptr<acq_result> r)
{
    return [r](boost::system::error_code ec) {
        ++r->calls;
        r->ec = ec;
        r->at = std::chrono::steady_clock::now();
    };
}

/// One async_try_acquire of `key`, run to its completion.
template <class Limiter>
std::shared_ptr<try_result> try_now(boost::asio::io_context& io, Limiter& l, std::string_view key, std::uint64_t n)
{
    auto r = std::make_shared<try_result>();
    l.async_try_acquire(key, n, try_recorder(r));
    REQUIRE(run_until(io, [&] { return r->calls == 1; }));
    return r;
}

/// Starts an operation completing with void(error_code) (`start(handler)`) and runs it to
/// its completion: its error_code.
template <class Start>
boost::system::error_code run_to_end(boost::asio::io_context& io, Start&& start)
{
    auto ec = std::make_shared<std::optional<boost::system::error_code>>();
    start([ec](boost::system::error_code e) { *ec = e; });
    REQUIRE(run_until(io, [&] { return ec->has_value(); }));
    return **ec;
}

/// A redis-server of its own and a connection to it, connected.
struct live_redis {
    redis_server server;
    boost::asio::io_context io;
    sluice::redis::connection conn{io, server.config()};

    live_redis() { REQUIRE(wait_connected(io, conn)); }
};

} // namespace sluice_test
