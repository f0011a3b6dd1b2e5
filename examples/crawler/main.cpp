// sluice example: a polite crawler (Boost.Beast client, C++20 coroutines).
//
// Shows the limits a crawler needs, together: each host is paced by its own leaky bucket
// (a keyed<leaky_bucket<>>, --per-host-rate), requests in flight are capped per host and
// overall (concurrency_limit, --per-host-inflight / --inflight), every wait for a permit
// and every request is bounded (--timeout-ms), and a 429 or 503 with Retry-After pauses
// that host for as long as the server asked (delay-seconds or an HTTP-date); a 429 or 503
// without it, or a connection error, backs the host off exponentially with full jitter
// (--backoff-base-ms, --backoff-cap-ms), and a page is given up after --retries retries.
// --per-host-adaptive lets sluice::adaptive_concurrency find each host's in-flight cap
// (at most --per-host-inflight) from its latency and refusals; --per-host-bandwidth caps
// the bytes per second read from each host (sluice::throttled_stream). It crawls the sites
// of the example server (examples/server): links are taken from the HTML, each page is
// fetched once.
//
//     build/examples/crawler --spawn-servers 2 --per-host-rate 20/s
//     build/examples/crawler --seed http://127.0.0.1:8080/ --per-host-rate 50/s --max-pages 500
//
// --spawn-servers K starts K example servers (build/examples/server, next to this program,
// or --server-bin), each on its own port as its own "host", with --server-args passed to
// each ("{i}" in them becomes the server's index), and stops them at the end. Progress goes
// to stderr (4 times a second on a terminal, once a second otherwise); the summary to
// stdout. Hosts are IP addresses (no name resolution). Exit code 0 when the crawl finished
// with every page fetched, 3 when it finished but gave pages up, 130 when interrupted.

#include "../common/flags.hpp"
#include "../common/spawn_server.hpp"
#include "retry_policy.hpp"

#include <sluice/http/retry_after.hpp>
#include <sluice/sluice.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <unistd.h>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

struct options {
    std::vector<std::string> seeds;
    std::uint64_t spawn = 0;
    std::string server_bin;
    std::string server_args;
    std::string rate_text = "20/s";
    sluice::rate per_host_rate = sluice::rate::per_second(20);
    std::uint64_t per_host_inflight = 4;
    std::uint64_t inflight = 16;
    std::uint64_t timeout_ms = 5000;
    std::uint64_t max_pages = 0;   // 0: no limit
    std::uint64_t retries = 5;
    std::uint64_t backoff_base_ms = 200;
    std::uint64_t backoff_cap_ms = 30'000;
    std::optional<sluice::concurrency_algorithm> per_host_adaptive;
    double per_host_bandwidth = 0;   // bytes per second read from each host; 0: no cap
};

void print_usage()
{
    std::fputs(
        "usage: crawler (--seed URL... | --spawn-servers K [--server-bin PATH] [--server-args TEXT])\n"
        "               [--per-host-rate TEXT] [--per-host-inflight N] [--inflight N]\n"
        "               [--timeout-ms N] [--max-pages N] [--retries N]\n"
        "               [--backoff-base-ms N] [--backoff-cap-ms N]\n"
        "               [--per-host-adaptive aimd|vegas|gradient2] [--per-host-bandwidth BYTES/s]\n"
        "  defaults: --per-host-rate 20/s --per-host-inflight 4 --inflight 16 --timeout-ms 5000\n"
        "            --retries 5 (per page, on 429/503/errors), --max-pages 0 (no limit)\n"
        "            --backoff-base-ms 200 --backoff-cap-ms 30000 (429/503 without Retry-After\n"
        "            and connection errors: the host waits a random time up to\n"
        "            min(cap, base x 2^(k-1)) after its k-th failure in a row)\n"
        "  --per-host-adaptive   each host's in-flight cap follows its latency and refusals\n"
        "                        (sluice::adaptive_concurrency, at most --per-host-inflight)\n"
        "  --per-host-bandwidth  bytes per second read from each host, e.g. 500kB/s, 2MiB/s\n"
        "  exit code: 0 all pages fetched, 3 some given up, 130 interrupted, 1-2 errors\n",
        stderr);
}

struct url {
    std::string host;   // "127.0.0.1:8080": the key of the per-host limits
    tcp::endpoint endpoint;
    std::string target;
};

// http://IP[:PORT][/path]; no name resolution, so the host must be an IP address.
bool parse_url(std::string_view s, url& u)
{
    if (!s.starts_with("http://")) return false;
    s.remove_prefix(7);
    auto slash = s.find('/');
    std::string_view authority = s.substr(0, slash);
    u.target = slash == std::string_view::npos ? "/" : std::string(s.substr(slash));
    if (auto hash = u.target.find('#'); hash != std::string::npos) u.target.resize(hash);
    std::uint64_t port = 80;
    std::string_view ip = authority;
    if (auto colon = authority.rfind(':'); colon != std::string_view::npos && !authority.ends_with(']')) {
        ip = authority.substr(0, colon);
        if (!examples::parse_number(authority.substr(colon + 1), port) || port == 0 || port > 65535) return false;
    }
    if (ip.starts_with('[') && ip.ends_with(']')) ip = ip.substr(1, ip.size() - 2);
    boost::system::error_code ec;
    auto addr = asio::ip::make_address(ip, ec);
    if (ec) return false;
    u.endpoint = tcp::endpoint(addr, static_cast<std::uint16_t>(port));
    u.host = std::string(authority);
    return true;
}

// 500kB/s, 2MiB/s, 1MB/s, 64000B/s: k, M, G decimal; Ki, Mi, Gi binary.
bool parse_bytes_rate(std::string_view v, double& out)
{
    if (!v.ends_with("B/s")) return false;
    v.remove_suffix(3);
    double scale = 1;
    const std::pair<std::string_view, double> units[] = {{"Ki", 1024.0}, {"Mi", 1024.0 * 1024}, {"Gi", 1024.0 * 1024 * 1024},
                                                         {"k", 1e3},     {"M", 1e6},            {"G", 1e9}};
    for (auto [u, f] : units)
        if (v.ends_with(u)) {
            v.remove_suffix(u.size());
            scale = f;
            break;
        }
    std::uint64_t n = 0;
    if (!examples::parse_number(v, n) || n == 0) return false;
    out = static_cast<double>(n) * scale;
    return out >= 1024 && out <= 1e12;
}

bool parse_args(int argc, char** argv, options& o)
{
    examples::flag_reader f("crawler", argc, argv);
    while (f.next()) {
        if (f.help()) {
            print_usage();
            std::exit(0);
        }
        // Every flag takes a value.
        auto value = f.value();
        if (!value) return false;
        std::string_view a = f.flag(), v = *value;
        bool ok = true;
        if (a == "--seed") {
            url u;
            ok = parse_url(v, u);
            o.seeds.emplace_back(v);
        } else if (a == "--spawn-servers") {
            ok = examples::parse_number(v, o.spawn) && o.spawn > 0 && o.spawn <= 64;
        } else if (a == "--server-bin") {
            o.server_bin = v;
        } else if (a == "--server-args") {
            o.server_args = v;
        } else if (a == "--per-host-rate") {
            auto r = sluice::parse_rate(v);
            if (!r) {
                std::fprintf(stderr, "crawler: --per-host-rate %s: %s\n", value->c_str(), r.error().message().c_str());
                return false;
            }
            o.per_host_rate = *r;
            o.rate_text = v;
        } else if (a == "--per-host-inflight") {
            ok = examples::parse_number(v, o.per_host_inflight) && o.per_host_inflight > 0;
        } else if (a == "--inflight") {
            ok = examples::parse_number(v, o.inflight) && o.inflight > 0;
        } else if (a == "--timeout-ms") {
            ok = examples::parse_number(v, o.timeout_ms) && o.timeout_ms > 0 && o.timeout_ms <= 3'600'000;
        } else if (a == "--max-pages") {
            ok = examples::parse_number(v, o.max_pages);
        } else if (a == "--retries") {
            ok = examples::parse_number(v, o.retries) && o.retries <= 1000;
        } else if (a == "--backoff-base-ms") {
            ok = examples::parse_number(v, o.backoff_base_ms) && o.backoff_base_ms > 0 && o.backoff_base_ms <= 3'600'000;
        } else if (a == "--backoff-cap-ms") {
            ok = examples::parse_number(v, o.backoff_cap_ms) && o.backoff_cap_ms > 0 && o.backoff_cap_ms <= 3'600'000;
        } else if (a == "--per-host-adaptive") {
            o.per_host_adaptive = sluice::parse_concurrency_algorithm(v);
            ok = o.per_host_adaptive.has_value();
        } else if (a == "--per-host-bandwidth") {
            ok = parse_bytes_rate(v, o.per_host_bandwidth);
        } else {
            f.unknown();
            print_usage();
            return false;
        }
        if (!ok) {
            f.bad_value(v);
            return false;
        }
    }
    if (o.backoff_cap_ms < o.backoff_base_ms) {
        std::fprintf(stderr, "crawler: --backoff-cap-ms must not be below --backoff-base-ms\n");
        return false;
    }
    if (o.seeds.empty() == (o.spawn == 0)) {
        std::fprintf(stderr, "crawler: give either --seed URL (repeatable) or --spawn-servers K\n");
        print_usage();
        return false;
    }
    return true;
}

// ---- child servers ------------------------------------------------------------------

std::vector<std::string> split_args(const std::string& text, std::uint64_t index)
{
    std::vector<std::string> out;
    std::string cur;
    auto flush = [&] {
        if (cur.empty()) return;
        for (std::size_t p; (p = cur.find("{i}")) != std::string::npos;) cur.replace(p, 3, std::to_string(index));
        out.push_back(std::move(cur));
        cur.clear();
    };
    for (char c : text) {
        if (c == ' ' || c == '\t') flush();
        else cur += c;
    }
    flush();
    return out;
}

// ---- the crawl ----------------------------------------------------------------------

// Reads go through the host's bandwidth limit, when there is one.
struct connection {
    explicit connection(asio::any_io_executor ex) : stream(std::move(ex)) {}
    sluice::throttled_stream<beast::tcp_stream> stream;
    beast::flat_buffer buffer;
};

// The slot a fetch holds on its host: a fixed cap's, or an adaptive one's (whose permit
// also measures the request for the adaptive limit).
struct host_slot {
    sluice::concurrency_limit<>::permit fixed;
    sluice::adaptive_concurrency<>::permit adaptive;
    explicit operator bool() const noexcept { return fixed || adaptive; }
};

struct host_state {
    host_state(asio::io_context& io, std::string name, tcp::endpoint ep, const options& o)
        : name(std::move(name)), endpoint(ep), slots(io, o.per_host_inflight), wake(io), pause(io)
    {
        if (o.per_host_adaptive) {
            sluice::adaptive_concurrency_options a;
            a.algorithm = *o.per_host_adaptive;
            a.max_limit = o.per_host_inflight;
            a.initial_limit = std::min<std::uint64_t>(a.initial_limit, o.per_host_inflight);
            a.latency_threshold = std::chrono::milliseconds(o.timeout_ms) / 4;   // AIMD: a quarter of the timeout is slow
            adaptive.emplace(io, a);
        }
        if (o.per_host_bandwidth > 0) {
            // A burst of 64 KiB, or a tenth of a second at a slower rate: reads of a
            // page's body come in chunks of at most that.
            auto burst = static_cast<std::uint64_t>(std::min(65536.0, std::max(1024.0, o.per_host_bandwidth / 10)));
            bandwidth.emplace(io, sluice::rate::per_second(o.per_host_bandwidth), burst);
        }
    }

    // Waits for a slot: the adaptive limit's when there is one, else the fixed cap's.
    asio::awaitable<host_slot> acquire()
    {
        host_slot s;
        if (adaptive) s.adaptive = co_await adaptive->acquire();
        else s.fixed = co_await slots.acquire();
        co_return s;
    }

    void close()
    {
        slots.close();
        if (adaptive) adaptive->close();
        if (bandwidth) bandwidth->close();
    }

    std::string name;
    tcp::endpoint endpoint;
    std::deque<std::pair<std::string, std::uint64_t>> frontier;   // target, attempts so far
    sluice::concurrency_limit<> slots;                             // --per-host-inflight
    std::optional<sluice::adaptive_concurrency<>> adaptive;        // --per-host-adaptive
    std::optional<sluice::token_bucket<>> bandwidth;               // --per-host-bandwidth, bytes
    std::uint64_t failures = 0;                                    // in a row: the backoff's exponent
    asio::steady_timer wake;                                       // "frontier not empty" / "done"
    asio::steady_timer pause;                                      // expires when a Retry-After pause ends
    clock_type::time_point paused_until{};
    std::vector<std::shared_ptr<connection>> idle;   // keep-alive connections
    std::uint64_t pages = 0, requests = 0;
    clock_type::time_point first_send{}, last_send{};
};

class crawler {
public:
    crawler(asio::io_context& io, const options& o)
        : io_(io),
          opt_(o),
          pace_(io, o.per_host_rate),
          global_(io, o.inflight),
          retry_(std::chrono::milliseconds(o.backoff_base_ms), std::chrono::milliseconds(o.backoff_cap_ms), o.retries + 1,
                 std::chrono::hours(1), static_cast<std::uint64_t>(::getpid())),
          progress_(io),
          signals_(io, SIGINT, SIGTERM),
          tty_(::isatty(STDERR_FILENO) != 0)
    {
    }

    // Returns false when a seed is bad.
    bool start(const std::vector<std::string>& seeds)
    {
        start_ = clock_type::now();
        for (auto& s : seeds) {
            url u;
            if (!parse_url(s, u)) {
                std::fprintf(stderr, "crawler: bad seed %s\n", s.c_str());
                return false;
            }
            host_state& h = host(u);
            enqueue(h, u.target);
        }
        signals_.async_wait([this](boost::system::error_code ec, int) {
            if (ec) return;
            interrupted_ = true;
            finish();
        });
        asio::co_spawn(io_, progress_loop(), asio::detached);
        if (outstanding_ == 0) finish();
        return true;
    }

    bool interrupted() const { return interrupted_; }
    std::uint64_t given_up() const { return failed_; }

    void print_summary() const
    {
        double elapsed = std::chrono::duration<double>(end_ - start_).count();
        std::printf("crawl %s: %llu pages in %.2f s (%.1f pages/s), %llu requests, %llu errors, %llu pages given up\n",
                    interrupted_ ? "interrupted" : "finished", static_cast<unsigned long long>(pages_), elapsed,
                    elapsed > 0 ? static_cast<double>(pages_) / elapsed : 0.0,
                    static_cast<unsigned long long>(requests_), static_cast<unsigned long long>(errors_),
                    static_cast<unsigned long long>(failed_));
        for (auto& [name, h] : hosts_) {
            double span = std::chrono::duration<double>(h->last_send - h->first_send).count();
            double rate = h->requests > 1 && span > 0 ? static_cast<double>(h->requests - 1) / span : 0.0;
            std::printf("  host %s: %llu pages, %llu requests, achieved %.1f requests/s (limit %.1f/s)\n",
                        name.c_str(), static_cast<unsigned long long>(h->pages),
                        static_cast<unsigned long long>(h->requests), rate, opt_.per_host_rate.per_second());
        }
        std::string statuses;
        for (auto& [code, n] : status_counts_)
            statuses += " " + std::to_string(code) + "=" + std::to_string(n);
        std::printf("  status:%s\n", statuses.empty() ? " none" : statuses.c_str());
        auto waits = permit_waits_;
        std::sort(waits.begin(), waits.end());
        auto pct = [&waits](double p) {
            if (waits.empty()) return 0.0;
            auto i = static_cast<std::size_t>(p * static_cast<double>(waits.size() - 1) + 0.5);
            return waits[i] * 1e3;
        };
        std::printf("  permit wait: p50 %.1f ms, p99 %.1f ms (%zu waits)\n", pct(0.5), pct(0.99), waits.size());
        auto status = [this](unsigned code) {
            auto it = status_counts_.find(code);
            return static_cast<unsigned long long>(it == status_counts_.end() ? 0 : it->second);
        };
        std::printf("  refusals: %llu 429s, %llu 503s, %llu connection errors; %llu Retry-After pauses, %llu backoff "
                    "pauses; %llu pages given up\n",
                    status(429), status(503), static_cast<unsigned long long>(conn_errors_),
                    static_cast<unsigned long long>(retry_after_pauses_), static_cast<unsigned long long>(backoff_pauses_),
                    static_cast<unsigned long long>(failed_));
        for (auto& [name, h] : hosts_)
            if (h->adaptive)
                std::printf("  host %s: adaptive in-flight limit %llu at the end\n", name.c_str(),
                            static_cast<unsigned long long>(h->adaptive->limit()));
    }

private:
    host_state& host(const url& u)
    {
        auto it = hosts_.find(u.host);
        if (it == hosts_.end()) {
            it = hosts_.emplace(u.host, std::make_unique<host_state>(io_, u.host, u.endpoint, opt_)).first;
            asio::co_spawn(io_, host_loop(*it->second), asio::detached);
        }
        return *it->second;
    }

    // Schedules a page once (de-duplicated), within --max-pages.
    void enqueue(host_state& h, const std::string& target)
    {
        if (finished_) return;
        if (opt_.max_pages > 0 && seen_.size() >= opt_.max_pages) return;
        if (!seen_.insert(h.name + target).second) return;
        ++outstanding_;
        h.frontier.emplace_back(target, 0);
        h.wake.cancel();
    }

    void page_done()
    {
        if (--outstanding_ == 0) finish();
    }

    // Ends the crawl (all pages done, or a signal): closing the limiters completes every
    // waiter with error::closed, the timers are cancelled; then io.run() returns.
    void finish()
    {
        if (finished_) return;
        finished_ = true;
        end_ = clock_type::now();
        pace_.close();
        global_.close();
        for (auto& [name, h] : hosts_) {
            h->close();
            h->wake.cancel();
            h->pause.cancel();
        }
        for (auto& w : connections_)   // idle ones and those of requests still running
            if (auto c = w.lock()) c->stream.next_layer().close();
        progress_.cancel();
        signals_.cancel();
    }

    // One loop per host hands its pages to fetches, at most --per-host-inflight at once,
    // so that a host with a long frontier never holds more than its share of the global
    // slots.
    asio::awaitable<void> host_loop(host_state& h)
    {
        for (;;) {
            while (h.frontier.empty() && !finished_) {
                h.wake.expires_at(clock_type::time_point::max());
                co_await h.wake.async_wait(asio::as_tuple(asio::use_awaitable));
            }
            if (finished_) co_return;
            auto slot = co_await h.acquire();
            if (!slot || finished_) co_return;
            auto [target, attempts] = std::move(h.frontier.front());
            h.frontier.pop_front();
            ++fetching_;
            asio::co_spawn(io_, fetch(h, std::move(target), attempts, std::move(slot)), asio::detached);
        }
    }

    // A 429 or 503 with Retry-After pauses the whole host, not just this page: later
    // requests would be rejected too, and a server that says "come back in 2 s" is asking
    // the client to stop. The pause is a gate in front of the host's leaky bucket, not a
    // reservation of the bucket itself: the bucket only ever holds one interval (burst 1,
    // a reservation of Retry-After * rate permits would exceed it), and permits already
    // reserved by queued fetches would still come due during the pause. So every fetch
    // waits for the gate before it asks for a permit, and looks again once it has one: a
    // permit granted inside a pause is dropped and the fetch queues again behind the gate.
    // After the pause the bucket spaces the held fetches at the normal rate.
    asio::awaitable<void> fetch(host_state& h, std::string target, std::uint64_t attempts, host_slot hslot)
    {
        const auto timeout = std::chrono::milliseconds(opt_.timeout_ms);
        std::shared_ptr<connection> conn;
        sluice::concurrency_limit<>::permit slot;
        std::string failure;
        for (;;) {
            while (clock_type::now() < h.paused_until && !finished_) {
                // The held fetches share one timer; only the first to see a new end moves it
                // (moving it cancels the waits of the others, which would then move it back).
                if (h.pause.expiry() != h.paused_until) h.pause.expires_at(h.paused_until);
                co_await h.pause.async_wait(asio::as_tuple(asio::use_awaitable));
            }
            if (finished_) break;
            const auto t0 = clock_type::now();
            if (!slot) {
                auto p = co_await global_.acquire(timeout);
                if (!p) {
                    failure = "global slot: " + p.error().message();
                    break;
                }
                slot = std::move(p);
            }
            auto waited = clock_type::now() - t0;
            // Connect before the permit, so that the request leaves as soon as it is granted:
            // the spacing the server sees is then the spacing of the permits.
            if (!conn) {
                if (!h.idle.empty()) {
                    conn = std::move(h.idle.back());
                    h.idle.pop_back();
                } else {
                    conn = std::make_shared<connection>(io_.get_executor());
                    if (h.bandwidth) conn->stream.read_limits() = {&*h.bandwidth};
                    std::erase_if(connections_, [](auto& w) { return w.expired(); });
                    connections_.push_back(conn);
                    conn->stream.next_layer().expires_after(timeout);
                    auto [ec] = co_await conn->stream.next_layer().async_connect(h.endpoint, asio::as_tuple(asio::use_awaitable));
                    if (ec) {
                        // The host's fault as much as a 503 is: back off, and tell the
                        // adaptive limit.
                        ++conn_errors_;
                        if (hslot.adaptive) hslot.adaptive.drop();
                        conn.reset();
                        if (!finished_) host_failed(h, target, attempts, "connect: " + ec.message(), std::nullopt);
                        --fetching_;
                        page_done();
                        co_return;
                    }
                }
            }
            const auto t1 = clock_type::now();
            auto [ec] = co_await pace_.async_acquire(std::string_view(h.name), 1,
                                                      std::max<clock_type::duration>(0ns, timeout - waited),
                                                      asio::as_tuple(asio::use_awaitable));
            if (ec) {
                failure = "pace: " + ec.message();
                break;
            }
            if (clock_type::now() < h.paused_until) {   // paused while we queued: see above
                slot.release();                        // other hosts need it more during the pause
                continue;
            }
            waited += clock_type::now() - t1;
            permit_waits_.push_back(std::chrono::duration<double>(waited).count());
            break;
        }
        if (failure.empty() && !finished_) {
            co_await send(h, target, attempts, std::move(conn), hslot);
        } else {
            // Our own limits ran out of time, not the host: no sample, no backoff.
            if (hslot.adaptive) hslot.adaptive.ignore();
            if (!finished_) retry_or_drop(h, std::move(target), attempts, failure);
        }
        --fetching_;
        page_done();
        // host_slot and slot are given back here
    }

    asio::awaitable<void> send(host_state& h, const std::string& target, std::uint64_t attempts,
                               std::shared_ptr<connection> conn, host_slot& hslot)
    {
        // The adaptive limit learns from the request alone, not from the waits before it.
        if (hslot.adaptive) hslot.adaptive.restart_clock();
        auto now = clock_type::now();
        if (h.requests++ == 0) h.first_send = now;
        h.last_send = now;
        ++requests_;
        ++in_flight_;
        http::request<http::empty_body> req{http::verb::get, target, 11};
        req.set(http::field::host, h.name);
        req.set(http::field::user_agent, "sluice-crawler");
        conn->stream.next_layer().expires_after(std::chrono::milliseconds(opt_.timeout_ms));
        http::response<http::string_body> res;
        auto [wec, wn] = co_await http::async_write(conn->stream, req, asio::as_tuple(asio::use_awaitable));
        boost::system::error_code ec = wec;
        if (!ec) {
            auto [rec, rn] = co_await http::async_read(conn->stream, conn->buffer, res, asio::as_tuple(asio::use_awaitable));
            ec = rec;
            (void)rn;
        }
        (void)wn;
        --in_flight_;
        if (finished_) co_return;
        if (ec) {
            ++conn_errors_;
            if (hslot.adaptive) hslot.adaptive.drop();
            host_failed(h, target, attempts, "request: " + ec.message(), std::nullopt);
            co_return;
        }
        const unsigned status = res.result_int();
        ++status_counts_[status];
        if (res.keep_alive()) h.idle.push_back(std::move(conn));
        if (status == 429 || status == 503) {
            if (hslot.adaptive) hslot.adaptive.drop();
            // Delay-seconds or an HTTP-date (sluice::http); absent, malformed or in the
            // past: none, and the host backs off on its own.
            std::optional<std::chrono::nanoseconds> retry_after;
            if (auto it = res.find(http::field::retry_after); it != res.end()) {
                auto now = std::chrono::system_clock::now();
                if (auto ra = sluice::http::parse_retry_after(std::string_view(it->value().data(), it->value().size()), now))
                    retry_after = ra->delay_from(now);
            }
            host_failed(h, target, attempts, "HTTP " + std::to_string(status), retry_after);
            co_return;
        }
        h.failures = 0;   // the host answered: its backoff starts over
        if (hslot.adaptive) hslot.adaptive.release();
        if (status == 200) {
            ++pages_;
            ++h.pages;
            extract_links(h, res.body());
        }
    }

    // A refusal or a connection error: the host waits (Retry-After, else a jittered
    // backoff) before any of its pages is asked again, and this page is retried or given up.
    void host_failed(host_state& h, const std::string& target, std::uint64_t attempts, const std::string& why,
                     std::optional<std::chrono::nanoseconds> retry_after)
    {
        ++h.failures;
        auto d = retry_.after_failure(attempts + 1, h.failures, retry_after);
        if (!d.give_up) {
            auto until = clock_type::now() + std::chrono::duration_cast<clock_type::duration>(d.delay);
            if (d.from_retry_after) ++retry_after_pauses_;
            else ++backoff_pauses_;
            if (until > h.paused_until) h.paused_until = until;
        }
        retry_or_drop(h, target, attempts, why, !why.starts_with("HTTP "));
    }

    // `why` says what failed (for the give-up message); refusals are not counted as errors.
    void retry_or_drop(host_state& h, std::string target, std::uint64_t attempts, const std::string& why,
                       bool error = true)
    {
        if (error) ++errors_;
        if (attempts + 1 <= opt_.retries) {
            ++outstanding_;   // page_done() of this attempt follows
            h.frontier.emplace_front(std::move(target), attempts + 1);
            h.wake.cancel();
        } else {
            ++failed_;
            std::fprintf(stderr, "%scrawler: giving up on %s%s after %llu attempts: %s\n", tty_ ? "\r\033[K" : "",
                         h.name.c_str(), target.c_str(), static_cast<unsigned long long>(attempts + 1),
                         why.c_str());
        }
    }

    // href="..." values: site-relative links stay on this host; absolute ones are followed
    // only to hosts already being crawled (never to anything the seeds did not name).
    void extract_links(host_state& h, std::string_view body)
    {
        constexpr std::string_view key = "href=\"";
        for (std::size_t p = body.find(key); p != std::string_view::npos; p = body.find(key, p)) {
            p += key.size();
            auto end = body.find('"', p);
            if (end == std::string_view::npos) break;
            std::string_view link = body.substr(p, end - p);
            p = end;
            if (link.starts_with("/") && !link.starts_with("//")) {
                std::string t(link.substr(0, link.find('#')));
                enqueue(h, t);
            } else if (url u; parse_url(link, u)) {
                if (auto it = hosts_.find(u.host); it != hosts_.end()) enqueue(*it->second, u.target);
            }
        }
    }

    std::uint64_t queued() const
    {
        std::uint64_t n = 0;
        for (auto& [name, h] : hosts_) n += h->frontier.size();
        return n + (fetching_ - in_flight_);
    }

    asio::awaitable<void> progress_loop()
    {
        const auto period = tty_ ? 250ms : 1000ms;
        std::uint64_t last_pages = 0;
        auto last = clock_type::now();
        while (!finished_) {
            progress_.expires_after(period);
            co_await progress_.async_wait(asio::as_tuple(asio::use_awaitable));
            if (finished_) break;   // the summary follows
            auto now = clock_type::now();
            double dt = std::chrono::duration<double>(now - last).count();
            double rate = dt > 0 ? static_cast<double>(pages_ - last_pages) / dt : 0.0;
            last = now;
            last_pages = pages_;
            std::fprintf(stderr, "%s[%5.1fs] pages %llu (%.1f/s) | queued %llu | in flight %llu | errors %llu | 429s %llu%s",
                         tty_ ? "\r\033[K" : "", std::chrono::duration<double>(now - start_).count(),
                         static_cast<unsigned long long>(pages_), rate, static_cast<unsigned long long>(queued()),
                         static_cast<unsigned long long>(in_flight_), static_cast<unsigned long long>(errors_),
                         static_cast<unsigned long long>(status_counts_.contains(429) ? status_counts_.at(429) : 0),
                         tty_ ? "" : "\n");
            std::fflush(stderr);
        }
        if (tty_) std::fputs("\n", stderr);
    }

    asio::io_context& io_;
    const options& opt_;
    sluice::keyed<sluice::leaky_bucket<>> pace_;   // --per-host-rate, one bucket per host
    sluice::concurrency_limit<> global_;           // --inflight
    crawl::retry_policy retry_;                    // --retries, --backoff-*
    asio::steady_timer progress_;
    asio::signal_set signals_;
    bool tty_;
    std::map<std::string, std::unique_ptr<host_state>> hosts_;
    std::unordered_set<std::string> seen_;
    std::uint64_t outstanding_ = 0;   // pages queued or being fetched; 0 ends the crawl
    std::uint64_t fetching_ = 0, in_flight_ = 0;
    std::uint64_t pages_ = 0, requests_ = 0, errors_ = 0, failed_ = 0;
    std::uint64_t conn_errors_ = 0, retry_after_pauses_ = 0, backoff_pauses_ = 0;
    std::vector<std::weak_ptr<connection>> connections_;
    std::map<unsigned, std::uint64_t> status_counts_;
    std::vector<double> permit_waits_;   // seconds
    bool finished_ = false, interrupted_ = false;
    clock_type::time_point start_{}, end_{};
};

} // namespace

int main(int argc, char** argv)
{
    options opt;
    if (!parse_args(argc, argv, opt)) return 2;

    std::vector<std::unique_ptr<examples::spawned_server>> children; // stopped by pid when destroyed
    if (opt.spawn > 0) {
        std::string bin = opt.server_bin.empty() ? examples::server_next_to_self() : opt.server_bin;
        for (std::uint64_t i = 0; i < opt.spawn; ++i) {
            std::string why;
            auto c = examples::spawned_server::start(bin, split_args(opt.server_args, i), why);
            if (!c) {
                std::fprintf(stderr, "crawler: server %s: %s\n", bin.c_str(), why.c_str());
                return 1;
            }
            opt.seeds.push_back("http://127.0.0.1:" + std::to_string(c->port()) + "/");
            children.push_back(std::move(c));
        }
    }

    int rc = 0;
    try {
        asio::io_context io;
        crawler cr(io, opt);
        if (!cr.start(opt.seeds)) {
            rc = 2;
        } else {
            io.run();
            cr.print_summary();
            rc = cr.interrupted() ? 130 : cr.given_up() > 0 ? 3 : 0;
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "crawler: %s\n", e.what());
        rc = 1;
    }
    children.clear();
    return rc;
}
