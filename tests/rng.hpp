// The tests' one random generator: a seed gives the same sequence on every machine and
// standard library (the standard distributions do not promise that), so a failure found
// with a seed can be replayed anywhere.
#pragma once

#include <cstdint>
#include <random>

#include <unistd.h>

namespace sluice_test {

/// SplitMix64, with the draws the tests need. A UniformRandomBitGenerator, for std::shuffle.
class rng {
public:
    using result_type = std::uint64_t;

    explicit rng(std::uint64_t seed) noexcept : s_(seed) {}

    /// Seeded differently in every process: for choosing what must not collide between
    /// tests that run at once (a server's port), never for a test's own draws.
    static rng per_process() { return rng(std::random_device{}() ^ (std::uint64_t(::getpid()) << 32)); }

    static constexpr result_type min() noexcept { return 0; }
    static constexpr result_type max() noexcept { return ~result_type{0}; }
    result_type operator()() noexcept { return next(); }

    std::uint64_t next() noexcept
    {
        std::uint64_t z = (s_ += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
    }

    /// Uniform in [lo, hi], any lo <= hi (the whole int64 range too).
    std::int64_t in(std::int64_t lo, std::int64_t hi) noexcept
    {
        std::uint64_t span = static_cast<std::uint64_t>(hi) - static_cast<std::uint64_t>(lo) + 1;
        std::uint64_t x = span == 0 ? next() : next() % span;
        return static_cast<std::int64_t>(static_cast<std::uint64_t>(lo) + x);
    }

    /// Uniform in [0, n), n > 0.
    std::uint64_t below(std::uint64_t n) noexcept { return next() % n; }

    /// True `percent` times in 100.
    bool chance(int percent) noexcept { return static_cast<int>(next() % 100) < percent; }

    /// Uniform in [lo, hi).
    double uniform(double lo, double hi) noexcept
    {
        return lo + (hi - lo) * static_cast<double>(next() >> 11) * 0x1.0p-53;
    }

private:
    std::uint64_t s_;
};

} // namespace sluice_test
