// A script's reply (see sluice/redis/scripts.hpp), checked and unpacked.
#pragma once

#include <sluice/decision.hpp>

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
/// integers in range: a server that answers something else (an old script under the same
/// SHA, a proxy, garbage) is not believed.
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
    if ((v[0] != 0 && v[0] != 1) || v[1] < 0 || v[1] >= lim || v[2] < 0 || v[3] < 0 || v[3] >= lim || v[6] < 0 ||
        v[7] < 0 || v[8] < 0)
        return std::nullopt;
    return verdict{v[0] == 1, v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]};
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
