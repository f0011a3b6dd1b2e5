"""Integration test of examples/server --dry-run: the per-client limit in shadow mode.
Nobody is answered 429 or delayed for it; a request it would have refused carries
Sluice-Dry-Run and gets a line on stderr; /metrics counts them; the same pipelined
requests without --dry-run are refused exactly where the dry run said they would be.

usage: test_server_dry_run.py SERVER_BIN"""

import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403

server_bin = sys.argv[1]


def pipelined(port, count, path="/api/x"):
    # One connection, every request written at once: they reach the server together, so the
    # refill (one token a minute here) cannot blur the burst on a slow machine.
    with connect(port) as s:
        s.sendall(b"".join(request(path) for _ in range(count)))
        return read_responses(s, count)


def start(*args):
    """The server with stderr to a pipe read by a thread, so that it never blocks."""
    p = spawn([server_bin, "--port", "0", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    line = p.stdout.readline().decode()
    m = re.fullmatch(r"listening on 127\.0\.0\.1:(\d+)\n", line)
    if not m:
        raise AssertionError("unexpected first line: %r" % line)
    return p, int(m.group(1))


def dry_run():
    # Live first: which of 8 requests the limit refuses (burst 5, 1 a minute).
    p, port = start("--rate", "1/m", "--burst", "5", "--seconds", "50")
    live = [r.status for r in pipelined(port, 8)]
    check(live == [200] * 5 + [429] * 3, "live: 5 admitted, then 429 (%s)" % live)
    check(stop(p) == 0, "live: exit code 0")

    p, port = start("--rate", "1/m", "--burst", "5", "--dry-run", "--seconds", "50")
    rs = pipelined(port, 8)
    check([r.status for r in rs] == [200] * 8, "dry run: all 8 answered 200 (%s)" % [r.status for r in rs])
    marks = [r.header("Sluice-Dry-Run") for r in rs]
    check(marks[:5] == [None] * 5, "dry run: no Sluice-Dry-Run on the 5 the limit admits (%s)" % marks[:5])
    check(all(m is not None and re.fullmatch(r"429; retry-after=\d+", m) for m in marks[5:]),
          "dry run: Sluice-Dry-Run: 429; retry-after=S where live said 429 (%s)" % marks[5:])
    check([(m is not None) for m in marks] == [s == 429 for s in live],
          "dry run: marked exactly where the live server refused")
    # Not charged for what it let through: the bucket is as empty as the live one's, no
    # emptier: each would-be refusal is one interval from a token (had the first two been
    # charged, they would say 120 and 180 s).
    ra = [int(m.split("=")[1]) for m in marks[5:] if m]
    check(ra == [60, 60, 60], "dry run: each would wait the one interval, 60 s (%s)" % ra)

    m = metrics(port)
    pc = 'limiter="per_client"'
    check(m.get('sluice_limiter_shadow_try_refused_total{%s}' % pc) == 3,
          "metrics: per_client shadow try_refused 3 (%s)" % m.get('sluice_limiter_shadow_try_refused_total{%s}' % pc))
    check(m.get('sluice_limiter_try_acquire_total{%s,outcome="refused"}' % pc) == 3 and
          m.get('sluice_limiter_try_acquire_total{%s,outcome="admitted"}' % pc) == 5,
          "metrics: the limit's own decisions: 5 admitted, 3 refused")
    check(m.get('sluice_requests_total{result="rejected"}') == 0 and
          m.get('sluice_requests_total{result="admitted"}') == 8, "metrics: 8 admitted, none rejected")
    check(m.get('sluice_limiter_shadow_waited_total{%s}' % pc) == 0, "metrics: no would-be wait (tries only)")
    check('sluice_limiter_shadow_try_refused_total{limiter="inflight"}' not in m,
          "metrics: the shadow group only for the limiter in shadow mode")
    check(stop(p) == 0, "dry run: exit code 0")
    err = p.stderr.read().decode()
    lines = [l for l in err.splitlines() if l.startswith("dry-run: ")]
    check(len(lines) == 3 and all(re.fullmatch(r"dry-run: 127\.0\.0\.1 GET /api/x would be 429 \(Retry-After \d+\)", l)
                                  for l in lines), "stderr: one line per would-be 429 (%s)" % lines)

    # With --delay-ms, a would-be wait is said as a delay.
    p, port = start("--rate", "1/s", "--burst", "1", "--delay-ms", "5000", "--dry-run", "--seconds", "50")
    rs = pipelined(port, 3)
    check([r.status for r in rs] == [200] * 3, "dry run --delay-ms: all answered 200 at once")
    marks = [r.header("Sluice-Dry-Run") for r in rs]
    check(marks[0] is None and all(m and re.fullmatch(r"delay; ms=\d+", m) for m in marks[1:]),
          "dry run --delay-ms: Sluice-Dry-Run: delay; ms=M (%s)" % marks)
    check(stop(p) == 0, "dry run --delay-ms: exit code 0")
    err = p.stderr.read().decode()
    check(any(re.fullmatch(r"dry-run: 127\.0\.0\.1 GET /api/x would be delayed \d+ ms", l) for l in err.splitlines()),
          "stderr: would be delayed")

    # --workers: the table in shared memory in shadow mode, by the same code.
    p, port = start("--rate", "1/m", "--burst", "5", "--dry-run", "--workers", "2", "--seconds", "50")
    rs = pipelined(port, 8)
    check([r.status for r in rs] == [200] * 8, "dry run --workers 2: all 8 answered 200")
    check([r.header("Sluice-Dry-Run") is not None for r in rs] == [False] * 5 + [True] * 3,
          "dry run --workers 2: the last 3 marked")
    check(stop(p) == 0, "dry run --workers 2: exit code 0")
    p.stderr.read()

    r = subprocess.run([server_bin, "--help"], stdout=subprocess.PIPE, check=True)
    check(b"--dry-run" in r.stdout, "--help documents --dry-run")


dry_run()
finish()
