// GCRA's arithmetic with no state of its own: one configuration and the steps from one
// state z to the next. Every holder of a GCRA state uses it (policy::gcra's atomic word,
// the keyed store's compact word); it needs no atomics and no lock, so a state held
// anywhere else (one word in shared memory) can use it too.
#pragma once

#include <sluice/decision.hpp>
#include <sluice/detail/base/arith.hpp>
#include <sluice/error.hpp>

#include <boost/system/system_error.hpp>

#include <chrono>
#include <cstdint>

namespace sluice::detail {

/// A GCRA configuration, validated, and the steps on a state z: the instant at which the
/// bucket is (or was) empty, in integer nanoseconds. At `now` the bucket holds
/// min(burst, (now - z) / interval) permits, and consuming k moves z forward by
/// k * interval. The steps are templated on the integer z is held in: std::int64_t where
/// the caller knows every intermediate fits (|z|, |now| < 2^62, tau < 2^61), else int128
/// (every z a bucket reaches, [-2^64, 2^63), and every instant of the int64 clock).
struct gcra_step {
    std::int64_t interval;
    std::int64_t tau;   // how far z may lag behind now: burst * interval + slack
    std::uint64_t burst;
    std::int64_t slack;
    std::uint64_t recip;   // reciprocal(interval): divides by the interval with a multiplication

    /// Throws system_error(error::invalid_rate) for an interval <= 0,
    /// error::invalid_limit when burst is 0 or burst * interval exceeds the int64
    /// nanosecond range (292 years), and error::invalid_duration for a negative slack or
    /// one that takes burst * interval + slack beyond that range.
    static gcra_step make(std::int64_t interval, std::uint64_t burst, std::int64_t slack)
    {
        if (interval <= 0)
            throw boost::system::system_error(make_error_code(error::invalid_rate));
        if (slack < 0)
            throw boost::system::system_error(make_error_code(error::invalid_duration));
        std::int64_t tau = sat_mul(burst, interval);
        if (burst == 0 || tau == max_ns)
            throw boost::system::system_error(make_error_code(error::invalid_limit));
        if (sat_add(tau, slack) == max_ns)
            throw boost::system::system_error(make_error_code(error::invalid_duration));
        return {interval, tau + slack, burst, slack, reciprocal(interval)};
    }

    /// The state after granting k permits at `now` from state z (granted when it is <= now).
    /// The grant continues the caller's own schedule z while it is late on it by less than
    /// the slack (z > now - tau), and otherwise (idle, or later than the slack) restarts
    /// it at now with a full bucket and no slack credit (now - burst * interval): grants
    /// after idleness are one interval apart. With no slack this is max(z, now - tau),
    /// textbook GCRA. In int128 the operands keep it within range: z >= -2^64,
    /// k * interval < 2^127 - 2^64.
    template <class I>
    [[gnu::always_inline]] I next_z(I z, std::uint64_t k, std::int64_t now) const noexcept
    {
        I start = I(now) - tau;
        start = z > start ? z : start + slack;
        return start + I(k) * interval;
    }

    /// Permits the bucket holds at `now` (capped by the burst: slack is catch-up, not
    /// capacity).
    template <class I>
    [[gnu::always_inline]] std::uint64_t available(I z, std::int64_t now) const noexcept
    {
        if (z >= now) return 0;
        I lag = I(now) - z;
        // Less than one interval (every refusal of one permit): none, without quotient().
        if (lag < interval) return 0;
        // The capped lag fits 64 bits: no 128-bit division (a library call), and no
        // division at all (quotient).
        std::int64_t full = tau - slack;
        std::int64_t room = lag < full ? static_cast<std::int64_t>(lag) : full;
        return static_cast<std::uint64_t>(quotient(room, interval, recip));
    }

    /// The multiplier of quotient(): floor((2^64 - 1) / interval), for interval >= 1.
    static constexpr std::uint64_t reciprocal(std::int64_t interval) noexcept
    {
        return ~std::uint64_t{0} / static_cast<std::uint64_t>(interval);
    }

    /// room / interval (room >= 0, interval >= 1) without the integer divider, which is not
    /// pipelined (tens of cycles a division, on the path of every decision's `remaining`):
    /// the high half of room x recip is the quotient or one less (room < 2^63 makes the
    /// error of recip, less than 1 per 2^64 / interval, worth less than half a unit), and
    /// one comparison of the remainder corrects it. Exact for every such room and interval.
    [[gnu::always_inline]] static std::int64_t quotient(std::int64_t room, std::int64_t interval,
                                                        std::uint64_t recip) noexcept
    {
        const auto r = static_cast<std::uint64_t>(room), i = static_cast<std::uint64_t>(interval);
        auto q = static_cast<std::uint64_t>((uint128(r) * recip) >> 64);
        if (r - q * i >= i) ++q;
        return static_cast<std::int64_t>(q);
    }

    /// quotient() with the interval's reciprocal computed here (one division).
    static std::int64_t quotient(std::int64_t room, std::int64_t interval) noexcept
    {
        return quotient(room, interval, reciprocal(interval));
    }

    /// Nanoseconds until the bucket holds its burst again (0 when it does).
    template <class I>
    [[gnu::always_inline]] std::int64_t reset(I z, std::int64_t now) const noexcept
    {
        I t = z + (tau - slack) - now;
        return t > 0 ? narrow(t) : 0;
    }

    // The decision on a state z: a holder computes nz = next_z(z, n, now), refuses when
    // nz > now, else commits nz and then admits. It fills the decision after its commit
    // (its compare-and-swap may fail and decide again): the grant's figures are computed
    // once, for the state that stands, and a caller that reads only `admitted` lets the
    // compiler drop them.

    /// Sets d to a refusal: n permits asked at `now` in state z are due at nz (> now).
    template <class I>
    [[gnu::always_inline]] void refuse(decision& d, I z, I nz, std::int64_t now) const noexcept
    {
        d.admitted = false;
        // Ready only at or past the clock's end: never. A wait longer than int64 holds
        // (after a backward step of more than 2^63 ns) saturates.
        d.retry_after = std::chrono::nanoseconds{nz >= max_ns ? max_ns : narrow(nz - now)};
        d.remaining = available(z, now);
        d.reset_after = std::chrono::nanoseconds{reset(z, now)};
    }

    /// Sets d to a grant of n permits at `now` that took state z to nz.
    template <class I>
    [[gnu::always_inline]] void admit(decision& d, I z, I nz, std::uint64_t n, std::int64_t now) const noexcept
    {
        d.admitted = true;
        d.retry_after = std::chrono::nanoseconds{0};
        if (z <= I(now) - tau) {
            // The grant found the bucket full (next_z restarted it: nz = now - burst x
            // interval + n x interval), as most grants of a limiter used well below its
            // rate do: it holds burst - n, and is full again n intervals from now. The
            // same figures as below, without quotient()'s multiplication.
            d.remaining = burst - n;
            d.reset_after = std::chrono::nanoseconds{static_cast<std::int64_t>(n) * interval};
            return;
        }
        d.remaining = available(nz, now);
        d.reset_after = std::chrono::nanoseconds{reset(nz, now)};
    }

    /// The state after giving back n permits at `now` from state z: never fuller than a
    /// full bucket at now.
    int128 refunded(int128 z, std::uint64_t n, std::int64_t now) const noexcept
    {
        int128 floor = int128(now) - tau;
        int128 nz = z - int128(n) * interval;
        return nz < floor ? floor : nz;
    }

    /// State z of a bucket configured as `old`, carried to this configuration at `now`,
    /// counting what was consumed in permits. A debt (z > now) stays a debt of the same
    /// permits, repaid at this interval. Otherwise the bucket keeps the permits it holds,
    /// capped by this burst, and the catch-up of a caller late on its schedule (z within
    /// old.tau of now), capped by this slack. An idle bucket holds its burst and no
    /// catch-up: slack is credit for a caller late on its schedule, not capacity that an
    /// idle bucket stores up; when it holds this whole burst it stays idle, and decides as
    /// a new bucket. Durations are rescaled by interval / old.interval, towards now, to
    /// whole ns (a count of permits never grows); no state lies beyond the end of the
    /// clock (a debt past it is never repaid). The operands keep it within 128 bits:
    /// |now - z| < 2^65, intervals < 2^63.
    int128 carry(int128 z, std::int64_t now, const gcra_step& old) const noexcept
    {
        int128 lag = int128(now) - z;   // negative: a debt
        bool idle = lag >= old.tau;
        std::int64_t old_full = old.tau - old.slack;
        std::int64_t full = tau - slack;
        int128 held = idle || lag > old_full ? int128(old_full) : lag;
        int128 late = idle ? 0 : lag - held;   // the catch-up: less than old.slack
        held = held * interval / old.interval;
        if (held > full) held = full;
        int128 credit = held + late * interval / old.interval;
        if (credit >= tau || (idle && held == full)) return int128(now) - tau;
        int128 nz = int128(now) - credit;
        return nz > max_ns ? int128(max_ns) : nz;
    }

    /// The earliest instant from which, if nothing more is consumed, state z decides
    /// exactly as a new bucket.
    int128 idle_at(int128 z) const noexcept { return z + tau; }

private:
    static std::int64_t narrow(std::int64_t v) noexcept { return v; }
    static std::int64_t narrow(int128 v) noexcept { return sat_narrow(v); }
};

/// A decision returned from a GCRA holder's out-of-line path (its decide_again: every case
/// the inline path leaves). Wrapped: returned as a decision, GCC builds it in the caller's
/// decision, which then lives in memory and is stored on every decision, the fast ones too.
struct slow_answer {
    decision d;
};

} // namespace sluice::detail
