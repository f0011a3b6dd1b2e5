// Keyed limiters: one limiter per client, host or API key, with bounded memory.
#pragma once

#include <sluice/basic_limiter.hpp>
#include <sluice/rate_limiter.hpp>
#include <sluice/decision.hpp>
#include <sluice/detail/base/arith.hpp>
#include <sluice/detail/store/keyed_store.hpp>
#include <sluice/detail/wait/local_answers.hpp>
#include <sluice/detail/base/trailing_options.hpp>
#include <sluice/error.hpp>
#include <sluice/keyed_options.hpp>

#include <boost/system/system_error.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace sluice {

/// The default hash of keyed limiters: std::hash, made transparent for string keys so that
/// a std::string_view or a const char* is looked up without building a std::string.
template <class Key>
struct key_hash : std::hash<Key> {};

/// For string keys: hashes any string view of the same characters, so that heterogeneous
/// look-ups find a std::basic_string key.
template <class Char, class Traits, class Alloc>
struct key_hash<std::basic_string<Char, Traits, Alloc>> {
    /// Enables heterogeneous look-up in the key store.
    using is_transparent = void;

    /// The hash of `s`, equal for a string and its view.
    std::size_t operator()(std::basic_string_view<Char, Traits> s) const noexcept
    {
        return std::hash<std::basic_string_view<Char, Traits>>{}(s);
    }
};

/// For unsigned __int128 keys (an IPv6 address as a number), which std::hash does not take
/// in ISO C++. The two halves are folded by a multiplication; the store mixes the result
/// again (boost::unordered's mixing of hashes that are not avalanching).
template <>
struct key_hash<detail::uint128> {
    /// The hash of `v`.
    std::size_t operator()(detail::uint128 v) const noexcept
    {
        auto lo = static_cast<std::uint64_t>(v);
        auto hi = static_cast<std::uint64_t>(v >> 64);
        return static_cast<std::size_t>(lo ^ (hi * 0x9E3779B97F4A7C15ull));
    }
};

/// One limiter per key (client address, host name, API key), created on first use from a
/// shared configuration or a per-key override, with the semantics of a single limiter:
/// FIFO per key, fail fast beyond max_wait, cancellation that gives back, completions on
/// the handler's executor.
///
///     // 10 requests a second per client, bursts of 20; one client held to 1 a second.
///     sluice::keyed<sluice::token_bucket<>> per_client(io, sluice::rate::per_second(10), 20,
///                                                      sluice::keyed_options{.max_keys = 100'000});
///     per_client.set_override("203.0.113.7", sluice::rate::per_second(1), 5);
///
///     // In the request handler (peer_address: a std::string_view, no std::string built):
///     if (!per_client.try_acquire(peer_address))
///         return too_many_requests();
///
/// (tests/test_keyed.cpp runs this example.)
///
/// `Limiter` is one of the named limiters (token_bucket, leaky_bucket, fixed_window,
/// sliding_window, sliding_window_counter, time_wheel) with its Clock and Executor; the
/// constructor takes the same configuration arguments as that limiter (after its
/// executor).
///
/// `Key`: std::string (looked up by std::string_view or const char*, and stored inline up
/// to 15 characters, on the heap beyond), an integer such as std::uint64_t, an IPv4 or
/// IPv6 address as boost::asio::ip::address_v4 / address_v6 or as an unsigned __int128,
/// or any type with a Hash and a KeyEqual. A check is one look-up in a flat hash table
/// whose slot holds the key and, for token and leaky buckets, the key's whole state in 8
/// bytes (the configuration is shared). A key that waits, has an override, or uses another
/// policy has its policy on the heap as well. Bytes per key and ns per check, by key type:
/// benchmarks/RESULTS.md, "keyed".
///
/// Memory is bounded: at most keyed_options::max_keys keys are tracked. A key is evicted
/// only when it is idle (its state is back to that of a new limiter and nobody waits on
/// it), so eviction never resets a limit: a throttled client stays throttled. An eviction
/// wheel (a ring of slots, as a clock face) finds idle keys at a constant cost per key. A
/// new key that finds the store full with nothing idle is served by the overflow limiter,
/// one limiter shared by all such keys (by default configured like one key): a flood of
/// new keys neither grows memory nor gets through unlimited.
///
/// Executor, cancellation and errors: as rate_limiter's (its class comment), per key.
/// Every key's timer, and the overflow limiter's, runs on the keyed limiter's executor;
/// close() and the destructor complete every waiter of every key with error::closed.
///
/// stats(): the requests of every key and of the overflow limiter, as one limiter counts
/// them (evicted keys' included), and the keys group: keys tracked, created, evicted,
/// overflow requests and admissions, keys with a waiting queue. Taking them visits the keys
/// that have a waiting queue now.
///
/// Thread-safety: shared objects are safe from any number of threads. Keys are spread
/// over shards, each with its own short lock (held for one look-up in a flat hash set and
/// one decision: it spins briefly before it sleeps); no lock is global.
template <class Limiter, class Key = std::string, class Hash = key_hash<Key>, class KeyEqual = std::equal_to<>>
class keyed : public basic_limiter<detail::keyed_store<Limiter, Key, Hash, KeyEqual>, detail::local_answers<>> {
    using core_type = detail::keyed_store<Limiter, Key, Hash, KeyEqual>;
    using base_type = basic_limiter<core_type, detail::local_answers<>>;

public:
    /// The limiter of one key.
    using limiter_type = Limiter;
    /// The type keys are stored as.
    using key_type = Key;
    /// The policy of one key.
    using policy_type = typename Limiter::policy_type;
    /// The clock of every key's limiter.
    using clock_type = typename Limiter::clock_type;
    /// The executor of the timers, and the default one of completion handlers.
    using executor_type = typename Limiter::executor_type;
    /// One key's configuration: Limiter::config(args...).
    using config_type = typename detail::policy_config<policy_type>::type;

    /// The limiter's type on another executor type, as on Asio's I/O objects (what
    /// `use_awaitable_t<>::as_default_on_t` needs).
    template <class OtherExecutor>
    struct rebind_executor {
        /// The same limiter on another executor type.
        using other = keyed<typename Limiter::template rebind_executor<OtherExecutor>::other, Key, Hash, KeyEqual>;
    };

    /// Every key is configured by Limiter::config(args...), as one Limiter would be:
    /// keyed(ex, limiter config args..., [options]). The options must be a named object or
    /// `sluice::keyed_options{...}` (a braced list cannot be deduced into the pack). Throws
    /// like Limiter's constructor for a bad configuration, and system_error(error::
    /// invalid_option) for bad options.
    template <class... Args>
    explicit keyed(const executor_type& ex, Args&&... args)
        : base_type(detail::with_trailing_options<keyed_options>(
              [&ex](const keyed_options& opts, auto&&... config) {
                  return std::make_shared<core_type>(ex, opts,
                                                     Limiter::config(std::forward<decltype(config)>(config)...));
              },
              std::forward<Args>(args)...))
    {
    }

    /// The same, on the executor of an execution context (an io_context).
    template <detail::execution_context_ref Context, class... Args>
    keyed(Context& ctx, Args&&... args)
        : keyed(executor_type(ctx.get_executor()), std::forward<Args>(args)...)
    {
    }

    /// Takes over `other`'s keys and waiters; `other` may then only be destroyed or
    /// assigned to.
    keyed(keyed&&) noexcept = default;
    /// Closes this limiter (its waiters complete with error::closed), then takes over
    /// `other`'s.
    keyed& operator=(keyed&&) noexcept = default;

    /// Configures `key` by Limiter::config(args...) from now on, also after it is
    /// evicted. A tracked key changes at once and keeps what it has consumed; its waiters
    /// are rescheduled. Throws like the constructor (error::invalid_option for a window
    /// length that cannot change on a tracked key). Overrides are kept until cleared.
    template <class K, class... Args>
    void set_override(const K& key, Args&&... args)
    {
        this->state_->set_override(key, Limiter::config(std::forward<Args>(args)...));
    }

    /// Returns `key` to the shared configuration.
    template <class K>
    void clear_override(const K& key)
    {
        this->state_->clear_override(key);
    }

    /// Configures the overflow limiter (by default like one key).
    template <class... Args>
    void set_overflow(Args&&... args)
    {
        this->state_->set_overflow(Limiter::config(std::forward<Args>(args)...));
    }

    /// Requests waiting on `key` now.
    template <class K>
    std::size_t queued(const K& key) const
    {
        return this->state_->queued(key);
    }

    /// Whether `key` is tracked now (not evicted, not in the overflow).
    template <class K>
    bool contains(const K& key) const
    {
        return this->state_->contains(key);
    }

    /// Evicts every idle key now, in every shard (normally done a little at a time by the
    /// requests themselves).
    void sweep() { this->state_->sweep(); }

    /// Shards the store was split into.
    std::size_t shards() const noexcept { return this->state_->shard_count(); }
};

} // namespace sluice
