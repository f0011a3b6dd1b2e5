// The pace a client keeps with one server that refuses (429 or 503) but does not say its
// limit: learnt from which requests were refused, at what rate they were sent. Sans-io: no
// clock, no timer; every call takes `now`, so that tests drive it against a simulated
// server (test_pace_learner.cpp).
//
// A server's limit L is learnt from both sides. A refused request was sent at a rate above
// L (hi); an accepted one, 1 / (the time since the last accepted one was sent), at a rate L
// allows (lo): two accepted in a row at the pace prove the pace, and a server that refuses
// every other request of a client sending at twice its limit admits them one 1 / L apart,
// so the spacing of the admitted requests around a refusal says where L is.
//  - Slow start: while nothing was refused, the pace grows by `growth` per second of sending
//    (tripling per second by default) from `initial` up to `ceiling`, so that the first
//    refusal comes just above L and lo, the last rate accepted, is just under it.
//  - After a refusal: when lo and hi are close (hi <= lo x (1 + bracket)) the pace settles
//    at min(lo, hi) x margin, a little under what the server accepted; otherwise it restarts
//    from lo x margin (hi / 2 when nothing was accepted yet: the first requests refused at
//    once) and climbs toward hi x margin with the time constant `approach`, to find a
//    closer lo on the way. It never goes above the lowest rate refused since, but for the
//    probe below: no rate is tried twice without a reason to think it might now pass.
//  - Held there without refusal for `hold` of sending, the pace rises by `probe` per second,
//    so that a server whose limit went up is found again (one refusal per cycle).
// Answers to requests sent before the pace was last cut do not cut it again (they were sent
// at the old pace: the same overshoot), but those sent after the refused request still say
// what the server admits, and the pace is decided again from them: a client at twice the
// limit, four requests in flight, learns from the spacing of those admitted that L is half
// its rate, not from the refusal alone that L is below it.
// Requests sent after an idle spell teach nothing about the pace (their rate is not the pace's).
//
// Why not multiplicative decrease alone (AIMD): against a server that pauses its clients
// after each refusal (Retry-After: 1), every refusal costs a second, and AIMD meets one per
// cycle for ever, overshooting after each pause; a server that says nothing about its limit
// still tells it by the rates it refuses and accepts.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>

namespace examples {

struct pace_learner_options {
    /// Never faster than this (requests per second): the user's limit. > 0.
    double ceiling = 20;
    /// The pace before anything is known; in [floor, ceiling].
    double initial = 20;
    /// Never slower than this. > 0.
    double floor = 0.05;
    /// Settle this fraction under the rate the server was seen to accept. In (0, 1).
    double margin = 0.97;
    /// lo and hi this close (hi <= lo x (1 + bracket)) locate the limit. > 0.
    double bracket = 0.1;
    /// Slow start: growth of the pace per second of sending (ln 3: triples). > 0. Faster
    /// finds the limit sooner but locates it less closely: the pace grows by growth / L
    /// between two requests at the limit L (5.5 % per request by default).
    double growth = 1.0986122886681098;
    /// Time constant of the climb toward hi x margin. > 0.
    std::chrono::nanoseconds approach = std::chrono::seconds(1);
    /// Sending this long at the settled pace without refusal starts probing above it. > 0.
    std::chrono::nanoseconds hold = std::chrono::seconds(60);
    /// While probing, growth of the pace per second of sending. >= 0.
    double probe = 0.005;
    /// How finely the server may tell time (>= 0): one that counts whole milliseconds (nginx)
    /// may accept two requests it saw 50 ms apart that were sent 49.1 ms apart, so an
    /// accepted gap proves 1 / (gap + resolution) only. 0: the gaps are taken as measured.
    std::chrono::nanoseconds resolution{0};
};

class pace_learner {
public:
    using duration = std::chrono::nanoseconds;   // instants: since the caller's epoch

    /// What the learner needs to remember of one request: keep it with the request and
    /// hand it back with its answer.
    struct sent {
        duration at{0};
        /// The rate it was sent at: the pace, or less after a longer gap.
        double rate = 0;
        /// Sent at the pace (within a quarter of an interval), not after an idle spell.
        bool busy = false;
        /// Sent well (15 %) faster than the pace, at about the pace before the last cut:
        /// scheduled at that older, faster pace (a permit granted before the cut). Its answer
        /// is evidence about the server, not about the pace, and its rate is its gap's.
        bool early = false;
    };

    /// Throws std::invalid_argument for options out of range.
    explicit pace_learner(const pace_learner_options& o) : o_(o), pace_(o.initial), target_(o.ceiling)
    {
        if (!(o.floor > 0) || !(o.ceiling >= o.floor) || !(o.initial >= o.floor && o.initial <= o.ceiling) ||
            !(o.margin > 0 && o.margin < 1) || !(o.bracket > 0) || !(o.growth > 0) || o.approach <= duration::zero() ||
            o.hold <= duration::zero() || !(o.probe >= 0) || o.resolution < duration::zero())
            throw std::invalid_argument("pace_learner: options out of range");
    }

    /// A request leaves now.
    sent on_sent(duration now)
    {
        sent s;
        s.at = now;
        s.rate = pace_;
        if (last_sent_ != duration::min() && now > last_sent_) {
            // The gap was scheduled at the pace of then, or of now if it moved since.
            const double gap = seconds(now - last_sent_);
            s.rate = std::min(pace_, 1 / gap);
            s.busy = gap <= 1.25 / std::min(pace_, pace_at_last_sent_);
            // Early: well over the pace, at about the pace before the last cut. (A short gap
            // otherwise is jitter, and counts at the pace.)
            s.early = 1 / gap > 1.15 * pace_ && 1 / gap >= 0.75 * pace_before_cut_;
            if (s.early) s.rate = 1 / gap;
        }
        last_sent_ = std::max(last_sent_, now);
        pace_at_last_sent_ = pace_;
        return s;
    }

    /// Its answer: refused (429, 503) or not. Returns true when the pace changed.
    bool on_answer(duration now, const sent& s, bool refused)
    {
        const double before = pace_;
        if (s.at < cut_at_ || s.early) {
            // Sent at an older pace: no growth, no new cut (it is the same overshoot); but
            // one sent after the refused request still says what the server admits.
            if (s.at <= evidence_from_) return false;
            const double lo = lo_, hi = hi_;
            const bool guessed = guessed_;
            if (refused) hi_ = std::min(hi_, s.rate);
            else admitted(s);
            if (lo_ != lo || hi_ != hi) {
                decide();
                // What was accepted raises the pace, or replaces a guess (hi / 2); it does
                // not undo a pace that rests on better evidence (a lo that was reset at the cut).
                if (hi_ == hi && !guessed && pace_ < before) pace_ = std::min(before, target_);
            }
            return pace_ != before;
        }
        if (refused) {
            ++refusals_;
            hi_ = std::min(hi_, s.rate);
            pace_before_cut_ = pace_;
            decide();
            cut_at_ = now;
            evidence_from_ = s.at;
            // What was accepted below the rate refused still holds; at or above it, it was
            // not sustainable after all (the server's limit went down, or it was luck).
            if (lo_ >= hi_) lo_ = 0;
            held_ = 0;
        } else {
            admitted(s);
            if (s.busy) grow(std::min(1 / s.rate, 1.25 / pace_), s.rate);
        }
        return pace_ != before;
    }

    /// Follows a rate decided elsewhere (a server's RateLimit fields): what was learnt
    /// from refusals no longer holds.
    void follow(double rate)
    {
        pace_ = target_ = clamp(rate);
        hi_ = std::numeric_limits<double>::infinity();
        lo_ = held_ = 0;
        slow_start_ = false;
    }

    /// A new ceiling (a robots.txt Crawl-delay, say); the pace drops to it if above.
    void set_ceiling(double c)
    {
        o_.ceiling = std::max(c, o_.floor);
        pace_ = clamp(pace_);
        target_ = clamp(target_);
    }

    /// The pace to send at, per second.
    double rate() const noexcept { return pace_; }
    /// The lowest rate refused since the last probe began (infinity: none yet).
    double refused_at() const noexcept { return hi_; }
    /// The highest rate seen accepted, since a refusal last came at or under it (0: none).
    double accepted_at() const noexcept { return lo_; }
    /// Still in slow start (nothing refused yet).
    bool slow_start() const noexcept { return slow_start_ && hi_ == std::numeric_limits<double>::infinity(); }
    std::uint64_t refusals() const noexcept { return refusals_; }
    const pace_learner_options& options() const noexcept { return o_; }

private:
    // An accepted request: the rate since the last accepted one was sent is one the server
    // allows (at most the pace it was sent at: a shorter gap is jitter), when both were sent
    // at the pace: after an idle spell, or across one, the gap is not the server's doing.
    void admitted(const sent& s)
    {
        if (s.at <= last_admitted_) return;   // answered out of order: the later one counts
        if (s.busy && last_admitted_busy_) {
            const double r = std::min(s.rate, 1 / seconds(s.at - last_admitted_));
            lo_ = std::max(lo_, 1 / (1 / r + seconds(o_.resolution)));
        }
        last_admitted_ = s.at;
        last_admitted_busy_ = s.busy;
    }

    // After a refusal, or evidence of one: settle under what was accepted when it is close
    // to what was refused, else climb toward the refused rate from what was accepted.
    void decide()
    {
        if (hi_ == std::numeric_limits<double>::infinity()) return;
        // lo is what was accepted (since a refusal last came at or under it); at or above
        // hi it was not sustainable after all, and hi is the better bound.
        const double safe = lo_ > 0 ? std::min(lo_, hi_) : 0;
        guessed_ = safe == 0;
        if (safe > 0 && hi_ <= safe * (1 + o_.bracket)) {
            target_ = pace_ = clamp(safe * o_.margin);
        } else {
            // Far apart: climb from what was proven (or from hi / 2 when nothing was)
            // toward hi x margin, to find a closer lo on the way.
            target_ = clamp(hi_ * o_.margin);
            pace_ = clamp(std::min(safe > 0 ? safe * o_.margin : hi_ / 2, target_));
        }
    }

    static double seconds(duration d) { return std::chrono::duration<double>(d).count(); }
    double clamp(double r) const { return std::clamp(r, o_.floor, o_.ceiling); }

    // dt seconds of sending at the pace went by without refusal, the last request sent at
    // `tested` per second.
    void grow(double dt, double tested)
    {
        if (hi_ == std::numeric_limits<double>::infinity()) {
            // Requests queued for a permit keep the pace they queued at: the pace must not run
            // far ahead of the rates tested, or the first refusal would say little.
            if (slow_start_) pace_ = clamp(std::min(pace_, 1.25 * tested) * std::exp(o_.growth * dt));
            return;
        }
        if (pace_ < target_ * 0.999) {
            // Toward the target, no faster than the slow start: the steps near the limit
            // are what locates it, should it be refused on the way.
            pace_ = clamp(std::min(pace_ + (target_ - pace_) * (1 - std::exp(-dt / seconds(o_.approach))),
                                   pace_ * std::exp(o_.growth * dt)));
            return;
        }
        held_ += dt;
        if (held_ >= seconds(o_.hold)) {
            const double f = std::exp(o_.probe * dt);
            target_ = clamp(target_ * f);
            pace_ = target_;
            hi_ *= f;
        }
    }

    pace_learner_options o_;
    double pace_;
    double target_;
    double hi_ = std::numeric_limits<double>::infinity();
    double lo_ = 0;
    duration last_admitted_ = duration::min();   // when the last accepted request was sent
    bool last_admitted_busy_ = false;            // and whether it was sent at the pace
    duration evidence_from_ = duration::min();   // when the request refused at the last cut was sent
    double held_ = 0;   // seconds of sending at the target since the last cut
    bool slow_start_ = true;
    duration cut_at_ = duration::min();
    duration last_sent_ = duration::min();
    double pace_at_last_sent_ = 0;
    bool guessed_ = false;   // the pace after the last cut is hi / 2: nothing was accepted
    double pace_before_cut_ = std::numeric_limits<double>::infinity();   // no cut yet: no send is early
    std::uint64_t refusals_ = 0;
};

} // namespace examples
