#!/usr/bin/env python3
"""A host that never refuses but slows down under load, for the crawler's tests and
benchmarks: an origin behind a queue, a small app server. Each request is answered after

    base x (1 + (in flight - 1) / k)

its own request included in the count, so that one at a time takes `base` and the latency
doubles at k + 1 in flight: the throughput there, (k + 1) / (2 x base), is the most a client
gets while its latency stays within twice the unloaded one. It serves a site of --pages HTML
pages (/ links to every one, as a sitemap would, so that a crawler has them all at once) and
a robots.txt, on 127.0.0.1, for --seconds at most.

    slow_host.py --port 0 --pages 300 --base-ms 50 --k 4 --log FILE
    first stdout line: listening on 127.0.0.1:PORT
    log line per request: <arrival s> <latency s> <in flight at arrival> <status> <target>
"""
import argparse
import http.server
import socket
import threading
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--pages", type=int, default=300)
    ap.add_argument("--base-ms", type=float, default=50)
    ap.add_argument("--k", type=float, default=4)
    ap.add_argument("--log", default=None)
    ap.add_argument("--seconds", type=float, default=120)
    a = ap.parse_args()

    lock = threading.Lock()
    state = {"inflight": 0}
    log = open(a.log, "w", buffering=1) if a.log else None

    def page(i):
        links = "".join('<a href="/p%d.html">page %d</a>\n' % (j, j)
                        for j in (range(1, a.pages) if i == 0 else (2 * i + 1, 2 * i + 2)) if j < a.pages)
        return ("<!DOCTYPE html>\n<html><head><title>page %d</title></head><body>\n%s</body></html>\n"
                % (i, links)).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self):
            super().setup()
            # The header and the body go in two writes: without this, Nagle holds the body
            # for the client's delayed ACK (up to 40 ms), latency that is not the model's.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, *_):
            pass

        def do_GET(self):
            t0 = time.monotonic()
            with lock:
                state["inflight"] += 1
                n = state["inflight"]
            try:
                time.sleep(a.base_ms / 1000 * (1 + (n - 1) / a.k))
                target = self.path
                if target == "/robots.txt":
                    body, status, ctype = b"User-agent: *\nDisallow:\n", 200, "text/plain"
                elif target in ("/", "/index.html"):
                    body, status, ctype = page(0), 200, "text/html"
                elif target.startswith("/p") and target.endswith(".html") and target[2:-5].isdigit() \
                        and 0 < int(target[2:-5]) < a.pages:
                    body, status, ctype = page(int(target[2:-5])), 200, "text/html"
                else:
                    body, status, ctype = b"not found\n", 404, "text/plain"
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            finally:
                with lock:
                    state["inflight"] -= 1
                if log:
                    log.write("%.6f %.6f %d %d %s\n" % (t0, time.monotonic() - t0, n, status, self.path))

    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 128

    srv = Server(("127.0.0.1", a.port), Handler)
    print("listening on 127.0.0.1:%d" % srv.server_address[1], flush=True)
    threading.Timer(a.seconds, srv.shutdown).start()
    srv.serve_forever()


if __name__ == "__main__":
    main()
