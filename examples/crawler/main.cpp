// sluice example: a polite crawler (Boost.Beast client, C++20 coroutines).
//
// Shows the limits a crawler needs, together: each host is paced by its own leaky bucket
// (a keyed<leaky_bucket<>> with no slack, so that no two requests leave closer than the
// pace), requests in flight are capped per host and overall (concurrency_limit,
// --per-host-inflight / --inflight), and every wait for a permit and every request is
// bounded (--timeout-ms). Each host's pace is learnt: it starts at --per-host-start-rate and
// grows until the host refuses, then settles just under the limit measured from what the
// host admitted between its refusals, whatever its burst (sluice::rate_learner), or follows
// the host's RateLimit fields when it sends them (sluice::adaptive_rate_controller). A page
// refused (429 or 503) is retried after its Retry-After (delay-seconds or an HTTP-date), or
// without one after an exponential backoff with full jitter (--backoff-base-ms,
// --backoff-cap-ms), while the host's other pages go on at the learnt pace: the whole host
// waits only when it refuses everything (the learner's block), or after a connection error
// or another 5xx; a page is given up after --retries retries. Each host's in-flight cap
// follows its latency (sluice::adaptive_concurrency, AIMD on 1.8 times the latency of a
// request alone, by default): a host that slows down under load is not loaded further.
//
// It reads real sites: /robots.txt first on every host (RFC 9309, the group of the
// --user-agent's product token; Crawl-delay lowers the pace), links taken from the HTML by
// libxml2's parser and resolved by uriparser (RFC 3986), redirects followed on the crawled
// hosts, pages of other media types or larger than --max-bytes skipped after their header.
// Only the seeds' hosts are crawled; each page is fetched once, at most --max-pages-per-host
// of one host, and redirect loops are found and named (frontier.hpp). Every body is read
// within its limit as it arrives (capped_body.hpp), robots.txt's first 500 KiB only.
//
//     build/examples/crawler --spawn-servers 2 --per-host-rate 20/s
//     build/examples/crawler --seed http://localhost:8080/ --per-host-rate 50/s --max-pages 500
//
// --per-host-adaptive picks the algorithm of the in-flight cap (or off: --per-host-inflight,
// fixed); --per-host-bandwidth caps the
// bytes per second read from each host (sluice::throttled_stream). --spawn-servers K starts
// K example servers (examples/server) as K "hosts" and stops them at the end. Progress goes
// to stderr (4 times a second on a terminal, once a second otherwise); the summary to
// stdout; the exit codes are in --help (options.hpp).

#include "../common/spawn_server.hpp"
#include "capped_body.hpp"
#include "frontier.hpp"
#include "links.hpp"
#include "options.hpp"
#include "retry_policy.hpp"
#include "robots.hpp"
#include "url.hpp"

#include <sluice/adaptive_rate_controller.hpp>
#include <sluice/http/retry_after.hpp>
#include <sluice/rate_learner.hpp>
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
#include <array>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

// One URL to fetch on a host.
struct page {
    std::string target;
    std::uint64_t attempts = 0;    // failed attempts so far
    std::uint64_t redirects = 0;   // redirects followed to reach it
    bool seed = false;
    bool robots = false;           // the host's robots.txt (or where it redirected)
    clock_type::time_point not_before{};   // refused: not asked again before this
};

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

std::int64_t now_ns()
{
    return std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now().time_since_epoch()).count();
}

sluice::rate_learner_options learner_options(const crawl::options& o)
{
    sluice::rate_learner_options p;
    p.ceiling = o.per_host_rate;
    p.initial = sluice::rate::per_second(o.start_per_second());
    p.floor = sluice::rate::per_second(std::min(0.05, o.start_per_second()));
    // A host may tell time to the millisecond only (nginx's clock): the counts between its
    // refusals are widened by that much.
    p.resolution = std::chrono::milliseconds(1);
    p.max_pause = std::chrono::hours(1);   // as the retry policy's longest Retry-After
    return p;
}

sluice::adaptive_rate_options fields_options(const crawl::options& o)
{
    sluice::adaptive_rate_options a;
    a.ceiling = o.per_host_rate;
    a.initial = sluice::rate::per_second(o.start_per_second());
    a.floor = sluice::rate::per_second(std::min(0.05, o.start_per_second()));
    return a;
}

struct host_state {
    host_state(asio::io_context& io, const crawl::url& where, std::vector<tcp::endpoint> eps, const crawl::options& o)
        : name(where.authority()), endpoints(std::move(eps)), slots(io, o.per_host_inflight), wake(io), pause(io),
          learner(learner_options(o)), fields(fields_options(o))
    {
        if (o.per_host_adaptive) {
            sluice::adaptive_concurrency_options a;
            a.algorithm = *o.per_host_adaptive;
            a.max_limit = o.per_host_inflight;
            // From one, growing while latency stays near what a request alone takes (robots.txt
            // is alone): no surge at the start, and the in-flight cap where a host that slows
            // under load is still quick. A quarter of the timeout is slow in any case. (Vegas
            // and Gradient2 keep a queue at the host: two, not the four a server's front keeps.)
            a.initial_limit = 1;
            a.latency_ratio = 1.8;
            a.latency_threshold = std::chrono::milliseconds(o.timeout_ms) / 4;
            a.queue_size = 2;
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

    std::string name;   // authority: the Host field, and the key of the host's pace
    std::vector<tcp::endpoint> endpoints;   // its name resolved: tried in order
    std::deque<page> frontier;
    sluice::concurrency_limit<> slots;                        // --per-host-inflight
    std::optional<sluice::adaptive_concurrency<>> adaptive;   // --per-host-adaptive
    std::optional<sluice::token_bucket<>> bandwidth;          // --per-host-bandwidth, bytes
    std::uint64_t failures = 0;                               // in a row: the backoff's exponent
    asio::steady_timer wake;                                  // "frontier not empty" / "done"
    asio::steady_timer pause;                                 // expires when a pause ends
    clock_type::time_point paused_until{};
    std::vector<std::shared_ptr<connection>> idle;   // keep-alive connections
    // robots.txt: nothing else is fetched before it is known.
    bool robots_known = false;
    crawl::robots_rules robots;
    // The pace: learnt from refusals, or following the host's RateLimit fields.
    sluice::rate_learner learner;
    sluice::adaptive_rate_controller fields;
    std::uint64_t fields_seen = 0;
    double applied_rate = 0;
    clock_type::time_point next_write{};   // no write to the host before this
    std::uint64_t writes = 0;              // requests written to the host so far
    std::array<clock_type::duration, 16> answer_times{};   // the last ones, from write to header
    std::uint64_t answers = 0;
    std::uint64_t pages = 0, requests = 0;
    clock_type::time_point first_send{}, last_send{};
};

// What became of the pages that were not fetched, for the summary and the exit code.
struct tally {
    std::uint64_t given_up = 0;        // after --retries (failures)
    std::uint64_t error_status = 0;    // 4xx/5xx answers (failures)
    std::uint64_t blocked = 0;         // robots.txt unreachable: complete disallow (failures)
    std::uint64_t seeds_lost = 0;      // a seed disallowed or redirected off the crawl (failures)
    std::uint64_t redirect_loops = 0;  // URLs whose redirects come back to them, or lead into such a loop (failures)
    std::uint64_t long_chains = 0;     // more than max_redirects in a row (failures)
    std::uint64_t over_bound = 0;      // links past --max-pages-per-host (failures)
    std::uint64_t disallowed = 0;      // by robots.txt (each link)
    std::uint64_t other_types = 0;     // not in --content-types
    std::uint64_t too_large = 0;       // over --max-bytes
    std::uint64_t redirects = 0;       // followed
    std::uint64_t redirects_off = 0;   // to another host or another scheme
    std::uint64_t nofollow = 0;        // pages whose robots meta tag asked not to follow
    std::uint64_t failures() const
    {
        return given_up + error_status + blocked + seeds_lost + redirect_loops + long_chains + over_bound;
    }
};

class crawler {
public:
    crawler(asio::io_context& io, const crawl::options& o)
        : io_(io),
          opt_(o),
          pace_(io, sluice::rate::per_second(o.start_per_second()), 0ns),
          global_(io, o.inflight),
          retry_(std::chrono::milliseconds(o.backoff_base_ms), std::chrono::milliseconds(o.backoff_cap_ms), o.retries + 1,
                 std::chrono::hours(1), static_cast<std::uint64_t>(::getpid())),
          agent_token_(crawl::product_token(o.user_agent)),
          progress_(io),
          signals_(io, SIGINT, SIGTERM),
          tty_(::isatty(STDERR_FILENO) != 0),
          book_(o.max_pages, o.max_pages_per_host)
    {
        for (auto& t : o.content_types) accept_ += (accept_.empty() ? "" : ", ") + t;
    }

    /// Starts the crawl of `seeds`, each with the address its host resolved to.
    void start(const std::vector<std::pair<crawl::url, std::vector<tcp::endpoint>>>& seeds)
    {
        start_ = clock_type::now();
        for (auto& [u, ep] : seeds) enqueue(host(u, ep), u.target, 0, true);
        signals_.async_wait([this](boost::system::error_code ec, int) {
            if (ec) return;
            interrupted_ = true;
            finish();
        });
        asio::co_spawn(io_, progress_loop(), asio::detached);
        if (outstanding_ == 0) finish();
    }

    bool interrupted() const { return interrupted_; }
    std::uint64_t failures() const { return lost_.failures(); }

    void print_summary() const
    {
        const double elapsed = std::chrono::duration<double>(end_ - start_).count();
        auto n = [](std::uint64_t v) { return static_cast<unsigned long long>(v); };
        std::printf("crawl %s: %llu pages in %.2f s (%.1f pages/s), %llu requests, %llu errors, %llu pages given up\n",
                    interrupted_ ? "interrupted" : "finished", n(pages_), elapsed,
                    elapsed > 0 ? static_cast<double>(pages_) / elapsed : 0.0, n(requests_), n(errors_),
                    n(lost_.given_up));
        for (auto& [name, h] : hosts_) {
            const double span = std::chrono::duration<double>(h->last_send - h->first_send).count();
            const double rate = h->requests > 1 && span > 0 ? static_cast<double>(h->requests - 1) / span : 0.0;
            const std::string how = pace_reason(*h);
            std::printf("  host %s: %llu pages, %llu requests, achieved %.1f requests/s (pace %.1f/s at the end, %s; "
                        "limit %.1f/s)\n",
                        name.c_str(), n(h->pages), n(h->requests), rate, h->learner.rate(), how.c_str(),
                        opt_.per_host_rate.per_second());
            if (h->robots_known && (h->robots.rule_count() > 0 || h->robots.crawl_delay() || h->robots.disallows_all()))
                std::printf("  robots.txt of %s: %s\n", name.c_str(),
                            h->robots.disallows_all() ? "unreachable: nothing allowed"
                                                      : (std::to_string(h->robots.rule_count()) + " rules" +
                                                         (h->robots.crawl_delay()
                                                              ? ", Crawl-delay " + one_decimal(*h->robots.crawl_delay()) + " s"
                                                              : std::string()))
                                                            .c_str());
        }
        for (auto& [name, h] : hosts_)
            if (auto over = book_.over_bound(name))
                std::printf("  host %s: %llu links past --max-pages-per-host %llu, not followed\n", name.c_str(), n(over),
                            n(opt_.max_pages_per_host));
        for (auto& l : loops_) std::printf("  redirect loop: %s\n", l.c_str());
        if (loops_found_ > loops_.size())
            std::printf("  redirect loops: %llu more, not named\n", n(loops_found_ - loops_.size()));
        std::string statuses;
        for (auto& [code, k] : status_counts_) statuses += " " + std::to_string(code) + "=" + std::to_string(k);
        std::printf("  status:%s\n", statuses.empty() ? " none" : statuses.c_str());
        std::printf("  not fetched: %llu given up, %llu error statuses, %llu blocked by an unreachable robots.txt, "
                    "%llu seeds lost, %llu in redirect loops, %llu after more than %llu redirects, %llu links past "
                    "--max-pages-per-host; skipped: %llu disallowed by robots.txt, %llu of other types, %llu over "
                    "--max-bytes, %llu redirects off the crawl, links of %llu nofollow pages; %llu redirects followed\n",
                    n(lost_.given_up), n(lost_.error_status), n(lost_.blocked), n(lost_.seeds_lost),
                    n(lost_.redirect_loops), n(lost_.long_chains), n(crawl::options::max_redirects), n(lost_.over_bound),
                    n(lost_.disallowed), n(lost_.other_types), n(lost_.too_large), n(lost_.redirects_off),
                    n(lost_.nofollow), n(lost_.redirects));
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
        // A refused page waits its Retry-After (or a backoff) alone; a host pauses only when it
        // refuses everything (or after errors).
        std::printf("  refusals: %llu 429s, %llu 503s, %llu connection errors; %llu Retry-After pauses, %llu backoff "
                    "pauses; %llu pages given up; %llu host pauses\n",
                    status(429), status(503), n(conn_errors_), n(retry_after_pauses_), n(backoff_pauses_),
                    n(lost_.given_up), n(host_pauses_));
        for (auto& [name, h] : hosts_)
            std::printf("  host %s: %s\n", name.c_str(), decision(*h).c_str());
    }

private:
    static std::string one_decimal(double v)
    {
        char b[32];
        std::snprintf(b, sizeof b, "%.1f", v);
        return b;
    }

    // Why the host's pace is what it is.
    std::string pace_reason(const host_state& h) const
    {
        const auto& l = h.learner;
        if (h.fields_seen > 0) return "following its RateLimit fields";
        if (l.slow_start()) return l.rate() >= opt_.per_host_rate.per_second() ? "never refused: --per-host-rate" : "never refused";
        std::string bounds = l.limit_low() > 0 && std::isfinite(l.limit_high())
                                 ? one_decimal(l.limit_low()) + "-" + one_decimal(l.limit_high()) + "/s"
                             : l.limit_low() > 0 ? "at least " + one_decimal(l.limit_low()) + "/s"
                                                 : "under " + one_decimal(l.limit_high()) + "/s";
        std::string burst = l.burst() >= 1 ? ", burst " + std::to_string(static_cast<long long>(l.burst())) + " at least" : "";
        return (l.measuring() ? "measuring its limit: " : "limit ") + bounds + burst + " learnt from " +
               std::to_string(l.stats().refused) + " refusals";
    }

    // What the crawler decided for the host: its in-flight cap and its pace, and why.
    std::string decision(const host_state& h) const
    {
        std::string in_flight;
        if (h.adaptive) {
            const auto cap = h.adaptive->limit();
            const auto unloaded = h.learner.unloaded_latency(), mean = h.learner.mean_latency();
            char ratio[64] = "";
            if (unloaded.count() > 0)
                std::snprintf(ratio, sizeof ratio, ": latency %.1fx the unloaded %.1f ms",
                              static_cast<double>(mean.count()) / static_cast<double>(unloaded.count()),
                              static_cast<double>(unloaded.count()) / 1e6);
            in_flight = "in flight at most " + std::to_string(cap) +
                        (cap < opt_.per_host_inflight ? std::string(" (latency-limited") + ratio + ")"
                                                      : std::string(" (--per-host-inflight)"));
        } else {
            in_flight = "in flight at most " + std::to_string(opt_.per_host_inflight) + " (fixed)";
        }
        return in_flight + ", pace " + one_decimal(h.learner.rate()) + "/s (" + pace_reason(h) + ")";
    }

    host_state& host(const crawl::url& u, const std::vector<tcp::endpoint>& eps)
    {
        auto it = hosts_.find(u.authority());
        if (it == hosts_.end()) {
            it = hosts_.emplace(u.authority(), std::make_unique<host_state>(io_, u, eps, opt_)).first;
            host_state& h = *it->second;
            apply_pace(h);
            // robots.txt comes first: nothing else is handed out before it is known.
            ++outstanding_;
            h.frontier.push_back(page{"/robots.txt", 0, 0, false, true});
            asio::co_spawn(io_, host_loop(h), asio::detached);
        }
        return *it->second;
    }

    // Schedules a page once (de-duplicated), unless robots.txt forbids it, within --max-pages
    // and the host's bound (--max-pages-per-host). Only the pages scheduled are recorded, so
    // that a site's links cost memory only up to its bound; those skipped are counted each
    // time they are found.
    void enqueue(host_state& h, const std::string& target, std::uint64_t redirects, bool seed)
    {
        if (finished_) return;
        const std::string key = h.name + target;
        if (book_.seen(key)) return;
        if (h.robots_known && !h.robots.allowed(target)) {
            skip_disallowed(h, target, seed);
            return;
        }
        switch (book_.place(h.name)) {
        case crawl::frontier_book::admit::fetch: break;
        case crawl::frontier_book::admit::over_max_pages: return;   // as asked: not a failure
        case crawl::frontier_book::admit::over_host_bound:
            if (book_.over_bound(h.name) == 1)
                note("host " + h.name + ": more than --max-pages-per-host " + std::to_string(opt_.max_pages_per_host) +
                     " pages; links to the rest are counted, not followed");
            ++lost_.over_bound;
            if (seed) ++lost_.seeds_lost;
            return;
        }
        book_.record(key);
        ++outstanding_;
        h.frontier.push_back(page{target, 0, redirects, seed, false});
        h.wake.cancel();
    }

    void skip_disallowed(host_state& h, const std::string& target, bool seed)
    {
        if (h.robots.disallows_all()) {
            ++lost_.blocked;
            std::fprintf(stderr, "%scrawler: not fetched: http://%s%s: robots.txt unreachable, nothing allowed\n",
                         tty_ ? "\r\033[K" : "", h.name.c_str(), target.c_str());
        } else if (seed) {
            ++lost_.seeds_lost;
            std::fprintf(stderr, "%scrawler: seed http://%s%s disallowed by robots.txt for '%s'\n", tty_ ? "\r\033[K" : "",
                         h.name.c_str(), target.c_str(), agent_token_.c_str());
        } else {
            ++lost_.disallowed;
        }
    }

    // robots.txt is known (fetched, absent, or unreachable): its Crawl-delay bounds the
    // pace, and what it disallows leaves the frontier.
    void robots_known(host_state& h, crawl::robots_rules rules)
    {
        h.robots = std::move(rules);
        h.robots_known = true;
        if (auto d = h.robots.crawl_delay(); d && *d > 0) {
            h.learner.set_ceiling(std::min(opt_.per_host_rate.per_second(), 1 / *d));
            apply_pace(h);
        }
        std::deque<page> keep;
        std::uint64_t dropped = 0;
        for (auto& p : h.frontier) {
            if (p.robots || h.robots.allowed(p.target)) {
                keep.push_back(std::move(p));
            } else {
                skip_disallowed(h, p.target, p.seed);
                ++dropped;
            }
        }
        h.frontier = std::move(keep);
        h.wake.cancel();
        for (std::uint64_t i = 0; i < dropped; ++i) page_done();
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

    // The pace the host's learner (or its RateLimit fields) chose, given to its bucket when
    // it moved by more than half a percent.
    void apply_pace(host_state& h)
    {
        const double r = h.learner.rate();
        if (h.applied_rate > 0 && std::abs(r - h.applied_rate) <= 0.005 * h.applied_rate) return;
        h.applied_rate = r;
        pace_.set_override(std::string_view(h.name), sluice::rate::per_second(r), 0ns);
    }

    // One loop per host hands its pages to fetches, at most --per-host-inflight at once,
    // so that a host with a long frontier never holds more than its share of the global
    // slots; until robots.txt is known, it hands out robots.txt only.
    asio::awaitable<void> host_loop(host_state& h)
    {
        for (;;) {
            for (auto next = clock_type::time_point::max(); !finished_ && pick(h, next) == h.frontier.end();
                 next = clock_type::time_point::max()) {
                h.wake.expires_at(next);   // a refused page's time, or "frontier not empty"
                co_await h.wake.async_wait(asio::as_tuple(asio::use_awaitable));
            }
            if (finished_) co_return;
            auto slot = co_await h.acquire();
            if (!slot || finished_) co_return;
            auto next = clock_type::time_point::max();
            auto it = pick(h, next);
            if (it == h.frontier.end()) continue;   // changed meanwhile
            page p = std::move(*it);
            h.frontier.erase(it);
            ++fetching_;
            asio::co_spawn(io_, fetch(h, std::move(p), std::move(slot)), asio::detached);
        }
    }

    // The page to fetch next: robots.txt until it is known, then the first page not waiting
    // out a refusal (refused pages go back to the front); `next` is when the first of those
    // may go, when none may now.
    std::deque<page>::iterator pick(host_state& h, clock_type::time_point& next)
    {
        const auto now = clock_type::now();
        std::size_t looked = 0;
        for (auto it = h.frontier.begin(); it != h.frontier.end() && looked < 256; ++it, ++looked) {
            if (!h.robots_known && !it->robots) continue;
            if (it->not_before <= now) return it;
            next = std::min(next, it->not_before);
        }
        return h.frontier.end();
    }

    // A pause of the whole host (the host refusing everything, or failing) is a gate in front
    // of its leaky bucket: every fetch waits for the gate before it asks for a permit, and
    // looks again once it has one: a permit admitted inside a pause is dropped and the fetch
    // queues again.
    asio::awaitable<void> fetch(host_state& h, page p, host_slot hslot)
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
                auto g = co_await global_.acquire(timeout);
                if (!g) {
                    failure = "global slot: " + g.error().message();
                    break;
                }
                slot = std::move(g);
            }
            auto waited = clock_type::now() - t0;
            // Connect before the permit, so that the request leaves as soon as it is admitted:
            // the spacing the server sees is then the spacing of the permits.
            if (!conn) {
                conn = co_await connect(h);
                if (!conn) {
                    // The host's fault as much as a 503 is: back off, and tell the adaptive limit.
                    ++conn_errors_;
                    if (hslot.adaptive) hslot.adaptive.drop();
                    if (!finished_) host_failed(h, std::move(p), "connect failed", std::nullopt, true);
                    --fetching_;
                    page_done();
                    co_return;
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
            // The bucket spaces the permits, but a fetch that wakes late sends late, and the
            // next one, on the bucket's schedule, would then follow it closer than the pace:
            // a host with no burst (nginx's default) refuses that. So writes to a host keep
            // one interval apart as they happen: each waits until then, and looks again once
            // awake (a write that happened meanwhile, late, moved it).
            bool paused = false;
            while (clock_type::now() < h.next_write && !finished_) {
                asio::steady_timer gap(io_, h.next_write);
                co_await gap.async_wait(asio::as_tuple(asio::use_awaitable));
                paused = clock_type::now() < h.paused_until;
                if (paused) break;
            }
            if (paused) {   // paused meanwhile: queue again
                slot.release();
                continue;
            }
            h.next_write = clock_type::now() + interval_of(h);   // moved again when the write happens
            break;
        }
        if (failure.empty() && !finished_) {
            co_await send(h, std::move(p), std::move(conn), hslot);
        } else {
            // Our own limits ran out of time, not the host: no sample, no backoff.
            if (hslot.adaptive) hslot.adaptive.ignore();
            if (!finished_) retry_or_drop(h, std::move(p), failure, true);
        }
        --fetching_;
        page_done();
        // host_slot and slot are given back here
    }

    // An idle keep-alive connection of the host, or a new one (null if it failed).
    asio::awaitable<std::shared_ptr<connection>> connect(host_state& h)
    {
        if (!h.idle.empty()) {
            auto c = std::move(h.idle.back());
            h.idle.pop_back();
            co_return c;
        }
        auto c = std::make_shared<connection>(io_.get_executor());
        if (h.bandwidth) c->stream.read_limits() = {&*h.bandwidth};
        std::erase_if(connections_, [](auto& w) { return w.expired(); });
        connections_.push_back(c);
        c->stream.next_layer().expires_after(std::chrono::milliseconds(opt_.timeout_ms));
        auto [ec, ep] = co_await c->stream.next_layer().async_connect(h.endpoints, asio::as_tuple(asio::use_awaitable));
        (void)ep;
        if (ec) co_return nullptr;
        c->stream.next_layer().socket().set_option(tcp::no_delay(true), ec);
        co_return c;
    }

    // Sends the request and reads the answer: its header first, then its body when it is
    // a page of an accepted type and size (or a small answer worth reading to keep the
    // connection); what it says moves the host's pace and decides what comes next.
    asio::awaitable<void> send(host_state& h, page p, std::shared_ptr<connection> conn, host_slot& hslot)
    {
        // The adaptive limit learns from the request alone, not from the waits before it.
        if (hslot.adaptive) hslot.adaptive.restart_clock();
        const auto now = clock_type::now();
        if (h.requests++ == 0) h.first_send = now;
        h.last_send = now;
        ++requests_;
        ++in_flight_;
        http::request<http::empty_body> req{http::verb::get, p.target, 11};
        req.set(http::field::host, h.name);
        req.set(http::field::user_agent, opt_.user_agent);
        req.set(http::field::accept, p.robots ? "text/plain" : accept_);
        conn->stream.next_layer().expires_after(std::chrono::milliseconds(opt_.timeout_ms));
        const auto sent = h.learner.on_sent(std::chrono::nanoseconds(now_ns()));
        const auto write = ++h.writes;
        h.next_write = std::max(h.next_write, now + interval_of(h));   // from the write itself
        std::optional<http::response_parser<crawl::capped_body>> reading;
        auto [ec, wn] = co_await http::async_write(conn->stream, req, asio::as_tuple(asio::use_awaitable));
        (void)wn;
        // A 1xx answer is interim (RFC 9110 section 15.2): the final one follows it on the
        // connection. As many as come within the request's deadline are read past.
        do {
            reading.emplace();
            reading->header_limit(64 * 1024);
            reading->body_limit(boost::none);   // the body's cap, chosen after the header, bounds it
            if (ec) break;
            auto [rec, rn] = co_await http::async_read_header(conn->stream, conn->buffer, *reading,
                                                              asio::as_tuple(asio::use_awaitable));
            ec = rec;
            (void)rn;
        } while (!ec && reading->get().result_int() / 100 == 1);
        auto& parser = *reading;
        // What to read of the body: a page or robots.txt within its limit, small answers
        // whole (to keep the connection), nothing of the rest.
        enum class skip { none, type, size } skipped = skip::none;
        bool body = false;
        if (!ec) {
            const auto& res = parser.get();
            const unsigned status = res.result_int();
            const auto length = parser.content_length();
            std::uint64_t limit = 64 * 1024;
            if (status / 100 == 2 && !p.robots) {
                if (!accepted_type(field(res, http::field::content_type))) skipped = skip::type;
                else if (length && *length > opt_.max_bytes) skipped = skip::size;
                limit = opt_.max_bytes;
            } else if (status / 100 == 2) {
                limit = crawl::robots_rules::read_size;   // a longer one is read that far, and parsed
            }
            body = skipped == skip::none && (status / 100 == 2 || !length || *length <= limit);
            if (body && !parser.is_done()) {
                parser.get().body().cap = static_cast<std::size_t>(limit);
                auto [bec, bn] = co_await http::async_read(conn->stream, conn->buffer, parser,
                                                           asio::as_tuple(asio::use_awaitable));
                (void)bn;
                // Past the limit: a page is skipped, robots.txt read as far as the limit,
                // another answer known by its header.
                if (bec == http::error::body_limit) skipped = status / 100 == 2 && !p.robots ? skip::size : skip::none;
                else ec = bec;
            }
        }
        --in_flight_;
        if (finished_) co_return;
        if (!ec) space_from_answer(h, write, now);
        if (ec) {
            ++conn_errors_;
            if (hslot.adaptive) hslot.adaptive.drop();
            h.learner.on_answer(std::chrono::nanoseconds(now_ns()), sent, {sluice::rate_learner::outcome::failed});
            host_failed(h, std::move(p), "request: " + ec.message(), std::nullopt, true);
            co_return;
        }
        auto& res = parser.get();
        const unsigned status = res.result_int();
        ++status_counts_[status];
        if (parser.is_done() && body && res.keep_alive()) h.idle.push_back(std::move(conn));
        else conn->stream.next_layer().close();
        // Delay-seconds or an HTTP-date (sluice::http); absent, malformed or in the past: none.
        std::optional<std::chrono::nanoseconds> retry_after;
        if (auto it = res.find(http::field::retry_after); it != res.end()) {
            auto wall = std::chrono::system_clock::now();
            if (auto ra = sluice::http::parse_retry_after(std::string_view(it->value().data(), it->value().size()), wall))
                retry_after = ra->delay_ns_from(wall);
        }
        const auto advice = learn(h, sent, res, retry_after);

        if (status == 429 || status == 503) {
            // A refusal is the pace's business, not the in-flight cap's.
            if (hslot.adaptive) hslot.adaptive.ignore();
            refused(h, std::move(p), status, retry_after, advice);
            co_return;
        }
        if (status >= 500) {   // a server error: retried after a backoff, as a connection error
            if (hslot.adaptive) hslot.adaptive.drop();
            host_failed(h, std::move(p), "HTTP " + std::to_string(status), std::nullopt, true);
            co_return;
        }
        if (hslot.adaptive) hslot.adaptive.release();
        h.failures = 0;   // the host answered: its backoff starts over
        if (p.robots) {
            robots_answer(h, p, res);
            co_return;
        }
        if (status >= 300 && status < 400 && res.find(http::field::location) != res.end()) {
            redirect(h, p, field(res, http::field::location));
            co_return;
        }
        if (status >= 300) {
            ++lost_.error_status;
            note("HTTP " + std::to_string(status) + " for http://" + h.name + p.target);
            co_return;
        }
        if (skipped == skip::type) {
            ++lost_.other_types;
            co_return;
        }
        if (skipped == skip::size) {
            ++lost_.too_large;
            note("skipped http://" + h.name + p.target + ": larger than --max-bytes");
            co_return;
        }
        ++pages_;
        ++h.pages;
        follow_links(h, p.target, res);
    }

    // A host measures the gaps between requests as it reads them: one it read late (busy, or
    // descheduled) brings the next one closer in its eyes, and a host with no burst refuses
    // that. Its answer then comes late too: by how much more than its usual answer time (the
    // least of its recent ones) is how late it read the request, and the next write moves
    // back by that. Only for fast answers (within a quarter of an interval): a slow page's
    // time varies with its work, not with when it was read.
    void space_from_answer(host_state& h, std::uint64_t write, clock_type::time_point sent_at)
    {
        const auto now = clock_type::now();
        const auto took = now - sent_at;
        h.answer_times[h.answers++ % h.answer_times.size()] = took;
        const auto usual = *std::min_element(h.answer_times.begin(),
                                             h.answer_times.begin() + std::min<std::size_t>(h.answers, h.answer_times.size()));
        if (write == h.writes && took < interval_of(h) / 4)
            h.next_write = std::max(h.next_write, sent_at + interval_of(h) + (took - usual));
    }

    static clock_type::duration interval_of(const host_state& h)
    {
        return std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(1 / h.applied_rate));
    }

    // The host's pace from this answer: RateLimit fields when the host sends them (the
    // library's controller reads them), else what the learner makes of a refusal or not.
    sluice::rate_learner::advice learn(host_state& h, const sluice::rate_learner::ticket& sent,
                                       const http::response_header<>& res, std::optional<std::chrono::nanoseconds> retry_after)
    {
        const unsigned status = res.result_int();
        auto joined = [&res](std::string_view name) {
            std::string out;
            for (auto [it, end] = res.equal_range(name); it != end; ++it) {
                if (!out.empty()) out += ", ";
                out.append(it->value().data(), it->value().size());
            }
            return out;
        };
        const std::string policy = joined("RateLimit-Policy"), limit = joined("RateLimit");
        const auto now = std::chrono::nanoseconds(now_ns());
        const bool refusal = status == 429 || status == 503;
        using outcome = sluice::rate_learner::outcome;
        const auto what = refusal ? outcome::refused : status >= 500 ? outcome::failed : outcome::admitted;
        if (!policy.empty() || !limit.empty()) {
            h.fields.on_response(sluice::http_response{status, policy, limit, {}}, now, std::chrono::system_clock::now());
            if (h.fields.stats().with_fields > h.fields_seen) {
                h.fields_seen = h.fields.stats().with_fields;
                h.learner.follow(h.fields.exact_rate());
                apply_pace(h);
                // The fields set the pace; the refusal still bounds this page's retry (at
                // most the learner's longest pause, as the learner would).
                sluice::rate_learner::advice a;
                a.retry_at = now + (refusal && retry_after ? std::min(*retry_after, h.learner.options().max_pause)
                                                           : std::chrono::nanoseconds::zero());
                return a;
            }
        }
        auto a = h.learner.on_answer(now, sent, {what, refusal ? retry_after : std::nullopt});
        if (a.rate_changed) apply_pace(h);
        return a;
    }

    static std::string_view field(const http::response_header<>& res, http::field f)
    {
        auto v = res[f];
        return {v.data(), v.size()};
    }

    void robots_answer(host_state& h, const page& p, const http::response<crawl::capped_body>& res)
    {
        const unsigned status = res.result_int();
        if (status / 100 == 2) {
            robots_known(h, crawl::robots_rules::parse(res.body().text, agent_token_));
        } else if (status >= 300 && status < 400 && res.find(http::field::location) != res.end() && p.redirects < 5) {
            // Followed on this host (RFC 9309 asks for five redirects at least).
            std::string why;
            auto to = crawl::resolve("http://" + h.name + p.target, crawl::clean_reference(field(res, http::field::location)));
            auto u = to ? crawl::parse_http_url(*to, why) : std::nullopt;
            if (u && u->authority() == h.name) {
                ++outstanding_;
                h.frontier.push_front(page{u->target, 0, p.redirects + 1, false, true});
                h.wake.cancel();
                return;
            }
            robots_known(h, {});   // redirected elsewhere: as if there were none
        } else {
            robots_known(h, {});   // 4xx: there is none, everything is allowed
        }
    }

    // A redirect on the crawled hosts is followed, unless it closes a loop (or leads into
    // one), or is one too many in a row: then the pages of the chain are lost, and named.
    void redirect(host_state& h, const page& p, std::string_view location)
    {
        std::string why;
        const std::string from = "http://" + h.name + p.target;
        auto to = crawl::resolve(from, crawl::clean_reference(location));
        auto u = to ? crawl::parse_http_url(*to, why) : std::nullopt;
        auto it = u ? hosts_.find(u->authority()) : hosts_.end();
        if (it == hosts_.end()) {
            ++lost_.redirects_off;
            if (p.seed) {
                ++lost_.seeds_lost;
                note("seed " + from + " redirects to " + std::string(location) + ": not followed (" +
                     (!u ? why : "another host") + ")");
            }
            return;
        }
        if (p.redirects >= crawl::options::max_redirects) {
            ++lost_.long_chains;
            note("not fetched: " + from + " redirects to " + u->str() + ", after " + std::to_string(p.redirects) +
                 " redirects in a row: too many");
            return;
        }
        auto r = book_.redirect(h.name + p.target, u->authority() + u->target);
        using kind = crawl::frontier_book::redirect_result::kind;
        if (r.what != kind::follow) {
            lost_.redirect_loops += r.lost;
            std::string named;
            if (r.what == kind::loop) {
                // The loop as it goes round, from `from`: a long one shortened.
                std::rotate(r.cycle.begin(), r.cycle.end() - 1, r.cycle.end());
                for (std::size_t i = 0; i < r.cycle.size() && i < 8; ++i) named += "http://" + r.cycle[i] + " -> ";
                named += r.cycle.size() > 8 ? "... (" + std::to_string(r.cycle.size()) + " URLs) -> " + from : from;
                if (loops_.size() < 10) loops_.push_back(named);
                ++loops_found_;
                note("redirect loop: " + named);
            } else {
                note("not fetched: " + from + " redirects to " + u->str() + ", into a redirect loop");
            }
            return;
        }
        ++lost_.redirects;
        enqueue(*it->second, u->target, p.redirects + 1, p.seed);
    }

    // Links of a page: resolved against its URL (or its <base>), followed on the crawled
    // hosts only, unless the page asks not to be followed.
    void follow_links(host_state& h, const std::string& target, const http::response<crawl::capped_body>& res)
    {
        const auto type = field(res, http::field::content_type);
        std::string charset;
        if (auto c = type.find("charset="); c != std::string_view::npos) {
            charset = std::string(type.substr(c + 8, type.find(';', c) - c - 8));
            std::erase(charset, '"');
        }
        auto links = crawl::extract_links(res.body().text, charset);
        if (links.nofollow) {
            ++lost_.nofollow;
            return;
        }
        std::string base = "http://" + h.name + target;
        if (!links.base.empty())
            if (auto b = crawl::resolve(base, crawl::clean_reference(links.base))) base = *b;
        std::string why;
        for (auto& href : links.hrefs) {
            auto to = crawl::resolve(base, crawl::clean_reference(href));
            if (!to) continue;
            auto u = crawl::parse_http_url(*to, why);
            if (!u) continue;   // mailto:, javascript:, https: ...
            if (auto it = hosts_.find(u->authority()); it != hosts_.end()) enqueue(*it->second, u->target, 0, false);
        }
    }

    bool accepted_type(std::string_view content_type) const
    {
        std::string t(content_type.substr(0, content_type.find(';')));
        while (!t.empty() && t.back() == ' ') t.pop_back();
        for (auto& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        if (t.empty()) return true;   // no Content-Type: look at it (RFC 9110 lets the client sniff)
        return std::find(opt_.content_types.begin(), opt_.content_types.end(), t) != opt_.content_types.end();
    }

    // A refusal, a server error or a connection error: the host waits (Retry-After, else a
    // jittered backoff) before any of its pages is asked again, and this page is retried
    // or given up.
    void host_failed(host_state& h, page p, const std::string& why, std::optional<std::chrono::nanoseconds> retry_after,
                     bool error)
    {
        ++h.failures;
        auto d = retry_.after_failure(p.attempts + 1, h.failures, retry_after);
        if (!d.give_up) {
            auto until = clock_type::now() + std::chrono::duration_cast<clock_type::duration>(d.delay);
            if (d.from_retry_after) ++retry_after_pauses_;
            else ++backoff_pauses_;
            if (until > h.paused_until) h.paused_until = until;
        }
        retry_or_drop(h, std::move(p), why, error);
    }

    // A refusal: this page waits its Retry-After (the learner's bound on it), or a backoff
    // without one, and is retried or given up; the host's other pages go on at the pace,
    // unless the learner saw the host refuse everything: then the whole host waits.
    void refused(host_state& h, page p, unsigned status, std::optional<std::chrono::nanoseconds> retry_after,
                 const sluice::rate_learner::advice& advice)
    {
        ++h.failures;
        const auto steady = [](std::chrono::nanoseconds t) {
            return clock_type::time_point(std::chrono::duration_cast<clock_type::duration>(t));
        };
        auto d = retry_.after_failure(p.attempts + 1, h.failures, retry_after);
        if (!d.give_up) {
            if (d.from_retry_after) {
                ++retry_after_pauses_;
                p.not_before = steady(advice.retry_at);
            } else {
                ++backoff_pauses_;
                p.not_before = clock_type::now() + std::chrono::duration_cast<clock_type::duration>(d.delay);
            }
        }
        if (advice.paused) {
            ++host_pauses_;
            h.paused_until = std::max(h.paused_until, steady(h.learner.paused_until()));
        }
        retry_or_drop(h, std::move(p), "HTTP " + std::to_string(status), false);
    }

    // `why` says what failed (for the give-up message); refusals are not counted as errors.
    void retry_or_drop(host_state& h, page p, const std::string& why, bool error)
    {
        if (error) ++errors_;
        if (p.attempts + 1 <= opt_.retries) {
            ++p.attempts;
            ++outstanding_;   // page_done() of this attempt follows
            h.frontier.push_front(std::move(p));
            h.wake.cancel();
            return;
        }
        ++lost_.given_up;
        note("giving up on http://" + h.name + p.target + " after " + std::to_string(p.attempts + 1) +
             " attempts: " + why);
        if (p.robots) robots_known(h, crawl::robots_rules::disallow_all());   // RFC 9309 2.3.1.4
    }

    void note(const std::string& what) const
    {
        std::fprintf(stderr, "%scrawler: %s\n", tty_ ? "\r\033[K" : "", what.c_str());
    }

    std::uint64_t queued() const
    {
        std::uint64_t n = 0;
        for (auto& [name, h] : hosts_) n += h->frontier.size();
        return n + (fetching_ - in_flight_);
    }

    // The hosts' paces: one, or the range.
    std::string paces() const
    {
        double lo = 1e18, hi = 0;
        for (auto& [name, h] : hosts_) {
            lo = std::min(lo, h->learner.rate());
            hi = std::max(hi, h->learner.rate());
        }
        if (hi == 0) return "-";
        return hi - lo < 0.05 ? one_decimal(hi) : one_decimal(lo) + "-" + one_decimal(hi);
    }

    asio::awaitable<void> progress_loop()
    {
        const auto period = tty_ ? 250ms : 1000ms;
        std::uint64_t last_pages = 0;
        auto last = clock_type::now();
        auto count = [this](unsigned code) {
            auto it = status_counts_.find(code);
            return static_cast<unsigned long long>(it == status_counts_.end() ? 0 : it->second);
        };
        while (!finished_) {
            progress_.expires_after(period);
            co_await progress_.async_wait(asio::as_tuple(asio::use_awaitable));
            if (finished_) break;   // the summary follows
            auto now = clock_type::now();
            double dt = std::chrono::duration<double>(now - last).count();
            double rate = dt > 0 ? static_cast<double>(pages_ - last_pages) / dt : 0.0;
            last = now;
            last_pages = pages_;
            // The decision for the host with the most left to fetch.
            const host_state* busiest = nullptr;
            for (auto& [name, h] : hosts_)
                if (!busiest || h->frontier.size() > busiest->frontier.size()) busiest = h.get();
            std::string why;
            if (busiest) why = " | " + (hosts_.size() > 1 ? "host " + busiest->name + ": " : std::string()) + decision(*busiest);
            std::fprintf(stderr,
                         "%s[%5.1fs] pages %llu (%.1f/s) | pace %s/s | queued %llu | in flight %llu | errors %llu | "
                         "429s %llu | 503s %llu%s%s",
                         tty_ ? "\r\033[K" : "", std::chrono::duration<double>(now - start_).count(),
                         static_cast<unsigned long long>(pages_), rate, paces().c_str(),
                         static_cast<unsigned long long>(queued()), static_cast<unsigned long long>(in_flight_),
                         static_cast<unsigned long long>(errors_), count(429), count(503), why.c_str(), tty_ ? "" : "\n");
            std::fflush(stderr);
        }
        if (tty_) std::fputs("\n", stderr);
    }

    asio::io_context& io_;
    const crawl::options& opt_;
    sluice::keyed<sluice::leaky_bucket<>> pace_;   // one bucket per host, its rate the host's pace
    sluice::concurrency_limit<> global_;           // --inflight
    crawl::retry_policy retry_;                    // --retries, --backoff-*
    std::string agent_token_;                      // robots.txt's user-agent
    std::string accept_;                           // the Accept field: --content-types
    asio::steady_timer progress_;
    asio::signal_set signals_;
    bool tty_;
    std::map<std::string, std::unique_ptr<host_state>> hosts_;
    crawl::frontier_book book_;                    // which pages, each once; the redirects' loops
    std::vector<std::string> loops_;               // the first ones found, named in the summary
    std::uint64_t loops_found_ = 0;
    std::uint64_t outstanding_ = 0;   // pages queued or being fetched; 0 ends the crawl
    std::uint64_t fetching_ = 0, in_flight_ = 0;
    std::uint64_t pages_ = 0, requests_ = 0, errors_ = 0;
    std::uint64_t conn_errors_ = 0, retry_after_pauses_ = 0, backoff_pauses_ = 0, host_pauses_ = 0;
    tally lost_;
    std::vector<std::weak_ptr<connection>> connections_;
    std::map<unsigned, std::uint64_t> status_counts_;
    std::vector<double> permit_waits_;   // seconds
    bool finished_ = false, interrupted_ = false;
    clock_type::time_point start_{}, end_{};
};

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

} // namespace

int main(int argc, char** argv)
{
    crawl::options opt;
    if (int rc = crawl::parse_args(argc, argv, opt); rc >= 0) return rc;

    std::vector<std::unique_ptr<examples::spawned_server>> children;   // stopped by pid when destroyed
    if (opt.spawn > 0) {
        std::string bin = opt.server_bin.empty() ? examples::server_next_to_self() : opt.server_bin;
        for (std::uint64_t i = 0; i < opt.spawn; ++i) {
            std::string why;
            auto c = examples::spawned_server::start(bin, split_args(opt.server_args, i), why);
            if (!c) {
                std::fprintf(stderr, "crawler: server %s: %s\n", bin.c_str(), why.c_str());
                return 1;
            }
            crawl::url u;
            u.host = "127.0.0.1";
            u.port = c->port();
            opt.seeds.push_back(u);
            children.push_back(std::move(c));
        }
    }

    int rc = 0;
    try {
        asio::io_context io;
        // Seeds' hosts are resolved once, here: only they are crawled.
        std::vector<std::pair<crawl::url, std::vector<tcp::endpoint>>> seeds;
        tcp::resolver resolver(io);
        for (auto& u : opt.seeds) {
            boost::system::error_code ec;
            auto found = resolver.resolve(u.host, std::to_string(u.port), ec);
            if (ec || found.empty()) {
                std::fprintf(stderr, "crawler: --seed %s: cannot resolve '%s': %s\n", u.str().c_str(), u.host.c_str(),
                             ec ? ec.message().c_str() : "no address");
                return 1;
            }
            std::vector<tcp::endpoint> eps;
            for (auto& e : found) eps.push_back(e.endpoint());
            seeds.emplace_back(u, std::move(eps));
        }
        crawler cr(io, opt);
        cr.start(seeds);
        io.run();
        cr.print_summary();
        rc = cr.interrupted() ? 130 : cr.failures() > 0 ? 3 : 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "crawler: %s\n", e.what());
        rc = 1;
    }
    children.clear();
    return rc;
}
