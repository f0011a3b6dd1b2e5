// fuzz-covers: include/sluice/redis/detail/store/acquire_fsm.hpp include/sluice/redis/detail/store/op_fsm.hpp
// async_acquire's machines (bucket_acquire_fsm, window_acquire_fsm) and the configuration
// change (configure_fsm), one operation at a time, fed any replies, link errors,
// cancellations, early wake-ups, close() and fallback results, with time driven by hand.
// Checked: the operation ends within a bounded number of steps; it succeeds only after a
// grant, and the bucket's only once its reserved slot is due (never a grant before its
// time); no wait outlives max_wait (the token bucket's sleep, the window's sleeps and its
// fallback wait all end by the deadline); a reserved slot not used is given back exactly
// once, with its state; the window leaves its waiters' queue exactly once when it was
// queued and not granted; a request is answered (counted) exactly once, and a decision
// at most once, only a grant or a refusal. A configuration change that is invalid, or
// asked of a closed limiter, ends without a call.
#include "fake_core.hpp"

#include <sluice/detail/base/arith.hpp>
#include <sluice/redis/detail/store/acquire_fsm.hpp>

namespace detail = sluice::redis::detail;
using detail::op_step;
using boost::system::error_code;

namespace {

using sluice::detail::sat_add;

// Somewhere in [0, w] (w >= 0).
std::int64_t within(fuzz::input& in, std::int64_t w)
{
    return static_cast<std::int64_t>(static_cast<std::uint64_t>(in.number()) % (static_cast<std::uint64_t>(w) + 1));
}

template <class Fsm>
void drive(fuzz::input& in, fuzz::fake_core& c, Fsm& f, std::uint64_t n, bool bucket, std::int64_t max_wait_ns)
{
    const std::int64_t start = c.now;
    const std::int64_t deadline = sat_add(start, max_wait_ns);
    const std::uint64_t decisions0 = c.admitted + c.rejected;
    const std::uint64_t answered0 = c.answered;
    bool granted = false;             // an admitted verdict came
    bool refused_once = false;        // the window was refused (its ticket queued)
    std::optional<detail::verdict> grant;
    std::int64_t slot_due = 0;        // bucket: when the reserved slot may be used
    std::int64_t sleep_until = -1;

    op_step s = f.start(c, c.now);
    for (int step = 0;; ++step) {
        FUZZ_CHECK(step < 4096);
        if (s.next == op_step::kind::post || s.next == op_step::kind::complete) break;
        if (in.empty() && step > 64) {   // the input is over: let every wait run out
            c.is_closed = true;
        }
        switch (s.next) {
        case op_step::kind::eval: {
            FUZZ_CHECK(!s.cancellable || !bucket);
            FUZZ_CHECK(s.request.n == n);
            if constexpr (requires { f.ticket(); })   // the window's place in its queue
                FUZZ_CHECK(s.request.ticket == &f.ticket() && !f.ticket().empty());
            auto a = fuzz::any_answer(in, s.request);
            c.now = sat_add(c.now, in.number() & ((std::int64_t{1} << 40) - 1));   // the round trip
            s = f.on_reply(c, a.ec, a.get(), a.cancelled, a.rt, c.now);
            if (!a.ec && a.v && a.v->admitted && !a.v->exceeds()) {
                granted = true;
                grant = a.v;
                slot_due = sat_add(c.now, a.v->wait_us * 1000);
            } else if (!a.ec && a.v && !a.v->admitted && !a.v->exceeds()) {
                refused_once = true;
            }
            break;
        }
        case op_step::kind::sleep: {
            FUZZ_CHECK(s.wait_ns >= 0);
            // No wait beyond max_wait: the bucket sleeps until its slot, reserved within
            // max_wait of the server's now; the window sleeps only within its deadline.
            if (bucket)
                FUZZ_CHECK(s.wait_ns <= max_wait_ns);
            else
                FUZZ_CHECK(s.wait_ns <= deadline - c.now);
            sleep_until = sat_add(c.now, s.wait_ns);
            error_code e;
            bool cancelled = false;
            switch (in.byte() % 8) {
            case 0:   // woken early by close()
                c.is_closed = true;
                e = boost::asio::error::operation_aborted;
                c.now = sat_add(c.now, within(in, s.wait_ns));
                break;
            case 1:   // cancelled
                cancelled = true;
                e = boost::asio::error::operation_aborted;
                c.now = sat_add(c.now, within(in, s.wait_ns));
                break;
            case 7:   // on time, but close() came before the wake-up ran
                c.is_closed = true;
                c.now = sleep_until;
                break;
            default:
                c.now = sleep_until;
                break;
            }
            s = f.on_wake(c, e, cancelled, c.now);
            break;
        }
        case op_step::kind::fall_back: {
            FUZZ_CHECK(s.wait_ns >= 0 && s.wait_ns <= max_wait_ns);
            error_code e;
            switch (in.byte() % 4) {
            case 0: e = sluice::error::timed_out; break;
            case 1: e = boost::asio::error::operation_aborted; break;
            default: break;
            }
            c.now = sat_add(c.now, within(in, s.wait_ns));
            s = f.on_wake(c, e, false, c.now);
            break;
        }
        default: break;
        }
    }

    const std::uint64_t decisions = c.admitted + c.rejected - decisions0;
    FUZZ_CHECK(decisions <= 1);
    FUZZ_CHECK(c.answered - answered0 == 1);   // every request is answered, once
    FUZZ_CHECK(c.started == c.answered);
    FUZZ_CHECK(f.key() == "k" && f.count() == n);
    FUZZ_CHECK(f.posted() == (s.next == op_step::kind::post));
    if (!f.error()) {
        // Success: after a grant, or from the failure policy (fail_open, the fallback).
        FUZZ_CHECK(granted || c.by_fallback > 0);
        if (bucket && granted) FUZZ_CHECK(c.now >= slot_due);   // never before its time
        if (bucket && granted) FUZZ_CHECK(c.refunds.empty());
    }
    if (bucket && granted && f.error()) {
        // The reserved slot goes back, once, against the state the reply gave.
        FUZZ_CHECK(c.refunds.size() == 1);
        FUZZ_CHECK(c.refunds[0].second == grant->state);
    }
    if (!bucket) {
        const bool should_leave = refused_once && !granted;
        FUZZ_CHECK(c.left_queue.size() == (should_leave ? 1u : 0u));
        if constexpr (requires { f.ticket(); })
            FUZZ_CHECK(!should_leave || c.left_queue[0] == f.ticket());
    }
    (void)sleep_until;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    fuzz::input in(data, size);
    fuzz::fake_core c({100'000, 250'000'000, 64});
    c.now = in.number() & ((std::int64_t{1} << 61) - 1);
    std::uint8_t b = in.byte();
    c.routed = !(b & 8);
    c.opts.on_failure = static_cast<sluice::redis::failure_policy>((b >> 4) % 3);
    const std::uint64_t n = in.byte() % 4;
    const std::int64_t max_wait_ns = in.number();   // any, negative included: the machines clamp it
    const std::int64_t clamped = max_wait_ns < 0 ? 0 : max_wait_ns;
    switch (b & 3) {
    case 0: {
        detail::bucket_acquire_fsm f("k", n, max_wait_ns);
        drive(in, c, f, n, true, clamped);
        break;
    }
    case 1: {
        detail::window_acquire_fsm f("k", n, max_wait_ns);
        drive(in, c, f, n, false, clamped);
        break;
    }
    default: {
        detail::eval_request r;
        r.how = detail::eval_request::mode::configure;
        r.new_span_us = in.number();
        r.new_count = static_cast<std::uint64_t>(in.number());
        // The request's own error (a bad rate or burst, found before any call), or a
        // limiter closed: answered without a call.
        const std::uint8_t how = in.byte();
        const error_code invalid = how % 4 == 1 ? make_error_code(sluice::error::invalid_rate) : error_code{};
        c.is_closed = how % 4 == 2;
        detail::configure_fsm f("k", r, invalid);
        auto s = f.start(c, c.now);
        if (invalid || c.is_closed) {
            FUZZ_CHECK(s.next == op_step::kind::post && f.posted());
            FUZZ_CHECK(f.error() == (invalid ? invalid : make_error_code(sluice::error::closed)));
            break;
        }
        FUZZ_CHECK(s.next == op_step::kind::eval && s.request.how == r.how);
        auto a = fuzz::any_answer(in, s.request);
        s = f.on_reply(c, a.ec, a.get(), a.cancelled, a.rt, c.now);
        FUZZ_CHECK(s.next == op_step::kind::complete);
        // Done only when Redis said so; never counted as a decision.
        if (!f.error()) FUZZ_CHECK(a.v && a.v->admitted);
        FUZZ_CHECK(c.admitted + c.rejected == 0);
        break;
    }
    }
    return 0;
}
