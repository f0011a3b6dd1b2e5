// Flow-rate meter: the measured current rate of events, from two adjacent fixed windows.
#pragma once

#include <sluice/detail/base/arith.hpp>

#include <boost/system/system_error.hpp>
#include <sluice/error.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>

namespace sluice {

/// Counts events and reports their rate over the last `window`, estimated like
/// sliding_window_counter: prev * (1 - elapsed / window) + cur. Lock-free: each of the two
/// slots is one atomic word holding a window number (24 bits) and a count (40 bits,
/// saturating). Use it to show the achieved rate next to a limiter, or to feed an
/// adaptive limit.
class rate_meter {
public:
    /// Throws system_error(error::invalid_duration) unless window > 0.
    explicit rate_meter(std::chrono::nanoseconds window = std::chrono::seconds(1)) : window_(window.count())
    {
        if (window_ <= 0)
            throw boost::system::system_error(make_error_code(error::invalid_duration));
    }

    /// Records n events at `now`.
    void record(std::uint64_t n, std::int64_t now) noexcept
    {
        std::int64_t k = sluice::detail::floor_div(now, window_);
        std::atomic<std::uint64_t>& slot = slots_[k & 1];
        std::uint64_t tag = static_cast<std::uint64_t>(k) & id_mask;
        std::uint64_t v = slot.load(std::memory_order_relaxed);
        for (;;) {
            std::uint64_t count = (v >> 40) == tag ? v & count_mask : 0;
            count = count + n > count_mask ? count_mask : count + n;
            std::uint64_t next = (tag << 40) | count;
            if (slot.compare_exchange_weak(v, next, std::memory_order_relaxed))
                return;
        }
    }

    /// Estimated events in the window that ends at `now`.
    double count(std::int64_t now) const noexcept
    {
        std::int64_t k = sluice::detail::floor_div(now, window_);
        double cur = static_cast<double>(read(k));
        double prev = static_cast<double>(read(k - 1));
        double e = static_cast<double>(now - k * window_) / static_cast<double>(window_);
        return prev * (1 - e) + cur;
    }

    /// Estimated events per second over the window that ends at `now`.
    double per_second(std::int64_t now) const noexcept
    {
        return count(now) * 1e9 / static_cast<double>(window_);
    }

    /// The length of the window the rate is measured over.
    std::chrono::nanoseconds window() const noexcept { return std::chrono::nanoseconds{window_}; }

private:
    static constexpr std::uint64_t id_mask = (std::uint64_t{1} << 24) - 1;
    static constexpr std::uint64_t count_mask = (std::uint64_t{1} << 40) - 1;

    std::uint64_t read(std::int64_t k) const noexcept
    {
        std::uint64_t v = slots_[k & 1].load(std::memory_order_relaxed);
        return (v >> 40) == (static_cast<std::uint64_t>(k) & id_mask) ? v & count_mask : 0;
    }

    std::int64_t window_;
    std::atomic<std::uint64_t> slots_[2]{};
};

} // namespace sluice
