// sluice example: a rate-limited HTTP server (Boost.Beast, C++20 coroutines).
//
// Shows a per-client limit in a real async server: a keyed token bucket on the client
// address (from a trusted proxy, the one its X-Forwarded-For or Forwarded names:
// client_identity.hpp) answers 429 with Retry-After and the
// IETF RateLimit-Policy / RateLimit headers (draft-ietf-httpapi-ratelimit-headers-11,
// written with sluice::http: `"default";q=<rate x w>;w=<w>;sluice-burst=<burst>`, q / w being
// the configured rate exactly, and r / t the tokens left and the seconds until full), or, with --delay-ms, holds an over-limit
// request for up to that long before giving up (nginx's `delay=`); a concurrency_limit caps
// the requests being handled at once (503 beyond); with --shed, an adaptive_concurrency
// learns how many requests the server handles at once without their latency growing and
// sheds the rest (503 with Retry-After); /metrics reports it all in the Prometheus text
// format (OpenMetrics when asked). One coroutine per connection; SIGINT/SIGTERM or --seconds
// shut it down cleanly: the limiters are closed, so no request is left waiting for a permit.
//
// It holds up against what real clients and networks send (request_check.hpp, RFC 9110 and
// 9112): 400 for a malformed request or an HTTP/1.1 request without Host, 505 for a version
// other than 1.0 and 1.1, 414 and 431 for a request line or header past 8 KiB, 413 for a
// body past 1 MiB, 405 for a method other than GET and HEAD, 408 for a request still
// incomplete after --idle-timeout-ms, 400 for obs-fold or a Transfer-Encoding whose end
// cannot be known (and for any in HTTP/1.0), 501 for a transfer coding it does not know.
// It decides from a request's header alone, and reads a body only to drop it (no route
// keeps one): a connection holds its read buffer (16 KiB at most), however large the bodies
// coming, and every buffer's bytes come from one budget, --read-budget (503 for a request
// it has no room for: read_budget.hpp). Expect: 100-continue is answered 100 once a request
// is accepted, and a refusal comes instead of it; a connection closed with its client
// perhaps still sending lingers, so that the client reads its answer (lingering_close.hpp).
// A connection carries --keepalive-requests requests at most; /metrics answers the
// --metrics-allow addresses only (loopback by default). Its connections are bounded (--max-connections, by
// default the open-file limit less 64): past the bound, or when accept finds no file
// descriptor left (EMFILE, ENFILE), the connection idle longest is closed to make room, as
// nginx does, and with none idle the accept loop waits (10 ms, doubling to 1 s) instead of
// retrying at once. An idle connection holds no buffer, and memory freed by connections
// that went is given back to the system (malloc_trim) once their number has halved.
//
// With --dry-run, the per-client limit runs in shadow mode (sluice::shadow_options, nginx's
// limit_req_dry_run): each request is decided and counted as usual, and none is refused or
// delayed for its client's rate; one that would have been is answered as any other, with a
// Sluice-Dry-Run header and a line on stderr saying what would have happened, and /metrics
// counts them. A new limit is rolled out by watching whom it would refuse.
//
// With --workers N, N worker processes accept on one port (a socket each in a SO_REUSEPORT
// group) and decide on one per-client table in shared memory, sluice::shm::keyed_bucket, so that a
// client's limit is the host's, as nginx's workers share a limit_req zone; the parent
// supervises them (prefork.hpp says how and why). --delay-ms works there as in one process,
// by the same code (on_bucket picks the limiter): a request over the limit reserves its
// client's next slot in the table and waits for it on its worker's timer, so the client's
// waiting requests are granted in turn across the workers, at the rate. Without --workers,
// one process as before.
//
// The RateLimit `t` and Retry-After fields are whole seconds: both are rounded up (a wait
// of 10 ms is said as 1 s). Rounding down would say 0 for any wait under a second, and a
// client that honours it would come back at once and be refused again; rounded up, a
// client that waits as told finds a permit. A client that needs to pace itself closer than
// a second reads RateLimit-Policy, whose q / w is the rate exactly.
//
//     build/examples/server --port 8080 --rate 10/s --burst 10 --delay-ms 500
//     build/examples/server --rate 5/s --burst 5 --access-log /tmp/access.log --seconds 30
//     build/examples/server --rate 10000/s --burst 100 --backend-workers 8 --shed vegas
//     build/examples/server --rate 10/s --burst 10 --workers 4
//
// The first line on stdout is `listening on 127.0.0.1:PORT` (with --port 0, the default,
// the kernel picks the port); flags and endpoints are listed by --help (print_usage below).
// --access-log FILE writes one flushed line per response, `<unix_time_ns> <client> <method>
// <target> <status> <wait_us>`, stamped when the request was read (so that a test can
// check the spacing of arrivals) and waited for a permit for wait_us.

#include "../common/flags.hpp"

#include <sluice/http/ratelimit_fields.hpp>
#include <sluice/http/retry_after.hpp>
#include <sluice/prometheus.hpp>
#include <sluice/sluice.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

#include "client_identity.hpp"
#include "lingering_close.hpp"
#include "prefork.hpp"
#include "read_budget.hpp"
#include "request_check.hpp"

#include <sluice/shm/keyed_bucket.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <cstring>
#include <limits>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <thread>
#include <utility>
#include <vector>

#include <sys/resource.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

namespace {

struct options {
    std::uint16_t port = 0;
    std::string listen = "127.0.0.1";
    std::string rate_text = "10/s";
    sluice::rate rate = sluice::rate::per_second(10);
    std::uint64_t burst = 10;
    std::uint64_t delay_ms = 0;
    std::uint64_t max_inflight = 256;
    server_check::networks trusted;   // --trusted-proxy: addresses and CIDR blocks
    server_check::proxy_header proxy_header = server_check::proxy_header::x_forwarded_for;
    server_check::networks metrics_allow;   // empty after parse_args: loopback
    std::uint64_t keepalive_requests = 1000;
    std::uint64_t pages = 100;
    std::uint64_t seconds = 0;
    std::uint64_t threads = 1;
    std::string access_log;
    std::uint64_t backend_workers = 0;   // 0: /api/work has no backend to wait for
    std::optional<sluice::concurrency_algorithm> shed;
    std::uint64_t shed_latency_ms = 100;
    std::uint64_t idle_timeout_ms = 30'000;
    std::uint64_t max_connections = 0;   // 0: the open-file limit less 64
    std::uint64_t read_budget = 64 * 1024 * 1024;   // every read buffer's bytes together
    std::uint64_t workers = 1;           // > 1: prefork (prefork.hpp), one shared table
    bool dry_run = false;                // the per-client limit in shadow mode
};

// The open-file limit, less what the server keeps for itself (the listening socket, the
// access log, an accept in progress past the bound).
std::uint64_t default_max_connections()
{
    rlimit r{};
    if (::getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return 65'536;
    return r.rlim_cur > 80 ? r.rlim_cur - 64 : 16;
}

void print_usage(std::FILE* to)
{
    std::fputs(
        "usage: server [--port N] [--listen ADDR] [--rate TEXT] [--burst N] [--delay-ms N]\n"
        "              [--max-inflight N] [--trusted-proxy ADDR[/BITS]]...\n"
        "              [--proxy-header X-Forwarded-For|Forwarded] [--metrics-allow ADDR[/BITS]]...\n"
        "              [--pages N] [--seconds N] [--threads N] [--access-log FILE]\n"
        "              [--backend-workers N] [--shed aimd|vegas|gradient2] [--shed-latency-ms N]\n"
        "              [--idle-timeout-ms N] [--max-connections N] [--keepalive-requests N]\n"
        "              [--read-budget BYTES] [--workers N] [--dry-run]\n"
        "  --port N              0 (the default): the kernel picks one; the first line on stdout\n"
        "                        says `listening on ADDR:PORT`\n"
        "  --listen ADDR         the address to listen on (default 127.0.0.1)\n"
        "  --rate TEXT --burst N each client's token bucket (default 10/s, burst 10): 429 with\n"
        "                        Retry-After and RateLimit fields beyond it\n"
        "  --delay-ms N          hold a request over the limit up to N ms for a permit before\n"
        "                        refusing it (default 0: refuse at once)\n"
        "  --dry-run             the per-client limit in shadow mode (nginx's limit_req_dry_run):\n"
        "                        every request is decided and counted by it as usual, but none\n"
        "                        is refused (429) or delayed (--delay-ms) for it, and the bucket\n"
        "                        is charged only for what it admits. A request it would have\n"
        "                        refused or delayed is served with the header\n"
        "                        `Sluice-Dry-Run: 429; retry-after=S` or `delay; ms=M`, and a\n"
        "                        line on stderr, `dry-run: CLIENT METHOD TARGET would be 429\n"
        "                        (Retry-After S)` or `would be delayed M ms` (10 lines a second at\n"
        "                        most: the rest are counted only). /metrics counts them:\n"
        "                        sluice_limiter_shadow_try_refused_total{limiter=\"per_client\"}.\n"
        "                        --max-inflight and --shed still refuse\n"
        "  --max-inflight N      requests handled at once, 503 beyond (default 256)\n"
        "  --trusted-proxy ADDR[/BITS]  a proxy (an address, or a block of them) whose header names\n"
        "                        the client: from a peer in one, the header's list (every line of\n"
        "                        it, in order) is read from the right over trusted proxies, and\n"
        "                        the first address that is none is the client; an entry that is\n"
        "                        no address stops there, at the last trusted one (repeatable)\n"
        "  --proxy-header NAME   the header the trusted proxies write, X-Forwarded-For (the\n"
        "                        default) or Forwarded (RFC 7239 for=); the other is ignored\n"
        "  --metrics-allow ADDR[/BITS]  clients allowed GET /metrics, 403 for others (repeatable;\n"
        "                        default 127.0.0.0/8 and ::1)\n"
        "  --pages N             pages of the generated site (default 100)\n"
        "  --seconds N           exit after N seconds (default 0: run until SIGINT/SIGTERM)\n"
        "  --threads N           threads running the io_context (default 1)\n"
        "  --access-log FILE     one line per response: unix_ns client method target status wait_us\n"
        "  --idle-timeout-ms N   a connection waiting for a request is closed after N ms, with 408\n"
        "                        if part of one came (default 30000)\n"
        "  --max-connections N   connections held at once; past it, the one idle longest is\n"
        "                        closed (default: the open-file limit less 64)\n"
        "  --keepalive-requests N  requests one connection carries, the last answered with\n"
        "                        Connection: close (default 1000)\n"
        "  --read-budget BYTES   the bytes the read buffers of every connection hold together\n"
        "                        (default 67108864, 64 MiB; 65536 to 2^40; each worker's own\n"
        "                        with --workers): a buffer (512 bytes, growing to 16 KiB for a\n"
        "                        large header or a fast body) grows only within it, the last\n"
        "                        quarter kept for the first 512 bytes of a request; a request\n"
        "                        that cannot be read for want of room is answered 503 with\n"
        "                        Retry-After: 1 and its connection closed (the request that needs\n"
        "                        the room is refused; no other is evicted for it), counted in\n"
        "                        /metrics (sluice_read_budget_refused_total). Keep it above\n"
        "                        --max-connections x 512 for room for every connection's first read\n"
        "  --workers N           worker processes sharing the port (SO_REUSEPORT) and one per-client\n"
        "                        table in shared memory, so the limit is the host's, not each\n"
        "                        worker's, --delay-ms included (a request waits its turn among\n"
        "                        every worker's); answers say `Sluice-Worker: I`, /metrics is the\n"
        "                        worker's own (default 1: one process, no shared memory)\n"
        "  GET / and /site/<i>   generated HTML site (--pages pages, linked from /); /robots.txt\n"
        "                        disallows /api/\n"
        "  GET /api/<anything>   {\"ok\":true}; /api/work?ms=N answers after N ms\n"
        "  GET /metrics          Prometheus text format 0.0.4, or OpenMetrics 1.0 when Accept asks\n"
        "                        for it; not rate limited; for --metrics-allow clients only\n"
        "  A request's body is never kept: the answer is decided from its header, and the body\n"
        "  (1 MiB at most) read and dropped as it comes. A request with Expect: 100-continue\n"
        "  gets 100 (Continue) once it is accepted, before its body is read; one refused from\n"
        "  its header gets its final answer with no 100, and the connection closes. When the\n"
        "  server closes a connection whose client may still be sending (a refused body, bytes\n"
        "  behind the last request), it lingers: it shuts down its side after the answer and\n"
        "  reads and drops what comes, for 5 s and 4 MiB at most, so that the client reads the\n"
        "  answer instead of a reset.\n"
        "Exit codes: 0 after SIGINT, SIGTERM or --seconds; 1 when it cannot serve (the port, the\n"
        "access log, a worker that failed); 2 for a bad flag or value.\n"
        "  --backend-workers N   /api/work holds one of N workers of a stand-in backend (a pool\n"
        "                        of database connections, say): above N at once, latency grows\n"
        "  --shed ALG            an adaptive concurrency limit (at most --max-inflight) sheds the\n"
        "                        requests above what the server handles without queueing: 503\n"
        "  --shed-latency-ms N   for --shed aimd: a request slower than this means overload\n"
        "                        (default 100)\n",
        to);
}

// Returns false (after printing why) on bad input: an example must not silently clamp.
bool parse_args(int argc, char** argv, options& o)
{
    examples::flag_reader f("server", argc, argv);
    while (f.next()) {
        if (f.help()) {
            print_usage(stdout);
            std::exit(0);
        }
        if (f.is("--dry-run")) {   // the one flag without a value
            o.dry_run = true;
            continue;
        }
        auto value = f.value();
        if (!value) return false;
        std::string_view a = f.flag(), v = *value;
        std::uint64_t n = 0;
        bool ok = true;
        if (a == "--port") {
            ok = examples::parse_number(v, n) && n <= 65535;
            o.port = static_cast<std::uint16_t>(n);
        } else if (a == "--listen") {
            o.listen = v;
        } else if (a == "--rate") {
            auto r = sluice::parse_rate(v);
            if (!r) {
                std::fprintf(stderr, "server: --rate %s: %s\n", value->c_str(), r.error().message().c_str());
                return false;
            }
            o.rate = *r;
            o.rate_text = v;
        } else if (a == "--burst") {
            ok = examples::parse_number(v, o.burst) && o.burst > 0;
        } else if (a == "--delay-ms") {
            ok = examples::parse_number(v, o.delay_ms) && o.delay_ms <= 3'600'000;
        } else if (a == "--max-inflight") {
            ok = examples::parse_number(v, o.max_inflight) && o.max_inflight > 0;
        } else if (a == "--trusted-proxy") {
            ok = o.trusted.add(v);
        } else if (a == "--proxy-header") {
            if (beast::iequals(v, "X-Forwarded-For")) o.proxy_header = server_check::proxy_header::x_forwarded_for;
            else if (beast::iequals(v, "Forwarded")) o.proxy_header = server_check::proxy_header::forwarded;
            else ok = false;
        } else if (a == "--metrics-allow") {
            ok = o.metrics_allow.add(v);
        } else if (a == "--keepalive-requests") {
            ok = examples::parse_number(v, o.keepalive_requests) && o.keepalive_requests > 0;
        } else if (a == "--pages") {
            ok = examples::parse_number(v, o.pages) && o.pages > 0 && o.pages <= 10'000'000;
        } else if (a == "--seconds") {
            ok = examples::parse_number(v, o.seconds) && o.seconds <= 86'400 * 365;
        } else if (a == "--threads") {
            ok = examples::parse_number(v, o.threads) && o.threads > 0 && o.threads <= 256;
        } else if (a == "--access-log") {
            o.access_log = v;
        } else if (a == "--backend-workers") {
            ok = examples::parse_number(v, o.backend_workers) && o.backend_workers <= 1'000'000;
        } else if (a == "--shed") {
            o.shed = sluice::parse_concurrency_algorithm(v);
            ok = o.shed.has_value();
        } else if (a == "--shed-latency-ms") {
            ok = examples::parse_number(v, o.shed_latency_ms) && o.shed_latency_ms > 0 && o.shed_latency_ms <= 3'600'000;
        } else if (a == "--idle-timeout-ms") {
            ok = examples::parse_number(v, o.idle_timeout_ms) && o.idle_timeout_ms > 0 && o.idle_timeout_ms <= 3'600'000;
        } else if (a == "--max-connections") {
            ok = examples::parse_number(v, o.max_connections) && o.max_connections > 0;
        } else if (a == "--read-budget") {
            if (!examples::parse_number(v, o.read_budget) || o.read_budget < server_check::min_read_budget ||
                o.read_budget > server_check::max_read_budget) {
                std::fprintf(stderr, "server: --read-budget '%s': a number of bytes from %llu (64 KiB) to %llu (1 TiB)\n",
                             value->c_str(), static_cast<unsigned long long>(server_check::min_read_budget),
                             static_cast<unsigned long long>(server_check::max_read_budget));
                return false;
            }
        } else if (a == "--workers") {
            ok = examples::parse_number(v, o.workers) && o.workers > 0 && o.workers <= 256;
        } else {
            f.unknown();
            print_usage(stderr);
            return false;
        }
        if (!ok) {
            f.bad_value(v);
            return false;
        }
    }
    if (o.max_connections == 0) o.max_connections = default_max_connections();
    if (o.metrics_allow.empty()) {
        o.metrics_allow.add("127.0.0.0/8");
        o.metrics_allow.add("::1");
    }
    return true;
}

// The RateLimit-Policy that describes a token bucket: q / w is its rate (the smallest whole
// window w, up to a day, in which the rate gives a whole q to one part in 10^8; else a day),
// and sluice-burst its burst (an extension parameter, which the draft allows as a comment).
std::string policy_field(sluice::rate r, std::uint64_t burst)
{
    const double per_second = r.per_second();
    std::uint64_t w = 86400;
    for (std::uint64_t cand = 1; cand <= 86400; ++cand) {
        const double exact = per_second * static_cast<double>(cand);
        if (exact >= 0.5 && std::abs(exact - std::round(exact)) <= 1e-8 * exact) {
            w = cand;
            break;
        }
    }
    sluice::http::quota_policy p{"default", static_cast<std::uint64_t>(std::llround(per_second * static_cast<double>(w))),
                                 w, {}, {}, {}};
    p.extensions.push_back(
        {"sluice-burst", {sluice::http::sf::bare_item::kind::integer, static_cast<std::int64_t>(burst), {}, true}});
    return sluice::http::format_ratelimit_policy(std::span<const sluice::http::quota_policy>(&p, 1)).value();
}

// Whole seconds, rounded up, as the RateLimit and Retry-After headers want them: a client
// that waits as long as told finds what it was told of (see the comment at the top).
std::int64_t ceil_seconds(std::chrono::nanoseconds d)
{
    if (d <= 0ns) return 0;
    return (d.count() + 999'999'999) / 1'000'000'000;
}

// Counters shared by every connection (several threads with --threads).
struct metrics {
    std::atomic<std::uint64_t> admitted{0}, rejected{0}, delayed{0}, overloaded{0}, shed{0};
    std::atomic<std::int64_t> queue_depth{0};
    // Connections: evicted to make room, accept paused for want of file descriptors, and the
    // requests answered without being served (by status).
    std::atomic<std::uint64_t> evicted{0}, accept_pauses{0};
    // Requests refused (503) for want of room in the read budget; lingering closes, by
    // what ended them (lingering_close.hpp).
    std::atomic<std::uint64_t> read_budget_refused{0};
    enum linger_end : std::size_t { by_client, by_time, by_bytes, by_other };
    static constexpr std::array<const char*, 4> linger_ends{"client", "time", "bytes", "other"};
    std::array<std::atomic<std::uint64_t>, linger_ends.size()> lingered{};
    static constexpr std::array<unsigned, 9> refused_statuses{400, 405, 408, 413, 414, 431, 501, 505, 0};
    std::array<std::atomic<std::uint64_t>, refused_statuses.size()> bad_requests{};
    void count_bad(unsigned status)
    {
        for (std::size_t i = 0; i < refused_statuses.size(); ++i)
            if (refused_statuses[i] == status || refused_statuses[i] == 0) {
                bad_requests[i].fetch_add(1, std::memory_order_relaxed);
                return;
            }
    }

    static constexpr std::array<double, 11> bounds{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5};
    std::array<std::atomic<std::uint64_t>, bounds.size()> buckets{};
    std::atomic<std::uint64_t> wait_count{0}, wait_sum_ns{0};

    void observe_wait(std::chrono::nanoseconds w)
    {
        double s = std::chrono::duration<double>(w).count();
        for (std::size_t i = 0; i < bounds.size(); ++i)
            if (s <= bounds[i]) buckets[i].fetch_add(1, std::memory_order_relaxed);   // cumulative, as Prometheus wants
        wait_count.fetch_add(1, std::memory_order_relaxed);
        wait_sum_ns.fetch_add(static_cast<std::uint64_t>(w.count()), std::memory_order_relaxed);
    }
};

// One line per response, flushed at once so that a test can read it while we run.
class access_log {
public:
    bool open(const std::string& path)
    {
        if (path.empty()) return true;
        file_ = std::fopen(path.c_str(), "a");
        return file_ != nullptr;
    }
    ~access_log()
    {
        if (file_) std::fclose(file_);
    }

    void write(std::int64_t unix_ns, std::string_view client, std::string_view method, std::string_view target,
               unsigned status, std::int64_t wait_us)
    {
        if (!file_) return;
        std::lock_guard lock(mutex_);
        std::fprintf(file_, "%lld %.*s %.*s %.*s %u %lld\n", static_cast<long long>(unix_ns),
                     static_cast<int>(client.size()), client.data(), static_cast<int>(method.size()), method.data(),
                     static_cast<int>(target.size()), target.data(), status, static_cast<long long>(wait_us));
        std::fflush(file_);
    }

private:
    std::FILE* file_ = nullptr;
    std::mutex mutex_;
};

// What the parent of --workers N gives each worker process (prefork.hpp).
struct worker_context {
    server_prefork::worker_start* start;     // its index, listening socket, ready()
    sluice::shm::segment_options segment;    // the per-client table's segment (its descriptor)
};

// The per-client table shared by the workers. On steady_clock, read by every process alike
// (CLOCK_MONOTONIC): the workers decide on one time line exactly, as the threads of one
// process do (the default tsc_clock agrees across processes within 100 us only).
using shared_table = sluice::shm::keyed_bucket<std::chrono::steady_clock>;

// The table's shape: the cap on clients, as the in-process one's (server::keyed_opts).
sluice::shm::table_options shared_table_options()
{
    return {.max_keys = 100'000};
}

// --dry-run: what the per-client limit would have answered the request this thread is
// deciding. The shadow report runs inside try_acquire, on its caller's thread: handle()
// clears it before the try and reads it after.
thread_local std::optional<std::chrono::nanoseconds> would_wait;

sluice::shadow_options dry_run_shadow(bool on)
{
    sluice::shadow_options s;
    s.enabled = on;
    if (on) s.report = [](const sluice::shadow_event& e) { would_wait = e.wait; };
    return s;
}

// A worker's waiting (--delay-ms): a queue per client waiting in this worker, as many
// clients at once as the in-process limiter tracks.
sluice::shm::keyed_wait_options shared_wait_options(bool dry_run)
{
    sluice::shm::keyed_wait_options w{.max_waiting_keys = 100'000};
    w.limiter.shadow = dry_run_shadow(dry_run);
    return w;
}

using response = http::response<http::string_body>;

// A live connection, known to the server so that shutdown can close it.
struct connection {
    using list = std::list<std::weak_ptr<connection>>;
    explicit connection(tcp::socket s) : stream(std::move(s)) {}
    beast::tcp_stream stream;
    asio::steady_timer* work = nullptr;   // a running /api/work, cut short by shutdown
    // Under the server's conn_mutex_: where it is in the list of connections, and in the
    // list of idle ones (oldest first) while it waits for a request.
    list::iterator pos;
    std::optional<list::iterator> idle_pos;
    // On its strand: waiting for a request (its header read in progress), and told to
    // give up that wait to make room (the read is cancelled, as by its timeout).
    bool waiting = false;
    bool evicted = false;
    // Reads are bounded by this timer, not by the stream's own (which closes the socket when
    // it expires, and a 408 could then not be written): it cancels the read in progress.
    asio::steady_timer deadline{stream.get_executor()};
    std::uint64_t reads = 0;   // the read a deadline belongs to
    bool timed_out = false;
    // On its strand: closing, the client perhaps still sending (lingering_close.hpp): listed
    // idle first in line, and closed to make room whatever it is sent.
    bool lingering = false;
};

class server {
public:
    server(asio::io_context& io, options opts, const worker_context* worker = nullptr)
        : io_(io),
          opt_(std::move(opts)),
          budget_(opt_.read_budget),
          per_client_(io, opt_.rate, opt_.burst, keyed_opts(opt_.dry_run)),
          policy_(policy_field(opt_.rate, opt_.burst)),
          inflight_(io, opt_.max_inflight, sluice::limiter_options{.count_try_acquire = true}),
          shed_(make_shed(io, opt_)),
          backend_(make_backend(io, opt_)),
          dry_log_(io, sluice::rate::per_second(10), 10),
          strand_(asio::make_strand(io)),
          acceptor_(strand_),
          signals_(strand_, SIGINT, SIGTERM),
          deadline_(strand_),
          trim_(strand_)
    {
        if (worker) {
            worker_ = *worker;
            // On this worker's io_context: its requests can wait for a permit (--delay-ms).
            shared_.emplace(io, worker->segment, opt_.rate, opt_.burst, shared_table_options(),
                            std::chrono::nanoseconds{0}, shared_wait_options(opt_.dry_run));
        }
    }

    bool start()
    {
        if (!log_.open(opt_.access_log)) {
            std::fprintf(stderr, "server: cannot open access log %s: %s\n", opt_.access_log.c_str(), std::strerror(errno));
            return false;
        }
        boost::system::error_code ec;
        auto addr = asio::ip::make_address(opt_.listen, ec);
        if (ec) {
            std::fprintf(stderr, "server: bad --listen address %s\n", opt_.listen.c_str());
            return false;
        }
        tcp::endpoint ep(addr, opt_.port);
        if (worker_) {
            // The parent listens already, and said where.
            acceptor_.assign(ep.protocol(), worker_->start->listen_fd, ec);
        } else {
            acceptor_.open(ep.protocol(), ec);
            if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
            if (!ec) acceptor_.bind(ep, ec);
            if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
        }
        if (ec) {
            std::fprintf(stderr, "server: cannot listen on %s:%u: %s\n", opt_.listen.c_str(), opt_.port, ec.message().c_str());
            return false;
        }
        warm_pools();
        if (!worker_) {
            std::printf("listening on %s:%u\n", opt_.listen.c_str(), acceptor_.local_endpoint().port());
            std::fflush(stdout);
        }

        signals_.async_wait([this](boost::system::error_code e, int) {
            if (!e) stop();
        });
        if (opt_.seconds > 0) {
            deadline_.expires_after(std::chrono::seconds(opt_.seconds));
            deadline_.async_wait([this](boost::system::error_code e) {
                if (!e) stop();
            });
        }
        asio::co_spawn(acceptor_.get_executor(), accept_loop(), asio::detached);
        return true;
    }

private:
    static std::optional<sluice::adaptive_concurrency<>> make_shed(asio::io_context& io, const options& o)
    {
        if (!o.shed) return std::nullopt;
        sluice::adaptive_concurrency_options a;
        a.algorithm = *o.shed;
        a.max_limit = o.max_inflight;
        a.initial_limit = std::min<std::uint64_t>(a.initial_limit, o.max_inflight);
        // AIMD needs to be told what latency means overload; Vegas and Gradient2 learn it.
        a.latency_threshold = std::chrono::milliseconds(o.shed_latency_ms);
        return std::optional<sluice::adaptive_concurrency<>>(std::in_place, io, a,
                                                             sluice::limiter_options{.count_try_acquire = true});
    }

    static std::optional<sluice::concurrency_limit<>> make_backend(asio::io_context& io, const options& o)
    {
        if (o.backend_workers == 0) return std::nullopt;
        return std::optional<sluice::concurrency_limit<>>(std::in_place, io, o.backend_workers);
    }

    static sluice::keyed_options keyed_opts(bool dry_run)
    {
        sluice::keyed_options k;
        k.max_keys = 100'000;
        k.limiter.count_try_acquire = true;   // counted under the shard's lock: cheap here
        k.limiter.shadow = dry_run_shadow(dry_run);
        return k;
    }

    // Called once, on strand_ (signal or deadline). Closing the limiters completes
    // every request still waiting for a permit (error::closed, answered 503), closing the
    // acceptor and the connections ends their coroutines: run() then returns by itself.
    void stop()
    {
        if (stopping_.exchange(true)) return;
        signals_.cancel();
        deadline_.cancel();
        boost::system::error_code ignored;
        acceptor_.close(ignored);
        per_client_.close();
        if (shared_) shared_->close();   // this worker's waiters; the table stays for the others
        inflight_.close();
        if (shed_) shed_->close();
        if (backend_) backend_->close();
        trim_.cancel();
        std::lock_guard lock(conn_mutex_);
        for (auto& weak : conns_) {
            if (auto c = weak.lock()) {
                // A connection's stream is used only on its strand, so close it there.
                asio::post(c->stream.get_executor(), [c] {
                    c->stream.socket().close();
                    if (c->work) c->work->cancel();
                });
            }
        }
    }

    // Asio keeps the reactor's record of every socket it had open at once in a pool it never
    // frees, and a strand mutex per slot once used: made during a wave of connections, they
    // would sit among the connections' memory and keep it from going back to the system when
    // the wave ends (malloc can only return whole free pages). Made here, before any
    // connection, they are reused by every connection later.
    void warm_pools()
    {
        std::vector<tcp::socket> sockets;
        sockets.reserve(opt_.max_connections + 16);
        for (std::uint64_t i = 0; i < opt_.max_connections + 16; ++i) {
            boost::system::error_code ec;
            tcp::socket s(io_);
            s.open(tcp::v4(), ec);
            if (ec) break;   // the open-file limit: as many as there can ever be
            sockets.push_back(std::move(s));
        }
        sockets.clear();
        std::vector<asio::strand<asio::io_context::executor_type>> strands;
        for (int i = 0; i < 2000; ++i) strands.push_back(asio::make_strand(io_));
    }

    static bool out_of_descriptors(const boost::system::error_code& ec)
    {
        return ec == asio::error::no_descriptors ||                                     // EMFILE
               ec == boost::system::errc::too_many_files_open_in_system ||               // ENFILE
               ec == asio::error::no_buffer_space || ec == asio::error::no_memory;      // ENOBUFS, ENOMEM
    }

    asio::awaitable<void> accept_loop()
    {
        auto backoff = 0ms;
        asio::steady_timer pause(strand_);
        for (;;) {
            auto [ec, sock] = co_await acceptor_.async_accept(asio::make_strand(io_), asio::as_tuple(asio::use_awaitable));
            if (stopping_) co_return;
            if (ec == asio::error::operation_aborted) co_return;
            if (ec && out_of_descriptors(ec)) {
                // The connection stays in the backlog and accept would fail again at once, for
                // ever (100 % CPU, and no request served until idle clients leave). Make room
                // by closing the connection idle longest, as nginx does; with none idle, stop
                // accepting for a while, doubling up to a second (nginx waits 500 ms).
                metrics_.accept_pauses.fetch_add(1, std::memory_order_relaxed);
                if (evict_idle(1) > 0) backoff = 1ms;   // closed on its strand: give it a moment
                else backoff = backoff == 0ms ? 10ms : std::min<std::chrono::milliseconds>(backoff * 2, 1s);
                pause.expires_after(backoff);
                co_await pause.async_wait(asio::as_tuple(asio::use_awaitable));
                continue;
            }
            if (ec) continue;   // this connection's trouble (reset before accept): the next one
            backoff = 0ms;
            auto c = std::make_shared<connection>(std::move(sock));
            // Past the bound, the oldest idle connections make room for the new one.
            if (auto live = enroll(c); live > opt_.max_connections) evict_idle(live - opt_.max_connections);
            auto ex = c->stream.get_executor();
            asio::co_spawn(ex, session(std::move(c)), asio::detached);
        }
    }

    // Adds c to the connections; returns how many there are now.
    std::size_t enroll(const std::shared_ptr<connection>& c)
    {
        std::lock_guard lock(conn_mutex_);
        c->pos = conns_.insert(conns_.end(), c);
        peak_ = std::max(peak_, conns_.size());
        return conns_.size();
    }

    // Removes c; once the connections are half as many as at their peak (and a few hundred
    // fewer), the memory they held goes back to the system.
    void forget(connection& c)
    {
        std::lock_guard lock(conn_mutex_);
        if (c.idle_pos) idle_.erase(*c.idle_pos);
        c.idle_pos.reset();
        conns_.erase(c.pos);
        if (!trim_pending_ && conns_.size() + 256 <= peak_ && conns_.size() <= peak_ / 2) {
            trim_pending_ = true;
            asio::post(strand_, [this] {
                trim_.expires_after(1s);   // after the others of a wave have gone too
                trim_.async_wait([this](boost::system::error_code ec) {
                    std::lock_guard lock(conn_mutex_);
                    trim_pending_ = false;
                    if (ec) return;
                    peak_ = conns_.size();
#if defined(__GLIBC__)
                    ::malloc_trim(0);   // free pages amid the heap too, not only at its top
#endif
                });
            });
        }
    }

    // `first`: at the front of the line, the first to be closed to make room.
    void set_idle(const std::shared_ptr<connection>& c, bool idle, bool first = false)
    {
        std::lock_guard lock(conn_mutex_);
        if (idle && !c->idle_pos) c->idle_pos = idle_.insert(first ? idle_.begin() : idle_.end(), c);
        if (!idle && c->idle_pos) {
            idle_.erase(*c->idle_pos);
            c->idle_pos.reset();
        }
    }

    // Ends up to n connections waiting for a request, the oldest first; returns how many
    // were taken for it. A connection's stream is used only on its strand, so its wait is
    // ended there, and only if it still waits and no request is in its socket; and by a
    // cancel, not a close: a read may have taken the request from the socket with its
    // completion still queued on the strand (one accepted a moment ago is listed idle until
    // its first read runs; under load that read can lag), and a close would drop that
    // request unanswered. Such a read completes with its request, which is served. A
    // lingering connection (answered, closing) is closed whatever it has been sent.
    std::size_t evict_idle(std::size_t n)
    {
        std::size_t done = 0;
        std::lock_guard lock(conn_mutex_);
        while (done < n && !idle_.empty()) {
            auto c = idle_.front().lock();
            idle_.pop_front();
            if (!c) continue;
            c->idle_pos.reset();
            ++done;
            asio::post(c->stream.get_executor(), [c] {
                boost::system::error_code ec;
                if (!c->lingering && (!c->waiting || (c->stream.socket().available(ec) > 0 && !ec)))
                    return;   // a request came
                // Cancelled, not closed: a read that already took a request completes with it,
                // and the session serves it; one that took nothing ends, and so does the session.
                c->evicted = true;
                c->stream.socket().cancel(ec);
            });
        }
        return done;
    }

    // Answers a request the server will not serve (request_check.hpp); `keep`: the connection
    // may carry another request after this one (the verdict's own close aside).
    asio::awaitable<bool> refuse(connection& c, const server_check::verdict& v, unsigned version,
                                 const std::string& peer, bool keep)
    {
        metrics_.count_bad(static_cast<unsigned>(v.status));
        response res{v.status, version == 10 ? 10u : 11u};
        res.set(http::field::content_type, "text/plain");
        res.set(http::field::server, "sluice-example");
        if (v.status == http::status::method_not_allowed) res.set(http::field::allow, "GET, HEAD");
        if (v.status == http::status::service_unavailable) set_retry_after(res, 1);   // the read budget full
        res.body() = v.reason + "\n";
        res.keep_alive(keep && !v.close && !stopping_);
        res.prepare_payload();
        log_.write(std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::system_clock::now().time_since_epoch()).count(),
                   peer, "-", "-", res.result_int(), 0);
        c.stream.expires_after(5s);
        auto [ec, n] = co_await http::async_write(c.stream, res, asio::as_tuple(asio::use_awaitable));
        (void)n;
        co_return !ec && res.keep_alive();
    }

    // Bounds the socket operation about to start on c by `limit`: past it, the operation is
    // cancelled and c->timed_out set. Not by the stream's own timer, which closes the socket
    // when it expires: the socket stays open for an answer (a 408).
    static void arm_deadline(const std::shared_ptr<connection>& c, std::chrono::nanoseconds limit)
    {
        const auto read = ++c->reads;
        c->timed_out = false;
        c->stream.expires_never();
        c->deadline.expires_after(limit);
        c->deadline.async_wait([c, read](boost::system::error_code ec) {
            if (ec || c->reads != read) return;   // the operation ended first
            c->timed_out = true;
            boost::system::error_code ignored;
            c->stream.socket().cancel(ignored);
        });
    }

    static void disarm_deadline(connection& c)
    {
        ++c.reads;
        c.deadline.cancel();
    }

    // Reads up to `upto` of the request (server_check::request_reader) within `limit`, into
    // `buf`, whose bytes `held` takes from the read budget; a read past the limit completes
    // with beast::error::timeout, the socket still open for an answer; a buffer full that
    // the budget has no room to grow, with errc::not_enough_memory (503).
    static asio::awaitable<boost::system::error_code> read_within(const std::shared_ptr<connection>& c,
                                                                  beast::flat_buffer& buf,
                                                                  server_check::read_budget::lease& held,
                                                                  server_check::request_reader& reader,
                                                                  std::chrono::milliseconds limit,
                                                                  server_check::request_reader::part upto)
    {
        arm_deadline(c, limit);
        boost::system::error_code ec;
        std::size_t want = server_check::first_read;
        for (;;) {
            buf.consume(reader.take(std::string_view(static_cast<const char*>(buf.data().data()), buf.size()), upto, ec));
            if (ec != http::error::need_more) break;   // read, or a parse error
            if (buf.size() == buf.max_size()) {   // cannot happen below the header limit: for safety
                ec = http::error::buffer_overflow;
                break;
            }
            // 512 bytes at first (all an idle connection holds), twice as many after a read
            // that filled its room (more is coming), up to the buffer's size, as far as the
            // read budget has room: else what the buffer has free, and none, the request is
            // refused.
            const auto room = server_check::next_read(held, buf.size(), buf.capacity(), want, buf.max_size());
            if (!room) {
                ec = make_error_code(boost::system::errc::not_enough_memory);
                break;
            }
            auto space = buf.prepare(*room);
            BOOST_ASSERT(buf.capacity() == held.held());   // grown_capacity agrees with Beast
            auto [e, n] = co_await c->stream.async_read_some(space, asio::as_tuple(asio::use_awaitable));
            buf.commit(n);
            if (n == *room) want = std::min(2 * *room, buf.max_size());
            if (e == asio::error::eof) {
                reader.end(ec);
                break;
            }
            if (e) {
                ec = e;
                break;
            }
        }
        disarm_deadline(*c);
        co_return c->timed_out ? make_error_code(beast::error::timeout) : ec;
    }

    // Lingering close (server_check::lingering_close): the answer sent, the sending side is
    // shut down, and what the client still sends is read and dropped until it closes, or
    // for linger_time, or linger_bytes, whichever comes first. It holds no read buffer
    // (drain reads into the stack) and is first in line to be closed to make room.
    asio::awaitable<void> linger(const std::shared_ptr<connection>& c)
    {
        auto& s = c->stream.socket();
        boost::system::error_code ec;
        s.shutdown(tcp::socket::shutdown_send, ec);
        if (!ec) s.non_blocking(true, ec);
        if (ec) co_return;
        using clock = server_check::lingering_close::clock;
        server_check::lingering_close l(clock::now());
        c->lingering = true;
        set_idle(c, true, true);
        auto end = metrics::by_other;   // an error, a shutdown, closed to make room
        for (;;) {
            const auto wait = l.wait(clock::now());
            if (wait <= clock::duration::zero()) {
                end = l.room() == 0 ? metrics::by_bytes : metrics::by_time;
                break;
            }
            arm_deadline(c, wait);
            auto [e] = co_await s.async_wait(tcp::socket::wait_read, asio::as_tuple(asio::use_awaitable));
            disarm_deadline(*c);
            if (c->timed_out) end = metrics::by_time;
            if (e || c->timed_out || c->evicted || stopping_) break;
            if (!drain(s, l, ec)) {
                if (ec == asio::error::eof) end = metrics::by_client;
                else if (!ec) end = metrics::by_bytes;
                break;
            }
        }
        set_idle(c, false);
        c->lingering = false;
        if (std::exchange(c->evicted, false)) metrics_.evicted.fetch_add(1, std::memory_order_relaxed);
        metrics_.lingered[end].fetch_add(1, std::memory_order_relaxed);
    }

    // Reads and drops what the socket holds now (it does not block), at most l.room()
    // bytes; false when lingering is over: the client closed (ec eof), the socket failed
    // (ec), or linger_bytes are drained (no ec).
    static bool drain(tcp::socket& s, server_check::lingering_close& l, boost::system::error_code& ec)
    {
        std::array<char, 4096> scratch;   // this call's, never the connection's
        for (;;) {
            const auto n = s.read_some(asio::buffer(scratch.data(), std::min<std::uint64_t>(scratch.size(), l.room())), ec);
            l.drained(n);
            if (ec == asio::error::would_block) {
                ec = {};
                return true;
            }
            if (ec || l.room() == 0) return false;
        }
    }

    // One connection: request after request, each decided from its header alone (checked,
    // then served or refused), then its body, if any, read and dropped, then the answer.
    asio::awaitable<void> session(std::shared_ptr<connection> c)
    {
        using part = server_check::request_reader::part;
        struct enrolled {   // however the session ends, it leaves the lists
            server* s;
            connection* c;
            ~enrolled() { s->forget(*c); }
        } guard{this, c.get()};
        boost::system::error_code ec;
        auto peer = c->stream.socket().remote_endpoint(ec);
        if (ec) co_return;
        const auto peer_ip = server_check::canonical(peer.address());
        const std::string peer_addr = peer_ip.to_string();
        const auto idle_timeout = std::chrono::milliseconds(opt_.idle_timeout_ms);
        // What the read buffer holds is taken from the read budget (read_within), and all
        // given back however the session ends (the lease's destructor).
        server_check::read_budget::lease held(budget_);
        beast::flat_buffer buf(server_check::read_buffer_size);
        server_check::request_count count(opt_.keepalive_requests);
        bool linger = false;   // the server closes, the client perhaps still sending
        for (;;) {
            server_check::request_reader reader;
            // The whole header must come within the idle timeout: a client that sends a byte
            // now and then does not hold the connection for ever.
            set_idle(c, true);
            c->waiting = true;
            auto rec = co_await read_within(c, buf, held, reader, idle_timeout, part::header);
            c->waiting = false;
            set_idle(c, false);
            if (std::exchange(c->evicted, false) && rec) {
                metrics_.evicted.fetch_add(1, std::memory_order_relaxed);
                break;
            }
            if (stopping_) break;
            auto unparsed = [&buf] {
                return std::string_view(static_cast<const char*>(buf.data().data()),
                                        std::min<std::size_t>(buf.size(), server_check::max_header));
            };
            // Whether the client may still be sending when the server closes after its answer.
            auto unread = [&] {
                boost::system::error_code aec;
                const auto pending = c->stream.socket().available(aec);
                return server_check::lingering_close::needed(reader.done(), buf.size(), aec ? 0 : pending);
            };
            std::optional<server_check::verdict> bad;
            if (rec) {
                bad = server_check::after_read_error(rec, reader.got_some(), reader.line_done(), unparsed());
                if (!bad) break;   // the client left, or sent nothing in time
                if (rec == boost::system::errc::not_enough_memory)
                    metrics_.read_budget_refused.fetch_add(1, std::memory_order_relaxed);
            } else {
                bad = reader.check();
            }
            const unsigned version = reader.header_done() ? reader.header().version() : 11;
            // Expect: 100-continue: handle() sends the 100 once it accepts the request, and
            // clears this; a request refused from its header, here or there, gets its final
            // answer with no 100, and the connection closes, its body unread.
            bool awaiting = !rec && reader.awaits_continue();

            // Decided from the header alone: the body, if any, has not been read.
            std::optional<response> res;
            auto arrived = std::chrono::system_clock::now();
            std::int64_t wait_us = 0;
            std::string client = peer_addr;
            if (!bad) res = co_await handle(*c, reader.header(), peer_ip, client, wait_us, awaiting);

            // The body: dropped as it comes, unless the connection closes after the answer.
            if (!awaiting && (!bad || !bad->close) && !reader.done()) {
                if (auto bec = co_await read_within(c, buf, held, reader, idle_timeout, part::body)) {
                    bad = server_check::after_read_error(bec, true, true, unparsed());
                    if (!bad) break;
                    if (bec == boost::system::errc::not_enough_memory)
                        metrics_.read_budget_refused.fetch_add(1, std::memory_order_relaxed);
                }
            }
            const bool keep = count.next() && reader.header_done() && reader.keep_alive() && !awaiting;
            if (bad) {
                if (co_await refuse(*c, *bad, version, peer_addr, keep)) continue;
                linger = c->stream.socket().is_open() && unread();
                break;
            }
            const auto& req = reader.header();
            res->version(req.version());
            res->keep_alive(keep && !stopping_);
            res->set(http::field::server, "sluice-example");
            if (worker_) res->set("Sluice-Worker", std::to_string(worker_->start->index));
            res->prepare_payload();
            log_.write(std::chrono::duration_cast<std::chrono::nanoseconds>(arrived.time_since_epoch()).count(), client,
                       req.method_string(), server_check::origin_form(req.target()).value(), res->result_int(), wait_us);
            c->stream.expires_after(30s);
            boost::system::error_code wec;
            if (req.method() == http::verb::head) {   // the header GET would have, with no body
                http::response_serializer<http::string_body> sr(*res);
                auto [hec, m] = co_await http::async_write_header(c->stream, sr, asio::as_tuple(asio::use_awaitable));
                (void)m;
                wec = hec;
            } else {
                auto [bec, m] = co_await http::async_write(c->stream, *res, asio::as_tuple(asio::use_awaitable));
                (void)m;
                wec = bec;
            }
            if (wec) break;
            if (!res->keep_alive()) {
                linger = unread();
                break;
            }
            if (buf.size() == 0) {   // an idle connection holds no buffer
                buf.shrink_to_fit();
                held.shrink_to(buf.capacity());
            }
        }
        if (linger && !stopping_) {
            // Lingering holds no buffer: what it held goes back to the budget first.
            buf.clear();
            buf.shrink_to_fit();
            held.shrink_to(buf.capacity());
            co_await this->linger(c);
        }
        c->stream.socket().shutdown(tcp::socket::shutdown_send, ec);
        c->stream.close();
    }

    void set_ratelimit_headers(response& res, std::uint64_t remaining, std::chrono::nanoseconds reset_after) const
    {
        res.set("RateLimit-Policy", policy_);
        sluice::http::service_limit l{"default", remaining, static_cast<std::uint64_t>(ceil_seconds(reset_after)), {}, {}};
        res.set("RateLimit", sluice::http::format_ratelimit(std::span<const sluice::http::service_limit>(&l, 1)).value());
    }

    // --dry-run: what the limit would have done to a request served anyway, in a header and
    // on stderr (at most dry_log_'s rate: a flood of them must not flood the log).
    void say_dry_run(response& res, const http::request_header<>& req, const std::string& client,
                     std::chrono::nanoseconds wait)
    {
        const bool delayed = opt_.delay_ms > 0 && wait <= std::chrono::milliseconds(opt_.delay_ms);
        const auto ms = (wait.count() + 999'999) / 1'000'000;
        const std::string what = delayed ? "delay; ms=" + std::to_string(ms)
                                         : "429; retry-after=" + std::to_string(std::max<std::int64_t>(1, ceil_seconds(wait)));
        res.set("Sluice-Dry-Run", what);
        if (!dry_log_.try_acquire()) return;
        const std::string target(req.target());
        if (delayed)
            std::fprintf(stderr, "dry-run: %s %s %s would be delayed %lld ms\n", client.c_str(),
                         std::string(req.method_string()).c_str(), target.c_str(), static_cast<long long>(ms));
        else
            std::fprintf(stderr, "dry-run: %s %s %s would be 429 (Retry-After %lld)\n", client.c_str(),
                         std::string(req.method_string()).c_str(), target.c_str(),
                         static_cast<long long>(std::max<std::int64_t>(1, ceil_seconds(wait))));
    }

    static void set_retry_after(response& res, std::int64_t seconds)
    {
        sluice::http::retry_after ra;
        ra.delay = std::chrono::seconds(seconds);
        res.set(http::field::retry_after, sluice::http::format_retry_after(ra).value());
    }

    static response text(http::status s, std::string body, std::string_view type = "text/plain")
    {
        response res{s, 11};
        res.set(http::field::content_type, type);
        res.body() = std::move(body);
        return res;
    }

    // Calls f(limiter, key) on the client's bucket and returns what it returns: in this
    // process, or in the table the workers share, both asked alike (try_acquire, and
    // async_acquire for --delay-ms). In the table a client is its address's bytes (an IPv4
    // address as an integer key, IPv6 as 16 bytes), which always fit a key (40 bytes; an
    // IPv6 address's text with a zone may not). A string_view key is valid during f only:
    // an f whose result keeps the key (an awaitable not started yet) copies it.
    template <class F>
    auto on_bucket(const std::string& client, F&& f)
    {
        if (!shared_) return f(per_client_, std::string_view(client));
        boost::system::error_code ec;
        auto addr = asio::ip::make_address(client, ec);   // client_of() gives an address
        if (ec) return f(*shared_, std::string_view(client));   // else, up to 40 bytes (500 beyond)
        if (addr.is_v4()) return f(*shared_, std::uint64_t{addr.to_v4().to_uint()});
        const auto bytes = addr.to_v6().to_bytes();
        return f(*shared_, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
    }

    // Expect: 100-continue (RFC 9110 10.1.1): the request is accepted and its client waits
    // for a 100 before it sends the body: the 100, once (`awaiting` cleared).
    static asio::awaitable<void> send_continue(connection& c, bool& awaiting)
    {
        if (!std::exchange(awaiting, false)) co_return;
        static constexpr std::string_view interim = "HTTP/1.1 100 Continue\r\n\r\n";
        c.stream.expires_after(5s);
        auto [ec, n] = co_await asio::async_write(c.stream, asio::buffer(interim.data(), interim.size()),
                                                  asio::as_tuple(asio::use_awaitable));
        (void)ec;   // a connection that failed here fails its next read or write too
        (void)n;
    }

    // The answer to a request that may be served (server_check::request_reader::check), from
    // its header alone; `client` is set to whom its limit applies. A request it accepts whose
    // client awaits a 100 (Continue) is sent one (send_continue) before it is served; one it
    // refuses (403, 429, 503, 500) is not, and `awaiting` stays set.
    asio::awaitable<response> handle(connection& c, const http::request_header<>& req, const asio::ip::address& peer,
                                     std::string& client, std::int64_t& wait_us, bool& awaiting)
    {
        // check() let only origin and absolute forms through; the latter is routed by its path.
        const auto to = server_check::route_of(server_check::origin_form(req.target()).value(), opt_.pages);
        const auto who = server_check::client_of(req, peer, opt_.trusted, opt_.proxy_header);
        client = who.to_string();
        // Not rate limited, so for the operator's addresses only: a client behind a trusted
        // proxy is judged by its own address, not the proxy's.
        if (to.what == server_check::route::kind::metrics) {
            if (!opt_.metrics_allow.contains(who)) co_return text(http::status::forbidden, "forbidden\n");
            const auto f = sluice::prometheus::negotiate(req[http::field::accept]);
            co_await send_continue(c, awaiting);
            co_return text(http::status::ok, render_metrics(f), sluice::prometheus::content_type(f));
        }

        // The answer to a refusal that is not the client's rate (server_check::refusal_of):
        // the server's excess or a shutdown, 503 with a Retry-After; a failure, 500. None
        // is a latency sample of the adaptive limit.
        using server_check::refusal;
        std::optional<sluice::adaptive_concurrency<>::permit> shed_permit;
        auto not_client = [&](refusal r, const boost::system::error_code& ec, std::int64_t retry_s) {
            if (shed_permit) shed_permit->ignore();
            if (r == refusal::failed) return text(http::status::internal_server_error, ec.message() + "\n");
            if (r == refusal::overloaded) metrics_.overloaded.fetch_add(1, std::memory_order_relaxed);
            auto res = text(http::status::service_unavailable, r == refusal::overloaded ? "overloaded\n" : "shutting down\n");
            set_retry_after(res, std::max<std::int64_t>(1, retry_s));
            return res;
        };

        // Overload first: a request over the global cap costs no permit of its client.
        auto slot = inflight_.try_acquire();
        if (!slot) co_return not_client(refusal::overloaded, {}, 1);

        // Then what the server can handle without queueing, as the adaptive limit has
        // learnt it: beyond it a request would only wait, and make every other one wait.
        if (shed_) {
            shed_permit = shed_->try_acquire();
            if (!*shed_permit) {
                metrics_.shed.fetch_add(1, std::memory_order_relaxed);
                auto res = text(http::status::service_unavailable, "overloaded\n");
                set_retry_after(res, 1);
                co_return res;
            }
        }

        would_wait.reset();
        auto d = on_bucket(client, [](auto& limiter, const auto& key) { return limiter.try_acquire(key); });
        const auto dark = std::exchange(would_wait, std::nullopt);   // --dry-run: let through
        if (d.error) {
            // An error that says when (the table full, none idle before then) is the
            // server's excess; one that never passes, a failure.
            const bool never = d.retry_after == std::chrono::nanoseconds::max();
            refusal r = server_check::refusal_of(d.error);
            if (r == refusal::client_rate && never) r = refusal::failed;
            if (r != refusal::client_rate) co_return not_client(r, d.error, never ? 1 : ceil_seconds(d.retry_after));
        }
        std::uint64_t remaining = d.remaining;
        auto reset_after = d.reset_after;
        if (d.admitted) {
            metrics_.admitted.fetch_add(1, std::memory_order_relaxed);
        } else {
            bool granted = false;
            if (opt_.delay_ms > 0) {
                auto t0 = std::chrono::steady_clock::now();
                metrics_.queue_depth.fetch_add(1, std::memory_order_relaxed);
                // Its turn among every request of the client that waits, in any worker.
                auto [ec] = co_await on_bucket(client, [this](auto& limiter, const auto& key) {
                    // The operation starts when awaited, after on_bucket: it keeps its own key.
                    using kept = std::conditional_t<std::is_same_v<std::decay_t<decltype(key)>, std::string_view>,
                                                    std::string, std::decay_t<decltype(key)>>;
                    return limiter.async_acquire(kept(key), 1, std::chrono::milliseconds(opt_.delay_ms),
                                                 asio::as_tuple(asio::use_awaitable));
                });
                metrics_.queue_depth.fetch_sub(1, std::memory_order_relaxed);
                auto waited = std::chrono::steady_clock::now() - t0;
                if (!ec) {
                    granted = true;
                    wait_us = std::chrono::duration_cast<std::chrono::microseconds>(waited).count();
                    metrics_.delayed.fetch_add(1, std::memory_order_relaxed);
                    metrics_.observe_wait(waited);
                    // The bucket was empty when we queued; our permit has been taken since:
                    // it is still empty, and full one interval later than it was then.
                    remaining = 0;
                    reset_after = std::max<std::chrono::nanoseconds>(0ns, d.reset_after + opt_.rate.interval() - waited);
                } else if (refusal r = server_check::refusal_of(ec); r != refusal::client_rate) {
                    co_return not_client(r, ec, 1);
                }
            }
            if (!granted) {
                // A refusal costs nothing and says nothing about the server's latency.
                if (shed_permit) shed_permit->ignore();
                metrics_.rejected.fetch_add(1, std::memory_order_relaxed);
                auto res = text(http::status::too_many_requests, "too many requests\n");
                set_retry_after(res, std::max<std::int64_t>(1, ceil_seconds(d.retry_after)));
                set_ratelimit_headers(res, 0, reset_after);
                co_return res;
            }
        }

        co_await send_continue(c, awaiting);
        response res = co_await route(c, to);
        // The latency of a request served is the adaptive limit's sample (its permit's
        // destructor); a shutdown's 503 is none.
        if (shed_permit && res.result() == http::status::service_unavailable) shed_permit->ignore();
        set_ratelimit_headers(res, remaining, reset_after);
        if (dark) say_dry_run(res, req, client, *dark);
        co_return res;   // `slot` is given back here, once the work is done
    }

    asio::awaitable<response> route(connection& c, server_check::route to)
    {
        using kind = server_check::route::kind;
        switch (to.what) {
        case kind::index: co_return text(http::status::ok, page(0, true), "text/html");
        case kind::robots: co_return text(http::status::ok, "User-agent: *\nDisallow: /api/\n");
        case kind::page: co_return text(http::status::ok, page(to.n, false), "text/html");
        case kind::no_page: co_return text(http::status::not_found, "no such page\n");
        case kind::api: co_return text(http::status::ok, "{\"ok\":true}", "application/json");
        case kind::bad_query: co_return text(http::status::bad_request, "bad ms\n");
        case kind::metrics:   // handled before any limit
        case kind::not_found: co_return text(http::status::not_found, "not found\n");
        case kind::work: break;
        }
        // The stand-in backend: one of its workers for the whole work, waited for (the
        // queue that makes latency grow with load above its size).
        sluice::concurrency_limit<>::permit worker;
        if (backend_) {
            worker = co_await backend_->acquire();
            if (!worker) co_return text(http::status::service_unavailable, "shutting down\n");
        }
        asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::milliseconds(to.n));
        c.work = &t;
        if (stopping_) t.cancel();   // stop() ran before c.work was set: see it here
        auto [ec] = co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
        c.work = nullptr;
        if (ec) co_return text(http::status::service_unavailable, "shutting down\n");
        co_return text(http::status::ok, "{\"ok\":true}", "application/json");
    }

    // Page i links to i+1 (so every page is reachable from /site/0), and to two pages
    // further away so that a crawler sees duplicates and a wide frontier.
    std::string page(std::uint64_t i, bool index) const
    {
        const std::uint64_t n = opt_.pages;
        std::vector<std::uint64_t> links;
        if (index) {
            for (std::uint64_t k = 0; k < std::min<std::uint64_t>(n, 5); ++k) links.push_back(k * n / 5);
        } else {
            links = {(i + 1) % n, (2 * i + 1) % n, (i * 7 + 3) % n};
        }
        std::string body = "<!doctype html>\n<html><head><title>";
        body += index ? std::string("index") : "page " + std::to_string(i);
        body += "</title></head><body>\n<h1>";
        body += index ? std::string("sluice example site") : "page " + std::to_string(i);
        body += "</h1>\n<ul>\n";
        for (auto j : links) body += "<li><a href=\"/site/" + std::to_string(j) + "\">page " + std::to_string(j) + "</a></li>\n";
        body += "</ul>\n</body></html>\n";
        return body;
    }

    // Every metric through sluice::prometheus, the server's own families and each
    // limiter's limiter_stats alike, in the format the scraper asked for.
    std::string render_metrics(sluice::prometheus::format f)
    {
        namespace prom = sluice::prometheus;
        using prom::metric_type;
        std::string m;
        prom::writer w(m, {f, "sluice_", {}});
        w.family("requests", metric_type::counter, "Requests by what the limiters decided.");
        w.sample({{"result", "admitted"}}, metrics_.admitted.load());
        w.sample({{"result", "rejected"}}, metrics_.rejected.load());
        w.sample({{"result", "delayed"}}, metrics_.delayed.load());
        w.sample({{"result", "overloaded"}}, metrics_.overloaded.load());
        w.sample({{"result", "shed"}}, metrics_.shed.load());
        w.family("queue_depth", metric_type::gauge, "Requests waiting for a permit now.");
        w.sample(metrics_.queue_depth.load());
        w.family("inflight", metric_type::gauge, "Requests being handled now.");
        w.sample(inflight_.in_use());
        if (shed_) {
            w.family("adaptive_limit", metric_type::gauge, "Requests the adaptive limit lets run at once now.");
            w.sample(shed_->limit());
        }
        {
            std::size_t open = 0, idle = 0;
            {
                std::lock_guard lock(conn_mutex_);
                open = conns_.size();
                idle = idle_.size();
            }
            w.family("connections", metric_type::gauge, "Connections open now, by state.");
            w.sample({{"state", "idle"}}, idle);
            w.sample({{"state", "busy"}}, open - idle);
            w.family("connections_evicted", metric_type::counter, "Idle connections closed to make room for new ones.");
            w.sample(metrics_.evicted.load());
            w.family("accept_pauses", metric_type::counter, "Times accept found no file descriptor left.");
            w.sample(metrics_.accept_pauses.load());
            w.family("bad_requests", metric_type::counter, "Requests answered without being served, by status.");
            for (std::size_t i = 0; i + 1 < metrics::refused_statuses.size(); ++i)
                w.sample({{"status", std::to_string(metrics::refused_statuses[i])}}, metrics_.bad_requests[i].load());
            w.family("lingering_closes", metric_type::counter, "Connections closed after lingering, by what ended it.");
            for (std::size_t i = 0; i < metrics::linger_ends.size(); ++i)
                w.sample({{"end", metrics::linger_ends[i]}}, metrics_.lingered[i].load());
        }
        w.family("read_budget_bytes", metric_type::gauge, "The bytes every connection's read buffer may hold together.",
                 "bytes");
        w.sample(budget_.limit());
        w.family("read_buffer_bytes", metric_type::gauge,
                 "The bytes the read buffers hold now, and the most they held at once.", "bytes");
        w.sample({{"at", "now"}}, budget_.in_use());
        w.sample({{"at", "peak"}}, budget_.peak());
        w.family("read_budget_refused", metric_type::counter,
                 "Requests refused (503) for want of room in the read budget.");
        w.sample(metrics_.read_budget_refused.load());
        w.family("keys", metric_type::gauge, "Clients tracked by the per-client limiter.");
        // With --workers, the shared table's: the clients of every worker.
        w.sample(shared_ ? shared_->table().size() : per_client_.stats().keys.tracked);
        w.family("wait_seconds", metric_type::histogram, "Time delayed requests waited for a permit.", "seconds");
        for (std::size_t i = 0; i < metrics::bounds.size(); ++i) w.bucket({}, metrics::bounds[i], metrics_.buckets[i].load());
        const auto count = metrics_.wait_count.load();
        w.bucket({}, std::numeric_limits<double>::infinity(), count);
        w.sample("_sum", {}, std::chrono::nanoseconds(metrics_.wait_sum_ns.load()));
        w.sample("_count", {}, count);

        // Each limiter's own counts (limiter_stats), labelled limiter="...". With --workers,
        // per_client is this worker's requests that waited in the shared table (--delay-ms):
        // the table counts no try_acquire, so per_client leaves out that group.
        const bool local = !shared_;
        std::vector<prom::named_stats> limiters;
        limiters.push_back({"per_client", local ? per_client_.stats() : shared_->stats(),
                            {.requests = true, .tries = local, .keys = local, .backend = false, .adaptive = false}});
        limiters.push_back({"inflight", inflight_.stats(),
                            {.requests = true, .tries = true, .keys = false, .backend = false, .adaptive = false}});
        if (shed_)
            limiters.push_back({"shed", shed_->stats(),
                                {.requests = true, .tries = true, .keys = false, .backend = false, .adaptive = true}});
        prom::write_stats(w, limiters);
        w.finish();
        return m;
    }

    asio::io_context& io_;
    options opt_;
    access_log log_;
    metrics metrics_;
    // Every connection's read buffer takes its bytes from here (read_within). When it has
    // no room for a request that needs more (a header that does not fit its buffer yet),
    // that request is refused, 503 with Retry-After, rather than another connection closed
    // to make room (as --max-connections does): the request that needs the memory is the
    // one to pay for it, and a client whose header grows large and slowly cannot have
    // other clients' requests cut off halfway, unanswered. The quarter of it kept for
    // first reads keeps room for new requests meanwhile (read_budget.hpp).
    server_check::read_budget budget_;
    sluice::keyed<sluice::token_bucket<>> per_client_;
    std::optional<worker_context> worker_;
    std::optional<shared_table> shared_;   // with --workers: decides instead of per_client_
    std::string policy_;   // RateLimit-Policy: fixed for the server's life
    sluice::concurrency_limit<> inflight_;
    std::optional<sluice::adaptive_concurrency<>> shed_;
    std::optional<sluice::concurrency_limit<>> backend_;
    sluice::token_bucket<> dry_log_;   // --dry-run's lines on stderr: 10 a second at most
    // The acceptor, the signals and the deadline share a strand, so that stop() never
    // races the accept loop when the io_context runs several threads.
    asio::strand<asio::io_context::executor_type> strand_;
    tcp::acceptor acceptor_;
    asio::signal_set signals_;
    asio::steady_timer deadline_;
    asio::steady_timer trim_;   // malloc_trim, once connections have gone
    std::atomic<bool> stopping_{false};
    std::mutex conn_mutex_;
    connection::list conns_;    // every connection (under conn_mutex_, as the three below)
    connection::list idle_;     // those waiting for a request, the oldest first
    std::size_t peak_ = 0;
    bool trim_pending_ = false;
};

// One process serving: the server on an io_context of --threads threads. As a worker of
// --workers N (`worker`), it tells the parent once it serves (and handles SIGINT and
// SIGTERM itself: prefork.hpp blocks them across the fork).
int serve(const options& opt, const worker_context* worker = nullptr)
{
    try {
        asio::io_context io(static_cast<int>(opt.threads));
        server s(io, opt, worker);
        if (!s.start()) return 1;
        if (worker) worker->start->ready();
        std::vector<std::thread> pool;
        for (std::uint64_t i = 1; i < opt.threads; ++i) pool.emplace_back([&io] { io.run(); });
        io.run();
        for (auto& t : pool) t.join();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "server: %s\n", e.what());
        return 1;
    }
    return 0;
}

// --workers N: the parent makes the N listening sockets and the shared table, runs the
// workers (prefork.hpp), and says where it listens once they all serve. The table goes
// with the last process that maps it.
int serve_workers(const options& opt)
{
    boost::system::error_code ec;
    auto addr = asio::ip::make_address(opt.listen, ec);
    if (ec) {
        std::fprintf(stderr, "server: bad --listen address %s\n", opt.listen.c_str());
        return 1;
    }
    std::uint16_t port = 0;
    std::vector<int> fds;
    try {
        fds = server_prefork::listen_reuseport(tcp::endpoint(addr, opt.port), opt.workers, port);
    } catch (const boost::system::system_error& e) {
        std::fprintf(stderr, "server: cannot listen on %s:%u: %s\n", opt.listen.c_str(), opt.port, e.what());
        return 1;
    }
    int rc = 1;
    try {
        // Created here, before any worker: a segment that cannot be made fails once. Unnamed
        // (a sealed memfd): no other process can open it, take its name first or truncate it;
        // the workers attach to it by its descriptor, inherited. A lock in it that a stopped
        // process holds makes a request wait 100 ms at most (then 503), never for ever.
        shared_table table(sluice::shm::segment_options{.anonymous = true}, opt.rate, opt.burst,
                           shared_table_options());
        auto where = sluice::shm::segment_options::of(table.table().segment());
        where.lock_timeout = std::chrono::milliseconds(100);
        rc = server_prefork::run(
            std::move(fds),
            [&opt, &where](server_prefork::worker_start& start) {
                const worker_context w{&start, where};
                return serve(opt, &w);
            },
            [&opt, port] {   // every worker serves
                std::printf("listening on %s:%u\n", opt.listen.c_str(), port);
                std::fflush(stdout);
            });
    } catch (const std::exception& e) {
        std::fprintf(stderr, "server: %s\n", e.what());
        for (int fd : fds) ::close(fd);
    }
    return rc;
}

} // namespace

int main(int argc, char** argv)
{
    options opt;
    if (!parse_args(argc, argv, opt)) return 2;
    return opt.workers > 1 ? serve_workers(opt) : serve(opt);
}
