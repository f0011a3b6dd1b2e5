// What a Redis limiter operation does next, as its state machine (try_fsm,
// bucket_acquire_fsm, window_acquire_fsm) decides it: the sans-io half of every
// operation. redis_op carries the step out with the client, a timer or the fallback.
#pragma once

#include <sluice/error.hpp>

#include <boost/system/error_code.hpp>

#include <cstdint>
#include <string>
#include <utility>

namespace sluice::redis::detail {

/// One script call: the limiter turns it into its script's arguments.
struct eval_request {
    enum class mode {
        try_now,   // grant now or refuse
        reserve,   // commit the earliest slot within max_wait_us (GCRA)
        lease,     // commit up to n consecutive slots ending within max_wait_us (GCRA)
        configure, // change the key's configuration (0: keep a field)
    };
    mode how = mode::try_now;
    std::uint64_t n = 1;
    std::int64_t max_wait_us = 0;
    std::int64_t new_span_us = 0;   // configure: interval (GCRA) or window
    std::uint64_t new_count = 0;    // configure: burst (GCRA) or limit
    const std::string* ticket = nullptr;   // the window's place in its waiters' queue
    bool peek = false;   // try_now that only reads: the answer of a try, nothing written
};

/// The server counts in whole microseconds: a span rounded up (never faster, never more
/// permits than asked).
constexpr std::int64_t ceil_us(std::int64_t ns) noexcept
{
    return ns / 1000 + (ns % 1000 > 0 ? 1 : 0);
}

/// A change of configuration: a span (interval or window; 0: keep) rounded up to whole us,
/// and a count (burst or limit; 0: keep) of at most max_count; or the error of a bad value
/// (bad_span, error::invalid_limit).
inline std::pair<eval_request, boost::system::error_code> configure_request(std::int64_t span_ns, std::uint64_t count,
                                                                           std::uint64_t max_count,
                                                                           std::int64_t max_span_us, error bad_span)
{
    eval_request r;
    r.how = eval_request::mode::configure;
    if (span_ns < 0)
        return {r, make_error_code(bad_span)};
    r.new_span_us = ceil_us(span_ns);
    if (r.new_span_us > max_span_us)
        return {r, make_error_code(bad_span)};
    if (count > max_count)
        return {r, make_error_code(error::invalid_limit)};
    r.new_count = count;
    return {r, {}};
}

struct op_step {
    enum class kind {
        eval,        // send `request`; `cancellable`: the operation's cancellation reaches the client
        sleep,       // wait `wait_ns` on a timer close() wakes
        fall_back,   // wait on the failure policy's local limiter for at most `wait_ns`
        post,        // complete, but not inside the initiating call
        complete,    // complete now
    };
    kind next = kind::complete;
    eval_request request{};
    bool cancellable = false;
    std::int64_t wait_ns = 0;

    static op_step eval(eval_request r, bool cancellable) noexcept
    {
        op_step s;
        s.next = kind::eval;
        s.request = r;
        s.cancellable = cancellable;
        return s;
    }
    static op_step sleep(std::int64_t ns) noexcept { return waiting(kind::sleep, ns); }
    static op_step fall_back(std::int64_t max_wait_ns) noexcept { return waiting(kind::fall_back, max_wait_ns); }
    static op_step post() noexcept { return waiting(kind::post, 0); }
    static op_step complete() noexcept { return op_step{}; }

private:
    static op_step waiting(kind k, std::int64_t ns) noexcept
    {
        op_step s;
        s.next = k;
        s.wait_ns = ns;
        return s;
    }
};

/// The client's times around one round trip (system_clock, us): the limiter estimates the
/// server's clock offset and the round trip from them.
struct round_trip {
    std::int64_t sent_us = 0;
    std::int64_t received_us = 0;
};

/// Errors that mean "Redis cannot answer now": the failure policy decides.
inline bool unreachable(const boost::system::error_code& ec) noexcept
{
    return ec == error::backend_unavailable;
}

} // namespace sluice::redis::detail
