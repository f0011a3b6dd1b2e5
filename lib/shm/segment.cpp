// The life of a shared-memory segment (see include/sluice/shm/segment.hpp): a named one
// created without a name and published whole, attached after checking its owner, mode and
// header, replaced when stale; an anonymous one a sealed memfd. Plain system calls on files
// under /dev/shm (what shm_open does on Linux), so that the creation can use O_TMPFILE and
// linkat.
#include <sluice/shm/segment.hpp>

#include <boost/system/system_error.hpp>

#include "truncation_guard.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <thread>

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

std::string octal(unsigned mode)
{
    char buf[8];
    std::snprintf(buf, sizeof buf, "0%03o", mode & 0777u);
    return buf;
}

// Another user's file, or one open to more than asked: another user may have made it (a
// name under /dev/shm is anyone's to take first) and may read or change it. Checked before
// anything in it is read, and before it could be replaced as stale.
void check_owner(const struct stat& st, unsigned mode, const std::string& name)
{
    const unsigned has = static_cast<unsigned>(st.st_mode) & 0777u;
    if (st.st_uid == ::geteuid() && (has & ~mode) == 0) return;
    fail(error::shm_foreign, name + " is owned by uid " + std::to_string(st.st_uid) + " with mode " + octal(has) +
                                 "; this process (uid " + std::to_string(::geteuid()) + ") asked for mode " +
                                 octal(mode) + ": refused, left as it is");
}

// Takes the file's lock for lock_timeout at most: its holder may be stopped.
void lock_file(int fd, std::chrono::nanoseconds timeout, const std::string& name)
{
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (auto pause = std::chrono::microseconds(50);; pause = std::min(pause * 2, std::chrono::microseconds(10'000))) {
        if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return;
        if (errno != EWOULDBLOCK && errno != EINTR) fail_errno("flock", name, errno);
        if (std::chrono::steady_clock::now() >= deadline)
            fail(error::shm_lock_timeout, name + ": the lock of its stale segment is held by a process that does not let go");
        std::this_thread::sleep_for(pause);
    }
}

// A new anonymous segment: a memfd of `size` bytes, sealed so that no process can shrink
// (or grow) it, initialised. Nothing names it; forks inherit its descriptor.
int create_anonymous(unsigned mode, std::size_t size, const detail::segment_layout& layout,
                     const std::array<char, 40>& boot)
{
    fd_guard f;
    f.fd = ::memfd_create("sluice-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (f.fd < 0) fail_errno("memfd_create", "anonymous segment", errno);
    // Reopening it through /proc/PID/fd goes by these bits.
    if (::fchmod(f.fd, mode) != 0) fail_errno("fchmod", "anonymous segment", errno);
    if (::ftruncate(f.fd, static_cast<off_t>(size)) != 0) fail_errno("ftruncate", "anonymous segment", errno);
    if (int e = ::posix_fallocate(f.fd, 0, static_cast<off_t>(size)); e != 0 && e != EOPNOTSUPP && e != EINVAL)
        fail_errno("posix_fallocate", "anonymous segment", e);
    if (::fcntl(f.fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
        fail_errno("fcntl(F_ADD_SEALS)", "anonymous segment", errno);
    map_guard m;
    m.size = size;
    m.p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, f.fd, 0);
    if (m.p == MAP_FAILED) fail_errno("mmap", "anonymous segment", errno);
    fill_header(m.p, layout, size, boot);
    int fd = f.fd;
    f.fd = -1;
    return fd;
}

// Whether the file can shrink under a mapping (not sealed against it).
bool can_shrink(int fd) noexcept
{
    int seals = ::fcntl(fd, F_GET_SEALS);
    return seals < 0 || !(seals & F_SEAL_SHRINK);
}

} // namespace

bool remove(std::string_view name)
{
    check_name(name);
    std::string path = path_of(name);
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0 && st.st_uid != ::geteuid())
        fail(error::shm_foreign, std::string(name) + " is owned by uid " + std::to_string(st.st_uid) +
                                     ": not removed (this process is uid " + std::to_string(::geteuid()) + ")");
    if (::unlink(path.c_str()) == 0) return true;
    if (errno == ENOENT) return false;
    fail_errno("unlink", std::string(name), errno);
}

segment::segment(const segment_options& opts, const detail::segment_layout& layout)
    : name_(opts.name), lock_timeout_(opts.lock_timeout)
{
    const int ways = int(!opts.name.empty()) + int(opts.anonymous) + int(opts.descriptor >= 0);
    if (ways > 1) fail(error::invalid_option, "segment_options: a name, anonymous or a descriptor, not two of them");
    if (ways == 0 || !opts.name.empty()) check_name(opts.name);
    if (opts.mode > 0777) fail(error::invalid_option, "segment mode beyond 0777");
    if (opts.lock_timeout.count() < 0) fail(error::invalid_option, "segment_options::lock_timeout below 0");
    const std::string shown = opts.anonymous ? std::string("anonymous segment")
                              : opts.descriptor >= 0 ? "segment on descriptor " + std::to_string(opts.descriptor)
                                                     : opts.name;
    const std::size_t need = detail::payload_offset + layout.payload;
    if (opts.size != 0 && (opts.size < need || opts.size > (std::size_t{1} << 40)))
        fail(error::invalid_option, "segment size " + std::to_string(opts.size) + " for " + shown +
                                        " (needs at least " + std::to_string(need) + ")");
    const std::size_t size = opts.size ? opts.size : (need + page - 1) / page * page;
    const auto boot = boot_id();

    if (opts.anonymous) {
        fd_ = create_anonymous(opts.mode, size, layout, boot);
        fd_guard f{fd_};
        attach(f.fd, size, layout, opts, boot, shown);
        f.fd = -1;
        created_ = true;
        return;
    }
    if (opts.descriptor >= 0) {
        fd_guard f;
        f.fd = ::fcntl(opts.descriptor, F_DUPFD_CLOEXEC, 0);
        if (f.fd < 0) fail_errno("fcntl(F_DUPFD_CLOEXEC)", shown, errno);
        struct stat st {};
        if (::fstat(f.fd, &st) != 0) fail_errno("fstat", shown, errno);
        if (!S_ISREG(st.st_mode)) fail(error::shm_incompatible, shown + " is not a sluice segment");
        // The caller's own descriptor: its mode is its creator's choice, its owner must be us.
        check_owner(st, 0777, shown);
        if (attach(f.fd, static_cast<std::size_t>(st.st_size), layout, opts, boot, shown))
            fail(error::shm_incompatible, shown + " was made on another boot");
        fd_ = f.fd;
        f.fd = -1;
        return;
    }

    const std::string path = path_of(opts.name);
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
        if (!S_ISREG(st.st_mode)) fail(error::shm_incompatible, opts.name + " is not a sluice segment");
        check_owner(st, opts.mode, opts.name);
        if (st.st_size < static_cast<off_t>(sizeof(segment_header)))
            fail(error::shm_incompatible, opts.name + " is not a sluice segment");
        if (attach(f.fd, static_cast<std::size_t>(st.st_size), layout, opts, boot, shown)) {
            // Stale: its instants are on another boot's clock. Whoever holds the lock
            // removes it if it is still the one under the name; everyone then reopens.
            lock_file(f.fd, opts.lock_timeout, opts.name);
            struct stat now {};
            if (::stat(path.c_str(), &now) == 0 && same_file(now, st) && ::unlink(path.c_str()) != 0 && errno != ENOENT)
                fail_errno("unlink (stale segment)", opts.name, errno);
            continue;
        }
        fd_ = f.fd;
        f.fd = -1;
        return;
    }
}

bool segment::attach(int fd, std::size_t size, const detail::segment_layout& layout, const segment_options& opts,
                     const std::array<char, 40>& boot, const std::string& shown)
{
    map_guard m;
    m.size = size;
    m.p = ::mmap(nullptr, m.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m.p == MAP_FAILED) fail_errno("mmap", shown, errno);
    // Watched before the first read: the file may be truncated at any instant from now on.
    detail::watched_mapping* w = nullptr;
    if (opts.catch_truncation && can_shrink(fd)) w = detail::watch(m.p, m.size);
    struct unwatch_guard {
        detail::watched_mapping* w;
        ~unwatch_guard()
        {
            if (w) detail::unwatch(w);
        }
    } uw{w};
    bool stale = false;
    std::string what;
    error e = detail::check_header(m.p, m.size, layout, opts.size, boot, stale, what);
    if (w && w->truncated.load()) {
        m.release();   // replaced, and kept: see ~segment
        fail(error::shm_truncated, shown + " was truncated while being attached");
    }
    if (e != error{}) fail(e, shown + ": " + what);
    if (stale) return true;
    size_ = m.size;
    base_ = m.release();
    if (w) {
        watch_ = w;
        truncated_ = &w->truncated;
        uw.w = nullptr;
    }
    return false;
}

segment::~segment()
{
    auto* w = static_cast<detail::watched_mapping*>(watch_);
    bool replaced = false;
    if (w) {
        detail::unwatch(w);
        replaced = w->truncated.load();
    }
    // A truncated segment's replacement stays mapped: see the class comment.
    if (base_ && !replaced) ::munmap(base_, size_);
    if (fd_ >= 0) ::close(fd_);
}

} // namespace sluice::shm
