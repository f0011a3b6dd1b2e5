// What a polite crawler does after a failed attempt (a 429 or 503, a connection error):
// wait as long as the server's Retry-After says, else back off exponentially with full
// jitter, and give up on the page after a bound. Sans-io: no clock, no I/O; the random
// generator is seeded by the caller, so that tests replay it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <random>
#include <stdexcept>

namespace crawl {

class retry_policy {
public:
    /// What to do after a failure.
    struct decision {
        bool give_up = false;
        /// How long the host must not be asked again (0 when giving up).
        std::chrono::nanoseconds delay{0};
        /// The delay is the server's Retry-After, not a backoff of our own.
        bool from_retry_after = false;
    };

    /// base: the first backoff's bound; cap: the largest; max_attempts: attempts of one
    /// page before it is given up (>= 1); max_retry_after: a longer Retry-After is cut to
    /// this, so that a hostile value cannot stop the crawl for ever.
    retry_policy(std::chrono::nanoseconds base, std::chrono::nanoseconds cap, std::uint64_t max_attempts,
                 std::chrono::nanoseconds max_retry_after, std::uint64_t seed)
        : base_(base), cap_(cap), max_attempts_(max_attempts), max_retry_after_(max_retry_after), rng_(seed)
    {
        if (base <= std::chrono::nanoseconds::zero() || cap < base || max_attempts == 0 ||
            max_retry_after <= std::chrono::nanoseconds::zero())
            throw std::invalid_argument("retry_policy: base > 0, cap >= base, max_attempts >= 1, max_retry_after > 0");
    }

    /// After attempt number `attempts` (1 for the first) of a page failed, with the host
    /// failing `host_failures` times in a row now (>= 1), and the server's Retry-After if
    /// it sent a usable one (a delay already converted from an HTTP-date; <= 0 counts as
    /// none: a date in the past asks for nothing).
    decision after_failure(std::uint64_t attempts, std::uint64_t host_failures,
                           std::optional<std::chrono::nanoseconds> retry_after)
    {
        decision d;
        if (attempts >= max_attempts_) {
            d.give_up = true;
            return d;
        }
        if (retry_after && *retry_after > std::chrono::nanoseconds::zero()) {
            d.delay = std::min(*retry_after, max_retry_after_);
            d.from_retry_after = true;
            return d;
        }
        d.delay = std::chrono::nanoseconds(std::uniform_int_distribution<std::int64_t>(0, bound(host_failures).count())(rng_));
        return d;
    }

    /// The bound of the full-jitter backoff after `failures` failures in a row:
    /// min(cap, base x 2^(failures - 1)).
    std::chrono::nanoseconds bound(std::uint64_t failures) const noexcept
    {
        std::chrono::nanoseconds b = base_;
        for (std::uint64_t i = 1; i < failures && b < cap_; ++i)
            b = b > cap_ / 2 ? cap_ : b * 2;
        return std::min(b, cap_);
    }

private:
    std::chrono::nanoseconds base_, cap_;
    std::uint64_t max_attempts_;
    std::chrono::nanoseconds max_retry_after_;
    std::mt19937_64 rng_;
};

} // namespace crawl
