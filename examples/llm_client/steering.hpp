// The sans-io decisions of llm_client: what a call is estimated to cost before it is sent,
// and what a provider's announcements say of its two quotas (requests and tokens per
// window), turned into the configuration of the buckets that mirror them on this side.
// No I/O, no clock: what a response said comes in, what to do comes out
// (examples/llm_client/test_steering.cpp drives it step by step).
//
// Why a mirror: a provider that counts a call's prompt and max_tokens at admission and gives
// the unused output back at completion is a token bucket per quota (OpenAI's model). A bucket
// of the same size, refilled no faster, charged the same estimate before each call and settled
// to the call's usage after it, never holds more than the provider's: the client is refused
// only when its estimates are wrong, and uses what the provider allows otherwise.
#pragma once

#include <sluice/http/provider_limits.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <optional>

namespace llm {

/// Tokens of a call before the provider has counted them: the prompt's bytes at the largest
/// tokens-per-byte ratio among the last calls' usage (4 bytes a token until one is known,
/// the common rule of thumb), rounded up, plus max_tokens. The largest, because a call
/// estimated short reserves less than the provider charges while it runs.
class token_estimator {
public:
    /// Tokens to reserve for a call of `prompt_bytes` asking for up to `max_tokens`.
    std::uint64_t estimate(std::uint64_t prompt_bytes, std::uint64_t max_tokens) const noexcept
    {
        return prompt(prompt_bytes) + max_tokens;
    }

    /// The prompt's tokens alone.
    std::uint64_t prompt(std::uint64_t bytes) const noexcept
    {
        return std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::ceil(static_cast<double>(bytes) * ratio() - 1e-9)));
    }

    /// What the provider counted for a prompt of `bytes` (usage.prompt_tokens). False, and
    /// nothing learnt, when it cannot be a count of that prompt: a tokenizer makes at most one
    /// token of a byte, plus a few of framing per message (`slack`).
    bool learn(std::uint64_t bytes, std::uint64_t prompt_tokens) noexcept
    {
        if (bytes == 0 || prompt_tokens > bytes + slack) return false;
        recent_[n_++ % recent_.size()] = static_cast<double>(prompt_tokens) / static_cast<double>(bytes);
        return true;
    }

    /// Tokens per byte used for the estimates.
    double ratio() const noexcept
    {
        if (n_ == 0) return 0.25;
        return *std::max_element(recent_.begin(), recent_.begin() + static_cast<std::ptrdiff_t>(std::min<std::uint64_t>(n_, recent_.size())));
    }

    /// Framing tokens a provider may add to a prompt beyond one per byte.
    static constexpr std::uint64_t slack = 64;

private:
    std::array<double, 16> recent_{};
    std::uint64_t n_ = 0;
};

/// What to do with the bucket that mirrors one quota, after an announcement.
struct mirror_update {
    /// The bucket's size or rate moved: set them to limit() and per_second().
    bool configure = false;
    /// Take this much from the bucket first: what the provider already counted when the
    /// quota became known (the bucket starts full, the provider's is not).
    std::uint64_t drain = 0;
};

/// One quota of the provider (requests or tokens per window) as its responses announce it:
/// its size (limit) and how fast it refills, the bucket's configuration on this side.
///
/// The refill rate: q / w when the window is announced (RateLimit-Policy); else measured
/// from a quota not whole, (limit - remaining) units back in reset_after (a token bucket
/// refills at a constant rate, and reset_after is when it is whole again). `remaining` is
/// rounded down, so one announcement bounds the rate from below by (limit - remaining - 1)
/// / reset_after: the largest such bound is the estimate, and the first large deficit makes
/// it tight. Before either is known, `nominal_window` (a minute: what OpenAI and Anthropic
/// count in). The configured rate is the estimate times `margin`, below the provider's for
/// the time a call takes to reach it.
class quota_mirror {
public:
    using duration = std::chrono::nanoseconds;

    explicit quota_mirror(duration nominal_window = std::chrono::minutes(1), double margin = 0.99) noexcept
        : nominal_(nominal_window), margin_(margin)
    {
    }

    /// A quota beyond this is no provider's: its announcement is ignored.
    static constexpr std::uint64_t max_limit = std::uint64_t{1} << 32;
    /// A refill faster than this (units a second) is none either: a sample implying it is
    /// ignored (a bucket cannot pace finer than a nanosecond).
    static constexpr double max_rate = 1e8;

    /// What a response said of this quota; `rtt` is how long the call took, from its send to
    /// its answer. Announcements that cannot describe a quota (a limit of 0 or beyond
    /// max_limit, a refill beyond max_rate) are ignored and counted.
    ///
    /// A reset announced as an instant (Anthropic) was read against this side's clock when
    /// the answer came, but the provider wrote it somewhere within the call: up to `rtt`
    /// before. So the quota may be whole up to `rtt` later than reset_after says, and the
    /// bound from below takes that (a duration, OpenAI's, counts from when it was written).
    mirror_update on_announcement(const sluice::http::quota_announcement& a, duration rtt = duration::zero())
    {
        mirror_update out;
        if (!a.limit) return out;
        if (*a.limit == 0 || *a.limit > max_limit) {
            ++ignored_;
            return out;
        }
        const bool first = !limit_;
        if (limit_ != a.limit) {
            // A new quota: what was measured of the old one no longer holds.
            limit_ = a.limit;
            exact_.reset();
            lower_ = 0;
            out.configure = true;
        }
        const double before = per_second();
        const double q = static_cast<double>(*limit_);
        if (a.window && *a.window > duration::zero()) {
            if (q / seconds(*a.window) <= max_rate) exact_ = q / seconds(*a.window);
            else ++ignored_;
        }
        if (a.remaining && a.reset_after && *a.reset_after > duration::zero() && *a.remaining < *limit_) {
            const duration reset =
                *a.reset_after + (a.family == sluice::http::quota_family::anthropic ? std::max(rtt, duration::zero()) : duration::zero());
            const double bound = static_cast<double>(*limit_ - *a.remaining - 1) / seconds(reset);
            if (bound <= max_rate) lower_ = std::max(lower_, bound);
            else ++ignored_;
        }
        // Configured again only when the rate moved by half a percent: a reconfiguration is
        // not free (a round trip when shared; what was admitted before it cannot be settled).
        if (std::abs(per_second() - before) > 5e-3 * before) out.configure = true;
        if (first && a.remaining && *a.remaining < *limit_) out.drain = *limit_ - *a.remaining;
        return out;
    }

    /// Whether a limit was announced.
    bool known() const noexcept { return limit_.has_value(); }
    /// The quota's size: the bucket's burst (0 before known()).
    std::uint64_t limit() const noexcept { return limit_.value_or(0); }
    /// The bucket's rate, per second (0 before known()).
    double per_second() const noexcept
    {
        if (!limit_) return 0;
        const double r = exact_ ? *exact_ : lower_ > 0 ? lower_ : static_cast<double>(*limit_) / seconds(nominal_);
        return r * margin_;
    }
    /// Whether the rate was measured or announced rather than assumed.
    bool measured() const noexcept { return exact_.has_value() || lower_ > 0; }
    /// Announcements ignored as impossible.
    std::uint64_t ignored() const noexcept { return ignored_; }

private:
    static double seconds(duration d) { return std::chrono::duration<double>(d).count(); }

    duration nominal_;
    double margin_;
    std::optional<std::uint64_t> limit_;
    std::optional<double> exact_;   // q / w
    double lower_ = 0;              // the largest lower bound measured
    std::uint64_t ignored_ = 0;
};

/// Both quotas, and what a response asks of the client.
class steering {
public:
    using duration = std::chrono::nanoseconds;

    /// What to do after a response.
    struct decision {
        mirror_update requests;   ///< the requests bucket
        mirror_update tokens;     ///< the tokens bucket
        /// Refused (429): the worker that sent the call waits this long before its next one
        /// (the Retry-After, or `refused_backoff` without one), at most `longest_wait`.
        std::optional<duration> wait;
        /// The wait was cut to longest_wait.
        bool wait_cut = false;
    };

    /// `longest_wait`: a Retry-After further away than this is cut to it (and said).
    explicit steering(duration longest_wait = std::chrono::minutes(5), duration refused_backoff = std::chrono::seconds(1),
                      duration nominal_window = std::chrono::minutes(1), double margin = 0.99) noexcept
        : requests_(nominal_window, margin), tokens_(nominal_window, margin), longest_(longest_wait),
          backoff_(refused_backoff)
    {
    }

    /// A response of `status` that announced `l`, `rtt` after its call was sent.
    decision on_response(unsigned status, const sluice::http::provider_limits& l, duration rtt = duration::zero())
    {
        decision d;
        failures_ = 0;
        d.requests = requests_.on_announcement(l.requests, rtt);
        d.tokens = tokens_.on_announcement(l.tokens, rtt);
        if (status == 429) {
            duration w = l.retry_after ? std::max(*l.retry_after, duration::zero()) : backoff_;
            if (w > longest_) {
                w = longest_;
                d.wait_cut = true;
            }
            d.wait = w;
        }
        return d;
    }

    /// A call that got no answer (no connection, a timeout): its worker waits this long
    /// before the next one, a backoff that doubles from failure_backoff with each failure in
    /// a row, up to `longest_wait`, and starts over with the next answer.
    duration on_failure() noexcept
    {
        const duration d = failures_ >= 30 ? longest_ : std::min(longest_, first_failure_backoff * (std::int64_t{1} << failures_));
        ++failures_;
        return d;
    }

    /// The first wait after a call that got no answer.
    static constexpr duration first_failure_backoff = std::chrono::milliseconds(50);

    /// Whether the provider announced both quotas: the buckets can pace every worker. Until
    /// then one call at a time goes out, each after the answer to the last.
    bool steered() const noexcept { return requests_.known() && tokens_.known(); }
    const quota_mirror& requests() const noexcept { return requests_; }   ///< The requests quota.
    const quota_mirror& tokens() const noexcept { return tokens_; }       ///< The tokens quota.

private:
    quota_mirror requests_, tokens_;
    duration longest_, backoff_;
    unsigned failures_ = 0;
};

} // namespace llm
