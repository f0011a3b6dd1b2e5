// loadgen: a constant-rate (open-loop) HTTP load generator, in the manner of wrk2.
//
// A sluice::leaky_bucket releases request i at its intended time t0 + i / rate, whether or
// not earlier requests have been answered. Each request goes out on an idle keep-alive
// connection of the pool, on a new connection (up to --max-connections), or waits in a
// queue for the first connection to free up; in every case its latency is measured from
// its intended send time, not from when it could be sent. Measuring from the actual send
// would hide a stall of the server behind the few requests caught in it ("coordinated
// omission"): every request that should have gone out during the stall waits too.
//
//   loadgen --url http://127.0.0.1:8080/api/items --rate 1000 --seconds 10 --csv run.csv --plot run.png
//   loadgen --spawn-server --rate 200 --seconds 5

#include "../common/flags.hpp"
#include "../common/http_connection.hpp"
#include "../common/loopback_url.hpp"
#include "../common/spawn_server.hpp"
#include "latency_histogram.hpp"

#include <sluice/leaky_bucket.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace asio = boost::asio;
using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

struct options {
    std::string url;
    std::string rate = "100/s";
    double seconds = 10;
    unsigned connections = 8;
    unsigned max_connections = 0; // default 4 x connections
    bool strict = false;
    unsigned timeout_ms = 10000;
    std::string csv, plot;
    bool quiet = false;
    bool spawn = false;
    std::string server_bin;
    std::string server_rate = "1000000/s";
    std::string server_burst = "1000000";
};

void usage(std::FILE* to)
{
    std::fputs(
        "usage: loadgen --url http://127.0.0.1:PORT/path [options]\n"
        "       loadgen --spawn-server [--url /path] [options]\n"
        "  --rate N|TEXT        requests per second, e.g. 200 or 12000/min (default 100/s)\n"
        "  --seconds S          length of the run (default 10): exactly rate x S requests\n"
        "  --connections C      keep-alive connections opened up front (default 8)\n"
        "  --max-connections M  more are opened while all are busy, up to M (default 4 x C);\n"
        "                       beyond, requests queue (latency still from their intended time)\n"
        "  --strict             strict pacing (sluice::limiter_options::strict): each release on\n"
        "                       time, at the price of a busy core\n"
        "  --timeout-ms N       per request (default 10000)\n"
        "  --csv FILE           one row per second: second,sent,completed,errors,rate,p50_ms,p99_ms\n"
        "  --plot FILE.png      draw rate and latency over time with gnuplot (implies a CSV,\n"
        "                       FILE.png.csv unless --csv is given)\n"
        "  --quiet              no progress lines\n"
        "  --spawn-server       start the example server on a free loopback port first\n"
        "  --server-bin PATH    (default: 'server' next to this executable)\n"
        "  --server-rate TEXT   its per-client rate (default 1000000/s: not the bottleneck)\n"
        "  --server-burst N     its per-client burst (default 1000000)\n",
        to);
}

double ms(std::int64_t ns) { return static_cast<double>(ns) / 1e6; }

struct request {
    std::uint64_t index;
    clock_type::time_point intended;
};

// One second's figures, for the progress line and the CSV.
struct second_stats {
    std::uint64_t sent = 0, completed = 0, errors = 0;
    loadgen::latency_histogram latency;
};

struct generator {
    generator(asio::io_context& io, const options& o, sluice::rate r, std::uint64_t total)
        : io(io), opts(o), pace_rate(r), total(total),
          // The slack lets the schedule survive a late wake-up of this process (up to 1 s
          // of catch-up), as an open-loop generator must: the server sees rate x seconds
          // requests whatever happens on this side.
          bucket(io, r, 1s, sluice::limiter_options{.strict = o.strict}), ticker(io), signals(io, SIGINT, SIGTERM)
    {
    }

    asio::io_context& io;
    const options& opts;
    const bool tty = ::isatty(STDERR_FILENO) != 0;
    sluice::rate pace_rate;
    std::uint64_t total;
    examples::loopback_url url;
    sluice::leaky_bucket<> bucket;
    asio::steady_timer ticker;
    asio::signal_set signals;

    clock_type::time_point t0{};
    bool scheduling_done = false, stopping = false, finished = false;
    std::vector<std::unique_ptr<examples::http_connection>> idle;
    unsigned open_connections = 0, peak_connections = 0;
    std::deque<request> waiting;
    std::size_t peak_queue = 0;
    std::uint64_t scheduled = 0, sent = 0, completed = 0, outstanding = 0;

    loadgen::latency_histogram latency; // from the intended send time
    loadgen::latency_histogram service; // from the actual send time
    std::map<std::string, std::uint64_t> errors;
    std::map<unsigned, std::uint64_t> by_status;
    second_stats this_second;
    std::vector<std::string> csv_rows;
    clock_type::time_point last_completion{}, first_send{}, last_send{};

    std::chrono::milliseconds timeout() const { return std::chrono::milliseconds(opts.timeout_ms); }

    asio::awaitable<void> schedule()
    {
        // A fresh bucket would grant a slack's worth of permits at once: take them first.
        while (bucket.try_acquire().admitted) {
        }
        for (std::uint64_t i = 0; i < total; ++i) {
            if (!co_await bucket.acquire() || stopping) break;
            auto now = clock_type::now();
            if (i == 0) start_clock(now);
            // The bucket grants on a grid of `interval`, never early; the first grant came
            // a little late, so the grid's origin is the earliest grant_i - i x interval.
            // An intended time is thus never after the actual grant.
            auto slot = t0 + pace_rate.interval() * static_cast<std::int64_t>(i);
            if (now < slot) {
                t0 -= slot - now;
                slot = now;
            }
            dispatch(request{i, slot});
        }
        scheduling_done = true;
        maybe_finish();
    }

    void start_clock(clock_type::time_point now)
    {
        t0 = now;
        asio::co_spawn(io, tick(), asio::detached);
    }

    void dispatch(request r)
    {
        ++scheduled;
        ++outstanding;
        if (!idle.empty()) {
            auto c = std::move(idle.back());
            idle.pop_back();
            asio::co_spawn(io, serve(std::move(c), r), asio::detached);
        } else if (open_connections < opts.max_connections) {
            ++open_connections;
            peak_connections = std::max(peak_connections, open_connections);
            auto c = std::make_unique<examples::http_connection>(io.get_executor(), asio::ip::tcp::endpoint{url.address, url.port},
                                                                 url.host_field);
            asio::co_spawn(io, serve(std::move(c), r), asio::detached);
        } else {
            waiting.push_back(r);
            peak_queue = std::max(peak_queue, waiting.size());
        }
    }

    // Runs requests on one connection until no request waits for one.
    asio::awaitable<void> serve(std::unique_ptr<examples::http_connection> conn, request r)
    {
        for (;;) {
            auto sent_at = clock_type::now();
            if (sent == 0) first_send = sent_at;
            last_send = sent_at;
            ++sent;
            ++this_second.sent;
            auto result = co_await conn->get(url.target, timeout());
            auto done = clock_type::now();
            on_done(r, sent_at, done, result);
            if (waiting.empty()) break;
            r = waiting.front();
            waiting.pop_front();
        }
        idle.push_back(std::move(conn));
        maybe_finish();
    }

    void on_done(const request& r, clock_type::time_point sent_at, clock_type::time_point done,
                 const examples::http_result& result)
    {
        --outstanding;
        ++completed;
        ++this_second.completed;
        last_completion = done;
        if (result.fail != examples::failure::none) {
            ++errors[examples::to_string(result.fail)];
            ++this_second.errors;
            return;
        }
        auto lat = std::chrono::duration_cast<std::chrono::nanoseconds>(done - r.intended).count();
        latency.record(lat);
        this_second.latency.record(lat);
        service.record(std::chrono::duration_cast<std::chrono::nanoseconds>(done - sent_at).count());
        unsigned status = result.response.result_int();
        ++by_status[status];
        if (status < 200 || status > 299) {
            ++errors["status " + std::to_string(status)];
            ++this_second.errors;
        }
    }

    void close_second(double length_s)
    {
        auto& s = this_second;
        auto row = std::to_string(csv_rows.size() + 1) + "," + std::to_string(s.sent) + "," + std::to_string(s.completed) +
                   "," + std::to_string(s.errors) + ",";
        char buf[128];
        std::snprintf(buf, sizeof buf, "%.1f,%.3f,%.3f", static_cast<double>(s.completed) / length_s,
                      ms(s.latency.percentile(50)), ms(s.latency.percentile(99)));
        row += buf;
        csv_rows.push_back(row);
        // On a terminal one line, rewritten each second; elsewhere (a log, a test) a line a
        // second, as before.
        if (!opts.quiet)
            std::fprintf(stderr, "%s[%3zus] sent %llu  completed %llu  errors %llu  rate %.1f/s  p50 %.2f ms  p99 %.2f ms  queued %zu%s",
                         tty ? "\r\033[K" : "", csv_rows.size(), static_cast<unsigned long long>(s.sent),
                         static_cast<unsigned long long>(s.completed), static_cast<unsigned long long>(s.errors),
                         static_cast<double>(s.completed) / length_s, ms(s.latency.percentile(50)),
                         ms(s.latency.percentile(99)), waiting.size(), tty ? "" : "\n");
        s.sent = s.completed = s.errors = 0;
        s.latency.reset();
    }

    asio::awaitable<void> tick()
    {
        for (auto next = t0 + 1s;; next += 1s) {
            ticker.expires_at(next);
            auto [ec] = co_await ticker.async_wait(asio::as_tuple(asio::use_awaitable));
            if (ec) break;
            close_second(1.0);
        }
    }

    void stop()
    {
        stopping = true;
        bucket.close();
    }

    void maybe_finish()
    {
        if (finished || !scheduling_done || outstanding != 0) return;
        finished = true;
        // The last, partial second, unless the run ended right on a boundary.
        if (t0 != clock_type::time_point{}) {
            double partial = std::chrono::duration<double>(last_completion - t0).count() - static_cast<double>(csv_rows.size());
            if (this_second.completed + this_second.sent > 0) close_second(std::max(partial, 1e-3));
        }
        ticker.cancel();
        signals.cancel();
        for (auto& c : idle) c->close();
        if (tty && !opts.quiet && !csv_rows.empty()) std::fputs("\n", stderr);   // keep the last progress line
    }

    asio::awaitable<void> open_pool()
    {
        unsigned n = std::min(opts.connections, opts.max_connections);
        for (unsigned i = 0; i < n; ++i) {
            auto c = std::make_unique<examples::http_connection>(io.get_executor(), asio::ip::tcp::endpoint{url.address, url.port},
                                                                 url.host_field);
            if (auto ec = co_await c->connect(timeout()); ec) {
                std::fprintf(stderr, "loadgen: cannot connect to %s:%u: %s\n", url.address.to_string().c_str(), url.port,
                             ec.message().c_str());
                scheduling_done = true;
                maybe_finish();
                co_return;
            }
            idle.push_back(std::move(c));
            ++open_connections;
        }
        peak_connections = open_connections;
        co_await schedule();
    }
};

int run_gnuplot(const std::string& csv, const std::string& png, double rate, double seconds)
{
    std::string script = std::string(seconds <= 30 ? "set xtics 1;" : "") +
                         "set terminal pngcairo size 1000,600 noenhanced; set output '" + png +
                         "'; set datafile separator ','; set key autotitle columnhead top left; set grid;"
                         "set title 'loadgen: achieved rate and latency (from intended send time)';"
                         "set xlabel 'second'; set ylabel 'requests/s'; set y2label 'latency (ms)';"
                         "set yrange [0:" + std::to_string(rate * 1.5) + "]; set y2range [0:*]; set ytics nomirror; set y2tics;"
                         "plot '" + csv + "' using 1:5 with linespoints lw 2 title 'achieved rate', " +
                         "'' using 1:6 axes x1y2 with lines lw 2 title 'p50 latency', " +
                         "'' using 1:7 axes x1y2 with lines lw 2 title 'p99 latency'";
    pid_t pid = ::fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        ::execlp("gnuplot", "gnuplot", "-e", script.c_str(), static_cast<char*>(nullptr));
        ::_exit(127);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

} // namespace

int main(int argc, char** argv)
{
    options o;
    examples::flag_reader f("loadgen", argc, argv);
    while (f.next()) {
        bool ok = true;
        if (f.help()) {
            usage(stdout);
            return 0;
        } else if (f.is("--url")) ok = f.text(o.url);
        else if (f.is("--rate")) ok = f.text(o.rate);
        else if (f.is("--seconds")) ok = f.number(o.seconds);
        else if (f.is("--connections")) ok = f.number(o.connections);
        else if (f.is("--max-connections")) ok = f.number(o.max_connections);
        else if (f.is("--strict")) o.strict = true;
        else if (f.is("--timeout-ms")) ok = f.number(o.timeout_ms);
        else if (f.is("--csv")) ok = f.text(o.csv);
        else if (f.is("--plot")) ok = f.text(o.plot);
        else if (f.is("--quiet")) o.quiet = true;
        else if (f.is("--spawn-server")) o.spawn = true;
        else if (f.is("--server-bin")) ok = f.text(o.server_bin);
        else if (f.is("--server-rate")) ok = f.text(o.server_rate);
        else if (f.is("--server-burst")) ok = f.text(o.server_burst);
        else {
            f.unknown();
            usage(stderr);
            return 2;
        }
        if (!ok) return 2;
    }
    if (o.connections == 0 || o.timeout_ms == 0 || !(o.seconds > 0)) {
        std::fprintf(stderr, "loadgen: --connections, --timeout-ms and --seconds must be positive\n");
        return 2;
    }
    if (o.max_connections == 0) o.max_connections = 4 * o.connections;
    bool plain_number = !o.rate.empty() && o.rate.find_first_not_of("0123456789.") == std::string::npos;
    auto r = sluice::parse_rate(plain_number ? o.rate + "/s" : o.rate);
    if (!r) {
        std::fprintf(stderr, "loadgen: --rate '%s': %s\n", o.rate.c_str(), r.error().message().c_str());
        return 2;
    }
    double total_d = std::round(r->per_second() * o.seconds);
    if (total_d < 1 || total_d > 1e9) {
        std::fprintf(stderr, "loadgen: --rate x --seconds gives %.0f requests; 1 to 10^9 are supported\n", total_d);
        return 2;
    }
    if (!o.plot.empty() && o.csv.empty()) o.csv = o.plot + ".csv";

    std::unique_ptr<examples::spawned_server> server;
    if (o.spawn) {
        int rc = 0;
        server = examples::spawn_server_for("loadgen", o.server_bin, {"--rate", o.server_rate, "--burst", o.server_burst},
                                            o.url, rc);
        if (!server) return rc;
    }
    auto url = examples::client_url("loadgen", o.url);
    if (!url) return 2;

    asio::io_context io;
    generator g(io, o, *r, static_cast<std::uint64_t>(total_d));
    g.url = *url;
    asio::co_spawn(io, g.open_pool(), asio::detached);
    g.signals.async_wait([&g](boost::system::error_code ec, int) {
        if (!ec) g.stop();
    });
    io.run();
    if (g.scheduled == 0) return 1; // could not connect

    // Over the span of the actual sends, plus the interval the last one stands for: exactly
    // the target rate when every request went out on schedule.
    double span = std::chrono::duration<double>(g.last_send - g.first_send + r->interval()).count();
    auto count = [](std::uint64_t v) { return static_cast<unsigned long long>(v); };
    std::uint64_t error_total = 0;
    for (auto& [k, v] : g.errors) error_total += v;
    std::printf("target rate: %.1f/s for %.1f s (%llu requests)\n", r->per_second(), o.seconds, count(g.total));
    std::printf("sent: %llu  completed: %llu  errors: %llu", count(g.sent), count(g.completed), count(error_total));
    for (auto& [kind, n] : g.errors) std::printf("  [%s: %llu]", kind.c_str(), count(n));
    std::printf("\nachieved rate: %.1f/s (%llu sent over %.3f s)\n", static_cast<double>(g.sent) / span, count(g.sent), span);
    std::printf("connections: %u opened at most, %zu requests queued at most\n", g.peak_connections, g.peak_queue);
    auto line = [&](const char* what, const loadgen::latency_histogram& h) {
        std::printf("%s p50=%.3f p90=%.3f p99=%.3f p99.9=%.3f max=%.3f ms\n", what, ms(h.percentile(50)),
                    ms(h.percentile(90)), ms(h.percentile(99)), ms(h.percentile(99.9)), ms(h.max()));
    };
    line("latency (from intended send time): ", g.latency);
    line("service time (from actual send):   ", g.service);

    if (!o.csv.empty()) {
        std::FILE* f = std::fopen(o.csv.c_str(), "w");
        if (!f) {
            std::fprintf(stderr, "loadgen: cannot write %s\n", o.csv.c_str());
        } else {
            std::fputs("second,sent,completed,errors,achieved_rate,p50_ms,p99_ms\n", f);
            for (auto& row : g.csv_rows) std::fprintf(f, "%s\n", row.c_str());
            std::fclose(f);
            std::printf("csv: %s (%zu rows)\n", o.csv.c_str(), g.csv_rows.size());
        }
    }
    if (!o.plot.empty()) {
        int rc = run_gnuplot(o.csv, o.plot, r->per_second(), o.seconds);
        if (rc == 127)
            std::fprintf(stderr, "loadgen: --plot: gnuplot not found; install it (Debian: apt-get install gnuplot-nox) "
                                 "or plot %s yourself\n", o.csv.c_str());
        else if (rc != 0)
            std::fprintf(stderr, "loadgen: --plot: gnuplot failed (exit %d); the data is in %s\n", rc, o.csv.c_str());
        else
            std::printf("plot: %s\n", o.plot.c_str());
    }
    if (server) server->stop();
    return 0;
}
