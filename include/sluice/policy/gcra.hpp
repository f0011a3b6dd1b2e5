// GCRA: the token bucket and the leaky bucket as one algorithm, on one atomic word.
#pragma once

#include <sluice/decision.hpp>
#include <sluice/detail/base/arith.hpp>
#include <sluice/detail/policy/gcra_step.hpp>
#include <sluice/policy/basic_policy.hpp>
#include <sluice/rate.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <utility>

namespace sluice::policy {

/// Generic cell rate algorithm. The whole state is the instant `z` at which the bucket is
/// (or was) empty, in integer nanoseconds, in one atomic int64. At `now` the bucket holds
/// min(burst, (now - z) / interval) permits, and consuming n moves z forward by
/// n * interval, so a decision is one compare-and-swap and never uses floating point.
///
/// A token bucket is gcra(rate, burst); a leaky bucket is gcra(rate, 1, slack): requests
/// spaced exactly one interval apart, and `slack` lets a caller that comes late catch up
/// on its schedule by at most that much (a burst of slack / interval permits). Slack is
/// credit for a late caller, never capacity: a bucket back from idleness grants its burst
/// and no more, also after set_rate(), set_burst() or set_slack().
///
/// Every instant of the int64 clock is valid, and decisions there are exact (intermediates
/// in 128 bits). z itself needs more than 64 bits: a bucket used within burst x interval
/// after INT64_MIN was empty before INT64_MIN, and a reservation far ahead lies up to
/// INT64_MAX. So z is held relative to a base, 0 or -2^63, published with the
/// configuration; the base flips (under the configuration's sequence lock, see below) only
/// when z crosses between the two halves of its range. A new bucket starts at -2^64, empty
/// long enough ago to be full at every instant. A clock that steps backwards never admits
/// more: z never moves back except through refund().
///
/// Thread-safe and lock-free for decisions, except a decision that flips the base, which
/// takes the sequence lock and retries if anything changed. set_rate(), set_burst() and
/// set_slack() publish the configuration and rewrite z through a sequence lock (writers
/// take it by setting its odd bit), so a decision sees either the old or the new
/// configuration, never a mix, and one taken with the old configuration does not commit on
/// the rewritten state (its compare-and-swap fails). The exception is a change that leaves
/// z as it was: a decision racing with it then counts as taken just before it (exactly so
/// for set_burst and set_slack; for set_rate its permits keep the old interval, off by at
/// most n x the change of interval).
///
/// Two cache lines: the configuration (read by every decision, written by the setters) on
/// one, z (written by every grant) alone on the other, so that threads deciding at once
/// contend only for z, as they would for a bare atomic word. Keyed limiters keep one word
/// per key (detail::compact_state) and a whole policy only for a key that waits.
class gcra : public basic_policy<gcra, false> {
    friend class basic_policy<gcra, false>;

public:
    /// This policy commits permits in the future: reserve() can grant a later slot.
    static constexpr bool reserves_ahead = true;

    /// Throws system_error(error::invalid_limit) when burst is 0 or burst * interval
    /// exceeds the int64 nanosecond range (292 years), and error::invalid_duration for a
    /// negative slack or one that takes burst * interval + slack beyond that range.
    gcra(sluice::rate r, std::uint64_t burst, std::chrono::nanoseconds slack = {})
    {
        store(config::make(r.interval().count(), burst, slack.count()));
    }


    /// Commits n permits in the future when they become available within max_wait of now
    /// (FIFO: each reservation queues behind the previous ones). Otherwise consumes
    /// nothing and returns the predicted time with error::timed_out.
    /// `ahead` is ignored: reservations already queued are part of the state.
    reservation reserve(std::uint64_t n, std::int64_t now, std::int64_t max_wait,
                        std::uint64_t /*ahead*/ = 0) noexcept
    {
        for (;;) {
            snap s = snapshot();
            if (n == 0) return detail::invalid_reservation(error::invalid_count);
            if (n > s.c.burst) return detail::invalid_reservation(error::exceeds_limit);
            int128 nz = s.c.next_z(s.z(), n, now);
            reservation r;
            // Ready only at or past the clock's end: never.
            if (nz >= detail::max_ns || nz - now > max_wait) {
                r.at = detail::sat_narrow(nz);
                r.error = make_error_code(error::timed_out);
                return r;
            }
            if (commit(s, nz)) {
                r.admitted = true;
                // Granted from the bucket: usable now, not before.
                r.at = nz < now ? now : static_cast<std::int64_t>(nz);
                return r;
            }
        }
    }

    /// Earliest time at which `ahead` permits and then n more could be granted if nothing
    /// else consumed (max_ns: never). Consumes nothing. Reservations already committed are
    /// part of the state; `ahead` counts requests queued elsewhere (a composite's queue).
    std::int64_t predict(std::uint64_t n, std::int64_t now, std::uint64_t ahead = 0) const noexcept
    {
        std::uint64_t k;
        if (__builtin_add_overflow(ahead, n, &k))
            return detail::max_ns;
        snap s = snapshot();
        return detail::sat_narrow(s.c.next_z(s.z(), k, now));
    }

    /// Gives back n permits consumed earlier (a cancelled reservation). Returns how far z
    /// moved back, in ns (saturated): reservations queued after the refunded one may start
    /// that much earlier. The bucket never ends up fuller than its burst.
    std::int64_t refund(std::uint64_t n, std::int64_t now) noexcept
    {
        for (;;) {
            snap s = snapshot();
            int128 z = s.z();
            int128 nz = s.c.refunded(z, n, now);
            if (nz >= z) return 0;
            if (commit(s, nz)) return detail::sat_narrow(z - nz);
        }
    }

    /// Settles `cost` permits admitted earlier with their `actual` cost. The state is z, the
    /// instant the bucket is empty, and an admission of k moved it by k intervals, so:
    /// lower gives back (cost - actual) intervals, refund(cost - actual, now), never making
    /// the bucket fuller than full at `now`; higher moves z forward by (actual - cost)
    /// intervals with no check of the burst (a debt: later callers wait until it is repaid,
    /// and nothing admitted is taken back), saturating at the end of the clock. Either way
    /// the state is, as far as any later decision can tell, the one an admission of
    /// `actual` at the same instant would have left, when nothing else was admitted since
    /// (idle time between is fine). Two cases are not exact: with admissions since, the
    /// difference is the same number of permits taken or given back now (an admission
    /// since that found the bucket full would have found it as full with less taken
    /// before: the bucket forgets, and so does the refund); and with a slack, a grant that
    /// restarted the schedule after idleness, settled to 0, leaves the schedule restarted.
    /// `at` is not needed: z carries the time. Returns how far z moved back (what later
    /// reservations may move up by), 0 for a debt. Lock-free.
    std::int64_t settle(std::uint64_t cost, std::uint64_t actual, std::int64_t /*at*/, std::int64_t now) noexcept
    {
        if (actual < cost) return refund(cost - actual, now);
        if (actual > cost) charge(actual - cost);
        return 0;
    }

    /// Changes the rate. What was consumed stays consumed, counted in permits: the permits
    /// available at `now` are kept (capped by the burst), the catch-up of a caller late on
    /// its schedule is kept (capped by the slack), and a debt (reservations in the future)
    /// stays a debt of the same number of permits, repaid at the new rate. That is, z - now
    /// is rescaled by new interval / old interval (rounded towards now, to whole ns). An
    /// idle bucket has no catch-up: it stays idle, and decides as a new bucket at the new
    /// rate. Returns the factor as {new interval, old interval}. Throws like the
    /// constructor, and then changes nothing.
    std::pair<std::int64_t, std::int64_t> set_rate(sluice::rate r, std::int64_t now)
    {
        write_guard guard(*this);
        config old = current();
        config c = config::make(r.interval().count(), old.burst, old.slack);
        rewrite(c, now, old);
        return {c.interval, old.interval};
    }

    /// Changes the burst. The permits available at `now` are kept, capped by the new burst
    /// (a full bucket of 10 that grows to 20 holds 10 now and refills to 20; one that
    /// shrinks to 5 decides as a new bucket of 5); a debt, and the catch-up of a late
    /// caller, are kept. Throws like the constructor, and then changes nothing.
    void set_burst(std::uint64_t burst, std::int64_t now)
    {
        write_guard guard(*this);
        config old = current();
        rewrite(config::make(old.interval, burst, old.slack), now, old);
    }

    /// Changes the slack (how far a late caller may catch up), keeping the permits
    /// available at `now` and a debt like set_burst, and the catch-up of a caller already
    /// late, capped by the new slack. A larger slack gives an idle bucket nothing: it stays
    /// idle. Throws like the constructor, and then changes nothing.
    void set_slack(std::chrono::nanoseconds slack, std::int64_t now)
    {
        write_guard guard(*this);
        config old = current();
        rewrite(config::make(old.interval, old.burst, slack.count()), now, old);
    }

    /// The earliest instant from which, if nothing more is consumed, this bucket decides
    /// exactly as a new one (full, nothing reserved); at or before `now` when it already does.
    std::int64_t idle_at(std::int64_t /*now*/) const noexcept
    {
        snap s = snapshot();
        return detail::sat_narrow(s.c.idle_at(s.z()));
    }

    /// How long until the bucket is full again if nothing is taken (0 when it is).
    std::chrono::nanoseconds reset_after(std::int64_t now) const noexcept
    {
        snap s = snapshot();
        return std::chrono::nanoseconds{s.c.reset(s.z(), now)};
    }

    /// The rate the bucket refills at.
    sluice::rate rate() const noexcept { return sluice::rate::every(std::chrono::nanoseconds{interval_.load(std::memory_order_relaxed)}); }
    /// The most permits the bucket holds.
    std::uint64_t burst() const noexcept { return burst_.load(std::memory_order_relaxed); }
    /// Nanoseconds between two permits: rate().interval().
    std::int64_t interval_ns() const noexcept { return interval_.load(std::memory_order_relaxed); }
    /// How far a caller late on its schedule may catch up (0 for a token bucket).
    std::chrono::nanoseconds slack() const noexcept { return std::chrono::nanoseconds{slack_.load(std::memory_order_relaxed)}; }

    /// The raw state, for tests and the async layer: the instant the bucket is empty
    /// (INT64_MIN for any instant at or before it).
    std::int64_t empty_at() const noexcept { return detail::sat_narrow(snapshot().z()); }

private:
    using int128 = detail::int128;

    // The configuration and GCRA's arithmetic on z (shared with the keyed store's compact
    // state); this class holds z and publishes the configuration.
    using config = detail::gcra_step;

    // Always inlined, and with no loop: one attempt, on the snapshot read once, decides
    // away from the ends of the clock (every step in 64 bits) unless the snapshot raced
    // with a writer or the compare-and-swap with another decision; decide_again() takes
    // every other case. Out of line, a decision fills every field through memory (as GCC
    // 12 leaves it under a limiter's few layers); in a loop, GCC keeps the address of
    // each configuration word in a register, or on the stack when they run out, and the
    // attempt loads each word through it.
    [[gnu::always_inline]] decision decide(std::uint64_t n, std::int64_t now, bool consume) noexcept
    {
        decision d;
        snap s = read();
        if (!(s.seq & 1) && n != 0 && n <= s.c.burst && in_64_bits(s, now) &&
            decide_in<std::int64_t>(d, s, s.word, n, now, consume))
            return d;
        d = decide_again(n, now, consume).d;
        return d;
    }

    // Every case decide() leaves, until one attempt stands. Out of line, so that the hot
    // path keeps a small frame, and taking nothing by reference: handing it the caller's
    // snapshot or decision would make the caller keep them in memory, and store them
    // there on every decision (its answer is wrapped for the same reason).
    [[gnu::noinline]] detail::slow_answer decide_again(std::uint64_t n, std::int64_t now, bool consume) noexcept
    {
        detail::slow_answer a;
        for (;;) {
            snap s = snapshot();
            if (n == 0 || n > s.c.burst) {
                a.d = detail::invalid_decision(n == 0 ? error::invalid_count : error::exceeds_limit);
                return a;
            }
            if (in_64_bits(s, now)) {
                if (decide_in<std::int64_t>(a.d, s, s.word, n, now, consume)) return a;
            } else if (decide_in<int128>(a.d, s, s.z(), n, now, consume)) {
                return a;
            }
        }
    }

    // Moves z forward by k intervals, a debt taken whatever the burst (settle).
    void charge(std::uint64_t k) noexcept
    {
        for (;;) {
            snap s = snapshot();
            int128 add = int128(k) * s.c.interval;
            int128 nz = s.z() + add;
            if (nz > detail::max_ns) nz = detail::max_ns;
            if (nz <= s.z() || commit(s, nz)) return;
        }
    }

    // The state: z = base + the stored word. Two bases cover every z a bucket can reach,
    // [-2^64, 2^63): 0 holds [-2^63, 2^63), -2^63 holds [-2^64, 0).
    static constexpr std::int64_t low_base = detail::min_ns;

    static bool fits(int128 z, std::int64_t base) noexcept
    {
        int128 w = z - base;
        return w >= detail::min_ns && w <= detail::max_ns;
    }

    static std::int64_t base_for(int128 z, std::int64_t base) noexcept
    {
        return fits(z, base) ? base : (z < 0 ? low_base : 0);
    }

    struct snap {
        config c;
        std::int64_t base;
        std::int64_t word;
        std::uint64_t seq;
        int128 z() const noexcept { return int128(word) + base; }
    };

    // |x| < 2^62 and tau < 2^61: z, now - tau, + slack and + k * interval (k <= burst, so
    // at most tau) then all stay within (-2^63, 2^63).
    static constexpr std::int64_t small_tau = std::int64_t{1} << 61;

    static bool near_zero(std::int64_t x) noexcept
    {
        return static_cast<std::uint64_t>(x) + (std::uint64_t{1} << 62) < (std::uint64_t{1} << 63);
    }

    // Away from the ends of the clock every step fits 64 bits: the same decision, without
    // 128-bit arithmetic.
    static bool in_64_bits(const snap& s, std::int64_t now) noexcept
    {
        return s.base == 0 && near_zero(now) && near_zero(s.word) && s.c.tau < small_tau;
    }

    // Decides on the state read in s, with z = s.z() in I; false when the commit lost a race.
    template <class I>
    [[gnu::always_inline]] bool decide_in(decision& d, const snap& s, I z, std::uint64_t n, std::int64_t now,
                                          bool consume) noexcept
    {
        I nz = s.c.next_z(z, n, now);
        if (nz > now) {
            s.c.refuse(d, z, nz, now);
            return true;
        }
        if (consume && !commit(s, nz)) return false;
        s.c.admit(d, z, nz, n, now);
        return true;
    }

    // Commits nz on the state read in s. False when the state changed: decide again.
    [[gnu::always_inline]] bool commit(const snap& s, int128 nz) noexcept
    {
        std::int64_t expected = s.word;
        if (fits(nz, s.base))
            return z_.compare_exchange_weak(expected, static_cast<std::int64_t>(nz - s.base), std::memory_order_acq_rel,
                                            std::memory_order_acquire);
        return commit_flip(s.seq, s.base, s.word, nz);
    }

    // The state crosses to the other half of its range: take the sequence lock from the
    // very sequence number of the snapshot (so neither configuration nor base changed),
    // and publish the word and the base together. Out of line, and given the snapshot's
    // words by value (by reference, the caller would store them on every decision).
    [[gnu::noinline]] bool commit_flip(std::uint64_t seq, std::int64_t old_base, std::int64_t expected,
                                       int128 nz) noexcept
    {
        if (!seq_.compare_exchange_strong(seq, seq + 1, std::memory_order_acquire, std::memory_order_relaxed))
            return false;
        std::int64_t base = base_for(nz, old_base);
        bool ok = z_.compare_exchange_strong(expected, static_cast<std::int64_t>(nz - base), std::memory_order_acq_rel,
                                             std::memory_order_acquire);
        if (ok) base_.store(base, std::memory_order_release);
        seq_.store(seq + 2, std::memory_order_release);
        return ok;
    }

    // Under the write guard: stores configuration c and carries z over to it from `old`
    // (gcra_step::carry). Decisions that read the old state commit before (and the carry
    // sees their result) or fail.
    void rewrite(const config& c, std::int64_t now, const config& old) noexcept
    {
        std::int64_t base = base_.load(std::memory_order_relaxed);
        std::int64_t word = z_.load(std::memory_order_acquire);
        for (;;) {
            int128 nz = c.carry(int128(word) + base, now, old);
            std::int64_t nb = base_for(nz, base);
            if (z_.compare_exchange_weak(word, static_cast<std::int64_t>(nz - nb), std::memory_order_acq_rel,
                                         std::memory_order_acquire)) {
                base_.store(nb, std::memory_order_release);
                break;
            }
        }
        store(c);
    }

    // Configuration and state read consistently: a sequence lock whose readers never write.
    // The configuration words are stored with release and loaded with acquire (plain moves on
    // x86), so a reader that sees any word of a new configuration also sees the odd sequence
    // number stored before it, and retries. No fences: ThreadSanitizer models this exactly.
    snap snapshot() const noexcept
    {
        for (;;) {
            snap s = read();
            if (!(s.seq & 1)) return s;
        }
    }

    // One attempt, whose sequence number is odd when a writer held the lock or came in
    // between (and the words may be a mix).
    [[gnu::always_inline]] snap read() const noexcept
    {
        std::uint64_t seq = seq_.load(std::memory_order_acquire);
        config c{interval_.load(std::memory_order_acquire), tau_.load(std::memory_order_acquire),
                 burst_.load(std::memory_order_acquire), slack_.load(std::memory_order_acquire),
                 recip_.load(std::memory_order_acquire)};
        std::int64_t base = base_.load(std::memory_order_acquire);
        std::int64_t word = z_.load(std::memory_order_acquire);
        if (seq_.load(std::memory_order_relaxed) != seq) seq |= 1;
        return {c, base, word, seq};
    }

    config current() const noexcept
    {
        return {interval_.load(std::memory_order_relaxed), tau_.load(std::memory_order_relaxed),
                burst_.load(std::memory_order_relaxed), slack_.load(std::memory_order_relaxed),
                recip_.load(std::memory_order_relaxed)};
    }

    // A writer owns the sequence while it is odd: it makes it odd with a CAS from an even
    // value (waiting out another writer), and the release stores of store() publish that
    // odd number together with each configuration word. Readers retry while it is odd, also
    // while config::make validates (and maybe throws): a short wait, no wrong decision.
    class write_guard {
    public:
        explicit write_guard(gcra& g) noexcept : g_(g)
        {
            for (;;) {
                std::uint64_t s = g_.seq_.load(std::memory_order_relaxed);
                if (!(s & 1) && g_.seq_.compare_exchange_weak(s, s + 1, std::memory_order_acquire, std::memory_order_relaxed)) {
                    start_ = s;
                    return;
                }
            }
        }
        write_guard(const write_guard&) = delete;
        write_guard& operator=(const write_guard&) = delete;

        ~write_guard()
        {
            // Even again, and different from before: readers that started earlier retry.
            g_.seq_.store(start_ + 2, std::memory_order_release);
        }

    private:
        gcra& g_;
        std::uint64_t start_ = 0;
    };

    void store(const config& c) noexcept
    {
        interval_.store(c.interval, std::memory_order_release);
        tau_.store(c.tau, std::memory_order_release);
        burst_.store(c.burst, std::memory_order_release);
        slack_.store(c.slack, std::memory_order_release);
        recip_.store(c.recip, std::memory_order_release);
    }

    // The configuration and the base, which every decision reads and only the setters (and
    // a flip of the base) write, on a cache line apart from z, which every grant writes:
    // threads deciding at once then share this line without misses, and the line they
    // contend for holds z alone, loaded once before the compare-and-swap as in the least a
    // one-word limiter does.
    std::atomic<std::uint64_t> seq_{0};
    std::atomic<std::int64_t> base_{low_base};
    std::atomic<std::int64_t> interval_{1};
    std::atomic<std::int64_t> tau_{1};
    std::atomic<std::uint64_t> burst_{1};
    std::atomic<std::int64_t> slack_{0};
    std::atomic<std::uint64_t> recip_{config::reciprocal(1)};
    // A new bucket: z = -2^64, full at every instant.
    alignas(64) std::atomic<std::int64_t> z_{detail::min_ns};
};

} // namespace sluice::policy
