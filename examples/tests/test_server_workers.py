"""Integration test of the example server's --workers N: prefork workers on one port
(SO_REUSEPORT) deciding on one per-client table in shared memory, under a parent that
supervises them.

- One client's requests, each on a connection of its own and several at once, land on
  both workers (their answers say which: Sluice-Worker), and exactly `burst` of them are
  admitted between the two: at 1/h nothing refills during the test, so the count is exact
  with no timing involved (two tables, one per worker, would admit up to twice as many).
- The table is a segment named after the port and the parent's pid, mode 0600, removed
  when the parent exits.
- SIGTERM to the parent stops every worker, exit 0; a worker killed (SIGKILL) makes the
  parent stop the other and exit non-zero; no worker outlives the parent.
- --workers 1 (the default) is the one-process server: no segment, no Sluice-Worker.
- Bad values are refused: --workers 0, and --delay-ms with --workers 2 (the shared table
  decides at once: nothing waits in it).

usage: test_server_workers.py SERVER_BIN"""

import os
import signal
import stat
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403

server_bin = sys.argv[1]
BURST = 10
REQUESTS = 48


def children(pid):
    """The processes whose parent is `pid` (from /proc)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(d))
    return sorted(out)


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def workers_of(p, n):
    """The n workers of server p, once it has forked them all (it says where it listens
    first)."""
    wait_until(lambda: len(children(p.pid)) >= n, 5, "%d worker processes" % n)
    return children(p.pid)


def segment(port, pid):
    return "/dev/shm/sluice-server-%d-%d" % (port, pid)


def exact_across_workers():
    p, port = start_server(server_bin, "--workers", "2", "--rate", "1/h", "--burst", str(BURST), "--seconds", "50")
    seg = segment(port, p.pid)
    check(os.path.exists(seg), "the table's segment is %s" % seg)
    if os.path.exists(seg):
        check(stat.S_IMODE(os.stat(seg).st_mode) == 0o600, "created 0600 (%o)" % stat.S_IMODE(os.stat(seg).st_mode))
    workers = workers_of(p, 2)
    check(len(workers) == 2, "two worker processes (%s)" % workers)

    # Eight senders at once, each request on a connection of its own: the kernel spreads the
    # connections over the two workers' queues by their source ports.
    answers = []
    lock = threading.Lock()

    def sender(k):
        for _ in range(k, REQUESTS, 8):
            r = get(port, "/api/x", {"Connection": "close"})
            with lock:
                answers.append((r.status, r.header("Sluice-Worker")))

    threads = [threading.Thread(target=sender, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    admitted = sum(1 for s, _ in answers if s == 200)
    refused = sum(1 for s, _ in answers if s == 429)
    by_worker = {w: sum(1 for _, x in answers if x == w) for w in ("0", "1")}
    check(len(answers) == REQUESTS and admitted == BURST and refused == REQUESTS - BURST,
          "%d requests from one client: exactly %d admitted between the two workers, %d refused (got %d, %d)"
          % (REQUESTS, BURST, REQUESTS - BURST, admitted, refused))
    check(by_worker["0"] > 0 and by_worker["1"] > 0 and by_worker["0"] + by_worker["1"] == REQUESTS,
          "both workers answered (Sluice-Worker 0: %d, 1: %d)" % (by_worker["0"], by_worker["1"]))
    r = get(port, "/site/1")
    check(r.status == 429, "and the client is still refused, whichever worker answers (%s)" % r.header("Sluice-Worker"))
    m = metrics(port)
    check(m.get("sluice_keys") == 1, "metrics: one client in the shared table (%s)" % m.get("sluice_keys"))

    rc = stop(p)
    check(rc == 0, "SIGTERM to the parent: every worker stops, exit 0 (%s)" % rc)
    check(not any(alive(w) for w in workers), "no worker left running")
    check(not os.path.exists(seg), "the segment is removed at exit")


def worker_killed():
    p, port = start_server(server_bin, "--workers", "2", "--seconds", "50")
    workers = workers_of(p, 2)
    check(len(workers) == 2, "two worker processes (%s)" % workers)
    if len(workers) != 2:
        stop(p)
        return
    os.kill(workers[0], signal.SIGKILL)
    try:
        rc = p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        rc = None
    check(rc not in (0, None), "a worker killed: the parent exits non-zero (%s)" % rc)
    check(not alive(workers[1]), "and stops the other worker")
    check(not os.path.exists(segment(port, p.pid)), "the segment is removed")


def one_process():
    p, port = start_server(server_bin, "--rate", "1/h", "--burst", "2", "--seconds", "50")
    rs = [get(port, "/api/x") for _ in range(3)]
    check([r.status for r in rs] == [200, 200, 429] and all(r.header("Sluice-Worker") is None for r in rs),
          "no --workers: one process, no Sluice-Worker header, the same limit")
    check(not os.path.exists(segment(port, p.pid)) and children(p.pid) == [], "no segment, no worker process")
    check(stop(p) == 0, "SIGTERM: exit 0")


def bad_values():
    for args in (["--workers", "0"], ["--workers", "x"], ["--workers", "2", "--delay-ms", "100"]):
        r = subprocess.run([server_bin, "--port", "0", *args], capture_output=True, text=True, timeout=10)
        check(r.returncode == 2 and r.stderr, "%s: refused, exit 2 (%d: %s)" % (" ".join(args), r.returncode,
                                                                           r.stderr.strip()))
    r = subprocess.run([server_bin, "--help"], capture_output=True, text=True, timeout=10)
    check("--workers N" in r.stdout and "default 1" in r.stdout.split("--workers N", 2)[-1],
          "--help shows --workers N and its default")


bad_values()
one_process()
exact_across_workers()
worker_killed()
finish()
