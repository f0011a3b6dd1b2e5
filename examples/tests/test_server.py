"""Integration test of examples/server, checked from the client's side: per-client limit
with 429, Retry-After and RateLimit headers, X-Forwarded-For only from a trusted proxy,
/metrics, --delay-ms, --max-inflight, and a clean shutdown with a waiter pending.

usage: test_server.py SERVER_BIN"""

import os
import re
import signal
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403

server_bin = sys.argv[1]
tmp = tempfile.mkdtemp(prefix="sluice-server-test-")


def limits_and_headers():
    log = os.path.join(tmp, "access.log")
    p, port = start_server(server_bin, "--rate", "5/s", "--burst", "5", "--access-log", log,
                           "--trusted-proxy", "127.0.0.2", "--seconds", "50")

    # 7 requests pipelined on one connection: they reach the server together, so the
    # 5/s refill (one token per 200 ms) cannot blur the burst on a slow machine.
    with connect(port) as s:
        s.sendall(b"".join(request("/site/%d" % i, {"X-Forwarded-For": "10.9.9.9"}) for i in range(7)))
        rs = read_responses(s, 7)
    check([r.status for r in rs] == [200] * 5 + [429] * 2,
          "untrusted peer, burst 5: 5 admitted then 429 (got %s)" % [r.status for r in rs])
    check(all(r.header("RateLimit-Policy") == '"default";q=5;w=1;sluice-burst=5' for r in rs),
          "RateLimit-Policy q=5;w=1;sluice-burst=5 (the rate and the burst) on every limited response")
    remaining = [re.fullmatch(r'"default";r=(\d+);t=(\d+)', r.header("RateLimit") or "") for r in rs]
    check(all(remaining), "RateLimit header present and well formed")
    if all(remaining):
        check([int(m.group(1)) for m in remaining] == [4, 3, 2, 1, 0, 0, 0], "RateLimit r counts down 4..0, then 0")
        check(all(int(m.group(2)) == 1 for m in remaining), "RateLimit t=1 (the bucket refills within 1 s)")
    check(all(r.header("Retry-After") is None for r in rs[:5]), "no Retry-After on 200")
    ra = [r.header("Retry-After") for r in rs[5:]]
    check(all(v is not None and v.isdigit() and int(v) >= 1 for v in ra), "429 carries Retry-After >= 1 (%s)" % ra)
    check(all(int(v) == 1 for v in ra if v and v.isdigit()), "Retry-After rounds 200 ms up to 1 s")

    # From the trusted proxy, the last X-Forwarded-For entry is the client: a fresh bucket.
    with connect(port, source="127.0.0.2") as s:
        s.sendall(b"".join(request("/api/x", {"X-Forwarded-For": "1.2.3.4, 10.0.0.7"}) for _ in range(6)))
        rs = read_responses(s, 6)
    check([r.status for r in rs] == [200] * 5 + [429], "trusted proxy: XFF client gets its own burst of 5")
    r = get(port, "/api/x", source="127.0.0.2")
    check(r.status == 200, "trusted proxy without XFF is limited as itself")
    r = get(port, "/site/99999")
    check(r.status == 429, "127.0.0.1 is still throttled")

    m = metrics(port)
    check(m.get('sluice_requests_total{result="admitted"}') == 11, "metrics: admitted 11 (%s)" % m.get('sluice_requests_total{result="admitted"}'))
    check(m.get('sluice_requests_total{result="rejected"}') == 4, "metrics: rejected 4")
    check(m.get('sluice_requests_total{result="delayed"}') == 0, "metrics: delayed 0")
    check(m.get('sluice_requests_total{result="overloaded"}') == 0, "metrics: overloaded 0")
    check(m.get("sluice_keys") == 3, "metrics: 3 clients tracked (127.0.0.1, 10.0.0.7, 127.0.0.2)")
    check(m.get("sluice_inflight") == 0 and m.get("sluice_queue_depth") == 0, "metrics: nothing in flight or queued")
    check(m.get("sluice_wait_seconds_count") == 0 and 'sluice_wait_seconds_bucket{le="+Inf"}' in m,
          "metrics: wait histogram present and empty")
    # The limiters' own counts: without --delay-ms every decision is a try_acquire.
    pc, inf = 'limiter="per_client"', 'limiter="inflight"'
    check(m.get('sluice_limiter_try_acquire_total{%s,outcome="admitted"}' % pc) == 11 and
          m.get('sluice_limiter_try_acquire_total{%s,outcome="refused"}' % pc) == 4,
          "metrics: per_client try_acquire 11 admitted, 4 refused")
    check(m.get('sluice_limiter_try_acquire_total{%s,outcome="admitted"}' % inf) == 15,
          "metrics: inflight try_acquire admitted each of the 15 requests")
    check(all(m.get('sluice_limiter_requests_total{%s,outcome="%s"}' % (l, o)) == 0
              for l in (pc, inf) for o in ("admitted", "refused", "timed_out", "cancelled", "closed")),
          "metrics: no request waited on any limiter")
    check(m.get("sluice_limiter_waiting{%s}" % pc) == 0 and m.get("sluice_limiter_longest_wait_seconds{%s}" % pc) == 0,
          "metrics: per_client: nobody waiting, no wait")

    rc = stop(p)
    check(rc == 0, "SIGTERM: exit code 0")
    rows = read_log(log)
    check(len(rows) == 7 + 6 + 1 + 1 + 1, "access log: one line per response (%d)" % len(rows))
    clients = [row[1] for row in rows]
    check(clients[:7] == ["127.0.0.1"] * 7, "access log: XFF ignored from the untrusted peer")
    check(clients[7:13] == ["10.0.0.7"] * 6 and clients[13] == "127.0.0.2", "access log: XFF honoured from the trusted proxy")
    check([row[4] for row in rows[:7]] == [200] * 5 + [429] * 2, "access log: statuses match")
    check(rows[15][3] == "/metrics", "access log: /metrics logged")


def delay_mode():
    log = os.path.join(tmp, "delay.log")
    p, port = start_server(server_bin, "--rate", "10/s", "--burst", "1", "--delay-ms", "250",
                           "--access-log", log, "--seconds", "50")
    # 6 concurrent requests: 1 at once, the next ones wait 100 and 200 ms, later ones
    # would wait longer than 250 ms and get 429 at once.
    socks = [connect(port) for _ in range(6)]
    for s in socks:
        s.sendall(request("/api/x"))
    rs = [read_responses(s, 1)[0] for s in socks]
    for s in socks:
        s.close()
    statuses = sorted(r.status for r in rs)
    m = metrics(port)
    delayed = m.get('sluice_requests_total{result="delayed"}')
    check(statuses.count(200) >= 2 and statuses.count(429) >= 1, "delay mode: some delayed 200s and some 429s (%s)" % statuses)
    check(m.get('sluice_requests_total{result="admitted"}') + delayed == statuses.count(200), "metrics: admitted + delayed = 200s")
    check(delayed >= 1, "metrics: delayed %s >= 1" % delayed)
    check(m.get('sluice_requests_total{result="rejected"}') == statuses.count(429), "metrics: rejected = 429s")
    check(m.get("sluice_wait_seconds_count") == delayed, "metrics: histogram count = delayed")
    check(m.get('sluice_wait_seconds_bucket{le="0.5"}') == delayed, "metrics: every wait <= 0.5 s")
    check(m.get('sluice_wait_seconds_bucket{le="0.001"}') == 0, "metrics: no delayed request waited < 1 ms")
    pc = 'limiter="per_client"'
    check(m.get('sluice_limiter_requests_total{%s,outcome="admitted"}' % pc) == delayed and
          m.get("sluice_limiter_waited_total{%s}" % pc) == delayed,
          "metrics: the per_client limiter admitted the delayed requests after a wait")
    check(m.get('sluice_limiter_requests_total{%s,outcome="timed_out"}' % pc) == statuses.count(429),
          "metrics: the per_client limiter timed out the 429s")
    wait_total = m.get("sluice_limiter_wait_seconds_total{%s}" % pc)
    check(abs(wait_total - m.get("sluice_wait_seconds_sum")) <= 0.005 * delayed,
          "metrics: the limiter's total wait %.4f s is the server's own measure %.4f s (5 ms each)"
          % (wait_total, m.get("sluice_wait_seconds_sum")))
    check(0.09 <= m.get("sluice_limiter_longest_wait_seconds{%s}" % pc) <= 0.26,
          "metrics: the longest wait is 100-250 ms (%s)" % m.get("sluice_limiter_longest_wait_seconds{%s}" % pc))
    check(all(r.header("RateLimit") and r.header("RateLimit-Policy") == '"default";q=10;w=1;sluice-burst=1'
              for r in rs),
          "delay mode: RateLimit headers on 200 and 429 (policy: 10/s, burst 1)")
    check(stop(p) == 0, "exit code 0")
    rows = [r for r in read_log(log) if r[3] == "/api/x"]
    waited = [r[5] for r in rows if r[4] == 200 and r[5] > 0]
    check(len(waited) == delayed and all(1_000 <= w <= 400_000 for w in waited),
          "access log: delayed 200s waited 1-400 ms (limit 250 ms) (%s us)" % waited)


def max_inflight():
    p, port = start_server(server_bin, "--max-inflight", "1", "--rate", "100/s", "--burst", "100", "--seconds", "50")
    result = {}

    def slow():
        result["slow"] = get(port, "/api/work?ms=500")

    t = threading.Thread(target=slow)
    t.start()
    wait_until(lambda: metrics(port).get("sluice_inflight") == 1, 5, "the slow request to be in flight")
    r = get(port, "/api/work?ms=0")
    t.join(10)
    check(r.status == 503 and r.header("Retry-After") == "1", "max-inflight 1: concurrent request gets 503, Retry-After: 1")
    check(result.get("slow") is not None and result["slow"].status == 200, "the slow request still gets its 200")
    check(metrics(port).get('sluice_requests_total{result="overloaded"}') == 1, "metrics: overloaded 1")
    r = get(port, "/api/work?ms=0")
    check(r.status == 200, "once the slot is free, the next request passes")

    # What Prometheus asks for: OpenMetrics, the same samples (le written 1.0 for 1).
    text = metrics(port)
    om = parse_openmetrics(get(port, "/metrics", {"Accept": "application/openmetrics-text;version=1.0.0,"
                                                            "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"}))
    om = {k.replace('le="1.0"', 'le="1"').replace('le="5.0"', 'le="5"'): v for k, v in om.items()}
    check(om == text, "OpenMetrics when asked: the same %d samples as the text format (%s)"
          % (len(text), sorted(set(om.items()) ^ set(text.items()))[:6]))
    check(stop(p) == 0, "exit code 0")


def shutdown():
    # One request waits for a permit (up to 60 s), one keep-alive connection idles:
    # SIGTERM must answer the waiter and close both, at once.
    p, port = start_server(server_bin, "--rate", "1/min", "--burst", "1", "--delay-ms", "60000", "--seconds", "50")
    idle = connect(port)
    worker = connect(port, source="127.0.0.3")   # its own client, so its own burst
    worker.sendall(request("/api/work?ms=30000"))
    idle.sendall(request("/api/x"))
    check(read_responses(idle, 1)[0].status == 200, "first request admitted")
    waiter = connect(port)
    waiter.sendall(request("/api/x"))
    wait_until(lambda: metrics(port).get("sluice_queue_depth") == 1 and metrics(port).get("sluice_inflight") == 2,
               5, "a request to be waiting and one working")
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    r = read_responses(waiter, 1)[0]
    rc = p.wait(timeout=5)
    check(r.status == 503, "the waiting request is answered 503 on shutdown (%d)" % r.status)
    check(rc == 0 and time.monotonic() - t0 < 3, "exits with 0 within 3 s with a waiter and an idle connection")
    check(idle.recv(1) == b"", "idle keep-alive connection closed")
    try:
        r = read_responses(worker, 1)[0].status
    except (AssertionError, OSError):
        r = None   # closed before its answer was written: also fine, it did not hold us up
    check(r in (503, None), "a 30 s /api/work is cut short (%s)" % r)
    worker.close()
    idle.close()
    waiter.close()

    p, port = start_server(server_bin, "--seconds", "1")
    t0 = time.monotonic()
    rc = p.wait(timeout=5)
    check(rc == 0 and 0.9 < time.monotonic() - t0 < 3, "--seconds 1: exits by itself with 0")

    p = spawn([server_bin, "--rate", "fast"], stderr=open(os.devnull, "w"))
    check(p.wait(timeout=5) == 2, "bad --rate: exit code 2")


limits_and_headers()
delay_mode()
max_inflight()
shutdown()
finish()
