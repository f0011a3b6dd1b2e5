// The contract of a rate policy: the sans-io core a rate_limiter drives.
#pragma once

#include <sluice/decision.hpp>

#include <concepts>
#include <cstdint>

namespace sluice {

/// A rate policy (policy::gcra, fixed_counter, sliding_log, weighted_counter, slot_ring,
/// composite): a decision from n and `now` alone (nanoseconds on the caller's clock), no
/// I/O, no clock of its own. try_acquire admits or refuses at once; check answers the same
/// without consuming; reserve(n, now, max_wait, ahead) admits at once, or for a policy
/// that reserves_ahead commits a future slot, or predicts when to retry (`ahead`: permits
/// queued elsewhere before this request); predict says when n permits (after `ahead`)
/// could be admitted. A policy
/// that reserves ahead can refund(n, now) a reservation, and says how far later
/// reservations may move up.
template <class P>
concept rate_policy = requires(P& p, const P& cp, std::uint64_t n, std::int64_t now) {
    { P::reserves_ahead } -> std::convertible_to<bool>;
    { p.try_acquire(n, now) } -> std::same_as<decision>;
    { cp.check(n, now) } -> std::same_as<decision>;
    { p.reserve(n, now, now, n) } -> std::same_as<reservation>;
    { cp.predict(n, now, n) } -> std::same_as<std::int64_t>;
} && (!P::reserves_ahead || requires(P& p, std::uint64_t n, std::int64_t now) {
    { p.refund(n, now) } -> std::same_as<std::int64_t>;
});

} // namespace sluice
