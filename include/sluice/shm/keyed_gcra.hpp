// One GCRA bucket per key (client, host, API key) in a table in a named shared-memory
// segment: the keyed limiter of every process of a host.
#pragma once

#include <sluice/decision.hpp>
#include <sluice/detail/base/arith.hpp>
#include <sluice/detail/policy/gcra_step.hpp>
#include <sluice/error.hpp>
#include <sluice/rate.hpp>
#include <sluice/shm/detail/policy/gcra_word.hpp>
#include <sluice/shm/segment.hpp>

#include <boost/system/error_code.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <pthread.h>

namespace sluice::shm {

/// The shape of a shared-memory key table, fixed when the segment is created.
struct table_options {
    /// Hard cap on keys tracked at once, over the whole table. 1 to 2^32.
    std::size_t max_keys = 100'000;

    /// Parts of the table, each with its own lock for inserting and evicting keys (deciding
    /// on a tracked key takes no lock) and room for 1.5 times its share of max_keys (a
    /// shard fuller than that, beyond a dozen standard deviations of a random spread, refuses
    /// new keys too). 0 picks max_keys / 1024, between 1 and 256; else 1 to
    /// min(max_keys, 65536).
    std::size_t shards = 0;

    /// The seed of the key hash (which slot a key goes to): 0 draws one at random when the
    /// table is created, so that nobody outside can aim keys at one shard; another value
    /// makes the layout reproducible (tests). Used by the process that creates the table
    /// only (not part of the configuration an attaching process must match).
    std::uint64_t hash_seed = 0;

    /// Whether the table holds 64-bit integer keys only: slots of 32 bytes instead of 64
    /// (64 MB at 1,000,000 keys instead of 128), so that a look-up touches half the memory
    /// and half the page table, and two neighbouring slots share a cache line. A string key
    /// is then refused with error::shm_string_key (the table holds no key bytes). Another
    /// layout (keyed_gcra::integer_kind): a process attaching with the other value gets
    /// error::shm_incompatible.
    bool integer_keys = false;
};

namespace detail {

// A key as the table holds it: up to 40 bytes, zero-padded to five words, and its size
// (0 to 40, or integer_key for a 64-bit integer in the first word).
struct key_image {
    std::uint64_t words[5];
    std::uint64_t size;
};

inline constexpr std::uint64_t integer_key = 0xff;

// The image of a string key of at most 40 bytes (the caller checks the size).
inline key_image image_of(std::string_view key) noexcept
{
    key_image k{};
    std::memcpy(k.words, key.data(), key.size());
    k.size = key.size();
    return k;
}

// The image of an integer key.
inline key_image image_of(std::uint64_t key) noexcept
{
    key_image k{};
    k.words[0] = key;
    k.size = integer_key;
    return k;
}

// One key: a cache line. `tag`: 0 never used (a look-up stops here), deleted (a look-up
// goes on), or the key's hash with its low bit set. `meta`: generation << 8 | key size;
// the generation is odd while the key is being written (a sequence lock for the readers
// that take no lock). In a table of integer keys (table_options::integer_keys) a slot is
// the first half only (tag, state, meta, key[0]), 32 bytes apart: key[1..4] are never
// read or written there (keyed_gcra::slot_at and key_words_). Slots start on a cache line.
struct keyed_slot {
    std::atomic<std::uint64_t> tag;
    std::atomic<std::int64_t> state;
    std::atomic<std::uint64_t> meta;
    std::atomic<std::uint64_t> key[5];
};
static_assert(sizeof(keyed_slot) == 64 && offsetof(keyed_slot, key) == 24);

inline constexpr std::uint64_t slot_deleted = 2;

// A shard's lock (process-shared and robust) and what its holder keeps: keys tracked, the
// earliest instant any of them can be idle (a lower bound: no eviction is tried before it)
// and where the last search for an idle key stopped.
struct alignas(64) keyed_shard {
    pthread_mutex_t mutex;
    alignas(64) std::atomic<std::uint64_t> count;
    std::atomic<std::int64_t> idle_floor;
    std::atomic<std::uint64_t> hand;
    std::atomic<std::uint64_t> repairs;
};
static_assert(sizeof(keyed_shard) == 128);

// The table's own: the hash seed, and the count of keys against max_keys with its lock
// (taken after a shard's, never before; each shard's count changes with it, under it, so
// that the count is always the sum of the shards').
struct alignas(64) keyed_header {
    std::uint64_t seed;   // of the key hash, drawn when the segment is created
    alignas(64) pthread_mutex_t mutex;
    std::atomic<std::uint64_t> count;
    std::atomic<std::uint64_t> repairs;
};
static_assert(sizeof(keyed_header) == 128);

} // namespace detail

/// GCRA (token bucket, or leaky bucket with slack) per key, in a table in a named
/// shared-memory segment (see shm::segment): every process that constructs one on the same
/// name decides on the same buckets, as every thread of one process does on one
/// sluice::keyed<token_bucket<>>. Each key decides as policy::gcra with the table's
/// configuration (tests/test_shm_keyed.cpp checks it against a model).
///
///     sluice::shm::keyed_gcra per_client("/myapp-clients", sluice::rate::per_second(10), 20,
///                                        {.max_keys = 1'000'000});
///     if (!per_client.try_acquire(peer_address, 1, now).admitted) return too_many_requests();
///
/// Keys: strings (any std::string_view) of up to max_key_size (40) bytes, held whole and
/// compared byte for byte, so two keys never share a bucket; a longer key is refused at the
/// call with error::shm_key_too_long (hash a longer key yourself and pass the digest, whose
/// collisions are then yours). And 64-bit integers, a kind apart: the integer 7 and the
/// string "7" are two keys. The hash only places keys (the shard, the slot): it is seeded per
/// segment, at random unless table_options::hash_seed fixes it.
///
/// Bounds: at most max_keys keys in the table; a key is evicted only when it is idle (its
/// bucket is full again, so a new bucket decides the same), and only when a new key needs
/// the room: an idle key of the new key's own shard (a shard is 1 / shards() of the table).
/// A new key that finds the table full (or its shard: shard_capacity()) with no key of its
/// shard idle is refused with error::shm_table_full (retry_after: no key of the shard can
/// be idle before then), never admitted unlimited. Memory: 64 bytes a slot (32 in a table of
/// integer keys only: table_options::integer_keys), two slots a key of max_keys (so that
/// look-ups stay short), plus 128 bytes a shard: 128 MB at 1,000,000 keys (64 MB).
///
/// How processes share it without a lock a dead process could hold (why, not what):
/// - A decision on a tracked key takes no lock: it finds the key's slot (open addressing,
///   linear probing within the shard; slots never move), reads the state word and commits
///   with one compare-and-swap on it, as policy::shm_gcra does. A process killed at any
///   instruction of it leaves the word as before or after its swap.
/// - Inserting and evicting take the shard's mutex, process-shared and robust: a holder
///   that dies makes the next one get EOWNERDEAD, repair the shard (finish or undo what the
///   dead one left: a half-written slot is free, an evicted key's slot deleted, the counts
///   recounted) and mark it consistent. A holder that is alive but stopped (SIGSTOP, a
///   debugger) is waited for segment_options::lock_timeout at most: the decision then
///   answers error::shm_lock_timeout (nothing admitted), never a hang. The table's count has a robust lock of its own,
///   taken inside a shard's for a moment: a holder that dies there leaves it to be summed
///   again from the shards'. The steps are ordered so that every prefix is
///   repairable: a new key's slot is written whole (key, then its first decision's state)
///   before its tag publishes it; an eviction first swaps the state word from the idle
///   value it read to a tombstone, then deletes the tag.
/// - No over-admission at eviction: the tombstone swap is the eviction's linearisation
///   point. A decision that read the idle state before it fails its swap (the word is the
///   tombstone now), finds the key gone and inserts it again under the lock: whatever it
///   admits is on a new full bucket, which is what the idle one held. A decision that
///   committed first changed the word, so the eviction's swap fails and it looks again:
///   the key is busy now, or idle with that decision's permits refilled by then.
/// - No decision on another key's bucket: a slot is reused only for a key inserted later;
///   a decision that found its key checks the slot's generation after reading the state and
///   again after its swap. If the slot was reused meanwhile it decides again; in the
///   unlikely case its swap landed on the new key's word (the same value: a lagging clock
///   at the nanosecond), that key is charged a permit it did not take (less admission,
///   never more) and the decision is taken again on the right key.
/// - A process killed at any point either committed its admission or did not: the others
///   see each key's bucket as it was before or after, never in between.
///
/// Time: as policy::shm_gcra (one time line for every process: steady_clock, or tsc_clock within
/// its drift; instants within burst x interval + slack of the int64 clock's beginning
/// decide conservatively). Eviction adds one case: a key evicted by a process whose clock reads ahead
/// by d is new to one that reads behind, which admits at most d / interval permits early,
/// the same bound as a clock ahead.
///
/// Waiting (shm::keyed_bucket's async_acquire): reserve() commits a key's future slot in its
/// state word, as policy::shm_gcra::reserve does on its one word, so the grants of a key follow
/// the order of reservations across processes; refund() gives a cancelled reservation
/// back under policy::shm_gcra's rule (only when nobody else committed on the key after it). A
/// key whose slot lies in the future is not idle, so it is never evicted while a
/// reservation on it is still to come. Once the last slot has come the key may be evicted
/// (its bucket refilled: a new one decides the same): a reservation already granted stands,
/// and a refund then finds the word moved on (a tombstone, or another key's state) and gives
/// nothing back; if that state happens to hold the same value, it is an idle one, and a
/// refund of a full bucket gives nothing back either. So an eviction neither loses nor
/// doubles an admission.
///
/// Bytes written by another process (of the segment's user: see shm::segment for who can
/// attach): every value read from the table that steers a loop or an index (tags, sizes,
/// generations, counts, the clock hand, floors) is checked or bounded by the table's shape,
/// which this process knows from its own configuration; a slot that keeps changing under a
/// decision ends it after a bound (most_looks look-ups, gcra_word::most_tries swaps). A
/// violation is error::shm_corrupt (or shm_table_full, shm_lock_timeout), never undefined
/// behaviour or a hang. A lock whose bytes are not a process-shared robust mutex's is not
/// handed to pthread (shm_corrupt). What stays trusted: the bytes of a mutex while this
/// process holds it (glibc links a robust mutex into its holder's list through them), so
/// a process able to write the segment (its owner, or root) is trusted not to write a lock
/// this process holds; the owner check (shm::segment) keeps other users out.
///
/// Truncated under this process (a named segment: see shm::segment): every call answers
/// error::shm_truncated (keys() throws it).
///
/// Thread-safety: one object may be used from any number of threads, as any number of
/// processes use the table.
class keyed_gcra {
public:
    /// The segment's kind: this table's layout (slots of 64 bytes, keys of 40).
    static constexpr std::uint64_t kind = 2;
    /// The kind of a table of integer keys (table_options::integer_keys): slots of 32 bytes.
    static constexpr std::uint64_t integer_kind = 3;

    /// The longest string key held, in bytes.
    static constexpr std::size_t max_key_size = 40;

    /// Attaches to (or creates) the table of `where`. Throws system_error like
    /// policy::gcra for a bad configuration (error::invalid_rate, invalid_limit,
    /// invalid_duration), error::invalid_option for bad table_options, and like
    /// shm::segment (shm_invalid_name, shm_config_mismatch for another rate, burst, slack,
    /// max_keys or shards, shm_incompatible, shm_foreign, shm_permission, shm_lock_timeout,
    /// shm_truncated, shm_unavailable).
    keyed_gcra(const segment_options& where, sluice::rate r, std::uint64_t burst, const table_options& table = {},
               std::chrono::nanoseconds slack = {});

    /// The same on segment `name` with the default segment_options.
    keyed_gcra(std::string_view name, sluice::rate r, std::uint64_t burst, const table_options& table = {},
               std::chrono::nanoseconds slack = {})
        : keyed_gcra(segment_options{std::string(name)}, r, burst, table, slack)
    {
    }

    keyed_gcra(const keyed_gcra&) = delete;
    keyed_gcra& operator=(const keyed_gcra&) = delete;

    /// Grants n permits of `key` at `now` if its bucket holds them (a new key starts with a
    /// full bucket). Errors in the decision: invalid_count, exceeds_limit,
    /// shm_key_too_long, shm_string_key (any string key on a table of integer keys), shm_table_full,
    /// shm_lock_timeout (a new key, and the shard's lock held by a stopped process),
    /// shm_corrupt (bytes written by someone else), shm_truncated (see shm::segment), and
    /// shm_unavailable if a shard's lock is broken beyond repair (never by a process sluice
    /// manages).
    decision try_acquire(std::string_view key, std::uint64_t n, std::int64_t now) noexcept
    {
        if (error e = refusal_of(key); e != error{}) return invalid(e);
        return decide(detail::image_of(key), n, now);
    }

    /// The same for an integer key.
    decision try_acquire(std::uint64_t key, std::uint64_t n, std::int64_t now) noexcept
    {
        return decide(detail::image_of(key), n, now);
    }

    /// A key hashed once, for the calls that name one key many times (a waiting queue's).
    struct key_handle {
        detail::key_image image;   ///< The key as the table holds it.
        std::uint64_t hash;        ///< Its hash under the table's seed.
    };

    /// The handle of a string key of at most max_key_size bytes (a longer one: the error
    /// shm_key_too_long; any on a table of integer keys: shm_string_key; the handle is then
    /// not to be used).
    key_handle handle(std::string_view key, boost::system::error_code& ec) const noexcept
    {
        ec = {};
        if (error e = refusal_of(key); e != error{}) {
            ec = make_error_code(e);
            return {};
        }
        return handle_of(detail::image_of(key));
    }

    /// The handle of an integer key.
    key_handle handle(std::uint64_t key) const noexcept { return handle_of(detail::image_of(key)); }

    /// try_acquire on a handle.
    decision try_acquire(const key_handle& k, std::uint64_t n, std::int64_t now) noexcept
    {
        return decide(k.image, k.hash, n, now);
    }

    /// The decision try_acquire would take, without consuming anything (a key not tracked
    /// decides as a new one).
    decision check(const key_handle& k, std::uint64_t n, std::int64_t now) const noexcept;

    /// Commits n permits of the key in the future when they become available within
    /// max_wait of now (after every reservation of every process on the key so far), as
    /// policy::shm_gcra::reserve; `h` is the caller's record of its reservations on the key (what
    /// refund() checks). A key not tracked is
    /// inserted with its first grant, at once (a new bucket is full). Errors:
    /// invalid_count, exceeds_limit, timed_out (nothing consumed, `at` the predicted
    /// instant), and try_acquire's errors of the table (shm_table_full, shm_lock_timeout,
    /// shm_corrupt, shm_truncated, shm_unavailable).
    reservation reserve(const key_handle& k, std::uint64_t n, std::int64_t now, std::int64_t max_wait,
                        detail::holder_state& h) noexcept;

    /// Gives back n permits of the caller's reservation number `which` on the key (h.count
    /// after it was made) when no
    /// reservation depends on it (policy::shm_gcra::refund's rule; see the class comment for a
    /// key evicted meanwhile). Returns how far the key's z moved back, in ns.
    std::int64_t refund(const key_handle& k, std::uint64_t n, std::int64_t now, detail::holder_state& h,
                        std::uint64_t which) noexcept;

    /// Earliest instant at which `ahead` permits and then n more of the key could be
    /// granted if nothing else consumed (max_ns: never). Consumes nothing.
    std::int64_t predict(const key_handle& k, std::uint64_t n, std::int64_t now, std::uint64_t ahead = 0) const noexcept;

    /// Whether `key` is tracked now.
    bool contains(std::string_view key) const noexcept;
    /// Whether the integer `key` is tracked now.
    bool contains(std::uint64_t key) const noexcept;

    /// The shard `key` belongs to (0 .. shards() - 1): a new key evicts in its own shard.
    std::size_t shard_of(std::string_view key) const noexcept;
    /// The same for an integer key.
    std::size_t shard_of(std::uint64_t key) const noexcept;

    /// Keys tracked now, by the table's count (exact when no process is inside an insert or
    /// an eviction).
    std::size_t size() const noexcept;

    /// One tracked key, as keys() lists it.
    struct tracked_key {
        std::string key;         ///< The string key's bytes (empty for an integer key).
        bool integer = false;    ///< Whether it is an integer key.
        std::uint64_t value = 0; ///< The integer key.
        std::size_t shard = 0;   ///< Its shard.
        std::int64_t empty_at = 0;   ///< Its state: the instant its bucket is empty.
    };

    /// Every key tracked now, shard by shard, each read under its shard's lock (for
    /// diagnostics: it visits every slot). Throws system_error: shm_lock_timeout,
    /// shm_corrupt, shm_truncated, shm_unavailable.
    std::vector<tracked_key> keys() const;

    /// The hard cap on keys (table_options::max_keys).
    std::size_t max_keys() const noexcept { return max_keys_; }
    /// Shards of the table.
    std::size_t shards() const noexcept { return shard_count_; }
    /// Whether the table holds integer keys only (table_options::integer_keys).
    bool integer_keys() const noexcept { return key_words_ == 1; }
    /// Keys one shard may hold (three quarters of its slots: 1.5 times its share).
    std::size_t shard_capacity() const noexcept { return slots_ * 3 / 4; }
    /// How many times a shard or the table's count was repaired after a process died
    /// holding its lock.
    std::uint64_t repairs() const noexcept;

    /// The rate each key's bucket refills at.
    sluice::rate rate() const noexcept { return sluice::rate::every(std::chrono::nanoseconds{step_.interval}); }
    /// The most permits a key's bucket holds.
    std::uint64_t burst() const noexcept { return step_.burst; }
    /// How far a caller late on its schedule may catch up (0 for a token bucket).
    std::chrono::nanoseconds slack() const noexcept { return std::chrono::nanoseconds{step_.slack}; }

    /// The segment the table lives in.
    const shm::segment& segment() const noexcept { return segment_; }

private:
    using word = shm::detail::gcra_word<sluice::detail::min_ns + 2>;
    // An evicted key's state word, until its slot is reused: no stored z is this.
    static constexpr std::int64_t tomb = sluice::detail::min_ns + 1;

    struct shape {
        std::size_t max_keys;
        std::size_t shards;
        std::size_t slots;   // per shard
        std::uint64_t seed;  // 0: at random
        bool integer;        // integer keys only: slots of 32 bytes
    };

    keyed_gcra(const sluice::detail::gcra_step& step, const shape& s, const segment_options& where);

    static shape shape_of(const table_options& t);
    static shm::detail::segment_layout layout(const sluice::detail::gcra_step& step, const shape& s) noexcept;

    static decision invalid(error e) noexcept;

    static std::uint64_t rotl(std::uint64_t x, int r) noexcept { return (x << r) | (x >> (64 - r)); }

    std::uint64_t hash(const detail::key_image& k) const noexcept
    {
        std::uint64_t h = seed_ ^ (k.size * 0x9E3779B97F4A7C15ull);
        std::size_t n = k.size == detail::integer_key ? 1 : (k.size + 7) / 8;
        for (std::size_t i = 0; i < n; ++i) h = rotl((h ^ k.words[i]) * 0xbf58476d1ce4e5b9ull, 31) * 0x94d049bb133111ebull;
        h ^= h >> 33;
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 33;
        h *= 0xc4ceb9fe1a85ec53ull;
        h ^= h >> 33;
        return h;
    }

    static std::size_t scale(std::uint64_t x, std::size_t n) noexcept
    {
        return static_cast<std::size_t>((static_cast<sluice::detail::uint128>(x) * n) >> 64);
    }

    // Whether a string key can be held: at most max_key_size bytes, on a table of string keys.
    bool holds(std::string_view key) const noexcept { return refusal_of(key) == error{}; }

    // Why the table cannot hold a string key (error{} when it can).
    error refusal_of(std::string_view key) const noexcept
    {
        if (key_words_ == 1) return error::shm_string_key;
        return key.size() > max_key_size ? error::shm_key_too_long : error{};
    }
    key_handle handle_of(const detail::key_image& k) const noexcept { return {k, hash(k)}; }
    // Whether the key has a live slot.
    bool tracked(const key_handle& k) const noexcept;

    std::size_t shard_index(std::uint64_t h) const noexcept { return scale(h, shard_count_); }
    std::size_t home(std::uint64_t h) const noexcept { return scale(rotl(h, 32), slots_); }
    // Slot i of a shard's slots (64 or 32 bytes apart: slot_shift_ is 6 or 5).
    detail::keyed_slot* slot_at(detail::keyed_slot* base, std::size_t i) const noexcept
    {
        return reinterpret_cast<detail::keyed_slot*>(reinterpret_cast<char*>(base) + (i << slot_shift_));
    }
    detail::keyed_slot* slots_of(std::size_t shard) const noexcept { return slot_at(slots_ptr_, shard * slots_); }

    // Whether slot e holds the words of k (the table holds key_words_ of them: 5, or 1 for
    // integer keys).
    bool same_key(const detail::keyed_slot& e, const detail::key_image& k) const noexcept
    {
        if (key_words_ == 1) return e.key[0].load(std::memory_order_acquire) == k.words[0];
        bool same = true;
        for (std::size_t i = 0; i < 5; ++i) same &= e.key[i].load(std::memory_order_acquire) == k.words[i];
        return same;
    }

    // The slot holding `k` with its meta word as read, or nullptr: no lock, so a hit is
    // to be confirmed by the meta word after the state is read.
    detail::keyed_slot* find(const detail::key_image& k, std::uint64_t h, std::uint64_t& meta) const noexcept
    {
        detail::keyed_slot* base = slots_of(shard_index(h));
        const std::uint64_t tag = h | 1;
        std::size_t i = home(h);
        for (std::size_t probes = 0; probes < slots_; ++probes) {
            detail::keyed_slot& e = *slot_at(base, i);
            std::uint64_t t = e.tag.load(std::memory_order_acquire);
            if (t == 0) return nullptr;
            if (t == tag) {
                std::uint64_t m = e.meta.load(std::memory_order_acquire);
                if ((m & 0x100) == 0 && (m & 0xff) == k.size && same_key(e, k)) {
                    meta = m;
                    return &e;
                }
            }
            if (++i == slots_) i = 0;
        }
        return nullptr;
    }

    [[gnu::always_inline]] decision decide(const detail::key_image& k, std::uint64_t n, std::int64_t now) noexcept
    {
        return decide(k, hash(k), n, now);
    }

    [[gnu::always_inline]] decision decide(const detail::key_image& k, const std::uint64_t h, std::uint64_t n,
                                           std::int64_t now) noexcept
    {
        if (n == 0 || n > step_.burst) return invalid(n == 0 ? error::invalid_count : error::exceeds_limit);
        decision d;
        int found = on_tracked(k, h, [&](std::int64_t w, auto&& commit) { return word::decide(step_, w, n, now, d, commit); });
        // The truncation mark last: a decision taken on the zeros that replaced a truncated
        // mapping (see shm::segment) is not an answer.
        if (found > 0 && !segment_.truncated()) return d;
        if (found < 0) return answer(invalid(error::shm_corrupt));
        return decide_locked(k, h, n, now);
    }

    // Runs step(w, commit) (word::decide or word::reserve on the key's state w) on k's
    // slot without a lock: 1 once it has, 0 when the key is not tracked (or is being
    // evicted), -1 when the slot keeps changing under it beyond what any process of the
    // table does (most_looks look-ups, word::most_tries swaps: written in a loop by
    // someone else). The state read is the key's only if the slot kept its generation
    // around it (the read is ordered before this one by its acquire); a swap that landed
    // on a slot reused meanwhile is noticed after it, and the key looked up again (see the
    // class comment). A tombstone: the key is being evicted, and the caller's lock orders
    // it after that.
    template <class Step>
    [[gnu::always_inline]] int on_tracked(const detail::key_image& k, std::uint64_t h, Step&& step) noexcept
    {
        for (int looks = 0; looks < most_looks; ++looks) {
            std::uint64_t m;
            detail::keyed_slot* e = find(k, h, m);
            if (!e) return 0;
            std::int64_t w = e->state.load(std::memory_order_acquire);
            bool reused = false;
            auto commit = [&](std::int64_t stored) {
                if (!e->state.compare_exchange_weak(w, stored, std::memory_order_acq_rel, std::memory_order_acquire))
                    return false;
                reused = e->meta.load(std::memory_order_acquire) != m;
                return !reused;
            };
            for (int tries = 0; w != tomb && !reused;) {
                if (e->meta.load(std::memory_order_acquire) != m) {
                    reused = true;
                    break;
                }
                if (step(w, commit)) return 1;
                if (++tries == word::most_tries) return -1;
            }
            if (!reused) return 0;
        }
        return -1;
    }

    // Look-ups of one key that find its slot reused each time before a decision gives up
    // (error::shm_corrupt): each is an eviction and an insert by someone else meanwhile.
    static constexpr int most_looks = 1024;

    // d, or error::shm_truncated when the segment was truncated under this process.
    decision answer(const decision& d) const noexcept
    {
        return segment_.truncated() ? invalid(error::shm_truncated) : d;
    }

    // The key's word now: its state, or fresh for a key not tracked (or being evicted).
    // False when its slot keeps changing (most_looks).
    bool word_of(const key_handle& k, std::int64_t& w) const noexcept;

    // insert(), answered.
    decision decide_locked(const detail::key_image& k, std::uint64_t h, std::uint64_t n, std::int64_t now) noexcept;

    // Under the shard's lock (taken within the segment's lock_timeout): the key again
    // (another process may have inserted it), else a new slot for it with its first
    // decision, after an eviction when the shard is full.
    decision insert(const detail::key_image& k, std::uint64_t h, std::uint64_t n, std::int64_t now) noexcept;

    // Under shard si's lock: evicts one idle key (1), or says how long until one can be
    // idle (0), or why it could not look (-1: the table's lock, or a slot's word written
    // in a loop).
    int evict_one(std::size_t si, std::int64_t now, std::int64_t& retry, std::chrono::steady_clock::time_point deadline,
                  error& why) noexcept;

    // Under shard si's lock: counts one key more in the shard and the table (1), or says
    // there is no room (0) or why the table's lock was not taken (-1).
    int count_in(std::size_t si, std::chrono::steady_clock::time_point deadline, error& why) noexcept;

    // Under the lock, after slot i was deleted: turns deleted slots no look-up needs back
    // into never-used ones.
    void clean_after(detail::keyed_slot* base, std::size_t i) const noexcept;

    sluice::detail::gcra_step step_;
    std::size_t max_keys_;
    std::size_t shard_count_;
    std::size_t slots_;
    unsigned slot_shift_;     // log2 of a slot's bytes: 6, or 5 for integer keys
    std::size_t key_words_;   // key words a slot holds: 5, or 1 for integer keys
    shape shape_;   // what the segment's init reads when this process creates it
    shm::segment segment_;
    detail::keyed_header* header_;
    std::uint64_t seed_;
    detail::keyed_shard* shards_;
    detail::keyed_slot* slots_ptr_;
};

} // namespace sluice::shm
