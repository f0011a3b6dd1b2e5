#!/usr/bin/env python3
"""A stand-in for the example server (examples/server) in the tests of api_client and
loadgen: the same first stdout line and the same RateLimit / RateLimit-Policy / Retry-After
fields (docs/guide.md, section 7), from a plain token bucket for all clients, plus
knobs the tests need: forced 429s, garbage fields, one stall. Every request is logged, so
that the tests assert on what the server saw, not on what the client says.

Log line: <arrival monotonic ns> <response monotonic ns> <status> <retry-after or ->,
written just before the response.
"""
import argparse
import http.server
import math
import re
import sys
import threading
import time

# Each is invalid (the whole field, or its only member): none may change the client's rate.
GARBAGE = [
    ('RateLimit', '"default";r=-5;t=abc'),
    ('RateLimit', ',,,'),
    ('RateLimit', '"unterminated;r=1'),
    ('RateLimit-Policy', '"default";q=99999999999999999999;w=1'),
    ('RateLimit-Policy', '"default";q=10;w=0'),
    ('RateLimit', 'limit=100, remaining=0, reset=30'),
    ('RateLimit', '"default";r=1.5;t=1'),
    ('RateLimit-Policy', '("a" "b");q=1;w=1'),
    ('RateLimit', '"\\x";r=1'),
    ('RateLimit', '"default";r=0;t=9999999999999999'),
    ('RateLimit-Policy', '"default";q=-1;w=1'),
    ('RateLimit', '?1;r=0'),
]
GARBAGE_RETRY_AFTER = ['-1', 'soon', '1.5', '99999999999999999999', 'Wed, 99 Foo 2024 99:99:99 GMT', '']


def parse_rate(text):
    m = re.fullmatch(r'\s*([0-9.]+)\s*/\s*(s|min|m|h)\s*', text)
    if not m:
        raise SystemExit('standin_server: bad --rate ' + text)
    return float(m.group(1)) / {'s': 1, 'min': 60, 'm': 60, 'h': 3600}[m.group(2)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--port', type=int, default=0)
    ap.add_argument('--rate', default='10/s')
    ap.add_argument('--burst', type=int, default=10)
    ap.add_argument('--access-log')
    ap.add_argument('--no-headers', action='store_true', help='no RateLimit fields at all')
    ap.add_argument('--force-429', default='', help='request numbers (1-based, comma-separated) answered 429')
    ap.add_argument('--force-retry-after', default='2', help='the Retry-After of a forced 429, sent as given')
    ap.add_argument('--garbage', action='store_true', help='garbage rate-limit fields on every response')
    ap.add_argument('--stall-at', type=int, default=0, help='the N-th request stalls the whole server')
    ap.add_argument('--stall-ms', type=int, default=300)
    ap.add_argument('--seconds', type=float, default=120, help='exit by itself after this long')
    a = ap.parse_args()

    rate = parse_rate(a.rate)
    forced = {int(x) for x in a.force_429.split(',') if x}
    lock = threading.Lock()       # the bucket, the counter and the log
    stall = threading.Lock()      # held during the stall: every response waits for it
    # As the example server: q / w is the rate (the smallest whole window giving a whole q),
    # sluice-burst the burst.
    w = next((c for c in range(1, 86401) if rate * c >= 0.5 and abs(rate * c - round(rate * c)) <= 1e-8 * rate * c),
             86400)
    policy = '"default";q=%d;w=%d;sluice-burst=%d' % (round(rate * w), w, a.burst)
    state = {'tokens': float(a.burst), 'last': time.monotonic(), 'n': 0}
    log = open(a.access_log, 'w', buffering=1) if a.access_log else None

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = 'HTTP/1.1'
        disable_nagle_algorithm = True

        def log_message(self, *args):
            pass

        def do_GET(self):
            arrival = time.monotonic_ns()
            with lock:
                state['n'] += 1
                n = state['n']
                now = time.monotonic()
                state['tokens'] = min(a.burst, state['tokens'] + (now - state['last']) * rate)
                state['last'] = now
                if n in forced:
                    ok = False
                elif state['tokens'] >= 1:
                    state['tokens'] -= 1
                    ok = True
                else:
                    ok = False
                tokens = state['tokens']
            if a.stall_at and n == a.stall_at:
                with stall:
                    time.sleep(a.stall_ms / 1000)
            with stall:
                pass
            headers = []
            retry_after = None
            if not ok:
                retry_after = a.force_retry_after if n in forced else max(1, math.ceil((1 - tokens) / rate))
            if a.garbage:
                headers.append(GARBAGE[n % len(GARBAGE)])
                headers.append(GARBAGE[(n * 7 + 3) % len(GARBAGE)])
                if retry_after is not None:
                    retry_after = GARBAGE_RETRY_AFTER[n % len(GARBAGE_RETRY_AFTER)]
            elif not a.no_headers and n not in forced:
                headers.append(('RateLimit-Policy', policy))
                headers.append(('RateLimit', '"default";r=%d;t=%d' % (int(tokens), math.ceil((a.burst - tokens) / rate))))
            if retry_after is not None:
                headers.append(('Retry-After', str(retry_after)))
            if log:  # before the response, so that a client done means a log complete
                with lock:
                    log.write('%d %d %d %s\n' % (arrival, time.monotonic_ns(), 200 if ok else 429,
                                                 '-' if retry_after is None else str(retry_after) or '-'))
            body = b'{"ok":true}' if ok else b'{"error":"too many requests"}'
            self.send_response(200 if ok else 429)
            self.send_header('Content-Type', 'application/json')
            self.send_header('Content-Length', str(len(body)))
            for k, v in headers:
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(('127.0.0.1', a.port), Handler)
    server.daemon_threads = True
    print('listening on 127.0.0.1:%d' % server.server_address[1], flush=True)
    timer = threading.Timer(a.seconds, server.shutdown)
    timer.daemon = True
    timer.start()
    try:
        server.serve_forever(poll_interval=0.05)
    except KeyboardInterrupt:
        pass
    server.server_close()


if __name__ == '__main__':
    import signal
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    main()
