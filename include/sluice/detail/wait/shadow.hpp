// Shadow mode, once for every limiter: basic_limiter lets through what the limit refuses,
// counts it here and reports it. The backends only decide, as they always do.
#pragma once

#include <sluice/decision.hpp>
#include <sluice/detail/base/arith.hpp>
#include <sluice/error.hpp>
#include <sluice/limiter_stats.hpp>
#include <sluice/shadow.hpp>

#include <boost/asio/associator.hpp>
#include <boost/system/error_code.hpp>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

namespace sluice::detail {

/// What a request refused by the limit would have met: nothing (`dark` false: admitted,
/// or an error that stays one), or a refusal or a wait let through in the dark.
struct shadow_verdict {
    bool dark = false;
    shadow_kind what = shadow_kind::try_refused;
    std::int64_t wait = 0;
    boost::system::error_code error;
};

// A refusal by the limit: no error, or a request larger than it ever admits at once.
// invalid_count (n == 0) is the caller's mistake, and stays an error.
inline bool limit_refused(const decision& d) noexcept
{
    return !d.admitted && (!d.error || d.error == error::exceeds_limit);
}

/// A try's verdict: a decision's, or a concurrency limit's permit (refused: empty).
inline shadow_verdict judge_try(const decision& d) noexcept
{
    if (!limit_refused(d))
        return {};
    return {true, shadow_kind::try_refused, d.retry_after.count(), d.error};
}

template <class Permit>
shadow_verdict judge_try(const Permit& p) noexcept
{
    if (p)
        return {};
    return {true, shadow_kind::try_refused, 0, {}};
}

/// An acquire's verdict from the try that decided it, as the wait engine would have
/// answered it with nobody queued: a wait within max_wait, error::timed_out beyond it.
inline shadow_verdict judge_acquire(const decision& d, std::int64_t max_wait) noexcept
{
    if (!limit_refused(d))
        return {};
    const std::int64_t wait = d.retry_after.count();
    if (d.error)
        return {true, shadow_kind::refused, wait, d.error};
    if (wait > std::max<std::int64_t>(max_wait, 0))
        return {true, shadow_kind::refused, wait, make_error_code(error::timed_out)};
    return {true, shadow_kind::waited, wait, {}};
}

/// A concurrency limit predicts no wait: a refused request waits while max_wait allows.
template <class Permit>
shadow_verdict judge_acquire(const Permit& p, std::int64_t max_wait) noexcept
{
    if (p)
        return {};
    if (max_wait <= 0)
        return {true, shadow_kind::refused, 0, make_error_code(error::timed_out)};
    return {true, shadow_kind::waited, 0, {}};
}

/// Calls f(text) with a key written as text: a string as it is, an integer in decimal, an
/// address by its to_string(); anything else as empty.
template <class K, class F>
void with_key_text(const K& key, F&& f)
{
    if constexpr (std::is_convertible_v<const K&, std::string_view>) {
        f(std::string_view(key));
    } else if constexpr (std::is_integral_v<K> || std::is_same_v<K, uint128>) {
        char buf[48];
        char* end = buf + sizeof buf;
        char* p = end;
        uint128 v = static_cast<uint128>(key);
        bool negative = false;
        if constexpr (std::is_signed_v<K>) {
            using U = std::make_unsigned_t<K>;
            negative = key < 0;
            v = negative ? U(0) - static_cast<U>(key) : static_cast<U>(key);
        }
        do {
            *--p = static_cast<char>('0' + static_cast<int>(v % 10));
            v /= 10;
        } while (v != 0);
        if (negative) *--p = '-';
        f(std::string_view(p, static_cast<std::size_t>(end - p)));
    } else if constexpr (requires { { key.to_string() } -> std::convertible_to<std::string>; }) {
        const std::string s = key.to_string();
        f(std::string_view(s));
    } else {
        f(std::string_view());
    }
}

/// The counts and the report of a limiter in shadow mode, shared by the limiter and its
/// pending operations. Safe from any thread: each count is one relaxed atomic, taken
/// only for what is let through in the dark and for the acquires it answers.
class shadow_state {
public:
    explicit shadow_state(const shadow_options& o) : report_(o.report) {}

    /// Counts what a try or an acquire of n permits (of key...) met, and reports it.
    template <class... Key>
    void note(const shadow_verdict& v, std::uint64_t n, const Key&... key) noexcept
    {
        switch (v.what) {
        case shadow_kind::try_refused:
            try_refused_.fetch_add(1, std::memory_order_relaxed);
            break;
        case shadow_kind::refused:
            refused_.fetch_add(1, std::memory_order_relaxed);
            break;
        case shadow_kind::waited:
            waited_.fetch_add(1, std::memory_order_relaxed);
            add_wait(v.wait);
            break;
        }
        if (!report_)
            return;
        shadow_event e{v.what, n, {}, std::chrono::nanoseconds(v.wait), v.error};
        if constexpr (sizeof...(Key) == 0) {
            report_(e);
        } else {
            with_key_text(key..., [&](std::string_view text) {
                e.key = text;
                report_(e);
            });
        }
    }

    /// An acquire answered through shadow mode, with `ec` (empty: admitted).
    void count_acquire(const boost::system::error_code& ec) noexcept
    {
        auto& c = !ec ? admitted_ : ec == error::closed ? closed_ : failed_;
        c.fetch_add(1, std::memory_order_relaxed);
    }

    /// Adds its counts to the backend's.
    void add_to(limiter_stats& s) const noexcept
    {
        s.admitted += admitted_.load(std::memory_order_relaxed);
        s.closed += closed_.load(std::memory_order_relaxed);
        s.refused += failed_.load(std::memory_order_relaxed);
        s.shadow.enabled = true;
        s.shadow.try_refused = try_refused_.load(std::memory_order_relaxed);
        s.shadow.refused = refused_.load(std::memory_order_relaxed);
        s.shadow.waited = waited_.load(std::memory_order_relaxed);
        s.shadow.total_wait = std::chrono::nanoseconds(total_wait_.load(std::memory_order_relaxed));
        s.shadow.longest_wait = std::chrono::nanoseconds(longest_wait_.load(std::memory_order_relaxed));
    }

private:
    void add_wait(std::int64_t w) noexcept
    {
        // Saturates, as limiter_stats::total_wait does.
        std::int64_t t = total_wait_.load(std::memory_order_relaxed);
        while (!total_wait_.compare_exchange_weak(t, sat_add(t, w), std::memory_order_relaxed)) {}
        std::int64_t l = longest_wait_.load(std::memory_order_relaxed);
        while (w > l && !longest_wait_.compare_exchange_weak(l, w, std::memory_order_relaxed)) {}
    }

    std::function<void(const shadow_event&)> report_;
    std::atomic<std::uint64_t> try_refused_{0};
    std::atomic<std::uint64_t> refused_{0};
    std::atomic<std::uint64_t> waited_{0};
    std::atomic<std::int64_t> total_wait_{0};
    std::atomic<std::int64_t> longest_wait_{0};
    std::atomic<std::uint64_t> admitted_{0};
    std::atomic<std::uint64_t> closed_{0};
    std::atomic<std::uint64_t> failed_{0};
};

/// A decision let through: admitted, nothing to wait for; remaining and reset_after stay
/// the limit's.
inline void admit_in_dark(decision& d) noexcept
{
    d.admitted = true;
    d.retry_after = std::chrono::nanoseconds(0);
    d.error = {};
}

/// The handler of an asynchronous try in shadow mode (`Try`), or of the try that answers an
/// acquire: judges the answer (an acquire's against max_wait), lets a refusal through
/// (`admit(answer, n)` makes it admitted), and completes the caller's handler with the
/// try's answer or the acquire's.
template <bool Try, class Handler, class Admit, class... Key>
struct shadow_handler {
    Handler handler;
    std::shared_ptr<shadow_state> shadow;
    Admit admit;
    std::uint64_t n;
    std::int64_t max_wait;
    std::tuple<Key...> key;

    template <class Answer>
    void operator()(boost::system::error_code ec, Answer a)
    {
        if constexpr (std::is_same_v<Answer, decision>) {
            // A shared backend says exceeds_limit as an error of the call (no decision):
            // the same refusal by the limit as a local decision's, let through alike.
            if (ec == error::exceeds_limit) {
                a = decision{};
                a.retry_after = std::chrono::nanoseconds::max();
                a.error = ec;
                ec = {};
            }
        }
        if (!ec) {
            const shadow_verdict v = Try ? judge_try(a) : judge_acquire(a, max_wait);
            if (v.dark) {
                std::apply([&](const auto&... k) { shadow->note(v, n, k...); }, key);
                admit(a, n);
            } else if constexpr (!Try && std::is_same_v<Answer, decision>) {
                if (!a.admitted) ec = a.error;   // invalid_count stays an error
            }
        }
        if constexpr (Try) {
            std::move(handler)(ec, std::move(a));
        } else {
            shadow->count_acquire(ec);
            if constexpr (std::is_same_v<Answer, decision>)
                std::move(handler)(ec);
            else
                std::move(handler)(ec, std::move(a));
        }
    }
};

} // namespace sluice::detail

namespace boost::asio {

/// The caller's handler keeps its executor, allocator and cancellation slot.
template <template <class, class> class Associator, bool Try, class Handler, class Admit, class... Key,
          class DefaultCandidate>
struct associator<Associator, sluice::detail::shadow_handler<Try, Handler, Admit, Key...>, DefaultCandidate>
    : Associator<Handler, DefaultCandidate> {
    static typename Associator<Handler, DefaultCandidate>::type
    get(const sluice::detail::shadow_handler<Try, Handler, Admit, Key...>& h) noexcept
    {
        return Associator<Handler, DefaultCandidate>::get(h.handler);
    }

    static auto get(const sluice::detail::shadow_handler<Try, Handler, Admit, Key...>& h,
                    const DefaultCandidate& c) noexcept -> decltype(Associator<Handler, DefaultCandidate>::get(h.handler, c))
    {
        return Associator<Handler, DefaultCandidate>::get(h.handler, c);
    }
};

} // namespace boost::asio
