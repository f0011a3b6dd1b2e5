#!/usr/bin/env python3
"""The example server against clients and proxy headers that try to get past its limits,
checked from raw sockets (one case a run):

- forwarded: through a trusted proxy (127.0.0.1), 100 requests each with a forged
  X-Forwarded-For line first and the proxy's own line appended (HAProxy's `option
  forwardfor`) are one client's: at --rate 1/min --burst 5 exactly 5 are admitted, at
  --rate 10/s --burst 5 no more than 5 + what refilled while they ran. The same with
  the forgery in a Forwarded field (the proxy writes X-Forwarded-For), with
  --proxy-header Forwarded (the forgery in X-Forwarded-For), through a trusted CIDR
  block, for an IPv6 client. /metrics answers loopback only by default, judged by the
  client behind a trusted proxy, and --metrics-allow sets who else.
- bodies: 500 connections each send a GET with Content-Length: 1048576 and all of its
  body but the last byte: the server decides on each from its header and drops the
  bodies as they come, so its peak RSS (VmHWM) stays under 64 MB (under a sanitizer,
  which keeps freed memory in quarantine, the growth from its start is bounded instead),
  and a normal client is answered meanwhile; each of the 500 is answered once its last
  byte comes.
- framing: RFC 9112 details answered as RFC 9112 says, over the wire: obs-fold 400,
  `Transfer-Encoding: chunked, chunked` 400 and closed, Transfer-Encoding in HTTP/1.0
  400 and closed, an unknown coding 501 and closed; --keepalive-requests 3: the third
  answer on a connection says Connection: close, and the connection closes.
- budget: --read-budget 1 MiB, and 2,000 connections each sending an 8 KiB header slowly
  (one field that does not end, 900 bytes at a time): the read buffers never hold more
  than the budget together (its peak in /metrics), the server grows by less than the
  budget and 6 KiB a connection (its socket, coroutine and parser; the buffers alone
  would be 8 KiB a connection more), a normal client is answered meanwhile, every
  connection refused for want of room gets 503 with Retry-After (as many as /metrics
  counts), and once they have all gone the buffers hold nothing but /metrics' own.
- expect: Expect: 100-continue gets 100 (Continue) before the body is sent, for a body of
  known length and a chunked one, and the connection goes on; refused from the header
  (429 by the client's limit, 405, 413) the final answer comes without a 100 and the
  connection closes with the body unsent; an HTTP/1.0 request's expectation is ignored.
- linger: a client that sends its whole body after the answer (a 413 for 3 MiB; a 429 to
  an Expect: 100-continue it did not wait for) sends it without a reset, then reads the
  answer and the end of the stream; one that never stops sending is closed after the
  bytes bound, one that sends a byte now and then after the time bound (/metrics says
  which ended each).

usage: test_server_untrusted.py CASE SERVER"""

import os
import re
import resource
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (check, connect, finish, get, metrics, parse_metrics, read_responses, request,  # noqa: E402
                     start_server, stop)

CASE, SERVER = sys.argv[1], sys.argv[2]


def statuses(rs):
    return [r.status for r in rs]


def forged_requests(n, header_lines):
    """n requests on one keep-alive connection from the proxy (127.0.0.1), each with the
    fields header_lines(i) gives, in order; returns their statuses and the time taken."""
    t0 = time.monotonic()
    with connect(PORT) as s:
        data = b""
        for i in range(n):
            fields = "".join("%s: %s\r\n" % kv for kv in header_lines(i))
            data += ("GET /api/x HTTP/1.1\r\nHost: t\r\n%s\r\n" % fields).encode()
        s.sendall(data)
        rs = read_responses(s, n)
    return statuses(rs), time.monotonic() - t0


def forged(i):
    return "10.%d.%d.%d" % (i // 65536 % 256, i // 256 % 256, i % 256 + 1)


def forwarded():
    global PORT
    real = "198.51.100.7"
    two_lines = lambda i: [("X-Forwarded-For", forged(i)), ("X-Forwarded-For", real)]

    # 1/min: nothing refills during the test, so the count is exact.
    p, PORT = start_server(SERVER, "--rate", "1/min", "--burst", "5", "--trusted-proxy", "127.0.0.1")
    got, _ = forged_requests(100, two_lines)
    check(got.count(200) == 5 and got.count(429) == 95,
          "100 requests with 100 forged first X-Forwarded-For lines, the proxy's line second: one client, "
          "5 admitted (got %d x 200, %d x 429)" % (got.count(200), got.count(429)))
    got, _ = forged_requests(10, lambda i: [("X-Forwarded-For", forged(i) + ", " + real)])
    check(got.count(200) == 0, "the same client in one combined line: still limited (%s)" % got)
    got, _ = forged_requests(3, lambda i: [("X-Forwarded-For", "203.0.113.9")])
    check(got == [200] * 3, "another client behind the proxy has its own bucket (%s)" % got)
    # The forgery in Forwarded, which the proxy does not write: ignored.
    got, _ = forged_requests(20, lambda i: [("Forwarded", "for=" + forged(i)), ("X-Forwarded-For", "203.0.113.10")])
    check(got.count(200) == 5, "forged Forwarded fields are ignored (--proxy-header X-Forwarded-For): 5 admitted (%d)"
          % got.count(200))
    # A client that writes garbage or `unknown` after its forgery gets the proxy's own key,
    # never the forgery's.
    got, _ = forged_requests(10, lambda i: [("X-Forwarded-For", forged(i) + ", garbage-%d" % i)])
    check(got.count(200) == 5, "garbage in the list stops at the proxy: one key, 5 admitted (%d)" % got.count(200))
    # /metrics: loopback by default; a client behind the trusted proxy is judged as itself.
    r = get(PORT, "/metrics")
    check(r.status == 200, "/metrics from 127.0.0.1: 200")
    r = get(PORT, "/metrics", {"X-Forwarded-For": "203.0.113.50"})
    check(r.status == 403, "/metrics for a remote client behind the trusted proxy: 403 (%d)" % r.status)
    check(stop(p) == 0, "exit code 0")

    # --rate 10/s --burst 5, as the run: at most the burst and the refill.
    p, PORT = start_server(SERVER, "--rate", "10/s", "--burst", "5", "--trusted-proxy", "127.0.0.1")
    got, took = forged_requests(100, two_lines)
    bound = 5 + int(10 * took) + 1
    check(got.count(200) <= bound, "--rate 10/s --burst 5: %d admitted of 100 forged, at most burst + refill (%d in %.2f s)"
          % (got.count(200), bound, took))
    check(stop(p) == 0, "exit code 0")

    # --proxy-header Forwarded, a trusted block, an IPv6 client; forged X-Forwarded-For ignored.
    p, PORT = start_server(SERVER, "--rate", "1/min", "--burst", "3", "--trusted-proxy", "127.0.0.0/30",
                           "--proxy-header", "Forwarded", "--metrics-allow", "127.0.0.3")
    got, _ = forged_requests(10, lambda i: [("Forwarded", "for=%s" % forged(i)),
                                            ("Forwarded", 'for="[2001:db8::7]:4711";proto=http'),
                                            ("X-Forwarded-For", forged(i + 1000))])
    check(got.count(200) == 3, "--proxy-header Forwarded: forged first lines and X-Forwarded-For ignored, "
          "the IPv6 client limited: 3 admitted (%d)" % got.count(200))
    with connect(PORT, source="127.0.0.2") as s:   # inside 127.0.0.0/30: trusted too
        s.sendall(b"".join(request("/api/x", {"Forwarded": 'for="[2001:DB8:0::7]"'}) for _ in range(2)))
        got = statuses(read_responses(s, 2))
    check(got == [429, 429], "the same IPv6 client through another proxy of the block, written otherwise: "
          "the same bucket (%s)" % got)
    check(get(PORT, "/metrics").status == 403, "--metrics-allow 127.0.0.3: 127.0.0.1 gets 403")
    check(get(PORT, "/metrics", source="127.0.0.3").status == 200, "--metrics-allow 127.0.0.3: 127.0.0.3 gets 200")
    check(stop(p) == 0, "exit code 0")

    for bad in (["--trusted-proxy", "10.0.0.1/8"], ["--trusted-proxy", "proxy.local"],
                ["--proxy-header", "X-Real-IP"], ["--metrics-allow", "1.2.3.4/33"], ["--keepalive-requests", "0"]):
        res = subprocess.run([SERVER, *bad], capture_output=True, timeout=10)
        check(res.returncode == 2 and res.stderr, "%s: exit code 2 with a message" % " ".join(bad))


def status_of(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no %s in /proc/%d/status" % (field, pid))


def sanitized():
    try:
        out = subprocess.run(["ldd", SERVER], capture_output=True, text=True, timeout=10).stdout
    except OSError:
        return False
    return "libasan" in out or "libtsan" in out


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_idle(pid, limit):
    """Waits until pid has used no CPU for 200 ms (at most `limit` s); returns how long."""
    t0 = time.monotonic()
    last = cpu_seconds(pid)
    while time.monotonic() - t0 < limit:
        time.sleep(0.2)
        now = cpu_seconds(pid)
        if now == last:
            break
        last = now
    return time.monotonic() - t0


def bodies():
    n, size = 500, 1 << 20
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, 4096) if hard != resource.RLIM_INFINITY else 4096
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    p, port = start_server(SERVER, "--rate", "100000/s", "--burst", "100000", "--max-connections", "1000")
    start_rss = status_of(p.pid, "VmRSS")
    head = b"GET /api/x HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % size
    body = b"x" * (size - 1)
    socks = []
    t0 = time.monotonic()
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.sendall(head + body)
        socks.append(s)
    sent = time.monotonic() - t0
    # sendall returns once the kernel holds the bytes: the server is done with them when it
    # stops using CPU. Then, the 500 connections still open, a normal client is answered.
    drained = wait_idle(p.pid, 20)
    t1 = time.monotonic()
    r = get(port, "/api/x", source="127.0.0.2")
    took = time.monotonic() - t1
    check(r.status == 200 and took < 1, "a normal client is answered while %d connections each hold a 1 MiB body "
          "(%d in %.0f ms; the bodies read %.1f s after they were sent)" % (n, r.status, took * 1e3, drained))
    peak = status_of(p.pid, "VmHWM")
    if sanitized():
        check(peak - start_rss < 64 << 20, "%d x 1 MiB bodies sent in %.1f s: the server grew by %.1f MB (under a "
              "sanitizer: the growth is bounded, < 64 MB)" % (n, sent, (peak - start_rss) / 1e6))
    else:
        check(peak < 64 << 20, "%d x 1 MiB bodies sent in %.1f s: peak RSS %.1f MB < 64 MB (%.1f MB at start)"
              % (n, sent, peak / 1e6, start_rss / 1e6))
    for s in socks:
        s.sendall(b"x")
    answered = 0
    for s in socks:
        try:
            answered += read_responses(s, 1)[0].status == 200
        except (AssertionError, OSError):
            pass
        s.close()
    check(answered == n, "each of them is answered 200 once its last byte comes (%d of %d)" % (answered, n))
    check(stop(p) == 0, "exit code 0")


def exchange(port, data, wait=3.0):
    """Sends data, returns everything the server answers until it closes (None: it did not
    close within `wait`)."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
        s.sendall(data)
        out = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    return out
                out += chunk
        except ConnectionResetError:
            return out   # closed with the rest of the request unread: the answer came first
        except socket.timeout:
            return None


def framing():
    p, port = start_server(SERVER, "--rate", "1000/s", "--burst", "1000", "--keepalive-requests", "3")
    cases = [
        (b"GET / HTTP/1.1\r\nHost: h\r\nX-A: one\r\n two\r\n\r\n", 400, "obs-fold"),
        (b"GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n", 400,
         "Transfer-Encoding: chunked, chunked"),
        (b"GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400,
         "Transfer-Encoding: chunked on two lines"),
        (b"GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n0\r\n\r\n", 400,
         "Transfer-Encoding in HTTP/1.0 (with keep-alive asked)"),
        (b"GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: foo, chunked\r\n\r\n0\r\n\r\n", 501, "an unknown coding"),
    ]
    for data, want, what in cases:
        out = exchange(port, data + b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
        got = re.match(rb"HTTP/1\.[01] (\d{3})", out or b"")
        check(out is not None and got and int(got.group(1)) == want and out.count(b"\r\nServer: sluice-example\r\n") == 1,
              "%s: %d, and the connection closed (the request after it unanswered)" % (what, want))
    # A GET with a body: served, the body dropped, the next request on the connection served.
    with connect(port) as s:
        s.sendall(b"GET /site/1 HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello" +
                  b"GET /site/2 HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
        rs = read_responses(s, 2)
    check(statuses(rs) == [200, 200] and b"page 2" in rs[1].body, "GET with a body, then GET chunked: both served")
    # --keepalive-requests 3: three answers, the third with Connection: close, then EOF.
    with connect(port) as s:
        s.sendall(b"".join(request("/api/x") for _ in range(5)))
        rs = read_responses(s, 3)
        rest = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                rest += chunk
        except ConnectionResetError:
            pass
        except socket.timeout:
            rest = None
    check(statuses(rs) == [200] * 3 and [r.header("Connection") for r in rs] == [None, None, "close"],
          "--keepalive-requests 3: the third answer says Connection: close (%s)" % [r.header("Connection") for r in rs])
    check(rest == b"", "and the connection closes after it, the rest unanswered")
    m = metrics(port)
    check(m.get('sluice_bad_requests_total{status="501"}') == 1 and m.get('sluice_bad_requests_total{status="400"}') == 4,
          "metrics count the 400s and the 501")
    check(stop(p) == 0, "exit code 0")


def raise_nofile(want):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, want) if hard != resource.RLIM_INFINITY else want
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return want


def budget():
    n, limit = 2000, 1 << 20
    if raise_nofile(n + 200) < n + 200:
        n = resource.getrlimit(resource.RLIMIT_NOFILE)[0] - 200
    p, port = start_server(SERVER, "--rate", "100000/s", "--burst", "100000", "--read-budget", str(limit),
                           "--max-connections", str(n + 100))
    start_rss = status_of(p.pid, "VmRSS")
    socks = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(n)]
    for s in socks:
        s.sendall(b"GET /api/x HTTP/1.1\r\nHost: t\r\nX-Pad: ")
    t0 = time.monotonic()
    for _ in range(8):   # 7200 bytes of one field, which never ends
        for s in socks:
            try:
                s.sendall(b"a" * 900)
            except OSError:
                pass   # refused, and the lingering is over
        time.sleep(0.05)
    sent = time.monotonic() - t0
    wait_idle(p.pid, 10)
    t1 = time.monotonic()
    r = get(port, "/api/x", source="127.0.0.2")
    took = time.monotonic() - t1
    check(r.status == 200 and took < 1, "a normal client is answered while %d connections hold large headers "
          "(%d in %.0f ms)" % (n, r.status, took * 1e3))
    m = metrics(port)
    refused = m.get("sluice_read_budget_refused_total", -1)
    peak = m.get('sluice_read_buffer_bytes{at="peak"}', -1)
    check(0 < peak <= limit and m.get("sluice_read_budget_bytes") == limit,
          "the read buffers held %d bytes at most together, within the budget of %d" % (peak, limit))
    check(refused > n // 2, "the connections the budget had no room for were refused (%d of %d)" % (refused, n))
    growth = status_of(p.pid, "VmHWM") - start_rss
    bound = limit + n * 6 * 1024
    if sanitized():
        print("     (under a sanitizer the server grew by %.1f MB: freed memory is kept in quarantine)" % (growth / 1e6))
    else:
        check(growth < bound, "%d connections with 8 KiB headers sent in %.1f s: the server grew by %.1f MB, "
              "< %.1f MB (the budget and 6 KiB a connection)" % (n, sent, growth / 1e6, bound / 1e6))
    answers = retry = 0
    for s in socks:
        s.setblocking(False)
        try:
            out = s.recv(65536)
        except OSError:
            continue
        if out.startswith(b"HTTP/1.1 503 "):
            answers += 1
            retry += b"\r\nRetry-After: 1\r\n" in out and b"\r\nConnection: close\r\n" in out
    check(answers == refused and retry == answers, "each refused connection read its 503, with Retry-After and "
          "Connection: close (%d read, %d with both, %d counted)" % (answers, retry, refused))
    for s in socks:
        s.close()
    wait_idle(p.pid, 10)
    m = metrics(port)
    check(m.get('sluice_read_buffer_bytes{at="now"}') == 512,
          "once they have gone, the buffers hold only /metrics' own 512 bytes (%s)" % m.get('sluice_read_buffer_bytes{at="now"}'))
    check(stop(p) == 0, "exit code 0")
    for bad in ("0", "65535", "64MiB", "-1", "1099511627777", ""):
        res = subprocess.run([SERVER, "--read-budget", bad], capture_output=True, timeout=10)
        check(res.returncode == 2 and b"--read-budget" in res.stderr, "--read-budget '%s': exit code 2 with a message" % bad)


def recv_for(s, wait):
    """What s receives within `wait` seconds (less if it closes), and whether it closed."""
    s.settimeout(wait)
    out = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return out, True
            out += chunk
    except socket.timeout:
        return out, False


def expect():
    p, port = start_server(SERVER, "--rate", "1/min", "--burst", "3")
    head = "GET /api/x HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n%s\r\n"
    with connect(port) as s:
        s.sendall((head % "Content-Length: 5\r\n").encode())
        got, closed = recv_for(s, 1)
        check(got == b"HTTP/1.1 100 Continue\r\n\r\n" and not closed, "accepted: 100 Continue before the body (%r)" % got)
        s.sendall(b"hello")
        check(read_responses(s, 1)[0].status == 200, "then its answer, 200")
        s.sendall((head % "Transfer-Encoding: chunked\r\n").encode())
        got, closed = recv_for(s, 1)
        check(got == b"HTTP/1.1 100 Continue\r\n\r\n" and not closed, "a chunked body: its 100 too, on the same "
              "connection (%r)" % got)
        s.sendall(b"3\r\nabc\r\n0\r\n\r\n")
        check(read_responses(s, 1)[0].status == 200, "then its answer, 200")
    check(get(port, "/api/x").status == 200, "the client's third request, its burst spent")
    # Refused from its header by the client's limit.
    with connect(port) as s:
        s.sendall((head % "Content-Length: 100000\r\n").encode())
        got, closed = recv_for(s, 2)
    check(got.startswith(b"HTTP/1.1 429 ") and b"100 Continue" not in got and b"\r\nConnection: close\r\n" in got
          and closed, "over its limit: 429 at once, no 100, and the connection closed, the body never sent")
    for what, data, status in (
            ("a method not served", b"POST / HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 9\r\n\r\n", 405),
            ("a body past 1 MiB", (head % "Content-Length: 2000000\r\n").encode(), 413)):
        with connect(port, source="127.0.0.2") as s:
            s.sendall(data)
            got, closed = recv_for(s, 2)
        check(got.startswith(b"HTTP/1.1 %d " % status) and b"100 Continue" not in got and closed,
              "%s: %d at once, no 100, the connection closed" % (what, status))
    with connect(port, source="127.0.0.3") as s:   # another client, its own burst
        s.sendall(b"GET /api/x HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
        got, closed = recv_for(s, 0.5)
        s.sendall(b"hello")
        r = read_responses(s, 1)[0]
    check(got == b"" and not closed and r.status == 200, "HTTP/1.0: the expectation ignored (no 100), the body read, 200")
    check(stop(p) == 0, "exit code 0")


def small_sender(port, source="127.0.0.1"):
    """A connection whose send buffer is small, so that the kernel holds little of what it
    sends for the server: a reset from the server shows as a failed send."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
    s.settimeout(10)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def linger():
    p, port = start_server(SERVER, "--rate", "1/min", "--burst", "1")
    size = 3 << 20
    with small_sender(port) as s:
        s.sendall(b"GET /api/x HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % size)
        try:
            s.sendall(b"x" * size)
            err = None
        except OSError as e:
            err = e
        got, closed = recv_for(s, 3)
    check(err is None and got.startswith(b"HTTP/1.1 413 ") and closed,
          "3 MiB sent after a 413: all sent (%s), then the answer and the end of the stream" % (err or "no reset"))
    get(port, "/api/x", source="127.0.0.2")   # its burst spent
    with small_sender(port, "127.0.0.2") as s:
        s.sendall(b"GET /api/x HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 1000000\r\n\r\n")
        try:
            s.sendall(b"x" * 1000000)   # not waiting for the 100
            err = None
        except OSError as e:
            err = e
        got, closed = recv_for(s, 3)
    check(err is None and got.startswith(b"HTTP/1.1 429 ") and closed,
          "1 MB sent after a 429 to an Expect: 100-continue not waited for: all sent (%s), then the answer"
          % (err or "no reset"))
    # Bytes: a client that never stops sending is closed once 4 MiB are drained.
    with small_sender(port) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 99999999\r\n\r\n")
        t0 = time.monotonic()
        sent = 0
        try:
            while time.monotonic() - t0 < 10:
                sent += s.send(b"x" * 65536)
        except OSError:
            pass
        took = time.monotonic() - t0
        try:
            got, _ = recv_for(s, 1)
        except OSError:
            got = b""
    check(4 << 20 <= sent and took < 4 and got.startswith(b"HTTP/1.1 413 "),
          "a client that never stops: closed after %.1f MB in %.1f s (the bound: 4 MiB, before 5 s), its 413 read"
          % (sent / 1e6, took))
    # Time: a client that sends a byte now and then is closed 5 s after the answer.
    with small_sender(port) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 99999999\r\n\r\n")
        got, _ = recv_for(s, 0.5)
        t0 = time.monotonic()
        try:
            while time.monotonic() - t0 < 10:
                s.send(b"x")
                time.sleep(0.25)
        except OSError:
            pass
        took = time.monotonic() - t0
    check(got.startswith(b"HTTP/1.1 413 ") and 4 < took < 6.5,
          "a client sending a byte every 250 ms after its 413: closed %.1f s later (the bound: 5 s)" % took)
    m = metrics(port)
    ends = {e: m.get('sluice_lingering_closes_total{end="%s"}' % e) for e in ("client", "time", "bytes", "other")}
    check(ends == {"client": 2, "time": 1, "bytes": 1, "other": 0}, "/metrics: what ended each lingering (%s)" % ends)
    check(stop(p) == 0, "exit code 0")

    # Past --max-connections, a lingering connection is the first closed to make room, before
    # an idle one older than it.
    p, port = start_server(SERVER, "--max-connections", "2")
    with connect(port) as idle, small_sender(port) as refused:
        idle.sendall(request("/api/x"))
        first = read_responses(idle, 1)[0].status
        refused.sendall(b"GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 99999999\r\n\r\n")
        got, _ = recv_for(refused, 1)   # its 413, then the end of the stream: lingering
        r = get(port, "/api/x", source="127.0.0.2")   # a third connection
        idle.sendall(request("/metrics"))
        m = parse_metrics(read_responses(idle, 1)[0])
    check(first == 200 and got.startswith(b"HTTP/1.1 413 ") and r.status == 200 and
          m.get('sluice_lingering_closes_total{end="other"}') == 1 and m.get("sluice_connections_evicted_total") == 1,
          "--max-connections 2: the lingering connection closed to make room, the idle one older than it kept")
    check(stop(p) == 0, "exit code 0")


PORT = 0
{"forwarded": forwarded, "bodies": bodies, "framing": framing, "budget": budget, "expect": expect,
 "linger": linger}[CASE]()
finish()
