// The slow paths of shm::keyed_gcra (see include/sluice/shm/keyed_gcra.hpp): creating the
// table, inserting and evicting keys under a shard's robust mutex, and repairing a shard
// whose last holder died.
#include <sluice/shm/keyed_gcra.hpp>

#include <boost/system/system_error.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include <sys/random.h>
#include <unistd.h>

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

namespace sluice::shm {
namespace {

using detail::keyed_header;
using detail::keyed_shard;
using detail::keyed_slot;
using detail::slot_deleted;

constexpr std::size_t default_shards = 256;
constexpr std::size_t most_shards = 65536;
constexpr std::uint64_t most_keys = std::uint64_t{1} << 32;

std::size_t header_bytes(std::size_t shards) noexcept { return sizeof(keyed_header) + shards * sizeof(keyed_shard); }

std::uint64_t generation(std::uint64_t meta) noexcept { return meta >> 8; }

// The kind glibc gives a process-shared robust mutex (what the table's init makes): a lock
// of another kind was written by someone else, and is not handed to pthread.
int robust_kind() noexcept
{
#ifdef __GLIBC__
    static const int kind = [] {
        pthread_mutexattr_t a;
        ::pthread_mutexattr_init(&a);
        ::pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
        ::pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
        pthread_mutex_t m;
        ::pthread_mutex_init(&m, &a);
        ::pthread_mutexattr_destroy(&a);
        int k = m.__data.__kind;
        ::pthread_mutex_destroy(&m);
        return k;
    }();
    return kind;
#else
    return 0;
#endif
}

bool robust_kind_of(const pthread_mutex_t& m) noexcept
{
#ifdef __GLIBC__
    return __atomic_load_n(&m.__data.__kind, __ATOMIC_RELAXED) == robust_kind();
#else
    (void)m;
    return true;
#endif
}

// Locks m until `deadline` at most (a holder that is stopped must not hang us).
// ThreadSanitizer's runtime sees pthread_mutex_timedlock (CLOCK_REALTIME), not clocklock.
int lock_until(pthread_mutex_t& m, std::chrono::steady_clock::time_point deadline) noexcept
{
#if defined(__SANITIZE_THREAD__)
    auto left = deadline - std::chrono::steady_clock::now();
    auto until = std::chrono::system_clock::now() + std::chrono::duration_cast<std::chrono::system_clock::duration>(left);
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(until.time_since_epoch()).count();
    timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
    int r = ::pthread_mutex_timedlock(&m, &ts);
    // Its interceptor counts a lock taken only on 0 (pthread_mutex_lock's also on EOWNERDEAD).
    if (r == EOWNERDEAD) {
        __tsan_mutex_pre_lock(&m, __tsan_mutex_try_lock);
        __tsan_mutex_post_lock(&m, __tsan_mutex_try_lock, 0);
    }
    return r;
#else
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.time_since_epoch()).count();
    timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
    return ::pthread_mutex_clocklock(&m, CLOCK_MONOTONIC, &ts);
#endif
}

// Holds a robust lock, taken before `deadline`. A holder that died left what it guarded as
// its last step did: `repair` makes it whole before anyone reads it, and is repeated if the
// repairer dies too (the lock stays inconsistent until it is marked consistent). Not held:
// error() says why (shm_lock_timeout, shm_corrupt, shm_unavailable).
class robust_lock {
public:
    template <class Repair>
    robust_lock(pthread_mutex_t& m, std::chrono::steady_clock::time_point deadline, Repair&& repair) noexcept : m_(m)
    {
        if (!robust_kind_of(m)) {
            error_ = error::shm_corrupt;
            return;
        }
        int r = lock_until(m, deadline);
        if (r == EOWNERDEAD) {
            repair();
            r = ::pthread_mutex_consistent(&m);
            if (r != 0) {
                // Not ours to hold then: let go, so that this thread's robust list does not
                // keep it (its holder's unlock marks it unrecoverable).
                ::pthread_mutex_unlock(&m);
                r = ENOTRECOVERABLE;
            }
        }
        held_ = r == 0;
        if (r == ETIMEDOUT) error_ = error::shm_lock_timeout;
        else if (r == EDEADLK || r == EINVAL) error_ = error::shm_corrupt;   // its bytes say we hold it, or no kind
        else if (r != 0) error_ = error::shm_unavailable;   // ENOTRECOVERABLE: broken beyond repair
    }
    ~robust_lock()
    {
        if (held_) ::pthread_mutex_unlock(&m_);
    }
    robust_lock(const robust_lock&) = delete;
    robust_lock& operator=(const robust_lock&) = delete;

    bool held() const noexcept { return held_; }
    error why() const noexcept { return error_; }

private:
    pthread_mutex_t& m_;
    bool held_ = false;
    error error_{};
};

constexpr std::int64_t tomb_word = sluice::detail::min_ns + 1;

// The table's count lock: a holder that died between a shard's count and the table's
// leaves the sum to be taken again (every shard's count changes under this lock only).
robust_lock table_lock(keyed_header& h, keyed_shard* shards, std::size_t n,
                       std::chrono::steady_clock::time_point deadline) noexcept
{
    return robust_lock(h.mutex, deadline, [&] {
        std::uint64_t sum = 0;
        for (std::size_t i = 0; i < n; ++i) sum += shards[i].count.load(std::memory_order_relaxed);
        h.count.store(sum, std::memory_order_relaxed);
        h.repairs.fetch_add(1, std::memory_order_relaxed);
    });
}

// A shard's lock. Every step of an insert or an eviction left the shard in a state the
// repair undoes or finishes: a half-written slot is free, an eviction that swapped the
// state to the tombstone has its tag deleted, and the count is taken again from the slots
// (the table's with it, by the difference; if the table's lock is not free in time, both
// counts are left as they were, and the shard's lock is made consistent all the same: a
// lock left inconsistent would be lost for good).
robust_lock shard_lock(keyed_header& h, keyed_shard* shards, std::size_t n, std::size_t si, keyed_slot* slots,
                       std::size_t nslots, unsigned slot_shift, std::chrono::steady_clock::time_point deadline) noexcept
{
    keyed_shard& s = shards[si];
    return robust_lock(s.mutex, deadline, [&] {
        std::uint64_t count = 0;
        for (std::size_t i = 0; i < nslots; ++i) {
            keyed_slot& e = *reinterpret_cast<keyed_slot*>(reinterpret_cast<char*>(slots) + (i << slot_shift));
            std::uint64_t m = e.meta.load(std::memory_order_relaxed);
            std::uint64_t t = e.tag.load(std::memory_order_relaxed);
            bool half_written = generation(m) & 1;
            if (half_written) {
                // A key being written: never published (its tag comes last), so the slot
                // is free; an even generation again for the readers' sequence check.
                e.meta.store(((generation(m) + 1) << 8) | (m & 0xff), std::memory_order_release);
            }
            if ((t & 1) && (half_written || e.state.load(std::memory_order_acquire) == tomb_word)) {
                e.tag.store(slot_deleted, std::memory_order_release);
                t = slot_deleted;
            }
            if (t & 1) ++count;
        }
        if (robust_lock g = table_lock(h, shards, n, deadline); g.held()) {
            std::uint64_t was = s.count.load(std::memory_order_relaxed);
            h.count.store(h.count.load(std::memory_order_relaxed) + count - was, std::memory_order_relaxed);
            s.count.store(count, std::memory_order_relaxed);
        }
        s.idle_floor.store(sluice::detail::min_ns, std::memory_order_relaxed);
        s.repairs.fetch_add(1, std::memory_order_relaxed);
    });
}

std::uint64_t random_seed() noexcept
{
    std::uint64_t seed = 0;
    if (::getrandom(&seed, sizeof seed, 0) != static_cast<ssize_t>(sizeof seed))
        seed = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
               (static_cast<std::uint64_t>(::getpid()) << 32);
    return seed;
}

[[noreturn]] void bad_option(const char* what)
{
    throw boost::system::system_error(make_error_code(error::invalid_option), what);
}

} // namespace

keyed_gcra::shape keyed_gcra::shape_of(const table_options& t)
{
    if (t.max_keys == 0 || t.max_keys > most_keys) bad_option("shm::table_options::max_keys: 1 to 2^32");
    // By default shards of 1,024 keys or more: a shard holds its share only, and small shares
    // fill unevenly.
    std::size_t shards = t.shards ? t.shards : std::clamp<std::size_t>(t.max_keys / 1024, 1, default_shards);
    if (shards > std::min<std::size_t>(t.max_keys, most_shards))
        bad_option("shm::table_options::shards: 1 to min(max_keys, 65536)");
    std::size_t per = (t.max_keys + shards - 1) / shards;
    return {t.max_keys, shards, 2 * per, t.hash_seed, t.integer_keys};
}

shm::detail::segment_layout keyed_gcra::layout(const sluice::detail::gcra_step& step, const shape& s) noexcept
{
    // max_keys < 2^33 and shards <= 2^16: one configuration word holds both.
    std::int64_t table = static_cast<std::int64_t>(s.max_keys) | (static_cast<std::int64_t>(s.shards) << 40);
    return {s.integer ? integer_kind : kind,
            {step.interval, static_cast<std::int64_t>(step.burst), step.slack, table},
            header_bytes(s.shards) + s.shards * s.slots * (s.integer ? sizeof(keyed_slot) / 2 : sizeof(keyed_slot)),
            [](void* p, const shm::detail::segment_layout& l) noexcept {
                // The slots are zero (the file is new): never used, generation 0.
                const auto* shp = static_cast<const shape*>(l.context);
                auto shards = shp->shards;
                auto* h = ::new (p) keyed_header{};
                h->seed = shp->seed ? shp->seed : random_seed();
                auto* sh = reinterpret_cast<keyed_shard*>(static_cast<char*>(p) + sizeof(keyed_header));
                pthread_mutexattr_t a;
                ::pthread_mutexattr_init(&a);
                ::pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
                ::pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
                ::pthread_mutex_init(&h->mutex, &a);
                for (std::size_t i = 0; i < shards; ++i) {
                    auto* s = ::new (&sh[i]) keyed_shard{};
                    ::pthread_mutex_init(&s->mutex, &a);
                    s->idle_floor.store(sluice::detail::min_ns, std::memory_order_relaxed);
                }
                ::pthread_mutexattr_destroy(&a);
            },
            &s};
}

keyed_gcra::keyed_gcra(const segment_options& where, sluice::rate r, std::uint64_t burst, const table_options& table,
                       std::chrono::nanoseconds slack)
    : keyed_gcra(sluice::detail::gcra_step::make(r.interval().count(), burst, slack.count()), shape_of(table), where)
{
}

keyed_gcra::keyed_gcra(const sluice::detail::gcra_step& step, const shape& s, const segment_options& where)
    : step_(step),
      max_keys_(s.max_keys),
      shard_count_(s.shards),
      slots_(s.slots),
      slot_shift_(s.integer ? 5 : 6),
      key_words_(s.integer ? 1 : 5),
      shape_(s),
      segment_(where, layout(step, shape_)),
      header_(static_cast<keyed_header*>(segment_.payload())),
      seed_(header_->seed),
      shards_(reinterpret_cast<keyed_shard*>(static_cast<char*>(segment_.payload()) + sizeof(keyed_header))),
      slots_ptr_(reinterpret_cast<keyed_slot*>(static_cast<char*>(segment_.payload()) + header_bytes(s.shards)))
{
}

decision keyed_gcra::invalid(error e) noexcept { return sluice::detail::invalid_decision(e); }

decision keyed_gcra::decide_locked(const detail::key_image& k, std::uint64_t h, std::uint64_t n,
                                   std::int64_t now) noexcept
{
    return answer(insert(k, h, n, now));
}

decision keyed_gcra::insert(const detail::key_image& k, std::uint64_t h, std::uint64_t n, std::int64_t now) noexcept
{
    const auto deadline = std::chrono::steady_clock::now() + segment_.lock_timeout();
    const std::size_t si = shard_index(h);
    keyed_shard& s = shards_[si];
    keyed_slot* base = slots_of(si);
    robust_lock lock = shard_lock(*header_, shards_, shard_count_, si, base, slots_, slot_shift_, deadline);
    if (!lock.held()) return invalid(lock.why());
    const std::uint64_t tag = h | 1;

    // Finds the key, or the first free slot of its probe sequence (where it goes: every
    // slot between its home and there is taken, so look-ups reach it).
    auto look = [&](std::size_t& free) -> keyed_slot* {
        free = slots_;
        std::size_t i = home(h);
        for (std::size_t probes = 0; probes < slots_; ++probes) {
            keyed_slot& e = *slot_at(base, i);
            std::uint64_t t = e.tag.load(std::memory_order_acquire);
            if (t == tag && (e.meta.load(std::memory_order_relaxed) & 0xff) == k.size && same_key(e, k)) return &e;
            if (!(t & 1) && free == slots_) free = i;
            if (t == 0) break;
            if (++i == slots_) i = 0;
        }
        return nullptr;
    };

    std::size_t free;
    if (keyed_slot* e = look(free)) {
        // Inserted by another process since our look-up. Slots do not change hands under
        // the lock: only decisions race with us here.
        std::int64_t w = e->state.load(std::memory_order_acquire);
        decision d;
        for (int tries = 0; !word::decide(step_, w, n, now, d, [&](std::int64_t stored) {
                 return e->state.compare_exchange_weak(w, stored, std::memory_order_acq_rel, std::memory_order_acquire);
             });) {
            if (++tries == word::most_tries) return invalid(error::shm_corrupt);
        }
        return d;
    }

    // A new key: a full bucket, so n (at most the burst) is granted.
    decision d;
    std::int64_t first = word::fresh;
    word::decide(step_, word::fresh, n, now, d, [&](std::int64_t stored) {
        first = stored;
        return true;
    });

    // Room: counted in the table (and the shard), after evicting an idle key of this shard
    // when the table is full; each eviction makes room for one, unless another process
    // took it meanwhile. At most one eviction a slot of the shard: more is no process's.
    for (std::size_t evictions = 0;; ++evictions) {
        error why{};
        int room = count_in(si, deadline, why);
        if (room < 0) return invalid(why);
        if (room > 0) break;
        std::int64_t retry = 0;
        int evicted = evictions < slots_ ? evict_one(si, now, retry, deadline, why) : -1;
        if (evicted < 0) return invalid(why == error{} ? error::shm_corrupt : why);
        if (evicted == 0) {
            decision full = invalid(error::shm_table_full);
            full.retry_after = std::chrono::nanoseconds{std::max<std::int64_t>(retry, 1)};
            return full;
        }
    }
    look(free);   // evictions may have changed the probe sequence's free slots
    if (free == slots_) {
        // Never, but in a table written by someone else: a shard holds at most three
        // quarters of its slots.
        if (robust_lock g = table_lock(*header_, shards_, shard_count_, deadline); g.held()) {
            s.count.store(s.count.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
            header_->count.store(header_->count.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
        }
        return invalid(error::shm_corrupt);
    }

    // Written whole before the tag publishes it: a reader that sees the tag sees the key
    // and its state; a holder killed before the tag leaves a free slot.
    keyed_slot& e = *slot_at(base, free);
    std::uint64_t g = generation(e.meta.load(std::memory_order_relaxed));
    g += (g & 1) ? 1 : 2;   // from even to even, through odd while the key is written
    // The odd generation first: a reader that reads any of the new key's words (acquire,
    // from these release stores) then reads an odd or later generation, and discards what
    // it read (no fence: ThreadSanitizer does not follow fences).
    e.meta.store((g - 1) << 8, std::memory_order_relaxed);
    for (std::size_t i = 0; i < key_words_; ++i) e.key[i].store(k.words[i], std::memory_order_release);
    e.meta.store((g << 8) | k.size, std::memory_order_release);
    e.state.store(first, std::memory_order_release);
    e.tag.store(tag, std::memory_order_release);
    std::int64_t idle = sluice::detail::sat_narrow(step_.idle_at(word::z_of(first)));
    if (idle < s.idle_floor.load(std::memory_order_relaxed)) s.idle_floor.store(idle, std::memory_order_relaxed);
    return d;
}

int keyed_gcra::count_in(std::size_t si, std::chrono::steady_clock::time_point deadline, error& why) noexcept
{
    keyed_shard& s = shards_[si];
    robust_lock g = table_lock(*header_, shards_, shard_count_, deadline);
    if (!g.held()) {
        why = g.why();
        return -1;
    }
    std::uint64_t total = header_->count.load(std::memory_order_relaxed);
    std::uint64_t here = s.count.load(std::memory_order_relaxed);
    if (total >= max_keys_ || here >= shard_capacity()) return 0;
    s.count.store(here + 1, std::memory_order_relaxed);
    header_->count.store(total + 1, std::memory_order_relaxed);
    return 1;
}

int keyed_gcra::evict_one(std::size_t si, std::int64_t now, std::int64_t& retry,
                          std::chrono::steady_clock::time_point deadline, error& why) noexcept
{
    keyed_shard& s = shards_[si];
    keyed_slot* base = slots_of(si);
    // No key of the shard is idle before the floor: every key's idle instant only moves
    // later (decisions consume), and a new key lowers the floor to its own.
    std::int64_t floor = s.idle_floor.load(std::memory_order_relaxed);
    if (now < floor) {
        retry = sluice::detail::sat_sub(floor, now);
        return 0;
    }
    sluice::detail::int128 earliest = sluice::detail::max_ns;
    std::size_t i = static_cast<std::size_t>(s.hand.load(std::memory_order_relaxed) % slots_);
    for (std::size_t seen = 0; seen < slots_; ++seen, i = i + 1 == slots_ ? 0 : i + 1) {
        keyed_slot& e = *slot_at(base, i);
        if (!(e.tag.load(std::memory_order_relaxed) & 1)) continue;
        std::int64_t w = e.state.load(std::memory_order_acquire);
        for (int tries = 0;; ++tries) {
            if (tries == word::most_tries) {
                why = error::shm_corrupt;
                return -1;
            }
            sluice::detail::int128 idle = step_.idle_at(word::z_of(w));
            if (idle > now) {
                earliest = std::min(earliest, idle);
                break;
            }
            // The counts' lock first, so that an eviction is counted whenever it happens.
            robust_lock g = table_lock(*header_, shards_, shard_count_, deadline);
            if (!g.held()) {
                why = g.why();
                return -1;
            }
            // The linearisation point: a decision that read w fails its swap from now on.
            if (e.state.compare_exchange_weak(w, tomb, std::memory_order_acq_rel, std::memory_order_acquire)) {
                e.tag.store(slot_deleted, std::memory_order_release);
                s.count.store(s.count.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
                header_->count.store(header_->count.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
                clean_after(base, i);
                s.hand.store(i + 1, std::memory_order_relaxed);
                return 1;
            }
        }
    }
    std::int64_t e = sluice::detail::sat_narrow(earliest);
    s.idle_floor.store(e, std::memory_order_relaxed);
    retry = sluice::detail::sat_sub(e, now);
    return 0;
}

void keyed_gcra::clean_after(detail::keyed_slot* base, std::size_t i) const noexcept
{
    // A deleted slot followed by a never-used one is on no tracked key's probe sequence
    // (each runs from its home to its key over taken slots, and a never-used slot stops
    // it): it becomes never used, and so may the deleted ones before it. Look-ups of
    // absent keys stay short.
    if (slot_at(base, i + 1 == slots_ ? 0 : i + 1)->tag.load(std::memory_order_relaxed) != 0) return;
    for (std::size_t n = 0; n < slots_ && slot_at(base, i)->tag.load(std::memory_order_relaxed) == slot_deleted; ++n) {
        slot_at(base, i)->tag.store(0, std::memory_order_release);
        i = i == 0 ? slots_ - 1 : i - 1;
    }
}

bool keyed_gcra::word_of(const key_handle& k, std::int64_t& w) const noexcept
{
    for (int looks = 0; looks < most_looks; ++looks) {
        std::uint64_t m;
        const keyed_slot* e = find(k.image, k.hash, m);
        if (!e) {
            w = word::fresh;
            return true;
        }
        w = e->state.load(std::memory_order_acquire);
        // The state is the key's only if the slot kept its generation around the read.
        if (e->meta.load(std::memory_order_acquire) != m) continue;
        if (w == tomb) w = word::fresh;
        return true;
    }
    return false;
}

decision keyed_gcra::check(const key_handle& k, std::uint64_t n, std::int64_t now) const noexcept
{
    if (n == 0 || n > step_.burst) return invalid(n == 0 ? error::invalid_count : error::exceeds_limit);
    std::int64_t w;
    if (!word_of(k, w)) return answer(invalid(error::shm_corrupt));
    decision d;
    word::decide(step_, w, n, now, d, [](std::int64_t) { return true; });
    return answer(d);
}

std::int64_t keyed_gcra::predict(const key_handle& k, std::uint64_t n, std::int64_t now,
                                 std::uint64_t ahead) const noexcept
{
    std::uint64_t total;
    std::int64_t w;
    if (__builtin_add_overflow(ahead, n, &total) || !word_of(k, w) || segment_.truncated())
        return sluice::detail::max_ns;
    return sluice::detail::sat_narrow(step_.next_z(word::z_of(w), total, now));
}

reservation keyed_gcra::reserve(const key_handle& k, std::uint64_t n, std::int64_t now, std::int64_t max_wait,
                                detail::holder_state& h) noexcept
{
    if (n == 0) return sluice::detail::invalid_reservation(error::invalid_count);
    if (n > step_.burst) return sluice::detail::invalid_reservation(error::exceeds_limit);
    auto finish = [this](const reservation& r) {
        return segment_.truncated() ? sluice::detail::invalid_reservation(error::shm_truncated) : r;
    };
    for (int inserts = 0;; ++inserts) {
        reservation r;
        int found = on_tracked(k.image, k.hash, [&](std::int64_t w, auto&& commit) {
            return word::reserve(step_, w, n, now, max_wait, r, h, commit);
        });
        if (found > 0) return finish(r);
        if (found < 0 || inserts == most_looks) return finish(sluice::detail::invalid_reservation(error::shm_corrupt));
        // Not tracked (or being evicted): a new bucket is full, so n (at most the burst)
        // is granted at once, inserted under the shard's lock as try_acquire does. A
        // refusal without an error: another process inserted the key meanwhile and it has
        // nothing now; reserve on its word.
        decision d = decide_locked(k.image, k.hash, n, now);
        if (d.admitted || d.error) {
            r = {};
            r.admitted = d.admitted;
            r.error = d.error;
            r.at = d.admitted ? now : sluice::detail::sat_add(now, static_cast<std::int64_t>(d.retry_after.count()));
            return r;
        }
    }
}

std::int64_t keyed_gcra::refund(const key_handle& k, std::uint64_t n, std::int64_t now, detail::holder_state& h,
                                std::uint64_t which) noexcept
{
    std::uint64_t m;
    keyed_slot* e = find(k.image, k.hash, m);
    if (!e || segment_.truncated()) return 0;   // evicted: what it reserved has come and gone (see the class comment)
    return word::refund(step_, e->state, n, now, h, which);
}

bool keyed_gcra::contains(std::string_view key) const noexcept
{
    return holds(key) && tracked(handle_of(detail::image_of(key)));
}

bool keyed_gcra::contains(std::uint64_t key) const noexcept { return tracked(handle_of(detail::image_of(key))); }

bool keyed_gcra::tracked(const key_handle& k) const noexcept
{
    std::uint64_t m;
    keyed_slot* e = find(k.image, k.hash, m);
    return e && e->state.load(std::memory_order_acquire) != tomb;
}

std::size_t keyed_gcra::shard_of(std::string_view key) const noexcept
{
    return shard_index(hash(detail::image_of(key.substr(0, max_key_size))));
}

std::size_t keyed_gcra::shard_of(std::uint64_t key) const noexcept { return shard_index(hash(detail::image_of(key))); }

std::size_t keyed_gcra::size() const noexcept { return header_->count.load(std::memory_order_relaxed); }

std::uint64_t keyed_gcra::repairs() const noexcept
{
    std::uint64_t n = header_->repairs.load(std::memory_order_relaxed);
    for (std::size_t i = 0; i < shard_count_; ++i) n += shards_[i].repairs.load(std::memory_order_relaxed);
    return n;
}

std::vector<keyed_gcra::tracked_key> keyed_gcra::keys() const
{
    std::vector<tracked_key> out;
    const auto deadline = std::chrono::steady_clock::now() + segment_.lock_timeout();
    auto fail = [this](error e, const char* what) {
        if (segment_.truncated()) e = error::shm_truncated;   // whatever the zeros made it
        throw boost::system::system_error(make_error_code(e), what);
    };
    for (std::size_t si = 0; si < shard_count_; ++si) {
        keyed_slot* base = slots_of(si);
        robust_lock lock = shard_lock(*header_, shards_, shard_count_, si, base, slots_, slot_shift_, deadline);
        if (!lock.held()) fail(lock.why(), "shm::keyed_gcra shard lock");
        for (std::size_t i = 0; i < slots_; ++i) {
            keyed_slot& e = *slot_at(base, i);
            if (!(e.tag.load(std::memory_order_acquire) & 1)) continue;
            tracked_key t;
            std::uint64_t size = e.meta.load(std::memory_order_relaxed) & 0xff;
            if (size != detail::integer_key && (size > max_key_size || key_words_ == 1))
                fail(error::shm_corrupt, "shm::keyed_gcra: a key's size is out of range");
            std::uint64_t words[5] = {};
            for (std::size_t j = 0; j < key_words_; ++j) words[j] = e.key[j].load(std::memory_order_relaxed);
            if (size == detail::integer_key) {
                t.integer = true;
                t.value = words[0];
            } else {
                t.key.assign(reinterpret_cast<const char*>(words), static_cast<std::size_t>(size));
            }
            t.shard = si;
            t.empty_at = e.state.load(std::memory_order_acquire);
            out.push_back(std::move(t));
        }
    }
    if (segment_.truncated()) fail(error::shm_truncated, "shm::keyed_gcra: the segment was truncated");
    return out;
}

} // namespace sluice::shm
