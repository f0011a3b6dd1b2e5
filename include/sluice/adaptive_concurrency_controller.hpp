// The sans-io core of sluice::adaptive_concurrency: turns the latency and the outcome of
// completed operations into a limit on how many may run at once, with the algorithms of
// Netflix's concurrency-limits (AIMD, Vegas, Gradient2). No I/O and no clock: every
// sample carries its own times, so that its behaviour is tested by simulation
// (tests/test_adaptive_concurrency.cpp).
#pragma once

#include <sluice/error.hpp>
#include <sluice/limiter_stats.hpp>

#include <boost/system/system_error.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string_view>

namespace sluice {

/// How the limit follows the samples.
enum class concurrency_algorithm {
    /// Additive increase, multiplicative decrease: +1 per sample while the limit is used,
    /// times `backoff` on an overload signal (a dropped operation, or one slower than
    /// `latency_threshold`), at most once per round trip. Needs a signal: drops, or a
    /// threshold that says what latency is too much.
    aimd,
    /// TCP Vegas: estimates the queue at the server as limit x (1 - rtt_noload / rtt),
    /// rtt_noload being the smallest latency seen (re-probed now and then), and keeps it
    /// between alpha and beta times log10(limit). Settles a few operations above the knee.
    vegas,
    /// Gradient2: the ratio of a long-term average latency to the latest one, with a
    /// tolerance, scales the limit; a headroom of `queue_size` lets it grow while latency
    /// stays flat. Needs no threshold; follows a drifting baseline.
    gradient2,
};

/// The algorithm named "aimd", "vegas" or "gradient2" (for flags and configuration
/// files); empty for any other name.
inline std::optional<concurrency_algorithm> parse_concurrency_algorithm(std::string_view name) noexcept
{
    if (name == "aimd") return concurrency_algorithm::aimd;
    if (name == "vegas") return concurrency_algorithm::vegas;
    if (name == "gradient2") return concurrency_algorithm::gradient2;
    return std::nullopt;
}

/// Settings of an adaptive concurrency limit. Out-of-range values throw system_error(
/// error::invalid_option) at construction: nothing is clamped silently.
struct adaptive_concurrency_options {
    /// The algorithm. Vegas by default: it finds a knee with nothing to configure (AIMD
    /// needs latency_threshold or drops; Gradient2 follows a drifting latency but settles
    /// above a knee, see the README).
    concurrency_algorithm algorithm = concurrency_algorithm::vegas;
    /// The limit before any sample. Within [min_limit, max_limit].
    std::uint64_t initial_limit = 20;
    /// The limit never goes below this (>= 1: a limit of 0 would never learn again).
    std::uint64_t min_limit = 1;
    /// Nor above this.
    std::uint64_t max_limit = 1000;

    /// AIMD: the limit is multiplied by this on an overload signal. In (0, 1).
    double backoff = 0.9;
    /// AIMD: an operation slower than this is an overload signal, as a drop is. Zero: only
    /// drops are. >= 0.
    std::chrono::nanoseconds latency_threshold{0};

    /// Vegas: the queue estimate below which the limit grows, in units of log10(limit).
    /// > 0.
    double vegas_alpha = 3;
    /// Vegas: ... above which it shrinks. >= vegas_alpha.
    double vegas_beta = 6;
    /// Vegas: rtt_noload is measured afresh after about this many samples per unit of the
    /// limit (between half and all of probe_multiplier x limit), so that a baseline that
    /// rose for good is learnt. >= 1.
    std::uint32_t vegas_probe_multiplier = 30;

    /// Gradient2: latency may reach this multiple of the long-term average before the
    /// limit shrinks. >= 1.
    double tolerance = 1.5;
    /// Gradient2: the share of each new estimate taken into the limit. In (0, 1].
    double smoothing = 0.2;
    /// Gradient2: the samples the long-term average spans. >= 1.
    std::uint32_t long_window = 600;
    /// Gradient2: headroom added to each estimate, so that the limit probes upwards while
    /// latency stays flat. >= 0.
    double queue_size = 4;
};

/// One completed operation. Times are nanoseconds since an epoch of the caller's choosing
/// (a steady clock's).
struct concurrency_sample {
    /// When the operation got its slot.
    std::int64_t start = 0;
    /// When it finished (>= start).
    std::int64_t end = 0;
    /// Operations holding slots when it finished, itself included.
    std::uint64_t inflight = 1;
    /// It failed in a way that tells of overload (a timeout, a 503, a refused
    /// connection): the limit shrinks whatever the latency.
    bool dropped = false;
};

/// The controller. Not thread-safe: sluice::adaptive_concurrency serialises its calls.
class adaptive_concurrency_controller {
public:

    /// Throws system_error(error::invalid_option) for options out of range.
    explicit adaptive_concurrency_controller(const adaptive_concurrency_options& opts = {})
        : opts_(check(opts)), estimate_(static_cast<double>(opts.initial_limit)), limit_(opts.initial_limit)
    {
        next_probe_ = probe_interval();
    }

    /// Feeds one completed operation; returns the limit to apply.
    std::uint64_t on_sample(const concurrency_sample& s)
    {
        ++stats_.samples;
        if (s.dropped) ++stats_.dropped;
        // end - start in unsigned arithmetic: the difference of any two int64 fits in a
        // uint64; beyond int64 (292 years) it is saturated, and 0 counts as 1 ns.
        const std::uint64_t span = s.end > s.start ? static_cast<std::uint64_t>(s.end) - static_cast<std::uint64_t>(s.start) : 0;
        const auto rtt = static_cast<std::int64_t>(std::clamp<std::uint64_t>(span, 1, INT64_MAX));
        switch (opts_.algorithm) {
        case concurrency_algorithm::aimd: aimd(s, rtt); break;
        case concurrency_algorithm::vegas: vegas(s, rtt); break;
        case concurrency_algorithm::gradient2: gradient2(s, rtt); break;
        }
        estimate_ = std::clamp(estimate_, static_cast<double>(opts_.min_limit), static_cast<double>(opts_.max_limit));
        const auto next = static_cast<std::uint64_t>(estimate_);
        if (next > limit_) ++stats_.increases;
        if (next < limit_) ++stats_.decreases;
        limit_ = next;
        return limit_;
    }

    /// The limit now.
    std::uint64_t limit() const noexcept { return limit_; }

    /// Whether Vegas is probing its baseline: the limit is halved for about a round trip.
    bool probing() const noexcept { return probe_started_ != INT64_MIN; }

    /// The settings.
    const adaptive_concurrency_options& options() const noexcept { return opts_; }

    /// Counters since construction.
    const limiter_stats::adaptive_counts& stats() const noexcept { return stats_; }

private:
    static const adaptive_concurrency_options& check(const adaptive_concurrency_options& o)
    {
        const bool bad = o.min_limit < 1 || o.min_limit > o.max_limit || o.initial_limit < o.min_limit ||
                         o.initial_limit > o.max_limit || !(o.backoff > 0 && o.backoff < 1) ||
                         o.latency_threshold.count() < 0 || !(o.vegas_alpha > 0) ||
                         !(o.vegas_beta >= o.vegas_alpha) || !std::isfinite(o.vegas_beta) ||
                         o.vegas_probe_multiplier < 1 || !(o.tolerance >= 1) || !std::isfinite(o.tolerance) ||
                         !(o.smoothing > 0 && o.smoothing <= 1) || o.long_window < 1 ||
                         !(o.queue_size >= 0) || !std::isfinite(o.queue_size) ||
                         (o.algorithm != concurrency_algorithm::aimd && o.algorithm != concurrency_algorithm::vegas &&
                          o.algorithm != concurrency_algorithm::gradient2);
        if (bad)
            throw boost::system::system_error(make_error_code(error::invalid_option));
        return o;
    }

    // Whether the limit is used enough for a sample to say something about it: a client
    // that sends little cannot learn that more would be fine.
    bool app_limited(const concurrency_sample& s) const noexcept
    {
        return static_cast<double>(s.inflight) * 2 < estimate_;
    }

    // Steps are per round trip, as TCP's: a sample is about 1/limit of a round trip's
    // samples, so each moves the limit by step / limit. (The reference implementation
    // moves it by a whole step per sample, which at a limit of 100 is 100 steps a round
    // trip: it overshoots the knee by far before the first slow answer comes back.)
    void per_round_trip(double step) noexcept { estimate_ += step / std::max(estimate_, 1.0); }

    void aimd(const concurrency_sample& s, std::int64_t rtt)
    {
        const bool overload =
            s.dropped || (opts_.latency_threshold.count() > 0 && rtt > opts_.latency_threshold.count());
        if (overload) {
            // Operations that started before the last decrease answer for the limit before
            // it: one decrease per round trip, or a burst of slow answers would cut the
            // limit to its floor.
            if (s.start >= last_decrease_) {
                estimate_ = std::floor(estimate_ * opts_.backoff);
                last_decrease_ = s.end;
            }
        } else if (!app_limited(s)) {
            per_round_trip(1);
        }
    }

    // max(1, floor(log10(limit))), the reference implementation's step function.
    double log_step() const noexcept { return std::max(1.0, std::floor(std::log10(std::max(estimate_, 1.0)))); }

    std::uint64_t probe_interval()
    {
        // Between half and all of multiplier x limit samples; a fixed-seed generator keeps
        // the controller deterministic, and the jitter keeps a fleet from probing together.
        rng_ = rng_ * 6364136223846793005ULL + 1442695040888963407ULL;
        const double jitter = 0.5 + 0.5 * static_cast<double>(rng_ >> 11) * 0x1.0p-53;
        return static_cast<std::uint64_t>(jitter * opts_.vegas_probe_multiplier * std::max(estimate_, 1.0)) + 1;
    }

    void vegas(const concurrency_sample& s, std::int64_t rtt)
    {
        if (probe_started_ != INT64_MIN) {
            // Probing: operations started since the limit was halved ran at most half
            // loaded; the least of their latencies is the new baseline.
            if (s.start >= probe_started_) {
                probe_min_ = std::min(probe_min_, rtt);
                if (++probe_samples_ >= probe_samples_needed_) {
                    rtt_noload_ = probe_min_;
                    estimate_ = probe_saved_;
                    probe_started_ = INT64_MIN;
                    next_probe_ = probe_interval();
                }
            }
            return;
        }
        if (rtt_noload_ == 0 || rtt < rtt_noload_)
            rtt_noload_ = rtt;
        if (--next_probe_ == 0 && estimate_ >= 2) {
            // The baseline may have risen for good (a slower backend), and a standing
            // queue hides it: every latency seen includes the queue. Measure it afresh at
            // half the limit for a round trip, as BBR drains its queue to probe its RTT
            // (taking the latest latency as the baseline instead, as the reference
            // implementation does, reads the queue as no queue and ratchets the limit up).
            probe_saved_ = estimate_;
            probe_started_ = s.end;
            probe_min_ = INT64_MAX;
            probe_samples_ = 0;
            estimate_ = std::floor(estimate_ / 2);
            probe_samples_needed_ = static_cast<std::uint64_t>(std::clamp(estimate_ / 2, 1.0, 10.0));
            return;
        }
        const double step = log_step();
        if (s.dropped) {
            per_round_trip(-step);
            return;
        }
        if (app_limited(s))
            return;
        const double queue = estimate_ * (1.0 - static_cast<double>(rtt_noload_) / static_cast<double>(rtt));
        if (queue <= step)
            per_round_trip(opts_.vegas_beta * step);   // far below the knee: grow fast
        else if (queue < opts_.vegas_alpha * step)
            per_round_trip(step);
        else if (queue > opts_.vegas_beta * step)
            // Half the excess a round trip, at least a step: after the backend lost three
            // quarters of its capacity a step of log10(limit) would take a hundred round
            // trips to get there, all of them queued.
            per_round_trip(-std::max(step, (queue - opts_.vegas_beta * step) / 2));
    }

    void gradient2(const concurrency_sample& s, std::int64_t rtt)
    {
        const double short_rtt = static_cast<double>(rtt);
        // The long-term average: a plain mean over the first samples (an exponential one
        // would start from the first sample's weight alone), exponential after.
        ++long_count_;
        const double warmup = std::min<double>(10, opts_.long_window);
        if (static_cast<double>(long_count_) <= warmup)
            long_rtt_ += (short_rtt - long_rtt_) / static_cast<double>(long_count_);
        else
            long_rtt_ += (short_rtt - long_rtt_) * 2.0 / (static_cast<double>(opts_.long_window) + 1);
        // After a long overload the average is far above the latency of a healthy
        // backend; pull it down faster than the window would.
        if (long_rtt_ / short_rtt > 2)
            long_rtt_ *= 0.95;
        if (s.dropped) {
            estimate_ -= estimate_ * 0.5 * opts_.smoothing / std::max(estimate_, 1.0);
            return;
        }
        if (app_limited(s))
            return;
        const double gradient = std::clamp(opts_.tolerance * long_rtt_ / short_rtt, 0.5, 1.0);
        const double next = estimate_ * gradient + opts_.queue_size;
        per_round_trip((next - estimate_) * opts_.smoothing);
    }

    adaptive_concurrency_options opts_;
    double estimate_;
    std::uint64_t limit_;
    limiter_stats::adaptive_counts stats_;
    // aimd
    std::int64_t last_decrease_ = INT64_MIN;
    // vegas
    std::int64_t rtt_noload_ = 0;
    std::uint64_t rng_ = 0x853c49e6748fea9bULL;
    std::uint64_t next_probe_ = 0;
    std::int64_t probe_started_ = INT64_MIN;   // INT64_MIN: not probing
    std::int64_t probe_min_ = INT64_MAX;
    double probe_saved_ = 0;
    std::uint64_t probe_samples_ = 0;
    std::uint64_t probe_samples_needed_ = 1;
    // gradient2
    double long_rtt_ = 0;
    std::uint64_t long_count_ = 0;
};

} // namespace sluice
