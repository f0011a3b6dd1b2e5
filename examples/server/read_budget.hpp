// One memory budget for the read buffers of every connection of a server (--read-budget).
// A connection's buffer (request_check.hpp: 512 bytes at first, up to 16 KiB) is all it
// holds of a request, so the bound on connections bounded request memory only as
// --max-connections x 16 KiB: with a large open-file limit, unbounded in practice. Here
// every byte of every buffer is taken from one budget before the buffer grows, and given
// back when it shrinks or its connection goes. Sans-io: plain accounting, safe across
// threads (atomics), no socket and no clock.
#pragma once

#include "request_check.hpp"

#include <sluice/error.hpp>

#include <boost/system/system_error.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace server_check {

/// A connection's first read: the room its read buffer starts with (request_check.hpp).
inline constexpr std::size_t first_read = 512;

/// The budget's bounds: room for four full read buffers at least (so that one can grow to
/// its full size within the share growth may take, below), 1 TiB at most.
inline constexpr std::uint64_t min_read_budget = 4 * read_buffer_size;
inline constexpr std::uint64_t max_read_budget = std::uint64_t{1} << 40;

/// The bytes every connection's read buffer may hold together. A buffer's first bytes
/// (first_read, for a request to start) may take all of the budget; growing past them
/// (a header that does not fit yet, or a faster read) only up to three quarters of it: the
/// last quarter is kept for first reads, so that connections whose headers grow large and
/// slowly (slowloris) cannot fill it and leave no room for a new request, which fits its
/// first read. Nothing is ever taken past the budget.
class read_budget {
public:
    /// Throws boost::system::system_error (sluice::error::invalid_option) for `bytes`
    /// outside [min_read_budget, max_read_budget].
    explicit read_budget(std::uint64_t bytes) : limit_(bytes), growth_limit_(bytes - bytes / 4)
    {
        if (bytes < min_read_budget || bytes > max_read_budget)
            throw boost::system::system_error(sluice::error::invalid_option,
                                              "read budget: from 65536 bytes (64 KiB) to 2^40 (1 TiB)");
    }
    read_budget(const read_budget&) = delete;
    read_budget& operator=(const read_budget&) = delete;

    std::uint64_t limit() const noexcept { return limit_; }
    /// The bytes taken now, and the most ever taken at once (never above limit()).
    std::uint64_t in_use() const noexcept { return used_.load(std::memory_order_relaxed); }
    std::uint64_t peak() const noexcept { return peak_.load(std::memory_order_relaxed); }

    /// What one connection holds of the budget: it grows and shrinks with the connection's
    /// read buffer, and gives everything back when it goes (its destructor), however the
    /// connection ends.
    class lease {
    public:
        explicit lease(read_budget& b) noexcept : budget_(b) {}
        lease(const lease&) = delete;
        lease& operator=(const lease&) = delete;
        ~lease() { shrink_to(0); }

        /// Holds `bytes` in all, if the budget has room for what that adds (see
        /// read_budget: a lease that holds nothing may take all of it, one that holds
        /// some only three quarters); false, holding what it held, if not.
        bool grow_to(std::uint64_t bytes) noexcept
        {
            if (bytes <= held_) return true;
            if (!budget_.take(bytes - held_, held_ == 0 ? budget_.limit_ : budget_.growth_limit_)) return false;
            held_ = bytes;
            return true;
        }

        /// Holds `bytes` at most, giving the rest back.
        void shrink_to(std::uint64_t bytes) noexcept
        {
            if (bytes >= held_) return;
            budget_.used_.fetch_sub(held_ - bytes, std::memory_order_relaxed);
            held_ = bytes;
        }

        std::uint64_t held() const noexcept { return held_; }

    private:
        read_budget& budget_;
        std::uint64_t held_ = 0;
    };

private:
    // Takes n more bytes if the total stays within `ceiling`.
    bool take(std::uint64_t n, std::uint64_t ceiling) noexcept
    {
        auto used = used_.load(std::memory_order_relaxed);
        do {
            if (n > ceiling || used > ceiling - n) return false;
        } while (!used_.compare_exchange_weak(used, used + n, std::memory_order_relaxed));
        auto peak = peak_.load(std::memory_order_relaxed);
        while (used + n > peak && !peak_.compare_exchange_weak(peak, used + n, std::memory_order_relaxed)) {
        }
        return true;
    }

    const std::uint64_t limit_;
    const std::uint64_t growth_limit_;
    std::atomic<std::uint64_t> used_{0};
    std::atomic<std::uint64_t> peak_{0};
};

/// The capacity a beast::flat_buffer of `size` bytes in `capacity`, at most `max`, has
/// after prepare(room): unchanged when the room is there (moving its bytes to the front if
/// need be), else twice its size or its size and the room, whichever is more, at most
/// `max` (Boost 1.81's basic_flat_buffer::prepare; a test holds the two to agree). What a
/// read's buffer will hold is taken from the budget before the read, by this.
constexpr std::size_t grown_capacity(std::size_t size, std::size_t capacity, std::size_t room, std::size_t max) noexcept
{
    if (room <= capacity - size) return capacity;
    return std::min(max, std::max(2 * size, size + room));
}

/// How many bytes a connection reads next into its read buffer (`size` bytes held in
/// `capacity`, at most `max`), whose bytes `held` takes from the budget: `want` (512 at
/// first, twice as many after a read that filled its room), or less when the budget has no
/// room to grow the buffer but the buffer has some free (a faster read is not needed: the
/// request goes on at the pace of the room it has); nullopt when the buffer is full and the
/// budget has no room to grow it, so that the request cannot be read further (refused:
/// after_read_error). When it returns, `held` covers what the buffer holds after
/// prepare() of that many bytes (grown_capacity); `size` < `max`.
inline std::optional<std::size_t> next_read(read_budget::lease& held, std::size_t size, std::size_t capacity,
                                            std::size_t want, std::size_t max) noexcept
{
    const std::size_t free = capacity - size;
    const std::size_t room = std::min(std::max(want, free), max - size);
    if (held.grow_to(grown_capacity(size, capacity, room, max))) return room;
    if (free > 0) return free;
    return std::nullopt;
}

} // namespace server_check
