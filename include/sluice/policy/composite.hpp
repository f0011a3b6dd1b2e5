// Composite: several limits admitted together, all or nothing (10/s AND 1000/h).
#pragma once

#include <sluice/decision.hpp>
#include <sluice/detail/base/arith.hpp>

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <mutex>
#include <tuple>
#include <utility>

namespace sluice::policy {

namespace detail_all_of {

template <std::size_t I, class P>
struct part {
    template <class Args>
    explicit part(Args&& args) : value(std::make_from_tuple<P>(std::forward<Args>(args))) {}
    P value;
};

template <class Seq, class... P>
struct parts;

template <std::size_t... I, class... P>
struct parts<std::index_sequence<I...>, P...> : part<I, P>... {
    template <class... Args>
    explicit parts(Args&&... args) : part<I, P>(std::forward<Args>(args))... {}

    template <class F>
    void each(F&& f) { (f(static_cast<part<I, P>&>(*this).value), ...); }

    template <class F>
    void each(F&& f) const { (f(static_cast<const part<I, P>&>(*this).value), ...); }
};

} // namespace detail_all_of

/// Admits n permits only when every part admits them, and then consumes from all: it never
/// consumes from one limit when another rejects. Parts are policies (gcra, fixed_window,
/// sliding_log, sliding_window_counter, or another composite), each built in place from a
/// tuple of its constructor arguments:
///
///     composite<gcra, sliding_log> p{std::tuple{rate::per_second(10), 10},
///                                 std::tuple{1000, std::chrono::hours(1)}};
///
/// A decision checks every part and then commits to every part under one mutex (a short
/// critical section: the parts' own operations, no allocation), so parts are owned by the
/// composite and must not be used on their own. The decision reports the longest
/// retry_after and reset_after and the smallest remaining over the parts; when it refuses,
/// nothing is taken, so a part that would have admitted counts with its state as it stands
/// (remaining and reset_after without the n it would have taken).
template <class... P>
class composite {
public:
    static_assert(sizeof...(P) >= 1, "composite needs at least one part");
    /// This policy never commits permits in the future: waiters are retried.
    static constexpr bool reserves_ahead = false;

    /// Builds each part from its tuple of constructor arguments, in order; throws what a
    /// part's constructor throws.
    template <class... Args>
        requires(sizeof...(Args) == sizeof...(P))
    explicit composite(Args&&... args) : parts_(std::forward<Args>(args)...)
    {
    }

    composite(const composite&) = delete;
    composite& operator=(const composite&) = delete;

    /// Admits n permits at `now` if every part admits them; then it consumes from all, else from none; the decision says how long until they
    /// would be, otherwise.
    decision try_acquire(std::uint64_t n, std::int64_t now) noexcept
    {
        std::lock_guard lock(mutex_);
        decision d = combined(n, now);
        if (d.admitted)
            parts_.each([&](auto& p) { p.try_acquire(n, now); });
        return d;
    }

    /// The decision try_acquire would take, without consuming anything.
    decision check(std::uint64_t n, std::int64_t now) const noexcept
    {
        std::lock_guard lock(mutex_);
        return combined(n, now);
    }

    /// Admits at once when every part can and nothing is `ahead`; never commits in the
    /// future. Otherwise returns predict(n, now, ahead), with error::timed_out
    /// beyond max_wait.
    reservation reserve(std::uint64_t n, std::int64_t now, std::int64_t max_wait, std::uint64_t ahead = 0) noexcept
    {
        std::lock_guard lock(mutex_);
        decision d = combined(n, now);
        if (d.error)
            return sluice::detail::invalid_reservation(static_cast<error>(d.error.value()));
        if (ahead == 0 && d.admitted) {
            parts_.each([&](auto& p) { p.try_acquire(n, now); });
            return {true, now, {}};
        }
        return sluice::detail::deferred_reservation(predict_locked(n, now, ahead), now, max_wait);
    }

    /// The latest of the parts' predictions: a lower bound for the composite.
    std::int64_t predict(std::uint64_t n, std::int64_t now, std::uint64_t ahead = 0) const noexcept
    {
        std::lock_guard lock(mutex_);
        return predict_locked(n, now, ahead);
    }

    /// The latest of the parts' idle times: fresh when every part is.
    std::int64_t idle_at(std::int64_t now) const noexcept
    {
        std::lock_guard lock(mutex_);
        std::int64_t at = sluice::detail::min_ns;
        parts_.each([&](const auto& p) { at = std::max(at, p.idle_at(now)); });
        return at;
    }

    /// How long until every part is back to its full, idle state, taking nothing.
    std::chrono::nanoseconds reset_after(std::int64_t now) const noexcept
    {
        std::lock_guard lock(mutex_);
        std::chrono::nanoseconds r{0};
        parts_.each([&](const auto& p) { r = std::max(r, untaken_reset(p, now)); });
        return r;
    }

    /// The smallest burst among the parts: larger requests can never be admitted.
    std::uint64_t burst() const noexcept
    {
        std::uint64_t b = ~std::uint64_t{0};
        parts_.each([&](const auto& p) { b = std::min<std::uint64_t>(b, p.burst()); });
        return b;
    }

    /// The I-th part, for set_rate() / set_limit() and inspection. Its try_acquire must
    /// not be called directly.
    template <std::size_t I>
    auto& part() noexcept
    {
        using T = std::tuple_element_t<I, std::tuple<P...>>;
        return static_cast<detail_all_of::part<I, T>&>(parts_).value;
    }

    /// Settles `cost` permits admitted at `at` with their `actual` cost in every part, by
    /// each part's own settle (see each policy), under the composite's lock: the parts end
    /// as if each had admitted `actual`. Returns 0: waiters are retried, not moved up.
    std::int64_t settle(std::uint64_t cost, std::uint64_t actual, std::int64_t at, std::int64_t now) noexcept
    {
        std::lock_guard lock(mutex_);
        parts_.each([&](auto& p) { p.settle(cost, actual, at, now); });
        return 0;
    }

private:
    // How long until p is idle as it stands: its own answer when it has one (gcra, composite),
    // else the time until idle_at.
    template <class Part>
    static std::chrono::nanoseconds untaken_reset(const Part& p, std::int64_t now) noexcept
    {
        if constexpr (requires { { p.reset_after(now) } -> std::convertible_to<std::chrono::nanoseconds>; }) {
            return p.reset_after(now);
        } else {
            std::int64_t at = p.idle_at(now);
            return std::chrono::nanoseconds{at > now ? sluice::detail::sat_sub(at, now) : 0};
        }
    }

    decision combined(std::uint64_t n, std::int64_t now) const noexcept
    {
        decision out;
        out.admitted = true;
        out.remaining = ~std::uint64_t{0};
        // A part that would admit reports what remains after taking n and when it is idle
        // again after taking it; if another part refuses, nothing is taken, so its
        // remaining is n more and its reset_after is that of its present state.
        std::uint64_t untaken = ~std::uint64_t{0};
        std::chrono::nanoseconds untaken_reset_after{0};
        parts_.each([&](const auto& p) {
            decision d = p.check(n, now);
            if (d.error && !out.error) out.error = d.error;
            out.admitted = out.admitted && d.admitted;
            out.retry_after = std::max(out.retry_after, d.retry_after);
            out.reset_after = std::max(out.reset_after, d.reset_after);
            out.remaining = std::min(out.remaining, d.remaining);
            untaken = std::min(untaken, d.admitted ? d.remaining + n : d.remaining);
            untaken_reset_after = std::max(untaken_reset_after, d.admitted ? untaken_reset(p, now) : d.reset_after);
        });
        if (!out.admitted && !out.error) {
            out.remaining = untaken;
            out.reset_after = untaken_reset_after;
        }
        if (out.error) {
            out.admitted = false;
            out.retry_after = std::chrono::nanoseconds::max();
        }
        if (!out.admitted && out.retry_after.count() == 0)
            out.retry_after = std::chrono::nanoseconds{1};
        return out;
    }

    std::int64_t predict_locked(std::uint64_t n, std::int64_t now, std::uint64_t ahead) const noexcept
    {
        std::int64_t at = now;
        parts_.each([&](const auto& p) { at = std::max(at, p.predict(n, now, ahead)); });
        return at;
    }

    mutable std::mutex mutex_;
    detail_all_of::parts<std::index_sequence_for<P...>, P...> parts_;
};

} // namespace sluice::policy
