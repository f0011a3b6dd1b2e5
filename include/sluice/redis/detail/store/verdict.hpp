// A script's reply (see sluice/redis/scripts.hpp), checked and unpacked.
#pragma once

#include <sluice/decision.hpp>
#include <sluice/detail/base/arith.hpp>
#include <sluice/redis/detail/store/op_step.hpp>
#include <sluice/redis/scripts.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>

namespace sluice::redis::detail {

struct verdict {
    bool admitted = false;
    std::int64_t wait_us = 0;
    std::int64_t remaining = 0;
    std::int64_t reset_us = 0;
    std::int64_t now_us = 0;
    std::int64_t state = 0;
    std::int64_t taken = 0;         // GCRA: permits taken (the slots reserved in mode "lease")
    std::int64_t interval_us = 0;   // GCRA: the configuration the call used (0: not told)
    std::int64_t burst = 0;

    /// A refusal that can never turn into a grant: n exceeds the burst (limit) in force.
    bool exceeds() const noexcept { return !admitted && wait_us == 0; }
};

/// nullopt unless the reply is an array of six (the window) or nine (GCRA, configure)
/// integers in range (times within 2^53 us, as the scripts keep them): a server that
/// answers something else (an old script under the same SHA, a proxy, garbage) is not
/// believed.
template <class Reply>
std::optional<verdict> parse_verdict(const Reply& r) noexcept
{
    const std::size_t size = r.elements.size();
    if (r.type != Reply::kind::array || (size != 6 && size != 9))
        return std::nullopt;
    std::int64_t v[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
    for (std::size_t i = 0; i < r.elements.size(); ++i) {
        if (r.elements[i].type != Reply::kind::integer)
            return std::nullopt;
        v[i] = r.elements[i].integer;
    }
    constexpr std::int64_t lim = std::int64_t{1} << 53;
    if ((v[0] != 0 && v[0] != 1) || v[1] < 0 || v[1] >= lim || v[2] < 0 || v[3] < 0 || v[3] >= lim || v[4] <= -lim ||
        v[4] >= lim || v[6] < 0 || v[7] < 0 || v[8] < 0)
        return std::nullopt;
    return verdict{v[0] == 1, v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]};
}

/// Whether `v` can be the script's answer to `r` (see sluice/redis/scripts.hpp): a try is
/// granted with nothing left to wait, a reservation or a lease within max_wait_us; a lease
/// takes 1 to n slots and is refused only with a wait; the interval a GCRA script used is
/// within the scripts' range. Any other verdict is not believed, as a malformed reply is
/// not: a grant before its time, past the caller's deadline or of more slots than asked
/// would be handed out as it says.
inline bool answers(const verdict& v, const eval_request& r) noexcept
{
    if (v.interval_us > lua::max_span_us)
        return false;
    switch (r.how) {
    case eval_request::mode::try_now:
        return !v.admitted || v.wait_us == 0;
    case eval_request::mode::reserve:
        return !v.admitted || v.wait_us <= r.max_wait_us;
    case eval_request::mode::lease:
        if (!v.admitted)
            return v.wait_us > 0;
        return v.taken >= 1 && static_cast<std::uint64_t>(v.taken) <= r.n && v.wait_us <= r.max_wait_us;
    case eval_request::mode::configure:
        return true;
    }
    return false;
}

/// The script a limiter calls for its requests: what its replies can hold.
enum class script_kind {
    sliding_log,   // six integers a request, no state, taken or configuration
    gcra,          // nine integers, every one following from admitted, now, state, taken,
                   // interval and burst (see lua::gcra)
};

/// Whether `v` is a reply the script of kind `k` can give to `r` at all, beyond answers():
/// the fields the script derives are checked against what they derive from, so that a
/// reply whose bytes were changed on the way (a wait, a state, a remaining or a server
/// time off by a digit), or the answer to another request, is not believed. GCRA's reply
/// to n permits (try, reserve) or up to n slots (lease), with I = interval, B = burst,
/// tau = I * B, z = state, t = now: z >= t - tau; reset_after = max(0, z + tau - t);
/// remaining = min(B, min(t - z, tau) / I) for z < t, else 0; a grant of k (n for a try
/// or a reservation; a lease fewer only when one more slot would end past max_wait, that
/// is t + max_wait - z < I) starts from z - k * I >= t - tau and waits max(0, z - t); a
/// refusal takes nothing and waits z + n * I - t (a lease: z + I - t), or 0 when n > B
/// (never grantable). The sliding log's grants and
/// refusals carry no state, and at most 2^24 remaining.
inline bool consistent(const verdict& v, const eval_request& r, script_kind k) noexcept
{
    using sluice::detail::sat_add;
    using sluice::detail::sat_mul;
    using sluice::detail::sat_sub;
    if (r.how == eval_request::mode::configure)
        return true;
    if (k == script_kind::sliding_log) {
        constexpr std::int64_t max_limit = std::int64_t{1} << 24;
        return v.state == 0 && v.taken == 0 && v.interval_us == 0 && v.burst == 0 && v.remaining <= max_limit &&
               (!v.admitted || v.reset_us >= 1);
    }
    const std::int64_t iv = v.interval_us, b = v.burst;
    if (iv < 1 || b < 1 || iv > lua::max_span_us || b > lua::max_span_us / iv)
        return false;
    const std::int64_t tau = iv * b, z = v.state, t = v.now_us;
    if (z < sat_sub(t, tau) || v.reset_us != std::max<std::int64_t>(0, sat_sub(sat_add(z, tau), t)))
        return false;
    const std::int64_t avail = z >= t ? 0 : std::min(b, std::min(sat_sub(t, z), tau) / iv);
    if (v.remaining != avail)
        return false;
    const bool lease = r.how == eval_request::mode::lease;
    if (v.admitted) {
        // The state before the grant was no earlier than a full bucket's; a lease takes
        // fewer than n slots only when the next one would end past max_wait.
        if (v.taken < 1 || sat_sub(z, sat_mul(static_cast<std::uint64_t>(v.taken), iv)) < sat_sub(t, tau))
            return false;
        const bool all = static_cast<std::uint64_t>(v.taken) == r.n;
        const bool room_for_more = sat_sub(sat_add(t, r.max_wait_us), z) >= iv;
        if (!all && (!lease || room_for_more))
            return false;
        return v.wait_us == std::max<std::int64_t>(0, sat_sub(z, t));
    }
    if (v.taken != 0)
        return false;
    if (v.wait_us == 0)
        return !lease && r.n > static_cast<std::uint64_t>(b);
    return v.wait_us == sat_sub(sat_add(z, sat_mul(lease ? 1 : r.n, iv)), t);
}

inline decision to_decision(const verdict& v) noexcept
{
    decision d;
    d.admitted = v.admitted;
    d.retry_after = v.admitted ? std::chrono::nanoseconds{0} : std::chrono::microseconds{v.wait_us};
    d.remaining = static_cast<std::uint64_t>(v.remaining);
    d.reset_after = std::chrono::microseconds{v.reset_us};
    return d;
}

} // namespace sluice::redis::detail
