// A script's reply (see sluice/redis/scripts.hpp), checked and unpacked.
#pragma once

#include <sluice/decision.hpp>
#include <sluice/redis/detail/op_step.hpp>
#include <sluice/redis/scripts.hpp>

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
