// api_client: calls a quota'd HTTP API no faster than the API allows, learning the
// allowance from the API itself.
//
// A sluice::token_bucket paces `--concurrency` workers, each on its own keep-alive
// connection, starting at `--rate` (the client's own guess). Every response's RateLimit /
// RateLimit-Policy fields (draft-ietf-httpapi-ratelimit-headers-08) feed a controller
// (adaptive_rate.hpp) that moves the bucket's rate to what the server's quota sustains;
// a 429 or 503 pauses every worker until its Retry-After has passed.
//
//   api_client --url http://127.0.0.1:8080/api/items --rate 100/s --seconds 10
//   api_client --spawn-server --server-rate 20/s --server-burst 10 --rate 100/s --seconds 10

#include "../common/http_connection.hpp"
#include "../common/loopback_url.hpp"
#include "../common/spawn_server.hpp"
#include "adaptive_rate.hpp"
#include "ratelimit_fields.hpp"

#include <sluice/token_bucket.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace asio = boost::asio;
namespace http = boost::beast::http;
using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

struct options {
    std::string url;
    std::string rate = "100/s";
    std::uint64_t burst = 1;
    std::uint64_t requests = 0;
    double seconds = 0;
    unsigned concurrency = 4;
    std::string min_rate = "1/s";
    std::string max_rate; // default: 10 x rate
    bool adapt = true;
    unsigned timeout_ms = 10000;
    bool quiet = false;
    bool spawn = false;
    std::string server_bin;
    std::string server_rate = "20/s";
    std::string server_burst = "10";
    std::string redis;
};

void usage(std::FILE* to)
{
    std::fputs(
        "usage: api_client --url http://127.0.0.1:PORT/api/... [options]\n"
        "       api_client --spawn-server [--url /api/...] [options]\n"
        "  --rate TEXT          initial pace, e.g. 100/s (default 100/s)\n"
        "  --burst N            burst of the client's own bucket (default 1: evenly paced)\n"
        "  --requests N         stop after N requests (default 100 unless --seconds)\n"
        "  --seconds S          stop after S seconds\n"
        "  --concurrency C      workers, each with one keep-alive connection (default 4)\n"
        "  --min-rate TEXT      floor of the adapted rate (default 1/s)\n"
        "  --max-rate TEXT      ceiling of the adapted rate (default 10 x --rate)\n"
        "  --no-adapt           ignore RateLimit and Retry-After (a baseline to compare with)\n"
        "  --timeout-ms N       per request (default 10000)\n"
        "  --quiet              no progress line\n"
        "  --spawn-server       start the example server on a free loopback port first\n"
        "  --server-bin PATH    (default: 'server' next to this executable)\n"
        "  --server-rate TEXT   its per-client rate (default 20/s)\n"
        "  --server-burst N     its per-client burst (default 10)\n"
        "  --redis HOST:PORT    share one quota between processes (not built yet)\n",
        to);
}

template <class T>
bool to_number(const std::string& s, T& out)
{
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc{} && end == s.data() + s.size();
}

std::optional<sluice::rate> rate_arg(const char* flag, const std::string& text)
{
    auto r = sluice::parse_rate(text);
    if (!r) {
        std::fprintf(stderr, "api_client: %s '%s': %s (a rate such as 100/s, 600/min, 10/250ms)\n", flag, text.c_str(),
                     r.error().message().c_str());
        return std::nullopt;
    }
    return *r;
}

// Everything the workers share; one io_context, one thread.
struct client {
    client(asio::io_context& io, const options& o, sluice::rate initial, double floor, double ceiling)
        : io(io), opts(o), bucket(io, initial, o.burst), controller(initial.per_second(), floor, ceiling), gate(io),
          ticker(io), deadline(io), signals(io, SIGINT, SIGTERM)
    {
    }

    asio::io_context& io;
    const options& opts;
    examples::loopback_url url;
    sluice::token_bucket<> bucket;
    ratelimit::adaptive_rate controller;
    clock_type::time_point start = clock_type::now();

    // The pause after a 429 is a gate in front of the bucket, not a reservation inside
    // it: reserving the bucket ahead ("take Retry-After's worth of permits now") cannot
    // express a pause longer than burst / rate, which is a few milliseconds for a client
    // pacing evenly (burst 1), and it would leave the bucket's rate describing the pause
    // instead of the quota. With a gate, a worker waits for it, then for its permit, then
    // looks at the gate again: a permit granted while a 429 arrived is forfeited, which
    // only slows the client down. When the gate opens the bucket holds at most `burst`
    // permits, so the workers leave one by one at the learned rate, not in a herd.
    clock_type::time_point paused_until{};
    asio::steady_timer gate;
    asio::steady_timer ticker;
    asio::steady_timer deadline;
    asio::signal_set signals;

    bool stopping = false;
    unsigned live_workers = 0;
    std::uint64_t sent = 0, completed = 0, last_tick_sent = 0, pauses = 0;
    std::map<unsigned, std::uint64_t> by_status;
    std::map<std::string, std::uint64_t> errors;

    bool paused() const { return clock_type::now() < paused_until; }

    void pause(clock_type::duration d)
    {
        auto until = clock_type::now() + d;
        if (until <= paused_until) return;
        paused_until = until;
        ++pauses;
        gate.expires_at(until); // wakes current waiters, which wait again for the new end
    }

    void stop()
    {
        if (stopping) return;
        stopping = true;
        bucket.close(); // workers waiting for a permit leave with error::closed
        gate.cancel();
    }

    bool claim()
    {
        if (stopping) return false;
        if (opts.requests && sent >= opts.requests) return false;
        ++sent;
        return true;
    }

    static std::string joined(const http::response<http::string_body>& res, std::string_view name)
    {
        std::string out;
        for (auto [it, end] = res.equal_range(name); it != end; ++it) {
            if (!out.empty()) out += ", ";
            out.append(it->value().data(), it->value().size());
        }
        return out;
    }

    void on_result(const examples::http_result& r)
    {
        ++completed;
        if (r.fail != examples::failure::none) {
            ++errors[examples::to_string(r.fail)];
            return;
        }
        const auto& res = r.response;
        unsigned status = res.result_int();
        ++by_status[status];
        if (!opts.adapt) return;
        bool over = status == 429 || status == 503;
        if (over) {
            std::optional<std::chrono::seconds> ra;
            if (auto f = res.find(http::field::retry_after); f != res.end())
                ra = ratelimit::parse_retry_after(std::string_view(f->value().data(), f->value().size()),
                                                  std::chrono::system_clock::now());
            pause(ra.value_or(1s)); // no usable Retry-After: a second, as most servers would say
        }
        auto policies = ratelimit::parse_policy_field(joined(res, "RateLimit-Policy"));
        auto limits = ratelimit::parse_limit_field(joined(res, "RateLimit"));
        if (controller.on_response(clock_type::now(), policies, limits, status == 429))
            bucket.set_rate(sluice::rate::per_second(controller.rate()));
    }

    asio::awaitable<void> worker()
    {
        examples::http_connection conn(io.get_executor(), {url.address, url.port}, url.host_field);
        const auto timeout = std::chrono::milliseconds(opts.timeout_ms);
        while (!stopping) {
            if (paused()) { // pause() has set the gate to paused_until
                co_await gate.async_wait(asio::as_tuple(asio::use_awaitable));
                continue;
            }
            auto [ec] = co_await bucket.async_acquire(1, sluice::wait_forever, asio::as_tuple(asio::use_awaitable));
            if (ec) break; // closed: stopping
            if (paused()) continue; // a 429 arrived while this worker waited: forfeit the permit
            if (!claim()) break;
            on_result(co_await conn.get(url.target, timeout));
        }
        conn.close();
        if (--live_workers == 0) {
            stop();
            ticker.cancel();
            deadline.cancel();
            signals.cancel();
        }
    }

    void progress(bool final_line)
    {
        bool tty = ::isatty(STDERR_FILENO);
        if (opts.quiet || (final_line && !tty)) return; // a final line only ends the live one
        double t = std::chrono::duration<double>(clock_type::now() - start).count();
        std::fprintf(stderr, "%s[%5.1fs] sent %llu  200: %llu  429: %llu  last second %llu/s  limiter %.1f/s%s%s",
                     tty ? "\r" : "", t, static_cast<unsigned long long>(sent),
                     static_cast<unsigned long long>(by_status[200]), static_cast<unsigned long long>(by_status[429]),
                     static_cast<unsigned long long>(sent - last_tick_sent), bucket.get_rate().per_second(),
                     paused() ? "  (paused: Retry-After)" : "", tty && !final_line ? "   " : "\n");
        last_tick_sent = sent;
    }

    asio::awaitable<void> tick()
    {
        for (auto next = start + 1s;; next += 1s) {
            ticker.expires_at(next);
            auto [ec] = co_await ticker.async_wait(asio::as_tuple(asio::use_awaitable));
            if (ec || stopping) break;
            progress(false);
        }
    }
};

} // namespace

int main(int argc, char** argv)
{
    options o;
    std::vector<std::string> args(argv + 1, argv + argc);
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        auto value = [&]() -> std::optional<std::string> {
            if (i + 1 >= args.size()) {
                std::fprintf(stderr, "api_client: %s needs a value\n", a.c_str());
                return std::nullopt;
            }
            return args[++i];
        };
        auto number = [&](auto& out) {
            auto v = value();
            if (!v) return false;
            if (!to_number(*v, out)) {
                std::fprintf(stderr, "api_client: %s: '%s' is not a valid number\n", a.c_str(), v->c_str());
                return false;
            }
            return true;
        };
        auto text = [&](std::string& out) {
            auto v = value();
            if (v) out = *v;
            return v.has_value();
        };
        bool ok = true;
        if (a == "--help" || a == "-h") {
            usage(stdout);
            return 0;
        } else if (a == "--url") ok = text(o.url);
        else if (a == "--rate") ok = text(o.rate);
        else if (a == "--burst") ok = number(o.burst);
        else if (a == "--requests") ok = number(o.requests);
        else if (a == "--seconds") ok = number(o.seconds);
        else if (a == "--concurrency") ok = number(o.concurrency);
        else if (a == "--min-rate") ok = text(o.min_rate);
        else if (a == "--max-rate") ok = text(o.max_rate);
        else if (a == "--no-adapt") o.adapt = false;
        else if (a == "--timeout-ms") ok = number(o.timeout_ms);
        else if (a == "--quiet") o.quiet = true;
        else if (a == "--spawn-server") o.spawn = true;
        else if (a == "--server-bin") ok = text(o.server_bin);
        else if (a == "--server-rate") ok = text(o.server_rate);
        else if (a == "--server-burst") ok = text(o.server_burst);
        else if (a == "--redis") ok = text(o.redis);
        else {
            std::fprintf(stderr, "api_client: unknown option '%s'\n", a.c_str());
            usage(stderr);
            return 2;
        }
        if (!ok) return 2;
    }

    // ---- Shared quota across processes: the place for the Redis backend. ----
    // With the Redis backend the client's bucket would live in Redis, keyed by the API's
    // quota, so that several api_client processes pace themselves together; the adaptive
    // controller would then set the shared bucket's rate.
    if (!o.redis.empty()) {
        std::fprintf(stderr, "api_client: --redis %s: not built with Redis support yet (the Redis backend that lets "
                             "several processes share one quota is not part of this build)\n",
                     o.redis.c_str());
        return 2;
    }

    if (o.burst == 0 || o.concurrency == 0 || o.seconds < 0 || o.timeout_ms == 0) {
        std::fprintf(stderr, "api_client: --burst, --concurrency and --timeout-ms must be positive\n");
        return 2;
    }
    if (o.requests == 0 && o.seconds == 0) o.requests = 100;
    auto initial = rate_arg("--rate", o.rate);
    auto floor = rate_arg("--min-rate", o.min_rate);
    if (!initial || !floor) return 2;
    double ceiling = std::min(initial->per_second() * 10, 1e9); // 1e9/s: the finest sluice::rate
    if (!o.max_rate.empty()) {
        auto m = rate_arg("--max-rate", o.max_rate);
        if (!m) return 2;
        ceiling = m->per_second();
    }
    if (floor->per_second() > ceiling) {
        std::fprintf(stderr, "api_client: --min-rate is above --max-rate\n");
        return 2;
    }

    std::unique_ptr<examples::spawned_server> server;
    std::string why;
    if (o.spawn) {
        std::string bin = o.server_bin.empty() ? examples::server_next_to_self() : o.server_bin;
        server = examples::spawned_server::start(bin, {"--rate", o.server_rate, "--burst", o.server_burst}, why);
        if (!server) {
            std::fprintf(stderr, "api_client: --spawn-server: %s\n", why.c_str());
            return 1;
        }
        std::string path = o.url.empty() ? "/api/items" : o.url;
        if (path.front() != '/') {
            std::fprintf(stderr, "api_client: with --spawn-server, --url is a path such as /api/items\n");
            return 2;
        }
        o.url = "http://127.0.0.1:" + std::to_string(server->port()) + path;
        std::fprintf(stderr, "api_client: started %s (pid %d) on port %u with --rate %s --burst %s\n", bin.c_str(),
                     static_cast<int>(server->pid()), server->port(), o.server_rate.c_str(), o.server_burst.c_str());
    }
    if (o.url.empty()) {
        std::fprintf(stderr, "api_client: --url is required (or --spawn-server)\n");
        usage(stderr);
        return 2;
    }
    auto url = examples::parse_loopback_url(o.url, why);
    if (!url) {
        std::fprintf(stderr, "api_client: --url %s: %s\n", o.url.c_str(), why.c_str());
        return 2;
    }

    asio::io_context io;
    client c(io, o, *initial, floor->per_second(), ceiling);
    c.url = *url;
    c.live_workers = o.concurrency;
    for (unsigned i = 0; i < o.concurrency; ++i) asio::co_spawn(io, c.worker(), asio::detached);
    asio::co_spawn(io, c.tick(), asio::detached);
    if (o.seconds > 0) {
        c.deadline.expires_after(std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(o.seconds)));
        c.deadline.async_wait([&c](boost::system::error_code ec) {
            if (!ec) c.stop();
        });
    }
    c.signals.async_wait([&c](boost::system::error_code ec, int) {
        if (!ec) c.stop();
    });
    io.run();
    c.progress(true);

    double elapsed = std::chrono::duration<double>(clock_type::now() - c.start).count();
    auto count = [](std::uint64_t v) { return static_cast<unsigned long long>(v); };
    std::uint64_t error_total = 0;
    for (auto& [k, v] : c.errors) error_total += v;
    std::printf("sent: %llu\n", count(c.sent));
    std::printf("status 200: %llu\n", count(c.by_status[200]));
    std::printf("status 429: %llu\n", count(c.by_status[429]));
    for (auto& [status, n] : c.by_status)
        if (status != 200 && status != 429) std::printf("status %u: %llu\n", status, count(n));
    std::printf("errors: %llu", count(error_total));
    for (auto& [kind, n] : c.errors) std::printf(" %s=%llu", kind.c_str(), count(n));
    std::printf("\nelapsed: %.2f s\n", elapsed);
    std::printf("achieved rate: %.1f/s (200s: %.1f/s)\n", static_cast<double>(c.sent) / elapsed,
                static_cast<double>(c.by_status[200]) / elapsed);
    std::printf("adaptations: %llu (final limiter rate %.1f/s, pauses for Retry-After: %llu)\n",
                count(c.controller.adaptations()), c.bucket.get_rate().per_second(), count(c.pauses));
    if (server) {
        int status = server->stop();
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            std::fprintf(stderr, "api_client: note: the server exited with status %d\n", status);
    }
    return 0;
}
