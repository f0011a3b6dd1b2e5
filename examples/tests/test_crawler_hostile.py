#!/usr/bin/env python3
"""The crawler against a hostile site, a local server (python3 stdlib) that answers as one
might: a robots.txt of 50 MB (streamed, never held here), a seed that redirects to itself, a
loop of three pages, a chain of redirects longer than the crawler follows, pages whose
links change on every fetch, interim answers, and a body that never ends. Checked from the server's side (what was asked) and the
crawler's (exit code, summary, peak memory):

- robots.txt: read only as far as RFC 9309's 500 KiB (its rules there honoured, those past
  them not), the crawler's peak RSS (VmHWM) under 24 MB, the crawl complete, exit 0;
- redirect loops (to itself, of three) and a chain of more than 10: pages lost, exit 3,
  named in the summary (stdout) or on stderr;
- endless pages: the crawl ends at --max-pages-per-host, the pages past it counted and
  named, exit 3;
- interim answers (100, 103) before the final one: read past, the final one's links
  followed;
- a body trickled a byte at a time: each attempt ends at --timeout-ms (the whole request,
  not each read), the page given up, exit 3.

usage: test_crawler_hostile.py CRAWLER [B_SANITIZE]"""

import os
import re
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import check, finish, spawn  # noqa: E402

CRAWLER = sys.argv[1]
# The build's b_sanitize option: "none", or what a sanitizer's build adds to the memory.
SANITIZED = len(sys.argv) > 2 and sys.argv[2] != "none"
BIG = 50 * 1000 * 1000   # robots.txt of 50 MB
KIB500 = 500 * 1024


class Site:
    """What the server answers, and what it was asked."""

    def __init__(self, robots=None):
        self.robots = robots   # None: 404
        self.asked, self.lock = [], threading.Lock()
        self.robots_sent = 0   # bytes of robots.txt written before the crawler hung up
        self.counter = 0
        self.slow_since = None   # when /a, answered 0.5 s late, was asked
        self.port = None


def big_robots_chunks():
    """50 MB: a rule in the first 500 KiB, a comment filling the rest of them, then a rule
    past them, then more filler: yielded in pieces, never whole."""
    head = b"User-agent: *\nDisallow: /private/\n"
    yield head
    filler = b"#" + b"-" * 1022 + b"\n"   # 1 KiB lines
    sent = len(head)
    while sent + len(filler) <= KIB500 + 10 * 1024:
        yield filler
        sent += len(filler)
    late = b"Disallow: /late/\n"
    yield late
    sent += len(late)
    while sent < BIG:
        n = min(len(filler) * 64, BIG - sent)
        yield (filler * 64)[:n]
        sent += n


def page(links):
    return ("<!doctype html><html><body>%s</body></html>" %
            "".join('<a href="%s">x</a>' % l for l in links)).encode()


def serve(site):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def answer(self, status, body=b"", headers=()):
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            path = self.path
            with site.lock:
                site.asked.append(path)
            try:
                self.route(path)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        def route(self, path):
            if path == "/robots.txt":
                if site.robots is None:
                    return self.answer(404)
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(BIG))
                self.end_headers()
                for chunk in site.robots():
                    self.wfile.write(chunk)
                    site.robots_sent += len(chunk)
                return None
            if path == "/":
                return self.answer(200, page(["/a", "/private/p", "/late/p", "/self", "/loop/1", "/chain/0"]))
            if path == "/self":
                return self.answer(301, headers=[("Location", "/self")])
            m = re.fullmatch(r"/loop/(\d)", path)
            if m:   # 1 -> 2 -> 3 -> 1
                return self.answer(302, headers=[("Location", "/loop/%d" % (int(m.group(1)) % 3 + 1))])
            m = re.fullmatch(r"/chain/(\d+)", path)
            if m:   # 0 -> 1 -> ... -> 14: more than 10 in a row
                i = int(m.group(1))
                if i < 14:
                    return self.answer(307, headers=[("Location", "/chain/%d" % (i + 1))])
                return self.answer(200, page([]))
            if path == "/interim":
                # Two interim answers before the final one, whose link must be followed.
                self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\n"
                                 b"Link: </style.css>; rel=preload\r\n\r\n")
                return self.answer(200, page(["/after-interim"]))
            if path == "/slow":
                # A body trickled a byte at a time: at most 10 s of it, then hang up.
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", "100000")
                self.end_headers()
                for _ in range(200):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(0.05)
                self.close_connection = True
                return None
            if path.startswith("/endless"):
                # Links that change on every fetch: three new pages each time.
                with site.lock:
                    site.counter += 1
                    k = site.counter
                return self.answer(200, page(["/endless/%d-%d" % (k, j) for j in range(3)]))
            if path == "/a":
                site.slow_since = time.monotonic()
                time.sleep(0.5)
            return self.answer(200, page([]))

        def log_message(self, *args):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def crawl(port, seed, *extra, timeout=60):
    """Runs the crawler; returns (exit code, stdout, stderr, samples of its VmHWM as
    (time, kB)). VmHWM is the peak RSS since exec (ru_maxrss of a child would count the
    test's own memory, inherited by fork before the exec), and it never goes down: a sample
    taken after a phase covers that phase."""
    cmd = [CRAWLER, "--seed", "http://127.0.0.1:%d%s" % (port, seed), "--per-host-rate", "1000/s",
           "--per-host-start-rate", "1000/s", "--timeout-ms", "5000", *extra]
    p = spawn(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    samples, done = [], threading.Event()

    def sample():
        while not done.is_set():
            try:
                with open("/proc/%d/status" % p.pid) as f:
                    m = re.search(r"VmHWM:\s+(\d+) kB", f.read())
            except OSError:
                break
            if m:
                samples.append((time.monotonic(), int(m.group(1))))
            time.sleep(0.02)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    out, err = p.communicate(timeout=timeout)
    done.set()
    t.join()
    sys.stdout.write(out)
    sys.stdout.write(err[-3000:])
    return p.returncode, out, err, samples


# ---- robots.txt of 50 MB ----------------------------------------------------------------
site = Site(robots=big_robots_chunks)
srv = serve(site)
port = srv.server_address[1]


def peak_after_robots(site, seed):
    """The crawler's peak RSS in kB once robots.txt is read: /a, asked only after it, is
    answered 0.5 s late, and the samples taken meanwhile cover all that came before."""
    site.slow_since = None
    rc, out, err, samples = crawl(site.port, seed)
    after = [kb for t, kb in samples if site.slow_since and t > site.slow_since]
    return rc, out, max(after, default=0), len(after)


site.port = port
rc, out, peak, n = peak_after_robots(site, "/a")
check(rc == 0, "50 MB robots.txt: the crawl completes, exit 0 (%d)" % rc)
# The same crawl with no robots.txt: what the 50 MB cost is the difference. Under a
# sanitizer (its shadow memory and quarantine) only the difference means anything.
site.robots = None
rc0, _, base, n0 = peak_after_robots(site, "/a")
site.robots = big_robots_chunks
if SANITIZED:
    print("skip the crawler's peak RSS under 24 MB: a sanitizer's build (%.1f MB)" % (peak / 1024))
else:
    check(0 < peak < 24 * 1024, "50 MB robots.txt: the crawler's peak RSS %.1f MB (< 24 MB; %d samples after it)"
          % (peak / 1024, n))
check(n > 0 and n0 > 0 and peak - base < 4 * 1024,
      "50 MB robots.txt: it cost %.1f MB of peak RSS over a crawl without one (%.1f MB; < 4 MB)"
      % ((peak - base) / 1024, base / 1024))
check(site.robots_sent < 8 * 1024 * 1024,
      "50 MB robots.txt: the crawler hung up after %.1f MB of it" % (site.robots_sent / 1e6))
check(re.search(r"robots\.txt of [^:]+:\d+: 1 rules", out) is not None,
      "50 MB robots.txt: its rule within 500 KiB read, the one past them not (summary: 1 rules)")
site.asked.clear()
rc, out, err, _ = crawl(port, "/")
asked = set(site.asked)
check("/private/p" not in asked and "/late/p" in asked,
      "50 MB robots.txt: /private/ (within 500 KiB) honoured, /late/ (past them) not read")
srv.shutdown()

# ---- redirects ------------------------------------------------------------------------
site = Site()
srv = serve(site)
port = srv.server_address[1]

rc, out, err, _ = crawl(port, "/self")
check(rc == 3, "a seed that redirects to itself: exit 3 (%d)" % rc)
check("crawl finished: 0 pages" in out and "1 in redirect loops" in out,
      "a seed that redirects to itself: 0 pages, 1 in redirect loops")
check(re.search(r"redirect loop: http://127\.0\.0\.1:%d/self -> http://127\.0\.0\.1:%d/self" % (port, port), out)
      is not None, "a seed that redirects to itself: named in the summary")

site.asked.clear()
rc, out, err, _ = crawl(port, "/loop/1")
check(rc == 3, "a loop of three: exit 3 (%d)" % rc)
check(sorted(a for a in site.asked if a.startswith("/loop/")) == ["/loop/1", "/loop/2", "/loop/3"],
      "a loop of three: each page asked once (%s)" % sorted(site.asked))
loop = re.search(r"redirect loop: (.*)", out)
named = re.findall(r"/loop/(\d)", loop.group(1)) if loop else []
check(len(named) == 4 and named[0] == named[-1] and sorted(named[:3]) == ["1", "2", "3"],
      "a loop of three: named in the summary, round to where it started (%s)" % (loop and loop.group(1)))
check("3 in redirect loops" in out, "a loop of three: its 3 pages counted as lost")

site.asked.clear()
rc, out, err, _ = crawl(port, "/chain/0")
check(rc == 3, "a chain of 14 redirects: exit 3 (%d)" % rc)
check("1 after more than 10 redirects" in out and "after 10 redirects in a row: too many" in err,
      "a chain of 14 redirects: counted and named on stderr")
check(max(int(a.split("/")[2]) for a in site.asked if a.startswith("/chain/")) == 10,
      "a chain of 14 redirects: followed 10 times, no more")

# All of them from one page: the pages that are fine are fetched, the lost ones counted.
rc, out, err, _ = crawl(port, "/")
check(rc == 3 and "4 in redirect loops" in out and "1 after more than 10 redirects" in out,
      "from one page: the self-redirect and the loop (4 pages) and the chain lost, exit 3 (%d)" % rc)
check(len(re.findall(r"^  redirect loop: ", out, re.M)) == 2, "from one page: both loops named")

# ---- endless pages ----------------------------------------------------------------------
site.asked.clear()
t0 = time.monotonic()
rc, out, err, _ = crawl(port, "/endless", "--max-pages-per-host", "40")
took = time.monotonic() - t0
pages = [a for a in site.asked if a.startswith("/endless")]
check(rc == 3, "links that change on every fetch: exit 3 at the bound (%d)" % rc)
check(len(pages) == 40, "links that change on every fetch: 40 pages fetched, no more (%d)" % len(pages))
m = re.search(r"host 127\.0\.0\.1:%d: (\d+) links past --max-pages-per-host 40, not followed" % port, out)
check(m is not None and int(m.group(1)) > 0, "the host past its bound named in the summary (%s)" % (m and m.group(0)))
check(took < 30, "the endless site's crawl ended in %.1f s" % took)
srv.shutdown()

# ---- interim answers ----------------------------------------------------------------------
site = Site()
srv = serve(site)
port = srv.server_address[1]
rc, out, err, _ = crawl(port, "/interim", "--per-host-inflight", "1")
check(rc == 0 and "/after-interim" in site.asked and "crawl finished: 2 pages" in out,
      "100 and 103 before a 200: read past, the final answer's link followed, exit 0 (%d, %s)" % (rc, site.asked))
srv.shutdown()

# ---- a body trickled a byte at a time ---------------------------------------------------
site = Site()
srv = serve(site)
port = srv.server_address[1]
t0 = time.monotonic()
rc, out, err, _ = crawl(port, "/slow", "--timeout-ms", "1000", "--retries", "1")
took = time.monotonic() - t0
check(rc == 3 and "giving up on http://127.0.0.1:%d/slow after 2 attempts" % port in err,
      "a body trickled a byte at a time: each attempt ends at --timeout-ms, the page given up, exit 3 (%d)" % rc)
check(took < 6, "a body trickled a byte at a time: given up in %.1f s (2 attempts of 1 s and a backoff)" % took)
srv.shutdown()

res = subprocess.run([CRAWLER, "--help"], capture_output=True, text=True)
check("--max-pages-per-host N" in res.stdout and "default 10000" in res.stdout and "redirect loop" in res.stdout,
      "--help: the bound's default and the redirect loops among the exit code's reasons")
finish()
