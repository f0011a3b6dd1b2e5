// Scenario `try` (protocol v1): --threads T threads hammer ONE shared limiter with
// non-blocking checks, --ops N in all.
//
// Without --policy (or --policy token_bucket): what a user runs, the limiter's public
// try_acquire(1) on a sluice::token_bucket<Clock> (Clock: --clock, default
// sluice::default_clock, the one a user who names none gets), reading the decision's
// remaining and reset_after as a server answering with RateLimit fields does ("api":
// "limiter"). --policy gcra|leaky|...: the policy alone, each check reading the clock
// (through sluice::detail::now_ns, as a limiter on that Clock does) and calling
// policy.try_acquire(1, now), reading only admitted ("api": "policy"). floor and clock*:
// the reference loops of bench_floor.cpp ("api": "reference"). admit, settle and peek:
// the token bucket's try_admit, try_admit then settle lower, and peek (run_ticket; not in
// --policy all).
//
//   --admitting=true : the limiter never says no (checked: "admitted" must equal ops)
//   --admitting=false: 1000/s with burst 1 (or 1 per 1 ms window): almost all reject
//
// --backend shm: the limiter on a shared-memory segment (sluice::shm::token_bucket<Clock>,
// the same settings and reads), beside the in-process token_bucket<Clock> in the same run,
// both checked through the same closure and timed in alternating blocks (run_shm_pair):
// two lines, "backend": "local" then "shm". With --procs P, the shm line is P forked
// processes (one thread each, each its own limiter on the one segment) and the local line
// P threads on one limiter; otherwise both are --threads T threads on one limiter.
//
// Prints one JSON line per policy with the peers' keys (scenario, threads, admitting,
// ops, ns_per_op = wall time / ops) plus peer, api, policy, clock (what the clock reads:
// tsc, steady or coarse), clock_type, clock_ns (one read of the clock, one thread),
// admitted and wall_s.
#include "bench_common.hpp"

#include <sluice/admission.hpp>
#include <sluice/manual_clock.hpp>
#include <sluice/policy/composite.hpp>
#include <sluice/policy/fixed_counter.hpp>
#include <sluice/policy/gcra.hpp>
#include <sluice/policy/sliding_log.hpp>
#include <sluice/policy/weighted_counter.hpp>
#include <sluice/rate.hpp>
#include <sluice/shm/token_bucket.hpp>
#include <sluice/token_bucket.hpp>

#include <boost/asio/io_context.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string_view>
#include <string>
#include <tuple>

#include <unistd.h>

namespace sluice_bench {

namespace {

using namespace std::chrono_literals;
using sluice::rate;
namespace pol = sluice::policy;

template <class Policy>
try_result hammer(const options& o, Policy& p)
{
    return with_clock(o.clock, [&]<class Clock>(std::type_identity<Clock>) {
        return run_threads(o.threads, o.ops, [&p]() noexcept {
            return p.try_acquire(1, sluice::detail::now_ns<Clock>()).admitted;
        });
    });
}

// The limiter, as a user holds it: token_bucket<Clock>, same settings as gcra below.
try_result run_token_bucket(const options& o)
{
    return with_clock(o.clock, [&]<class Clock>(std::type_identity<Clock>) {
        boost::asio::io_context io;
        auto bucket = o.admitting ? std::make_unique<sluice::token_bucket<Clock>>(io, rate::per_second(1e9), 1'000'000'000)
                                  : std::make_unique<sluice::token_bucket<Clock>>(io, rate::per_second(1000), 1);
        return run_threads(o.threads, o.ops, [&b = *bucket]() noexcept {
            const sluice::decision d = b.try_acquire(1);
            // The RateLimit fields of a server's answer.
            keep(d.remaining);
            keep(d.reset_after.count());
            return d.admitted;
        });
    });
}

// The verbs of a cost known after the call, on the token bucket of run_token_bucket:
// `Verb` is admit (try_admit(1), the ticket dropped: kept at its cost), settle (try_admit(2)
// then, when admitted, settle(ticket, 1): one back, under the limiter's lock) or peek (peek(1): nothing taken). Each
// reads the decision's remaining and reset_after as run_token_bucket does. Rejecting (burst
// 1), settle asks 1 and settles 1.
enum class verb { admit, settle, peek };

template <verb Verb>
try_result run_ticket(const options& o)
{
    return with_clock(o.clock, [&]<class Clock>(std::type_identity<Clock>) {
        boost::asio::io_context io;
        auto bucket = o.admitting ? std::make_unique<sluice::token_bucket<Clock>>(io, rate::per_second(1e9), 1'000'000'000)
                                  : std::make_unique<sluice::token_bucket<Clock>>(io, rate::per_second(1000), 1);
        // Used once before: a bucket never used decides away from the 64-bit fast path (its
        // state is -2^64), which a peek alone would never leave.
        keep(bucket->try_acquire(1).admitted);
        // Rejecting, the burst is 1: a settle lower would give back the one permit and
        // make the next try admit; settle at the cost asked (the same call, nothing moves).
        const std::uint64_t ask = Verb == verb::settle && o.admitting ? 2 : 1;
        return run_threads(o.threads, o.ops, [&b = *bucket, ask]() noexcept {
            if constexpr (Verb == verb::peek) {
                const sluice::decision d = b.peek(1);
                keep(d.remaining);
                keep(d.reset_after.count());
                return d.admitted;
            } else {
                sluice::admission t = b.try_admit(ask);
                keep(t.answer().remaining);
                keep(t.answer().reset_after.count());
                const bool admitted = static_cast<bool>(t);
                if constexpr (Verb == verb::settle) {
                    if (admitted) keep(b.settle(std::move(t), 1).value());
                } else {
                    (void)ask;
                }
                return admitted;
            }
        });
    });
}

// One check as the shm comparison makes it, on either limiter: a closure over a Bucket
// (built on its own io_context with `where...`, the segment's name for the shm one, and the
// settings of run_token_bucket), each held by shared_ptr, reading the decision as above.
template <class Bucket, class... Where>
auto bucket_check(const options& o, const Where&... where)
{
    auto io = std::make_shared<boost::asio::io_context>();
    auto b = o.admitting ? std::make_shared<Bucket>(*io, where..., rate::per_second(1e9), 1'000'000'000)
                         : std::make_shared<Bucket>(*io, where..., rate::per_second(1000), 1);
    return [io = std::move(io), b = std::move(b)]() noexcept {
        const sluice::decision d = b->try_acquire(1);
        keep(d.remaining);
        keep(d.reset_after.count());
        return d.admitted;
    };
}

// The in-process token_bucket<Clock> against the same on a shared-memory segment, timed
// alike and in turn: up to 10 blocks of checks, local then shm, each backend's wall time
// summed over its blocks. The machine's speed drifts within a run by more than the
// difference measured (on the project's VM the same loop runs at 12 ns a check, then at
// 17-19 for tenths of a second): one backend timed after the other reads the drift
// too. The shm side is `procs` processes
// (each its own limiter on the segment, made before each block's start) against as many
// threads on one local limiter, or, when procs is 0, o.threads threads on each.
struct shm_pair {
    try_result local, shm;
};

shm_pair run_shm_pair(const options& o, int procs)
{
    constexpr std::int64_t max_blocks = 10;
    const std::string name = "/sluice-bench-try-" + std::to_string(::getpid());
    sluice::shm::remove(name);
    auto r = with_clock(o.clock, [&]<class Clock>(std::type_identity<Clock>) {
        shm_pair out;
        auto local = bucket_check<sluice::token_bucket<Clock>>(o);
        auto make_shm = [&o, &name] { return bucket_check<sluice::shm::token_bucket<Clock>>(o, name); };
        std::optional<decltype(make_shm())> shm;
        if (procs == 0) shm.emplace(make_shm());
        const int threads = procs > 0 ? procs : o.threads;
        const std::int64_t blocks = std::min(max_blocks, o.ops);
        for (std::int64_t k = 0; k < blocks; ++k) {
            const std::int64_t ops = o.ops / blocks + (k < o.ops % blocks ? 1 : 0);
            const try_result l = run_threads(threads, ops, local);
            const try_result s = procs > 0 ? run_procs(procs, ops, make_shm) : run_threads(threads, ops, *shm);
            if (s.wall_ns < 0) {
                out.shm.wall_ns = -1;
                return out;
            }
            out.local.wall_ns += l.wall_ns;
            out.local.admitted += l.admitted;
            out.shm.wall_ns += s.wall_ns;
            out.shm.admitted += s.admitted;
        }
        return out;
    });
    sluice::shm::remove(name);
    return r;
}

// Admitting settings: every check admits with a wide margin (checks take >= 5 ns each).
//   gcra, leaky: 10^9/s (1 ns a permit); gcra burst 10^9 (1 s), leaky burst 1 with 1 s slack
//                (a thread preempted between its clock read and its CAS for longer than
//                the slack is rightly rejected: 1 ms of slack did that under load)
//   windows:     the largest limit each allows, windows short enough that it is never hit
// Rejecting settings: 1000/s burst 1; 1 per 1 ms window.

try_result run_gcra(const options& o)
{
    auto p = o.admitting ? std::make_unique<pol::gcra>(rate::per_second(1e9), 1'000'000'000)
                         : std::make_unique<pol::gcra>(rate::per_second(1000), 1);
    return hammer(o, *p);
}

try_result run_leaky(const options& o)
{
    // A leaky bucket is gcra(rate, 1, slack).
    auto p = o.admitting ? std::make_unique<pol::gcra>(rate::per_second(1e9), 1, 1s)
                         : std::make_unique<pol::gcra>(rate::per_second(1000), 1, 0ns);
    return hammer(o, *p);
}

try_result run_fixed_window(const options& o)
{
    // max_limit (2^31 - 1) per 1 ms window: would need 2 billion checks a ms to reject.
    auto p = std::make_unique<pol::fixed_counter>(o.admitting ? pol::fixed_counter::max_limit : 1, 1ms);
    return hammer(o, *p);
}

try_result run_sliding_log(const options& o)
{
    // The ring holds `limit` timestamps (8 bytes each), so no maximal limit here: 65,536 per
    // 100 us (512 KiB ring) would need a check every 1.5 ns to reject.
    auto p = o.admitting ? std::make_unique<pol::sliding_log>(65'536, 100us)
                         : std::make_unique<pol::sliding_log>(1, 1ms);
    return hammer(o, *p);
}

try_result run_sliding_window_counter(const options& o)
{
    auto p = std::make_unique<pol::weighted_counter>(
        o.admitting ? pol::weighted_counter::max_limit : 1, 1ms);
    return hammer(o, *p);
}

try_result run_all_of(const options& o)
{
    // A token bucket AND a fixed-window cap, the composite's typical use.
    using both = pol::composite<pol::gcra, pol::fixed_counter>;
    auto p = o.admitting
                 ? std::make_unique<both>(std::tuple{rate::per_second(1e9), 1'000'000'000},
                                               std::tuple{pol::fixed_counter::max_limit, 1ms})
                 : std::make_unique<both>(std::tuple{rate::per_second(1000), 1},
                                               std::tuple{std::uint64_t{1}, 1ms});
    return hammer(o, *p);
}

struct policy_entry {
    std::string_view name;
    try_result (*run)(const options&);
    std::string_view api;   // limiter: the public API; policy: the policy alone; reference
    bool in_all = true;     // run by --policy all
};

constexpr policy_entry policies[] = {
    {"token_bucket", run_token_bucket, "limiter"},
    {"gcra", run_gcra, "policy"},
    {"leaky", run_leaky, "policy"},
    {"fixed_window", run_fixed_window, "policy"},
    {"sliding_log", run_sliding_log, "policy"},
    {"sliding_window_counter", run_sliding_window_counter, "policy"},
    {"all_of", run_all_of, "policy"},
    {"admit", run_ticket<verb::admit>, "limiter", false},
    {"settle", run_ticket<verb::settle>, "limiter", false},
    {"peek", run_ticket<verb::peek>, "limiter", false},
    {"floor", run_try_floor, "reference"},
    {"clock", run_try_clock, "reference"},
    {"clock_raw", run_try_clock_raw, "reference", false},
    {"clock_coarse", run_try_clock_coarse, "reference", false},
};

void report(const options& o, const policy_entry& e, const try_result& r, double clock_ns,
            std::string_view backend = {}, int procs = 1)
{
    const std::string_view policy = e.name;
    json_line j;
    j.add("scenario", "try")
        .add("api", e.api)
        .add("policy", policy);
    if (!backend.empty()) j.add("backend", backend).add("procs", procs);
    j
        .add("clock", clock_read(o.clock))
        .add("clock_type", clock_type(o.clock))
        .add("clock_ns", clock_ns)
        .add("threads", o.threads)
        .add("admitting", o.admitting)
        .add("ops", static_cast<long long>(o.ops))
        .add("ns_per_op", r.wall_ns / static_cast<double>(o.ops))
        .add("admitted", static_cast<unsigned long long>(r.admitted))
        .add("wall_s", r.wall_ns / 1e9);
    j.emit();
    if (o.admitting && r.admitted != static_cast<std::uint64_t>(o.ops))
        std::fprintf(stderr, "sluice-bench: warning: policy %.*s admitted %llu of %lld checks in admitting mode\n",
                     static_cast<int>(policy.size()), policy.data(),
                     static_cast<unsigned long long>(r.admitted), static_cast<long long>(o.ops));
}

} // namespace

int run_try(const options& o)
{
    if (o.threads < 1 || o.ops < 1) {
        std::fprintf(stderr, "sluice-bench: try needs --threads >= 1 and --ops >= 1\n");
        return 2;
    }
    const std::string policy = o.policy_set ? o.policy : "token_bucket";
    if (o.backend == "shm") {
        if (policy != "token_bucket" || o.procs < 1) {
            std::fprintf(stderr, "sluice-bench: try --backend shm runs the token bucket (no --policy), --procs >= 1\n");
            return 2;
        }
        const double clock_ns = clock_read_ns(o.clock);
        const int procs = o.procs_set ? o.procs : 0;
        const shm_pair r = run_shm_pair(o, procs);
        if (r.shm.wall_ns < 0) {
            std::fprintf(stderr, "sluice-bench: try --backend shm: a process failed\n");
            return 1;
        }
        options local = o;
        if (procs > 0) local.threads = procs;
        report(local, policies[0], r.local, clock_ns, "local", 1);
        options shown = o;
        if (procs > 0) shown.threads = 1;
        report(shown, policies[0], r.shm, clock_ns, "shm", procs > 0 ? procs : 1);
        return 0;
    }
    if (!o.backend.empty() && o.backend != "local") {
        std::fprintf(stderr, "sluice-bench: try --backend wants local or shm\n");
        return 2;
    }
    bool all = policy == "all";
    bool found = false;
    double clock_ns = 0;
    for (const auto& e : policies) {
        if ((all && e.in_all) || policy == e.name) {
            if (!found) clock_ns = clock_read_ns(o.clock);
            found = true;
            report(o, e, e.run(o), clock_ns);
        }
    }
    if (!found) {
        std::fprintf(stderr, "sluice-bench: unknown policy '%s' (token_bucket, gcra, leaky, fixed_window, sliding_log, "
                             "sliding_window_counter, all_of, admit, settle, peek, floor, clock, clock_raw, clock_coarse, all)\n", policy.c_str());
        return 2;
    }
    return 0;
}

} // namespace sluice_bench
