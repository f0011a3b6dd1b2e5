#!/usr/bin/env python3
"""The example server sheds load with sluice::adaptive_concurrency: behind it a stand-in
backend of 16 workers (--backend-workers 16), each /api/work?ms=40 holding one for 40 ms, so
that the server serves 400 requests a second and above 16 at once latency only grows. Driven
by loadgen at 800 requests a second (twice that), with --shed vegas, gradient2 and aimd
the adaptive limit settles between the knee (16) and twice it (Vegas keeps 3 to 6 queued
at this size, Gradient2 4, AIMD is told that 60 ms is too slow), the rest is shed with
503 and Retry-After, and the latency of the answers stays a fraction of what it is
without shedding (a fixed cap of 256 in flight), where requests queue for the backend.
The limit is read every 100 ms of the run: the median of the last two seconds is where
it settled (a single reading at the end may fall in a drain, where Vegas and Gradient2
halve it for a round trip or two on purpose).

usage: test_server_shed.py SERVER LOADGEN"""

import re
import statistics
import subprocess
import sys
import time

from harness import check, connect, finish, get, metrics, read_responses, request, spawn, start_server, stop, wait_until

SERVER, LOADGEN = sys.argv[1:3]
KNEE = 16


def run(*shed):
    server, port = start_server(SERVER, "--rate", "1000000/s", "--burst", "1000000",
                                "--backend-workers", str(KNEE), *shed)
    cmd = [LOADGEN, "--url", "http://127.0.0.1:%d/api/work?ms=40" % port, "--rate", "800", "--seconds", "4",
           "--connections", "64", "--max-connections", "512", "--quiet"]
    loadgen = spawn(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    start, limits = time.monotonic(), []
    while loadgen.poll() is None:
        time.sleep(0.1)
        if shed and time.monotonic() - start > 2:
            limits.append(metrics(port)["sluice_adaptive_limit"])
    out, err = loadgen.communicate(timeout=60)
    name = " ".join(shed) or "no shedding"
    check(loadgen.returncode == 0, "%s: loadgen exits with 0 (%d: %s)" % (name, loadgen.returncode, err.strip()))
    m = re.search(r"latency \(from intended send time\):.* p99=([0-9.]+)", out)
    p99 = float(m.group(1)) if m else float("inf")
    m = metrics(port)
    stop(server)
    print("%s: p99 %.1f ms, limit over the last 2 s %s, %s"
          % (name, p99, " ".join("%d" % x for x in limits),
             {k: v for k, v in m.items() if k.startswith("sluice_requests_total") or k.startswith("sluice_adaptive_limit")}))
    return p99, m, limits


base_p99, base, _ = run()
check(base['sluice_requests_total{result="shed"}'] == 0, "without --shed nothing is shed")

for shed in (["--shed", "vegas"], ["--shed", "gradient2"], ["--shed", "aimd", "--shed-latency-ms", "60"]):
    name = " ".join(shed)
    p99, m, limits = run(*shed)
    check(len(limits) >= 5, "%s: the limit read %d times in the last 2 s" % (name, len(limits)))
    limit = statistics.median(limits) if limits else 0
    shed_count = m['sluice_requests_total{result="shed"}']
    admitted = m['sluice_requests_total{result="admitted"}']
    check(KNEE <= limit <= 2 * KNEE, "%s: the adaptive limit settled at %d, between the knee %d and twice it"
          % (name, limit, KNEE))
    # 3,200 requests at twice what the backend serves: about half shed.
    check(shed_count >= 800, "%s: %d requests shed with 503 (at least a quarter)" % (name, shed_count))
    check(admitted + shed_count >= 3200, "%s: every request answered (%d admitted + %d shed)"
          % (name, admitted, shed_count))
    check(m['sluice_limiter_adaptive_samples_total{limiter="shed"}'] >= admitted - KNEE * 2,
          "%s: every admitted request's latency was a sample (%d samples)" % (name, m['sluice_limiter_adaptive_samples_total{limiter="shed"}']))
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
