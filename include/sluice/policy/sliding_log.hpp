// Sliding window log: never more than `limit` permits in ANY window-long interval.
#pragma once

#include <sluice/decision.hpp>
#include <sluice/policy/basic_policy.hpp>
#include <sluice/detail/base/arith.hpp>

#include <boost/system/system_error.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace sluice::policy {

/// Sliding window log, the strong guarantee: at no instant t do more than `limit` permits
/// carry timestamps in (t - window, t]. It keeps the timestamps of the last `limit`
/// permits in a ring (8 bytes each, allocated once); a request for n is admitted when the
/// n-th oldest of them has left the window.
///
/// Thread-safe with a short critical section (a mutex held for O(n + log limit) work, no
/// allocation): the ring cannot be updated by one compare-and-swap. Timestamps are kept
/// non-decreasing: a clock that steps backwards stamps permits at the newest time seen,
/// which can only delay later admissions. predict() is a lower bound: queued permits are
/// assumed admitted as early as possible.
class sliding_log : public basic_window<sliding_log, true> {
    friend class basic_policy<sliding_log, true>;
    friend class basic_window<sliding_log, true>;

public:
    /// The largest limit: 2^24 timestamps (128 MiB of ring).
    static constexpr std::uint64_t max_limit = std::uint64_t{1} << 24;

    /// Throws system_error(error::invalid_limit) unless 1 <= limit <= 2^24, and
    /// error::invalid_duration unless window > 0.
    sliding_log(std::uint64_t limit, std::chrono::nanoseconds window)
        : window_(check_window(window)), ring_(check_limit(limit), detail::min_ns)
    {
    }


    /// Changes the limit, keeping the newest timestamps. Allocates the new ring.
    void set_limit(std::uint64_t limit)
    {
        std::vector<std::int64_t> next(check_limit(limit), detail::min_ns);
        std::lock_guard lock(mutex_);
        std::size_t keep = std::min(next.size(), ring_.size());
        for (std::size_t i = 0; i < keep; ++i)
            next[next.size() - 1 - i] = at(ring_.size() - 1 - i);
        ring_.swap(next);
        head_ = 0;
    }

    /// The earliest instant from which, if nothing more is consumed, this log decides
    /// exactly as a new one: the newest timestamp has left the window.
    std::int64_t idle_at(std::int64_t /*now*/) const noexcept
    {
        std::lock_guard lock(mutex_);
        return newest_ == detail::min_ns ? detail::min_ns : detail::sat_add(newest_, window_);
    }

    /// Settles `cost` permits admitted at `at` with their `actual` cost. Lower: up to
    /// cost - actual of the timestamps `at` leave the log, and the oldest places are
    /// emptied (what the admission pushed out of the ring had left the window already, or it
    /// could not have been admitted), so the log is the one an admission of `actual` would
    /// have left. Higher: actual - cost more timestamps `at` enter it in order (a debt: each
    /// leaves the window at at + window, and the log keeps its newest `limit`, all that any
    /// decision reads; so a debt beyond the limit is forgotten, and a later settle lower of
    /// an admission before it gives back from the stamps kept). A timestamp `at` no longer in the log (it left the window, or the
    /// clock stepped back and the admission was stamped later) changes nothing. Under the
    /// lock, O(limit), no allocation. Returns 0.
    std::int64_t settle(std::uint64_t cost, std::uint64_t actual, std::int64_t at, std::int64_t /*now*/) noexcept
    {
        if (cost == actual) return 0;
        std::lock_guard lock(mutex_);
        // Oldest first from index 0, sorted: the ring as a plain array.
        std::rotate(ring_.begin(), ring_.begin() + static_cast<std::ptrdiff_t>(head_), ring_.end());
        head_ = 0;
        auto [lo, hi] = std::equal_range(ring_.begin(), ring_.end(), at);
        if (actual < cost) {
            auto k = static_cast<std::ptrdiff_t>(std::min<std::uint64_t>(cost - actual, static_cast<std::uint64_t>(hi - lo)));
            std::move_backward(ring_.begin(), hi - k, hi);
            std::fill(ring_.begin(), ring_.begin() + k, detail::min_ns);
            newest_ = ring_.back();   // the newest stamp: what it was unless all went
        } else {
            if (lo == hi) return 0;   // not counted here: its window is over
            auto c = static_cast<std::ptrdiff_t>(std::min<std::uint64_t>(actual - cost, static_cast<std::uint64_t>(hi - ring_.begin())));
            std::move(ring_.begin() + c, hi, ring_.begin());
            std::fill(hi - c, hi, at);
        }
        return 0;
    }

    /// The window's length.
    std::chrono::nanoseconds window() const noexcept { return std::chrono::nanoseconds{window_}; }

private:
    std::uint64_t limit_locked() const noexcept { return ring_.size(); }


    // Earliest time at which `ahead` queued permits and then n more could be admitted (a
    // lower bound: queued permits are assumed admitted as early as possible).
    std::int64_t predict_locked(std::uint64_t n, std::int64_t now, std::uint64_t ahead) const noexcept
    {
        const std::uint64_t limit = ring_.size();
        std::uint64_t need = ahead + n;
        std::uint64_t turns = (need - 1) / limit;       // full rings the queue must wait out
        std::int64_t t = at(static_cast<std::size_t>((need - 1) % limit));
        std::int64_t r = detail::sat_add(t, detail::sat_mul(turns + 1, window_));
        return r > now ? r : now;
    }

    // The i-th oldest timestamp.
    std::int64_t at(std::size_t i) const noexcept
    {
        std::size_t j = head_ + i;
        return ring_[j >= ring_.size() ? j - ring_.size() : j];
    }

    // How many of the oldest timestamps have left the window at `now` (they are sorted).
    std::uint64_t expired(std::int64_t now) const noexcept
    {
        std::int64_t horizon = detail::sat_sub(now, window_);
        std::size_t lo = 0, hi = ring_.size();
        while (lo < hi) {
            std::size_t mid = lo + (hi - lo) / 2;
            if (at(mid) <= horizon) lo = mid + 1; else hi = mid;
        }
        return lo;
    }

    decision decide(std::uint64_t n, std::int64_t now, bool consume) noexcept
    {
        const std::uint64_t limit = ring_.size();
        if (n == 0) return detail::invalid_decision(error::invalid_count);
        if (n > limit) return detail::invalid_decision(error::exceeds_limit);
        decision d;
        std::int64_t nth = at(static_cast<std::size_t>(n - 1));
        std::int64_t free_at;
        // Saturating would make "never" look like now == max_ns: keep the overflow apart.
        bool never = __builtin_add_overflow(nth, window_, &free_at);
        if (never) free_at = detail::max_ns;
        if (never || free_at > now) {
            d.retry_after = std::chrono::nanoseconds{free_at == detail::max_ns ? detail::max_ns : free_at - now};
            d.remaining = expired(now);
        } else {
            d.admitted = true;
            d.remaining = expired(now) - n;
            if (consume) {
                std::int64_t stamp = std::max(now, newest_);
                for (std::uint64_t i = 0; i < n; ++i) {
                    ring_[head_] = stamp;
                    if (++head_ == ring_.size()) head_ = 0;
                }
                newest_ = stamp;
            }
        }
        std::int64_t newest = d.admitted ? std::max(newest_, now) : newest_;
        std::int64_t reset = detail::sat_sub(detail::sat_add(newest, window_), now);
        d.reset_after = std::chrono::nanoseconds{reset > 0 ? reset : 0};
        return d;
    }

    const std::int64_t window_;
    std::vector<std::int64_t> ring_;
    std::size_t head_ = 0;                  // index of the oldest timestamp
    std::int64_t newest_ = detail::min_ns;
};

} // namespace sluice::policy
