// The sans-io core of sluice::adaptive_concurrency: turns the latency and the outcome of
// completed operations into a limit on how many may run at once, with the algorithms of
// Netflix's concurrency-limits (AIMD, Vegas, Gradient2). No I/O and no clock: every
// sample carries its own times, so that its behaviour is tested by simulation
// (tests/test_adaptive_concurrency.cpp).
#pragma once

#include <sluice/detail/policy/windowed_min.hpp>
#include <sluice/error.hpp>
#include <sluice/limiter_stats.hpp>

#include <boost/system/system_error.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>

namespace sluice {

/// How the limit follows the samples.
enum class concurrency_algorithm {
    /// Additive increase, multiplicative decrease: +1 per round trip while the limit is
    /// used (slots held, and operations running, measured from their latencies), times
    /// `backoff` on an overload signal (a dropped operation, or one slower than
    /// `latency_threshold`), at most once per round trip. Back at the limit last overloaded
    /// (or one below), only operations started at the limit as it is raise it: the load
    /// goes at most one above the knee. Needs a signal: drops, or a threshold that says
    /// what latency is too much.
    aimd,
    /// TCP Vegas: estimates the queue at the server as limit x (1 - rtt_noload / rtt),
    /// rtt_noload being the smallest latency seen (measured afresh in a drain now and
    /// then), and keeps it between alpha and beta times log10(limit). Settles a few
    /// operations above the knee.
    vegas,
    /// Gradient2: newLimit = limit x gradient + queue_size, the gradient being the ratio
    /// of the latency without load (the mean latency in a drain now and then, lower
    /// whenever a round trip is faster) to the mean latency of the last round trip, within
    /// [0.5, 1]. Settles where queue_size operations are queued, a few above the knee;
    /// averages where Vegas takes a minimum, so noisy latencies bias it less. Needs no
    /// threshold; follows a drifting baseline.
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
    /// The algorithm. Vegas by default: it finds a knee with nothing to configure, as
    /// Gradient2 does (AIMD needs latency_threshold or drops).
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
    /// AIMD: an operation slower than this multiple of the unloaded latency is an overload
    /// signal too, the unloaded latency being the least of the last eight operations that
    /// ran alone (none other in flight from their start to their end), or of any operation
    /// of the last 30 to 60 s when that is less: a threshold that needs no knowing the
    /// backend, kept where latency stays near its unloaded value. A backend that got
    /// slower for good sheds the limit to one, where the new baseline is measured (within
    /// 60 s). Zero: off. 0 or > 1.
    double latency_ratio = 0;

    /// Vegas: the queue estimate below which the limit grows, in units of log10(limit).
    /// > 0.
    double vegas_alpha = 3;
    /// Vegas: ... above which it shrinks. >= vegas_alpha.
    double vegas_beta = 6;
    /// Vegas and Gradient2: the latency without load is measured afresh in a drain (the
    /// limit halved for a round trip or two) every probe_round_trips / 2 to
    /// probe_round_trips round trips, so that a baseline that rose for good is learnt: a
    /// standing queue looks the same as a slower backend until the queue is drained. >= 1.
    std::uint32_t probe_round_trips = 30;

    /// Gradient2: latency may reach this multiple of the baseline before the limit
    /// shrinks: it settles near tolerance x the knee + queue_size. >= 1. (The reference
    /// implementation's 1.5 compares one sample with an average of every sample, queued
    /// ones included; here both are averages and the baseline is measured without a
    /// queue, and 1.5 would mean a standing queue of half the knee.)
    double tolerance = 1;
    /// Gradient2: the share of the way to a lower estimate the limit goes a round trip
    /// (how hard it sheds on a queue; growth, at most queue_size a round trip, is not
    /// smoothed). In (0, 1].
    double smoothing = 0.2;
    /// Gradient2: the operations it keeps queued at the backend (newLimit = limit x
    /// gradient + queue_size), and so the most the limit grows by a round trip while
    /// latency stays at the baseline. >= 0.
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
        measure_running(s, rtt);
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

    /// Whether Vegas or Gradient2 is draining to measure its baseline: the limit is halved
    /// for a round trip or two.
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
                         !(o.latency_ratio == 0 || (o.latency_ratio > 1 && std::isfinite(o.latency_ratio))) ||
                         !(o.vegas_beta >= o.vegas_alpha) || !std::isfinite(o.vegas_beta) ||
                         o.probe_round_trips < 1 || !(o.tolerance >= 1) || !std::isfinite(o.tolerance) ||
                         !(o.smoothing > 0 && o.smoothing <= 1) ||
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

    // Keeps the recent samples' ends and latencies, and from them running_: how many
    // operations ran at once over about the last round trip, by Little's law (their
    // latencies summed over a window of their ends, divided by the window: exact in a
    // steady state, whatever their overlap). Slots held can say more: a permit may be held
    // while its operation waits for something else (a rate limiter's permit, then
    // restart_clock()), and its latency counts from then. Infinity while not known (fewer
    // than estimate_ + 1 samples, or none ended apart): only the slots tell then.
    void measure_running(const concurrency_sample& s, std::int64_t rtt) noexcept
    {
        recent_[recent_n_++ % recent_.size()] = {s.end, rtt};
        const auto m = static_cast<std::uint64_t>(std::clamp(estimate_ + 1, 3.0, static_cast<double>(recent_.size())));
        running_ = std::numeric_limits<double>::infinity();
        if (recent_n_ < m) return;
        const auto& first = recent_[(recent_n_ - m) % recent_.size()];
        if (s.end <= first.end) return;
        double busy = 0;
        for (std::uint64_t i = recent_n_ - m + 1; i < recent_n_; ++i)
            busy += static_cast<double>(recent_[i % recent_.size()].rtt);
        running_ = busy / (static_cast<double>(s.end) - static_cast<double>(first.end));
    }

    // Steps are per round trip, as TCP's: a sample is about 1/limit of a round trip's
    // samples, so each moves the limit by step / limit. (The reference implementation
    // moves it by a whole step per sample, which at a limit of 100 is 100 steps a round
    // trip: it overshoots the knee by far before the first slow answer comes back.)
    void per_round_trip(double step) noexcept { estimate_ += step / std::max(estimate_, 1.0); }

    void aimd(const concurrency_sample& s, std::int64_t rtt)
    {
        // Alone from start to end: none other in flight when it ended, and none that shared
        // its time ended meanwhile (an operation that ends last after a crowd is not alone).
        if (s.inflight > 1) last_shared_end_ = std::max(last_shared_end_, s.end);
        else if (opts_.latency_ratio > 0 && s.start >= last_shared_end_) {
            alone_[alone_n_++ % alone_.size()] = rtt;
        }
        if (opts_.latency_ratio > 0) {
            // Any operation takes at least the unloaded latency: the least of all of the last
            // 30 to 60 s bounds it too. Under load few run alone (a crawler's first two
            // requests), and a late answer among those few would set the threshold above
            // the knee for as long as the load lasts.
            all_.add(s.end, rtt);
            if (alone_n_ > 0) {
                const auto n = static_cast<std::ptrdiff_t>(std::min<std::uint64_t>(alone_n_, alone_.size()));
                unloaded_ = std::min(*std::min_element(alone_.begin(), alone_.begin() + n), all_.get());
            }
        }
        const bool overload =
            s.dropped || (opts_.latency_threshold.count() > 0 && rtt > opts_.latency_threshold.count()) ||
            (opts_.latency_ratio > 0 && unloaded_ > 0 &&
             static_cast<double>(rtt) > opts_.latency_ratio * static_cast<double>(unloaded_));
        if (overload) {
            // Operations that started before the last decrease answer for the limit before
            // it: one decrease per round trip, or a burst of slow answers would cut the
            // limit to its floor.
            if (s.start >= last_decrease_) {
                overload_at_ = std::floor(estimate_);
                estimate_ = std::floor(estimate_ * opts_.backoff);
                last_decrease_ = s.end;
            }
            return;
        }
        // Growth needs operations running, not only slots held: one permit held while its
        // operation waits for a rate limiter says nothing of load, and a limit grown on
        // such samples let the load jump past the knee once the waits ended.
        if (app_limited(s) || running_ * 2 < estimate_)
            return;
        // At the limit that was last overloaded, or one below: only operations that started
        // at the limit as it is now say it is not too much. Those from before it rose come
        // back fast for another round trip, and counting them raised it once more before
        // the first answer from the new limit came back: one above the knee.
        const bool near_overload = estimate_ + 1 >= overload_at_ && estimate_ < overload_at_ + 1;
        if (!near_overload || s.start >= last_increase_) {
            const double before = std::floor(estimate_);
            per_round_trip(1);
            if (std::floor(estimate_) > before) last_increase_ = s.end;
        }
    }

    // max(1, floor(log10(limit))), the reference implementation's step function.
    double log_step() const noexcept { return std::max(1.0, std::floor(std::log10(std::max(estimate_, 1.0)))); }

    // Round trips to the next drain: between half and all of probe_round_trips. A
    // fixed-seed generator keeps the controller deterministic, and the jitter keeps a
    // fleet from draining together. Counted in round trips (each sample is 1/limit of
    // one), not in samples: after the baseline rose the limit falls, and a count of
    // samples set at the old limit would put the drain off by as many round trips as the
    // limit fell.
    double probe_interval()
    {
        rng_ = rng_ * 6364136223846793005ULL + 1442695040888963407ULL;
        const double jitter = 0.5 + 0.5 * static_cast<double>(rng_ >> 11) * 0x1.0p-53;
        return jitter * opts_.probe_round_trips;
    }

    // The drain of Vegas and Gradient2: the baseline may have risen for good (a slower
    // backend), and a standing queue hides it, since every latency seen includes the
    // queue. So now and then the limit is halved for a round trip or two, as BBR drains
    // its queue to probe its RTT, and the operations started meanwhile measure the
    // latency without load. True when the sample belongs to a drain (or started one): it
    // says nothing else. (Taking the latest latency as the baseline instead, as the
    // reference Vegas does, reads the queue as no queue and ratchets the limit up; an
    // average of every latency, as the reference Gradient2 does, follows the queue its own
    // limit causes and grows the limit without end.)
    bool drain(const concurrency_sample& s, std::int64_t rtt)
    {
        if (probe_started_ != INT64_MIN) {
            if (s.start >= probe_started_) {
                probe_min_ = std::min(probe_min_, rtt);
                probe_sum_ += static_cast<double>(rtt);
                if (++probe_samples_ >= probe_samples_needed_) {
                    if (opts_.algorithm == concurrency_algorithm::vegas)
                        rtt_noload_ = probe_min_;
                    else
                        long_rtt_ = probe_sum_ / static_cast<double>(probe_samples_);
                    estimate_ = probe_saved_;
                    probe_started_ = INT64_MIN;
                    next_probe_ = probe_interval();
                }
            }
            return true;
        }
        next_probe_ -= 1 / std::max(estimate_, 1.0);
        if (next_probe_ > 0 || estimate_ < 2)
            return false;
        probe_saved_ = estimate_;
        probe_started_ = s.end;
        probe_min_ = INT64_MAX;
        probe_sum_ = 0;
        probe_samples_ = 0;
        estimate_ = std::floor(estimate_ / 2);
        // Vegas takes the least latency, which a few samples find. Gradient2 takes the
        // mean, which needs the whole drain: the operations started in it that finish
        // first are its fastest, and a mean over the first half of them reads the noise as
        // a lower baseline (with latencies 30 % noisy, the limit then stalled at half a
        // knee of 400). So two round trips' worth at the halved limit.
        probe_samples_needed_ = opts_.algorithm == concurrency_algorithm::vegas
                                    ? static_cast<std::uint64_t>(std::clamp(estimate_ / 2, 1.0, 10.0))
                                    : static_cast<std::uint64_t>(std::max(2 * estimate_, 1.0));
        return true;
    }

    void vegas(const concurrency_sample& s, std::int64_t rtt)
    {
        if (probe_started_ == INT64_MIN && (rtt_noload_ == 0 || rtt < rtt_noload_))
            rtt_noload_ = rtt;
        if (drain(s, rtt))
            return;
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
        const double latency = static_cast<double>(rtt);
        // The short-term latency: the mean over about a round trip's samples. One sample
        // alone, as in the reference, reads its own noise as a queue half of the time.
        short_rtt_ = short_rtt_ == 0 ? latency : short_rtt_ + (latency - short_rtt_) / std::max(estimate_, 1.0);
        if (long_rtt_ == 0)
            long_rtt_ = latency;   // until the first drain
        if (drain(s, rtt))
            return;
        // A round trip faster than the baseline: the backend got faster, and waiting for the
        // next drain would read the difference as room for a queue.
        long_rtt_ = std::min(long_rtt_, short_rtt_);
        if (s.dropped) {
            estimate_ -= estimate_ * 0.5 * opts_.smoothing / std::max(estimate_, 1.0);
            return;
        }
        if (app_limited(s))
            return;
        // newLimit - limit = queue_size - limit x (1 - gradient): zero where the queue
        // estimate limit x (1 - long / short) is queue_size. Growth is at most queue_size a
        // round trip (the gradient is at most 1) and needs no smoothing; a decrease is
        // smoothed, as the reference documents `smoothing`: how hard it sheds on a queue.
        const double gradient = std::clamp(opts_.tolerance * long_rtt_ / short_rtt_, 0.5, 1.0);
        const double change = estimate_ * gradient + opts_.queue_size - estimate_;
        per_round_trip(change > 0 ? change : change * opts_.smoothing);
    }

    adaptive_concurrency_options opts_;
    double estimate_;
    std::uint64_t limit_;
    limiter_stats::adaptive_counts stats_;
    // what runs (app_limited)
    struct ended {
        std::int64_t end, rtt;
    };
    std::array<ended, 17> recent_{};
    std::uint64_t recent_n_ = 0;
    double running_ = std::numeric_limits<double>::infinity();
    // aimd
    std::int64_t last_decrease_ = INT64_MIN;
    std::int64_t last_increase_ = INT64_MIN;   // when the limit last rose
    double overload_at_ = 0;                   // the limit at the last decrease
    std::array<std::int64_t, 8> alone_{};   // the latencies of the last operations that ran alone
    std::uint64_t alone_n_ = 0;
    detail::windowed_min all_{30'000'000'000};   // the least latency of any, 30 s spans
    std::int64_t unloaded_ = 0;             // the least of them, and of all_
    std::int64_t last_shared_end_ = INT64_MIN;   // the last end of an operation not alone
    // vegas
    std::int64_t rtt_noload_ = 0;
    std::uint64_t rng_ = 0x853c49e6748fea9bULL;
    double next_probe_ = 0;   // round trips
    std::int64_t probe_started_ = INT64_MIN;   // INT64_MIN: not probing
    std::int64_t probe_min_ = INT64_MAX;
    double probe_saved_ = 0;
    std::uint64_t probe_samples_ = 0;
    std::uint64_t probe_samples_needed_ = 1;
    double probe_sum_ = 0;
    // gradient2
    double long_rtt_ = 0;    // the latency without load
    double short_rtt_ = 0;   // the mean latency of about the last round trip
};

} // namespace sluice
