// Helpers for deterministic tests of the asynchronous limiters: a manual clock drives
// time, io_context::poll runs what is due, and handlers are checked to run exactly once.
#pragma once

#include <sluice/detail/wait_traits.hpp>
#include <sluice/manual_clock.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/system/error_code.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <vector>

namespace sluice_test {

/// Runs every handler that is ready now, without ever blocking.
inline std::size_t drain(boost::asio::io_context& io)
{
    std::size_t total = 0;
    for (;;) {
        io.restart();
        std::size_t n = io.poll();
        if (n == 0) return total;
        total += n;
    }
}

/// Moves the manual clock and runs what became due.
template <class Clock>
void advance(boost::asio::io_context& io, std::chrono::nanoseconds d)
{
    Clock::advance(d);
    drain(io);
}

/// Records the outcome of one completion; fails the test if called twice.
struct outcome {
    int calls = 0;
    std::optional<boost::system::error_code> ec;
    std::int64_t at = 0;   // clock time (ns) when the handler ran

    bool done() const { return calls > 0; }
    bool ok() const { return ec && !*ec; }
};

template <class Clock>
struct recorder {
    std::shared_ptr<outcome> out;

    void operator()(boost::system::error_code e)
    {
        CHECK(out->calls == 0);
        ++out->calls;
        out->ec = e;
        out->at = Clock::now().time_since_epoch().count();
    }
};

template <class Clock>
std::pair<std::shared_ptr<outcome>, recorder<Clock>> make_recorder()
{
    auto o = std::make_shared<outcome>();
    return {o, recorder<Clock>{o}};
}

} // namespace sluice_test
