"""Integration test of the example server's --workers N: prefork workers on one port
(SO_REUSEPORT) deciding on one per-client table in shared memory, under a parent that
supervises them.

- One client's requests, each on a connection of its own and several at once, land on
  both workers (their answers say which: Sluice-Worker), and exactly `burst` of them are
  admitted between the two: at 1/h nothing refills during the test, so the count is exact
  with no timing involved (two tables, one per worker, would admit up to twice as many).
- The table is an unnamed segment, a sealed memfd, that the parent and both workers map (the
  same inode in each one's maps), with no name under /dev/shm for another user to take
  first: it cannot be truncated (sealed), and nothing is left behind at exit.
- SIGTERM to the parent stops every worker, exit 0; a worker killed (SIGKILL) makes the
  parent stop the other and exit non-zero; no worker outlives the parent.
- --delay-ms with --workers 2: one client's requests over its limit wait in the shared
  table, their turns taken across both workers. At --rate 2/s (interval I = 500 ms)
  --burst 4 --delay-ms 2250, 24 requests sent at once, 12 to each worker: the first
  decision (at t1) and the 3 next are admitted at once, the k-th request past the burst
  gets the slot t1 + k x I and waits for it if it is at most 2250 ms away, so k = 1..4
  (2000 ms) are granted and the others refused at once: exactly 4 + floor(2250 / 500) = 8
  answered 200, 16 answered 429. (The count holds while every decision comes within
  250 ms of the first: the 5th slot, at t1 + 2500 ms, is within 2250 ms only of a request
  decided 250 ms or more after t1; the requests go on connections both workers serve
  already, so they are decided within milliseconds.) No 200 comes before its slot: the
  (4 + k)-th 200 is received at least k x I (less 10 ms of timer slack) after the first
  request was sent; no upper bound on time is checked. Both workers' /metrics add up:
  admitted 4, delayed 4, rejected 16, the wait histogram counts the 4, none waited under
  100 ms, and per_client's limiter_stats (the table's waits, per worker) agree.
- Shutdown with requests waiting in both workers (--delay-ms 600000): SIGTERM answers
  every one 503 "shutting down" and the server exits 0 at once.
- A process that maps the table, takes every shard's lock and stops (SIGSTOP): a new client
  is answered 503 with Retry-After after the lock's bound (100 ms), a client already in the
  table still decides (200, then 429), and SIGTERM stops the server at once, exit 0.
- --workers 1 (the default) is the one-process server: no segment, no Sluice-Worker.
- Bad values are refused: --workers 0, --workers x.

usage: test_server_workers.py SERVER_BIN"""

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *  # noqa: E402,F403

server_bin = sys.argv[1]
tmp = tempfile.mkdtemp(prefix="sluice-workers-test-")
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
    """Where the table was, by name, before it was unnamed: no file may be there."""
    return "/dev/shm/sluice-server-%d-%d" % (port, pid)


MEMFD = "/memfd:sluice-shm"


def memfd_inodes(pid):
    """The inodes of the table's memfd that process pid maps."""
    found = set()
    try:
        with open("/proc/%d/maps" % pid) as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6 and parts[5].startswith(MEMFD):
                    found.add(int(parts[4]))
    except OSError:
        pass
    return found


def memfd_sealed(pid):
    """Whether the table's descriptor in process pid is sealed against shrinking: opened
    again through /proc, F_GET_SEALS, and a truncation that must fail."""
    import fcntl
    for fd in os.listdir("/proc/%d/fd" % pid):
        path = "/proc/%d/fd/%s" % (pid, fd)
        try:
            if not os.readlink(path).startswith(MEMFD):
                continue
            g = os.open(path, os.O_RDWR)
        except OSError:
            continue
        try:
            seals = fcntl.fcntl(g, 1034)   # F_GET_SEALS
            try:
                os.ftruncate(g, 0)
                truncated = True
            except OSError:
                truncated = False
            return bool(seals & 2) and not truncated   # F_SEAL_SHRINK
        finally:
            os.close(g)
    return False


def exact_across_workers():
    p, port = start_server(server_bin, "--workers", "2", "--rate", "1/h", "--burst", str(BURST), "--seconds", "50")
    seg = segment(port, p.pid)
    check(not os.path.exists(seg), "the table has no name under /dev/shm (%s)" % seg)
    workers = workers_of(p, 2)
    check(len(workers) == 2, "two worker processes (%s)" % workers)
    inodes = [memfd_inodes(pid) for pid in [p.pid] + workers]
    check(len(inodes[0]) == 1 and all(i == inodes[0] for i in inodes),
          "the parent and both workers map one unnamed segment, a memfd (%s)" % inodes)
    check(memfd_sealed(p.pid), "sealed: it cannot be truncated")

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
    check(not os.path.exists(seg), "nothing left under /dev/shm at exit")


def connections_on_workers(port, n):
    """n keep-alive connections to each of the two workers, {"0": [...], "1": [...]}, told
    apart by the Sluice-Worker of a /metrics answer (not limited) on each: the kernel picks
    a connection's worker by its addresses and ports."""
    by = {"0": [], "1": []}
    for _ in range(100 * n):
        if all(len(v) >= n for v in by.values()):
            break
        s = connect(port)
        s.sendall(request("/metrics"))
        w = read_responses(s, 1)[0].header("Sluice-Worker")
        if len(by[w]) < n:
            by[w].append(s)
        else:
            s.close()
    if not all(len(v) >= n for v in by.values()):
        raise AssertionError("no %d connections to each worker (%s)" % (n, {w: len(v) for w, v in by.items()}))
    return by


def worker_metrics(s):
    """The /metrics of the worker at the other end of keep-alive connection s."""
    s.sendall(request("/metrics"))
    return parse_metrics(read_responses(s, 1)[0])


def delay_across_workers():
    interval, burst, delay_ms, per_worker = 0.5, 4, 2250, 12
    expected = burst + int(delay_ms / 1000 // interval)   # 8
    log = os.path.join(tmp, "delay.log")
    p, port = start_server(server_bin, "--workers", "2", "--rate", "2/s", "--burst", str(burst),
                           "--delay-ms", str(delay_ms), "--access-log", log, "--seconds", "50")
    by = connections_on_workers(port, per_worker)
    socks = [s for pair in zip(by["0"], by["1"]) for s in pair]   # alternately to each worker
    received = []
    lock = threading.Lock()

    def reader(s):
        r = read_responses(s, 1)[0]
        t = time.monotonic()
        with lock:
            received.append((t, r))

    threads = [threading.Thread(target=reader, args=(s,)) for s in socks]
    for t in threads:
        t.start()
    sent = time.monotonic()   # before the first decision: the slots are counted from after it
    for s in socks:
        s.sendall(request("/api/x"))
    for t in threads:
        t.join(30)
    statuses = [r.status for _, r in received]
    ok = sorted(t - sent for t, r in received if r.status == 200)
    check(len(received) == 2 * per_worker and statuses.count(200) == expected and
          statuses.count(429) == 2 * per_worker - expected,
          "--delay-ms %d with --workers 2 at 2/s burst %d: %d requests from one client over both workers, "
          "exactly %d answered 200 (burst + floor(%d ms / %d ms)), the rest 429 (got %d answers: %d, %d)"
          % (delay_ms, burst, 2 * per_worker, expected, delay_ms, interval * 1000, len(received),
             statuses.count(200), statuses.count(429)))
    late = [(k, round(ok[burst + k - 1], 3)) for k in range(1, expected - burst + 1)
            if len(ok) >= burst + k and ok[burst + k - 1] < k * interval - 0.010]
    check(len(ok) == expected and not late,
          "no 200 before its slot: the (%d + k)-th 200 comes k x %d ms or more after the send (200s at %s s)"
          % (burst, interval * 1000, [round(t, 3) for t in ok]))
    check(all(r.header("Retry-After") and int(r.header("Retry-After")) >= 1 for _, r in received if r.status == 429),
          "every 429 carries Retry-After >= 1")
    check(all(r.header("RateLimit") and r.header("RateLimit-Policy") == '"default";q=2;w=1;sluice-burst=4'
              for _, r in received), "RateLimit fields on every 200 and 429")

    ms = [worker_metrics(by[w][0]) for w in ("0", "1")]
    tot = lambda k: sum(m.get(k, 0) for m in ms)  # noqa: E731
    admitted, delayed = tot('sluice_requests_total{result="admitted"}'), tot('sluice_requests_total{result="delayed"}')
    check(admitted == burst and delayed == expected - burst and
          tot('sluice_requests_total{result="rejected"}') == 2 * per_worker - expected,
          "metrics of both workers: admitted %d, delayed %d, rejected %d (%s, %s, %s)"
          % (burst, expected - burst, 2 * per_worker - expected, admitted, delayed,
             tot('sluice_requests_total{result="rejected"}')))
    check(all(m.get("sluice_queue_depth") == 0 for m in ms), "metrics: nothing queued now")
    check(tot("sluice_wait_seconds_count") == delayed and tot('sluice_wait_seconds_bucket{le="0.1"}') == 0,
          "metrics: the wait histogram counts the delayed requests, none waited under 100 ms")
    pc = 'limiter="per_client"'
    check(tot('sluice_limiter_requests_total{%s,outcome="admitted"}' % pc) == delayed and
          tot("sluice_limiter_waited_total{%s}" % pc) == delayed and
          tot('sluice_limiter_requests_total{%s,outcome="timed_out"}' % pc) == 2 * per_worker - expected and
          tot("sluice_limiter_waiting{%s}" % pc) == 0,
          "metrics: per_client (the shared table's waits) admitted the delayed requests after a wait, "
          "timed out the 429s")
    check(all('sluice_limiter_try_acquire_total{%s,outcome="admitted"}' % pc not in m for m in ms),
          "metrics: no per_client try_acquire counts with --workers (the table does not keep them)")
    check(abs(tot("sluice_limiter_wait_seconds_total{%s}" % pc) - tot("sluice_wait_seconds_sum")) <= 0.005 * delayed,
          "metrics: the limiter's total wait is the server's own measure (5 ms each)")
    for s in socks:
        s.close()
    check(stop(p) == 0, "SIGTERM: exit 0")
    rows = [r for r in read_log(log) if r[3] == "/api/x"]
    waited = [r[5] for r in rows if r[4] == 200 and r[5] > 0]
    check(len(rows) == 2 * per_worker and len(waited) == expected - burst and all(w >= 100_000 for w in waited),
          "access log (both workers): %d lines, %d delayed 200s, each waited 100 ms or more (%s us)"
          % (2 * per_worker, expected - burst, waited))


def shutdown_with_waiters():
    # A 1/min bucket spent at once, then one request waiting in worker 0 and two in worker 1
    # (slots 1 to 3 min away, within --delay-ms 600000): SIGTERM must answer all three 503
    # and the server exit at once.
    p, port = start_server(server_bin, "--workers", "2", "--rate", "1/min", "--burst", "1",
                           "--delay-ms", "600000", "--seconds", "50")
    by = connections_on_workers(port, 3)
    by["0"][1].sendall(request("/api/x"))
    check(read_responses(by["0"][1], 1)[0].status == 200, "the burst of 1 admitted")
    waiters = [by["0"][2], by["1"][1], by["1"][2]]
    for s in waiters:
        s.sendall(request("/api/x"))
    wait_until(lambda: [worker_metrics(by[w][0]).get("sluice_queue_depth") for w in ("0", "1")] == [1, 2], 10,
               "one request waiting in worker 0, two in worker 1")
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    rs = []
    for s in waiters:
        try:
            rs.append(read_responses(s, 1)[0])
        except (AssertionError, OSError):
            rs.append(None)   # closed unanswered
    try:
        rc = p.wait(timeout=15)   # the parent kills a worker still running 10 s after SIGTERM
    except subprocess.TimeoutExpired:
        rc = None
    check(all(r and r.status == 503 and r.body == b"shutting down\n" for r in rs),
          "SIGTERM: every waiting request, in either worker, answered 503 shutting down (%s)"
          % [r and (r.status, r.body) for r in rs])
    check(rc == 0 and time.monotonic() - t0 < 3, "exit 0 within 3 s with requests waiting (%s)" % rc)
    for v in by.values():
        for s in v:
            s.close()


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
    check(not os.path.exists(segment(port, p.pid)), "nothing left under /dev/shm")


# A process of the server's user that maps the table (through the parent's descriptor, in
# /proc), locks every shard's lock and stops itself (SIGSTOP), as a stuck or stopped
# process would. The table: 100,000 keys in 97 shards; the segment's header is 128 bytes,
# the table's own 128, then each shard's 128, its lock first.
LOCKER = r"""
import ctypes, mmap, os, signal, sys
f = os.open(sys.argv[1], os.O_RDWR)
mm = mmap.mmap(f, os.fstat(f).st_size)
base = ctypes.addressof(ctypes.c_char.from_buffer(mm))
libc = ctypes.CDLL(None)
for i in range(int(sys.argv[2])):
    if libc.pthread_mutex_lock(ctypes.c_void_p(base + 256 + 128 * i)) != 0:
        sys.exit(3)
print("locked", flush=True)
os.kill(os.getpid(), signal.SIGSTOP)
"""


def stopped_lock_holder():
    p, port = start_server(server_bin, "--workers", "2", "--rate", "1/h", "--burst", "2", "--seconds", "50")
    workers_of(p, 2)
    check(get(port, "/api/x").status == 200, "a client's first request admitted (its key now in the table)")
    fd = None
    for name in os.listdir("/proc/%d/fd" % p.pid):
        try:
            if os.readlink("/proc/%d/fd/%s" % (p.pid, name)).startswith(MEMFD):
                fd = name
        except OSError:
            pass
    check(fd is not None, "the parent holds the table's descriptor")
    if fd is None:
        stop(p)
        return
    locker = spawn([sys.executable, "-c", LOCKER, "/proc/%d/fd/%s" % (p.pid, fd), "97"], stdout=subprocess.PIPE)
    line = locker.stdout.readline()
    _, status = os.waitpid(locker.pid, os.WUNTRACED)
    check(line == b"locked\n" and os.WIFSTOPPED(status), "another process holds every shard's lock, stopped")

    # A new client needs its shard's lock: 503 after the lock's bound (100 ms), never a hang.
    t = time.monotonic()
    r = get(port, "/api/x", source="127.0.0.2")
    took = time.monotonic() - t
    check(r.status == 503 and r.header("Retry-After") is not None,
          "a new client while the lock is held: 503 with Retry-After (%d %r)" % (r.status, r.body))
    check(took < 3, "answered within seconds (%.3f s)" % took)
    r = get(port, "/api/x")
    check(r.status == 200, "a client already in the table decides without the lock: 200 (%d)" % r.status)
    check(get(port, "/api/x").status == 429, "and then its limit: 429")
    t = time.monotonic()
    rc = stop(p)
    check(rc == 0 and time.monotonic() - t < 5, "SIGTERM: exit 0 at once (%s)" % rc)
    locker.kill()
    locker.wait()


def one_process():
    p, port = start_server(server_bin, "--rate", "1/h", "--burst", "2", "--seconds", "50")
    rs = [get(port, "/api/x") for _ in range(3)]
    check([r.status for r in rs] == [200, 200, 429] and all(r.header("Sluice-Worker") is None for r in rs),
          "no --workers: one process, no Sluice-Worker header, the same limit")
    check(not os.path.exists(segment(port, p.pid)) and children(p.pid) == [], "no segment, no worker process")
    check(stop(p) == 0, "SIGTERM: exit 0")


def ipv6_client_waits():
    # A client named by an IPv6 address (from a trusted proxy's X-Forwarded-For) is one key
    # of the shared table, its 16 bytes: its burst of 1 spent in worker 0, its next request
    # waits in worker 1 (the wait keeps its own copy of the key), and SIGTERM answers it 503.
    p, port = start_server(server_bin, "--workers", "2", "--rate", "1/min", "--burst", "1",
                           "--delay-ms", "600000", "--trusted-proxy", "127.0.0.1", "--seconds", "50")
    by = connections_on_workers(port, 2)
    v6 = {"X-Forwarded-For": "2001:db8::7"}
    by["0"][1].sendall(request("/api/x", v6))
    check(read_responses(by["0"][1], 1)[0].status == 200, "IPv6 client: its burst of 1 admitted in worker 0")
    by["1"][1].sendall(request("/api/x", v6))
    wait_until(lambda: worker_metrics(by["1"][0]).get("sluice_queue_depth") == 1, 10,
               "IPv6 client: its next request waits in worker 1 (one bucket across workers)")
    p.send_signal(signal.SIGTERM)
    r = read_responses(by["1"][1], 1)[0]
    check(r.status == 503, "IPv6 client: the waiting request answered 503 on SIGTERM (%s)" % r.status)
    try:
        rc = p.wait(timeout=15)
    except subprocess.TimeoutExpired:
        rc = None
    check(rc == 0, "IPv6 client: SIGTERM: exit 0 (%s)" % rc)
    stop(p)


def bad_values():
    for args in (["--workers", "0"], ["--workers", "x"]):
        r = subprocess.run([server_bin, "--port", "0", *args], capture_output=True, text=True, timeout=10)
        check(r.returncode == 2 and r.stderr, "%s: refused, exit 2 (%d: %s)" % (" ".join(args), r.returncode,
                                                                           r.stderr.strip()))
    r = subprocess.run([server_bin, "--help"], capture_output=True, text=True, timeout=10)
    check("--workers N" in r.stdout and "default 1" in r.stdout.split("--workers N", 2)[-1],
          "--help shows --workers N and its default")


bad_values()
one_process()
exact_across_workers()
delay_across_workers()
shutdown_with_waiters()
ipv6_client_waits()
worker_killed()
stopped_lock_holder()
finish()
