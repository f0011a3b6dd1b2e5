// Paces work at a given rate with a leaky bucket and prints, every second, the achieved
// rate next to the target. The work is a coroutine per "worker" that waits for its slot.
//
//   pace_demo --rate 200 --seconds 3 [--workers 4] [--strict]

#include <sluice/sluice.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

struct options {
    std::string rate = "200/s";
    double seconds = 3;
    int workers = 4;
    bool strict = false;
};

[[noreturn]] void usage(const char* msg)
{
    std::fprintf(stderr, "pace_demo: %s\nusage: pace_demo [--rate 200|200/s|5/min] [--seconds S] [--workers W] [--strict]\n", msg);
    std::exit(2);
}

options parse(int argc, char** argv)
{
    options o;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (auto eq = a.find('='); eq != std::string::npos) return a.substr(eq + 1);
            if (i + 1 >= argc) usage(("missing value for " + a).c_str());
            return argv[++i];
        };
        std::string key = a.substr(0, a.find('='));
        if (key == "--rate") o.rate = value();
        else if (key == "--seconds") o.seconds = std::atof(value().c_str());
        else if (key == "--workers") o.workers = std::atoi(value().c_str());
        else if (key == "--strict") o.strict = true;
        else usage(("unknown flag " + a).c_str());
    }
    if (o.rate.find('/') == std::string::npos) o.rate += "/s";
    if (!(o.seconds > 0) || o.workers < 1) usage("--seconds and --workers must be positive");
    return o;
}

} // namespace

int main(int argc, char** argv)
{
    options opt = parse(argc, argv);
    auto r = sluice::parse_rate(opt.rate);
    if (!r) usage(("bad rate '" + opt.rate + "': " + r.error().message()).c_str());

    asio::io_context io;
    sluice::leaky_bucket bucket(io, *r, sluice::limiter_options{.strict = opt.strict});
    const auto start = clock_type::now();
    const auto end = start + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(opt.seconds));
    std::vector<std::int64_t> stamps;   // when each unit of work was released (ns since start)
    stamps.reserve(static_cast<std::size_t>(r->per_second() * opt.seconds * 1.1) + 16);

    std::printf("pacing %d workers at %.1f/s for %.1f s (%s wait)\n", opt.workers, r->per_second(), opt.seconds,
                opt.strict ? "strict" : "default");

    for (int w = 0; w < opt.workers; ++w) {
        asio::co_spawn(io, [&]() -> asio::awaitable<void> {
            while (clock_type::now() < end) {
                // Never wait past the end of the run: fail fast instead.
                auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(end - clock_type::now());
                if (!co_await bucket.acquire(left)) break;
                stamps.push_back((clock_type::now() - start).count());
            }
        }, asio::detached);
    }

    // Report each second: the work released in that second against the target.
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        asio::steady_timer t(io);
        std::size_t seen = 0;
        for (int sec = 1; start + std::chrono::seconds(sec) <= end + 1ms; ++sec) {
            t.expires_at(start + std::chrono::seconds(sec));
            co_await t.async_wait(asio::use_awaitable);
            std::size_t now = stamps.size();
            std::printf("t=%2ds  target %9.1f/s  achieved %9.1f/s\n", sec, r->per_second(), double(now - seen));
            std::fflush(stdout);
            seen = now;
        }
    }, asio::detached);

    io.run();

    double elapsed = stamps.size() > 1 ? double(stamps.back() - stamps.front()) / 1e9 : 0;
    double achieved = elapsed > 0 ? double(stamps.size() - 1) / elapsed : 0;
    std::vector<double> err;
    double gap = 1e9 / r->per_second();
    for (std::size_t i = 1; i < stamps.size(); ++i)
        err.push_back(std::abs(double(stamps[i] - stamps[i - 1]) - gap) / gap);
    std::sort(err.begin(), err.end());
    auto pct = [&](double p) { return err.empty() ? 0.0 : err[std::min(err.size() - 1, std::size_t(p * double(err.size())))]; };
    std::printf("summary: %zu released in %.3f s: %.1f/s for a target of %.1f/s (%+.3f %%); gap error p50 %.2f %%, p99 %.2f %%\n",
                stamps.size(), elapsed, achieved, r->per_second(), (achieved / r->per_second() - 1) * 100,
                pct(0.5) * 100, pct(0.99) * 100);
    return 0;
}
