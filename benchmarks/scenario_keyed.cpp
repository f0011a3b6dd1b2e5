// Scenario `keyed` (a sluice addition): --threads T threads make --ops N non-blocking
// checks in all on ONE keyed limiter, over --keys K keys drawn --dist uniform or zipf
// (s = 1, key 0 the hottest). Keys are strings ("client-123456"), looked up as
// std::string_view. The store is filled with every key first (untimed, reported as
// insert_ns_per_key), then the checks are timed.
//
//   --admitting=true : per key a burst larger than --ops, refilled so slowly (one permit in
//                      15 min or more) that every check admits and no key goes idle (and is
//                      evicted) during the run: a pure look-up and decision
//   --admitting=false: per key 1/s, burst 1: the first check of a key admits, the rest reject
//
// --policy keyed (default): sluice::keyed<token_bucket>; --policy naive: one std::mutex
// around a std::unordered_map<std::string, policy::gcra> (no eviction, no cap), the
// textbook version, for reference.
//
// --clock steady|tsc|coarse: the Clock of the limiters (and of the naive version's reads).
//
// Prints one JSON line: scenario, policy, keys, dist, threads, admitting, ops, clock,
// clock_ns (one read of the clock), ns_per_op,
// insert_ns_per_key, bytes_per_key ((resident memory after filling - before) / keys),
// max_rss_kib, admitted, created and evicted during the timed run.
#include "bench_common.hpp"

#include <sluice/keyed.hpp>
#include <sluice/policy/gcra.hpp>
#include <sluice/token_bucket.hpp>

#include <boost/asio/io_context.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <latch>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

namespace sluice_bench {

std::int64_t keyed_keys = 1000;        // --keys
std::string keyed_dist = "uniform";    // --dist uniform|zipf

namespace {

using steady = std::chrono::steady_clock;

// Resident memory now, in bytes (/proc/self/statm: size resident ...).
long resident_bytes()
{
    std::ifstream f("/proc/self/statm");
    long size = 0, resident = 0;
    f >> size >> resident;
    return resident * sysconf(_SC_PAGESIZE);
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

// The textbook per-key limiter: one lock, one map, no eviction.
template <class Clock>
class naive_keyed {
public:
    naive_keyed(sluice::rate r, std::uint64_t burst) : rate_(r), burst_(burst) {}

    bool try_acquire(std::string_view key)
    {
        std::int64_t now = sluice::detail::now_ns<Clock>();
        std::lock_guard lock(mutex_);
        auto it = map_.find(std::string(key));
        if (it == map_.end())
            it = map_.emplace(std::string(key), std::make_unique<sluice::policy::gcra>(rate_, burst_)).first;
        return it->second->try_acquire(1, now).allowed;
    }

private:
    sluice::rate rate_;
    std::uint64_t burst_;
    std::mutex mutex_;
    std::unordered_map<std::string, std::unique_ptr<sluice::policy::gcra>> map_;
};

template <class Check>
std::pair<double, std::uint64_t> run(const options& o, const std::vector<std::vector<std::uint32_t>>& seqs,
                                     const std::vector<std::string>& names, Check&& check)
{
    std::vector<std::uint64_t> admitted(static_cast<std::size_t>(o.threads));
    std::latch ready(o.threads), go(1);
    std::vector<std::thread> pool;
    for (int t = 0; t < o.threads; ++t) {
        std::int64_t mine = o.ops / o.threads + (t < o.ops % o.threads ? 1 : 0);
        pool.emplace_back([&, t, mine] {
            const auto& seq = seqs[static_cast<std::size_t>(t)];
            ready.count_down();
            go.wait();
            std::uint64_t c = 0;
            std::size_t j = 0;
            for (std::int64_t i = 0; i < mine; ++i) {
                c += check(std::string_view(names[seq[j]])) ? 1 : 0;
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

} // namespace

int run_keyed(const options& o)
{
    bool zipf = keyed_dist == "zipf";
    if (o.threads < 1 || o.ops < 1 || keyed_keys < 1 || keyed_keys > (std::int64_t{1} << 31) ||
        (!zipf && keyed_dist != "uniform") || (o.policy != "keyed" && o.policy != "naive" && o.policy != "gcra")) {
        std::fprintf(stderr, "sluice-bench: keyed needs --threads >= 1, --ops >= 1, --keys 1..2^31, "
                             "--dist uniform|zipf, --policy keyed|naive\n");
        return 2;
    }
    const auto keys = static_cast<std::size_t>(keyed_keys);
    std::vector<std::string> names(keys);
    for (std::size_t i = 0; i < keys; ++i)
        names[i] = "client-" + std::to_string(i);
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

    long before = resident_bytes();
    auto fill_start = steady::now();
    double ns_per_op = 0, insert_ns = 0;
    std::uint64_t admitted = 0, created = 0, evicted = 0;
    long after = 0;
    with_clock(o.clock, [&]<class Clock>(std::type_identity<Clock>) {
        if (naive) {
            naive_keyed<Clock> k(r, burst);
            for (const auto& n : names) k.try_acquire(n);
            insert_ns = static_cast<double>((steady::now() - fill_start).count()) / static_cast<double>(keys);
            after = resident_bytes();
            auto [wall, adm] = run(o, seqs, names, [&](std::string_view key) { return k.try_acquire(key); });
            ns_per_op = wall / static_cast<double>(o.ops);
            admitted = adm;
        } else {
            boost::asio::io_context io;
            sluice::keyed_options ko;
            ko.max_keys = keys;
            sluice::keyed<sluice::token_bucket<Clock>> k(io, r, burst, ko);
            for (const auto& n : names) k.try_acquire(std::string_view(n));
            insert_ns = static_cast<double>((steady::now() - fill_start).count()) / static_cast<double>(keys);
            after = resident_bytes();
            auto s0 = k.stats();
            auto [wall, adm] = run(o, seqs, names, [&](std::string_view key) { return k.try_acquire(key).allowed; });
            auto s1 = k.stats();
            ns_per_op = wall / static_cast<double>(o.ops);
            admitted = adm;
            created = s1.created - s0.created;
            evicted = s1.evicted - s0.evicted;
        }
    });
    json_line j;
    j.add("scenario", "keyed")
        .add("policy", policy)
        .add("keys", static_cast<long long>(keys))
        .add("dist", keyed_dist)
        .add("threads", o.threads)
        .add("admitting", o.admitting)
        .add("ops", static_cast<long long>(o.ops))
        .add("clock", o.clock)
        .add("clock_ns", clock_read_ns(o.clock))
        .add("ns_per_op", ns_per_op)
        .add("insert_ns_per_key", insert_ns)
        .add("bytes_per_key", static_cast<double>(after - before) / static_cast<double>(keys))
        .add("max_rss_kib", max_rss_kib())
        .add("admitted", static_cast<unsigned long long>(admitted))
        .add("created", static_cast<unsigned long long>(created))
        .add("evicted", static_cast<unsigned long long>(evicted));
    j.emit();
    return 0;
}

} // namespace sluice_bench
