// One GCRA decision on a 64-bit word held elsewhere (shared memory): policy::shm_gcra's one word
// and every key of shm::keyed_gcra decide through it, so that both take the decisions
// policy::gcra takes.
#pragma once

#include <sluice/decision.hpp>
#include <sluice/detail/base/arith.hpp>
#include <sluice/detail/policy/gcra_step.hpp>
#include <sluice/error.hpp>

#include <atomic>
#include <cstdint>

namespace sluice::shm::detail {

/// What one holder of reservations on a shared GCRA word (a process's waiting queue) keeps
/// of them, for the refund rule (gcra_word::refund). Changed under the holder's lock;
/// atomic for its blocking path.
struct holder_state {
    /// The word this holder's last reservation left (min_ns, gcra_word's fresh: none yet).
    std::atomic<std::int64_t> last{sluice::detail::min_ns};
    /// Reservations granted ahead so far, numbered from 1 in the order made.
    std::atomic<std::uint64_t> count{0};
    /// The number of the last one that a commit by anyone else followed (0: none): a
    /// reservation up to this one has another's commit after it.
    std::atomic<std::uint64_t> barrier{0};
};

/// The stored form of GCRA's z in one int64 word: `fresh` (INT64_MIN) is a new bucket,
/// empty long enough ago to be full at every instant (policy::gcra's -2^64); every stored
/// z is at least `Lowest`, so that the words between INT64_MIN and Lowest stay free for
/// the holder's own marks (shm::keyed_gcra's tombstone).
template <std::int64_t Lowest>
struct gcra_word {
    using int128 = sluice::detail::int128;
    static_assert(Lowest > sluice::detail::min_ns);

    static constexpr std::int64_t fresh = sluice::detail::min_ns;

    /// Compare-and-swaps a decision loses in a row before it gives up (error::shm_corrupt):
    /// far beyond what contention makes (each loss is another decision's win), reached only
    /// when something writes the word in a loop.
    static constexpr int most_tries = 1 << 20;

    static int128 z_of(std::int64_t w) noexcept { return w == fresh ? -(int128(1) << 64) : int128(w); }

    // z as stored: below Lowest only near the clock's beginning, where holding it higher
    // consumes more, never less.
    static std::int64_t store_form(int128 z) noexcept { return z < Lowest ? Lowest : static_cast<std::int64_t>(z); }

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
        if (in_64_bits(s, w, now))
            return decide_in<std::int64_t>(s, w == fresh ? now - s.tau : w, n, now, d, commit);
        return decide_in<int128>(s, z_of(w), n, now, d, commit);
    }

    /// decide() in its common case only: false, with nothing decided, when the word or the
    /// instant needs the 128-bit steps, and when the commit lost a race (decide() then).
    template <class Commit>
    [[gnu::always_inline]] static bool decide_fast(const sluice::detail::gcra_step& s, std::int64_t w, std::uint64_t n,
                                                   std::int64_t now, decision& d, Commit&& commit) noexcept
    {
        return in_64_bits(s, w, now) && decide_in<std::int64_t>(s, w == fresh ? now - s.tau : w, n, now, d, commit);
    }

    /// Commits n (1..burst) permits at `now` on word w when they are available within
    /// max_wait (>= 0): commit(stored) swaps the word (false when it lost a race, and this
    /// is called again on the word reloaded). r holds the reservation when this returns
    /// true. One granted ahead (at > now) is numbered in `h` (h.count is its number) and
    /// its word kept; when the word it commits on is not what h's last reservation left,
    /// someone else committed after that one, and h's reservations so far are behind a
    /// barrier.
    template <class Commit>
    static bool reserve(const sluice::detail::gcra_step& s, std::int64_t w, std::uint64_t n, std::int64_t now,
                        std::int64_t max_wait, reservation& r, holder_state& h, Commit&& commit) noexcept
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
        r = {};
        r.admitted = true;
        r.at = nz < now ? now : static_cast<std::int64_t>(nz);
        if (nz > now) {
            std::int64_t last = h.last.load(std::memory_order_relaxed);
            std::uint64_t count = h.count.load(std::memory_order_relaxed);
            if (last != fresh && w != last) h.barrier.store(count, std::memory_order_relaxed);
            h.last.store(stored, std::memory_order_relaxed);
            h.count.store(count + 1, std::memory_order_relaxed);
        }
        return true;
    }

    /// The number to pass to refund() for a reservation the caller cannot name: given back
    /// only while no other commit ever came between the holder's reservations.
    static constexpr std::uint64_t unnamed = 1;

    /// Gives back n permits of the holder's reservation number `which` when no reservation
    /// depends on it: nothing was committed on `word` by anyone else after it, neither
    /// after h's last reservation (the word still holds what that one left) nor between
    /// the two (`which` is beyond h's barrier). Then every reservation after it is h's
    /// own, whose waiters move up with it. The refund rule of every shared GCRA word (see
    /// policy::shm_gcra). Returns how far z moved back, in ns. Never fuller than a full bucket; a
    /// word that moved on (another holder's commit, a key evicted and its slot reused) is
    /// left alone.
    static std::int64_t refund(const sluice::detail::gcra_step& s, std::atomic<std::int64_t>& word, std::uint64_t n,
                               std::int64_t now, holder_state& h, std::uint64_t which) noexcept
    {
        if (which <= h.barrier.load(std::memory_order_relaxed)) return 0;
        std::int64_t w = h.last.load(std::memory_order_relaxed);
        if (w == fresh || word.load(std::memory_order_acquire) != w) return 0;
        int128 z = z_of(w);
        std::int64_t stored = store_form(s.refunded(z, n, now));
        if (stored >= w || !word.compare_exchange_strong(w, stored, std::memory_order_acq_rel, std::memory_order_relaxed))
            return 0;
        h.last.store(stored, std::memory_order_relaxed);
        return sluice::detail::sat_narrow(z - int128(stored));
    }

private:
    // |now|, |w| < 2^62 and tau < 2^61: every step fits 64 bits (as in policy::gcra).
    static bool in_64_bits(const sluice::detail::gcra_step& s, std::int64_t w, std::int64_t now) noexcept
    {
        return near_zero(now) && (w == fresh || near_zero(w)) && s.tau < small_tau;
    }

    template <class I, class Commit>
    [[gnu::always_inline]] static bool decide_in(const sluice::detail::gcra_step& s, I z, std::uint64_t n,
                                                 std::int64_t now, decision& d, Commit& commit) noexcept
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
