// A named shared-memory segment that every process of the host can attach to: where the
// state of a sluice::shm limiter lives.
#pragma once

#include <sluice/error.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::shm {

/// Where a shared-memory limiter keeps its state, and who may attach to it.
struct segment_options {
    /// The segment's name, POSIX style: "/name", one leading slash and no other, 1 to
    /// 255 characters after it (a file under /dev/shm). Every process that names it shares
    /// the limiter.
    std::string name;

    /// The permission bits the segment is created with (not subject to the umask): 0600,
    /// so that only processes of the same user can attach. Ignored when it exists.
    unsigned mode = 0600;

    /// The segment's size in bytes: 0 for the least the limiter needs (one page). A size
    /// given must hold the limiter's state, and one that exists must have that size.
    std::size_t size = 0;
};

/// Removes the segment `name`, if it exists: processes attached to it keep theirs, and the
/// next process to name it creates a new one. No process has to call this (a segment
/// left behind is a full bucket to the next one). Returns whether a segment was removed.
/// Throws system_error(error::shm_invalid_name) for a bad name, error::shm_permission
/// when this process may not remove it.
bool remove(std::string_view name);

namespace detail {

/// The layout of a segment's first bytes: what an attaching process checks before it
/// reads anything else, written once, before the segment is published under its name.
struct segment_header {
    std::uint64_t magic;
    std::uint32_t layout_version;
    std::uint32_t header_size;      // sizeof(segment_header)
    std::uint64_t byte_order;       // byte_order_mark as written
    std::uint32_t word_size;        // sizeof(std::atomic<std::int64_t>)
    std::uint32_t lock_free;        // 1: the atomics are address-free across processes
    std::uint64_t kind;             // what the payload is
    std::uint64_t size;             // the segment's size as created
    std::array<std::int64_t, 4> config;   // the kind's configuration
    std::array<char, 40> boot_id;   // /proc/sys/kernel/random/boot_id at creation
};

inline constexpr std::uint64_t segment_magic = 0x6d68732e6563756cULL;   // "luce.shm"
inline constexpr std::uint32_t segment_layout_version = 1;
inline constexpr std::uint64_t byte_order_mark = 0x0102030405060708ULL;
/// Where the payload starts: the header's cache lines, then the payload's own.
inline constexpr std::size_t payload_offset = 128;
static_assert(sizeof(segment_header) <= payload_offset);
static_assert(std::atomic<std::int64_t>::is_always_lock_free, "a shared word must be lock-free to be address-free");

/// What a limiter asks of its segment: its kind, its configuration and the payload's size.
/// `init` fills a new segment's payload, before anyone else can see it, from the layout
/// (a table's shape is in its configuration; `context` is the limiter's own, for what the
/// creator alone decides, such as a seed).
struct segment_layout {
    std::uint64_t kind;
    std::array<std::int64_t, 4> config;
    std::size_t payload;
    void (*init)(void* payload, const segment_layout& layout) noexcept;
    const void* context = nullptr;
};

} // namespace detail

/// One process's mapping of a named segment (what a shm limiter's policy holds). Opening
/// attaches to the segment of that name, or creates it: created and initialised without a
/// name, then published under the name in one atomic step (linkat), so that no process
/// ever sees a half-initialised segment, also when its creator is killed. Of two creators
/// racing, the loser attaches to the winner's. A segment left by an earlier boot (its
/// header records the boot id) is stale: it is replaced, under a lock on the file that
/// the kernel drops if the holder dies.
///
/// Errors, thrown as system_error of sluice's category: error::shm_invalid_name for a bad
/// name, error::invalid_option for a bad size or mode, shm_permission, shm_incompatible (another
/// layout, version or kind, or not a segment), shm_config_mismatch, shm_unavailable.
class segment {
public:
    /// Attaches to the segment of `opts`, or creates it with `layout` (see above).
    segment(const segment_options& opts, const detail::segment_layout& layout);
    /// Unmaps the segment; it stays under its name for the other processes and the next.
    ~segment();
    segment(const segment&) = delete;
    segment& operator=(const segment&) = delete;

    /// The payload, at detail::payload_offset in the mapping.
    void* payload() const noexcept { return static_cast<char*>(base_) + detail::payload_offset; }

    /// The segment's name.
    const std::string& name() const noexcept { return name_; }

    /// The mapping's size in bytes.
    std::size_t size() const noexcept { return size_; }

    /// Whether this process created the segment (false: it attached to an existing one).
    bool created() const noexcept { return created_; }

private:
    std::string name_;
    void* base_ = nullptr;
    std::size_t size_ = 0;
    bool created_ = false;
};

} // namespace sluice::shm
