// The crawler's flags: their defaults, --help, and a clear message for each bad value.
#pragma once

#include "../common/flags.hpp"
#include "url.hpp"

#include <sluice/adaptive_concurrency.hpp>
#include <sluice/rate.hpp>
#include <sluice/version.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace crawl {

struct options {
    std::vector<url> seeds;
    std::uint64_t spawn = 0;
    std::string server_bin;
    std::string server_args;
    sluice::rate per_host_rate = sluice::rate::per_second(20);
    std::optional<sluice::rate> start_rate;   // default: start_per_second()
    std::uint64_t per_host_inflight = 4;
    std::uint64_t inflight = 16;
    std::uint64_t timeout_ms = 5000;
    std::uint64_t max_pages = 0;   // 0: no limit
    // A site can make pages without end (links that change on every fetch): a crawl of it
    // ends here unless the user asks for more (0: no bound).
    std::uint64_t max_pages_per_host = 10'000;
    std::uint64_t retries = 5;
    std::uint64_t backoff_base_ms = 200;
    std::uint64_t backoff_cap_ms = 30'000;
    // On by default: a host that slows down under load is not loaded further (off: a fixed cap).
    std::optional<sluice::concurrency_algorithm> per_host_adaptive = sluice::concurrency_algorithm::aimd;
    double per_host_bandwidth = 0;   // bytes per second read from each host; 0: no cap
    std::string user_agent = "sluice-crawler/" SLUICE_VERSION_STRING;
    std::vector<std::string> content_types = {"text/html", "application/xhtml+xml"};
    std::uint64_t max_bytes = 8 << 20;
    static constexpr std::uint64_t max_redirects = 10;

    // The slow start costs the time it spends under the host's limit: from an eighth of
    // --per-host-rate it was 2 s of a 20 s crawl at 15/s. From half of it, at most 10/s (so
    // that a host's limit is still found from below), but at least an eighth: a limit of
    // 20/s is crossed after 0.6 s of the slow start's tripling per second.
    double start_per_second() const
    {
        const double r = per_host_rate.per_second();
        return start_rate ? start_rate->per_second() : std::max(r / 8, std::min(r / 2, 10.0));
    }
};

inline void print_usage(std::FILE* to)
{
    std::fputs(
        "usage: crawler (--seed URL... | --spawn-servers K [--server-bin PATH] [--server-args TEXT]) [options]\n"
        "Crawls the pages reachable from the seeds on the seeds' hosts, politely: robots.txt first,\n"
        "each host paced and its pace learnt from its refusals, Retry-After honoured.\n"
        "  --seed URL              http://HOST[:PORT]/[PATH] (repeatable); HOST a name or an address\n"
        "  --spawn-servers K       start K example servers (next to this program, or --server-bin) and\n"
        "                          crawl them; --server-args TEXT is passed to each ({i}: its index)\n"
        "  --per-host-rate TEXT    the most requests per second sent to one host (default 20/s); a rate\n"
        "                          is a count per unit of time: 20/s, 600/min, 1/2s, 10/250ms\n"
        "  --per-host-start-rate TEXT  a host's first pace (default: half of --per-host-rate, at most\n"
        "                          10/s, at least an eighth); it grows until the host refuses, then\n"
        "                          settles just under the limit measured from what the host admitted\n"
        "                          between its refusals (RateLimit fields are followed when sent)\n"
        "  --per-host-inflight N   requests in flight per host (default 4)\n"
        "  --inflight N            requests in flight in all (default 16)\n"
        "  --timeout-ms N          per request, and per wait for a permit (default 5000)\n"
        "  --max-pages N           stop finding pages after N (default 0: no limit)\n"
        "  --max-pages-per-host N  fetch at most N pages of one host (default 10000; 0: no bound): a site\n"
        "                          can make pages without end; links past it are counted, not followed\n"
        "  --retries N             retries of a page after a 429, 503, 5xx or connection error (default 5)\n"
        "  --backoff-base-ms N     a page refused without Retry-After waits a random time up to\n"
        "  --backoff-cap-ms N      min(cap, base x 2^(k-1)) before its retry, k the host's failures in a\n"
        "                          row; after a connection error or another 5xx the whole host waits so\n"
        "                          (defaults 200 and 30000). A refused page waits its Retry-After; the\n"
        "                          host's other pages go on at its pace, unless it refuses everything\n"
        "  --per-host-adaptive aimd|vegas|gradient2|off  each host's in-flight cap follows its latency\n"
        "                          (sluice::adaptive_concurrency, at most --per-host-inflight; default\n"
        "                          aimd, kept where latency stays under 1.8x what a request alone\n"
        "                          takes); off: --per-host-inflight, fixed\n"
        "  --per-host-bandwidth BYTES/s  bytes per second read from each host, e.g. 500kB/s, 2MiB/s\n"
        "  --user-agent TEXT       the User-Agent field; its product token (the leading letters, '-'\n"
        "                          and '_') picks the robots.txt group (default sluice-crawler/" SLUICE_VERSION_STRING ")\n"
        "  --content-types LIST    media types read and parsed as pages (default\n"
        "                          text/html,application/xhtml+xml); others are skipped after the header\n"
        "  --max-bytes SIZE        a page larger than this is skipped, not read (default 8MiB; B, kB, MB,\n"
        "                          KiB, MiB)\n"
        "Redirects (301, 302, 303, 307, 308) are followed on the crawled hosts, at most 10 in a row.\n"
        "robots.txt is read up to 500 KiB (RFC 9309), a longer one up to its last line within them.\n"
        "Progress goes to stderr; the summary to stdout.\n"
        "exit code: 0  every page found was fetched (links skipped by robots.txt, --content-types or\n"
        "              --max-bytes, redirects off the crawled hosts, and pages past --max-pages, are\n"
        "              listed, not failures)\n"
        "           3  the crawl finished, but some pages were not fetched: given up after --retries,\n"
        "              answered with an error status (a 404 seed too), blocked by an unreachable\n"
        "              robots.txt, in a redirect loop (a page that redirects to itself too), after\n"
        "              more than 10 redirects in a row, or past --max-pages-per-host; each is named\n"
        "              on stderr, the loops and the hosts past their bound in the summary too\n"
        "           2  bad usage   1  could not run (a host that does not resolve, a server that did not\n"
        "              start)   130  interrupted\n",
        to);
}

// 500kB, 2MiB, 8MB, 64000B: k, M, G decimal; Ki, Mi, Gi binary.
inline bool parse_bytes(std::string_view v, double& out)
{
    if (!v.ends_with("B")) return false;
    v.remove_suffix(1);
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
    return true;
}

/// Reads the flags into o. Returns -1 to go on, else the exit code (0 after --help).
inline int parse_args(int argc, char** argv, options& o)
{
    examples::flag_reader f("crawler", argc, argv);
    auto rate = [](std::string_view flag, const std::string& v, sluice::rate& out) {
        auto r = sluice::parse_rate(v);
        if (!r) {
            std::fprintf(stderr,
                         "crawler: %.*s '%s': %s: a rate is a count per unit of time, e.g. 20/s, 600/min, 1/2s, "
                         "10/250ms\n",
                         static_cast<int>(flag.size()), flag.data(), v.c_str(), r.error().message().c_str());
            return false;
        }
        out = *r;
        return true;
    };
    while (f.next()) {
        if (f.help()) {
            print_usage(stdout);
            return 0;
        }
        auto value = f.value();   // every flag takes a value
        if (!value) return 2;
        const std::string_view a = f.flag();
        const std::string& v = *value;
        bool ok = true;
        if (a == "--seed") {
            std::string why;
            auto u = parse_http_url(v, why);
            if (!u) {
                std::fprintf(stderr, "crawler: --seed '%s': %s\n", v.c_str(), why.c_str());
                return 2;
            }
            o.seeds.push_back(*u);
        } else if (a == "--spawn-servers") {
            ok = examples::parse_number(v, o.spawn) && o.spawn > 0 && o.spawn <= 64;
        } else if (a == "--server-bin") {
            o.server_bin = v;
        } else if (a == "--server-args") {
            o.server_args = v;
        } else if (a == "--per-host-rate") {
            if (!rate(a, v, o.per_host_rate)) return 2;
        } else if (a == "--per-host-start-rate") {
            sluice::rate r = sluice::rate::per_second(1);
            if (!rate(a, v, r)) return 2;
            o.start_rate = r;
        } else if (a == "--per-host-inflight") {
            ok = examples::parse_number(v, o.per_host_inflight) && o.per_host_inflight > 0;
        } else if (a == "--inflight") {
            ok = examples::parse_number(v, o.inflight) && o.inflight > 0;
        } else if (a == "--timeout-ms") {
            ok = examples::parse_number(v, o.timeout_ms) && o.timeout_ms > 0 && o.timeout_ms <= 3'600'000;
        } else if (a == "--max-pages") {
            ok = examples::parse_number(v, o.max_pages);
        } else if (a == "--max-pages-per-host") {
            ok = examples::parse_number(v, o.max_pages_per_host);
        } else if (a == "--retries") {
            ok = examples::parse_number(v, o.retries) && o.retries <= 1000;
        } else if (a == "--backoff-base-ms") {
            ok = examples::parse_number(v, o.backoff_base_ms) && o.backoff_base_ms > 0 && o.backoff_base_ms <= 3'600'000;
        } else if (a == "--backoff-cap-ms") {
            ok = examples::parse_number(v, o.backoff_cap_ms) && o.backoff_cap_ms > 0 && o.backoff_cap_ms <= 3'600'000;
        } else if (a == "--per-host-adaptive") {
            o.per_host_adaptive = sluice::parse_concurrency_algorithm(v);
            ok = o.per_host_adaptive.has_value() || v == "off";
        } else if (a == "--per-host-bandwidth") {
            ok = v.ends_with("/s") && parse_bytes(std::string_view(v).substr(0, v.size() - 2), o.per_host_bandwidth) &&
                 o.per_host_bandwidth >= 1024 && o.per_host_bandwidth <= 1e12;
        } else if (a == "--user-agent") {
            ok = !v.empty() && v.find_first_of("\r\n") == std::string::npos;
            o.user_agent = v;
        } else if (a == "--content-types") {
            o.content_types.clear();
            for (std::string_view rest = v; !rest.empty();) {
                auto comma = rest.find(',');
                std::string t(rest.substr(0, comma));
                for (auto& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
                if (t.find('/') == std::string::npos) ok = false;
                o.content_types.push_back(t);
                rest.remove_prefix(comma == std::string_view::npos ? rest.size() : comma + 1);
            }
            ok = ok && !o.content_types.empty();
        } else if (a == "--max-bytes") {
            double b = 0;
            ok = parse_bytes(v, b) && b <= 1e12;
            o.max_bytes = static_cast<std::uint64_t>(b);
        } else {
            f.unknown();
            print_usage(stderr);
            return 2;
        }
        if (!ok) {
            f.bad_value(v);
            return 2;
        }
    }
    if (o.backoff_cap_ms < o.backoff_base_ms) {
        std::fprintf(stderr, "crawler: --backoff-cap-ms must not be below --backoff-base-ms\n");
        return 2;
    }
    if (o.start_rate && o.start_rate->per_second() > o.per_host_rate.per_second()) {
        std::fprintf(stderr, "crawler: --per-host-start-rate must not be above --per-host-rate\n");
        return 2;
    }
    if (o.seeds.empty() == (o.spawn == 0)) {
        std::fprintf(stderr, "crawler: give either --seed URL (repeatable) or --spawn-servers K\n");
        print_usage(stderr);
        return 2;
    }
    return -1;
}

} // namespace crawl
