// Scenario `keyed` (a sluice addition): --threads T threads make --ops N non-blocking
// checks in all on ONE keyed limiter, over --keys K keys drawn --dist uniform or zipf
// (s = 1, key 0 the hottest). The store is filled with every key first (timed apart, as
// insert_ns_per_key: a new key's cost), then the checks are timed.
//
//   --key string : "client-123456" (at most 17 characters), looked up as std::string_view
//   --key u64    : std::uint64_t, the key's index
//   --key ipv4   : boost::asio::ip::address_v4, 10.0.0.0 + index
//   --key ipv6   : unsigned __int128, 2001:db8:: + index
//
// Each check makes its key from its index, as a server has it (just parsed, in cache): a
// table of a million keys read at random would add a cache miss of its own to every check.
//
//   --admitting=true : per key a burst larger than --ops, refilled so slowly (one permit in
//                      15 min or more) that every check admits and no key goes idle (and is
//                      evicted) during the run: a pure look-up and decision
//   --admitting=false: per key 1/s, burst 1: the first check of a key admits, the rest reject
//
// --policy keyed (default): sluice::keyed<token_bucket>; --policy naive: one std::mutex
// around a std::unordered_map<Key, std::unique_ptr<policy::gcra>> (no eviction, no cap),
// the textbook version, for reference.
//
// --clock default|steady|tsc|coarse: the Clock of the limiters (and of the naive version's
// reads), default sluice::default_clock.
//
// --backend shm (keys string or u64): the same run on sluice::shm::keyed_bucket<Clock>, one table of
// max_keys = --keys in a shared-memory segment (removed after), beside the in-process
// keyed<token_bucket<Clock>> in the same process (u64 keys: a table of integer keys only,
// table_options::integer_keys, as the in-process store holds u64 only): two lines, "backend": "local" then
// "shm" (created and evicted: 0 on the shm line, which does not count them).
//
// The reference: chase_ns, one hop of a dependent random pointer chase over 128 MB (a
// cache miss and most often a TLB miss), measured in the same run; misses_per_check =
// ns_per_op / chase_ns.
//
// Prints one JSON line: scenario, policy, key, keys, dist, threads, admitting, ops, clock,
// clock_ns (one read of the clock), ns_per_op, chase_ns, misses_per_check,
// insert_ns_per_key, bytes_per_key ((resident memory after filling - before) / keys),
// max_rss_kib, admitted, created and evicted during the timed run.
#include "bench_common.hpp"

#include <sluice/keyed.hpp>
#include <sluice/policy/gcra.hpp>
#include <sluice/shm/keyed_bucket.hpp>
#include <sluice/token_bucket.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address_v4.hpp>

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <latch>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <vector>

namespace sluice_bench {

std::int64_t keyed_keys = 1000;        // --keys
std::string keyed_dist = "uniform";    // --dist uniform|zipf
std::string keyed_key = "string";      // --key string|u64|ipv4|ipv6

namespace {

using steady = std::chrono::steady_clock;
__extension__ typedef unsigned __int128 u128;

// Resident memory now, in bytes (/proc/self/statm: size resident ...).
long resident_bytes()
{
    std::ifstream f("/proc/self/statm");
    long size = 0, resident = 0;
    f >> size >> resident;
    return resident * sysconf(_SC_PAGESIZE);
}

// ns per hop of a dependent pointer chase over `bytes`: one pointer per 64-byte line, the
// lines in one random cycle (Sattolo), so that every hop waits for the previous miss.
double pointer_chase_ns(std::size_t bytes = std::size_t{128} << 20)
{
    const std::size_t lines = bytes / 64;
    std::vector<std::uint32_t> order(lines);
    std::iota(order.begin(), order.end(), 0u);
    std::mt19937_64 rng(99);
    for (std::size_t i = lines - 1; i > 0; --i)
        std::swap(order[i], order[std::uniform_int_distribution<std::size_t>(0, i - 1)(rng)]);
    std::vector<std::uint64_t> mem(lines * 8);
    for (std::size_t i = 0; i < lines; ++i)
        mem[std::size_t{i} * 8] = order[i];
    std::uint64_t p = 0;
    for (std::size_t i = 0; i < lines / 4; ++i) p = mem[p * 8];   // warm the page tables a little
    const std::size_t hops = 2'000'000;
    auto t0 = steady::now();
    for (std::size_t i = 0; i < hops; ++i) p = mem[p * 8];
    double ns = static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(steady::now() - t0).count());
    if (p == lines) std::puts("");   // keeps the chase
    return ns / static_cast<double>(hops);
}

// Key indices for one thread: a repeating sequence drawn in advance, so that drawing costs
// nothing in the timed loop. Zipf by inverse CDF.
std::vector<std::uint32_t> draw(std::size_t count, std::size_t keys, bool zipf, std::uint64_t seed,
                                const std::vector<double>& cdf)
{
    std::mt19937_64 rng(seed);
    std::vector<std::uint32_t> v(count);
    std::uniform_real_distribution<double> u(0, 1);
    for (auto& x : v) {
        if (zipf)
            x = static_cast<std::uint32_t>(std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin());
        else
            x = static_cast<std::uint32_t>(rng() % keys);
        if (x >= keys) x = static_cast<std::uint32_t>(keys - 1);
    }
    return v;
}

// Makes the key of an index, for each --key kind: `stored` is the keyed limiter's Key.
struct string_keys {
    using stored = std::string;
    char buf[24];
    std::string_view operator()(std::uint32_t i) noexcept
    {
        std::memcpy(buf, "client-", 7);
        auto r = std::to_chars(buf + 7, buf + sizeof buf, i);
        return {buf, static_cast<std::size_t>(r.ptr - buf)};
    }
};

struct u64_keys {
    using stored = std::uint64_t;
    std::uint64_t operator()(std::uint32_t i) const noexcept { return i; }
};

struct ipv4_keys {
    using stored = boost::asio::ip::address_v4;
    stored operator()(std::uint32_t i) const noexcept { return stored(0x0A00'0000u + i); }
};

struct ipv6_keys {
    using stored = u128;
    stored operator()(std::uint32_t i) const noexcept { return (u128{0x2001'0db8} << 96) | i; }
};

template <class Key>
using naive_key_t = std::conditional_t<std::is_same_v<Key, std::string>, std::string, Key>;

// The textbook per-key limiter: one lock, one map, no eviction.
template <class Clock, class Key>
class naive_keyed {
public:
    naive_keyed(sluice::rate r, std::uint64_t burst) : rate_(r), burst_(burst) {}

    template <class K>
    bool try_acquire(const K& key)
    {
        std::int64_t now = sluice::detail::now_ns<Clock>();
        std::lock_guard lock(mutex_);
        auto it = map_.find(Key(key));
        if (it == map_.end())
            it = map_.emplace(Key(key), std::make_unique<sluice::policy::gcra>(rate_, burst_)).first;
        return it->second->try_acquire(1, now).admitted;
    }

private:
    sluice::rate rate_;
    std::uint64_t burst_;
    std::mutex mutex_;
    std::unordered_map<Key, std::unique_ptr<sluice::policy::gcra>, sluice::key_hash<Key>> map_;
};

template <class Keys, class Check>
std::pair<double, std::uint64_t> run(const options& o, const std::vector<std::vector<std::uint32_t>>& seqs, Check&& check)
{
    std::vector<std::uint64_t> admitted(static_cast<std::size_t>(o.threads));
    std::latch ready(o.threads), go(1);
    std::vector<std::thread> pool;
    for (int t = 0; t < o.threads; ++t) {
        std::int64_t mine = o.ops / o.threads + (t < o.ops % o.threads ? 1 : 0);
        pool.emplace_back([&, t, mine] {
            const auto& seq = seqs[static_cast<std::size_t>(t)];
            Keys make;
            ready.count_down();
            go.wait();
            std::uint64_t c = 0;
            std::size_t j = 0;
            for (std::int64_t i = 0; i < mine; ++i) {
                c += check(make(seq[j])) ? 1 : 0;
                if (++j == seq.size()) j = 0;
            }
            admitted[static_cast<std::size_t>(t)] = c;
        });
    }
    ready.wait();
    auto t0 = steady::now();
    go.count_down();
    for (auto& th : pool) th.join();
    double wall = static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(steady::now() - t0).count());
    std::uint64_t sum = 0;
    for (auto a : admitted) sum += a;
    return {wall, sum};
}

struct result {
    double ns_per_op = 0, insert_ns = 0;
    std::uint64_t admitted = 0, created = 0, evicted = 0;
    long before = 0, after = 0;
};

template <class Keys, class Clock>
result measure(const options& o, std::size_t keys, const std::vector<std::vector<std::uint32_t>>& seqs, sluice::rate r,
               std::uint64_t burst, bool naive, bool shm = false)
{
    using key_type = typename Keys::stored;
    result res;
    Keys make;
    res.before = resident_bytes();
    auto fill_start = steady::now();
    auto fill = [&](auto& k) {
        for (std::size_t i = 0; i < keys; ++i) k.try_acquire(make(static_cast<std::uint32_t>(i)));
        res.insert_ns = static_cast<double>((steady::now() - fill_start).count()) / static_cast<double>(keys);
        res.after = resident_bytes();
    };
    if (shm) {
        if constexpr (std::is_same_v<key_type, std::string> || std::is_same_v<key_type, std::uint64_t>) {
            const std::string name = "/sluice-bench-keyed-" + std::to_string(::getpid());
            sluice::shm::remove(name);
            {
                // u64 keys: a table of integer keys (32-byte slots), as the in-process store
                // for u64 holds u64 keys only.
                sluice::shm::keyed_bucket<Clock> k(name, r, burst,
                                            sluice::shm::table_options{
                                                .max_keys = keys, .integer_keys = std::is_same_v<key_type, std::uint64_t>});
                sluice::shm::remove(name);   // the mapping stays; nothing is left behind
                fill(k);
                auto [wall, adm] = run<Keys>(o, seqs, [&](const auto& key) { return k.try_acquire(key).admitted; });
                res.ns_per_op = wall / static_cast<double>(o.ops);
                res.admitted = adm;
            }
        }
    } else if (naive) {
        naive_keyed<Clock, key_type> k(r, burst);
        fill(k);
        auto [wall, adm] = run<Keys>(o, seqs, [&](const auto& key) { return k.try_acquire(key); });
        res.ns_per_op = wall / static_cast<double>(o.ops);
        res.admitted = adm;
    } else {
        boost::asio::io_context io;
        sluice::keyed_options ko;
        ko.max_keys = keys;
        sluice::keyed<sluice::token_bucket<Clock>, key_type> k(io, r, burst, ko);
        fill(k);
        auto s0 = k.stats();
        auto [wall, adm] = run<Keys>(o, seqs, [&](const auto& key) { return k.try_acquire(key).admitted; });
        auto s1 = k.stats();
        res.ns_per_op = wall / static_cast<double>(o.ops);
        res.admitted = adm;
        res.created = s1.keys.created - s0.keys.created;
        res.evicted = s1.keys.evicted - s0.keys.evicted;
    }
    return res;
}

} // namespace

int run_keyed(const options& o)
{
    bool zipf = keyed_dist == "zipf";
    bool ipv6 = std::is_invocable_v<const sluice::key_hash<u128>&, const u128&>;
    if (o.threads < 1 || o.ops < 1 || keyed_keys < 1 || keyed_keys > (std::int64_t{1} << 31) ||
        (!zipf && keyed_dist != "uniform") || (o.policy != "keyed" && o.policy != "naive" && o.policy != "gcra") ||
        (keyed_key != "string" && keyed_key != "u64" && keyed_key != "ipv4" && (keyed_key != "ipv6" || !ipv6))) {
        std::fprintf(stderr, "sluice-bench: keyed needs --threads >= 1, --ops >= 1, --keys 1..2^31, "
                             "--dist uniform|zipf, --policy keyed|naive, --key string|u64|ipv4%s\n",
                     ipv6 ? "|ipv6" : "");
        return 2;
    }
    const auto keys = static_cast<std::size_t>(keyed_keys);
    std::vector<double> cdf;
    if (zipf) {
        cdf.resize(keys);
        double sum = 0;
        for (std::size_t i = 0; i < keys; ++i) cdf[i] = (sum += 1.0 / static_cast<double>(i + 1));
        for (auto& c : cdf) c /= sum;
    }
    std::vector<std::vector<std::uint32_t>> seqs;
    std::size_t per_thread = static_cast<std::size_t>(std::min<std::int64_t>(o.ops / o.threads + 1, std::int64_t{1} << 22));
    for (int t = 0; t < o.threads; ++t)
        seqs.push_back(draw(per_thread, keys, zipf, 1234 + static_cast<std::uint64_t>(t), cdf));

    // burst * interval must stay below 2^63 ns.
    std::uint64_t burst = o.admitting ? static_cast<std::uint64_t>(o.ops) + 1 : 1;
    std::int64_t interval = std::min<std::int64_t>(std::int64_t{3600'000'000'000}, std::int64_t{9'000'000'000'000'000'000} / static_cast<std::int64_t>(burst));
    sluice::rate r = o.admitting ? sluice::rate::every(std::chrono::nanoseconds(interval)) : sluice::rate::per_second(1);
    bool naive = o.policy == "naive";
    std::string policy = naive ? "naive" : "keyed";
    bool shm = o.backend == "shm";
    if ((shm && (naive || (keyed_key != "string" && keyed_key != "u64"))) || (!shm && !o.backend.empty() && o.backend != "local")) {
        std::fprintf(stderr, "sluice-bench: keyed --backend wants local or shm (shm: --policy keyed, --key string|u64)\n");
        return 2;
    }
    // With --backend shm: the in-process line, then the shared-memory one.
    for (bool on_shm : {false, true}) {
        if (on_shm && !shm) break;
        result res = with_clock(o.clock, [&]<class Clock>(std::type_identity<Clock>) {
            if (on_shm) {
                if (keyed_key == "u64") return measure<u64_keys, Clock>(o, keys, seqs, r, burst, false, true);
                return measure<string_keys, Clock>(o, keys, seqs, r, burst, false, true);
            }
            if (keyed_key == "u64") return measure<u64_keys, Clock>(o, keys, seqs, r, burst, naive);
            if (keyed_key == "ipv4") return measure<ipv4_keys, Clock>(o, keys, seqs, r, burst, naive);
            if constexpr (std::is_invocable_v<const sluice::key_hash<u128>&, const u128&>)
                if (keyed_key == "ipv6") return measure<ipv6_keys, Clock>(o, keys, seqs, r, burst, naive);
            return measure<string_keys, Clock>(o, keys, seqs, r, burst, naive);
        });
        double chase = pointer_chase_ns();
        json_line j;
        j.add("scenario", "keyed")
            .add("policy", policy);
        if (shm) j.add("backend", on_shm ? "shm" : "local");
        j.add("key", keyed_key)
            .add("keys", static_cast<long long>(keys))
            .add("dist", keyed_dist)
            .add("threads", o.threads)
            .add("admitting", o.admitting)
            .add("ops", static_cast<long long>(o.ops))
            .add("clock", clock_read(o.clock))
            .add("clock_type", clock_type(o.clock))
            .add("clock_ns", clock_read_ns(o.clock))
            .add("ns_per_op", res.ns_per_op)
            .add("chase_ns", chase)
            .add("misses_per_check", res.ns_per_op / chase)
            .add("insert_ns_per_key", res.insert_ns)
            .add("bytes_per_key", static_cast<double>(res.after - res.before) / static_cast<double>(keys))
            .add("max_rss_kib", max_rss_kib())
            .add("admitted", static_cast<unsigned long long>(res.admitted))
            .add("created", static_cast<unsigned long long>(res.created))
            .add("evicted", static_cast<unsigned long long>(res.evicted));
        j.emit();
    }
    return 0;
}

} // namespace sluice_bench
