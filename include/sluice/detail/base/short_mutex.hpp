// A mutex for critical sections of a few hundred nanoseconds: it spins a little before it
// sleeps.
#pragma once

#include <atomic>

namespace sluice::detail {

/// A keyed store's shard is held for one look-up and one decision, two cache misses at
/// most. std::mutex puts a contended locker to sleep at once (a futex wait and a wake-up,
/// microseconds, where the holder would have let go within a few hundred nanoseconds);
/// this one spins for about a microsecond first, then sleeps as std::mutex does (Drepper's
/// three-state futex mutex, on std::atomic::wait). Meets Lockable.
class short_mutex {
public:
    short_mutex() = default;
    short_mutex(const short_mutex&) = delete;
    short_mutex& operator=(const short_mutex&) = delete;

    void lock() noexcept
    {
        int expected = free;
        if (!state_.compare_exchange_strong(expected, locked, std::memory_order_acquire, std::memory_order_relaxed))
            lock_contended();
    }

    bool try_lock() noexcept
    {
        int expected = free;
        return state_.compare_exchange_strong(expected, locked, std::memory_order_acquire, std::memory_order_relaxed);
    }

    void unlock() noexcept
    {
        if (state_.exchange(free, std::memory_order_release) == sleepers)
            state_.notify_one();
    }

private:
    static constexpr int free = 0, locked = 1, sleepers = 2;   // sleepers: locked, maybe with waiters
    static constexpr int spins = 64;

    [[gnu::noinline]] void lock_contended() noexcept
    {
        for (int i = 0; i < spins; ++i) {
            relax();
            int expected = free;
            if (state_.load(std::memory_order_relaxed) == free &&
                state_.compare_exchange_weak(expected, locked, std::memory_order_acquire, std::memory_order_relaxed))
                return;
        }
        // Whoever takes it from here on marks it as having sleepers, so that unlock wakes one.
        while (state_.exchange(sleepers, std::memory_order_acquire) != free)
            state_.wait(sleepers, std::memory_order_relaxed);
    }

    static void relax() noexcept
    {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }

    std::atomic<int> state_{free};
};

} // namespace sluice::detail
