// The client side of a quota: turns the RateLimit / RateLimit-Policy fields of each
// response into the rate the client's own limiter should run at. No I/O and no clock of
// its own (`now` is passed in), so its behaviour is tested by simulation.
#pragma once

#include "ratelimit_fields.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <vector>

namespace ratelimit {

/// A proportional-integral controller on the server's quota.
///
/// The server's policy tells its long-run rate (q / w); the share of the quota that a
/// request found, f = (r + 1) / q after a 200 and r / q after a 429, tells whether the
/// client is above it (draining) or below it (full). The client aims at a half-full
/// quota: rate = gain * q/w * (0.5 + f), i.e. 1.5x the policy rate
/// when the quota is full ("back up when the window refills"), 0.5x when it is empty. A
/// half-full quota absorbs the jitter of the client's own sending without a 429. `gain`
/// (the integral part) corrects the policy rate, which the draft's whole-second `w` makes
/// imprecise (10 per 0.5 s is announced as q=10;w=1): it grows while the quota stays
/// above half full and shrinks below it, by e^(fill - 0.5) per second.
///
/// Several policies: each gives its own target and the lowest wins (the most restrictive
/// one binds). A RateLimit member without a matching policy falls back to r / t: what is
/// left over the time until it resets. Responses without usable fields leave the rate
/// alone; a 429 halves it then (multiplicative decrease) and 10% more per quiet second
/// brings it back (additive increase would take minutes at high rates).
///
/// The result is kept within [floor, ceiling]; a change smaller than 5% is not applied
/// (unless it reaches a bound), so that the limiter is not reconfigured on every response.
class adaptive_rate {
public:
    using clock = std::chrono::steady_clock;

    adaptive_rate(double initial, double floor, double ceiling)
        : rate_(std::clamp(initial, floor, ceiling)), floor_(floor), ceiling_(ceiling)
    {
    }

    /// Feeds one response. Returns true when rate() changed and should be applied.
    bool on_response(clock::time_point now, const std::vector<policy>& policies, const std::vector<limit>& limits,
                     bool too_many_requests)
    {
        double dt = 0;
        if (last_ != clock::time_point{})
            dt = std::clamp(std::chrono::duration<double>(now - last_).count(), 0.0, 1.0);
        else
            quiet_since_ = now;
        last_ = now;

        double target = -1, fill = -1;
        for (const auto& l : limits) {
            const policy* p = nullptr;
            for (const auto& cand : policies)
                if (cand.name == l.name) p = &cand;
            double t, f = -1;
            if (p && p->window && p->quota <= 1) {
                // With a quota of 1, r is 0 after every admitted request, at any pace: the
                // fields say nothing beyond the policy, so the client keeps to it.
                t = static_cast<double>(p->quota) / static_cast<double>(*p->window);
            } else if (p && p->window) {
                // The fill the request found: r is what is left after an admitted one took its share.
                auto found = static_cast<double>(l.remaining) + (too_many_requests ? 0.0 : 1.0);
                f = std::min(1.0, found / static_cast<double>(p->quota));
                t = static_cast<double>(p->quota) / static_cast<double>(*p->window) * (0.5 + f);
            } else if (l.reset) {
                t = static_cast<double>(l.remaining) / static_cast<double>(std::max<std::uint64_t>(*l.reset, 1));
            } else {
                continue;
            }
            if (target < 0 || t < target) {
                target = t;
                fill = f;
            }
        }

        double next = rate_;
        if (target >= 0) {
            // No integration past a bound the rate is pinned at (anti-windup): a gain grown
            // while the ceiling held the rate would take seconds of 429s to unwind.
            bool pinned = (rate_ >= ceiling_ && fill > 0.5) || (rate_ <= floor_ && fill < 0.5);
            if (fill >= 0 && !pinned) gain_ = std::clamp(gain_ * std::exp((fill - 0.5) * dt), min_gain, max_gain);
            if (too_many_requests) gain_ = std::max(min_gain, gain_ * 0.75);
            next = (fill >= 0 ? gain_ : 1.0) * target;
            quiet_since_ = now;
        } else if (too_many_requests) {
            next = rate_ * 0.5;
            quiet_since_ = now;
        } else if (now - quiet_since_ >= std::chrono::seconds(1)) {
            next = rate_ * 1.1;
            quiet_since_ = now;
        }
        next = std::clamp(next, floor_, ceiling_);
        bool at_bound = next == floor_ || next == ceiling_;
        if (next == rate_ || (std::abs(next - rate_) <= 0.05 * rate_ && !at_bound)) return false;
        rate_ = next;
        ++adaptations_;
        return true;
    }

    double rate() const noexcept { return rate_; }
    double gain() const noexcept { return gain_; }
    std::uint64_t adaptations() const noexcept { return adaptations_; }

private:
    // A policy of 2 per 0.04 s is announced as q=2;w=1: the gain must be able to find 25x.
    static constexpr double min_gain = 1.0 / 64, max_gain = 64;

    double rate_, floor_, ceiling_;
    double gain_ = 1.0;
    clock::time_point last_{};
    clock::time_point quiet_since_{};
    std::uint64_t adaptations_ = 0;
};

} // namespace ratelimit
