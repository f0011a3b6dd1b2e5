// Prints an exposition with every family of limiter_stats (three limiters, known values)
// and a histogram, for tests/prometheus_parse.py to read with prometheus_client's parsers:
//     prometheus_print text|openmetrics
#include <sluice/prometheus.hpp>

#include <chrono>
#include <cstdio>
#include <limits>
#include <string_view>

namespace prom = sluice::prometheus;
using namespace std::chrono_literals;

int main(int argc, char** argv)
{
    const std::string_view which = argc > 1 ? argv[1] : "";
    if (which != "text" && which != "openmetrics") {
        std::fprintf(stderr, "usage: prometheus_print text|openmetrics\n");
        return 2;
    }
    prom::writer_options o;
    o.exposition = which == "text" ? prom::format::text : prom::format::openmetrics;
    o.constant_labels = {{"service", "say \"hi\"\\\n"}};

    // Every field a different value: field k of the struct is 100 + k (by declaration order),
    // so that the script can tell a sample read from the wrong field.
    sluice::limiter_stats all;
    all.admitted = 100;
    all.refused = 101;
    all.timed_out = 102;
    all.cancelled = 103;
    all.closed = 104;
    all.waiting = 105;
    all.waited = 106;
    all.total_wait = 107500ms;
    all.longest_wait = 108250ms;
    all.try_admitted = 109;
    all.try_refused = 110;
    all.keys = {111, 112, 113, 114, 115, 116};
    all.backend.commands = 117;
    all.backend.errors = 118;
    all.backend.fallback_decisions = 119;
    all.backend.lease_expired = 120;
    all.backend.links_lost = 121;
    all.backend.master_switches = 122;
    all.backend.last_round_trip = 123ms;
    all.backend.clock_offset = -124ms;
    all.backend.degraded = true;
    all.adaptive = {126, 127, 128, 129, 130, 131, 132, 133, 134, 135, 136, 137};
    // Shadow mode (its `enabled` is field 138): only a limiter in it writes the group.
    all.shadow = {true, 139, 140, 141, 142s, 143500ms};

    sluice::limiter_stats few;
    few.admitted = 1;
    few.try_refused = 2;

    const prom::label zone[] = {{"zone", "eu"}};
    const prom::named_stats limiters[] = {
        {"all", all},
        {"few", few, {true, true, false, false, false}, zone},
        {"caf\xc3\xa9", {}, {true, false, false, false, false}},
    };

    std::string out;
    prom::writer w(out, o);
    prom::write_stats(w, limiters);
    w.family("wait_seconds", prom::metric_type::histogram, "Time \"delayed\" requests waited.", "seconds");
    const double bounds[] = {0.001, 0.5, 1, std::numeric_limits<double>::infinity()};
    const std::uint64_t counts[] = {0, 2, 3, 4};
    for (int i = 0; i < 4; ++i) w.bucket({}, bounds[i], counts[i]);
    w.sample("_sum", {}, 2.75);
    w.sample("_count", {}, 4);
    w.finish();
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
}
