#!/usr/bin/env python3
"""Two api_client processes share one quota through Redis (--redis), checked at the
example server's access log: together they stay within 40/s x time + burst in every
window, and each gets a fair share. Also --spawn-redis (one command, redis-server gone
after) and bad --redis input.

usage: test_api_client_redis.py API_CLIENT SERVER REDIS_SERVER
Bounded (an alarm after 50 s; every run has a timeout) and stops every process it started,
by pid, on any exit (harness.py)."""

import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403

API_CLIENT, SERVER, REDIS_SERVER = sys.argv[1:4]
tmp = tempfile.mkdtemp(prefix="sluice-api-client-redis-")
RATE, BURST, SECONDS = 40, 1, 3.0
# A request reaches the server some time after its slot was granted (the round trip to
# Redis, scheduling on a loaded machine): arrivals inside a window of dt can have been
# granted over dt + JITTER.
JITTER = 0.1


def on_alarm(*_):
    raise AssertionError("the test took more than 50 s")


def run_client(args):
    return spawn([API_CLIENT, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def shared_quota():
    redis, redis_port = start_redis(REDIS_SERVER)
    log = os.path.join(tmp, "access.log")
    # A per-client limit far above the shared quota: only Redis should hold the clients back.
    server, port = start_server(SERVER, "--rate", "10000/s", "--burst", "10000", "--access-log", log,
                                "--seconds", "40")
    common = ["--redis", "127.0.0.1:%d" % redis_port, "--rate", "%d/s" % RATE, "--burst", str(BURST),
              "--seconds", str(SECONDS), "--concurrency", "8", "--quiet"]
    # Both derive the key from the same host:port; the paths only tell them apart in the log.
    clients = [run_client(["--url", "http://127.0.0.1:%d/api/%s" % (port, name)] + common) for name in "ab"]
    for c in clients:
        out, err = c.communicate(timeout=30)
        sys.stdout.write(out + err)
        check(c.returncode == 0, "api_client exits with 0 (got %d)" % c.returncode)
        check("decisions without Redis: 0" in out, "every decision came from Redis")
    stop(server)
    stop(redis)

    rows = [r for r in read_log(log) if r[3] in ("/api/a", "/api/b")]
    check(len(rows) > 0, "the server saw the clients' requests")
    if not rows:
        return
    times = sorted(r[0] / 1e9 for r in rows)
    check(all(r[4] == 200 for r in rows), "no request was refused by the server")
    worst = max(j - i + 1 - (RATE * (times[j] - times[i] + JITTER) + BURST)
                for i in range(len(times)) for j in range(i, len(times)))
    check(worst <= 0, "in every window together at most %d/s x (time + %.1f s) + %d (worst excess %.2f)"
          % (RATE, JITTER, BURST, worst))
    total = len(rows)
    span = times[-1] - times[0]
    # Both ran for SECONDS; a shared quota that worked is also used (on a loaded machine
    # a process may start late: 60 % of the quota over the run at least).
    check(total >= 0.6 * RATE * SECONDS, "the quota was used: %d requests in %.2f s (%d/s x %.0f s = %d)"
          % (total, span, RATE, SECONDS, RATE * SECONDS))
    for name in "ab":
        n = sum(1 for r in rows if r[3] == "/api/" + name)
        check(n >= 0.25 * total, "process %s got a fair share: %d of %d (>= 25 %%)" % (name, n, total))


def server_quota_adopted():
    """The server announces 20/s; two clients start sharing 100/s: the first to read the
    policy lowers the shared key's rate, and both follow it."""
    redis, redis_port = start_redis(REDIS_SERVER)
    server, port = start_server(SERVER, "--rate", "20/s", "--burst", "5", "--seconds", "40")
    common = ["--redis", "127.0.0.1:%d" % redis_port, "--rate", "100/s", "--burst", "1", "--seconds", "4",
              "--concurrency", "4", "--quiet"]
    clients = [run_client(["--url", "http://127.0.0.1:%d/api/%s" % (port, name)] + common) for name in "cd"]
    outs = []
    for c in clients:
        out, err = c.communicate(timeout=30)
        sys.stdout.write(out + err)
        outs.append(out)
        check(c.returncode == 0, "api_client exits with 0 (got %d)" % c.returncode)
    stop(server)
    stop(redis)
    check(any("shared rate lowered to the server's quota: 20.000/s" in o for o in outs),
          "a client lowered the shared rate to the server's 20/s")
    ok = sum(int(re.search(r"status 200: (\d+)", o).group(1)) for o in outs if re.search(r"status 200: (\d+)", o))
    refused = sum(int(re.search(r"status 429: (\d+)", o).group(1)) for o in outs if re.search(r"status 429: (\d+)", o))
    # At 100/s the pair would be refused most of the time; following the server's quota,
    # almost never (the first requests go out before any policy is known).
    check(ok >= 40, "the pair was served: %d" % ok)
    check(refused <= 0.1 * (ok + refused), "few 429s once the quota was adopted: %d of %d" % (refused, ok + refused))


def spawn_redis_and_bad_input():
    server, port = start_server(SERVER, "--rate", "10000/s", "--burst", "10000", "--seconds", "40")
    url = "http://127.0.0.1:%d/api/x" % port
    res = subprocess.run([API_CLIENT, "--url", url, "--spawn-redis", "--rate", "50/s", "--requests", "20", "--quiet"],
                         capture_output=True, text=True, timeout=30)
    sys.stdout.write(res.stdout + res.stderr)
    check(res.returncode == 0 and "status 200: 20" in res.stdout, "--spawn-redis: 20 answered, exit 0")
    m = re.search(r"started redis-server \(pid (\d+)\)", res.stderr)
    check(m is not None, "--spawn-redis says which redis-server it started")
    if m:
        try:
            os.kill(int(m.group(1)), 0)
            alive = True
        except ProcessLookupError:
            alive = False
        check(not alive, "--spawn-redis: redis-server (pid %s) was stopped" % m.group(1))

    for args, message, rc in [
        (["--redis", "10.1.2.3:6379"], "loopback", 2),
        (["--redis", "127.0.0.1"], "port", 2),
        (["--redis", "127.0.0.1:70000"], "bad port", 2),
        (["--redis", "127.0.0.1:%d" % free_port()], "no connection within 3 s", 1),  # nobody listens
        (["--redis", "127.0.0.1:1", "--spawn-redis"], "exclude each other", 2),
    ]:
        res = subprocess.run([API_CLIENT, "--url", url, "--requests", "5", *args], capture_output=True, text=True,
                             timeout=30)
        check(res.returncode == rc and message in res.stderr,
              "api_client %s: exit %d (%d) with %r" % (" ".join(args), res.returncode, rc, message))
    stop(server)


signal.signal(signal.SIGALRM, on_alarm)
signal.alarm(70)
shared_quota()
server_quota_adopted()
spawn_redis_and_bad_input()
finish()
