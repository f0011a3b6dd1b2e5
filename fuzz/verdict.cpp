// fuzz-covers: include/sluice/redis/detail/store/verdict.hpp
// A script's reply turned into a verdict and a decision, against the definition in
// sluice/redis/scripts.hpp written again here: an array of six or nine integers, [0] 0 or
// 1, wait and reset_after in [0, 2^53), the server's now within 2^53 us of 0 (the
// scripts' range: TIME, or a test's now_us), remaining, taken, interval and burst >= 0;
// anything else is not believed. The decision never admits with a wait, never refuses
// without one unless the request can never be granted, and says what the reply said.
// Believed only when it answers the call (the rest of the input: mode, n, max_wait): a
// try granted with nothing to wait, a reservation or lease within max_wait, a lease of 1
// to n slots and refused only with a wait, an interval within the scripts' range.
#include "fuzz.hpp"

#include <sluice/redis/detail/store/verdict.hpp>

#include <algorithm>
#include <optional>

namespace detail = sluice::redis::detail;
using fuzz::reply;

namespace {

std::optional<detail::verdict> expect(const reply& r)
{
    if (r.type != reply::kind::array || (r.elements.size() != 6 && r.elements.size() != 9)) return std::nullopt;
    std::int64_t v[9] = {};
    for (std::size_t i = 0; i < r.elements.size(); ++i) {
        if (r.elements[i].type != reply::kind::integer) return std::nullopt;
        v[i] = r.elements[i].integer;
    }
    const std::int64_t two53 = std::int64_t{1} << 53;
    auto in = [](std::int64_t x, std::int64_t lo, std::int64_t hi) { return x >= lo && x < hi; };
    if (!in(v[0], 0, 2) || !in(v[1], 0, two53) || v[2] < 0 || !in(v[3], 0, two53) || !in(v[4], 1 - two53, two53) ||
        v[6] < 0 || v[7] < 0 || v[8] < 0)
        return std::nullopt;
    detail::verdict out;
    out.admitted = v[0] == 1;
    out.wait_us = v[1];
    out.remaining = v[2];
    out.reset_us = v[3];
    out.now_us = v[4];
    out.state = v[5];
    out.taken = v[6];
    out.interval_us = v[7];
    out.burst = v[8];
    return out;
}

// What the GCRA script answers at `t` to `call`, from the stored state `stored`: the
// bucket's start is no earlier than a full bucket's (t - I * B); a try or a reservation
// takes n or nothing, a lease the most of 1..n whose last slot ends within max_wait.
detail::verdict gcra_reply(std::int64_t iv, std::int64_t b, std::int64_t stored, std::int64_t t,
                           const detail::eval_request& call)
{
    const std::int64_t tau = iv * b;
    const std::int64_t start = std::max(stored, t - tau);
    const auto n = static_cast<std::int64_t>(call.n);
    std::int64_t k = 0;
    if (call.how == detail::eval_request::mode::lease) {
        while (k < n && start + (k + 1) * iv - t <= call.max_wait_us) ++k;
    } else if (n <= b) {
        const std::int64_t wait = start + n * iv - t;
        const std::int64_t allowed = call.how == detail::eval_request::mode::try_now ? 0 : call.max_wait_us;
        if (wait <= allowed) k = n;
    }
    detail::verdict v;
    v.admitted = k > 0;
    v.taken = k;
    v.state = start + k * iv;
    v.now_us = t;
    v.interval_us = iv;
    v.burst = b;
    if (v.admitted)
        v.wait_us = std::max<std::int64_t>(0, v.state - t);
    else if (call.how == detail::eval_request::mode::lease)
        v.wait_us = start + iv - t;
    else
        v.wait_us = n > b ? 0 : start + n * iv - t;
    v.reset_us = std::max<std::int64_t>(0, v.state + tau - t);
    v.remaining = v.state >= t ? 0 : std::min(b, std::min(t - v.state, tau) / iv);
    return v;
}

void check_model(fuzz::input& in)
{
    const std::int64_t iv = 1 + in.integer<std::uint16_t>() * (in.flag() ? 1 : 97);
    const std::int64_t b = 1 + in.byte() % 64;
    const std::int64_t t = in.integer<std::int32_t>() * std::int64_t{4099};
    const std::int64_t stored = t + (in.integer<std::int32_t>() % (4 * iv * b + 1)) - 2 * iv * b;
    detail::eval_request call;
    call.how = static_cast<detail::eval_request::mode>(in.byte() % 3);
    call.n = 1 + in.byte() % 80;
    call.max_wait_us = in.integer<std::uint16_t>() * (in.flag() ? iv : 1);
    detail::verdict v = gcra_reply(iv, b, stored, t, call);
    FUZZ_CHECK(detail::consistent(v, call, detail::script_kind::gcra));
    FUZZ_CHECK(!detail::consistent(v, call, detail::script_kind::sliding_log));
    FUZZ_CHECK(detail::answers(v, call));

    const std::int64_t delta = in.flag() ? 1 : -1;
    switch (in.byte() % 4) {
    case 0: v.remaining += delta; break;
    case 1: v.reset_us += delta; break;
    case 2:
        if (!v.admitted && v.wait_us == 0) return;   // never grantable: no wait to be off
        v.wait_us += delta;
        break;
    default: v.state += delta; break;   // z >= t - tau and reset = z + tau - t: one of them breaks
    }
    FUZZ_CHECK(!detail::consistent(v, call, detail::script_kind::gcra));

    detail::eval_request configure;
    configure.how = detail::eval_request::mode::configure;
    FUZZ_CHECK(detail::consistent(v, configure, detail::script_kind::gcra));
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    fuzz::input in(data, size);
    const reply r = fuzz::any_reply(in);
    auto got = detail::parse_verdict(r);
    auto want = expect(r);
    FUZZ_CHECK(got.has_value() == want.has_value());
    if (!got) return 0;
    const auto& v = *got;
    const auto& w = *want;
    FUZZ_CHECK(v.admitted == w.admitted && v.wait_us == w.wait_us && v.remaining == w.remaining &&
               v.reset_us == w.reset_us && v.now_us == w.now_us && v.state == w.state && v.taken == w.taken &&
               v.interval_us == w.interval_us && v.burst == w.burst);
    FUZZ_CHECK(v.exceeds() == (!v.admitted && v.wait_us == 0));

    const auto d = detail::to_decision(v);
    FUZZ_CHECK(d.admitted == v.admitted);
    if (d.admitted)
        FUZZ_CHECK(d.retry_after.count() == 0);
    else
        FUZZ_CHECK(d.retry_after == std::chrono::microseconds{v.wait_us});
    FUZZ_CHECK(d.remaining == static_cast<std::uint64_t>(v.remaining));
    FUZZ_CHECK(d.reset_after == std::chrono::microseconds{v.reset_us});

    detail::eval_request call;
    call.how = static_cast<detail::eval_request::mode>(in.byte() % 4);
    call.n = static_cast<std::uint64_t>(in.number());
    call.max_wait_us = in.number();
    const bool granted_in_time = !v.admitted || v.wait_us <= call.max_wait_us;
    bool fits = true;
    switch (call.how) {
    case detail::eval_request::mode::try_now: fits = !v.admitted || v.wait_us == 0; break;
    case detail::eval_request::mode::reserve: fits = granted_in_time; break;
    case detail::eval_request::mode::lease:
        fits = v.admitted ? granted_in_time && v.taken >= 1 && static_cast<std::uint64_t>(v.taken) <= call.n
                          : v.wait_us > 0;
        break;
    case detail::eval_request::mode::configure: break;
    }
    FUZZ_CHECK(detail::answers(v, call) == (fits && v.interval_us <= sluice::redis::lua::max_span_us));
    if (call.how != detail::eval_request::mode::configure) {
        const bool log_shape = v.state == 0 && v.taken == 0 && v.interval_us == 0 && v.burst == 0 &&
                               v.remaining <= (std::int64_t{1} << 24) && (!v.admitted || v.reset_us >= 1);
        FUZZ_CHECK(detail::consistent(v, call, detail::script_kind::sliding_log) == log_shape);
    }
    (void)detail::consistent(v, call, detail::script_kind::gcra);   // any reply: no overflow, no crash

    check_model(in);
    return 0;
}
