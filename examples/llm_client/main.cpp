// llm_client: calls an OpenAI-compatible chat-completions endpoint as fast as the
// provider's two quotas allow, requests and tokens per minute at once, without being told
// either: it reads them from what the provider announces on every answer.
//
// Each call is estimated before it is sent (the prompt's tokens plus max_tokens: what the
// provider counts at admission) and takes 1 permit of a requests bucket and that estimate
// of a tokens bucket; when it completes, the tokens are settled to what the answer's usage
// says it cost (prompt_tokens + completion_tokens), giving the unused output back. The
// buckets mirror the provider's quotas (steering.hpp): their size and refill rate come from
// x-ratelimit-* (OpenAI), anthropic-ratelimit-* (Anthropic) or RateLimit / RateLimit-Policy
// (IETF), read by sluice::http::read_provider_limits. Until both quotas are known one call
// goes out at a time. A refusal (429) makes the worker that got it wait its Retry-After;
// its reservation stands (the provider says it holds less than this side thought).
//
// With `--redis HOST:PORT` several llm_client processes share the provider's quotas: the
// buckets are sluice::redis::token_bucket keys derived from the provider's host:port, set to
// what each process reads from the provider; a call's tokens are settled there too (one
// script call), so that the shared bucket holds what the provider counted.
//
//   llm_client --url http://127.0.0.1:8080 --seconds 30
//   llm_client --url http://127.0.0.1:8080 --requests 200 --max-tokens 256 --redis 127.0.0.1:6379

#include "../common/flags.hpp"
#include "../common/http_connection.hpp"
#include "../common/loopback_url.hpp"
#include "chat.hpp"
#include "steering.hpp"

#include <sluice/http/provider_limits.hpp>
#include <sluice/token_bucket.hpp>

#if SLUICE_EXAMPLES_REDIS
#include <sluice/redis/connection.hpp>
#include <sluice/redis/token_bucket.hpp>
#endif

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json/src.hpp>

#include <chrono>
#include <cstdio>
#include <list>
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
    std::uint64_t requests = 0;
    double seconds = 0;
    unsigned concurrency = 4;
    std::uint64_t max_tokens = 100;
    std::uint64_t prompt_bytes = 400;
    std::string model = "sluice-example";
    unsigned timeout_ms = 30000;
    std::string redis;
};

void usage(std::FILE* to)
{
    std::fputs(
        "usage: llm_client --url http://127.0.0.1:PORT[/v1/chat/completions] [options]\n"
        "  --requests N         stop after N calls (default 100 unless --seconds)\n"
        "  --seconds S          stop after S seconds\n"
        "  --concurrency C      calls in flight at most, each on its own keep-alive connection (default 4)\n"
        "  --max-tokens M       max_tokens of each call (default 100)\n"
        "  --prompt-bytes B     bytes of each call's prompt (default 400)\n"
        "  --model NAME         the model field (default sluice-example)\n"
        "  --timeout-ms N       per call (default 30000)\n"
        "  --redis HOST:PORT    share the provider's quotas with every llm_client using the same Redis\n"
        "                       (loopback) for the same provider\n"
        "The quotas are read from the provider's answers (x-ratelimit-*, anthropic-ratelimit-*, RateLimit).\n"
        "last line: llm_client: N calls, R refused, T tokens in S s\n"
        "exit code: 0 some call succeeded; 1 none did, or the shared quota failed; 2 bad usage\n",
        to);
}

constexpr std::uint64_t body_limit = 1 << 20;   // of an answer: a completion of a few MB is not one of ours

struct client {
    client(asio::io_context& io, const options& o) : io(io), opts(o), ready(io), deadline(io), signals(io, SIGINT, SIGTERM)
    {
        ready.expires_at(clock_type::time_point::max());
        prompt.assign(o.prompt_bytes, 'x');
        for (std::size_t i = 0; i < prompt.size(); i += 5) prompt[i] = ' ';
    }

    asio::io_context& io;
    const options& opts;
    examples::loopback_url url;
    std::string prompt;
    llm::steering steer;
    llm::token_estimator estimator;
    // The mirrors of the provider's quotas on this side, made once both are known.
    std::optional<sluice::token_bucket<>> requests_bucket, tokens_bucket;
    asio::steady_timer ready;   // workers other than the first wait here until then
    std::list<asio::steady_timer> waits;   // Retry-After waits, cancelled by stop()
    asio::steady_timer deadline;
    asio::signal_set signals;
    clock_type::time_point start = clock_type::now();

#if SLUICE_EXAMPLES_REDIS
    std::unique_ptr<sluice::redis::connection> redis;
    std::unique_ptr<sluice::redis::token_bucket<sluice::redis::connection>> shared;
    std::string requests_key, tokens_key;
    bool redis_failed = false;
#endif

    bool stopping = false;
    bool failed = false;   // something that would fail every call: said, and the run stops
    unsigned live_workers = 0;
    std::uint64_t calls = 0, succeeded = 0, refused = 0, tokens = 0, bad_answers = 0, errors = 0, waits_cut = 0;
    std::uint64_t malformed_fields = 0, settled = 0, settles_refused = 0;

    void stop()
    {
        if (stopping) return;
        stopping = true;
        if (requests_bucket) requests_bucket->close();
        if (tokens_bucket) tokens_bucket->close();
#if SLUICE_EXAMPLES_REDIS
        if (shared) shared->close();
#endif
        ready.cancel();
        for (auto& t : waits) t.cancel();
    }

    void finish()
    {
        stop();
        deadline.cancel();
        signals.cancel();
#if SLUICE_EXAMPLES_REDIS
        if (redis) redis->close();
#endif
    }

    bool shared_mode() const
    {
#if SLUICE_EXAMPLES_REDIS
        return redis != nullptr;
#else
        return false;
#endif
    }

    asio::awaitable<void> run()
    {
#if SLUICE_EXAMPLES_REDIS
        if (redis) {
            asio::steady_timer t(io);
            for (auto until = clock_type::now() + 3s; !redis->connected() && !stopping;) {
                if (clock_type::now() > until) {
                    std::fprintf(stderr, "llm_client: --redis %s: no connection within 3 s\n", opts.redis.c_str());
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
        for (unsigned i = 0; i < opts.concurrency; ++i) asio::co_spawn(io, worker(i), asio::detached);
        co_return;
    }

    bool claim()
    {
        if (stopping) return false;
        if (opts.requests && calls >= opts.requests) return false;
        if (++calls == opts.requests) stop();   // the last one: nobody else needs a permit
        return true;
    }

    void fail(const std::string& what)
    {
        std::fprintf(stderr, "llm_client: %s\n", what.c_str());
        failed = true;
        stop();
    }

    // ---- the buckets: local, or shared through Redis ---------------------------------

    // What one call holds of the tokens bucket until it is settled.
    struct token_admission {
        sluice::admission ticket;     // of the tokens bucket (local or shared)
        std::uint64_t reserved = 0;   // 0: nothing held
    };

    // Takes 1 request and `estimate` tokens; false when stopping or failed.
    asio::awaitable<bool> admit(std::uint64_t estimate, token_admission& adm)
    {
        if (estimate > steer.tokens().limit()) {
            fail("a call's estimate, " + std::to_string(estimate) + " tokens, is beyond the provider's tokens quota (" +
                 std::to_string(steer.tokens().limit()) + ")");
            co_return false;
        }
#if SLUICE_EXAMPLES_REDIS
        if (shared) {
            auto failed_with = [this](boost::system::error_code ec) {
                if (ec != sluice::error::closed) {
                    redis_failed = true;
                    fail("shared quota: " + ec.message());
                }
            };
            auto [ec] = co_await shared->async_acquire(requests_key, 1, sluice::wait_forever,
                                                       asio::as_tuple(asio::use_awaitable));
            if (ec) {
                failed_with(ec);
                co_return false;
            }
            auto [tec, ticket] = co_await shared->async_admit(tokens_key, estimate, sluice::wait_forever,
                                                              asio::as_tuple(asio::use_awaitable));
            if (tec) {
                failed_with(tec);
                co_return false;
            }
            adm.ticket = std::move(ticket);
            adm.reserved = estimate;
            co_return true;
        }
#endif
        if (!co_await requests_bucket->acquire()) co_return false;   // closed: stopping
        auto [ec, ticket] =
            co_await tokens_bucket->async_admit(estimate, sluice::wait_forever, asio::as_tuple(asio::use_awaitable));
        if (ec) co_return false;
        adm.ticket = std::move(ticket);
        adm.reserved = estimate;
        co_return true;
    }

    // The one place a call's tokens are settled: `adm` reserved the estimate, the provider
    // counted `actual` (its usage: prompt and completion).
    void settle_tokens(token_admission& adm, std::uint64_t actual)
    {
#if SLUICE_EXAMPLES_REDIS
        if (shared && adm.ticket) {
            // One script call; refused after close() (stopping), or when Redis is away:
            // then the call stays charged in full.
            shared->async_settle(std::move(adm.ticket), actual, [this](boost::system::error_code ec) {
                if (ec) ++settles_refused;
                else ++settled;
            });
            adm.reserved = 0;
            return;
        }
#endif
        if (adm.ticket) {
            // Refused only for a ticket admitted before the bucket was reconfigured (its
            // rate refined): that call stays charged in full, on the safe side.
            if (auto ec = tokens_bucket->settle(std::move(adm.ticket), actual); ec) ++settles_refused;
            else ++settled;
        }
        adm.reserved = 0;
    }

    // Applies what a response said of the quotas to the buckets.
    void steer_buckets(const llm::steering::decision& d)
    {
        if (!steer.steered()) return;
        const bool fresh = !configured;
        configured = true;
        const bool conf_r = fresh || d.requests.configure, conf_t = fresh || d.tokens.configure;
        const auto& rq = steer.requests();
        const auto& tk = steer.tokens();
        const auto r_rate = sluice::rate::per_second(rq.per_second());
        const auto t_rate = sluice::rate::per_second(tk.per_second());
#if SLUICE_EXAMPLES_REDIS
        if (redis) {
            if (!shared) shared = std::make_unique<sluice::redis::token_bucket<sluice::redis::connection>>(*redis, t_rate, tk.limit());
            auto report = [this](boost::system::error_code ec) {
                if (ec && ec != sluice::error::closed)
                    std::fprintf(stderr, "llm_client: shared quota: reconfiguring: %s\n", ec.message().c_str());
            };
            if (conf_r) {
                shared->async_set_rate(requests_key, r_rate, report);
                shared->async_set_burst(requests_key, rq.limit(), report);
            }
            if (conf_t) {
                shared->async_set_rate(tokens_key, t_rate, report);
                shared->async_set_burst(tokens_key, tk.limit(), report);
            }
            // What the provider counted already: every process takes its own share of it
            // from the shared bucket once (as much as there is).
            if (d.requests.drain) shared->async_try_acquire(requests_key, std::min(d.requests.drain, rq.limit()), [](auto, auto) {});
            if (d.tokens.drain) shared->async_try_acquire(tokens_key, std::min(d.tokens.drain, tk.limit()), [](auto, auto) {});
            if (fresh) ready.cancel();
            return;
        }
#endif
        if (fresh) {
            requests_bucket.emplace(io, r_rate, rq.limit());
            tokens_bucket.emplace(io, t_rate, tk.limit());
            if (d.requests.drain) (void)requests_bucket->try_acquire(std::min(d.requests.drain, rq.limit()));
            if (d.tokens.drain) (void)tokens_bucket->try_acquire(std::min(d.tokens.drain, tk.limit()));
            ready.cancel();
            return;
        }
        // Only what moved: a reconfigured bucket refuses to settle what it admitted before.
        if (conf_r && requests_bucket->rate() != r_rate) requests_bucket->set_rate(r_rate);
        if (conf_r && requests_bucket->burst() != rq.limit()) requests_bucket->set_burst(rq.limit());
        if (conf_t && tokens_bucket->rate() != t_rate) tokens_bucket->set_rate(t_rate);
        if (conf_t && tokens_bucket->burst() != tk.limit()) tokens_bucket->set_burst(tk.limit());
    }
    bool configured = false;

    // ---- the calls ---------------------------------------------------------------------

    asio::awaitable<void> wait_for(clock_type::duration d)
    {
        if (stopping) co_return;   // stop() cancelled the waits already
        auto& t = waits.emplace_back(io);
        auto it = std::prev(waits.end());
        t.expires_after(d);
        co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
        waits.erase(it);
    }

    asio::awaitable<void> worker(unsigned id)
    {
        examples::http_connection conn(io.get_executor(), {url.address, url.port}, url.host_field);
        const auto timeout = std::chrono::milliseconds(opts.timeout_ms);
        while (!stopping) {
            const bool steered = steer.steered();
            if (!steered && id != 0) {
                // One call at a time until the provider's quotas are known.
                co_await ready.async_wait(asio::as_tuple(asio::use_awaitable));
                continue;
            }
            const std::uint64_t estimate = estimator.estimate(prompt.size(), opts.max_tokens);
            token_admission adm;
            if (steered && !co_await admit(estimate, adm)) break;
            if (!claim()) break;   // its reservation goes unused: the run is over
            const auto sent = clock_type::now();
            auto r = co_await conn.post(url.target, llm::chat_request(opts.model, prompt, opts.max_tokens),
                                        "application/json", timeout, body_limit);
            if (auto wait = on_answer(r, adm, clock_type::now() - sent)) co_await wait_for(*wait);
        }
        conn.close();
        if (--live_workers == 0) finish();
    }

    // Counts an answer, settles its call, steers the buckets; returns how long this worker
    // waits before its next call.
    std::optional<clock_type::duration> on_answer(const examples::http_result& r, token_admission& adm,
                                                  clock_type::duration rtt)
    {
        if (r.fail != examples::failure::none) {
            // Whether the provider counted the call is unknown: it stays charged.
            if (++errors == 1)
                std::fprintf(stderr, "llm_client: a call failed (%s): %s\n", examples::to_string(r.fail),
                             r.ec.message().c_str());
            return std::chrono::duration_cast<clock_type::duration>(steer.on_failure());
        }
        const auto& res = r.response;
        std::vector<sluice::http::field_line> lines;
        for (const auto& f : res)
            lines.push_back({std::string_view(f.name_string().data(), f.name_string().size()),
                             std::string_view(f.value().data(), f.value().size())});
        const auto limits = sluice::http::read_provider_limits(lines, std::chrono::system_clock::now());
        malformed_fields += limits.malformed;
        const unsigned status = res.result_int();
        if (status == 200) {
            std::string why;
            if (auto u = llm::read_usage(res.body(), opts.max_tokens, why)) {
                ++succeeded;
                tokens += u->total();
                estimator.learn(prompt.size(), u->prompt_tokens);
                settle_tokens(adm, u->total());
            } else {
                ++bad_answers;   // charged in full: what it cost is not known
                if (bad_answers == 1) std::fprintf(stderr, "llm_client: an answer's usage is unusable: %s\n", why.c_str());
            }
        } else if (status == 429) {
            ++refused;
        } else if (++errors == 1) {
            std::fprintf(stderr, "llm_client: the provider answered %u: %.200s\n", status, res.body().c_str());
        }
        const auto d = steer.on_response(status, limits, rtt);
        steer_buckets(d);
        if (d.wait_cut) ++waits_cut;
        if (d.wait) return std::chrono::duration_cast<clock_type::duration>(*d.wait);
        return std::nullopt;
    }
};

} // namespace

int main(int argc, char** argv)
{
    options o;
    examples::flag_reader f("llm_client", argc, argv);
    while (f.next()) {
        bool ok = true;
        if (f.help()) {
            usage(stdout);
            return 0;
        } else if (f.is("--url")) ok = f.text(o.url);
        else if (f.is("--requests")) ok = f.number(o.requests);
        else if (f.is("--seconds")) ok = f.number(o.seconds);
        else if (f.is("--concurrency")) ok = f.number(o.concurrency);
        else if (f.is("--max-tokens")) ok = f.number(o.max_tokens);
        else if (f.is("--prompt-bytes")) ok = f.number(o.prompt_bytes);
        else if (f.is("--model")) ok = f.text(o.model);
        else if (f.is("--timeout-ms")) ok = f.number(o.timeout_ms);
        else if (f.is("--redis")) ok = f.text(o.redis);
        else {
            f.unknown();
            usage(stderr);
            return 2;
        }
        if (!ok) return 2;
    }
#if !SLUICE_EXAMPLES_REDIS
    if (!o.redis.empty()) {
        std::fprintf(stderr, "llm_client: --redis: not built with Redis support (sluice_redis needs hiredis: "
                             "apt-get install libhiredis-dev, then reconfigure with -Dredis=enabled)\n");
        return 2;
    }
#endif
    if (o.concurrency == 0 || o.max_tokens == 0 || o.prompt_bytes == 0 || o.timeout_ms == 0 || !(o.seconds >= 0) ||
        o.seconds > 1e6) {
        std::fprintf(stderr, "llm_client: --concurrency, --max-tokens, --prompt-bytes and --timeout-ms must be "
                             "positive, --seconds within [0, 1e6]\n");
        return 2;
    }
    if (o.max_tokens > llm::max_usage_tokens || o.prompt_bytes > (16u << 20)) {
        std::fprintf(stderr, "llm_client: --max-tokens or --prompt-bytes is beyond any provider's (16 MiB of prompt)\n");
        return 2;
    }
    if (o.requests == 0 && o.seconds == 0) o.requests = 100;
    auto url = examples::client_url("llm_client", o.url);
    if (!url) return 2;
    if (url->target == "/") url->target = "/v1/chat/completions";

    asio::io_context io;
    client c(io, o);
    c.url = *url;
#if SLUICE_EXAMPLES_REDIS
    if (!o.redis.empty()) {
        examples::loopback_url where;
        std::string why;
        if (!examples::parse_loopback_endpoint(o.redis, where, why)) {
            std::fprintf(stderr, "llm_client: --redis %s: %s\n", o.redis.c_str(), why.c_str());
            return 2;
        }
        sluice::redis::connection_config cfg;
        cfg.host = where.address.to_string();
        cfg.port = where.port;
        c.redis = std::make_unique<sluice::redis::connection>(io, cfg);
        c.requests_key = "llm_client:" + url->host_field + ":requests";
        c.tokens_key = "llm_client:" + url->host_field + ":tokens";
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

    const double elapsed = std::chrono::duration<double>(clock_type::now() - c.start).count();
    auto count = [](std::uint64_t v) { return static_cast<unsigned long long>(v); };
    auto describe = [&](const char* name, const llm::quota_mirror& q) {
        if (!q.known()) std::printf("%s quota: never announced\n", name);
        else
            std::printf("%s quota: %llu, refilled at %.3f/s (%s)\n", name, count(q.limit()), q.per_second(),
                        q.measured() ? "as announced" : "assumed per minute");
    };
    describe("requests", c.steer.requests());
    describe("tokens", c.steer.tokens());
    std::printf("succeeded: %llu  errors: %llu  unusable answers: %llu  malformed quota fields: %llu  "
                "impossible quotas ignored: %llu  Retry-After cut: %llu\n",
                count(c.succeeded), count(c.errors), count(c.bad_answers), count(c.malformed_fields),
                count(c.steer.requests().ignored() + c.steer.tokens().ignored()), count(c.waits_cut));
    std::printf("settled: %llu  not settled (admitted before a reconfiguration): %llu  prompt estimate: %.3f "
                "tokens a byte\n",
                count(c.settled), count(c.settles_refused), c.estimator.ratio());
    int rc = c.succeeded > 0 ? 0 : 1;
#if SLUICE_EXAMPLES_REDIS
    if (c.shared) {
        std::printf("shared quotas at redis %s: keys %s and %s; decisions without Redis: %llu\n", o.redis.c_str(),
                    c.shared->redis_key(c.requests_key).c_str(), c.shared->redis_key(c.tokens_key).c_str(),
                    count(c.shared->stats().backend.fallback_decisions));
    }
    c.shared.reset();   // before its connection
    c.redis.reset();
    if (c.redis_failed) rc = 1;
#endif
    std::printf("llm_client: %llu calls, %llu refused, %llu tokens in %.2f s\n", count(c.calls), count(c.refused),
                count(c.tokens), elapsed);
    return rc;
}
