#!/usr/bin/env python3
"""The example server's RateLimit-Policy describes its real limit: api_client reads it with
sluice::http's parser (its `server policy:` line) and q / w must be the configured rate,
sluice-burst the configured burst, for rates that need a window longer than 1 s too.

usage: test_server_policy.py API_CLIENT SERVER"""

import re
import subprocess
import sys

API_CLIENT, SERVER = sys.argv[1:3]


def check(cond, what):
    if not cond:
        raise AssertionError(what)
    print("ok:", what)


CASES = [  # (--rate, rate per second, --burst)
    ("100/s", 100.0, 10),  # before the fix: q=10;w=1, a tenth of the real rate
    ("5/s", 5.0, 5),
    ("10/250ms", 40.0, 3),
    ("2/3s", 2 / 3, 4),
    ("1/min", 1 / 60, 2),
    ("3/s", 3.0, 7),
]

for text, per_second, burst in CASES:
    cmd = [API_CLIENT, "--spawn-server", "--server-bin", SERVER, "--server-rate", text, "--server-burst",
           str(burst), "--requests", "2", "--rate", "1/s", "--quiet"]
    print("$", " ".join(cmd), flush=True)
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=40)
    check(res.returncode == 0, "api_client exits with 0 (%d): %s" % (res.returncode, res.stderr.strip()))
    m = re.search(r'server policy: "default" q=(\d+) w=(\d+) \([0-9.]+/s\) burst=(\d+)', res.stdout)
    check(m is not None, "api_client parsed the server's RateLimit-Policy (%r)" % res.stdout)
    q, w, b = int(m.group(1)), int(m.group(2)), int(m.group(3))
    check(abs(q / w - per_second) <= 1e-8 * per_second,
          "--rate %s: q=%d w=%d is %.6f/s, the configured rate" % (text, q, w, q / w))
    check(b == burst, "--burst %d: sluice-burst=%d" % (burst, b))
