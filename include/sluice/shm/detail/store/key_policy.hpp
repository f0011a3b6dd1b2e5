// One key of a shared-memory table seen as a rate policy, so that the waiting machinery
// of a single limiter (reserving_queue in a wait_engine) can serve the key in this process.
#pragma once

#include <sluice/decision.hpp>
#include <sluice/shm/detail/policy/gcra_word.hpp>
#include <sluice/shm/keyed_gcra.hpp>

#include <atomic>
#include <cstdint>
#include <memory>

namespace sluice::shm::detail {

/// policy::gcra's calls on one key of a keyed_gcra: the decisions are the table's (shared
/// by every process); what is this process's own is its record of its reservations on the
/// key (holder_state), which the refund rule checks (policy::shm_gcra keeps the same).
/// Holds the table alive: a waiting queue may outlive the keyed limiter that made it (a
/// handler on its way holds it).
class key_policy {
public:
    /// Reservations commit a future slot in the key's word.
    static constexpr bool reserves_ahead = true;

    key_policy(std::shared_ptr<keyed_gcra> table, const keyed_gcra::key_handle& key) noexcept
        : table_(std::move(table)), key_(key)
    {
    }

    decision try_acquire(std::uint64_t n, std::int64_t now) noexcept { return table_->try_acquire(key_, n, now); }

    decision check(std::uint64_t n, std::int64_t now) const noexcept { return table_->check(key_, n, now); }

    reservation reserve(std::uint64_t n, std::int64_t now, std::int64_t max_wait, std::uint64_t /*ahead*/ = 0) noexcept
    {
        return table_->reserve(key_, n, now, max_wait, holder_);
    }

    std::int64_t predict(std::uint64_t n, std::int64_t now, std::uint64_t ahead = 0) const noexcept
    {
        return table_->predict(key_, n, now, ahead);
    }

    /// Gives back reservation number `which` (a waiter's), under the shared refund rule.
    std::int64_t refund(std::uint64_t n, std::int64_t now, std::uint64_t which) noexcept
    {
        return table_->refund(key_, n, now, holder_, which);
    }

    /// The same for a reservation not named (see gcra_word::unnamed).
    std::int64_t refund(std::uint64_t n, std::int64_t now) noexcept { return refund(n, now, word_type::unnamed); }

    /// The number of this process's last reservation on the key granted ahead.
    std::uint64_t last_reservation() const noexcept { return holder_.count.load(std::memory_order_relaxed); }

private:
    std::shared_ptr<keyed_gcra> table_;
    keyed_gcra::key_handle key_;
    using word_type = gcra_word<sluice::detail::min_ns + 2>;
    holder_state holder_;   // this process's reservations on the key, under the queue's lock
};

} // namespace sluice::shm::detail
