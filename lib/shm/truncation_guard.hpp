// The SIGBUS handler that turns a truncated segment's faults into an error (see
// include/sluice/shm/segment.hpp, "Truncation"). Internal to lib/shm.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace sluice::shm::detail {

/// One watched mapping. Records are never freed (the handler may be reading one while
/// another thread lets it go); a record let go is reused for the next mapping.
struct watched_mapping {
    std::atomic<std::uintptr_t> begin{0};   // 0: not in use
    std::atomic<std::size_t> size{0};
    std::atomic<bool> truncated{false};
    watched_mapping* next = nullptr;        // fixed once published
};

/// Watches [base, base + size): a SIGBUS inside it replaces it with private memory (see
/// segment.hpp)
/// and sets the record's `truncated`. Installs the handler the first time. Throws
/// system_error(shm_unavailable) if sigaction fails.
watched_mapping* watch(void* base, std::size_t size);

/// Stops watching (before the mapping is unmapped). The record may be reused at once.
void unwatch(watched_mapping* w) noexcept;

} // namespace sluice::shm::detail
