// A policy's state in one word, for stores of many keys that share one configuration.
#pragma once

#include <sluice/decision.hpp>
#include <sluice/detail/base/arith.hpp>
#include <sluice/detail/policy/gcra_step.hpp>
#include <sluice/policy/gcra.hpp>

#include <cstdint>
#include <optional>

namespace sluice::detail {

/// Words a compact state never takes, left to the store that holds them (a keyed store
/// keeps the index of a key's whole policy there): as int64, INT64_MIN to INT64_MIN +
/// 2^32 - 1.
inline constexpr std::int64_t store_words_end = min_ns + (std::int64_t{1} << 32);

/// Policies whose per-key state fits in one 8-byte word when the configuration is shared
/// specialise this (enabled = true), and never use the store's words.
template <class Policy>
struct compact_state {
    static constexpr bool enabled = false;
};

/// GCRA's state is the instant z at which the bucket is empty; with the configuration
/// shared, z is all a key needs: the word is z itself, or `fresh` for a new (full) bucket
/// (gcra's -2^64, empty long enough ago to be full at every instant). Decisions are
/// gcra_step's on z, as policy::gcra's: tests/test_keyed.cpp feeds both the same arrivals.
/// A grant whose new z would fall among the store's words (z within 2^32 ns of
/// INT64_MIN, after a clock near it) returns nullopt, and the store moves the key to a
/// whole policy::gcra (restore()).
template <>
struct compact_state<policy::gcra> {
    static constexpr bool enabled = true;

    /// A new bucket.
    static constexpr std::uint64_t fresh = static_cast<std::uint64_t>(store_words_end);

    /// The configuration of `p` (valid: it is p's).
    explicit compact_state(const policy::gcra& p) : step(gcra_step::make(p.interval_ns(), p.burst(), p.slack().count())) {}

    /// The decision of gcra::try_acquire(n, now) on the state in `word`, which it updates
    /// when granted; nullopt (and nothing changed) when the new state has no compact form.
    std::optional<decision> try_acquire(std::uint64_t& word, std::uint64_t n, std::int64_t now) const noexcept
    {
        if (n == 0 || n > step.burst) return invalid_decision(n == 0 ? error::invalid_count : error::exceeds_limit);
        int128 z = z_of(word);
        int128 nz = step.next_z(z, n, now);
        decision d;
        if (nz > now) {
            step.refuse(d, z, nz, now);
            return d;
        }
        if (nz <= store_words_end) return std::nullopt;
        word = static_cast<std::uint64_t>(static_cast<std::int64_t>(nz));
        step.admit(d, z, nz, n, now);
        return d;
    }

    /// gcra::settle on the state in `word` (at is not needed); false (nothing changed) when
    /// the new state has no compact form.
    bool settle(std::uint64_t& word, std::uint64_t cost, std::uint64_t actual, std::int64_t now) const noexcept
    {
        int128 z = z_of(word);
        int128 nz;
        if (actual < cost) {
            nz = step.refunded(z, cost - actual, now);
            if (nz >= z) return true;
        } else {
            nz = z + int128(actual - cost) * step.interval;
            if (nz > max_ns) nz = max_ns;
        }
        if (nz <= store_words_end) return false;
        word = static_cast<std::uint64_t>(static_cast<std::int64_t>(nz));
        return true;
    }

    /// gcra::idle_at: from when the bucket decides as a new one.
    std::int64_t idle_at(std::uint64_t word) const noexcept { return sat_narrow(step.idle_at(z_of(word))); }

    /// Gives `p`, a new bucket of this configuration, the state in `word`. gcra has no
    /// setter for z, on purpose (z only moves through decisions): a grant of the whole
    /// burst at now = z takes a full bucket to exactly z (now - tau + slack + burst x
    /// interval).
    void restore(policy::gcra& p, std::uint64_t word) const noexcept
    {
        if (word != fresh) p.try_acquire(step.burst, static_cast<std::int64_t>(word));
    }

private:
    static int128 z_of(std::uint64_t word) noexcept
    {
        return word == fresh ? -(int128(1) << 64) : int128(static_cast<std::int64_t>(word));
    }

    gcra_step step;   // the shared configuration
};

} // namespace sluice::detail
