// A log-linear latency histogram in the manner of HdrHistogram: exact below 2 * sub_buckets,
// then each power of two is cut into sub_buckets equal parts, so every recorded value is
// known to within 1 / sub_buckets (0.8 % here) over the whole range of int64 nanoseconds,
// in a fixed ~60 KB of counters and O(1) per record.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

namespace loadgen {

class latency_histogram {
public:
    static constexpr int sub_bits = 7;
    static constexpr std::uint64_t sub_buckets = std::uint64_t{1} << sub_bits;

    latency_histogram() : counts_(bucket_count, 0) {}

    /// Records one value (nanoseconds; a negative value, which a clock cannot produce
    /// between an intended time and a later completion, is recorded as 0).
    void record(std::int64_t ns)
    {
        auto v = static_cast<std::uint64_t>(std::max<std::int64_t>(ns, 0));
        ++counts_[index_of(v)];
        ++total_;
        max_ = std::max(max_, v);
        min_ = std::min(min_, v);
    }

    void merge(const latency_histogram& other)
    {
        for (std::size_t i = 0; i < counts_.size(); ++i) counts_[i] += other.counts_[i];
        total_ += other.total_;
        max_ = std::max(max_, other.max_);
        min_ = std::min(min_, other.min_);
    }

    void reset()
    {
        std::fill(counts_.begin(), counts_.end(), 0);
        total_ = 0;
        max_ = 0;
        min_ = UINT64_MAX;
    }

    std::uint64_t count() const noexcept { return total_; }
    std::int64_t max() const noexcept { return static_cast<std::int64_t>(max_); }
    std::int64_t min() const noexcept { return total_ ? static_cast<std::int64_t>(min_) : 0; }

    /// The smallest value v such that at least `percentile` % of the recorded values are
    /// <= v, reported as the highest value of its bucket (never below the true one) and
    /// never above max(). 0 when empty.
    std::int64_t percentile(double percentile) const
    {
        if (total_ == 0) return 0;
        double wanted = std::clamp(percentile, 0.0, 100.0) / 100.0 * static_cast<double>(total_);
        // - 1e-9: 99.9 % of 1000 is 999, not the 999.0000000000001 of floating point.
        auto rank = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::ceil(wanted - 1e-9)));
        std::uint64_t seen = 0;
        for (std::size_t i = 0; i < counts_.size(); ++i) {
            seen += counts_[i];
            if (seen >= rank) return static_cast<std::int64_t>(std::min(highest_in(i), max_));
        }
        return max();
    }

    /// The bucket of v, and the highest value sharing it: exposed for the tests.
    static std::size_t index_of(std::uint64_t v)
    {
        if (v < 2 * sub_buckets) return static_cast<std::size_t>(v);
        int shift = std::bit_width(v) - (sub_bits + 1);
        return static_cast<std::size_t>((static_cast<std::uint64_t>(shift) + 1) * sub_buckets + (v >> shift) - sub_buckets);
    }

    static std::uint64_t highest_in(std::size_t index)
    {
        if (index < 2 * sub_buckets) return index;
        std::uint64_t shift = index / sub_buckets - 1;
        std::uint64_t top = index % sub_buckets + sub_buckets; // v >> shift
        return (top << shift) + ((std::uint64_t{1} << shift) - 1);
    }

private:
    static constexpr std::size_t bucket_count = (64 - sub_bits) * sub_buckets + sub_buckets;

    std::vector<std::uint64_t> counts_;
    std::uint64_t total_ = 0;
    std::uint64_t max_ = 0;
    std::uint64_t min_ = UINT64_MAX;
};

} // namespace loadgen
