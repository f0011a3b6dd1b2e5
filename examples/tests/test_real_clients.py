#!/usr/bin/env python3
"""The example server against real HTTP clients: curl reads the rate-limit headers (the
policy states the configured rate and burst; a refusal carries Retry-After), and wrk drives
it for 10 s at a known configuration (100/s, burst 10, from one client address): the
requests admitted are the burst plus the rate over the span the server saw, within 1 %.

usage: test_real_clients.py SERVER"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

from harness import check, finish, read_log, start_server, stop

SERVER = sys.argv[1]
RATE, BURST = 100, 10

for tool in ("curl", "wrk"):
    if shutil.which(tool) is None:
        print("SKIP: %s is not installed (scripts/install-deps.sh installs it)" % tool)
        sys.exit(77)

tmp = tempfile.mkdtemp()
log = os.path.join(tmp, "access.log")
server, port = start_server(SERVER, "--rate", "%d/s" % RATE, "--burst", str(BURST), "--access-log", log)
url = "http://127.0.0.1:%d/api/x" % port


def curl_headers():
    out = subprocess.run(["curl", "-s", "-D", "-", "-o", "/dev/null", url], capture_output=True, text=True,
                         timeout=10).stdout
    status = int(out.split()[1])
    headers = {k.lower(): v.strip() for k, v in re.findall(r"^([A-Za-z-]+): (.*)$", out, re.M)}
    return status, headers


status, h = curl_headers()
check(status == 200, "curl: first request admitted (%d)" % status)
check(h.get("ratelimit-policy") == '"default";q=100;w=1;sluice-burst=10',
      "curl: RateLimit-Policy states 100 per 1 s, burst 10 (%r)" % h.get("ratelimit-policy"))
check(re.fullmatch(r'"default";r=\d+;t=\d+', h.get("ratelimit", "")) is not None,
      "curl: RateLimit gives what is left and when it is full (%r)" % h.get("ratelimit"))
# Spend the burst in one curl (one connection, 30 requests back to back); a refusal
# follows, with Retry-After in whole seconds.
out = subprocess.run(["curl", "-s", "-D", "-"] + ["-o", "/dev/null", url] * 30, capture_output=True, text=True,
                     timeout=20).stdout
blocks = [b for b in re.split(r"\r?\n\r?\n", out) if b.startswith("HTTP/")]
refused = [b for b in blocks if b.split()[1] == "429"]
ra = re.search(r"^Retry-After: (\S+)", refused[0], re.M | re.I).group(1) if refused else None
check(len(blocks) == 30 and refused and ra is not None and ra.isdigit(),
      "curl: over the burst, 429 with Retry-After %r (%d of %d refused)" % (ra, len(refused), len(blocks)))
stop(server)

# wrk: 2 threads, 20 connections, 10 s, as fast as the server answers.
os.remove(log)
server, port = start_server(SERVER, "--rate", "%d/s" % RATE, "--burst", str(BURST), "--access-log", log)
res = subprocess.run(["wrk", "-t2", "-c20", "-d10s", "http://127.0.0.1:%d/api/x" % port], capture_output=True,
                     text=True, timeout=60)
check(res.returncode == 0, "wrk ran (%d: %s)" % (res.returncode, res.stderr.strip()))
stop(server)
rows = [r for r in read_log(log) if r[3] == "/api/x"]
admitted = sum(1 for r in rows if r[4] == 200)
span = (rows[-1][0] - rows[0][0]) / 1e9 if rows else 0
expected = BURST + RATE * span
print("wrk: %d requests over %.3f s as the server saw them, %d admitted, %.1f expected" % (len(rows), span, admitted,
                                                                                          expected))
check(len(rows) > 5 * expected, "wrk offered far more than the limit (%d requests)" % len(rows))
check(abs(admitted - expected) <= 0.01 * expected,
      "wrk: %d admitted = burst + rate x span (%.1f) within 1 %%" % (admitted, expected))
shutil.rmtree(tmp)
finish()
