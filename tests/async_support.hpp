// Helpers for deterministic tests of the asynchronous limiters: a manual clock drives
// time, io_context::poll runs what is due, and handlers are checked to run exactly once.
#pragma once

#include <sluice/all_of.hpp>
#include <sluice/detail/base/wait_traits.hpp>
#include <sluice/fixed_window.hpp>
#include <sluice/leaky_bucket.hpp>
#include <sluice/manual_clock.hpp>
#include <sluice/sliding_window.hpp>
#include <sluice/sliding_window_counter.hpp>
#include <sluice/token_bucket.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/system/error_code.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <tuple>
#include <utility>
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

/// Counts the handler objects of a test: how many are alive, how many ran, how many ran a
/// second time (never allowed) and how many were destroyed without having run (only when
/// an io_context is torn down with completions pending). Thread-safe.
struct handler_stats {
    std::atomic<long> live{0};
    std::atomic<long> runs{0};
    std::atomic<long> twice{0};
    std::atomic<long> dropped{0};
    std::atomic<long> errors{0};   // runs with a non-empty error_code
};

/// A move-only completion handler that accounts for itself in a handler_stats: the
/// handler-called-exactly-once checker. The object that owns the call (the last one moved
/// to) counts itself as dropped if it is destroyed unrun.
class counted_handler {
public:
    explicit counted_handler(handler_stats& s) : stats_(&s), calls_(std::make_shared<std::atomic<int>>(0))
    {
        stats_->live.fetch_add(1);
    }

    counted_handler(counted_handler&& o) noexcept
        : stats_(o.stats_), calls_(std::move(o.calls_)), owner_(std::exchange(o.owner_, false))
    {
        stats_->live.fetch_add(1);
    }

    counted_handler& operator=(counted_handler&&) = delete;

    ~counted_handler()
    {
        if (owner_ && calls_->load() == 0)
            stats_->dropped.fetch_add(1);
        stats_->live.fetch_sub(1);
    }

    void operator()(boost::system::error_code ec)
    {
        if (calls_->fetch_add(1) != 0)
            stats_->twice.fetch_add(1);
        stats_->runs.fetch_add(1);
        if (ec)
            stats_->errors.fetch_add(1);
    }

    /// The shared call count (survives the handler).
    std::shared_ptr<std::atomic<int>> calls() const { return calls_; }

private:
    handler_stats* stats_;
    std::shared_ptr<std::atomic<int>> calls_;
    bool owner_ = true;
};

/// Nanoseconds of a duration, for comparing with outcome::at.
inline std::int64_t ns(std::chrono::nanoseconds d) { return d.count(); }

/// Clock time in ns.
template <class Clock>
std::int64_t now_ns()
{
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

/// Outcomes of a batch of requests.
using outcomes = std::vector<std::shared_ptr<outcome>>;

/// Starts async_acquire(n, max_wait) with a recorder and returns its outcome.
template <class Clock, class Limiter>
std::shared_ptr<outcome> request(Limiter& l, std::uint64_t n, std::chrono::nanoseconds max_wait)
{
    auto [o, h] = make_recorder<Clock>();
    l.async_acquire(n, max_wait, h);
    return o;
}

/// As request(), with `sig`'s slot bound to the handler: a request the test can cancel.
template <class Clock, class Limiter>
std::shared_ptr<outcome> cancellable(Limiter& l, boost::asio::cancellation_signal& sig, std::uint64_t n = 1,
                                     std::chrono::nanoseconds max_wait = std::chrono::seconds(1000))
{
    auto [o, h] = make_recorder<Clock>();
    l.async_acquire(n, max_wait, boost::asio::bind_cancellation_slot(sig.slot(), h));
    return o;
}

/// Factories of the window-style limiters (policies that do not reserve ahead), each
/// granting at most `limit` permits per second: for tests run over all of them.
template <class Clock>
struct fixed_window_of {
    using type = sluice::fixed_window<Clock>;
    static constexpr const char* name = "fixed_window";
    static type make(boost::asio::io_context& io, std::uint64_t limit, const sluice::limiter_options& o = {})
    {
        return type(io, limit, std::chrono::seconds(1), o);
    }
    static void set_limit(type& l, std::uint64_t limit) { l.set_limit(limit); }
};

template <class Clock>
struct sliding_window_of {
    using type = sluice::sliding_window<Clock>;
    static constexpr const char* name = "sliding_window";
    static type make(boost::asio::io_context& io, std::uint64_t limit, const sluice::limiter_options& o = {})
    {
        return type(io, limit, std::chrono::seconds(1), o);
    }
    static void set_limit(type& l, std::uint64_t limit) { l.set_limit(limit); }
};

template <class Clock>
struct sliding_window_counter_of {
    using type = sluice::sliding_window_counter<Clock>;
    static constexpr const char* name = "sliding_window_counter";
    static type make(boost::asio::io_context& io, std::uint64_t limit, const sluice::limiter_options& o = {})
    {
        return type(io, limit, std::chrono::seconds(1), o);
    }
    static void set_limit(type& l, std::uint64_t limit) { l.set_limit(limit); }
};

/// all_of(token bucket of `limit`/s with burst `limit`, fixed window of `limit`/s).
template <class Clock>
struct all_of_of {
    using type = sluice::basic_all_of<Clock, boost::asio::any_io_executor, sluice::policy::gcra,
                                      sluice::policy::fixed_counter>;
    static constexpr const char* name = "all_of";
    static type make(boost::asio::io_context& io, std::uint64_t limit, const sluice::limiter_options& o = {})
    {
        return type(io, std::tuple{sluice::rate::per(limit, std::chrono::seconds(1)), limit},
                    std::tuple{limit, std::chrono::seconds(1)}, o);
    }
    static void set_limit(type& l, std::uint64_t limit)
    {
        l.template update<0>([&](sluice::policy::gcra& p, std::int64_t now) {
            p.set_burst(limit, now);
            p.set_rate(sluice::rate::per(limit, std::chrono::seconds(1)), now);
        });
        l.template update<1>([&](sluice::policy::fixed_counter& p, std::int64_t) { p.set_limit(limit); });
    }
};

/// Factories of the GCRA limiters at `per_second` permits a second, burst 1.
template <class Clock>
struct token_bucket_of {
    using type = sluice::token_bucket<Clock>;
    static constexpr const char* name = "token_bucket";
    static type make(boost::asio::io_context& io, double per_second, const sluice::limiter_options& o = {})
    {
        return type(io, sluice::rate::per_second(per_second), 1, o);
    }
};

template <class Clock>
struct leaky_bucket_of {
    using type = sluice::leaky_bucket<Clock>;
    static constexpr const char* name = "leaky_bucket";
    static type make(boost::asio::io_context& io, double per_second, const sluice::limiter_options& o = {})
    {
        return type(io, sluice::rate::per_second(per_second), std::chrono::nanoseconds(0), o);
    }
};

} // namespace sluice_test
