"""Helpers of the example tests: start the example binaries, talk raw HTTP/1.1 to them,
and make sure no process outlives the test (stopped by pid on any exit)."""

import atexit
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    # Debian's python3-prometheus-client, seen from another python3 first in PATH.
    sys.path.append("/usr/lib/python3/dist-packages")
    from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.openmetrics import parser as openmetrics_parser

_children = []


def _cleanup():
    for p in _children:
        if p.poll() is None:
            p.kill()
            p.wait()


atexit.register(_cleanup)
# A test killed by meson's timeout gets SIGTERM: still stop the children.
signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))


def spawn(args, **kw):
    p = subprocess.Popen(args, **kw)
    _children.append(p)
    return p


def start_server(server_bin, *args):
    """Starts the example server on a free port; returns (process, port)."""
    p = spawn([server_bin, "--port", "0", *args], stdout=subprocess.PIPE)
    ready, _, _ = select.select([p.stdout], [], [], 10)
    if not ready:
        raise AssertionError("server did not print its port within 10 s")
    line = p.stdout.readline().decode()
    m = re.fullmatch(r"listening on 127\.0\.0\.1:(\d+)\n", line)
    if not m:
        raise AssertionError("unexpected first line: %r" % line)
    return p, int(m.group(1))


def stop(p, sig=signal.SIGTERM, timeout=5):
    """Signals p and returns its exit code; fails if it does not exit within timeout."""
    p.send_signal(sig)
    return p.wait(timeout=timeout)



def free_port():
    """A loopback port free now (another process may take it before it is used)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(redis_server):
    """redis-server on a free loopback port (retried if the port is taken meanwhile), stopped
    by pid at exit like every child: (process, port)."""
    for _ in range(5):
        port = free_port()
        p = spawn([redis_server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                  stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and p.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return p, port
            except OSError:
                time.sleep(0.02)
        if p.poll() is None:
            stop(p)
    raise AssertionError("no redis-server came up on a free loopback port")

def connect(port, source="127.0.0.1"):
    s = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    return s


def request(path, headers=None):
    h = "".join("%s: %s\r\n" % kv for kv in (headers or {}).items())
    return ("GET %s HTTP/1.1\r\nHost: test\r\n%s\r\n" % (path, h)).encode()


class Response:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    def header(self, name):
        return self.headers.get(name.lower())


def read_responses(sock, count):
    """Reads `count` responses (Content-Length bodies) from one connection."""
    buf = b""
    out = []
    while len(out) < count:
        while b"\r\n\r\n" not in buf:
            chunk = sock.recv(65536)
            if not chunk:
                raise AssertionError("connection closed after %d responses" % len(out))
            buf += chunk
        head, buf = buf.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for l in lines[1:]:
            k, v = l.split(":", 1)
            headers[k.strip().lower()] = v.strip()
        n = int(headers.get("content-length", "0"))
        while len(buf) < n:
            chunk = sock.recv(65536)
            if not chunk:
                raise AssertionError("connection closed inside a body")
            buf += chunk
        out.append(Response(status, headers, buf[:n]))
        buf = buf[n:]
    return out


def get(port, path, headers=None, source="127.0.0.1"):
    with connect(port, source) as s:
        s.sendall(request(path, headers))
        return read_responses(s, 1)[0]


def metrics(port):
    """The /metrics page, parsed by parse_metrics."""
    return parse_metrics(get(port, "/metrics"))


def parse_metrics(r):
    """A /metrics response, parsed by prometheus_client's own parser, as
    {'name{label="value",...}': value}. Checks Prometheus naming on the way: a counter's
    samples end in _total, times are in (base unit) seconds, every family has HELP."""
    assert r.status == 200, r.status
    assert r.header("Content-Type").startswith("text/plain; version=0.0.4"), r.header("Content-Type")
    out = {}
    for family in text_string_to_metric_families(r.body.decode()):
        assert family.documentation, "no HELP for %s" % family.name
        for sample in family.samples:
            if family.type == "counter":
                assert sample.name.endswith(("_total", "_created")), sample.name
            # Base units: seconds, never milli-, micro- or nanoseconds.
            assert not re.search(r"_(ms|us|ns|milli|micro|nano)", sample.name), sample.name
            labels = ",".join('%s="%s"' % kv for kv in sorted(sample.labels.items()))
            out[sample.name + ("{%s}" % labels if labels else "")] = sample.value
    return out


def parse_openmetrics(r):
    """A /metrics response in OpenMetrics 1.0 (asked for with Accept), parsed by
    prometheus_client's OpenMetrics parser (which refuses any deviation: # EOF, UNIT
    against the name, counter suffixes), as parse_metrics."""
    assert r.status == 200, r.status
    assert r.header("Content-Type") == "application/openmetrics-text; version=1.0.0; charset=utf-8", \
        r.header("Content-Type")
    out = {}
    for family in openmetrics_parser.text_string_to_metric_families(r.body.decode()):
        assert family.documentation, "no HELP for %s" % family.name
        for sample in family.samples:
            labels = ",".join('%s="%s"' % kv for kv in sorted(sample.labels.items()))
            out[sample.name + ("{%s}" % labels if labels else "")] = sample.value
    return out


def read_log(path):
    """Access log lines as (unix_ns, client, method, target, status, wait_us)."""
    rows = []
    with open(path) as f:
        for line in f:
            t, client, method, target, status, wait_us = line.split()
            rows.append((int(t), client, method, target, int(status), int(wait_us)))
    return rows


def wait_until(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.01)
    raise AssertionError("timed out waiting for " + what)


failures = 0


def check(cond, msg):
    global failures
    if cond:
        print("ok   " + msg)
    else:
        failures += 1
        print("FAIL " + msg)


def finish():
    print("%d check(s) failed" % failures if failures else "all checks passed")
    sys.exit(1 if failures else 0)
