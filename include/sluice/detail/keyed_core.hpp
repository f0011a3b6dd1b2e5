// Shared state of a keyed limiter: shards of entries (one policy per key), each shard with
// its own lock, hash set and eviction wheel, plus the overflow limiter.
#pragma once

#include <sluice/basic_limiter.hpp>
#include <sluice/decision.hpp>
#include <sluice/detail/idle_wheel.hpp>
#include <sluice/detail/policy_ref.hpp>
#include <sluice/detail/request_counters.hpp>
#include <sluice/detail/waiter.hpp>
#include <sluice/error.hpp>
#include <sluice/keyed_options.hpp>

#include <boost/system/system_error.hpp>
#include <boost/unordered/unordered_flat_map.hpp>
#include <boost/unordered/unordered_flat_set.hpp>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace sluice::detail {

template <class Limiter, class Key, class Hash, class KeyEqual>
class keyed_core {
public:
    using policy_type = typename Limiter::policy_type;
    using clock_type = typename Limiter::clock_type;
    using executor_type = typename Limiter::executor_type;
    using config_type = typename Limiter::policy_config;
    // A key's waiting queue and timer, created once a request of the key has to wait
    // (and the overflow limiter's): the engine of a single limiter over the entry's policy.
    using wait_state = rate_engine<policy_ref<policy_type>, clock_type, executor_type>;
    using engine_type = wait_state;   // what an acquire started here waits in

    // Entries the eviction wheel looks at per request, at most: bounds the latency a
    // request can pay for others' eviction.
    static constexpr std::size_t sweep_budget = 32;

    keyed_core(const executor_type& ex, const keyed_options& opts, const config_type& config)
        : executor_(ex), opts_(check(opts)), config_(config), overflow_(config)
    {
        std::make_from_tuple<policy_type>(config_);   // validates: throws like the limiter
        std::size_t n = opts.shards;
        if (n == 0) n = std::bit_ceil(std::max<std::size_t>(1, std::thread::hardware_concurrency()) * 4);
        n = std::min(n, opts.max_keys);
        std::int64_t t = now();
        shards_.reserve(n);
        for (std::size_t i = 0; i < n; ++i)
            shards_.push_back(std::make_unique<shard>(opts_, t, opts.max_keys / n + (i < opts.max_keys % n ? 1 : 0)));
        overflow_.waits = std::make_shared<wait_state>(executor_, opts_.limiter, &overflow_.policy, &overflow_admitted_);
    }

    keyed_core(const keyed_core&) = delete;
    keyed_core& operator=(const keyed_core&) = delete;

    executor_type get_executor() const noexcept { return executor_; }

    static std::int64_t now() noexcept { return now_ns<clock_type>(); }

    template <class K>
    decision try_acquire(const K& key, std::uint64_t n)
    {
        std::size_t h = hash_(key);
        shard& s = shard_for(h);
        std::int64_t t = now();
        {
            std::lock_guard lock(s.mutex);
            s.maintain(t);
            if (entry* e = s.find(key)) {
                if (e->waits)
                    return e->waits->try_acquire(n);   // counted there
                return s.count_try(e->policy.try_acquire(n, t), opts_.limiter);
            }
            if (entry* e = s.create(key, h, t, config_)) {
                decision d = e->policy.try_acquire(n, t);
                s.wheel.schedule(e, e->policy.idle_at(t));
                return s.count_try(d, opts_.limiter);
            }
            ++s.overflow_requests;
        }
        return overflow_.waits->try_acquire(n);   // counted by the overflow's policy_ref
    }

    // Starts an acquire for `w` on *key (see initiate_acquire): answered here when nobody
    // waits on the key, else bound to the key's engine (or the overflow's) and started
    // there.
    template <class Bind, class K>
    void start(waiter* w, std::uint64_t n, std::int64_t max_wait, Bind& bind, const K* key_ptr)
    {
        const K& key = *key_ptr;
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
            s.maintain(t);
            entry* e = s.find(key);
            bool created = false;
            if (!e) created = (e = s.create(key, h, t, config_)) != nullptr;
            if (e) {
                if (!e->waits || e->waits->queued() == 0) {
                    // Nobody waits on this key: most requests are answered here, without
                    // a waiting queue for the key.
                    reservation r = e->policy.reserve(n, t, 0, 0);
                    if (created) s.wheel.schedule(e, e->policy.idle_at(t));
                    if (r.allowed || (r.error && (r.error != error::would_exceed_timeout || max_wait == 0))) {
                        w->result = r.error;
                        s.requests.count(w->result, 0);
                        w->complete(w, false);
                        return;
                    }
                }
                if (!e->waits) {
                    e->waits = std::make_shared<wait_state>(executor_, opts_.limiter, &e->policy);
                    ++s.waiting;
                }
                bind(e->waits);
                e->waits->start(w, n, max_wait);
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
        std::make_from_tuple<policy_type>(c);   // validates before anything changes
        shard& s = shard_for(hash_(key));
        std::lock_guard lock(s.mutex);
        s.overrides.insert_or_assign(Key(key), c);
        if (entry* e = s.find(key))
            apply(*e, c);
    }

    template <class K>
    void clear_override(const K& key)
    {
        shard& s = shard_for(hash_(key));
        std::lock_guard lock(s.mutex);
        if (s.overrides.erase(key) == 0)
            return;
        if (entry* e = s.find(key))
            apply(*e, config_);
    }

    void set_overflow(const config_type& c)
    {
        std::make_from_tuple<policy_type>(c);
        apply(overflow_, c);
    }

    template <class K>
    std::size_t queued(const K& key) const
    {
        shard& s = shard_for(hash_(key));
        std::lock_guard lock(s.mutex);
        entry* e = s.find(key);
        return e && e->waits ? e->waits->queued() : 0;
    }

    template <class K>
    bool contains(const K& key) const
    {
        shard& s = shard_for(hash_(key));
        std::lock_guard lock(s.mutex);
        return s.find(key) != nullptr;
    }

    std::size_t overflow_queued() const { return overflow_.waits->queued(); }

    // Evicts every key that is idle by now, in every shard.
    void sweep()
    {
        std::int64_t t = now();
        for (auto& s : shards_) {
            std::lock_guard lock(s->mutex);
            s->maintain(t, static_cast<std::size_t>(-1));
        }
    }

    keyed_stats stats() const
    {
        keyed_stats st;
        request_counters requests;
        std::size_t waiting = 0;
        for (auto& s : shards_) {
            std::lock_guard lock(s->mutex);
            st.keys += s->set.size();
            st.created += s->created;
            st.evicted += s->evicted;
            st.overflow_requests += s->overflow_requests;
            st.waiting_keys += s->waiting;
            requests.add(s->requests.snapshot(0));
            if (s->waiting == 0)
                continue;
            // The keys that have a waiting queue now keep their own counts.
            s->for_each([&](const entry* e) {
                if (e->waits) {
                    limiter_stats k = e->waits->stats();
                    requests.add(k);
                    waiting += k.waiting;
                }
            });
        }
        limiter_stats o = overflow_.waits->stats();
        requests.add(o);
        st.requests = requests.snapshot(waiting + o.waiting);
        st.overflow_admitted = overflow_admitted_.load(std::memory_order_relaxed);
        return st;
    }

    std::size_t shard_count() const noexcept { return shards_.size(); }

    void close()
    {
        closed_.store(true, std::memory_order_release);
        for (auto& s : shards_) {
            std::lock_guard lock(s->mutex);
            s->for_each([](entry* e) {
                if (e->waits) e->waits->close();
            });
        }
        overflow_.waits->close();
    }

private:
    struct entry {
        template <class K>
        entry(K&& k, std::size_t h, const config_type& c)
            : key(std::forward<K>(k)), hash(h), policy(std::make_from_tuple<policy_type>(c))
        {
        }

        Key key;
        std::size_t hash;
        entry* wheel_prev = nullptr;
        entry* wheel_next = nullptr;
        std::uint32_t wheel_slot = 0;
        std::shared_ptr<wait_state> waits;   // only once a request had to wait
        policy_type policy;
    };

    // The set holds entry pointers and looks them up by any key type Hash and KeyEqual take
    // (a string_view for std::string keys), without building a Key.
    struct entry_hash {
        using is_transparent = void;
        Hash h;
        std::size_t operator()(const entry* e) const noexcept { return e->hash; }
        template <class K>
            requires(!std::is_convertible_v<const K&, const entry*>)
        std::size_t operator()(const K& k) const { return h(k); }
    };

    struct entry_equal {
        using is_transparent = void;
        KeyEqual eq;
        bool operator()(const entry* a, const entry* b) const { return a == b; }
        template <class K>
            requires(!std::is_convertible_v<const K&, const entry*>)
        bool operator()(const K& k, const entry* e) const { return eq(e->key, k); }
        template <class K>
            requires(!std::is_convertible_v<const K&, const entry*>)
        bool operator()(const entry* e, const K& k) const { return eq(e->key, k); }
    };

    struct key_hash_adapter {
        using is_transparent = void;
        Hash h;
        template <class K>
        std::size_t operator()(const K& k) const { return h(k); }
    };

    struct key_equal_adapter {
        using is_transparent = void;
        KeyEqual eq;
        template <class A, class B>
        bool operator()(const A& a, const B& b) const { return eq(a, b); }
    };

    struct alignas(64) shard {
        shard(const keyed_options& o, std::int64_t t, std::size_t max)
            : wheel(o.tick.count(), o.wheel_slots, t), cap(max)
        {
        }

        ~shard() { clear(); }

        template <class K>
        entry* find(const K& key) const
        {
            auto it = set.find(key);
            return it == set.end() ? nullptr : *it;
        }

        // A new entry for `key`, under its override if any; nullptr at the cap when nothing
        // idle can be evicted.
        template <class K>
        entry* create(const K& key, std::size_t h, std::int64_t t, const config_type& def)
        {
            if (set.size() >= cap) {
                maintain(t, static_cast<std::size_t>(-1));
                if (set.size() >= cap) return nullptr;
            }
            const config_type* c = &def;
            if (!overrides.empty())
                if (auto it = overrides.find(key); it != overrides.end()) c = &it->second;
            auto e = std::make_unique<entry>(Key(key), h, *c);
            set.insert(e.get());
            ++created;
            return e.release();
        }

        // Lets the wheel evict keys that are idle by `t`.
        void maintain(std::int64_t t, std::size_t budget = sweep_budget)
        {
            if (!wheel.due(t)) return;
            wheel.advance(t, budget, [this](entry* e, std::int64_t now) -> std::optional<std::int64_t> {
                std::int64_t idle = e->policy.idle_at(now);
                bool waiting = e->waits && e->waits->queued() != 0;
                if (!waiting && e->waits) {
                    // Nobody waits: the queue goes (a late handler keeps its own reference),
                    // its counts stay in the shard's.
                    requests.add(e->waits->stats());
                    e->waits.reset();
                    --this->waiting;
                }
                if (waiting || idle > now)
                    return waiting ? now : idle;
                set.erase(e);
                delete e;
                ++evicted;
                return std::nullopt;
            });
        }

        template <class F>
        void for_each(F&& f) const
        {
            for (entry* e : set) f(e);
        }

        // Counts a try_acquire answered here, when asked for (a key without a queue).
        decision count_try(decision d, const limiter_options& o) noexcept
        {
            if (o.count_try_acquire)
                requests.count_try(d.allowed);
            return d;
        }

        void clear() noexcept
        {
            for (entry* e : set) delete e;
            set.clear();
        }

        std::mutex mutex;
        boost::unordered_flat_set<entry*, entry_hash, entry_equal> set;
        boost::unordered_flat_map<Key, config_type, key_hash_adapter, key_equal_adapter> overrides;
        idle_wheel<entry> wheel;
        std::size_t cap;
        std::uint64_t created = 0;
        std::uint64_t evicted = 0;
        std::uint64_t overflow_requests = 0;
        std::size_t waiting = 0;
        request_counters requests;   // of requests answered here, and of queues let go
    };

    static const keyed_options& check(const keyed_options& o)
    {
        if (o.max_keys == 0 || o.tick < std::chrono::microseconds(1) || o.wheel_slots < 2 ||
            o.wheel_slots > (1u << 20))
            throw boost::system::system_error(make_error_code(error::invalid_option));
        return o;
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
            e.waits->reconfigure([&](std::int64_t t) { return Limiter::apply_config(e.policy, t, c); });
        } else {
            Limiter::apply_config(e.policy, now(), c);
        }
    }

    // The overflow limiter: one policy for every key that could not be tracked.
    struct overflow_entry {
        explicit overflow_entry(const config_type& c) : policy(std::make_from_tuple<policy_type>(c)) {}
        std::shared_ptr<wait_state> waits;
        policy_type policy;
    };

    executor_type executor_;
    keyed_options opts_;
    config_type config_;
    Hash hash_;
    std::atomic<bool> closed_{false};
    std::atomic<std::uint64_t> overflow_admitted_{0};
    overflow_entry overflow_;
    std::vector<std::unique_ptr<shard>> shards_;
};

} // namespace sluice::detail
