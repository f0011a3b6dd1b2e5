// Shared state of a keyed limiter: shards of keys, each shard with its own lock, flat hash
// set and eviction wheel, plus the overflow limiter.
#pragma once

#include <sluice/admission.hpp>
#include <sluice/decision.hpp>
#include <sluice/detail/policy/compact_state.hpp>
#include <sluice/detail/wait/rate_engine.hpp>
#include <sluice/detail/store/idle_wheel.hpp>
#include <sluice/detail/store/keyed_key.hpp>
#include <sluice/detail/policy/policy_config.hpp>
#include <sluice/detail/policy/policy_ref.hpp>
#include <sluice/detail/wait/request_counters.hpp>
#include <sluice/detail/base/short_mutex.hpp>
#include <sluice/detail/wait/waiter.hpp>
#include <sluice/error.hpp>
#include <sluice/keyed_options.hpp>

#include <boost/system/system_error.hpp>
#include <boost/unordered/unordered_flat_map.hpp>
#include <boost/unordered/unordered_flat_set.hpp>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace sluice::detail {

/// The layout, for one check to cost one look-up in one flat table (its metadata and one
/// slot: at most two cache misses): a key's slot holds the key (key_storage: 16 bytes for
/// strings of up to 15 characters) and one 8-byte word. For policies with a compact state
/// (compact_state: GCRA, that is token and leaky buckets) the word is the key's whole
/// state under the shared configuration. A key that needs more (a waiting queue, an
/// override, a state beyond the compact range, or any other policy) gets a wide entry on
/// the heap, the word holding its index in the shard (among the words no compact state
/// takes): a whole policy at a stable address, which the waiting machinery of a single
/// limiter can serve. It stays wide until evicted.
///
/// Eviction: the shard's wheel files each key's hash (8 bytes) under the tick at which
/// the key may be idle, once; a look finds the key again by its hash.
/// A key an admission can keep: one that views characters, or one that makes a trivially
/// copyable Key (kept as its bytes).
template <class Key, class K>
concept ticket_key = std::is_convertible_v<const K&, std::string_view> ||
                     (std::is_trivially_copyable_v<Key> && std::is_constructible_v<Key, const K&>);

template <class Limiter, class Key, class Hash, class KeyEqual>
class keyed_store {
public:
    using policy_type = typename Limiter::policy_type;
    using clock_type = typename Limiter::clock_type;
    using executor_type = typename Limiter::executor_type;
    using config_type = typename policy_config<policy_type>::type;
    // A key's waiting queue and timer, created once a request of the key has to wait
    // (and the overflow limiter's): the engine of a single limiter over the entry's policy.
    using wait_state = rate_engine<policy_ref<policy_type>, clock_type, executor_type>;
    using engine_type = wait_state;   // what an acquire started here waits in
    static constexpr bool keyed = true;   // every call names a key

    // Entries the eviction wheel looks at per request, at most: bounds the latency a
    // request can pay for others' eviction.
    static constexpr std::size_t sweep_budget = 32;

    keyed_store(const executor_type& ex, const keyed_options& opts, const config_type& config)
        : executor_(ex), opts_(check(opts)), config_(config), compact_(make_compact(config_)), overflow_(config)
    {
        std::size_t n = shard_count_for(opts);
        std::int64_t t = now();
        shards_.reserve(n);
        for (std::size_t i = 0; i < n; ++i)
            shards_.push_back(std::make_unique<shard>(opts_, t, opts.max_keys / n + (i < opts.max_keys % n ? 1 : 0)));
        overflow_.waits = std::make_shared<wait_state>(executor_, opts_.limiter, &overflow_.policy, &overflow_admitted_);
    }

    keyed_store(const keyed_store&) = delete;
    keyed_store& operator=(const keyed_store&) = delete;

    executor_type get_executor() const noexcept { return executor_; }

    /// Shadow mode, as the options say (basic_limiter carries it out).
    const shadow_options& shadow() const noexcept { return opts_.limiter.shadow; }

    static std::int64_t now() noexcept { return now_ns<clock_type>(); }

    template <class K>
    decision try_acquire(const K& key, std::uint64_t n, std::int64_t* when = nullptr)
    {
        std::size_t h = hash_(key);
        shard& s = shard_for(h);
        std::int64_t t = now();
        if (when) *when = t;
        {
            std::lock_guard lock(s.mutex);
            maintain(s, t);
            bool created = false;
            const slot* e = find_or_create(s, key, h, t, created);
            if (e) {
                if (std::optional<decision> d = decide_compact(s, *e, h, n, t, created))
                    return s.count_try(*d, opts_.limiter);
                wide_entry& w = widen(s, *e);
                if (w.waits)
                    return w.waits->try_acquire(n);   // counted there
                decision d = w.policy.try_acquire(n, t);
                if (created) s.wheel.schedule(h, w.policy.idle_at(t));
                return s.count_try(d, opts_.limiter);
            }
            ++s.overflow_requests;
        }
        return overflow_.waits->try_acquire(n);   // counted by the overflow's policy_ref
    }

    /// try_acquire with a ticket (basic_limiter::try_admit): the ticket keeps the key, as a
    /// string (or the bytes of a trivially copyable Key).
    template <class K>
    admission admit(const K& key, std::uint64_t n)
        requires ticket_key<Key, K>
    {
        const std::uint64_t epoch = epoch_.load(std::memory_order_acquire);
        std::int64_t t = 0;
        decision d = try_acquire(key, n, &t);
        if (!d.admitted)
            return admission_access::refused(d);
        return admission_access::make(this, epoch, n, t, d, key_bytes(key));
    }

    /// The ticket of n permits of `key` an acquire that waited was granted.
    template <class K>
    admission admitted(const K& key, std::uint64_t n)
        requires ticket_key<Key, K>
    {
        decision d;
        d.admitted = true;
        return admission_access::make(this, epoch_.load(std::memory_order_acquire), n, now(), d, key_bytes(key));
    }

    /// Settles a ticket of this limiter by its key's policy (see the policy's settle), under
    /// the key's shard lock; the key's waiters it lets in are released. A key evicted since
    /// was idle: settled lower, there is nothing to give back; higher, the key is made
    /// again (or the overflow's, when the table is full) and charged the debt from now.
    boost::system::error_code settle(admission& a, std::uint64_t actual)
    {
        boost::system::error_code ec = admission_access::check(a, this, epoch_.load(std::memory_order_acquire));
        if (!ec && closed_.load(std::memory_order_acquire))
            ec = make_error_code(error::closed);
        if (ec)
            return ec;
        admission_access::mark_settled(a);
        const std::uint64_t cost = admission_access::cost(a);
        const std::int64_t at = admission_access::at(a);
        const std::string& bytes = admission_access::key(a);
        if constexpr (std::is_same_v<Key, std::string>)
            settle_key(std::string_view(bytes), cost, actual, at);
        else
            settle_key(key_from_bytes(bytes), cost, actual, at);
        return {};
    }

    /// What try_acquire(key, n) would answer now, nothing taken or counted; a key not
    /// tracked answers as a new one (under its override), and is not made.
    template <class K>
    decision peek(const K& key, std::uint64_t n) const
    {
        std::size_t h = hash_(key);
        shard& s = shard_for(h);
        std::int64_t t = now();
        {
            std::lock_guard lock(s.mutex);
            if (const slot* e = find(s, key, h)) {
                if constexpr (compact) {
                    if (!is_wide(e->word)) {
                        std::uint64_t copy = e->word;   // decided on a copy: nothing taken
                        if (std::optional<decision> d = compact_.try_acquire(copy, n, t)) return *d;
                        return check_word(e->word, n, t);
                    }
                }
                const wide_entry& w = wide_of(s, *e);
                return w.waits ? w.waits->peek(n) : w.policy.check(n, t);
            }
            if (s.set.size() < s.cap) {
                const config_type* c = &config_;
                if (!s.overrides.empty())
                    if (auto it = s.overrides.find(key); it != s.overrides.end()) c = &it->second;
                if constexpr (compact) {
                    if (c == &config_) {
                        std::uint64_t fresh = compact_type::fresh;
                        if (std::optional<decision> d = compact_.try_acquire(fresh, n, t)) return *d;
                    }
                }
                return std::make_from_tuple<policy_type>(*c).check(n, t);
            }
        }
        return overflow_.waits->peek(n);   // a full table: a new key would go there
    }

    // Starts an acquire for `w` on `key` (see initiate_acquire): answered here when nobody
    // waits on the key, else bound to the key's engine (or the overflow's) and started
    // there.
    template <class Bind, class K>
    void start(waiter* w, std::uint64_t n, std::int64_t max_wait, Bind& bind, const K& key)
    {
        if (max_wait < 0) max_wait = 0;
        w->n = n;
        std::size_t h = hash_(key);
        shard& s = shard_for(h);
        std::int64_t t = now();
        {
            // Held while the request queues, so that the key cannot be evicted between
            // the look-up and the queueing (which would let it start afresh).
            std::lock_guard lock(s.mutex);
            if (closed_.load(std::memory_order_acquire)) {
                w->result = make_error_code(error::closed);
                s.requests.count(w->result, 0);
                w->complete(w, false);
                return;
            }
            maintain(s, t);
            bool created = false;
            const slot* e = find_or_create(s, key, h, t, created);
            if (e) {
                std::optional<decision> d = decide_compact(s, *e, h, n, t, created);
                if (d && (d->admitted || d->error || max_wait == 0)) {
                    w->result = d->admitted ? boost::system::error_code()
                              : d->error   ? d->error
                                           : make_error_code(error::timed_out);
                    s.requests.count(w->result, 0);
                    w->complete(w, false);
                    return;
                }
                // It has to wait (or lies beyond the compact range): a whole policy.
                wide_entry& we = widen(s, *e);
                if (!we.waits || we.waits->queued() == 0) {
                    // Nobody waits on this key: most requests are answered here, without
                    // a waiting queue for the key.
                    reservation r = we.policy.reserve(n, t, 0, 0);
                    if (created) s.wheel.schedule(h, we.policy.idle_at(t));
                    if (r.admitted || (r.error && (r.error != error::timed_out || max_wait == 0))) {
                        w->result = r.error;
                        s.requests.count(w->result, 0);
                        w->complete(w, false);
                        return;
                    }
                }
                if (!we.waits) {
                    we.waits = std::make_shared<wait_state>(executor_, opts_.limiter, &we.policy);
                    ++s.waiting;
                }
                bind(we.waits);
                we.waits->start(w, n, max_wait);
                return;
            }
            ++s.overflow_requests;
        }
        bind(overflow_.waits);
        overflow_.waits->start(w, n, max_wait);
    }

    template <class K>
    void set_override(const K& key, const config_type& c)
    {
        epoch_.fetch_add(1, std::memory_order_acq_rel);
        std::make_from_tuple<policy_type>(c);   // validates before anything changes
        std::size_t h = hash_(key);
        shard& s = shard_for(h);
        std::lock_guard lock(s.mutex);
        s.overrides.insert_or_assign(Key(key), c);
        if (const slot* e = find(s, key, h))
            apply(widen(s, *e), c);
    }

    template <class K>
    void clear_override(const K& key)
    {
        epoch_.fetch_add(1, std::memory_order_acq_rel);
        std::size_t h = hash_(key);
        shard& s = shard_for(h);
        std::lock_guard lock(s.mutex);
        if (s.overrides.erase(key) == 0)
            return;
        if (const slot* e = find(s, key, h))
            apply(widen(s, *e), config_);
    }

    void set_overflow(const config_type& c)
    {
        epoch_.fetch_add(1, std::memory_order_acq_rel);
        std::make_from_tuple<policy_type>(c);
        apply(overflow_, c);
    }

    template <class K>
    std::size_t queued(const K& key) const
    {
        std::size_t h = hash_(key);
        shard& s = shard_for(h);
        std::lock_guard lock(s.mutex);
        const slot* e = find(s, key, h);
        if (!e || !is_wide(e->word)) return 0;
        const wide_entry& w = wide_of(s, *e);
        return w.waits ? w.waits->queued() : 0;
    }

    template <class K>
    bool contains(const K& key) const
    {
        std::size_t h = hash_(key);
        shard& s = shard_for(h);
        std::lock_guard lock(s.mutex);
        return find(s, key, h) != nullptr;
    }

    std::size_t overflow_queued() const { return overflow_.waits->queued(); }

    // Evicts every key that is idle by now, in every shard.
    void sweep()
    {
        std::int64_t t = now();
        for (auto& s : shards_) {
            std::lock_guard lock(s->mutex);
            maintain(*s, t, static_cast<std::size_t>(-1));
        }
    }

    limiter_stats stats() const
    {
        limiter_stats::key_counts keys;
        request_counters requests;
        std::size_t waiting = 0;
        for (auto& s : shards_) {
            std::lock_guard lock(s->mutex);
            keys.tracked += s->set.size();
            keys.created += s->created;
            keys.evicted += s->evicted;
            keys.overflow_requests += s->overflow_requests;
            keys.waiting += s->waiting;
            requests.add(s->requests.snapshot(0));
            if (s->waiting == 0)
                continue;
            // The keys that have a waiting queue now keep their own counts.
            for_each_wide(*s, [&](wide_entry& w) {
                if (w.waits) {
                    limiter_stats k = w.waits->stats();
                    requests.add(k);
                    waiting += k.waiting;
                }
            });
        }
        limiter_stats o = overflow_.waits->stats();
        requests.add(o);
        limiter_stats st = requests.snapshot(waiting + o.waiting);
        keys.overflow_admitted = overflow_admitted_.load(std::memory_order_relaxed);
        st.keys = keys;
        return st;
    }

    std::size_t shard_count() const noexcept { return shards_.size(); }

    bool closed() const noexcept { return closed_.load(std::memory_order_acquire); }

    void close()
    {
        closed_.store(true, std::memory_order_release);
        for (auto& s : shards_) {
            std::lock_guard lock(s->mutex);
            for_each_wide(*s, [](wide_entry& w) {
                if (w.waits) w.waits->close();
            });
        }
        overflow_.waits->close();
    }

private:
    using compact_type = compact_state<policy_type>;
    static constexpr bool compact = compact_type::enabled;

    template <class K>
    static std::string key_bytes(const K& key)
    {
        if constexpr (std::is_convertible_v<const K&, std::string_view>) {
            return std::string(std::string_view(key));
        } else {
            const Key k(key);
            std::string out(sizeof(Key), '\0');
            std::memcpy(out.data(), &k, sizeof(Key));
            return out;
        }
    }

    static Key key_from_bytes(const std::string& bytes) noexcept
        requires std::is_trivially_copyable_v<Key>
    {
        Key k{};
        std::memcpy(&k, bytes.data(), std::min(bytes.size(), sizeof(Key)));
        return k;
    }

    // A peek at a compact word beyond the compact range: on a whole policy in its state.
    decision check_word(std::uint64_t word, std::uint64_t n, std::int64_t t) const
    {
        auto p = std::apply([](const auto&... a) { return std::make_unique<policy_type>(a...); }, config_);
        if constexpr (compact) compact_.restore(*p, word);
        return p->check(n, t);
    }

    template <class K>
    void settle_key(const K& key, std::uint64_t cost, std::uint64_t actual, std::int64_t at)
    {
        std::size_t h = hash_(key);
        shard& s = shard_for(h);
        std::int64_t t = now();
        {
            std::lock_guard lock(s.mutex);
            const slot* e = find(s, key, h);
            if (!e) {
                if (actual <= cost) return;   // idle, and evicted: nothing to give back
                bool created = false;
                e = find_or_create(s, key, h, t, created);
                if (e) {
                    // The admission's own state is gone: the debt is charged as of now, as
                    // one permit admitted now and settled to the debt (never refused: the
                    // key is new, or idle).
                    const std::uint64_t debt = actual - cost;
                    if constexpr (compact) {
                        std::uint64_t word = e->word;
                        if (!is_wide(word)) {
                            std::optional<decision> d = compact_.try_acquire(word, 1, t);
                            if (d && d->admitted && compact_.settle(word, 1, debt, t)) {
                                e->word = word;
                                if (created) s.wheel.schedule(h, compact_.idle_at(word));
                                return;
                            }
                        }
                    }
                    wide_entry& w = widen(s, *e);
                    if (w.waits) {
                        w.waits->settle_cost(0, debt, t);
                    } else {
                        w.policy.try_acquire(1, t);
                        w.policy.settle(1, debt, t, t);
                    }
                    if (created) s.wheel.schedule(h, w.policy.idle_at(t));
                    return;
                }
            }
            if (e) {
                if constexpr (compact) {
                    if (!is_wide(e->word) && compact_.settle(e->word, cost, actual, t)) return;
                }
                wide_entry& w = widen(s, *e);
                if (!w.waits) {
                    w.policy.settle(cost, actual, at, t);
                    return;
                }
                // Under the shard's lock, as start() queues: the key cannot go meanwhile.
                w.waits->settle_cost(cost, actual, at);
                return;
            }
        }
        if (actual > cost) overflow_.waits->settle_cost(0, actual - cost, t);
    }
    using storage = key_storage<Key>;
    using stored_key = typename storage::type;

    // A key that needs a whole policy (see the class comment); also the overflow limiter.
    struct wide_entry {
        explicit wide_entry(const config_type& c) : policy(std::make_from_tuple<policy_type>(c)) {}
        std::shared_ptr<wait_state> waits;   // only once a request had to wait
        policy_type policy;
    };

    // One key. Elements of a flat set are const: the word changes under the shard's lock.
    struct slot {
        stored_key key;
        mutable std::uint64_t word;   // the compact state, or INT64_MIN + the index of a wide entry
    };

    static bool is_wide(std::uint64_t word) noexcept
    {
        return !compact || static_cast<std::int64_t>(word) < store_words_end;
    }

    static std::size_t wide_index(std::uint64_t word) noexcept
    {
        return static_cast<std::size_t>(word - static_cast<std::uint64_t>(min_ns));
    }

    // Look-ups: a key with its hash computed once, or a hash alone (the wheel's), matching
    // any key of that hash or only an evictable one.
    template <class K>
    struct key_probe {
        const K& key;
        std::size_t hash;
    };

    struct shard;
    struct hash_probe {
        const keyed_store& core;
        const shard& s;
        std::size_t hash;
        std::int64_t now;
        bool evictable_only;
    };

    struct slot_hash {
        using is_transparent = void;
        Hash h;
        std::size_t operator()(const slot& s) const { return hash_stored<Key>(h, s.key); }
        template <class K>
        std::size_t operator()(const key_probe<K>& p) const noexcept
        {
            return p.hash;
        }
        std::size_t operator()(const hash_probe& p) const noexcept { return p.hash; }
    };

    struct slot_equal {
        using is_transparent = void;
        KeyEqual eq;
        bool operator()(const slot& a, const slot& b) const { return equal_stored<Key>(eq, a.key, storage::view(b.key)); }
        template <class K>
        bool operator()(const key_probe<K>& p, const slot& s) const
        {
            return equal_stored<Key>(eq, s.key, p.key);
        }
        template <class K>
        bool operator()(const slot& s, const key_probe<K>& p) const
        {
            return equal_stored<Key>(eq, s.key, p.key);
        }
        bool operator()(const hash_probe& p, const slot& e) const { return p.core.matches(p, e); }
        bool operator()(const slot& e, const hash_probe& p) const { return p.core.matches(p, e); }
    };

    // The overrides are few: a map of Key, looked up by anything Hash and KeyEqual take.
    struct key_hash_adapter {
        using is_transparent = void;
        Hash h;
        template <class K>
        std::size_t operator()(const K& k) const
        {
            return h(k);
        }
    };

    struct key_equal_adapter {
        using is_transparent = void;
        KeyEqual eq;
        template <class A, class B>
        bool operator()(const A& a, const B& b) const
        {
            return eq(a, b);
        }
    };

    bool matches(const hash_probe& p, const slot& e) const
    {
        return hash_stored<Key>(hash_, e.key) == p.hash && (!p.evictable_only || evictable(p.s, e, p.now));
    }

    // Back to fresh (decides as a new key) with nobody waiting.
    bool evictable(const shard& s, const slot& e, std::int64_t t) const noexcept
    {
        if constexpr (compact)
            if (!is_wide(e.word)) return compact_.idle_at(e.word) <= t;
        const wide_entry& w = wide_of(s, e);
        return !(w.waits && w.waits->queued() != 0) && w.policy.idle_at(t) <= t;
    }

    struct alignas(64) shard {
        shard(const keyed_options& o, std::int64_t t, std::size_t max)
            : wheel(o.tick.count(), o.wheel_slots, t), cap(max)
        {
        }


        // Counts a try_acquire answered here, when asked for (a key without a queue).
        decision count_try(decision d, const limiter_options& o) noexcept
        {
            if (o.count_try_acquire)
                requests.count_try(d.admitted);
            return d;
        }

        // The lock on a line of its own: with threads on other cores its line moves from
        // core to core on every request, and the table's header (read by every look-up)
        // should not move with it.
        alignas(64) mutable short_mutex mutex;
        alignas(64) boost::unordered_flat_set<slot, slot_hash, slot_equal> set;
        std::vector<std::unique_ptr<wide_entry>> wides;   // null: a free index, listed in free_wides
        std::vector<std::uint32_t> free_wides;
        boost::unordered_flat_map<Key, config_type, key_hash_adapter, key_equal_adapter> overrides;
        idle_wheel<std::uint64_t> wheel;   // hashes of keys
        std::size_t cap;
        std::uint64_t created = 0;
        std::uint64_t evicted = 0;
        std::uint64_t overflow_requests = 0;
        std::size_t waiting = 0;
        request_counters requests;   // of requests answered here, and of queues let go
    };

    template <class K>
    const slot* find(const shard& s, const K& key, std::size_t h) const
    {
        auto it = s.set.find(key_probe<K>{key, h});
        return it == s.set.end() ? nullptr : &*it;
    }

    // The slot of `key`, or a new one (`created`, not yet filed on the wheel); nullptr at
    // the cap when nothing idle can be evicted.
    template <class K>
    const slot* find_or_create(shard& s, const K& key, std::size_t h, std::int64_t t, bool& created)
    {
        if (const slot* e = find(s, key, h))
            return e;
        const slot* e = create(s, key, t);
        created = e != nullptr;
        return e;
    }

    // A new slot for `key` (not yet filed on the wheel), wide under its override if any;
    // nullptr at the cap when nothing idle can be evicted.
    template <class K>
    const slot* create(shard& s, const K& key, std::int64_t t)
    {
        if (s.set.size() >= s.cap) {
            maintain(s, t, static_cast<std::size_t>(-1));
            if (s.set.size() >= s.cap) return nullptr;
        }
        const config_type* c = nullptr;
        if (!s.overrides.empty())
            if (auto it = s.overrides.find(key); it != s.overrides.end()) c = &it->second;
        // What may throw comes before the insert, so that a failure leaves nothing behind.
        std::unique_ptr<wide_entry> w;
        if (c || !compact) {
            w = std::make_unique<wide_entry>(c ? *c : config_);
            reserve_wide(s);
        }
        std::uint64_t word = 0;
        if constexpr (compact) word = compact_type::fresh;
        auto it = s.set.insert(slot{storage::make(key), word}).first;
        if (w) it->word = add_wide(s, std::move(w));
        ++s.created;
        return &*it;
    }

    static wide_entry& wide_of(const shard& s, const slot& e) noexcept { return *s.wides[wide_index(e.word)]; }

    // Room for one more wide entry, so that add_wide does not throw.
    static void reserve_wide(shard& s)
    {
        if (!s.free_wides.empty()) return;
        std::size_t n = s.wides.size() + 1;
        if (static_cast<std::int64_t>(n) > store_words_end - min_ns)
            throw std::length_error("sluice::keyed: more than 2^32 wide keys in a shard");
        if (n > s.wides.capacity()) {
            s.wides.reserve(std::max(n, 2 * s.wides.capacity()));
            s.free_wides.reserve(s.wides.capacity());   // so that freeing an index never throws
        }
    }

    // Files a wide entry in the shard (after reserve_wide); returns its word.
    static std::uint64_t add_wide(shard& s, std::unique_ptr<wide_entry> w) noexcept
    {
        std::size_t i;
        if (!s.free_wides.empty()) {
            i = s.free_wides.back();
            s.free_wides.pop_back();
            s.wides[i] = std::move(w);
        } else {
            i = s.wides.size();
            s.wides.push_back(std::move(w));
        }
        return static_cast<std::uint64_t>(min_ns) + i;
    }

    static void remove_wide(shard& s, const slot& e) noexcept
    {
        std::size_t i = wide_index(e.word);
        s.wides[i].reset();
        s.free_wides.push_back(static_cast<std::uint32_t>(i));
    }

    // The fast path of a compact key (its whole state in its word): the decision, the key
    // filed on the wheel if it is new (`created` is then cleared); none for a wide key, or a
    // state beyond the compact range.
    std::optional<decision> decide_compact(shard& s, const slot& e, std::size_t h, std::uint64_t n, std::int64_t t,
                                           bool& created)
    {
        if constexpr (compact) {
            if (!is_wide(e.word)) {
                if (std::optional<decision> d = compact_.try_acquire(e.word, n, t)) {
                    if (created) s.wheel.schedule(h, compact_.idle_at(e.word));
                    created = false;
                    return d;
                }
            }
        }
        return std::nullopt;
    }

    // Moves a compact key to a wide entry of the shared configuration and the same state
    // (the entry of a key already wide).
    wide_entry& widen(shard& s, const slot& e)
    {
        if (!is_wide(e.word)) {
            if constexpr (compact) {
                auto w = std::make_unique<wide_entry>(config_);
                compact_.restore(w->policy, e.word);
                reserve_wide(s);
                e.word = add_wide(s, std::move(w));
            }
        }
        return wide_of(s, e);
    }

    // Lets the wheel evict keys that are idle by `t`.
    void maintain(shard& s, std::int64_t t, std::size_t budget = sweep_budget)
    {
        if (!s.wheel.due(t)) return;
        s.wheel.advance(t, budget, [this, &s](std::uint64_t h, std::int64_t now) -> std::optional<std::int64_t> {
            // Keys of equal hashes (rare) are filed once each; each look evicts one of
            // them that is idle, or files the hash again.
            auto it = s.set.find(hash_probe{*this, s, h, now, true});
            if (it != s.set.end()) {
                if (is_wide(it->word)) {
                    wide_entry& w = wide_of(s, *it);
                    if (w.waits) {
                        s.requests.add(w.waits->stats());
                        --s.waiting;
                    }
                    remove_wide(s, *it);
                }
                s.set.erase(it);
                ++s.evicted;
                return std::nullopt;
            }
            it = s.set.find(hash_probe{*this, s, h, now, false});
            if (it == s.set.end()) return std::nullopt;
            if constexpr (compact)
                if (!is_wide(it->word)) return compact_.idle_at(it->word);
            wide_entry& w = wide_of(s, *it);
            bool waiting = w.waits && w.waits->queued() != 0;
            if (!waiting && w.waits) {
                // Nobody waits: the queue goes (a late handler keeps its own reference),
                // its counts stay in the shard's.
                s.requests.add(w.waits->stats());
                w.waits.reset();
                --s.waiting;
            }
            return waiting ? now : w.policy.idle_at(now);
        });
    }

    template <class F>
    static void for_each_wide(const shard& s, F&& f)
    {
        for (const auto& w : s.wides)
            if (w) f(*w);
    }

    static const keyed_options& check(const keyed_options& o)
    {
        if (o.max_keys == 0 || o.tick < std::chrono::microseconds(1) || o.wheel_slots < 2 ||
            o.wheel_slots > (1u << 20))
            throw boost::system::system_error(make_error_code(error::invalid_option));
        return o;
    }

    // Validates the configuration (throws like the limiter) and keeps what the compact
    // state needs of it.
    static compact_type make_compact(const config_type& c)
    {
        if constexpr (compact)
            return compact_type(std::make_from_tuple<policy_type>(c));
        else {
            std::make_from_tuple<policy_type>(c);
            return {};
        }
    }

    // Slots a flat table has when it holds n elements: groups of 15, a power of two of
    // them, at most 7/8 full (Boost 1.81's unordered_flat_set).
    static double table_slots(std::size_t n) noexcept
    {
        std::size_t groups = 2;
        while (static_cast<double>(groups * 15 - 1) * 0.875 < static_cast<double>(n)) groups *= 2;
        return static_cast<double>(groups * 15);
    }

    // opts.shards, or 4 per hardware thread... and up to twice that: the count whose
    // tables are fullest when the store is at its cap. Tables grow by doubling, so a
    // shard one key past a power of two is half empty, and max_keys is the memory a
    // user budgets.
    static std::size_t shard_count_for(const keyed_options& o)
    {
        std::size_t n = o.shards;
        if (n == 0) {
            std::size_t n0 = std::bit_ceil(std::max<std::size_t>(1, std::thread::hardware_concurrency()) * 4);
            double best = 0;
            for (std::size_t c = n0; c < 2 * n0; ++c) {
                std::size_t per = (o.max_keys + c - 1) / c;
                double fill = static_cast<double>(per) / table_slots(per);
                if (fill > best + 0.01) {
                    best = fill;
                    n = c;
                }
            }
        }
        return std::min(n, o.max_keys);
    }

    shard& shard_for(std::size_t h) const noexcept
    {
        // Fibonacci hashing: the shard comes from the hash's high bits after mixing, so it
        // does not correlate with the slot the shard's set picks.
        std::uint64_t m = static_cast<std::uint64_t>(h) * 0x9E3779B97F4A7C15ull;
        return *shards_[static_cast<std::size_t>((static_cast<uint128>(m) * shards_.size()) >> 64)];
    }

    template <class Entry>
    void apply(Entry& e, const config_type& c)
    {
        if (e.waits) {
            e.waits->reconfigure([&](std::int64_t t) { return policy_config<policy_type>::apply(e.policy, t, c); });
        } else {
            policy_config<policy_type>::apply(e.policy, now(), c);
        }
    }

    executor_type executor_;
    keyed_options opts_;
    config_type config_;
    [[no_unique_address]] compact_type compact_;
    Hash hash_;
    std::atomic<bool> closed_{false};
    std::atomic<std::uint64_t> epoch_{0};   // configuration changes: tickets of before are stale
    std::atomic<std::uint64_t> overflow_admitted_{0};
    wide_entry overflow_;
    std::vector<std::unique_ptr<shard>> shards_;
};

} // namespace sluice::detail
