// sluice::prometheus: limiter_stats and other families in the Prometheus text format 0.0.4
// and OpenMetrics 1.0, exact text for known values; escaping; several limiters in one
// family; names refused rather than fixed. (tests/prometheus_parse.py reads the output
// with prometheus_client's own parsers.)
#include <sluice/error.hpp>
#include <sluice/prometheus.hpp>

#include <boost/system/system_error.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <string>

namespace prom = sluice::prometheus;
using namespace std::chrono_literals;

namespace {

sluice::limiter_stats known()
{
    sluice::limiter_stats s;
    s.admitted = 7;
    s.refused = 2;
    s.timed_out = 1;
    s.cancelled = 0;
    s.closed = 3;
    s.waiting = 4;
    s.waited = 5;
    s.total_wait = 1500ms;
    s.longest_wait = 250ms;
    s.try_admitted = 11;
    s.try_refused = 6;
    return s;
}

constexpr prom::stats_groups local{true, true, false, false, false};

// Whether f() throws system_error(invalid_option), and nothing else.
template <class F>
bool refused(F f)
{
    try {
        f();
    } catch (const boost::system::system_error& e) {
        return e.code() == sluice::error::invalid_option;
    }
    return false;
}

std::string one(prom::writer_options o, const prom::named_stats& l)
{
    std::string out;
    prom::writer w(out, std::move(o));
    prom::write_stats(w, std::span<const prom::named_stats>(&l, 1));
    w.finish();
    return out;
}

} // namespace

TEST_SUITE_BEGIN("prometheus");

TEST_CASE("a limiter's requests and tries, exactly, in the text format")
{
    const std::string expected = R"(# HELP sluice_limiter_requests_total Requests that may wait (acquire), by outcome.
# TYPE sluice_limiter_requests_total counter
sluice_limiter_requests_total{limiter="api",outcome="admitted"} 7
sluice_limiter_requests_total{limiter="api",outcome="refused"} 2
sluice_limiter_requests_total{limiter="api",outcome="timed_out"} 1
sluice_limiter_requests_total{limiter="api",outcome="cancelled"} 0
sluice_limiter_requests_total{limiter="api",outcome="closed"} 3
# HELP sluice_limiter_waiting Requests waiting now.
# TYPE sluice_limiter_waiting gauge
sluice_limiter_waiting{limiter="api"} 4
# HELP sluice_limiter_waited_total Admitted requests that had to wait.
# TYPE sluice_limiter_waited_total counter
sluice_limiter_waited_total{limiter="api"} 5
# HELP sluice_limiter_wait_seconds_total Time admitted requests spent waiting, summed.
# TYPE sluice_limiter_wait_seconds_total counter
sluice_limiter_wait_seconds_total{limiter="api"} 1.5
# HELP sluice_limiter_longest_wait_seconds The longest time one admitted request waited.
# TYPE sluice_limiter_longest_wait_seconds gauge
sluice_limiter_longest_wait_seconds{limiter="api"} 0.25
# HELP sluice_limiter_try_acquire_total Tries (try_acquire), by outcome.
# TYPE sluice_limiter_try_acquire_total counter
sluice_limiter_try_acquire_total{limiter="api",outcome="admitted"} 11
sluice_limiter_try_acquire_total{limiter="api",outcome="refused"} 6
)";
    CHECK(one({}, {"api", known(), local}) == expected);
}

TEST_CASE("the same in OpenMetrics: families without _total, UNIT, constant labels first, # EOF")
{
    prom::writer_options o;
    o.exposition = prom::format::openmetrics;
    o.prefix = "app_";
    o.constant_labels = {{"service", "search"}};
    const std::string expected = R"(# HELP app_limiter_requests Requests that may wait (acquire), by outcome.
# TYPE app_limiter_requests counter
app_limiter_requests_total{service="search",limiter="api",outcome="admitted"} 7
app_limiter_requests_total{service="search",limiter="api",outcome="refused"} 2
app_limiter_requests_total{service="search",limiter="api",outcome="timed_out"} 1
app_limiter_requests_total{service="search",limiter="api",outcome="cancelled"} 0
app_limiter_requests_total{service="search",limiter="api",outcome="closed"} 3
# HELP app_limiter_waiting Requests waiting now.
# TYPE app_limiter_waiting gauge
app_limiter_waiting{service="search",limiter="api"} 4
# HELP app_limiter_waited Admitted requests that had to wait.
# TYPE app_limiter_waited counter
app_limiter_waited_total{service="search",limiter="api"} 5
# HELP app_limiter_wait_seconds Time admitted requests spent waiting, summed.
# TYPE app_limiter_wait_seconds counter
# UNIT app_limiter_wait_seconds seconds
app_limiter_wait_seconds_total{service="search",limiter="api"} 1.5
# HELP app_limiter_longest_wait_seconds The longest time one admitted request waited.
# TYPE app_limiter_longest_wait_seconds gauge
# UNIT app_limiter_longest_wait_seconds seconds
app_limiter_longest_wait_seconds{service="search",limiter="api"} 0.25
# HELP app_limiter_try_acquire Tries (try_acquire), by outcome.
# TYPE app_limiter_try_acquire counter
app_limiter_try_acquire_total{service="search",limiter="api",outcome="admitted"} 11
app_limiter_try_acquire_total{service="search",limiter="api",outcome="refused"} 6
# EOF
)";
    CHECK(one(o, {"api", known(), local}) == expected);
}

TEST_CASE("every field of limiter_stats has its sample")
{
    sluice::limiter_stats s = known();
    s.keys = {3, 9, 6, 2, 1, 1};
    s.backend.commands = 40;
    s.backend.errors = 4;
    s.backend.fallback_decisions = 8;
    s.backend.lease_expired = 12;
    s.backend.links_lost = 13;
    s.backend.master_switches = 14;
    s.backend.last_round_trip = 1250us;
    s.backend.clock_offset = -2s;
    s.backend.degraded = true;
    s.adaptive = {21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32};
    s.shadow = {true, 41, 42, 43, 1500ms, 250ms};
    const std::string out = one({}, {"all", s});
    const std::pair<const char*, const char*> expected[] = {
        {"sluice_limiter_keys_tracked", "3"},
        {"sluice_limiter_key_creations_total", "9"},
        {"sluice_limiter_key_evictions_total", "6"},
        {"sluice_limiter_overflow_requests_total", "2"},
        {"sluice_limiter_overflow_admitted_total", "1"},
        {"sluice_limiter_keys_waiting", "1"},
        {"sluice_limiter_backend_commands_total", "40"},
        {"sluice_limiter_backend_errors_total", "4"},
        {"sluice_limiter_backend_fallback_decisions_total", "8"},
        {"sluice_limiter_backend_leases_expired_total", "12"},
        {"sluice_limiter_backend_links_lost_total", "13"},
        {"sluice_limiter_backend_master_switches_total", "14"},
        {"sluice_limiter_backend_round_trip_seconds", "0.00125"},
        {"sluice_limiter_backend_clock_offset_seconds", "-2"},
        {"sluice_limiter_backend_degraded", "1"},
        {"sluice_limiter_adaptive_samples_total", "21"},
        {"sluice_limiter_adaptive_dropped_total", "22"},
        {"sluice_limiter_adaptive_increases_total", "23"},
        {"sluice_limiter_adaptive_decreases_total", "24"},
        {"sluice_limiter_adaptive_adaptations_total", "25"},
        {"sluice_limiter_adaptive_responses_total", "26"},
        {"sluice_limiter_adaptive_refusals_total", "27"},
        {"sluice_limiter_adaptive_responses_with_fields_total", "28"},
        {"sluice_limiter_adaptive_malformed_fields_total", "29"},
        {"sluice_limiter_adaptive_pauses_total", "30"},
        {"sluice_limiter_adaptive_pauses_cut_total", "31"},
        {"sluice_limiter_adaptive_distrusted_total", "32"},
        {"sluice_limiter_shadow_try_refused_total", "41"},
        {"sluice_limiter_shadow_refused_total", "42"},
        {"sluice_limiter_shadow_waited_total", "43"},
        {"sluice_limiter_shadow_wait_seconds_total", "1.5"},
        {"sluice_limiter_shadow_longest_wait_seconds", "0.25"},
    };
    for (auto [name, value] : expected) {
        CAPTURE(name);
        CHECK(out.find(std::string("\n") + name + "{limiter=\"all\"} " + value + "\n") != std::string::npos);
    }
    // 38 families: every field of limiter_stats, the requests and tries by outcome.
    std::size_t types = 0;
    for (auto p = out.find("# TYPE "); p != std::string::npos; p = out.find("# TYPE ", p + 1)) ++types;
    CHECK(types == 38);
}

TEST_CASE("the shadow group: written for a limiter in shadow mode only")
{
    sluice::limiter_stats live = known(), dark = known();
    dark.shadow = {true, 5, 6, 7, 2s, 1s};
    const prom::named_stats limiters[] = {{"live", live}, {"dark", dark}};
    std::string out;
    prom::writer w(out);
    prom::write_stats(w, limiters);
    w.finish();
    CHECK(out.find("# TYPE sluice_limiter_shadow_refused_total counter\n"
                   "sluice_limiter_shadow_refused_total{limiter=\"dark\"} 6\n") != std::string::npos);
    CHECK(out.find("shadow_refused_total{limiter=\"live\"") == std::string::npos);
    const prom::named_stats none[] = {{"live", live}};   // nobody in shadow mode: no family at all
    std::string plain;
    prom::writer w2(plain);
    prom::write_stats(w2, none);
    CHECK(plain.find("shadow") == std::string::npos);
}

TEST_CASE("several limiters: HELP and TYPE once per family, a family only if a limiter holds its group")
{
    sluice::limiter_stats a = known(), b;
    b.admitted = 100;
    b.keys.tracked = 8;
    const prom::label shard[] = {{"shard", "2"}};
    const prom::named_stats limiters[] = {
        {"a", a, {true, true, false, false, false}},
        {"b", b, {true, false, true, false, false}, shard},
    };
    std::string out;
    prom::writer w(out);
    prom::write_stats(w, limiters, "name");
    w.finish();
    CHECK(out.starts_with(R"(# HELP sluice_limiter_requests_total Requests that may wait (acquire), by outcome.
# TYPE sluice_limiter_requests_total counter
sluice_limiter_requests_total{name="a",outcome="admitted"} 7
sluice_limiter_requests_total{name="a",outcome="refused"} 2
sluice_limiter_requests_total{name="a",outcome="timed_out"} 1
sluice_limiter_requests_total{name="a",outcome="cancelled"} 0
sluice_limiter_requests_total{name="a",outcome="closed"} 3
sluice_limiter_requests_total{name="b",shard="2",outcome="admitted"} 100
sluice_limiter_requests_total{name="b",shard="2",outcome="refused"} 0
)"));
    // Tries of a only, keys of b only, no backend or adaptive family at all.
    CHECK(out.find("sluice_limiter_try_acquire_total{name=\"a\",outcome=\"refused\"} 6\n") != std::string::npos);
    CHECK(out.find("sluice_limiter_try_acquire_total{name=\"b\"") == std::string::npos);
    CHECK(out.find("\nsluice_limiter_keys_tracked{name=\"b\",shard=\"2\"} 8\n") != std::string::npos);
    CHECK(out.find("keys_tracked{name=\"a\"") == std::string::npos);
    CHECK(out.find("backend") == std::string::npos);
    CHECK(out.find("adaptive") == std::string::npos);
    std::size_t helps = 0;
    for (auto p = out.find("# HELP sluice_limiter_waiting "); p != std::string::npos;
         p = out.find("# HELP sluice_limiter_waiting ", p + 1))
        ++helps;
    CHECK(helps == 1);

    // The same families again are a second family of the same name: refused.
    CHECK(refused([&] {
        std::string again;
        prom::writer w2(again);
        prom::write_stats(w2, limiters);
        prom::write_stats(w2, limiters);
    }));
}

TEST_CASE("label values: backslash, double quote and line feed escaped; HELP as each format escapes it")
{
    std::string text, om;
    for (auto f : {prom::format::text, prom::format::openmetrics}) {
        prom::writer_options o;
        o.exposition = f;
        o.prefix = "";
        o.constant_labels = {{"path", "C:\\tmp\n\"x\""}};
        std::string& out = f == prom::format::text ? text : om;
        prom::writer w(out, o);
        w.family("up", prom::metric_type::gauge, "a \"quoted\" \\ help\nline");
        w.sample({{"name", "caf\xc3\xa9 \xe2\x82\xac"}}, 1);
        w.finish();
    }
    CHECK(text == "# HELP up a \"quoted\" \\\\ help\\nline\n# TYPE up gauge\n"
                  "up{path=\"C:\\\\tmp\\n\\\"x\\\"\",name=\"caf\xc3\xa9 \xe2\x82\xac\"} 1\n");
    CHECK(om == "# HELP up a \\\"quoted\\\" \\\\ help\\nline\n# TYPE up gauge\n"
                "up{path=\"C:\\\\tmp\\n\\\"x\\\"\",name=\"caf\xc3\xa9 \xe2\x82\xac\"} 1\n# EOF\n");
}

TEST_CASE("values: integers exact, doubles in their shortest form, durations in seconds")
{
    std::string out;
    prom::writer w(out, {prom::format::text, "", {}});
    w.family("v", prom::metric_type::gauge, "");
    const std::pair<prom::number, const char*> cases[] = {
        {std::numeric_limits<std::uint64_t>::max(), "18446744073709551615"},
        {std::numeric_limits<std::int64_t>::min(), "-9223372036854775808"},
        {-1, "-1"},
        {0u, "0"},
        {true, "1"},
        {0.1, "0.1"},
        {1e-9, "1e-09"},
        {-2.5, "-2.5"},
        {std::numeric_limits<double>::infinity(), "+Inf"},
        {-std::numeric_limits<double>::infinity(), "-Inf"},
        {std::numeric_limits<double>::quiet_NaN(), "NaN"},
        {std::chrono::nanoseconds(1), "1e-09"},
        {std::chrono::nanoseconds(123456789), "0.123456789"},
        {std::chrono::hours(2), "7200"},
        {std::chrono::nanoseconds::max(), "9223372036.854776"},
    };
    std::string expected = "# HELP v \n# TYPE v gauge\n";
    for (const auto& [v, text] : cases) {
        w.sample(v);
        expected += std::string("v ") + text + "\n";
    }
    CHECK(out == expected);
}

TEST_CASE("a histogram: buckets with le (1.0 in OpenMetrics), _sum and _count")
{
    const double bounds[] = {0.001, 0.5, 1, std::numeric_limits<double>::infinity()};
    const std::uint64_t counts[] = {0, 2, 3, 4};
    std::string text, om;
    for (auto f : {prom::format::text, prom::format::openmetrics}) {
        std::string& out = f == prom::format::text ? text : om;
        prom::writer w(out, {f, "sluice_", {}});
        w.family("wait_seconds", prom::metric_type::histogram, "Waits.", "seconds");
        const prom::label route[] = {{"route", "/api"}};
        for (int i = 0; i < 4; ++i) w.bucket(route, bounds[i], counts[i]);
        w.sample("_sum", route, 2.75);
        w.sample("_count", route, 4);
        w.finish();
    }
    CHECK(text == R"(# HELP sluice_wait_seconds Waits.
# TYPE sluice_wait_seconds histogram
sluice_wait_seconds_bucket{route="/api",le="0.001"} 0
sluice_wait_seconds_bucket{route="/api",le="0.5"} 2
sluice_wait_seconds_bucket{route="/api",le="1"} 3
sluice_wait_seconds_bucket{route="/api",le="+Inf"} 4
sluice_wait_seconds_sum{route="/api"} 2.75
sluice_wait_seconds_count{route="/api"} 4
)");
    CHECK(om == R"(# HELP sluice_wait_seconds Waits.
# TYPE sluice_wait_seconds histogram
# UNIT sluice_wait_seconds seconds
sluice_wait_seconds_bucket{route="/api",le="0.001"} 0
sluice_wait_seconds_bucket{route="/api",le="0.5"} 2
sluice_wait_seconds_bucket{route="/api",le="1.0"} 3
sluice_wait_seconds_bucket{route="/api",le="+Inf"} 4
sluice_wait_seconds_sum{route="/api"} 2.75
sluice_wait_seconds_count{route="/api"} 4
# EOF
)");
}

TEST_CASE("names and labels the formats cannot carry are refused, not fixed")
{
    auto with_prefix = [](std::string p) {
        return [p] {
            std::string out;
            prom::writer w(out, {prom::format::text, p, {}});
        };
    };
    for (const char* p : {"1x_", "a-b_", "caf\xc3\xa9_", "a b", "x\n"}) {
        CAPTURE(p);
        CHECK(refused(with_prefix(p)));
    }
    for (const char* p : {"", "a", "_x_", "ns:sub_", "A9_"}) {
        CAPTURE(p);
        CHECK_FALSE(refused(with_prefix(p)));
    }

    auto with_constant = [](std::vector<std::pair<std::string, std::string>> l) {
        return [l] {
            std::string out;
            prom::writer w(out, {prom::format::text, "x_", l});
        };
    };
    CHECK(refused(with_constant({{"__name__", "a"}})));
    CHECK(refused(with_constant({{"a:b", "a"}})));
    CHECK(refused(with_constant({{"9a", "a"}})));
    CHECK(refused(with_constant({{"", "a"}})));
    CHECK(refused(with_constant({{"a", "1"}, {"a", "2"}})));
    CHECK(refused(with_constant({{"a", "\xff"}})));          // not UTF-8
    CHECK(refused(with_constant({{"a", "\xc0\x80"}})));      // overlong NUL
    CHECK(refused(with_constant({{"a", "\xed\xa0\x80"}})));  // a surrogate
    CHECK(refused(with_constant({{"a", "\xf4\x90\x80\x80"}}))); // past U+10FFFF
    CHECK(refused(with_constant({{"a", "\xe2\x82"}})));      // cut short
    CHECK_FALSE(refused(with_constant({{"a", "\xf0\x9f\x98\x80 \xe2\x82\xac"}, {"_b", ""}})));

    std::string out;
    prom::writer w(out, {prom::format::text, "x_", {{"job", "j"}}});
    auto family = [&](std::string_view name, prom::metric_type t, std::string_view unit = {}) {
        return [&, name, t, unit] { w.family(name, t, "h", unit); };
    };
    CHECK(refused([&] { w.sample(1); }));                      // no family yet
    CHECK(refused(family("requests_total", prom::metric_type::counter)));   // the writer adds _total
    CHECK(refused(family("a_total", prom::metric_type::gauge)));
    CHECK(refused(family("wait_count", prom::metric_type::gauge)));
    CHECK(refused(family("wait_sum", prom::metric_type::histogram)));
    CHECK(refused(family("a-b", prom::metric_type::gauge)));
    CHECK(refused(family("wait", prom::metric_type::gauge, "seconds")));    // unit not in the name
    CHECK(refused(family("waitseconds", prom::metric_type::gauge, "seconds")));
    CHECK(refused(family("seconds_wait", prom::metric_type::gauge, "seconds")));
    CHECK(refused(family("wait_seconds", prom::metric_type::gauge, "sec:onds")));
    CHECK(refused([&] { w.family("h", prom::metric_type::gauge, "\xff"); }));
    CHECK(out.empty()); // nothing was written for any of them

    w.family("requests", prom::metric_type::counter, "h");
    CHECK(refused(family("requests", prom::metric_type::gauge)));  // twice
    CHECK(refused([&] { w.sample(-1); }));                              // a counter goes up
    CHECK(refused([&] { w.sample(std::numeric_limits<double>::quiet_NaN()); }));
    CHECK(refused([&] { w.sample({{"job", "again"}}, 1); }));            // a constant label repeated
    CHECK(refused([&] { w.sample({{"a", "1"}, {"a", "2"}}, 1); }));
    CHECK(refused([&] { w.sample({{"__a", "1"}}, 1); }));
    CHECK(refused([&] { w.sample({{"a", "\x80"}}, 1); }));
    CHECK(refused([&] { w.bucket({}, 1, 1); }));                         // not a histogram
    CHECK(refused([&] { w.sample("_sum", {}, 1); }));
    w.sample({{"a", "1"}}, 2);

    w.family("h_seconds", prom::metric_type::histogram, "h", "seconds");
    const prom::label le[] = {{"le", "1"}};
    CHECK(refused([&] { w.bucket(le, 1, 1); }));                         // le is the writer's
    CHECK(refused([&] { w.bucket({}, std::numeric_limits<double>::quiet_NaN(), 1); }));
    CHECK(refused([&] { w.sample(1); }));                                // _sum, _count or a bucket
    CHECK(refused([&] { w.sample("_total", {}, 1); }));
    CHECK(refused([&] { w.sample("_sum", {}, -0.5); }));
    w.sample("_count", {}, 0);
    w.finish();
    CHECK(refused([&] { w.finish(); }));
    CHECK(refused(family("late", prom::metric_type::gauge)));
    CHECK(out == "# HELP x_requests_total h\n# TYPE x_requests_total counter\n"
                 "x_requests_total{job=\"j\",a=\"1\"} 2\n"
                 "# HELP x_h_seconds h\n# TYPE x_h_seconds histogram\nx_h_seconds_count{job=\"j\"} 0\n");

    CHECK(refused([&] {
        std::string o2;
        prom::writer w2(o2);
        const prom::named_stats l{"a", {}};
        prom::write_stats(w2, std::span<const prom::named_stats>(&l, 1), "le-bad");
    }));
    CHECK(refused([&] {
        std::string o2;
        prom::writer w2(o2);
        const prom::named_stats l{"\xfe", {}};
        prom::write_stats(w2, std::span<const prom::named_stats>(&l, 1));
    }));
}

TEST_CASE("the format a scraper's Accept field asks for")
{
    using prom::format;
    CHECK(prom::negotiate("") == format::text);
    CHECK(prom::negotiate("*/*") == format::text);
    CHECK(prom::negotiate("text/plain;version=0.0.4") == format::text);
    // What Prometheus sends.
    CHECK(prom::negotiate("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
                          "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1") == format::openmetrics);
    CHECK(prom::negotiate("text/plain; q=1, Application/OpenMetrics-Text ; q=0.2") == format::openmetrics);
    CHECK(prom::negotiate("application/openmetrics-text;q=0") == format::text);
    CHECK(prom::negotiate("application/openmetrics-text; q=0.000, text/plain") == format::text);
    CHECK(prom::negotiate("application/openmetrics-textual") == format::text);
    CHECK(prom::content_type(format::text) == "text/plain; version=0.0.4; charset=utf-8");
    CHECK(prom::content_type(format::openmetrics) == "application/openmetrics-text; version=1.0.0; charset=utf-8");
}

TEST_SUITE_END();
