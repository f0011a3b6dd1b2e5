// The permits one process holds of one Redis token bucket key (leasing): a run of future
// slots reserved in one round trip, handed out no earlier than their slot times. Sans-io:
// every call takes `now` (the limiter's clock, ns) and returns what to do; the limiter
// holds the lock, sends the scripts and keeps one book per key.
#pragma once

#include <sluice/decision.hpp>
#include <sluice/detail/base/arith.hpp>
#include <sluice/redis/detail/store/verdict.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>

namespace sluice::redis::detail {

/// The fixed parameters of every book of one limiter.
struct lease_limits {
    std::int64_t spacing_ns;   // the limiter's interval: one slot per spacing (until a reply tells another)
    std::int64_t ttl_ns;       // how far ahead a run may reach, and how long a due slot is held
    std::uint64_t max_run;     // the most slots one round trip reserves (shared_options::lease_size)
};

/// Slots given back to Redis: the last `count` of a run, valid while the key's state is
/// still `state` (the refund script's compare-and-set).
struct lease_give_back {
    std::uint64_t count = 0;
    std::int64_t state = 0;
};

class lease_book {
public:
    enum class step {
        local,   // decided from the book: `d`
        fetch,   // this request makes the round trip, reserving `count` slots
    };

    struct take_result {
        step next = step::local;
        decision d;
        std::uint64_t count = 0;   // fetch: slots to reserve
        bool prefetch = false;     // local: the caller is also to reserve `count` more in the background
    };

    /// A request for n permits at `now`.
    take_result take(const lease_limits& lim, std::uint64_t n, std::int64_t now)
    {
        take_result r;
        expire(lim, now);
        note_demand(n, now);
        if (dues_.size() >= n) {
            take_locally(n, now, r.d);
            r.prefetch = claim_prefetch(lim, now);
            r.count = r.prefetch ? run_ : 0;
            return r;
        }
        if (now < retry_at_) {
            r.d.retry_after = std::chrono::nanoseconds{retry_at_ - now};
            return r;
        }
        if (fetching_) {
            // One reservation per key in flight at a time.
            r.d.retry_after = std::chrono::nanoseconds{spacing(lim)};
            return r;
        }
        fetching_ = true;
        r.next = step::fetch;
        r.count = std::max<std::uint64_t>(run_, n);
        return r;
    }

    /// The reply to a reservation made by a request for n (0: a background prefetch),
    /// received at `now`, `rtt_ns` after it was sent: the request's decision, and whether
    /// (prefetch, count) the caller is to reserve more in the background now. A grant of
    /// v.taken slots ends v.wait_us after the server's now; slot i of k is one spacing
    /// after slot i-1. Measured from the reply, every slot is due no earlier than on the
    /// server. `v` answers the reservation (detail::answers): at most the slots asked for,
    /// the last within lease_ttl.
    take_result fill(const lease_limits& lim, std::uint64_t n, const verdict& v, std::int64_t now, std::int64_t rtt_ns)
    {
        take_result r;
        r.d = record(lim, n, v, now, rtt_ns);
        r.prefetch = v.admitted && claim_prefetch(lim, now);
        r.count = r.prefetch ? run_ : 0;
        return r;
    }

    /// The round trip failed: nothing was reserved that we know of.
    void failed() noexcept { fetching_ = false; }

    /// Slots held and not expired at `now`.
    std::uint64_t held(const lease_limits& lim, std::int64_t now) const noexcept
    {
        return static_cast<std::uint64_t>(std::count_if(dues_.begin(), dues_.end(),
                                                         [&](std::int64_t due) { return due + lim.ttl_ns >= now; }));
    }

    /// On close: the slots still held of the last run go back (the refund can only
    /// succeed while no other reservation followed it; slots of earlier runs have other
    /// processes' runs after them, and moving the key's state back over those would hand
    /// their slots out twice); the book is empty afterwards.
    lease_give_back close(const lease_limits& lim, std::int64_t now)
    {
        expire(lim, now);
        lease_give_back g{std::min<std::uint64_t>(dues_.size(), last_run_), state_};
        dues_.clear();
        return g;
    }

    /// The current run length: slots the next reservation asks for.
    std::uint64_t run() const noexcept { return run_; }
    /// Slots dropped unused since the book was made.
    std::uint64_t expired() const noexcept { return expired_total_; }

private:
    // Takes the reply into the book; the decision of the request for n that made it.
    decision record(const lease_limits& lim, std::uint64_t n, const verdict& v, std::int64_t now, std::int64_t rtt_ns)
    {
        fetching_ = false;
        // Measured on the system clock, which may step during the round trip: a sample
        // below zero or beyond lease_ttl (after which no slot is worth holding) says nothing
        // more, and unbounded it overflowed the estimates built on it.
        rtt_ns = std::clamp<std::int64_t>(rtt_ns, 0, lim.ttl_ns);
        rtt_ns_ = rtt_ns_ == 0 ? rtt_ns : (7 * rtt_ns_ + rtt_ns) / 8;
        if (v.interval_us > 0)
            spacing_ns_ = v.interval_us * 1000;   // the key's configuration in force
        if (!v.admitted) {
            // Refused: even one slot would have been more than ttl ahead.
            retry_at_ = sluice::detail::sat_add(now, std::max(v.wait_us * 1000 - lim.ttl_ns, spacing(lim)));
            decision d = to_decision(v);
            d.retry_after = std::chrono::nanoseconds{retry_at_ - now};
            adapt(lim, now);
            return d;
        }
        const auto k = static_cast<std::uint64_t>(v.taken);
        note_contention(lim, v, k);
        // Each slot from the last one back, saturated: k spacings may reach past the int64
        // range (a long interval), and a slot is never due earlier than that.
        const std::int64_t last = sluice::detail::sat_add(now, v.wait_us * 1000);
        for (std::uint64_t i = 0; i < k; ++i) {
            std::int64_t due = sluice::detail::sat_sub(last, sluice::detail::sat_mul(k - 1 - i, spacing(lim)));
            dues_.push_back(std::max({due, now, dues_.empty() ? now : dues_.back()}));
        }
        // Where the run ends as the server counts: the server ran the script after the
        // request left, maybe long before its reply was read (a busy event loop): from
        // the request, less the round trip. Slots are handed out from the reply's
        // conservative times; the next run is reserved from this one, so that a process
        // that reads its replies late does not reserve late by as much, every run.
        reach_ = sluice::detail::sat_sub(last, rtt_ns);
        state_ = v.state;
        has_state_ = true;
        last_run_ = k;
        adapt(lim, now);
        decision d;
        if (n > 0) {
            expire(lim, now);
            if (dues_.size() >= n)
                take_locally(n, now, d);
            else
                d.retry_after = std::chrono::nanoseconds{spacing(lim)};
        }
        return d;
    }

    // One slot per interval of the configuration in force (set_rate may have changed it).
    std::int64_t spacing(const lease_limits& lim) const noexcept { return spacing_ns_ > 0 ? spacing_ns_ : lim.spacing_ns; }

    // A due slot held longer than ttl is dropped, never used late; it counts against the
    // run length (demand fell).
    void expire(const lease_limits& lim, std::int64_t now)
    {
        while (!dues_.empty() && dues_.front() + lim.ttl_ns < now) {
            dues_.pop_front();
            ++expired_;
            ++expired_total_;
        }
    }

    void take_locally(std::uint64_t n, std::int64_t now, decision& d)
    {
        std::int64_t due = dues_[n - 1];
        if (due <= now) {
            dues_.erase(dues_.begin(), dues_.begin() + static_cast<std::ptrdiff_t>(n));
            d.admitted = true;
            d.remaining = static_cast<std::uint64_t>(
                std::upper_bound(dues_.begin(), dues_.end(), now) - dues_.begin());
        } else {
            d.retry_after = std::chrono::nanoseconds{due - now};
        }
    }

    // The time between two requests, smoothed: a key asked for less often than slots
    // are held is not prefetched (the slot would expire unused). And the permits asked
    // for, granted or not: the process's demand, which sets the run length.
    void note_demand(std::uint64_t n, std::int64_t now) noexcept
    {
        asked_n_ = sluice::detail::sat_add(asked_n_, n);
        if (asked_) {
            std::int64_t gap = std::max<std::int64_t>(0, now - last_ask_);
            gap_ns_ = gap_ns_ < 0 ? gap : (7 * gap_ns_ + gap) / 8;
        }
        asked_ = true;
        last_ask_ = now;
    }

    // Reserve more while the slots held end within lead() of now, so that the next run
    // arrives before this one is used up.
    bool claim_prefetch(const lease_limits& lim, std::int64_t now)
    {
        if (fetching_ || now < retry_at_ || gap_ns_ < 0 || gap_ns_ * 2 > lim.ttl_ns)
            return false;
        std::int64_t frontier = dues_.empty() ? now : std::min(dues_.back(), reach_);
        if (frontier > now + lead(lim))
            return false;
        fetching_ = true;
        return true;
    }

    // Whether other processes reserve slots of the key too: this run starts in the future,
    // after slots that were not ours since our last run (an idle bucket's run starts now).
    void note_contention(const lease_limits& lim, const verdict& v, std::uint64_t k) noexcept
    {
        const std::int64_t iv_us = std::max<std::int64_t>(1, spacing(lim) / 1000);
        const std::int64_t before_first =
            sluice::detail::sat_sub(v.state, sluice::detail::sat_mul(k, iv_us));   // our run starts one slot after
        const std::int64_t first_wait = sluice::detail::sat_sub(v.wait_us, sluice::detail::sat_mul(k - 1, iv_us));
        contended_ = has_state_ && before_first > state_ && first_wait > 0;
    }

public:
    /// How far ahead of now the slots held reach before the next run is reserved. While
    /// other processes reserve too, the same for all of them: a process that reserved
    /// earlier than the others (its round trip, inflated by a busy event loop, looking
    /// longer) would take a larger share of the key. Alone, two round trips plus one
    /// spacing, so that the next run arrives before this one is used up. And while
    /// requests come more often than one a spacing (demand beyond the key's rate), at
    /// least 5 ms, a scheduler's time slice or two: a process (or a server) that is not
    /// running cannot reserve, and with a small burst a slot nobody reserved in time is
    /// lost to everyone.
    std::int64_t lead(const lease_limits& lim) const noexcept
    {
        bool hungry = gap_ns_ >= 0 && gap_ns_ < spacing(lim);
        if (contended_)
            return std::max<std::int64_t>(2 * spacing(lim), 5'000'000);
        std::int64_t l = 2 * rtt_ns_ + spacing(lim);
        return hungry ? std::max<std::int64_t>(l, 5'000'000) : l;
    }

    /// The most slots a run holds: lease_ttl / 8 of the key's time (at most lease_size).
    /// The same for every process of the key, whatever its round trip: processes whose
    /// demand exceeds what they get then each take one run of this length in turn, which
    /// gives equal shares; and the runs of all of them stay within lease_ttl.
    std::uint64_t longest_run(const lease_limits& lim) const noexcept
    {
        auto span_cap = static_cast<std::uint64_t>(std::max<std::int64_t>(1, run_span(lim) / spacing(lim)));
        return std::max<std::uint64_t>(1, std::min(lim.max_run, span_cap));
    }

private:
    static std::int64_t run_span(const lease_limits& lim) noexcept { return lim.ttl_ns / 8; }

    // The next run covers the permits this process asked for (granted or not: its
    // demand, not its share so far, which would feed back into itself) over
    // run_span, at most longest_run(); half as long after slots expired unused.
    void adapt(const lease_limits& lim, std::int64_t now) noexcept
    {
        const std::uint64_t longest = longest_run(lim);
        std::uint64_t want = run_;
        if (!filled_) {
            // No time measured yet: the permits asked for while the first run was on its way.
            filled_ = true;
            want = asked_n_;
            asked_n_ = 0;
            last_fill_ = now;
        } else if (now > last_fill_) {
            double sample = static_cast<double>(asked_n_) * 1e9 / static_cast<double>(now - last_fill_);
            demand_per_s_ = demand_per_s_ < 0 ? sample : 0.75 * demand_per_s_ + 0.25 * sample;
            asked_n_ = 0;
            last_fill_ = now;
        }
        if (demand_per_s_ >= 0) {
            double cover = demand_per_s_ * static_cast<double>(run_span(lim)) / 1e9 + 0.999;
            want = cover < static_cast<double>(longest) ? static_cast<std::uint64_t>(cover) : longest;
        }
        if (expired_ > 0)
            want = std::min(want, run_) / 2;
        run_ = std::clamp<std::uint64_t>(want, 1, longest);
        expired_ = 0;
    }

    std::deque<std::int64_t> dues_;   // when each held slot may be used, in order
    std::int64_t retry_at_ = 0;       // refused locally until then
    std::int64_t state_ = 0;          // the key's state after our last reservation
    std::int64_t reach_ = 0;          // the last slot held as the server counts (see record)
    std::int64_t rtt_ns_ = 0;
    std::int64_t spacing_ns_ = 0;     // from the last reply; 0: the limiter's own
    std::int64_t last_ask_ = 0;
    std::int64_t gap_ns_ = -1;        // no estimate yet
    std::int64_t last_fill_ = 0;
    double demand_per_s_ = -1;        // permits asked for a second, smoothed; no estimate yet
    std::uint64_t asked_n_ = 0;       // permits asked for since the last fill
    std::uint64_t run_ = 1;
    std::uint64_t last_run_ = 0;      // slots the last reservation took (the tail of dues_)
    std::uint64_t expired_ = 0;
    std::uint64_t expired_total_ = 0;
    bool fetching_ = false;
    bool contended_ = false;          // the last run came after other processes' slots
    bool has_state_ = false;
    bool asked_ = false;
    bool filled_ = false;
};

} // namespace sluice::redis::detail
