// One driver for the random-arrival model tests of the policies: the same random arrivals
// replayed against a policy and an independent model of it, every decision compared.
#pragma once

#include <sluice/decision.hpp>
#include <sluice/error.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "policy_support.hpp"

namespace sluice_test {

/// The shape of a run's random arrivals: what each step draws, in percent of the draws
/// (the rest of each table goes to its last entry).
struct arrivals {
    /// Counts: n = 0, n beyond the limit (limit + 1 to limit + over_by), n = 1; the rest 1
    /// to limit.
    std::uint64_t limit = 1;
    int zero = 2, over = 2, one = 56;
    std::uint64_t over_by = 1;

    /// Operations: try_acquire, check, reserve; the rest, the case's own (other()).
    int tries = 70, checks = 10, reserves = 20;
    /// A reservation's max_wait: 0 `no_wait` percent of the time, INT64_MAX `forever`
    /// percent, else in [0, max_wait]. Its `ahead`, for a policy that grants only at
    /// once: one time in three in [0, max_ahead), else 0.
    std::int64_t max_wait = 0;
    int no_wait = 0, forever = 0;
    std::uint64_t max_ahead = 0;
    /// Whether predict(n, now) alone is exactly when a refusal said to retry.
    bool exact_prediction = true;

    /// Time, after each step: no step (requests at one instant), a step of exactly one
    /// unit (a caller on its schedule), a step within 3 spans, idle (1 to 1000 spans),
    /// idle of any length (2^k spans, give or take 3, up to the end of the clock), back
    /// within 3 spans, back by any length, to either end of the clock (exactly, or within
    /// 2 spans of it), to within 2 spans of 0; the rest a step within one unit. `unit` is
    /// about one permit's time, `span` the policy's memory (a window, a turn, burst x
    /// interval). Backward steps only where the policy takes them (all of sluice's do).
    std::int64_t unit = 1, span = 1;
    int still = 30, exact = 0, medium = 13, idle = 4, any_idle = 0, back = 8, any_back = 0, ends = 0, near_zero = 0;
    /// The earliest instant a step goes to (where a policy documents a limit of the
    /// int64 range below it).
    std::int64_t earliest = i64_min;

    /// The arrivals of a window policy of `limit` permits a `window` (ns): reservations
    /// up to three windows and three limits ahead, steps of about a quarter window.
    static arrivals for_window(std::uint64_t limit, std::int64_t window)
    {
        arrivals a;
        a.limit = limit;
        a.max_wait = 3 * window;
        a.max_ahead = 3 * limit;
        a.unit = window / static_cast<std::int64_t>(std::min<std::uint64_t>(limit, 4)) + 1;
        a.span = window;
        return a;
    }

    std::uint64_t count(rng& r) const
    {
        int k = static_cast<int>(r.below(100));
        if (k < zero) return 0;
        if (k < zero + over) return limit + 1 + r.below(over_by);
        if (k < zero + over + one) return 1;
        return 1 + r.below(limit);
    }

    std::int64_t wait(rng& r) const
    {
        int k = static_cast<int>(r.below(100));
        if (k < no_wait) return 0;
        if (k < no_wait + forever) return i64_max;
        return r.in(0, max_wait);
    }

    std::uint64_t ahead(rng& r) const { return max_ahead && r.below(3) == 0 ? r.below(max_ahead) : 0; }

    /// The instant after `now`; `any` draws an idle gap of any length.
    template <class Any>
    std::int64_t next(rng& r, std::int64_t now, Any&& any) const
    {
        int k = static_cast<int>(r.below(100));
        i128 s = span;
        i128 t = now;
        if ((k -= still) < 0) return now;
        if ((k -= exact) < 0) t += unit;
        else if ((k -= medium) < 0) t += r.in(0, clamp64(3 * s));
        else if ((k -= idle) < 0) t += r.in(1, 1000) * s + r.in(0, span);
        else if ((k -= any_idle) < 0) t += any();
        else if ((k -= back) < 0) t -= r.in(0, clamp64(3 * s));
        else if ((k -= any_back) < 0) t -= any();
        else if ((k -= ends) < 0) t = r.chance(50) ? i64_min + (r.chance(50) ? 0 : r.in(0, clamp64(2 * s)))
                                                   : i64_max - (r.chance(50) ? 0 : r.in(0, clamp64(2 * s)));
        else if ((k -= near_zero) < 0) t = r.in(-clamp64(2 * s), clamp64(2 * s));
        else t += r.in(0, unit);
        return t < earliest ? earliest : clamp64(t);
    }

    /// An idle gap of any length: 2^k spans for every k, give or take 3, so that 2^31,
    /// 2^32, 2^63 and the ends of the int64 range are crossed from every side.
    std::int64_t any_gap(rng& r) const
    {
        i128 spans = (i128(1) << r.below(64)) + r.in(-3, 3);
        if (spans < 1) spans = 1;
        return clamp64(spans * span + r.in(0, span - 1));
    }
};

/// Replays `steps` random steps from `now` against c.policy and c.model, drawn from `r`
/// in the shape c.shape (read at every step: a case may change it, with its limit):
/// try_acquire and check are compared with the model's decide(n, now, consume), and
/// reserve with the model's reserve(n, now, max_wait) for a policy that reserves ahead;
/// a policy that grants only at once must grant when the model does (and ahead is 0),
/// else consume nothing and return its predict(), which the case may check further.
/// A case may also define (each optional):
///   same(got, want)                      the comparison of decisions (else check_same)
///   admitted(n, now)                     after each grant at once (invariants on the grants)
///   reserved(n, now, got)                after a reservation of a policy that reserves ahead
///   deferred(n, now, ahead, got, want)   a refused reservation of an at-once policy
///   other(r, n, now)                     the operations beyond these (refund, set_*)
///   after(now)                           checks after every step
///   any_gap(r)                           its own idle gaps of any length (else the shape's)
template <class Case>
void replay(Case& c, rng& r, std::int64_t now, int steps)
{
    auto same = [&](const sluice::decision& got, const sluice::decision& want) {
        if constexpr (requires { c.same(got, want); }) c.same(got, want);
        else check_same(got, want);
    };
    auto admitted = [&](std::uint64_t n, std::int64_t t) {
        if constexpr (requires { c.admitted(n, t); }) c.admitted(n, t);
    };
    for (int step = 0; step < steps; ++step) {
        INFO("step ", step, " now ", now);
        const arrivals& a = c.shape;
        std::uint64_t n = a.count(r);
        int op = static_cast<int>(r.below(100));
        if (op < a.tries) {
            sluice::decision got = c.policy.try_acquire(n, now);
            same(got, c.model.decide(n, now, true));
            if (got.admitted) admitted(n, now);
        } else if (op < a.tries + a.checks) {
            same(c.policy.check(n, now), c.model.decide(n, now, false));
        } else if (op < a.tries + a.checks + a.reserves) {
            std::int64_t max_wait = a.wait(r);
            CAPTURE(max_wait);
            if constexpr (std::remove_cvref_t<decltype(c.policy)>::reserves_ahead) {
                sluice::reservation want = c.model.reserve(n, now, max_wait);
                sluice::reservation got = c.policy.reserve(n, now, max_wait);
                CHECK(got.admitted == want.admitted);
                CHECK(got.at == want.at);
                CHECK(got.error == want.error);
                if constexpr (requires { c.reserved(n, now, got); }) c.reserved(n, now, got);
            } else {
                std::uint64_t ahead = a.ahead(r);
                CAPTURE(ahead);
                sluice::decision want = c.model.decide(n, now, false);
                std::int64_t predicted = c.policy.predict(n, now, ahead);
                sluice::reservation got = c.policy.reserve(n, now, max_wait, ahead);
                if (want.error) {
                    CHECK_FALSE(got.admitted);
                    CHECK(got.error == want.error);
                } else if (ahead == 0 && want.admitted) {
                    CHECK(got.admitted);
                    CHECK(got.at == now);
                    CHECK_FALSE(got.error);
                    c.model.decide(n, now, true);
                    admitted(n, now);
                } else {
                    // Nothing consumed: retry at the prediction, never before now.
                    CHECK_FALSE(got.admitted);
                    CHECK(got.at == predicted);
                    CHECK(got.at >= now);
                    // Alone, when the refusal said (a saturated wait: never, or at least
                    // that long).
                    if (ahead == 0 && a.exact_prediction) {
                        if (want.retry_after != std::chrono::nanoseconds::max())
                            CHECK(got.at == clamp64(i128(now) + want.retry_after.count()));
                        else
                            CHECK((got.at == i64_max || i128(got.at) - now >= i64_max));
                    }
                    bool late = i128(got.at) - now > max_wait;
                    CHECK(got.error == (late ? boost::system::error_code(sluice::error::timed_out)
                                             : boost::system::error_code()));
                    if constexpr (requires { c.deferred(n, now, ahead, got, want); }) c.deferred(n, now, ahead, got, want);
                }
            }
        } else {
            if constexpr (requires { c.other(r, n, now); }) c.other(r, n, now);
        }
        if constexpr (requires { c.after(now); }) c.after(now);
        now = a.next(r, now, [&]() -> i128 {
            if constexpr (requires { c.any_gap(r); }) return c.any_gap(r);
            else return a.any_gap(r);
        });
    }
}

} // namespace sluice_test
