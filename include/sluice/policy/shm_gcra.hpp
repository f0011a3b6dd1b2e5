// GCRA on one atomic word in a shared-memory segment: the policy of the token bucket and the
// leaky bucket of every process of a host (shm::token_bucket, shm::leaky_bucket).
#pragma once

#include <sluice/decision.hpp>
#include <sluice/detail/base/arith.hpp>
#include <sluice/detail/policy/gcra_step.hpp>
#include <sluice/policy/basic_policy.hpp>
#include <sluice/rate.hpp>
#include <sluice/shm/detail/policy/gcra_word.hpp>
#include <sluice/shm/segment.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string_view>

namespace sluice::policy {

/// policy::gcra with its state in a named shared-memory segment (see shm::segment): every
/// process that constructs one on the same name decides on the same bucket. The state is
/// one std::atomic<std::int64_t> in the segment, GCRA's z (the instant the bucket is
/// empty); a decision is a load, sluice::detail::gcra_step and one compare-and-swap, as
/// policy::gcra's, and takes the same decisions on the same arrivals (tests/test_shm.cpp
/// feeds both). A process killed at any instruction leaves the word as it was before or
/// after its compare-and-swap: there is nothing else to leave half-done.
///
/// The configuration (rate, burst, slack) is written in the segment's header when it is
/// created and never changes: a process that names the segment with another one gets
/// error::shm_config_mismatch. There is no set_rate, set_burst or set_slack: changing the
/// configuration and z together would need a lock a killed process could leave held.
///
/// Time: every process compares its `now` with instants other processes wrote, so their
/// clocks must share one time line: steady_clock (CLOCK_MONOTONIC) does, and tsc_clock
/// does within its drift (see shm::token_bucket). A clock that reads behind another
/// process's never admits more (z never moves back but through refund); one that reads
/// ahead by d admits at most d / interval permits early.
///
/// Reservations are committed in the shared word, so waiters of every process are served
/// in the order they reserved. refund() gives a cancelled reservation back only when no
/// other process committed after it: not after this process's last reservation (the word
/// still holds what it left there), nor between it and that one (each process notes the
/// last of its reservations that another's commit followed). Then the reservations after
/// it are all this process's, and its waiters move up as in-process. Otherwise every
/// waiter keeps its slot and the permits are not given back (nothing is admitted twice;
/// the rate loses them).
///
/// Another process of the segment's user can write the word: any value is a state (a
/// bucket emptied or filled early, never undefined behaviour), and a word that changes
/// under every compare-and-swap of a decision (a writer in a loop) ends it after
/// gcra_word::most_tries with error::shm_corrupt, never a hang. A decision on a segment
/// truncated under this process answers error::shm_truncated (see shm::segment).
///
/// Instants within burst x interval + slack of the int64 clock's beginning decide
/// conservatively (z is held in 64 bits, from INT64_MIN + 1 on); steady_clock and
/// tsc_clock never read there.
class shm_gcra : public basic_policy<shm_gcra, false> {
    friend class basic_policy<shm_gcra, false>;

public:
    /// This policy commits permits in the future: reserve() can grant a later slot.
    static constexpr bool reserves_ahead = true;

    /// The segment's kind: one GCRA word.
    static constexpr std::uint64_t kind = 1;

    /// Attaches to (or creates) the bucket of `where`. Throws system_error like
    /// policy::gcra for a bad configuration (error::invalid_rate, invalid_limit,
    /// invalid_duration), and like shm::segment (shm_invalid_name, shm_config_mismatch,
    /// shm_incompatible, shm_foreign, shm_permission, shm_lock_timeout, shm_truncated,
    /// shm_unavailable, invalid_option).
    shm_gcra(const shm::segment_options& where, sluice::rate r, std::uint64_t burst, std::chrono::nanoseconds slack = {})
        : step_(sluice::detail::gcra_step::make(r.interval().count(), burst, slack.count())),
          segment_(where, layout(step_)),
          word_(static_cast<std::atomic<std::int64_t>*>(segment_.payload()))
    {
    }

    /// The same on segment `name` with the default segment_options.
    shm_gcra(std::string_view name, sluice::rate r, std::uint64_t burst, std::chrono::nanoseconds slack = {})
        : shm_gcra(shm::segment_options{std::string(name)}, r, burst, slack)
    {
    }


    /// Commits n permits in the future when they become available within max_wait of now
    /// (after every reservation of every process so far). Otherwise consumes nothing and
    /// returns the predicted time with error::timed_out. `ahead` is ignored, as in
    /// policy::gcra.
    reservation reserve(std::uint64_t n, std::int64_t now, std::int64_t max_wait, std::uint64_t /*ahead*/ = 0) noexcept
    {
        if (n == 0) return sluice::detail::invalid_reservation(error::invalid_count);
        if (n > step_.burst) return sluice::detail::invalid_reservation(error::exceeds_limit);
        std::int64_t w = word_->load(std::memory_order_acquire);
        reservation r;
        for (int tries = 0; !word::reserve(step_, w, n, now, max_wait, r, holder_, [&](std::int64_t stored) {
                 return word_->compare_exchange_weak(w, stored, std::memory_order_acq_rel, std::memory_order_acquire);
             });) {
            if (++tries == word::most_tries) return sluice::detail::invalid_reservation(error::shm_corrupt);
        }
        if (segment_.truncated()) return sluice::detail::invalid_reservation(error::shm_truncated);
        return r;
    }

    /// Earliest time at which `ahead` permits and then n more could be granted if nothing
    /// else consumed (max_ns: never). Consumes nothing.
    std::int64_t predict(std::uint64_t n, std::int64_t now, std::uint64_t ahead = 0) const noexcept
    {
        std::uint64_t k;
        if (__builtin_add_overflow(ahead, n, &k) || segment_.truncated()) return sluice::detail::max_ns;
        return sluice::detail::sat_narrow(step_.next_z(z_of(word_->load(std::memory_order_acquire)), k, now));
    }

    /// Gives back n permits of this process's reservation number `which` (a cancelled
    /// waiter's: see last_reservation) when no reservation depends on it: nothing was
    /// committed after it by any other process; see the class comment. Returns
    /// how far z moved back, in ns: the waiters queued after the refunded one (of this
    /// process) may start that much earlier. Never fuller than a full bucket.
    std::int64_t refund(std::uint64_t n, std::int64_t now, std::uint64_t which) noexcept
    {
        return segment_.truncated() ? 0 : word::refund(step_, *word_, n, now, holder_, which);
    }

    /// The same for a reservation the caller cannot name (a blocked thread's): given back
    /// only while no other commit ever came between this process's reservations.
    std::int64_t refund(std::uint64_t n, std::int64_t now) noexcept { return refund(n, now, word::unnamed); }

    /// The number of this process's last reservation granted ahead (numbered from 1 in
    /// the order made; 0: none yet), what refund() is told.
    std::uint64_t last_reservation() const noexcept { return holder_.count.load(std::memory_order_relaxed); }

    /// The earliest instant from which, if nothing more is consumed, the bucket decides
    /// exactly as a new one.
    std::int64_t idle_at(std::int64_t /*now*/) const noexcept
    {
        return sluice::detail::sat_narrow(step_.idle_at(z_of(word_->load(std::memory_order_acquire))));
    }

    /// How long until the bucket is full again if nothing is taken (0 when it is).
    std::chrono::nanoseconds reset_after(std::int64_t now) const noexcept
    {
        return std::chrono::nanoseconds{step_.reset(z_of(word_->load(std::memory_order_acquire)), now)};
    }

    /// The rate the bucket refills at.
    sluice::rate rate() const noexcept { return sluice::rate::every(std::chrono::nanoseconds{step_.interval}); }
    /// The most permits the bucket holds.
    std::uint64_t burst() const noexcept { return step_.burst; }
    /// Nanoseconds between two permits: rate().interval().
    std::int64_t interval_ns() const noexcept { return step_.interval; }
    /// How far a caller late on its schedule may catch up (0 for a token bucket).
    std::chrono::nanoseconds slack() const noexcept { return std::chrono::nanoseconds{step_.slack}; }

    /// The raw state: the instant the bucket is empty (INT64_MIN for a new bucket).
    std::int64_t empty_at() const noexcept { return word_->load(std::memory_order_acquire); }

    /// The segment the state lives in.
    const shm::segment& segment() const noexcept { return segment_; }

private:
    using int128 = sluice::detail::int128;

    using word = shm::detail::gcra_word<sluice::detail::min_ns + 1>;

    // A new bucket's word: empty long enough ago to be full at every instant (policy::gcra's
    // -2^64). A stored z is never this: store_form keeps it above.
    static constexpr std::int64_t fresh = word::fresh;

    static shm::detail::segment_layout layout(const sluice::detail::gcra_step& s) noexcept
    {
        return {kind,
                {s.interval, static_cast<std::int64_t>(s.burst), s.slack, 0},
                sizeof(std::atomic<std::int64_t>),
                [](void* p, const shm::detail::segment_layout&) noexcept { ::new (p) std::atomic<std::int64_t>(fresh); }};
    }

    static int128 z_of(std::int64_t w) noexcept { return word::z_of(w); }
    static std::int64_t store_form(int128 z) noexcept { return word::store_form(z); }

    // Commits a stored word in place of w (a compare-and-swap that reloads w when it
    // fails); only pretends to when the decision does not consume.
    auto committer(std::int64_t& w, bool consume) noexcept
    {
        return [this, &w, consume](std::int64_t stored) {
            return !consume ||
                   word_->compare_exchange_weak(w, stored, std::memory_order_acq_rel, std::memory_order_acquire);
        };
    }

    // The common case inline (a valid count, the 64-bit steps, a commit that wins), every
    // other out of line, as policy::gcra does: inlined whole, the 128-bit steps and the
    // retry loop made the caller's loop too large for GCC to inline the check into it.
    [[gnu::always_inline]] decision decide(std::uint64_t n, std::int64_t now, bool consume) noexcept
    {
        decision d;
        std::int64_t w = word_->load(std::memory_order_acquire);
        // No truncation mark here: the memory that replaces a truncated mapping reads as a
        // word decide_fast never takes (see shm::segment), so a decision on it always goes
        // to decide_again, which reads the mark. The fast path stays as small as policy::gcra's.
        if (n != 0 && n <= step_.burst && word::decide_fast(step_, w, n, now, d, committer(w, consume)))
            return d;
        d = decide_again(n, now, consume).d;
        return d;
    }

    // Taking nothing by reference, so that the caller's decision stays in registers.
    [[gnu::noinline]] sluice::detail::slow_answer decide_again(std::uint64_t n, std::int64_t now, bool consume) noexcept
    {
        sluice::detail::slow_answer a;
        if (n == 0 || n > step_.burst) {
            a.d = sluice::detail::invalid_decision(n == 0 ? error::invalid_count : error::exceeds_limit);
            return a;
        }
        std::int64_t w = word_->load(std::memory_order_acquire);
        for (int tries = 0; !word::decide(step_, w, n, now, a.d, committer(w, consume));) {
            if (++tries == word::most_tries) {
                a.d = sluice::detail::invalid_decision(error::shm_corrupt);
                return a;
            }
        }
        if (segment_.truncated()) a.d = sluice::detail::invalid_decision(error::shm_truncated);
        return a;
    }

    sluice::detail::gcra_step step_;
    shm::segment segment_;
    std::atomic<std::int64_t>* word_;
    // This process's reservations, for the refund rule. Changed under the limiter's lock
    // (reserve and refund are called there).
    shm::detail::holder_state holder_;
};

} // namespace sluice::policy
