// sluice-bench: the project's side of benchmark protocol v1 (shared/peers/README.md).
//
//   sluice-bench --scenario try --threads 2 --ops 10000000 --admitting=false --policy gcra
//   sluice-bench --scenario try --clock steady (the limiter's Clock: default, steady, tsc or coarse)
//
// Every flag takes `--flag=value` or `--flag value` (one dash works too); a boolean flag
// alone means true. Unknown scenarios, flags or bad values: a message and exit code 2.
// Prints one JSON line per result with the peers' keys plus "peer":"sluice".
#include "bench_common.hpp"

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <utility>

namespace sluice_bench {
int run_fanout(const options& o);   // scenario_fanout.cpp
int run_pace(const options& o);     // scenario_pace.cpp
extern std::int64_t pace_slack_us;  // scenario_pace.cpp: --slack-us N
extern std::string fanout_waiter;   // scenario_fanout.cpp: --waiter coroutine|callback
extern std::int64_t fanout_coalesce_us;   // scenario_fanout.cpp: --coalesce-us N
extern std::int64_t fanout_coalesce_max_us;   // scenario_fanout.cpp: --coalesce-max-us N
int run_keyed(const options& o);    // scenario_keyed.cpp
extern std::int64_t keyed_keys;     // scenario_keyed.cpp: --keys K
extern std::string keyed_dist;      // scenario_keyed.cpp: --dist uniform|zipf
extern std::string keyed_key;       // scenario_keyed.cpp: --key string|u64|ipv4|ipv6
int run_bandwidth(const options& o);         // scenario_bandwidth.cpp
extern std::int64_t bandwidth_connections;   // scenario_bandwidth.cpp: --connections C
int run_shared(const options& o);   // scenario_shared_shm.cpp: --backend redis (scenario_shared.cpp) or shm
extern std::int64_t shared_lease;   // shared_fleet.cpp: --lease N
extern std::string shared_mode;     // shared_fleet.cpp: --mode try|acquire|wait
extern std::string shared_limiter;  // shared_fleet.cpp: --limiter bucket|window|floor
#ifdef SLUICE_BENCH_REDIS
int run_soak(const options& o);     // scenario_soak.cpp
extern double soak_fault_every;     // scenario_soak.cpp: --fault-every S
extern std::int64_t soak_seed;      // scenario_soak.cpp: --seed N
extern std::string soak_faults;     // scenario_soak.cpp: --faults a,b,c
#endif

namespace {

// ---------------------------------------------------------------------------------------
// Scenario table: add a scenario by writing `int run_X(const options&)` in its own file,
// declaring it in bench_common.hpp and adding one row here.
struct scenario_entry {
    std::string_view name;
    int (*run)(const options&);
    std::string_view flags;   // for --help
};

constexpr scenario_entry scenarios[] = {
    {"try", run_try, "--threads T --ops N --admitting=true|false --policy P"},
    {"fanout", run_fanout, "--waiters W --rate R [--waiter coroutine|callback] [--policy leaky|floor|queue] [--coalesce-us N] [--coalesce-max-us N] [--trace FILE]"},
    {"pace", run_pace, "--n N --rate R [--strict] [--slack-us N] [--policy leaky|floor] [--trace FILE: each grant, ns after the first]"},
    {"keyed", run_keyed, "--keys K --dist uniform|zipf --key string|u64|ipv4|ipv6 --threads T --ops N --admitting=true|false [--policy keyed|naive] [--backend local|shm]"},
    {"bandwidth", run_bandwidth, "--connections C --rate BYTES/s (e.g. 50MB/s, 2MiB/s) --seconds D"},
    {"shared", run_shared, "--procs P --concurrency C --rate Q --seconds D [--backend redis|shm] --port PORT [--lease N] [--mode try|acquire|wait] [--limiter bucket|window|floor] [--waiters W]"},
#ifdef SLUICE_BENCH_REDIS
    {"soak", run_soak, "--seconds D --rate R (decisions/s) --port PORT [--fault-every S] [--faults a,b,...|all] [--seed N]"},
#endif
};

[[noreturn]] void usage_error(const std::string& msg)
{
    std::fprintf(stderr, "sluice-bench: %s (try --help)\n", msg.c_str());
    std::exit(2);
}

void print_help()
{
    std::printf("usage: sluice-bench --scenario NAME [flags]  (--flag=value or --flag value)\n"
                "scenarios:\n");
    for (const auto& s : scenarios)
        std::printf("  %-8.*s %.*s\n", static_cast<int>(s.name.size()), s.name.data(),
                    static_cast<int>(s.flags.size()), s.flags.data());
    std::printf("policies (try): token_bucket (default: the limiter's try_acquire), and the policies alone:\n"
                "  gcra, leaky, fixed_window, sliding_log, sliding_window_counter, all_of; floor (bare CAS),\n"
                "  clock (a read of the --clock clock only), clock_raw (clock_gettime),\n"
                "  clock_coarse (CLOCK_MONOTONIC_COARSE), all (all but clock_*)\n"
                "clock (try, keyed, fanout): --clock default (sluice::default_clock, the default) |\n"
                "  steady (std::chrono::steady_clock) | tsc (sluice::tsc_clock) | coarse (sluice::coarse_clock):\n"
                "  the limiter's Clock; the JSON line says what it reads (clock), its type (clock_type)\n"
                "  and clock_ns, the cost of one read of it\n"
                "other flags: --waiters --rate --n --strict --seconds --procs --concurrency --port\n");
}

bool parse_bool(std::string_view v, bool& out)
{
    if (v == "true" || v == "1" || v == "t" || v == "T" || v == "TRUE" || v == "True") { out = true; return true; }
    if (v == "false" || v == "0" || v == "f" || v == "F" || v == "FALSE" || v == "False") { out = false; return true; }
    return false;
}

template <class Int>
void parse_int(std::string_view flag, std::string_view v, Int& out)
{
    Int x{};
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
    if (ec != std::errc{} || p != v.data() + v.size())
        usage_error("--" + std::string(flag) + " wants an integer, got '" + std::string(v) + "'");
    out = x;
}

void parse_double(std::string_view flag, std::string_view v, double& out)
{
    double x{};
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
    if (ec != std::errc{} || p != v.data() + v.size())
        usage_error("--" + std::string(flag) + " wants a number, got '" + std::string(v) + "'");
    out = x;
}

// A rate: a number, or bytes per second with a unit (50MB/s, 2MiB/s, 800kB/s, 1GB/s;
// k, M, G decimal, Ki, Mi, Gi binary), for the bandwidth scenario.
void parse_rate(std::string_view flag, std::string_view v, double& out)
{
    if (!v.ends_with("B/s")) return parse_double(flag, v, out);
    std::string_view num = v.substr(0, v.size() - 3);
    double scale = 1;
    const std::pair<std::string_view, double> units[] = {{"Ki", 1024.0},          {"Mi", 1024.0 * 1024},
                                                         {"Gi", 1024.0 * 1024 * 1024}, {"k", 1e3},
                                                         {"K", 1e3},              {"M", 1e6},
                                                         {"G", 1e9}};
    for (auto [u, f] : units)
        if (num.ends_with(u)) {
            num.remove_suffix(u.size());
            scale = f;
            break;
        }
    double x = 0;
    auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), x);
    if (ec != std::errc{} || p != num.data() + num.size() || !(x > 0))
        usage_error("--" + std::string(flag) + " wants a number or bytes per second like 50MB/s, got '" +
                    std::string(v) + "'");
    out = x * scale;
}

options parse(int argc, char** argv)
{
    options o;
    for (int i = 1; i < argc; ++i) {
        std::string_view a = argv[i];
        if (a.size() < 2 || a[0] != '-')
            usage_error("unexpected argument '" + std::string(a) + "'");
        a.remove_prefix(a[1] == '-' ? 2 : 1);
        std::string_view key = a, value;
        bool has_value = false;
        if (auto eq = a.find('='); eq != std::string_view::npos) {
            key = a.substr(0, eq);
            value = a.substr(eq + 1);
            has_value = true;
        }
        if (key == "help" || key == "h") {
            print_help();
            std::exit(0);
        }
        // Booleans: `--flag`, `--flag=v`, or `--flag v` when v reads as a boolean.
        if (key == "admitting" || key == "strict") {
            bool& dst = key == "admitting" ? o.admitting : o.strict;
            bool b = true;
            if (has_value) {
                if (!parse_bool(value, b))
                    usage_error("--" + std::string(key) + " wants true or false, got '" + std::string(value) + "'");
            } else if (i + 1 < argc && parse_bool(argv[i + 1], b)) {
                ++i;
            } else {
                b = true;
            }
            dst = b;
            continue;
        }
        if (!has_value) {
            if (i + 1 >= argc)
                usage_error("--" + std::string(key) + " needs a value");
            value = argv[++i];
        }
        if (key == "scenario") o.scenario = value;
        else if (key == "policy") {
            o.policy = value;
            o.policy_set = true;
        }
        else if (key == "threads") parse_int(key, value, o.threads);
        else if (key == "ops") parse_int(key, value, o.ops);
        else if (key == "waiters") parse_int(key, value, o.waiters);
        else if (key == "rate") parse_rate(key, value, o.rate);
        else if (key == "n") parse_int(key, value, o.n);
        else if (key == "seconds") parse_double(key, value, o.seconds);
        else if (key == "procs") {
            parse_int(key, value, o.procs);
            o.procs_set = true;
        }
        else if (key == "backend") {
            if (value != "local" && value != "shm" && value != "redis")
                usage_error("--backend wants local, shm or redis, got '" + std::string(value) + "'");
            o.backend = value;
        }
        else if (key == "concurrency") parse_int(key, value, o.concurrency);
        else if (key == "port") parse_int(key, value, o.port);
        else if (key == "clock") {
            if (!known_clock(std::string(value)))
                usage_error("--clock wants default, steady, tsc or coarse, got '" + std::string(value) + "'");
            o.clock = value;
        }
        else if (key == "trace") o.trace = value;
        else if (key == "waiter") fanout_waiter = value;   // fanout (not in options)
        else if (key == "coalesce-us" || key == "coalesce-max-us" || key == "slack-us") {
            // -1 inside means "the library's default"; a user's value is a duration.
            std::int64_t& dst = key == "coalesce-us" ? fanout_coalesce_us : key == "slack-us" ? pace_slack_us : fanout_coalesce_max_us;
            parse_int(key, value, dst);
            if (dst < 0) usage_error("--" + std::string(key) + " wants microseconds >= 0, got '" + std::string(value) + "'");
        }
        else if (key == "keys") parse_int(key, value, keyed_keys);
        else if (key == "connections") parse_int(key, value, bandwidth_connections);
        else if (key == "dist") keyed_dist = value;
        else if (key == "key") keyed_key = value;
        else if (key == "lease") parse_int(key, value, shared_lease);
        else if (key == "mode") shared_mode = value;
        else if (key == "limiter") shared_limiter = value;
#ifdef SLUICE_BENCH_REDIS
        else if (key == "fault-every") parse_double(key, value, soak_fault_every);
        else if (key == "seed") parse_int(key, value, soak_seed);
        else if (key == "faults") soak_faults = value;
#endif
        else usage_error("unknown flag --" + std::string(key));
    }
    return o;
}

} // namespace
} // namespace sluice_bench

int main(int argc, char** argv)
{
    using namespace sluice_bench;
    options o = parse(argc, argv);
    // tsc_clock (default_clock) reads steady_clock until the counter's rate is measured,
    // about 1 ms after load: wait for that, so that nothing timed reads the fallback.
    while (sluice::detail::tsc_state.mode() == sluice::detail::tsc_timeline::calibrating)
        (void)sluice::tsc_clock::now();
    for (const auto& s : scenarios) {
        if (o.scenario == s.name) {
            try {
                return s.run(o);
            } catch (const std::exception& e) {
                std::fprintf(stderr, "sluice-bench: %s: %s\n", o.scenario.c_str(), e.what());
                return 1;
            }
        }
    }
    usage_error("unknown scenario '" + o.scenario + "'");
}
