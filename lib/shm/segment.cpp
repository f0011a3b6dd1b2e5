// The life of a named shared-memory segment (see include/sluice/shm/segment.hpp): created
// without a name and published whole, attached after checking its header, replaced when
// stale. Plain system calls on files under /dev/shm (what shm_open does on Linux), so that
// the creation can use O_TMPFILE and linkat.
#include <sluice/shm/segment.hpp>

#include <boost/system/system_error.hpp>

#include <cerrno>
#include <cstring>
#include <new>
#include <string>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sluice::shm {
namespace {

using detail::segment_header;

constexpr const char* shm_dir = "/dev/shm";
constexpr std::size_t page = 4096;

[[noreturn]] void fail(error e, const std::string& what)
{
    throw boost::system::system_error(make_error_code(e), what);
}

[[noreturn]] void fail_errno(const char* call, const std::string& name, int err)
{
    std::string what = std::string(call) + " " + name + ": " + std::strerror(err);
    if (err == EACCES || err == EPERM) fail(error::shm_permission, what);
    fail(error::shm_unavailable, what);
}

void check_name(std::string_view name)
{
    std::string_view rest = name.substr(name.empty() ? 0 : 1);
    if (name.empty() || name[0] != '/' || rest.empty() || rest.size() > 255 || rest == "." || rest == ".." ||
        rest.find('/') != std::string_view::npos || rest.find('\0') != std::string_view::npos)
        fail(error::shm_invalid_name, "shared-memory segment name \"" + std::string(name) + "\"");
}

std::string path_of(std::string_view name) { return std::string(shm_dir) + std::string(name); }

// The boot this segment belongs to: CLOCK_MONOTONIC (and so every `now` a limiter stores)
// starts again at each boot. Empty where the kernel does not say.
std::array<char, 40> boot_id() noexcept
{
    std::array<char, 40> id{};
    int fd = ::open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = ::read(fd, id.data(), id.size() - 1);
        ::close(fd);
        if (n < 0) n = 0;
        while (n > 0 && (id[static_cast<std::size_t>(n) - 1] == '\n')) --n;
        for (std::size_t i = static_cast<std::size_t>(n); i < id.size(); ++i) id[i] = 0;
    }
    return id;
}

struct fd_guard {
    int fd = -1;
    ~fd_guard()
    {
        if (fd >= 0) ::close(fd);
    }
};

struct map_guard {
    void* p = MAP_FAILED;
    std::size_t size = 0;
    ~map_guard()
    {
        if (p != MAP_FAILED) ::munmap(p, size);
    }
    void* release() noexcept
    {
        void* r = p;
        p = MAP_FAILED;
        return r;
    }
};

void fill_header(void* base, const detail::segment_layout& layout, std::size_t size, const std::array<char, 40>& boot)
{
    auto* h = ::new (base) segment_header{};
    h->magic = detail::segment_magic;
    h->layout_version = detail::segment_layout_version;
    h->header_size = sizeof(segment_header);
    h->byte_order = detail::byte_order_mark;
    h->word_size = sizeof(std::atomic<std::int64_t>);
    h->lock_free = 1;
    h->kind = layout.kind;
    h->size = size;
    h->config = layout.config;
    h->boot_id = boot;
    layout.init(static_cast<char*>(base) + detail::payload_offset, layout);
}

// Creates the segment, initialised, and publishes it under `path` unless a file is already
// there. Returns false when one is (the caller attaches to it). The file has no name until
// linkat gives it one in a single step: killed before, it vanishes with its descriptor.
bool create(const std::string& path, const std::string& name, unsigned mode, std::size_t size,
            const detail::segment_layout& layout, const std::array<char, 40>& boot)
{
    fd_guard f;
    f.fd = ::open(shm_dir, O_TMPFILE | O_RDWR | O_CLOEXEC, mode);
    if (f.fd < 0) fail_errno("open(O_TMPFILE)", shm_dir, errno);
    // The umask must not narrow (or the caller widen) what was asked.
    if (::fchmod(f.fd, mode) != 0) fail_errno("fchmod", name, errno);
    if (::ftruncate(f.fd, static_cast<off_t>(size)) != 0) fail_errno("ftruncate", name, errno);
    // The pages, reserved now: a segment larger than /dev/shm has room for (a key table of
    // many keys) is an error here, not a SIGBUS in whichever process first touches a page
    // the file system cannot give.
    if (int e = ::posix_fallocate(f.fd, 0, static_cast<off_t>(size)); e != 0 && e != EOPNOTSUPP && e != EINVAL)
        fail_errno("posix_fallocate", name, e);
    map_guard m;
    m.size = size;
    m.p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, f.fd, 0);
    if (m.p == MAP_FAILED) fail_errno("mmap", name, errno);
    fill_header(m.p, layout, size, boot);
    std::string self = "/proc/self/fd/" + std::to_string(f.fd);
    if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, path.c_str(), AT_SYMLINK_FOLLOW) == 0) return true;
    if (errno == EEXIST) return false;
    fail_errno("linkat", name, errno);
}

bool same_file(const struct stat& a, const struct stat& b) noexcept { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }

} // namespace

bool remove(std::string_view name)
{
    check_name(name);
    std::string path = path_of(name);
    if (::unlink(path.c_str()) == 0) return true;
    if (errno == ENOENT) return false;
    fail_errno("unlink", std::string(name), errno);
}

segment::segment(const segment_options& opts, const detail::segment_layout& layout) : name_(opts.name)
{
    check_name(opts.name);
    if (opts.mode > 0777) fail(error::invalid_option, "segment mode beyond 0777");
    const std::size_t need = detail::payload_offset + layout.payload;
    if (opts.size != 0 && (opts.size < need || opts.size > (std::size_t{1} << 40)))
        fail(error::invalid_option, "segment size " + std::to_string(opts.size) + " for " + opts.name +
                                        " (needs at least " + std::to_string(need) + ")");
    const std::size_t size = opts.size ? opts.size : (need + page - 1) / page * page;
    const std::string path = path_of(opts.name);
    const auto boot = boot_id();

    // Each pass attaches or creates; it goes round again only after another process
    // changed the name meanwhile (a creator won the race, or a stale segment was removed).
    for (int pass = 0;; ++pass) {
        if (pass == 100) fail(error::shm_unavailable, "segment " + opts.name + " keeps changing");
        fd_guard f;
        // O_NONBLOCK: a FIFO under the name must not hang us (it is refused below).
        f.fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        if (f.fd < 0) {
            if (errno == ELOOP || errno == EISDIR)
                fail(error::shm_incompatible, opts.name + " is not a sluice segment (a link or a directory)");
            if (errno != ENOENT) fail_errno("open", opts.name, errno);
            if (create(path, opts.name, opts.mode, size, layout, boot)) created_ = true;
            continue;   // attach to what is under the name now, ours or the winner's
        }
        struct stat st {};
        if (::fstat(f.fd, &st) != 0) fail_errno("fstat", opts.name, errno);
        if (!S_ISREG(st.st_mode) || st.st_size < static_cast<off_t>(sizeof(segment_header)))
            fail(error::shm_incompatible, opts.name + " is not a sluice segment");
        map_guard m;
        m.size = static_cast<std::size_t>(st.st_size);
        m.p = ::mmap(nullptr, m.size, PROT_READ | PROT_WRITE, MAP_SHARED, f.fd, 0);
        if (m.p == MAP_FAILED) fail_errno("mmap", opts.name, errno);
        const auto* h = static_cast<const segment_header*>(m.p);
        if (h->magic != detail::segment_magic || h->byte_order != detail::byte_order_mark)
            fail(error::shm_incompatible, opts.name + " is not a sluice segment");
        if (h->layout_version != detail::segment_layout_version || h->header_size != sizeof(segment_header) ||
            h->word_size != sizeof(std::atomic<std::int64_t>) || h->lock_free != 1 || h->kind != layout.kind ||
            h->size != m.size || m.size < need)
            fail(error::shm_incompatible, opts.name + ": layout version " + std::to_string(h->layout_version) +
                                              ", kind " + std::to_string(h->kind) + " (this build: version " +
                                              std::to_string(detail::segment_layout_version) + ", kind " +
                                              std::to_string(layout.kind) + ")");
        if (h->boot_id != boot) {
            // Stale: its instants are on another boot's clock. Whoever holds the lock
            // removes it if it is still the one under the name; everyone then reopens.
            if (::flock(f.fd, LOCK_EX) != 0) fail_errno("flock", opts.name, errno);
            struct stat now {};
            if (::stat(path.c_str(), &now) == 0 && same_file(now, st) && ::unlink(path.c_str()) != 0 && errno != ENOENT)
                fail_errno("unlink (stale segment)", opts.name, errno);
            continue;
        }
        if (h->config != layout.config || (opts.size != 0 && opts.size != m.size))
            fail(error::shm_config_mismatch, opts.name + " exists with another configuration");
        size_ = m.size;
        base_ = m.release();
        return;
    }
}

segment::~segment()
{
    if (base_) ::munmap(base_, size_);
}

} // namespace sluice::shm
