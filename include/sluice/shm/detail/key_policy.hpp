// One key of a shared-memory table seen as a rate policy, so that the waiting machinery
// of a single limiter (reserving_queue in a wait_engine) can serve the key in this process.
#pragma once

#include <sluice/decision.hpp>
#include <sluice/shm/keyed_gcra.hpp>

#include <atomic>
#include <cstdint>
#include <memory>

namespace sluice::shm::detail {

/// policy::gcra's calls on one key of a keyed_gcra: the decisions are the table's (shared
/// by every process); what is this process's own is `last`, the word its last reservation
/// on the key left, which the refund rule compares with (shm::gcra keeps the same).
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
        return table_->reserve(key_, n, now, max_wait, last_);
    }

    std::int64_t predict(std::uint64_t n, std::int64_t now, std::uint64_t ahead = 0) const noexcept
    {
        return table_->predict(key_, n, now, ahead);
    }

    std::int64_t refund(std::uint64_t n, std::int64_t now) noexcept { return table_->refund(key_, n, now, last_); }

    /// The word this process's last reservation on the key left (no_reservation: none).
    std::int64_t last_reserved() const noexcept { return last_.load(std::memory_order_relaxed); }

private:
    std::shared_ptr<keyed_gcra> table_;
    keyed_gcra::key_handle key_;
    // Changed under the waiting queue's lock; atomic as shm::gcra's.
    std::atomic<std::int64_t> last_{keyed_gcra::no_reservation};
};

} // namespace sluice::shm::detail
