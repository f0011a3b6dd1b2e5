#!/usr/bin/env python3
"""Reads what tests/prometheus_print writes with prometheus_client's own parsers: the text
format 0.0.4 (prometheus_client.parser) and OpenMetrics 1.0 (prometheus_client.openmetrics
.parser, which checks much more: # EOF, UNIT against the name, counter suffixes, canonical
+Inf, clashing names). Checks each family's name, type, unit, help and every sample's
labels and value: field k of limiter_stats is 100 + k in the "all" limiter.

    prometheus_parse.py PROMETHEUS_PRINT
"""
import subprocess
import sys

try:
    import prometheus_client.openmetrics.parser as om_parser
    import prometheus_client.parser as text_parser
except ImportError:
    # Debian's python3-prometheus-client, seen from another python3 first in PATH.
    sys.path.append("/usr/lib/python3/dist-packages")
    import prometheus_client.openmetrics.parser as om_parser
    import prometheus_client.parser as text_parser

printer = sys.argv[1]
failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)


SERVICE = 'say "hi"\\\n'

# (family without prefix, type, unit, {sample suffix + outcome: value of "all"})
counters = {
    "limiter_waited": 106, "limiter_key_creations": 112, "limiter_key_evictions": 113,
    "limiter_overflow_requests": 114, "limiter_overflow_admitted": 115,
    "limiter_backend_commands": 117, "limiter_backend_errors": 118,
    "limiter_backend_fallback_decisions": 119, "limiter_backend_leases_expired": 120,
    "limiter_backend_links_lost": 121, "limiter_backend_master_switches": 122,
    "limiter_adaptive_samples": 126, "limiter_adaptive_dropped": 127,
    "limiter_adaptive_increases": 128, "limiter_adaptive_decreases": 129,
    "limiter_adaptive_adaptations": 130, "limiter_adaptive_responses": 131,
    "limiter_adaptive_refusals": 132, "limiter_adaptive_responses_with_fields": 133,
    "limiter_adaptive_malformed_fields": 134, "limiter_adaptive_pauses": 135,
    "limiter_adaptive_pauses_cut": 136, "limiter_adaptive_distrusted": 137,
    "limiter_shadow_try_refused": 139, "limiter_shadow_refused": 140, "limiter_shadow_waited": 141,
}
gauges = {
    "limiter_waiting": 105, "limiter_keys_tracked": 111, "limiter_keys_waiting": 116,
    "limiter_backend_degraded": 1,
}
seconds_gauges = {
    "limiter_longest_wait_seconds": 108.25, "limiter_backend_round_trip_seconds": 0.123,
    "limiter_backend_clock_offset_seconds": -0.124, "limiter_shadow_longest_wait_seconds": 143.5,
}
outcomes = {
    "limiter_requests": {"admitted": 100, "refused": 101, "timed_out": 102, "cancelled": 103, "closed": 104},
    "limiter_try_acquire": {"admitted": 109, "refused": 110},
}


def expected_families():
    """{family name: (type, unit, {(sample name, labels tuple): value})}"""
    out = {}

    def labels(limiter, **more):
        d = {"service": SERVICE, "limiter": limiter}
        d.update(more)
        return tuple(sorted(d.items()))

    for name, v in counters.items():
        out["sluice_" + name] = ("counter", "", {("sluice_%s_total" % name, labels("all")): v})
    for name, v in gauges.items():
        out["sluice_" + name] = ("gauge", "", {("sluice_" + name, labels("all")): v})
    for name, v in seconds_gauges.items():
        out["sluice_" + name] = ("gauge", "seconds", {("sluice_" + name, labels("all")): v})
    out["sluice_limiter_shadow_wait_seconds"] = ("counter", "seconds", {
        ("sluice_limiter_shadow_wait_seconds_total", labels("all")): 142,
    })
    out["sluice_limiter_wait_seconds"] = ("counter", "seconds", {
        ("sluice_limiter_wait_seconds_total", labels("all")): 107.5,
        ("sluice_limiter_wait_seconds_total", labels("few", zone="eu")): 0,
        ("sluice_limiter_wait_seconds_total", labels("caf\u00e9")): 0,
    })
    for name, by in outcomes.items():
        samples = {}
        for o, v in by.items():
            samples[("sluice_%s_total" % name, labels("all", outcome=o))] = v
            samples[("sluice_%s_total" % name, labels("few", zone="eu", outcome=o))] = {
                ("limiter_requests", "admitted"): 1, ("limiter_try_acquire", "refused"): 2}.get((name, o), 0)
            if name == "limiter_requests":
                samples[("sluice_%s_total" % name, labels("caf\u00e9", outcome=o))] = 0
        out["sluice_" + name] = ("counter", "", samples)
    # The families of the requests group hold "few" and "café" too.
    for name in ("limiter_waiting", "limiter_longest_wait_seconds", "limiter_waited"):
        fam = out["sluice_" + name]
        sample = "sluice_%s%s" % (name, "_total" if fam[0] == "counter" else "")
        fam[2][(sample, labels("few", zone="eu"))] = 0
        fam[2][(sample, labels("caf\u00e9"))] = 0
    out["sluice_wait_seconds"] = ("histogram", "seconds", {
        ("sluice_wait_seconds_bucket", (("le", "0.001"), ("service", SERVICE))): 0,
        ("sluice_wait_seconds_bucket", (("le", "0.5"), ("service", SERVICE))): 2,
        ("sluice_wait_seconds_bucket", (("le", "1"), ("service", SERVICE))): 3,
        ("sluice_wait_seconds_bucket", (("le", "+Inf"), ("service", SERVICE))): 4,
        ("sluice_wait_seconds_sum", (("service", SERVICE),)): 2.75,
        ("sluice_wait_seconds_count", (("service", SERVICE),)): 4,
    })
    return out


for fmt, parser in (("text", text_parser), ("openmetrics", om_parser)):
    text = subprocess.run([printer, fmt], check=True, stdout=subprocess.PIPE).stdout.decode("utf-8")
    try:
        families = list(parser.text_string_to_metric_families(text))
    except ValueError as e:
        check(False, "%s: the parser refused the exposition: %s" % (fmt, e))
        continue
    check(len(families) == len({f.name for f in families}), "%s: each family once" % fmt)
    got = {f.name: f for f in families}
    want = expected_families()
    check(sorted(got) == sorted(want), "%s: the %d families expected (%s)"
          % (fmt, len(want), sorted(set(got) ^ set(want))))
    for name, (typ, unit, samples) in want.items():
        f = got.get(name)
        if f is None:
            continue
        check(f.type == typ, "%s: %s is a %s (%s)" % (fmt, name, typ, f.type))
        check(bool(f.documentation), "%s: %s has HELP" % (fmt, name))
        if fmt == "openmetrics":
            check(f.unit == unit, "%s: %s has UNIT %r (%r)" % (fmt, name, unit, f.unit))
        read = {}
        for s in f.samples:
            labels = dict(s.labels)
            if fmt == "openmetrics" and s.name.endswith("_bucket") and labels.get("le") == "1.0":
                labels["le"] = "1"     # OpenMetrics writes le canonically
            read[(s.name, tuple(sorted(labels.items())))] = s.value
        check(read.keys() == samples.keys(), "%s: %s has the samples expected (%s)"
              % (fmt, name, sorted(set(read) ^ set(samples))))
        bad = [(k, read[k], v) for k, v in samples.items() if k in read and abs(read[k] - v) > 1e-9 * max(1, abs(v))]
        check(not bad, "%s: %s's values (%s)" % (fmt, name, bad))
    help_of = got.get("sluice_wait_seconds")
    check(help_of is not None and help_of.documentation == 'Time "delayed" requests waited.',
          "%s: HELP unescaped as written" % fmt)

if failures:
    print("%d checks failed" % len(failures))
    sys.exit(1)
print("all checks passed")
