#!/usr/bin/env python3
"""The example server sheds load with sluice::adaptive_concurrency: behind it a stand-in
backend of 16 workers (--backend-workers 16), each /api/work?ms=40 holding one for 40 ms, so
that the server serves 400 requests a second and above 16 at once latency only grows. Driven
by loadgen at 800 requests a second (twice that), with --shed vegas and --shed aimd the
adaptive limit settles between the knee (16) and twice it (Vegas keeps 3 to 6 queued
at this size, AIMD is told that 60 ms is too slow), the rest is shed with 503 and
Retry-After, and the latency of the answers stays a fraction of what it is without
shedding (a fixed cap of 256 in flight), where requests queue for the backend.

usage: test_server_shed.py SERVER LOADGEN"""

import re
import subprocess
import sys

from harness import check, connect, finish, get, metrics, read_responses, request, start_server, stop, wait_until

SERVER, LOADGEN = sys.argv[1:3]
KNEE = 16


def run(*shed):
    server, port = start_server(SERVER, "--rate", "1000000/s", "--burst", "1000000",
                                "--backend-workers", str(KNEE), *shed)
    cmd = [LOADGEN, "--url", "http://127.0.0.1:%d/api/work?ms=40" % port, "--rate", "800", "--seconds", "4",
           "--connections", "64", "--max-connections", "512", "--quiet"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    name = " ".join(shed) or "no shedding"
    check(res.returncode == 0, "%s: loadgen exits with 0 (%d: %s)" % (name, res.returncode, res.stderr.strip()))
    m = re.search(r"latency \(from intended send time\):.* p99=([0-9.]+)", res.stdout)
    p99 = float(m.group(1)) if m else float("inf")
    m = metrics(port)
    stop(server)
    print("%s: p99 %.1f ms, %s" % (name, p99, {k: v for k, v in m.items() if k.startswith("sluice_requests_total")
                                                  or k.startswith("sluice_adaptive_limit")}))
    return p99, m


base_p99, base = run()
check(base['sluice_requests_total{result="shed"}'] == 0, "without --shed nothing is shed")

for shed in (["--shed", "vegas"], ["--shed", "aimd", "--shed-latency-ms", "60"]):
    name = " ".join(shed)
    p99, m = run(*shed)
    limit = m["sluice_adaptive_limit"]
    shed_count = m['sluice_requests_total{result="shed"}']
    admitted = m['sluice_requests_total{result="admitted"}']
    check(KNEE <= limit <= 2 * KNEE, "%s: the adaptive limit settled at %d, between the knee %d and twice it"
          % (name, limit, KNEE))
    # 3,200 requests at twice what the backend serves: about half shed.
    check(shed_count >= 800, "%s: %d requests shed with 503 (at least a quarter)" % (name, shed_count))
    check(admitted + shed_count >= 3200, "%s: every request answered (%d admitted + %d shed)"
          % (name, admitted, shed_count))
    check(m["sluice_adaptive_samples_total"] >= admitted - KNEE * 2,
          "%s: every admitted request's latency was a sample (%d samples)" % (name, m["sluice_adaptive_samples_total"]))
    check(p99 * 2 < base_p99, "%s: p99 latency %.1f ms, under half of %.1f ms without shedding" % (name, p99, base_p99))

# A shed answer carries Retry-After: with one slot, a second request while the first runs.
server, port = start_server(SERVER, "--backend-workers", "1", "--shed", "vegas", "--max-inflight", "1")
with connect(port) as first:
    first.sendall(request("/api/work?ms=1500"))
    wait_until(lambda: metrics(port)["sluice_inflight"] == 1, 10, "the first request in flight")
    r = get(port, "/api/work?ms=1")
    check(r.status == 503 and r.header("Retry-After") == "1",
          "over the limit: 503 with Retry-After: 1 (%d, %r)" % (r.status, r.header("Retry-After")))
    check(read_responses(first, 1)[0].status == 200, "the request in flight is served")
stop(server)
finish()
