// A keyed limiter shared by every process of a host: one bucket per key in a table in a
// named shared-memory segment, on a clock.
#pragma once

#include <sluice/default_clock.hpp>
#include <sluice/manual_clock.hpp>
#include <sluice/shm/keyed_gcra.hpp>

#include <chrono>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <utility>

namespace sluice::shm {

/// shm::keyed_gcra read on `Clock`: a token bucket per key (a leaky bucket with burst 1 and
/// a slack) shared by every process that names the same segment, as
/// sluice::keyed<token_bucket<>> is shared by the threads of one process.
///
///     sluice::shm::keyed<> per_client("/myapp-clients", sluice::rate::per_second(10), 20,
///                                     {.max_keys = 1'000'000});
///     if (!per_client.try_acquire(peer_address)) return too_many_requests();
///
/// Non-blocking only: no key has a waiting queue (async_acquire is not offered). The clock:
/// as shm::token_bucket's (every process on one time line).
template <class Clock = default_clock>
class keyed {
public:
    /// The clock decisions are taken on.
    using clock_type = Clock;

    /// Attaches to (or creates) the table of `where` (a segment name or segment_options);
    /// throws as shm::keyed_gcra.
    template <class Where>
        requires std::is_convertible_v<Where, std::string_view> || std::is_convertible_v<Where, const segment_options&>
    keyed(Where&& where, sluice::rate r, std::uint64_t burst, const table_options& table = {},
          std::chrono::nanoseconds slack = {})
        : table_(std::forward<Where>(where), r, burst, table, slack)
    {
    }

    /// Admits n permits of the string `key` now if its bucket holds them; errors as
    /// shm::keyed_gcra::try_acquire.
    decision try_acquire(std::string_view key, std::uint64_t n = 1) noexcept
    {
        return table_.try_acquire(key, n, sluice::detail::now_ns<Clock>());
    }

    /// The same for an integer key.
    decision try_acquire(std::uint64_t key, std::uint64_t n = 1) noexcept
    {
        return table_.try_acquire(key, n, sluice::detail::now_ns<Clock>());
    }

    /// The table: its size, shards, keys and configuration.
    keyed_gcra& table() noexcept { return table_; }
    /// The table, read-only.
    const keyed_gcra& table() const noexcept { return table_; }

private:
    keyed_gcra table_;
};

} // namespace sluice::shm
