// A named segment is a file that any process of its owner (or root) can truncate while
// this process has it mapped: the next access beyond the new end raises SIGBUS, whose
// default action kills the process (a whole server, for one truncate). The handler here
// replaces the faulting mapping with private memory and marks it, so that the access completes and
// the decision that made it answers error::shm_truncated (segment.hpp says why and how).
#include "truncation_guard.hpp"

#include <sluice/error.hpp>

#include <boost/system/system_error.hpp>

#include <cerrno>
#include <csignal>
#include <mutex>

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace sluice::shm::detail {
namespace {

// Every record ever made, newest first; the handler walks it without a lock.
std::atomic<watched_mapping*> head{nullptr};
// Registration (not the handler) takes it.
std::mutex registry;
bool installed = false;
struct sigaction previous {};

// What SIGBUS would have done without us: the previous handler, or the default action.
void pass_on(int sig, siginfo_t* info, void* context)
{
    if (previous.sa_flags & SA_SIGINFO) {
        previous.sa_sigaction(sig, info, context);
        return;
    }
    if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
        previous.sa_handler(sig);
        return;
    }
    const bool sent = info == nullptr || info->si_code <= 0;   // kill(), sigqueue(): not a fault
    if (sent && previous.sa_handler == SIG_IGN) return;
    // The default action: a fault happens again when the handler returns and kills the
    // process; a signal that was sent is sent again, delivered once the handler returns.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    ::sigaction(sig, &dfl, nullptr);
    if (sent) ::raise(sig);
}

// The bytes the first page of a replacement holds: a GCRA word of them (0x7f7f...7f) is
// beyond what policy::shm_gcra's fast path decides on, so that every decision on the replacement
// takes the path that reads the mark (and a keyed table's slot of them is never a key's:
// its generation is odd). The rest of the replacement is zeros (pages never touched).
constexpr unsigned char poison = 0x7f;
constexpr std::size_t poisoned = 4096;

// Replaces [b, b + n) with private memory, its first page poisoned, in one step (mremap
// over it): no thread ever reads a replacement not yet poisoned. Raw system calls only.
bool replace(std::uintptr_t b, std::size_t n) noexcept
{
    const long fresh = ::syscall(SYS_mmap, 0, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (fresh == -1) return false;
    auto* p = reinterpret_cast<volatile unsigned char*>(fresh);
    for (std::size_t i = 0; i < n && i < poisoned; ++i) p[i] = poison;
    if (::syscall(SYS_mremap, fresh, n, n, MREMAP_MAYMOVE | MREMAP_FIXED, b) == static_cast<long>(b)) return true;
    ::syscall(SYS_munmap, fresh, n);
    return false;
}

// Only async-signal-safe steps: atomic loads and stores, a loop of stores, and the mmap,
// mremap and munmap system calls themselves.
void on_sigbus(int sig, siginfo_t* info, void* context)
{
    const int saved = errno;
    if (info != nullptr && info->si_code > 0) {
        const auto at = reinterpret_cast<std::uintptr_t>(info->si_addr);
        for (watched_mapping* w = head.load(std::memory_order_acquire); w != nullptr; w = w->next) {
            const std::uintptr_t b = w->begin.load(std::memory_order_acquire);
            const std::size_t n = w->size.load(std::memory_order_acquire);
            if (b == 0 || at - b >= n || w->begin.load(std::memory_order_acquire) != b) continue;
            // Marked first: a thread that reads the replacement then reads the mark.
            w->truncated.store(true, std::memory_order_seq_cst);
            if (replace(b, n)) {
                errno = saved;
                return;   // the access runs again, on the replacement
            }
            break;
        }
    }
    errno = saved;
    pass_on(sig, info, context);
}

} // namespace

watched_mapping* watch(void* base, std::size_t size)
{
    std::lock_guard<std::mutex> lock(registry);
    if (!installed) {
        struct sigaction sa {};
        sa.sa_sigaction = on_sigbus;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
        sigemptyset(&sa.sa_mask);
        if (::sigaction(SIGBUS, &sa, &previous) != 0)
            throw boost::system::system_error(make_error_code(error::shm_unavailable), "sigaction(SIGBUS)");
        installed = true;
    }
    watched_mapping* w = nullptr;
    for (watched_mapping* p = head.load(std::memory_order_relaxed); p != nullptr && !w; p = p->next)
        if (p->begin.load(std::memory_order_relaxed) == 0) w = p;
    const bool fresh = w == nullptr;
    if (fresh) w = new watched_mapping;
    w->truncated.store(false, std::memory_order_relaxed);
    w->size.store(size, std::memory_order_relaxed);
    w->begin.store(reinterpret_cast<std::uintptr_t>(base), std::memory_order_release);
    if (fresh) {
        w->next = head.load(std::memory_order_relaxed);
        head.store(w, std::memory_order_release);
    }
    return w;
}

void unwatch(watched_mapping* w) noexcept
{
    std::lock_guard<std::mutex> lock(registry);
    w->begin.store(0, std::memory_order_release);
}

} // namespace sluice::shm::detail
