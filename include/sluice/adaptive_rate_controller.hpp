// The sans-io core of sluice::adaptive_rate: turns what a server says in its responses
// (status, RateLimit / RateLimit-Policy, Retry-After) into the sluice::rate a client should send
// at, and into pauses. No I/O and no clock: every call takes `now`, so that its behaviour
// is tested by simulation against simulated servers (tests/test_adaptive_rate.cpp).
#pragma once

#include <sluice/error.hpp>
#include <sluice/limiter_stats.hpp>
#include <sluice/http/ratelimit_fields.hpp>
#include <sluice/http/retry_after.hpp>
#include <sluice/rate.hpp>

#include <boost/system/system_error.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

/// Settings of an adaptive rate. Out-of-range values throw system_error(error::
/// invalid_option) at construction: nothing is clamped silently.
struct adaptive_rate_options {
    /// The rate before the server has said anything. Within [floor, ceiling].
    sluice::rate initial = sluice::rate::per_second(10);
    /// The rate never goes below floor, whatever the server says (a server may pause the
    /// client with Retry-After, though).
    sluice::rate floor = sluice::rate::per_second(1);
    /// Nor above ceiling: a server's RateLimit fields cannot make the client faster than
    /// this (draft-ietf-httpapi-ratelimit-headers-11, section 8.5.1).
    sluice::rate ceiling = sluice::rate::per_second(1000);
    /// Longest pause honoured for one Retry-After (or exhausted window); a longer one is
    /// cut to this and counted in stats().pauses_cut, so that a hostile value cannot stop
    /// the client for ever. > 0.
    std::chrono::nanoseconds max_pause = std::chrono::minutes(5);
    /// Pause after a 429 or 503 that carries no usable Retry-After. Zero (the default): no
    /// pause, the rate alone slows down. >= 0.
    std::chrono::nanoseconds refusal_pause{0};
    /// Without usable RateLimit fields (AIMD): the rate is multiplied by this on a refusal
    /// (429 or 503), at most once per decrease_holdoff. In (0, 1).
    double decrease = 0.7;
    /// ... and grows by this fraction of the rate before the last decrease per second
    /// without refusal (of the current rate before any decrease). In (0, 1].
    double increase = 0.05;
    /// Refusals within this time of a decrease are answers to requests sent before it.
    std::chrono::nanoseconds decrease_holdoff = std::chrono::milliseconds(200);
    /// Follow only the policy of this name; empty: every policy, the most restrictive binds.
    std::string policy;
    /// The extension parameter of RateLimit-Policy that carries a token bucket's burst
    /// (sluice's example server sends it); absent, the capacity is learnt from `r`.
    std::string burst_parameter = "sluice-burst";
};

/// One response, as the controller sees it: the status and the parsed fields.
struct server_response {
    /// The HTTP status code; 429 and 503 are refusals.
    unsigned status = 200;
    /// The parsed RateLimit-Policy field (empty when absent or malformed).
    std::span<const http::quota_policy> policies{};
    /// The parsed RateLimit field (empty when absent or malformed).
    std::span<const http::service_limit> limits{};
    /// The delay of Retry-After (see http::retry_after::delay_from), if present and valid.
    std::optional<std::chrono::nanoseconds> retry_after{};
};

/// The raw field values of one response (each field's lines joined with ","; empty when
/// absent), for on_response(const http_response&, ...), which parses them.
struct http_response {
    /// The HTTP status code; 429 and 503 are refusals.
    unsigned status = 200;
    /// The RateLimit-Policy field's value.
    std::string_view ratelimit_policy{};
    /// The RateLimit field's value.
    std::string_view ratelimit{};
    /// The Retry-After field's value.
    std::string_view retry_after{};
};

/// What one response changed.
struct adaptive_rate_feedback {
    /// The rate moved by more than 2 % (or reached a bound): apply rate() to the limiter.
    bool rate_changed = false;
    /// A pause started or was extended: no request until paused_until().
    bool paused = false;
    /// Why RateLimit-Policy was ignored as malformed, as the draft requires (an error of
    /// http::error_category()); empty when it was not.
    boost::system::error_code policy_error;
    /// Why RateLimit was ignored as malformed; empty when it was not.
    boost::system::error_code ratelimit_error;
    /// Why Retry-After was ignored as malformed; empty when it was not.
    boost::system::error_code retry_after_error;
};

/// The controller.
///
/// With RateLimit fields (draft-ietf-httpapi-ratelimit-headers-11), per policy:
///  - a token bucket or any quota that refills gradually: a proportional-integral law on
///    the share of the quota a request found, f = r / capacity (counting the request's own
///    unit after a success). The rate is g * q/w * (1 + k (f - 0.5)): up to 1.5x the
///    policy's rate when the quota is full, 0.5x when it is empty, so that the quota
///    settles half full and absorbs the jitter of the client's own sending; k < 1 when the
///    capacity holds less than 100 ms at that rate, since the news of the fill is then
///    stale by a round trip (k = capacity / (rate x 100 ms), at least 0.05). The gain g corrects the policy's
///    rate, which whole-second windows make coarse and a server may misstate: it grows by
///    e^((f - 0.5) dt) while the quota stays above half full, shrinks below, and loses a
///    quarter on each refusal. The capacity is the policy's burst parameter, or the
///    largest r + 1 seen, at most q. Without a policy, r / t.
///  - a fixed window (seen as r jumping up by at least half the capacity between two
///    responses): the remaining quota is spread over the time left until the next reset,
///    estimated from when the jump was seen and the window w; when it is used up (r = 0)
///    the client pauses until then.
///  - several policies: each gives a rate and the lowest binds.
///  - a server whose fields contradict its refusals (three refusals within 10 s while it
///    said quota was left) is not believed for a minute: AIMD instead.
/// Without usable fields: AIMD on refusals (see adaptive_rate_options).
/// A 429 or 503 with Retry-After pauses the client for that long; Retry-After takes
/// precedence over the RateLimit fields, as the draft says.
///
/// Times are nanoseconds since an epoch of the caller's choosing (a steady clock's).
/// Not thread-safe: sluice::adaptive_rate serialises its calls.
class adaptive_rate_controller {
public:
    /// Times and instants: nanoseconds since the caller's epoch.
    using duration = std::chrono::nanoseconds;


    /// Throws system_error(error::invalid_option) for options out of range (see
    /// adaptive_rate_options).
    explicit adaptive_rate_controller(adaptive_rate_options opts) : opts_(std::move(opts))
    {
        const double lo = opts_.floor.per_second(), hi = opts_.ceiling.per_second(),
                     init = opts_.initial.per_second();
        auto bad = [](bool b) {
            if (b) throw boost::system::system_error(make_error_code(error::invalid_option));
        };
        bad(lo > hi || init < lo || init > hi);
        bad(!(opts_.decrease > 0 && opts_.decrease < 1) || !(opts_.increase > 0 && opts_.increase <= 1));
        bad(opts_.max_pause <= duration::zero() || opts_.decrease_holdoff < duration::zero() ||
            opts_.refusal_pause < duration::zero());
        rate_ = applied_ = init;
        floor_ = lo;
        ceiling_ = hi;
    }

    /// Feeds one response received at `now`.
    adaptive_rate_feedback on_response(const server_response& res, duration now)
    {
        adaptive_rate_feedback out;
        ++stats_.responses;
        const bool refused = res.status == 429 || res.status == 503;
        if (refused) ++stats_.refusals;
        const double dt = last_ == duration::min() ? 0.0 : std::clamp(seconds(now - last_), 0.0, 1.0);
        last_ = std::max(last_, now);

        for (const auto& p : res.policies)
            if (opts_.policy.empty() || p.name == opts_.policy) remember(p);

        if (refused && res.retry_after) out.paused = pause(now, *res.retry_after);
        else if (refused && opts_.refusal_pause > duration::zero()) out.paused = pause(now, opts_.refusal_pause);

        double target = -1;
        for (const auto& l : res.limits) {
            if (!opts_.policy.empty() && l.name != opts_.policy) continue;
            double t = limit_target(l, refused, now, dt, out.paused);
            if (t >= 0 && (target < 0 || t < target)) target = t;
        }

        double next = rate_;
        if (target >= 0) {
            ++stats_.with_fields;
            next = target;
        } else if (refused) {
            if (last_decrease_ == duration::min() || now - last_decrease_ >= opts_.decrease_holdoff) {
                before_decrease_ = rate_;
                next = rate_ * opts_.decrease;
                last_decrease_ = now;
                ++stats_.decreases;
            }
        } else {
            // After a decrease, the climb back takes (1 - decrease) / increase seconds and ends in
            // about one refusal: slower at low rates, so that a cycle holds >= 200 requests
            // (at most one refused in 200).
            const double base = before_decrease_ > 0 ? before_decrease_ : rate_;
            const double slope = before_decrease_ > 0
                                     ? std::min(opts_.increase, (1 - opts_.decrease) * before_decrease_ / 200)
                                     : opts_.increase;
            next = rate_ + slope * base * dt;
        }
        rate_ = std::clamp(next, floor_, ceiling_);
        const bool at_bound = (rate_ == floor_ || rate_ == ceiling_) && rate_ != applied_;
        if (at_bound || std::abs(rate_ - applied_) > 0.02 * applied_) {
            applied_ = rate_;
            out.rate_changed = true;
            ++stats_.adaptations;
        }
        return out;
    }

    /// Parses the fields of `res` and feeds them; malformed fields are ignored and
    /// reported in the result. `wall_now` resolves an HTTP-date Retry-After.
    adaptive_rate_feedback on_response(const http_response& res, duration now,
                                       std::chrono::system_clock::time_point wall_now)
    {
        auto policies = http::parse_ratelimit_policy(res.ratelimit_policy);
        auto limits = http::parse_ratelimit(res.ratelimit);
        std::optional<duration> delay;
        boost::system::error_code retry_error;
        if (!res.retry_after.empty()) {
            if (auto ra = http::parse_retry_after(res.retry_after, wall_now))
                delay = ra->delay_ns_from(wall_now);
            else
                retry_error = ra.error();
        }
        server_response parsed{res.status, policies ? std::span<const http::quota_policy>(*policies)
                                                    : std::span<const http::quota_policy>{},
                               limits ? std::span<const http::service_limit>(*limits)
                                      : std::span<const http::service_limit>{},
                               delay};
        auto out = on_response(parsed, now);
        if (!policies) out.policy_error = policies.error();
        if (!limits) out.ratelimit_error = limits.error();
        out.retry_after_error = retry_error;
        stats_.malformed_fields += !policies + !limits + (retry_error ? 1 : 0);
        return out;
    }

    /// The rate to apply (changes only when on_response says rate_changed).
    sluice::rate rate() const { return sluice::rate::per_second(applied_); }
    /// The rate before the 2 % hysteresis, in permits per second.
    double exact_rate() const noexcept { return rate_; }
    /// No request should be sent before this time.
    duration paused_until() const noexcept { return paused_until_; }
    /// Whether a pause lasts at `now`.
    bool paused(duration now) const noexcept { return now < paused_until_; }
    /// The counters.
    const limiter_stats::adaptive_counts& stats() const noexcept { return stats_; }
    /// The options it was built with.
    const adaptive_rate_options& options() const noexcept { return opts_; }

private:
    struct policy_state {
        std::string name;
        std::optional<http::quota_policy> policy;
        double gain = 1;
        double max_found = 0;
        double last_found = -1;
        duration last_seen = duration::min();
        bool windowed = false;
        std::optional<std::uint64_t> last_reset;
        duration first_seen = duration::min();
        duration reset_seen = duration::min(); // when r was seen jumping up
        duration window{0};
        int contradictions = 0;
        duration contradiction_since = duration::min();
        duration distrust_until = duration::min();
    };

    static double seconds(duration d) { return std::chrono::duration<double>(d).count(); }

    policy_state& state_of(const std::string& name)
    {
        for (auto& s : states_)
            if (s.name == name) return s;
        // A server that names a new policy on every response must not grow this without
        // bound: past 64 names, the one heard of least recently is forgotten.
        if (states_.size() >= max_policies) {
            auto oldest = std::min_element(states_.begin(), states_.end(), [](const auto& a, const auto& b) {
                return a.last_seen < b.last_seen;
            });
            states_.erase(oldest);
        }
        states_.push_back(policy_state{});
        states_.back().name = name;
        return states_.back();
    }

    void remember(const http::quota_policy& p)
    {
        auto& s = state_of(p.name);
        s.policy = p;
        if (p.window) s.window = std::chrono::seconds(static_cast<std::int64_t>(std::min<std::uint64_t>(*p.window, 1u << 30)));
    }

    bool pause(duration now, duration d)
    {
        if (d <= duration::zero()) return false;
        if (d > opts_.max_pause) {
            d = opts_.max_pause;
            ++stats_.pauses_cut;
        }
        const duration until = d > duration::max() - now ? duration::max() : now + d;
        if (until <= paused_until_) return false;
        paused_until_ = until;
        ++stats_.pauses;
        return true;
    }

    // The sluice::rate this service limit asks for, or -1 when it says nothing usable.
    double limit_target(const http::service_limit& l, bool refused, duration now, double dt, bool& paused)
    {
        auto& s = state_of(l.name);
        if (now < s.distrust_until) return -1;
        const double found = static_cast<double>(l.remaining) + (refused ? 0.0 : 1.0);
        const double previous = s.last_found;
        const duration previous_seen = s.last_seen;
        s.last_found = found;
        s.last_seen = now;
        if (s.first_seen == duration::min()) s.first_seen = now;

        if (refused && previous >= 2) {
            // The server said quota was left, then refused.
            if (s.contradiction_since == duration::min() || now - s.contradiction_since > std::chrono::seconds(10)) {
                s.contradictions = 0;
                s.contradiction_since = now;
            }
            if (++s.contradictions >= 3) {
                s.distrust_until = now + std::chrono::minutes(1);
                s.contradictions = 0;
                ++stats_.distrusted;
                return -1;
            }
        }

        const http::quota_policy* p = s.policy ? &*s.policy : nullptr;
        // The capacity: the burst parameter; else q, until r has been watched for 2 s; then
        // the largest r + 1 seen, at most q (a token bucket may announce q = rate * w with a
        // burst far below q, and its r never comes near q).
        double capacity = std::max(s.max_found = std::max(s.max_found, found), 1.0);
        if (p) {
            if (auto b = http::uint_extension(p->extensions, opts_.burst_parameter); b && *b > 0)
                capacity = static_cast<double>(*b);
            else if (p->quota > 0 && now - s.first_seen < std::chrono::seconds(2))
                capacity = static_cast<double>(p->quota);
            else if (p->quota > 0)
                capacity = std::min(capacity, static_cast<double>(p->quota));
        }
        if (p && p->quota == 0) {
            // A quota of zero: nothing may be sent until it resets.
            if (l.reset) paused = pause(now, std::chrono::seconds(static_cast<std::int64_t>(std::min<std::uint64_t>(*l.reset, 1u << 30)))) || paused;
            return floor_;
        }

        // A fixed window shows itself by its resets: r jumps up by half the capacity or more
        // while t jumps up too (the new window is long). A token bucket that refills has t
        // (the time until it is full) going down as r goes up.
        if (previous >= 0 && found - previous >= capacity / 2 && capacity >= 4 && l.reset && s.last_reset &&
            *l.reset > *s.last_reset) {
            s.windowed = true;
            if (s.reset_seen != duration::min() && s.window == duration::zero() && now - s.reset_seen > duration::zero())
                s.window = now - s.reset_seen;
            s.reset_seen = now;
        }
        s.last_reset = l.reset;
        if (s.windowed && s.window > duration::zero() && s.reset_seen != duration::min()) {
            duration next_reset = s.reset_seen;
            if (now >= next_reset) next_reset += ((now - next_reset) / s.window + 1) * s.window;
            if (l.remaining == 0 && !refused) {
                paused = pause(now, next_reset - now) || paused;
                return rate_;
            }
            if (refused) {
                paused = pause(now, next_reset - now) || paused;
                return rate_;
            }
            const double left = std::max(seconds(next_reset - now), 1e-3);
            const double nominal = static_cast<double>(p && p->window ? p->quota : static_cast<std::uint64_t>(capacity)) /
                                   seconds(s.window);
            return std::min(static_cast<double>(l.remaining) / left, 2 * nominal);
        }

        double nominal;
        if (p && p->window) {
            nominal = static_cast<double>(p->quota) / static_cast<double>(*p->window);
        } else if (l.reset) {
            return static_cast<double>(l.remaining) / static_cast<double>(std::max<std::uint64_t>(*l.reset, 1));
        } else {
            return -1;
        }
        if (capacity <= 1) return nominal; // r is 0 after every request at any pace: keep to q / w
        const double fill = std::min(1.0, found / capacity);
        // No integration past a bound the sluice::rate is pinned at (anti-windup).
        const bool pinned = (rate_ >= ceiling_ && fill > 0.5) || (rate_ <= floor_ && fill < 0.5);
        // Integrated over the client's own sending interval at most: a quota found full after
        // a pause the server asked for says nothing about the rate.
        const double step = std::min(dt, 2 / rate_);
        if (!pinned) s.gain = std::clamp(s.gain * std::exp((fill - 0.5) * step), min_gain, max_gain);
        if (refused) s.gain = std::max(min_gain, s.gain * 0.75);
        // The proportional part moves the sluice::rate by up to +-50 % as the quota fills or drains.
        // When the capacity is worth less than 100 ms at the nominal sluice::rate, the client learns
        // of its fill too late for that (a round trip is news that old, with the quota
        // emptied meanwhile), so the part shrinks to what the capacity covers.
        const double k = std::clamp(capacity / (nominal * 0.1), 0.05, 1.0);
        return s.gain * nominal * (1 + k * (fill - 0.5));
    }

    // A policy of 2 per 0.04 s is announced as q=2;w=1: the gain must be able to find 25x.
    static constexpr double min_gain = 1.0 / 64, max_gain = 64;
    static constexpr std::size_t max_policies = 64;

    adaptive_rate_options opts_;
    double rate_ = 0, applied_ = 0, floor_ = 0, ceiling_ = 0;
    double before_decrease_ = 0;
    duration last_ = duration::min();
    duration last_decrease_ = duration::min();
    duration paused_until_ = duration::min();
    std::vector<policy_state> states_;
    limiter_stats::adaptive_counts stats_;
};

} // namespace sluice
