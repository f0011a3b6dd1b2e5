// A named shared-memory segment that every process of the host can attach to: where the
// state of a sluice::shm limiter lives.
#pragma once

#include <sluice/error.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::shm {

class segment;

/// Where a shared-memory limiter keeps its state, and who may attach to it. One of three:
/// a name (`name`), an unnamed segment of this process and the processes it forks
/// (`anonymous`), or a segment this process has open already (`descriptor`, see of()).
struct segment_options {
    /// The segment's name, POSIX style: "/name", one leading slash and no other, 1 to
    /// 255 characters after it (a file under /dev/shm). Every process that names it shares
    /// the limiter. Empty with `anonymous` or `descriptor`.
    std::string name = {};

    /// The permission bits the segment is created with (not subject to the umask): 0600,
    /// so that only processes of the same user can attach. A segment that exists must
    /// belong to this process's effective user and allow no more than this mode, else it
    /// is refused (error::shm_foreign): another user could have made it first.
    unsigned mode = 0600;

    /// The segment's size in bytes: 0 for the least the limiter needs (one page). A size
    /// given must hold the limiter's state, and one that exists must have that size.
    std::size_t size = 0;

    /// An unnamed segment (a sealed memfd): no name exists for another process to open,
    /// squat or truncate. The processes forked after it was made share it through
    /// of(segment) (the descriptor is inherited); nothing else reaches it.
    bool anonymous = false;

    /// A descriptor of a segment to attach to (of() sets it): one this process opened,
    /// or inherited across fork. Duplicated: the caller keeps its own.
    int descriptor = -1;

    /// How long a lock in the segment (a keyed table's shard or count, the file lock of a
    /// stale segment's replacement) is waited for before the decision (or construction)
    /// answers error::shm_lock_timeout: a lock whose holder is stopped never hangs a
    /// request. 0: not waited for at all.
    std::chrono::nanoseconds lock_timeout = std::chrono::seconds(1);

    /// Whether a truncation of a named segment's file under this process's mapping is
    /// caught (see segment): false leaves SIGBUS to the program, for one that handles it
    /// itself. An anonymous segment is sealed: it cannot be truncated.
    bool catch_truncation = true;

    /// The options that attach to segment `s` itself, by its descriptor (in this process,
    /// or in one forked after `s` was made): how forked workers share an anonymous segment.
    static segment_options of(const segment& s);
};

/// Removes the segment `name`, if it exists: processes attached to it keep theirs, and the
/// next process to name it creates a new one. No process has to call this (a segment
/// left behind is a full bucket to the next one). Returns whether a segment was removed.
/// Throws system_error(error::shm_invalid_name) for a bad name, error::shm_permission
/// when this process may not remove it, error::shm_foreign for another user's file.
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

/// A mapping that a truncation of its file replaced (set by the SIGBUS handler: see
/// segment). Never set for one that cannot be truncated.
inline constexpr std::atomic<bool> never_truncated{false};

/// Whether a segment's header, `size` bytes of it mapped, is one of `layout` made on boot
/// `boot`: error{} when it is; shm_incompatible (another layout, version or kind, or not
/// a segment), shm_config_mismatch (another configuration, or a size other than
/// `asked`, when not 0); `stale` is set, with error{}, for a segment of another boot.
/// `what` says why. Reads nothing beyond the header; sans-io, for the fuzz target.
error check_header(const void* header, std::size_t size, const segment_layout& layout, std::size_t asked,
                   const std::array<char, 40>& boot, bool& stale, std::string& what);

} // namespace detail

/// One process's mapping of a segment (what a shm limiter's policy holds), named or not.
///
/// Named: opening attaches to the segment of that name, or creates it: created and
/// initialised without a name, then published under the name in one atomic step (linkat),
/// so that no process ever sees a half-initialised segment, also when its creator is
/// killed. Of two creators racing, the loser attaches to the winner's. A segment left by
/// an earlier boot (its header records the boot id) is stale: it is replaced, under a lock
/// on the file that the kernel drops if the holder dies (waited for lock_timeout at most).
///
/// Ownership: /dev/shm is open to every user, so another user can create a file under the
/// name first. Before anything in it is read, a segment that exists must belong to this
/// process's effective user and allow no more than segment_options::mode: else
/// error::shm_foreign, and the file is left alone (not used, not replaced, not removed).
///
/// Anonymous (segment_options::anonymous): a memfd, sized, sealed against shrinking and
/// growing, mapped shared. It has no name; the processes forked afterwards attach to it
/// with segment_options::of(segment). This is the segment for a parent and its workers.
///
/// Truncation: a named segment is a file, which any process of its owner (or root) can
/// truncate while it is mapped; a read or write of the mapping beyond the new end raises
/// SIGBUS. sluice catches it (unless segment_options::catch_truncation is false): the
/// first named segment mapped installs a process-wide SIGBUS handler (sigaction, once;
/// the previous action is kept). For a fault inside a segment's mapping, the handler marks
/// the segment truncated and replaces its whole mapping, in one step, with private memory
/// whose first page reads as 0x7f bytes and the rest as zeros (raw mmap and mremap system
/// calls, async-signal-safe), so that the faulting instruction runs again on it. No
/// decision's fast path takes those bytes (a GCRA word of 0x7f bytes is beyond its range,
/// a key table's slot of them is never a key's); every other path checks the mark, and
/// the decision answers error::shm_truncated. The replacement stays mapped for the life of
/// the process (a lock of the segment held at the time may still be linked from the
/// thread's robust-mutex list). A fault anywhere else goes to the previous handler, or,
/// when there was none, takes SIGBUS's default action (the process dies as it would have).
/// A program that installs its own SIGBUS handler after mapping a named segment must call
/// the previous one for faults it does not own, or set catch_truncation to false. The JVM
/// does the same for a truncated MappedByteBuffer.
///
/// Errors, thrown as system_error of sluice's category: error::shm_invalid_name for a bad
/// name, error::invalid_option for a bad size, mode, lock_timeout or a mix of name,
/// anonymous and descriptor, shm_foreign, shm_permission, shm_incompatible (another
/// layout, version or kind, or not a segment), shm_config_mismatch, shm_lock_timeout,
/// shm_truncated (truncated while being attached), shm_unavailable.
class segment {
public:
    /// Attaches to the segment of `opts`, or creates it with `layout` (see above).
    segment(const segment_options& opts, const detail::segment_layout& layout);
    /// Unmaps the segment; a named one stays under its name for the other processes and
    /// the next.
    ~segment();
    segment(const segment&) = delete;
    segment& operator=(const segment&) = delete;

    /// The payload, at detail::payload_offset in the mapping.
    void* payload() const noexcept { return static_cast<char*>(base_) + detail::payload_offset; }

    /// The segment's name (empty for an anonymous segment, or one attached by descriptor).
    const std::string& name() const noexcept { return name_; }

    /// The mapping's size in bytes.
    std::size_t size() const noexcept { return size_; }

    /// Whether this process created the segment (false: it attached to an existing one).
    bool created() const noexcept { return created_; }

    /// The segment's open descriptor (close-on-exec), what segment_options::of() names.
    int descriptor() const noexcept { return fd_; }

    /// How long a lock in the segment is waited for (segment_options::lock_timeout).
    std::chrono::nanoseconds lock_timeout() const noexcept { return lock_timeout_; }

    /// Whether the segment's file was truncated under this mapping (see above): its state
    /// is gone, and every decision on it answers error::shm_truncated. One relaxed load.
    bool truncated() const noexcept { return truncated_->load(std::memory_order_relaxed); }

private:
    // Maps fd's `size` bytes, watched for truncation, and checks the header: true when the
    // segment is stale (and left unmapped), false when this object holds it. Throws.
    bool attach(int fd, std::size_t size, const detail::segment_layout& layout, const segment_options& opts,
                const std::array<char, 40>& boot, const std::string& shown);

    std::string name_;
    void* base_ = nullptr;
    std::size_t size_ = 0;
    int fd_ = -1;
    bool created_ = false;
    std::chrono::nanoseconds lock_timeout_{};
    const std::atomic<bool>* truncated_ = &detail::never_truncated;
    void* watch_ = nullptr;   // the SIGBUS handler's record of this mapping (none: sealed or not asked)
};

inline segment_options segment_options::of(const segment& s)
{
    segment_options o;
    o.descriptor = s.descriptor();
    o.lock_timeout = s.lock_timeout();
    return o;
}

} // namespace sluice::shm
