// One GCRA decision on a 64-bit word held elsewhere (shared memory): shm::gcra's one word
// and every key of shm::keyed_gcra decide through it, so that both take the decisions
// policy::gcra takes.
#pragma once

#include <sluice/decision.hpp>
#include <sluice/detail/arith.hpp>
#include <sluice/detail/gcra_step.hpp>
#include <sluice/error.hpp>

#include <atomic>
#include <cstdint>

namespace sluice::shm::detail {

/// The stored form of GCRA's z in one int64 word: `fresh` (INT64_MIN) is a new bucket,
/// empty long enough ago to be full at every instant (policy::gcra's -2^64); every stored
/// z is at least `Lowest`, so that the words between INT64_MIN and Lowest stay free for
/// the holder's own marks (shm::keyed_gcra's tombstone).
template <std::int64_t Lowest>
struct gcra_word {
    using int128 = sluice::detail::int128;
    static_assert(Lowest > sluice::detail::min_ns);

    static constexpr std::int64_t fresh = sluice::detail::min_ns;

    static int128 z_of(std::int64_t w) noexcept { return w == fresh ? -(int128(1) << 64) : int128(w); }

    // z as stored: below Lowest only near the clock's beginning, where holding it higher
    // consumes more, never less.
    static std::int64_t store_form(int128 z) noexcept { return z < Lowest ? Lowest : static_cast<std::int64_t>(z); }

    // |x| < 2^62 and tau < 2^61: every step fits 64 bits (as in policy::gcra).
    static constexpr std::int64_t small_tau = std::int64_t{1} << 61;

    static bool near_zero(std::int64_t x) noexcept
    {
        return static_cast<std::uint64_t>(x) + (std::uint64_t{1} << 62) < (std::uint64_t{1} << 63);
    }

    /// Decides n (1..burst) permits at `now` on word w. A grant calls commit(stored), the
    /// word to store in place of w (a compare-and-swap: false when it lost a race); returns
    /// false when it did (w is then reloaded by the caller and this is called again), true
    /// when d holds the decision.
    template <class Commit>
    [[gnu::always_inline]] static bool decide(const sluice::detail::gcra_step& s, std::int64_t w, std::uint64_t n,
                                              std::int64_t now, decision& d, Commit&& commit) noexcept
    {
        // Away from the ends of the clock the steps fit 64 bits; a new bucket decides as
        // one whose z is now - tau (full, no catch-up: the same figures).
        if (near_zero(now) && (w == fresh || near_zero(w)) && s.tau < small_tau)
            return decide_in<std::int64_t>(s, w == fresh ? now - s.tau : w, n, now, d, commit);
        return decide_in<int128>(s, z_of(w), n, now, d, commit);
    }

    /// Commits n (1..burst) permits at `now` on word w when they are available within
    /// max_wait (>= 0): commit(stored) swaps the word (false when it lost a race, and this
    /// is called again on the word reloaded). r holds the reservation when this returns
    /// true; a granted one that lies in the future is recorded in `last`, the word this
    /// holder's last reservation left (what refund() compares with).
    template <class Commit>
    static bool reserve(const sluice::detail::gcra_step& s, std::int64_t w, std::uint64_t n, std::int64_t now,
                        std::int64_t max_wait, reservation& r, std::atomic<std::int64_t>& last, Commit&& commit) noexcept
    {
        int128 nz = s.next_z(z_of(w), n, now);
        if (nz >= sluice::detail::max_ns || nz - now > max_wait) {
            r = {};
            r.at = sluice::detail::sat_narrow(nz);
            r.error = make_error_code(error::timed_out);
            return true;
        }
        std::int64_t stored = store_form(nz);
        if (!commit(stored)) return false;
        if (nz > now) last.store(stored, std::memory_order_relaxed);
        r = {};
        r.admitted = true;
        r.at = nz < now ? now : static_cast<std::int64_t>(nz);
        return true;
    }

    /// Gives back n permits of the holder's last reservation(s) when nothing was committed
    /// on `word` after them (it still holds `last`): the refund rule of every shared GCRA
    /// word (see shm::gcra). Returns how far z moved back, in ns. Never fuller than a full
    /// bucket; a word that moved on (another holder's reservation, a key evicted and its
    /// slot reused) is left alone.
    static std::int64_t refund(const sluice::detail::gcra_step& s, std::atomic<std::int64_t>& word, std::uint64_t n,
                               std::int64_t now, std::atomic<std::int64_t>& last) noexcept
    {
        std::int64_t w = last.load(std::memory_order_relaxed);
        if (w == fresh || word.load(std::memory_order_acquire) != w) return 0;
        int128 z = z_of(w);
        std::int64_t stored = store_form(s.refunded(z, n, now));
        if (stored >= w || !word.compare_exchange_strong(w, stored, std::memory_order_acq_rel, std::memory_order_relaxed))
            return 0;
        last.store(stored, std::memory_order_relaxed);
        return sluice::detail::sat_narrow(z - int128(stored));
    }

private:
    template <class I, class Commit>
    static bool decide_in(const sluice::detail::gcra_step& s, I z, std::uint64_t n, std::int64_t now, decision& d,
                          Commit& commit) noexcept
    {
        I nz = s.next_z(z, n, now);
        if (nz > now) {
            s.refuse(d, z, nz, now);
            return true;
        }
        if (!commit(store_form(nz))) return false;
        s.admit(d, z, nz, n, now);
        return true;
    }
};

} // namespace sluice::shm::detail
