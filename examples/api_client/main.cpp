// api_client: calls a quota'd HTTP API no faster than the API allows, learning the
// allowance from the API itself.
//
// A sluice::token_bucket paces `--concurrency` workers, each on its own keep-alive
// connection, starting at `--rate` and never above `--max-rate` (by default `--rate`
// itself: without being told it may, the client never goes faster than asked). Its rate
// follows the server: RateLimit / RateLimit-Policy fields
// (draft-ietf-httpapi-ratelimit-headers-11) when it sends them, through the library's
// sluice::adaptive_rate_controller; otherwise what the server admits between its refusals
// (429, 503), through sluice::rate_learner, which measures the limit whatever the server's
// burst and settles just under it instead of overshooting it again and again. A Retry-After
// bounds when the refused request could be retried; it pauses every worker only when the
// server refuses everything (the learner's block), not on each refusal: a server that
// admits others meanwhile is metering a rate, and the pace answers it.
//
// With `--redis HOST:PORT` several api_client processes share one quota of `--rate`: each
// request also takes a permit of a sluice::redis::token_bucket on a key every process
// derives from the API's host:port (or `--redis-key`).
//
//   api_client --url http://127.0.0.1:8080/api/items --rate 100/s --seconds 10
//   api_client --spawn-server --server-rate 20/s --server-burst 10 --rate 100/s --seconds 10
//   api_client --url http://127.0.0.1:8080/api/items --redis 127.0.0.1:6379 --rate 40/s --seconds 10

#include "../common/flags.hpp"
#include "../common/http_connection.hpp"
#include "../common/loopback_url.hpp"
#include "../common/spawn_server.hpp"
#include <sluice/adaptive_rate_controller.hpp>
#include <sluice/http/ratelimit_fields.hpp>
#include <sluice/http/retry_after.hpp>
#include <sluice/rate_learner.hpp>
#include <sluice/token_bucket.hpp>

#if SLUICE_EXAMPLES_REDIS
#include "../common/spawn_redis.hpp"

#include <sluice/redis/connection.hpp>
#include <sluice/redis/token_bucket.hpp>
#endif

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
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
    std::string max_rate; // default: rate
    bool adapt = true;
    unsigned timeout_ms = 10000;
    bool quiet = false;
    bool spawn = false;
    std::string server_bin;
    std::string server_rate = "20/s";
    std::string server_burst = "10";
    std::string redis;
    std::string redis_key;
    bool spawn_redis = false;
};

void usage(std::FILE* to)
{
    std::fputs(
        "usage: api_client --url http://127.0.0.1:PORT/api/... [options]\n"
        "       api_client --spawn-server [--url /api/...] [options]\n"
        "  --rate TEXT          the pace it starts at, e.g. 100/s (default 100/s)\n"
        "  --burst N            burst of the client's own bucket (default 1: evenly paced)\n"
        "  --requests N         stop after N requests (default 100 unless --seconds)\n"
        "  --seconds S          stop after S seconds\n"
        "  --concurrency C      workers, each with one keep-alive connection (default 4)\n"
        "  --min-rate TEXT      floor of the adapted rate (default 1/s)\n"
        "  --max-rate TEXT      ceiling of the adapted rate (default: --rate; above it only if given)\n"
        "  --no-adapt           a fixed pace: ignore RateLimit, Retry-After and refusals (a baseline)\n"
        "  --timeout-ms N       per request (default 10000)\n"
        "  --quiet              no progress line\n"
        "  --spawn-server       start the example server on a free loopback port first\n"
        "  --server-bin PATH    (default: 'server' next to this executable)\n"
        "  --server-rate TEXT   its per-client rate (default 20/s)\n"
        "  --server-burst N     its per-client burst (default 10)\n"
        "  --redis HOST:PORT    share the quota --rate (burst --burst) with every api_client\n"
        "                       using the same Redis (loopback) and key\n"
        "  --redis-key KEY      the shared quota's key (default: api_client:HOST:PORT of the URL)\n"
        "  --spawn-redis        start a redis-server on a free loopback port (a demo of --redis)\n"
        "A rate is a count per unit of time: 100/s, 600/min, 10/250ms.\n"
        "exit code: 0 some requests succeeded (2xx); 1 none did (every request failed: errors,\n"
        "           refusals or error statuses), or the shared quota failed; 2 bad usage\n",
        to);
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
    client(asio::io_context& io, const options& o, sluice::rate initial, sluice::rate floor, sluice::rate ceiling)
        : io(io), opts(o), limiter(io, initial, o.burst), learner(learner_options(initial, floor, ceiling)),
          fields(fields_options(initial, floor, ceiling)), applied(initial.per_second()), gate(io), ticker(io),
          deadline(io), signals(io, SIGINT, SIGTERM)
    {
    }

    static sluice::rate_learner_options learner_options(sluice::rate initial, sluice::rate floor, sluice::rate ceiling)
    {
        sluice::rate_learner_options l;
        l.initial = initial;
        l.floor = floor;
        l.ceiling = ceiling;
        l.max_pause = 5min;
        return l;
    }

    static sluice::adaptive_rate_options fields_options(sluice::rate initial, sluice::rate floor, sluice::rate ceiling)
    {
        sluice::adaptive_rate_options a;
        a.initial = initial;
        a.floor = floor;
        a.ceiling = ceiling;
        return a;
    }

    asio::io_context& io;
    const options& opts;
    examples::loopback_url url;
    sluice::token_bucket<> limiter;            // the pace, --burst
    sluice::rate_learner learner;              // the pace, from refusals
    sluice::adaptive_rate_controller fields;   // the pace, from RateLimit fields
    std::uint64_t fields_seen = 0;
    double applied;                            // the limiter's rate
    // A server refusing everything (the learner's block) pauses every worker: a gate in
    // front of the bucket. A permit admitted while the pause began is forfeited, and when the
    // gate opens the workers leave one by one at the pace, not in a herd.
    clock_type::time_point paused_until{};
    asio::steady_timer gate;
    std::uint64_t retry_after_sent = 0, retry_after_pauses = 0, retry_after_malformed = 0;
    clock_type::time_point start = clock_type::now();
    std::optional<sluice::http::quota_policy> server_policy; // the last one the server sent
    asio::steady_timer ticker;
    asio::steady_timer deadline;
    asio::signal_set signals;

#if SLUICE_EXAMPLES_REDIS
    // --redis: the quota every process shares. The adaptation moves `limiter`, a local
    // gate in front of it: a request takes a permit of each, so the processes together
    // never exceed the shared rate, and each also stays within what the server's RateLimit
    // fields tell it (the server sees all of them as one client, so each one's controller
    // reads the same shared fill and backs off with the others). When the server announces
    // a quota (RateLimit-Policy q over w seconds) below the shared rate, the process that
    // read it lowers the shared key's rate to it with async_set_rate: the configuration
    // lives with the key, so every process follows on its next request.
    std::unique_ptr<sluice::redis::connection> redis;
    std::unique_ptr<sluice::redis::token_bucket<sluice::redis::connection>> shared;
    std::string shared_key;
    bool redis_failed = false;
    std::int64_t shared_interval_ns = 0;   // the shared rate this process set or started with
    std::uint64_t shared_rate_changes = 0;
#endif

    bool stopping = false;
    unsigned live_workers = 0;
    std::uint64_t adaptations = 0;
    std::uint64_t sent = 0, completed = 0, last_tick_sent = 0;
    std::map<unsigned, std::uint64_t> by_status;
    std::map<std::string, std::uint64_t> errors;

    void stop()
    {
        if (stopping) return;
        stopping = true;
        limiter.close(); // workers waiting for a permit leave with error::closed
        gate.cancel();   // and those waiting out a pause see `stopping`
#if SLUICE_EXAMPLES_REDIS
        if (shared) shared->close(); // reserved slots go back to Redis where possible
#endif
    }

    // Once no worker is left: let io.run() return.
    void finish()
    {
        stop();
        ticker.cancel();
        deadline.cancel();
        signals.cancel();
#if SLUICE_EXAMPLES_REDIS
        if (redis) redis->close(); // no more reconnection timers
#endif
    }

    // Waits (bounded) for the Redis connection, then starts the workers.
    asio::awaitable<void> run()
    {
#if SLUICE_EXAMPLES_REDIS
        if (redis) {
            // The connection comes up in the background and does not queue commands
            // before that: a worker's first acquire would go to the failure policy.
            asio::steady_timer t(io);
            for (auto until = clock_type::now() + 3s; !redis->connected() && !stopping;) {
                if (clock_type::now() > until) {
                    std::fprintf(stderr, "api_client: --redis %s: no connection within 3 s\n", opts.redis.c_str());
                    redis_failed = true;
                    finish();
                    co_return;
                }
                t.expires_after(10ms);
                co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
            }
        }
#endif
        live_workers = opts.concurrency;
        for (unsigned i = 0; i < opts.concurrency; ++i) asio::co_spawn(io, worker(), asio::detached);
        asio::co_spawn(io, tick(), asio::detached);
        co_return; // a coroutine also when built without Redis
    }

    bool claim()
    {
        if (stopping) return false;
        if (opts.requests && sent >= opts.requests) return false;
        // The last one: the workers still waiting for a permit need none.
        if (++sent == opts.requests) stop();
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

    static std::chrono::nanoseconds steady_ns(clock_type::time_point t)
    {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch());
    }

    bool paused() const { return clock_type::now() < paused_until; }

    // Waits while a Retry-After pause lasts.
    asio::awaitable<void> wait_out_pause()
    {
        while (paused() && !stopping) {
            // The workers share one timer; only the first to see a new end moves it (moving it
            // cancels the waits of the others, which would then move it back).
            if (gate.expiry() != paused_until) gate.expires_at(paused_until);
            co_await gate.async_wait(asio::as_tuple(asio::use_awaitable));
        }
    }

    // The pace the learner (or the RateLimit fields) chose, given to the bucket when it moved
    // by more than half a percent.
    void apply_pace(double r)
    {
        if (std::abs(r - applied) <= 0.005 * applied) return;
        applied = r;
        ++adaptations;
        limiter.set_rate(sluice::rate::per_second(r));
    }

    void on_result(const examples::http_result& r, const sluice::rate_learner::ticket& sent)
    {
        ++completed;
        using outcome = sluice::rate_learner::outcome;
        if (r.fail != examples::failure::none) {
            ++errors[examples::to_string(r.fail)];
            if (opts.adapt) learner.on_answer(steady_ns(clock_type::now()), sent, {outcome::failed});
            return;
        }
        const auto& res = r.response;
        unsigned status = res.result_int();
        ++by_status[status];
        if (!opts.adapt) return;
        const bool refused = status == 429 || status == 503;
        const auto policy = joined(res, "RateLimit-Policy");
        if (auto p = sluice::http::parse_ratelimit_policy(policy); p && !p->empty()) {
            server_policy = p->front();
#if SLUICE_EXAMPLES_REDIS
            adopt_server_quota(*server_policy);
#endif
        }
        const auto now = clock_type::now();
        std::string_view retry_after;
        if (auto f = res.find(http::field::retry_after); f != res.end())
            retry_after = std::string_view(f->value().data(), f->value().size());
        std::optional<std::chrono::nanoseconds> delay;
        if (refused && !retry_after.empty()) {
            ++retry_after_sent;
            const auto wall = std::chrono::system_clock::now();
            if (auto ra = sluice::http::parse_retry_after(retry_after, wall))
                delay = ra->delay_ns_from(wall);
            else
                ++retry_after_malformed;   // ignored: the pace answers the refusal
        }
        // RateLimit fields, when the server sends usable ones, set the pace (the library's
        // controller); else the learner makes it from the refusals.
        const auto limit = joined(res, "RateLimit");
        if (!policy.empty() || !limit.empty()) {
            fields.on_response(sluice::http_response{status, policy, limit, {}}, steady_ns(now),
                               std::chrono::system_clock::now());
            if (fields.stats().with_fields > fields_seen) {
                fields_seen = fields.stats().with_fields;
                learner.follow(fields.exact_rate());
                apply_pace(learner.rate());
                return;
            }
        }
        auto advice = learner.on_answer(steady_ns(now), sent, {refused ? outcome::refused : outcome::admitted, delay});
        if (advice.paused) {
            // The server refuses everything: every worker waits (its Retry-After, or a backoff).
            auto until = clock_type::time_point(std::chrono::duration_cast<clock_type::duration>(learner.paused_until()));
            if (until > paused_until) {
                paused_until = until;
                ++retry_after_pauses;
            }
        }
        if (advice.rate_changed) apply_pace(learner.rate());
    }

#if SLUICE_EXAMPLES_REDIS
    // The server's quota, fleet-wide: never faster than it announces.
    void adopt_server_quota(const sluice::http::quota_policy& p)
    {
        if (!shared || p.quota == 0) return;
        auto announced = sluice::rate::per(p.quota, std::chrono::seconds(p.window.value_or(1)));
        if (announced.interval().count() <= shared_interval_ns) return;
        shared_interval_ns = announced.interval().count();
        ++shared_rate_changes;
        shared->async_set_rate(shared_key, announced, [this](boost::system::error_code ec) {
            if (ec && ec != sluice::error::closed)
                std::fprintf(stderr, "api_client: shared quota: set_rate: %s\n", ec.message().c_str());
        });
    }
#endif

    asio::awaitable<void> worker()
    {
        examples::http_connection conn(io.get_executor(), {url.address, url.port}, url.host_field);
        const auto timeout = std::chrono::milliseconds(opts.timeout_ms);
        while (!stopping) {
            co_await wait_out_pause();
            if (stopping) break;
            if (!co_await limiter.acquire()) break; // closed: stopping
#if SLUICE_EXAMPLES_REDIS
            if (shared) {
                auto [sec] = co_await shared->async_acquire(shared_key, 1, sluice::wait_forever,
                                                            asio::as_tuple(asio::use_awaitable));
                if (sec) {
                    // closed: stopping. Anything else (an error reply at the key, say)
                    // would repeat for every request: report it and stop.
                    if (sec != sluice::error::closed) {
                        std::fprintf(stderr, "api_client: shared quota: %s\n", sec.message().c_str());
                        redis_failed = true;
                        stop();
                    }
                    break;
                }
            }
#endif
            if (paused()) continue; // a Retry-After arrived while this worker waited: forfeit the permit
            if (!claim()) break;
            const auto sent = learner.on_sent(steady_ns(clock_type::now()));
            on_result(co_await conn.get(url.target, timeout), sent);
        }
        conn.close();
        if (--live_workers == 0) finish();
    }

    void progress(bool final_line)
    {
        bool tty = ::isatty(STDERR_FILENO);
        if (opts.quiet || (final_line && !tty)) return; // a final line only ends the live one
        double t = std::chrono::duration<double>(clock_type::now() - start).count();
        std::string pause;
        if (paused())
            pause = "  (paused " +
                    std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(paused_until - clock_type::now()).count()) +
                    " ms more: the server refuses everything)";
        std::fprintf(stderr, "%s[%5.1fs] sent %llu  200: %llu  429: %llu  last second %llu/s  pace %.1f/s%s%s",
                     tty ? "\r" : "", t, static_cast<unsigned long long>(sent),
                     static_cast<unsigned long long>(by_status[200]), static_cast<unsigned long long>(by_status[429]),
                     static_cast<unsigned long long>(sent - last_tick_sent), applied, pause.c_str(),
                     tty && !final_line ? "   " : "\n");
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
    examples::flag_reader f("api_client", argc, argv);
    while (f.next()) {
        bool ok = true;
        if (f.help()) {
            usage(stdout);
            return 0;
        } else if (f.is("--url")) ok = f.text(o.url);
        else if (f.is("--rate")) ok = f.text(o.rate);
        else if (f.is("--burst")) ok = f.number(o.burst);
        else if (f.is("--requests")) ok = f.number(o.requests);
        else if (f.is("--seconds")) ok = f.number(o.seconds);
        else if (f.is("--concurrency")) ok = f.number(o.concurrency);
        else if (f.is("--min-rate")) ok = f.text(o.min_rate);
        else if (f.is("--max-rate")) ok = f.text(o.max_rate);
        else if (f.is("--no-adapt")) o.adapt = false;
        else if (f.is("--timeout-ms")) ok = f.number(o.timeout_ms);
        else if (f.is("--quiet")) o.quiet = true;
        else if (f.is("--spawn-server")) o.spawn = true;
        else if (f.is("--server-bin")) ok = f.text(o.server_bin);
        else if (f.is("--server-rate")) ok = f.text(o.server_rate);
        else if (f.is("--server-burst")) ok = f.text(o.server_burst);
        else if (f.is("--redis")) ok = f.text(o.redis);
        else if (f.is("--redis-key")) ok = f.text(o.redis_key);
        else if (f.is("--spawn-redis")) o.spawn_redis = true;
        else {
            f.unknown();
            usage(stderr);
            return 2;
        }
        if (!ok) return 2;
    }

#if !SLUICE_EXAMPLES_REDIS
    if (!o.redis.empty() || o.spawn_redis) {
        std::fprintf(stderr, "api_client: --redis/--spawn-redis: not built with Redis support (sluice_redis needs "
                             "hiredis: apt-get install libhiredis-dev, then reconfigure with -Dredis=enabled)\n");
        return 2;
    }
#endif
    if (o.spawn_redis && !o.redis.empty()) {
        std::fprintf(stderr, "api_client: --spawn-redis and --redis exclude each other\n");
        return 2;
    }
    if (!o.redis_key.empty() && o.redis.empty() && !o.spawn_redis) {
        std::fprintf(stderr, "api_client: --redis-key needs --redis or --spawn-redis\n");
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
    // Never faster than asked (--rate) unless told how much faster it may go.
    double ceiling = initial->per_second();
    if (!o.max_rate.empty()) {
        auto m = rate_arg("--max-rate", o.max_rate);
        if (!m) return 2;
        ceiling = m->per_second();
    }
    if (floor->per_second() > ceiling) {
        std::fprintf(stderr, "api_client: --min-rate is above --max-rate\n");
        return 2;
    }
    if (initial->per_second() < floor->per_second() || initial->per_second() > ceiling) {
        std::fprintf(stderr, "api_client: --rate must lie within [--min-rate, --max-rate]\n");
        return 2;
    }

    std::unique_ptr<examples::spawned_server> server;
    if (o.spawn) {
        int rc = 0;
        server = examples::spawn_server_for("api_client", o.server_bin,
                                            {"--rate", o.server_rate, "--burst", o.server_burst}, o.url, rc);
        if (!server) return rc;
    }
    auto url = examples::client_url("api_client", o.url);
    if (!url) return 2;

    asio::io_context io;
    client c(io, o, *initial, *floor, sluice::rate::per_second(ceiling));
    c.url = *url;
#if SLUICE_EXAMPLES_REDIS
    std::unique_ptr<examples::spawned_redis> redis_server;
    std::string why;
    if (o.spawn_redis) {
        redis_server = examples::spawned_redis::start(why);
        if (!redis_server) {
            std::fprintf(stderr, "api_client: --spawn-redis: %s\n", why.c_str());
            return 1;
        }
        o.redis = "127.0.0.1:" + std::to_string(redis_server->port());
        std::fprintf(stderr, "api_client: started redis-server (pid %d) on %s\n", static_cast<int>(redis_server->pid()),
                     o.redis.c_str());
    }
    if (!o.redis.empty()) {
        examples::loopback_url where;
        if (!examples::parse_loopback_endpoint(o.redis, where, why)) {
            std::fprintf(stderr, "api_client: --redis %s: %s\n", o.redis.c_str(), why.c_str());
            return 2;
        }
        sluice::redis::connection_config cfg;
        cfg.host = where.address.to_string();
        cfg.port = where.port;
        c.redis = std::make_unique<sluice::redis::connection>(io, cfg);
        // While Redis is away each process keeps to the whole quota locally: a lapse
        // may admit up to (processes) x --rate, but the client keeps working.
        c.shared = std::make_unique<sluice::redis::token_bucket<sluice::redis::connection>>(*c.redis, *initial,
                                                                                            o.burst);
        c.shared_key = o.redis_key.empty() ? "api_client:" + url->host_field : o.redis_key;
        c.shared_interval_ns = initial->interval().count();
    }
#endif
    asio::co_spawn(io, c.run(), asio::detached);
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
    const auto& st = c.fields.stats();
    const auto& l = c.learner;
    auto one = [](double v) {
        char b[32];
        std::snprintf(b, sizeof b, "%.1f", v);
        return std::string(b);
    };
    std::string how = !o.adapt                 ? "fixed: --no-adapt"
                      : c.fields_seen > 0      ? "following the server's RateLimit fields"
                      : l.slow_start()         ? "never refused"
                      : l.limit_low() > 0      ? (l.measuring() ? "measuring the server's limit: " : "the server's limit ") +
                                                one(l.limit_low()) +
                                                (std::isfinite(l.limit_high()) ? "-" + one(l.limit_high()) : "+") +
                                                "/s learnt from " + std::to_string(l.stats().refused) + " refusals" +
                                                (l.burst() >= 1 ? ", its burst " + one(l.burst()) + " at least" : "")
                                               : "refused at " + one(l.limit_high()) + "/s";
    std::printf("adaptations: %llu (final pace %.1f/s, %s)\n", count(c.adaptations), c.applied, how.c_str());
    // A pause holds every worker: only when the server refused everything for a while.
    std::printf("Retry-After: %llu pauses, for the %llu refusals that carried one (%llu malformed, ignored); "
                "malformed RateLimit fields ignored: %llu\n",
                count(c.retry_after_pauses), count(c.retry_after_sent), count(c.retry_after_malformed),
                count(st.malformed_fields));
    if (c.server_policy) {
        const auto& p = *c.server_policy;
        auto burst = sluice::http::uint_extension(p.extensions, "sluice-burst");
        std::printf("server policy: \"%s\" q=%llu", p.name.c_str(), count(p.quota));
        if (p.window)
            std::printf(" w=%llu (%.3f/s)", count(*p.window),
                        static_cast<double>(p.quota) / static_cast<double>(*p.window));
        if (burst) std::printf(" burst=%llu", count(*burst));
        std::printf("\n");
    }
    int rc = 0;
    std::uint64_t succeeded = 0;
    for (auto& [status, n] : c.by_status)
        if (status / 100 == 2) succeeded += n;
    if (c.sent > 0 && succeeded == 0) {
        std::fprintf(stderr, "api_client: every request failed: %llu errors, %llu answers, none of them 2xx\n",
                     count(error_total), count(c.completed - error_total));
        rc = 1;
    }
#if SLUICE_EXAMPLES_REDIS
    if (c.shared) {
        auto st = c.shared->stats();
        std::printf("shared quota: %s (burst %llu) at redis %s key %s; decisions without Redis: %llu\n",
                    o.rate.c_str(), count(o.burst), o.redis.c_str(), c.shared->redis_key(c.shared_key).c_str(),
                    count(st.backend.fallback_decisions));
        if (c.shared_rate_changes > 0)
            std::printf("shared rate lowered to the server's quota: %.3f/s (%llu change(s) by this process)\n",
                        1e9 / static_cast<double>(c.shared_interval_ns), count(c.shared_rate_changes));
    }
    c.shared.reset(); // before its connection
    c.redis.reset();
    if (c.redis_failed) rc = 1;
#endif
    if (server) {
        int status = server->stop();
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            std::fprintf(stderr, "api_client: note: the server exited with status %d\n", status);
    }
    return rc;
}
