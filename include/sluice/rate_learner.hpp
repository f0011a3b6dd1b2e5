// The sans-io learner of a server's limit from what it admits and refuses: the pace a
// client keeps with one host (or one API quota) that limits it, announced or not. No I/O,
// no clock: every call takes `now`, so that it is tested step by step against simulated
// servers (tests/test_rate_learner.cpp).
#pragma once

#include <sluice/detail/policy/windowed_min.hpp>
#include <sluice/error.hpp>
#include <sluice/rate.hpp>

#include <boost/system/system_error.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

/// Settings of a rate_learner. Out-of-range values throw system_error(error::invalid_option)
/// at construction: nothing is clamped silently.
struct rate_learner_options {
    /// The pace before anything is known. Within [floor, ceiling].
    sluice::rate initial = sluice::rate::per_second(10);
    /// Never slower than this (a server may still pause the client: see max_pause).
    sluice::rate floor = sluice::rate::per_second(0.05);
    /// Never faster than this: the user's limit. Nothing a server says raises it.
    sluice::rate ceiling = sluice::rate::per_second(1000);
    /// Slow start: growth of the pace per second of sending at it, until the first refusal
    /// (ln 3: it triples). > 0.
    double growth = 1.0986122886681098;
    /// The limit is located when its bounds are this close: hi - lo <= precision x lo.
    /// In (0, 1).
    double precision = 0.05;
    /// Once located, the pace settles this fraction of the limit's lower bound. In (0, 1].
    double margin = 0.99;
    /// Longest measurement after a refusal: the pace settles at the lower bound then,
    /// however wide the bounds still are (a slow limit takes long to locate). > 0.
    std::chrono::nanoseconds longest_descent = std::chrono::milliseconds(2500);
    /// Settled on loose bounds (after longest_descent), the pace climbs toward the upper
    /// bound with this time constant, to locate the limit from below. > 0.
    std::chrono::nanoseconds approach = std::chrono::seconds(1);
    /// Sending this long at the settled pace without refusal starts a slow probe upward,
    /// so that a limit that rose is found. > 0.
    std::chrono::nanoseconds hold = std::chrono::seconds(60);
    /// While probing: growth of the pace per second of sending. >= 0.
    double probe = 0.005;
    /// Longest pause honoured: a longer Retry-After, or an announced reset further away,
    /// is cut to this and counted (stats().pauses_cut). > 0.
    std::chrono::nanoseconds max_pause = std::chrono::minutes(5);
    /// Refusals of requests sent over this long with nothing admitted among them (and at
    /// least three) say that the server is not metering a rate but refusing everything:
    /// every send pauses, until its Retry-After or after a doubling backoff. > 0.
    std::chrono::nanoseconds block = std::chrono::milliseconds(250);
    /// First backoff of such a block without Retry-After; it doubles on each block in a
    /// row (up to max_pause). > 0.
    std::chrono::nanoseconds block_backoff = std::chrono::milliseconds(500);
    /// How finely the server tells time (>= 0): one on a millisecond clock (nginx) may see
    /// two requests sent 49.2 ms apart 50 ms apart. Widens the bounds by that much.
    std::chrono::nanoseconds resolution{0};
};

/// Counters of a rate_learner.
struct rate_learner_stats {
    std::uint64_t sent = 0;       ///< Requests sent (on_sent).
    std::uint64_t admitted = 0;   ///< Answers that were not refusals.
    std::uint64_t refused = 0;    ///< Refusals (429, or 503 from a rate limit).
    /// Requests that got no answer (a connection error, a timeout): no evidence either way.
    std::uint64_t failed = 0;
    /// Limits located (a measurement after a refusal that ended in a settled pace).
    std::uint64_t located = 0;
    /// Pauses of every send: blocks, and quotas announced as used up.
    std::uint64_t pauses = 0;
    /// Pauses or Retry-After delays cut to max_pause.
    std::uint64_t pauses_cut = 0;
    /// Announcements ignored as absurd (negative, NaN or infinite values).
    std::uint64_t bad_announcements = 0;
};

/// The learner.
///
/// A server that meters a rate L with a burst b (a token bucket, GCRA, nginx's limit_req,
/// refusing or delaying) admits, between two refusals of requests sent at t1 and t2, L x
/// (t2 - t1) requests within one, whatever its burst and whatever the client sent in
/// between, as long as the client kept it busy (never left it idle long enough to refill):
/// at each refusal its bucket is empty. So the count admitted between two refusals bounds
/// L from both sides, (k - 1) / (t2 - t1) < L < (k + 1) / (t2 - t1), and more tightly the
/// longer apart they are; the lower bound holds even when the client paused. A fixed or
/// sliding window refuses at each exhaustion: counted from the first refusal after an
/// admission to another such one, the same count says what it admits per unit of time.
///  - Slow start: from `initial`, the pace grows by `growth` per second of sending at it,
///    until the first refusal, or the ceiling.
///  - After a refusal (the descent): the pace is the tightest upper bound so far, at first
///    the pace the refused request was sent at: above L, so the server keeps refusing now
///    and then (admitting exactly L meanwhile, its bucket empty), each refusal narrowing
///    the bounds; no steps down, no guess.
///  - Located: once hi - lo <= precision x lo (or after longest_descent, or a quiet spell
///    at the upper bound), the pace goes straight to lo x margin, below L, and stays.
///  - Held there for `hold` without refusal, the pace probes upward by `probe` per second;
///    a refusal then starts a new descent from the rate refused.
/// The burst the server allows is estimated too (burst(), a lower bound): what was admitted
/// before the first refusal beyond L x the time it took.
///
/// Retry-After is not a command to stop everything: it bounds when the refused request may
/// be retried (advice::retry_at, at most max_pause away) and nothing else, unless the
/// server shows that it means it: refusals with nothing admitted among them for `block`
/// (and three at least) pause every send until the latest Retry-After (or a doubling
/// backoff without one).
///
/// Announced quotas (RateLimit / RateLimit-Policy, x-ratelimit-*, anthropic-ratelimit-*:
/// any limit / remaining / reset, for requests or tokens) bound the pace from above: it never
/// goes faster than any announces, and a quota announced used up pauses every send until
/// its reset (at most max_pause).
///
/// Latency samples (each answer's, from its send) are kept: the least over a long window
/// (the unloaded latency) and the mean of the recent ones, for a caller that steers by
/// latency too.
///
/// Times are nanoseconds since an epoch of the caller's choosing (a steady clock's). Not
/// thread-safe.
class rate_learner {
public:
    /// Instants since the caller's epoch, and durations.
    using duration = std::chrono::nanoseconds;

    /// What the learner needs of one request: keep it with the request and hand it back
    /// with its answer.
    struct ticket {
        std::uint64_t seq = 0;   ///< Its place in the order of sending.
        duration at{0};          ///< When it was sent.
        /// The pace when it was sent, per second.
        double pace = 0;
    };

    /// How a request was answered.
    enum class outcome {
        admitted,   ///< served (any answer but a refusal)
        refused,    ///< 429, or 503 from a rate limit
        failed,     ///< no answer: no evidence about the limit
    };

    /// One answer.
    struct answer {
        outcome what = outcome::admitted;   ///< Admitted, refused or failed.
        /// A refusal's Retry-After, parsed (delay-seconds or an HTTP-date, as a delay from
        /// now). Negative: as zero.
        std::optional<duration> retry_after{};
        /// Units this request took of the announced quotas that count other units than
        /// requests (tokens): the mean cost turns their remaining into requests. >= 0.
        double cost = 1;
    };

    /// What to do after one answer.
    struct advice {
        /// The pace moved since the last advice (on_sent may move it too): apply rate().
        bool rate_changed = false;
        /// A refused request may be retried from then on (now, or its Retry-After).
        duration retry_at{0};
        /// Every send waits until paused_until() (a block, or a used-up quota).
        bool paused = false;
    };

    /// A quota the server announced. Absent values say nothing.
    struct quota {
        /// Its name (a policy's, "requests", "tokens"): one entry per name; the tightest
        /// binds.
        std::string_view name;
        /// The quota per window (RateLimit-Policy q, x-ratelimit-limit).
        std::optional<double> limit{};
        std::optional<duration> window{};      ///< The window of `limit` (RateLimit-Policy w).
        /// What is left of it now.
        std::optional<double> remaining{};
        std::optional<duration> reset{};       ///< When it is full again (or resets), from now.
        /// Requests count 1 unit of this quota; false: they count answer::cost (tokens).
        bool per_request = true;
    };

    /// Throws system_error(error::invalid_option) for options out of range.
    explicit rate_learner(rate_learner_options o) : o_(std::move(o))
    {
        const double lo = o_.floor.per_second(), hi = o_.ceiling.per_second(), init = o_.initial.per_second();
        auto bad = [](bool b) {
            if (b) throw boost::system::system_error(make_error_code(error::invalid_option));
        };
        bad(lo > hi || init < lo || init > hi);
        bad(!(o_.growth > 0) || !(o_.precision > 0 && o_.precision < 1) || !(o_.margin > 0 && o_.margin <= 1) ||
            !(o_.probe >= 0) || !std::isfinite(o_.growth) || !std::isfinite(o_.probe));
        bad(o_.longest_descent <= duration::zero() || o_.approach <= duration::zero() || o_.hold <= duration::zero() || o_.max_pause <= duration::zero() ||
            o_.block <= duration::zero() || o_.block_backoff <= duration::zero() || o_.resolution < duration::zero());
        floor_ = lo;
        ceiling_ = hi;
        pace_ = advised_ = init;
    }

    /// A request leaves now.
    ticket on_sent(duration now)
    {
        ++stats_.sent;
        ticket t{++seq_, now, pace_};
        if (phase_ == phase::slow_start && early_.size() < 4096) early_.push_back(now);
        if (last_sent_ != duration::min() && now > last_sent_) {
            const double gap = seconds(now - last_sent_);
            // Sending at the pace (not after an idle spell): the time counts as tested. An
            // idle spell in a measurement lets the server's bucket refill: the count
            // admitted then bounds the limit from below only. (A few intervals late is
            // scheduling, worth a request or two of the count at most.)
            if (gap > 4 / pace_ && phase_ == phase::descent && !suspect_) busy_ = false;
            if (gap <= 1.25 / pace_) {
                if (phase_ == phase::slow_start) {
                    set_pace(pace_ * std::exp(o_.growth * gap));
                } else if (phase_ == phase::settled && pace_ < target_ * 0.999) {
                    // Settled on loose bounds: toward the upper one, no faster than the slow
                    // start, to locate the limit from below.
                    set_pace(std::min(pace_ + (target_ - pace_) * (1 - std::exp(-gap / seconds(o_.approach))),
                                      pace_ * std::exp(o_.growth * gap)));
                } else if (phase_ == phase::settled) {
                    held_ += gap;
                    if (held_ >= seconds(o_.hold)) set_pace(pace_ * std::exp(o_.probe * gap));
                }
            }
        }
        last_sent_ = std::max(last_sent_, now);
        return t;
    }

    /// Its answer, received now.
    advice on_answer(duration now, const ticket& t, const answer& a)
    {
        advice out;
        out.retry_at = now;
        if (t.seq == 0 || t.seq > seq_) return out;   // not one of ours
        latency(now, now - t.at);
        if (a.cost >= 0 && std::isfinite(a.cost)) cost_ += 0.1 * (a.cost - cost_);
        switch (a.what) {
        case outcome::failed:
            ++stats_.failed;
            if (t.seq > anchor_seq_) ++not_admitted_;
            break;
        case outcome::admitted:
            ++stats_.admitted;
            admitted(now, t);
            break;
        case outcome::refused:
            ++stats_.refused;
            refused(now, t, a, out);
            break;
        }
        out.rate_changed = pace_ != advised_;
        advised_ = pace_;
        return out;
    }

    /// A quota the server announced now: the pace never goes above what it allows, and a
    /// quota used up pauses every send until its reset.
    advice announce(duration now, const quota& q)
    {
        advice out;
        out.retry_at = now;
        auto finite = [](std::optional<double> v) { return !v || (std::isfinite(*v) && *v >= 0); };
        auto positive = [](std::optional<duration> d) { return !d || *d >= duration::zero(); };
        if (!finite(q.limit) || !finite(q.remaining) || !positive(q.window) || !positive(q.reset)) {
            ++stats_.bad_announcements;
            return out;
        }
        const double unit = q.per_request ? 1.0 : std::max(cost_, 1e-9);
        double bound = std::numeric_limits<double>::infinity();
        if (q.limit && q.window && *q.window > duration::zero()) bound = std::min(bound, *q.limit / unit / seconds(*q.window));
        if (q.remaining && q.reset) {
            if (*q.remaining < unit) {
                out.paused = pause(now, *q.reset);
            } else if (*q.reset > duration::zero()) {
                bound = std::min(bound, *q.remaining / unit / seconds(*q.reset));
            }
        }
        auto& e = announced(q.name);
        e.bound = bound;
        e.at = now;
        cap_ = std::numeric_limits<double>::infinity();
        for (auto& x : quotas_) cap_ = std::min(cap_, x.bound);
        set_pace(pace_);
        out.rate_changed = pace_ != advised_;
        advised_ = pace_;
        return out;
    }

    /// Follows a pace decided elsewhere (a controller of RateLimit fields): what was
    /// learnt from refusals no longer holds.
    void follow(double per_second)
    {
        phase_ = phase::settled;
        suspect_ = false;
        held_ = 0;
        lo_ = 0;
        hi_ = std::numeric_limits<double>::infinity();
        anchor_seq_ = seq_;
        set_pace(per_second);
        target_ = base_ = pace_;
        mark_pace(last_sent_);
    }

    /// A new ceiling (a robots.txt Crawl-delay, say), within the floor: the pace drops to it.
    void set_ceiling(double per_second)
    {
        if (!(per_second > 0) || !std::isfinite(per_second)) return;
        ceiling_ = std::max(std::min(per_second, o_.ceiling.per_second()), floor_);
        set_pace(pace_);
    }

    /// The pace to send at, per second.
    double rate() const noexcept { return pace_; }
    /// No send before this (a block or a quota used up); duration::min(): none.
    duration paused_until() const noexcept { return paused_until_; }
    /// Still in slow start: nothing refused yet.
    bool slow_start() const noexcept { return phase_ == phase::slow_start; }
    /// Measuring after a refusal, above the limit.
    bool measuring() const noexcept { return phase_ == phase::descent; }
    /// Bounds of the limit from the last measurement: lower (0: none) and upper
    /// (infinity: none).
    double limit_low() const noexcept { return lo_; }
    double limit_high() const noexcept { return hi_; }   ///< See limit_low().
    /// The limit's best estimate (the middle of its bounds, or the lower bound alone; 0:
    /// none).
    double limit() const noexcept { return std::isfinite(hi_) && lo_ > 0 ? (lo_ + hi_) / 2 : lo_; }
    /// The burst the server allows beyond its rate, at least (0: not known).
    double burst() const noexcept { return burst_; }
    /// The tightest bound the server announced, per second (infinity: none).
    double announced() const noexcept { return cap_; }
    /// The least latency of the answers of the last 30 to 60 seconds (zero before any):
    /// under a steady load the least of the last few answers is the loaded latency, and a
    /// window that long keeps what an answer alone took, as BBR keeps its least round
    /// trip for a window.
    duration unloaded_latency() const noexcept { return recent_n_ ? duration(unloaded_.get()) : duration::zero(); }
    /// The mean latency of the recent answers (zero before any).
    duration mean_latency() const noexcept { return duration(static_cast<std::int64_t>(latency_mean_)); }
    /// What happened so far.
    const rate_learner_stats& stats() const noexcept { return stats_; }
    /// The options it was made with.
    const rate_learner_options& options() const noexcept { return o_; }

private:
    enum class phase { slow_start, descent, settled };

    struct announced_quota {
        std::string name;
        double bound = std::numeric_limits<double>::infinity();
        duration at{0};
    };

    static double seconds(duration d) { return std::chrono::duration<double>(d).count(); }
    static duration to_duration(double s)
    {
        return s >= 1e9 ? duration::max() : duration(static_cast<std::int64_t>(s * 1e9));
    }

    void set_pace(double r) { pace_ = std::clamp(std::min(r, cap_), floor_, ceiling_); }

    announced_quota& announced(std::string_view name)
    {
        for (auto& q : quotas_)
            if (q.name == name) return q;
        // A server naming a new quota on every answer must not grow this without bound.
        if (quotas_.size() >= 16)
            quotas_.erase(std::min_element(quotas_.begin(), quotas_.end(),
                                           [](const auto& a, const auto& b) { return a.at < b.at; }));
        quotas_.push_back(announced_quota{std::string(name)});
        return quotas_.back();
    }

    duration bounded(duration d)
    {
        if (d < duration::zero()) return duration::zero();
        if (d > o_.max_pause) {
            ++stats_.pauses_cut;
            return o_.max_pause;
        }
        return d;
    }

    bool pause(duration now, duration d)
    {
        d = bounded(d);
        if (d == duration::zero()) return false;
        const duration until = d > duration::max() - now ? duration::max() : now + d;
        if (until <= paused_until_) return false;
        paused_until_ = until;
        ++stats_.pauses;
        // Idle meanwhile: the server's bucket refills, the bounds' "busy" premise is gone.
        busy_ = false;
        return true;
    }

    void latency(duration now, duration d)
    {
        if (d < duration::zero()) return;
        ++recent_n_;
        unloaded_.add(now.count(), d.count());
        latency_mean_ += (static_cast<double>(d.count()) - latency_mean_) / static_cast<double>(std::min<std::uint64_t>(recent_n_, 32));
    }

    void admitted(duration now, const ticket& t)
    {
        (void)now;
        last_admitted_seq_ = std::max(last_admitted_seq_, t.seq);
        streak_ = 0;
        blocks_ = 0;
        const duration since = std::max(pace_at_, last_refused_at_);
        if (phase_ != phase::descent || t.seq <= pace_seq_ || t.at - since < quiet_span()) return;
        // Nothing refused of what was sent at this pace for a while: a server without a
        // burst refuses one request of two at any pace above its limit, so this one is
        // under it. (A window, or a bucket with a burst refilled while the pace was lower,
        // stays quiet longer above its limit: for them only the counts tell.)
        if (suspect_) {
            settle(lone_, true);   // a lone refusal (jitter): as before it
            return;
        }
        if (!trusted_ && single_runs_ >= 2 && paused_until_ <= since) {
            // One admitted of two, and quiet under that pace long enough that a server with
            // a burst at the rate admitted would have refused with runs: no burst.
            lo_ = std::max(lo_, pace_);
            quiet_ = true;
        } else if ((last_refused_at_ >= pace_at_ || set_on_refusal_) && paused_until_ <= since) {
            // The server's bucket was empty when this pace began (it was refusing): above
            // its limit by d, it refuses again within 1 / d.
            lo_ = std::max(lo_, pace_ - 1 / seconds(t.at - since));
        }
        // The server may have idled meanwhile (the pace may be under its limit): counts
        // from the anchor no longer bound it from above.
        busy_ = false;
        decide(t.at, false);
    }

    void refused(duration now, const ticket& t, const answer& a, advice& out)
    {
        if (a.retry_after) out.retry_at = now + bounded(*a.retry_after);
        // A run of refusals with nothing admitted: a block, not a rate.
        if (streak_ == 0 || t.at < streak_from_) streak_from_ = t.at;
        ++streak_;
        if (streak_ >= 3 && t.at - streak_from_ >= o_.block) {
            duration d = a.retry_after ? *a.retry_after : o_.block_backoff * (std::int64_t{1} << std::min(blocks_, 30u));
            if (pause(now, d)) {
                out.paused = true;
                ++blocks_;
                streak_ = 0;
            }
        }
        // An episode starts with a refusal after something was admitted: for a window, its
        // exhaustion; those after it in a row count, but measure nothing. Two admitted in a
        // row between refusals show a server with a burst: one without (a request refused
        // unless 1 / L after the last one) admits one of two at any pace between L and 2L,
        // and counts between its refusals then say nothing of L from above.
        // (In the order sent: a server that delays what it admits answers refusals first.)
        std::uint64_t before = 0;
        for (auto r : refused_log_)
            if (r < t.seq) before = std::max(before, r);
        const bool episode = before + 1 != t.seq;
        if (episode && before > 0 && t.seq > anchor_seq_ && before >= anchor_seq_) {
            if (t.seq - before - 1 >= 2) trusted_ = true;
            else ++single_runs_;
        }
        last_refused_seq_ = std::max(last_refused_seq_, t.seq);
        last_refused_at_ = std::max(last_refused_at_, t.at);
        refused_log_.push_back(t.seq);
        if (refused_log_.size() > 64) refused_log_.erase(refused_log_.begin());
        switch (phase_) {
        case phase::slow_start:
            begin_descent(t, 0);
            return;
        case phase::settled:
            if (t.seq <= pace_seq_) return;   // sent before it settled: the same overshoot
            // Above where it settled (climbing, probing): a new upper bound. At it: perhaps
            // a lone one (jitter), and the pace holds until another follows.
            begin_descent(t, t.pace > base_ * 1.001 ? 0 : pace_);
            return;
        case phase::descent:
            break;
        }
        if (t.seq <= anchor_seq_) return;
        // Not a lone one: the limit went below the pace it had settled at.
        if (suspect_) {
            suspect_ = false;
            lo_ = 0;
        }
        // Refused at the pace: above L. (Without a burst, a pace proven quiet can still meet
        // a refusal of jitter, two requests seen closer than sent: that bounds nothing.)
        if (t.seq > pace_seq_) hi_ = std::min(hi_, quiet_ ? std::max(t.pace, lo_ * (1 + o_.precision)) : t.pace);
        if (episode) {
            measure(t);
            ++not_admitted_;
        } else {
            ++not_admitted_;
        }
        decide(t.at, true);
    }

    void anchor(const ticket& t)
    {
        anchor_seq_ = t.seq;
        anchor_at_ = t.at;
        not_admitted_ = 0;
        busy_ = true;
    }

    void begin_descent(const ticket& t, double lone)
    {
        if (phase_ == phase::slow_start) {
            first_refusal_at_ = t.at;
            early_.resize(std::min<std::size_t>(early_.size(), t.seq - 1));   // those admitted before it
        }
        phase_ = phase::descent;
        descent_at_ = t.at;
        lone_ = lone;
        suspect_ = lone > 0;
        trusted_ = quiet_ = false;
        single_runs_ = 0;
        first_refused_ = t.pace;
        anchor(t);
        hi_ = t.pace;   // what was learnt below it still holds (see decide)
        lo_ = std::min(lo_, hi_);
        if (suspect_) mark_pace(t.at);
        else decide(t.at, true);
    }

    // An episode's refusal, the server busy since the anchor: the count admitted since
    // bounds the limit.
    void measure(const ticket& t)
    {
        const double span = seconds(t.at - anchor_at_);
        if (span <= 0) return;
        const double k = static_cast<double>(t.seq - anchor_seq_ - 1) - static_cast<double>(not_admitted_);
        const double res = seconds(o_.resolution);
        // Admitting less than the lower bound learnt before this descent began: the limit
        // went down since, and that bound with it.
        if (busy_ && k >= 8 && span > res && (k + 1) / (span - res) < lo_) lo_ = 0;
        lo_ = std::max(lo_, (k - 1) / (span + res));
        if (trusted_ && busy_ && span > res) hi_ = std::min(hi_, (k + 1) / (span - res));
    }

    // The pace in a descent, from the bounds: the upper one while counts measure the limit
    // from above (the server admits exactly L meanwhile); else halfway between them, each
    // step either refused (a new upper bound) or quiet (a new lower one).
    void decide(duration at, bool on_refusal)
    {
        if (lo_ >= hi_) lo_ = hi_ / (1 + o_.precision);   // the limit moved: the refusals are the news
        if (lo_ > 0 && hi_ - lo_ <= o_.precision * lo_) {
            settle(lo_ * o_.margin, true);
            return;
        }
        if (at - descent_at_ >= o_.longest_descent && lo_ > 0) {
            settle(lo_ * o_.margin, false);
            return;
        }
        // Before either shows, the pace stays at the rate refused (above L: the counts
        // measure); once they say something, halfway down to them, a quarter above them at
        // least: a server with a burst shows it there by runs, one without by silence.
        const double admitted = static_cast<double>(seq_ - anchor_seq_) - static_cast<double>(not_admitted_);
        double next = hi_;
        if (trusted_ && busy_) next = hi_;
        else if (quiet_) next = (lo_ + hi_) / 2;
        else if (!trusted_ && admitted >= 8 && lo_ > 0) next = std::min(hi_, std::max(1.25 * lo_, (lo_ + hi_) / 2));
        if (next != pace_ || pace_seq_ == 0) {
            set_pace(next);
            mark_pace(at);
            set_on_refusal_ = on_refusal;
        }
    }

    void mark_pace(duration at)
    {
        pace_seq_ = seq_;
        pace_at_ = at;
    }

    // How long a pace must go unrefused to count as at most one refusal above the limit
    // in that time: a precision's worth.
    duration quiet_span() const
    {
        // Without a burst, a pace above the limit is refused at once (one request of two):
        // a few in a row admitted say enough.
        if (quiet_) return to_duration(std::max(0.2, 4 / pace_));
        if (!trusted_ && single_runs_ >= 2)
            return to_duration(pace_ > lo_ ? std::max(0.2, std::min(2.0, 3 / (pace_ - lo_))) : 1.0);
        return to_duration(std::max(1.0, std::min(2.0, 1 / (o_.precision * pace_))));
    }

    // Located: stays there (until `hold` has passed); else climbs toward the upper bound.
    void settle(double r, bool located)
    {
        ++stats_.located;
        phase_ = phase::settled;
        suspect_ = false;
        held_ = 0;
        target_ = located || !std::isfinite(hi_) ? r : std::max(r, (lo_ + hi_) / 2 * o_.margin);
        if (!early_.empty() && lo_ > 0) {
            // What the slow start got admitted beyond L in the end, from any instant on: the
            // bucket was full then (at least), empty at the refusal.
            double most = 0;
            for (std::size_t i = 0; i < early_.size(); ++i)
                most = std::max(most, static_cast<double>(early_.size() - i) - limit() * seconds(first_refusal_at_ - early_[i]));
            burst_ = std::max(0.0, most - 1);
            early_.clear();
            early_.shrink_to_fit();
        }
        set_pace(r);
        base_ = pace_;
        mark_pace(last_sent_);
    }

    rate_learner_options o_;
    double floor_ = 0, ceiling_ = 0;
    double cap_ = std::numeric_limits<double>::infinity();
    double pace_ = 0;
    double advised_ = 0;   // the pace the last advice reported
    phase phase_ = phase::slow_start;
    std::uint64_t seq_ = 0;
    duration last_sent_ = duration::min();
    // The descent: the bounds, and the count from the refusal it began with (the anchor).
    duration descent_at_{0};
    double lo_ = 0, hi_ = std::numeric_limits<double>::infinity();
    std::uint64_t anchor_seq_ = 0;
    duration anchor_at_{0};
    std::uint64_t not_admitted_ = 0;   // refused or failed, sent after the anchor
    bool busy_ = true;                 // no idle spell (a pause, a quiet pace) since the anchor
    bool trusted_ = false;             // two admitted in a row between refusals: a burst >= 1
    unsigned single_runs_ = 0;         // one admitted between refusals, under the first rate refused
    double first_refused_ = 0;
    bool set_on_refusal_ = false;      // the pace was set at a refusal: the server's bucket empty         // the pace of the descent's first refusal
    double base_ = 0;                  // the pace it settled at
    bool quiet_ = false;               // a pace went unrefused in this descent: bisect
    bool suspect_ = false;             // one refusal at a settled pace: perhaps a lone one
    double lone_ = 0;                  // ... that pace
    std::uint64_t pace_seq_ = 0;       // the last request sent before the pace was last set
    duration pace_at_{0};              // and when
    std::uint64_t last_admitted_seq_ = 0, last_refused_seq_ = 0;
    duration last_refused_at_ = duration::min();
    std::vector<std::uint64_t> refused_log_;
    double held_ = 0;     // seconds sent at the settled pace without refusal
    double target_ = 0;   // settled: where the pace climbs to (itself when located)
    // Blocks: refusals in a row.
    std::uint64_t streak_ = 0;
    duration streak_from_{0};
    unsigned blocks_ = 0;
    duration paused_until_ = duration::min();
    // The burst: what was admitted before the first refusal, when.
    std::vector<duration> early_;
    duration first_refusal_at_ = duration::min();
    double burst_ = 0;
    // Announced quotas.
    std::vector<announced_quota> quotas_;
    double cost_ = 1;
    // Latency.
    std::uint64_t recent_n_ = 0;
    detail::windowed_min unloaded_{30'000'000'000};   // 30 s spans
    double latency_mean_ = 0;
    rate_learner_stats stats_;
};

} // namespace sluice
