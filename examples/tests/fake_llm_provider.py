#!/usr/bin/env python3
"""A fake LLM provider for the end-to-end tests of a client that must keep under a quota it
is not told: an OpenAI-compatible `POST /v1/chat/completions` (python3 standard library
only) that enforces a requests-per-minute and a tokens-per-minute quota at once, as the
providers do:

  - a call is charged 1 request and prompt + max_tokens tokens when it is admitted; past
    either quota it is refused with 429 and Retry-After (whole seconds, rounded up), and
    charged nothing;
  - when it completes (after --latency-ms), the output it did not use (max_tokens less
    its completion_tokens) is given back to the tokens quota;
  - prompt tokens are estimated from the messages' bytes (UTF-8 content, 4 bytes a token,
    rounded up, at least 1); completion_tokens is drawn at random in 1..max_tokens from
    --seed;
  - each quota is a token bucket (refilled continuously, full in one minute: OpenAI's
    model) or a sliding window of one minute (--algorithm);
  - a minute lasts --minute-seconds seconds, so that a test of ten minutes is short;
  - every answer announces the quotas in one family of fields (--headers): OpenAI's
    x-ratelimit-* (resets as Go durations), Anthropic's anthropic-ratelimit-* (resets as
    RFC 3339 instants), the IETF RateLimit / RateLimit-Policy (whole seconds), or none.
    The resets say when the quota is whole again, in real time.

A request that can never be admitted (prompt + max_tokens beyond the tokens quota) gets
400, as does a body that is not the JSON of a chat completion. Connections are kept alive
(HTTP/1.1), each served on its own thread.

The first line on stdout is `listening on 127.0.0.1:PORT`. Each call is logged to --log as
one JSON object a line, written when it is answered:
  {"id": N, "status": 200|429|400, "admitted": t, "done": t, "prompt_tokens": p,
   "max_tokens": m, "completion_tokens": c, "charged": p + m, "refunded": m - c,
   "refused_by": "requests"|"tokens"|null}
with times in seconds since the provider started (monotonic); `done` is when the refund
was made. read_log() and summarize() give a test the share of each quota its client used.

    fake_llm_provider.py [--port P] [--rpm N] [--tpm N] [--minute-seconds S]
        [--algorithm token-bucket|sliding-window] [--headers openai|anthropic|ietf|none]
        [--latency-ms MS] [--seed N] [--log FILE] [--seconds S]
"""
import argparse
import collections
import datetime
import http.server
import json
import math
import random
import signal
import sys
import threading
import time

BYTES_PER_TOKEN = 4


def prompt_tokens(messages):
    """The prompt's tokens, estimated from its bytes."""
    n = sum(len(str(m.get("content", "")).encode("utf-8")) for m in messages)
    return max(1, -(-n // BYTES_PER_TOKEN))


class TokenBucket:
    """A quota refilled continuously: `limit` units a minute, at most `limit` held. Every
    call takes `now` (seconds): the accounting is tested without a clock."""

    def __init__(self, limit, minute, now):
        self.limit, self.minute = limit, minute
        self.rate = limit / minute
        self.level, self.t = float(limit), now

    def _refill(self, now):
        if now > self.t:
            self.level = min(self.limit, self.level + (now - self.t) * self.rate)
            self.t = now

    def wait(self, amount, now):
        """Seconds until `amount` can be taken (0: now; inf: never)."""
        if amount > self.limit:
            return math.inf
        self._refill(now)
        return max(0.0, (amount - self.level) / self.rate)

    def take(self, amount, now):
        self._refill(now)
        self.level -= amount
        return None

    def refund(self, handle, amount, now):
        self._refill(now)
        self.level = min(self.limit, self.level + amount)

    def remaining(self, now):
        self._refill(now)
        return max(0, math.floor(self.level + 1e-9))

    def reset_after(self, now):
        """Seconds until the quota is whole again."""
        self._refill(now)
        return (self.limit - self.level) / self.rate


class SlidingWindow:
    """At most `limit` units charged over any minute: each charge counts for one minute
    from when it was made, less what was refunded of it."""

    def __init__(self, limit, minute, now):
        self.limit, self.minute = limit, minute
        self.entries = collections.deque()   # [time, amount]
        self.used = 0

    def _expire(self, now):
        while self.entries and self.entries[0][0] + self.minute <= now:
            self.used -= self.entries.popleft()[1]

    def wait(self, amount, now):
        if amount > self.limit:
            return math.inf
        self._expire(now)
        over = self.used + amount - self.limit
        if over <= 0:
            return 0.0
        for t, a in self.entries:
            over -= a
            if over <= 0:
                return t + self.minute - now
        return math.inf   # not reached: amount <= limit

    def take(self, amount, now):
        self._expire(now)
        entry = [now, amount]
        self.entries.append(entry)
        self.used += amount
        return entry

    def refund(self, entry, amount, now):
        self._expire(now)
        if any(e is entry for e in self.entries):   # expired already: nothing to give back
            amount = min(amount, entry[1])
            entry[1] -= amount
            self.used -= amount

    def remaining(self, now):
        self._expire(now)
        return max(0, self.limit - self.used)

    def reset_after(self, now):
        self._expire(now)
        live = [t for t, a in self.entries if a > 0]
        return max(0.0, live[-1] + self.minute - now) if live else 0.0


ALGORITHMS = {"token-bucket": TokenBucket, "sliding-window": SlidingWindow}


class Quotas:
    """Both quotas of the provider, and the decisions on them (sans-io: `now` is given)."""

    def __init__(self, rpm, tpm, minute, algorithm, now):
        cls = ALGORITHMS[algorithm]
        self.minute = minute
        self.requests = cls(rpm, minute, now)
        self.tokens = cls(tpm, minute, now)

    def admit(self, prompt, max_tokens, now):
        """(True, handle) when admitted, charged 1 request and prompt + max_tokens tokens;
        (False, (seconds to wait, which quota)) when refused, charged nothing; the wait is
        inf when it can never be admitted."""
        cost = prompt + max_tokens
        wr, wt = self.requests.wait(1, now), self.tokens.wait(cost, now)
        if wr > 0 or wt > 0:
            return False, (max(wr, wt), "tokens" if wt >= wr else "requests")
        return True, (self.requests.take(1, now), self.tokens.take(cost, now))

    def settle(self, handle, unused, now):
        """Gives the unused output of an admitted call back to the tokens quota."""
        if unused > 0:
            self.tokens.refund(handle[1], unused, now)

    def headers(self, family, now, wall):
        """The fields announcing both quotas at `now`, whose wall-clock time is `wall`."""
        rq, tk = self.requests, self.tokens
        if family == "openai":
            return [
                ("x-ratelimit-limit-requests", str(rq.limit)),
                ("x-ratelimit-limit-tokens", str(tk.limit)),
                ("x-ratelimit-remaining-requests", str(rq.remaining(now))),
                ("x-ratelimit-remaining-tokens", str(tk.remaining(now))),
                ("x-ratelimit-reset-requests", go_duration(rq.reset_after(now))),
                ("x-ratelimit-reset-tokens", go_duration(tk.reset_after(now))),
            ]
        if family == "anthropic":
            out = []
            for name, q in (("requests", rq), ("tokens", tk)):
                out += [
                    ("anthropic-ratelimit-%s-limit" % name, str(q.limit)),
                    ("anthropic-ratelimit-%s-remaining" % name, str(q.remaining(now))),
                    ("anthropic-ratelimit-%s-reset" % name, rfc3339(wall + q.reset_after(now))),
                ]
            return out
        if family == "ietf":
            w = max(1, round(self.minute))
            return [
                ("RateLimit-Policy", '"rpm";q=%d;w=%d, "tpm";q=%d;qu="tokens";w=%d' % (rq.limit, w, tk.limit, w)),
                ("RateLimit", '"rpm";r=%d;t=%d, "tpm";r=%d;t=%d' % (
                    rq.remaining(now), math.ceil(rq.reset_after(now) - 1e-9),
                    tk.remaining(now), math.ceil(tk.reset_after(now) - 1e-9))),
            ]
        return []


def go_duration(seconds):
    """As Go's time.Duration.String() writes it: 1.5s, 6m0s, 20ms, 1h2m3.5s, 0s."""
    ns = round(seconds * 1e9)
    if ns <= 0:
        return "0s"

    def frac(v, unit):   # v / unit, trailing zeros dropped
        s = ("%d.%0*d" % (v // unit, len(str(unit)) - 1, v % unit)).rstrip("0").rstrip(".")
        return s

    if ns < 1000:
        return "%dns" % ns
    if ns < 1000000:
        return frac(ns, 1000) + "us"
    if ns < 1000000000:
        return frac(ns, 1000000) + "ms"
    h, rest = divmod(ns, 3600 * 10**9)
    m, rest = divmod(rest, 60 * 10**9)
    out = ("%dh" % h if h else "") + ("%dm" % m if h or m else "")
    return out + frac(rest, 10**9) + "s"


def rfc3339(wall):
    """An instant as Anthropic writes it: 2024-05-01T12:00:00.123456Z."""
    return datetime.datetime.fromtimestamp(wall, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def read_log(path):
    """The calls of a --log file, in the order they were answered."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def summarize(rows, rpm, tpm, minute, start=0.0, end=None):
    """What the calls admitted within [start, end) (seconds since the provider started, by
    their admission time; end: the last admission) used of each quota: the tokens a call
    keeps are its prompt and completion (its unused output was given back). Returns a dict:
    calls, admitted, refused (429), tokens, and requests_share / tokens_share, the shares of
    each quota over the span (1.0: all of it)."""
    rows = [r for r in rows if r["admitted"] >= start and (end is None or r["admitted"] < end)]
    if end is None:
        end = max((r["admitted"] for r in rows), default=start)
    ok = [r for r in rows if r["status"] == 200]
    tokens = sum(r["prompt_tokens"] + r["completion_tokens"] for r in ok)
    minutes = (end - start) / minute
    return {
        "calls": len(rows),
        "admitted": len(ok),
        "refused": sum(1 for r in rows if r["status"] == 429),
        "tokens": tokens,
        "requests_share": len(ok) / (rpm * minutes) if minutes > 0 else 0.0,
        "tokens_share": tokens / (tpm * minutes) if minutes > 0 else 0.0,
    }


class Provider:
    def __init__(self, a):
        self.start = time.monotonic()
        self.quotas = Quotas(a.rpm, a.tpm, a.minute_seconds, a.algorithm, 0.0)
        self.family = a.headers
        self.latency = a.latency_ms / 1000
        self.rng = random.Random(a.seed)
        self.lock = threading.Lock()
        self.log = open(a.log, "a") if a.log else None
        self.next_id = 0

    def now(self):
        return time.monotonic() - self.start

    def write_log(self, record):
        if self.log:
            with self.lock:
                self.log.write(json.dumps(record) + "\n")
                self.log.flush()

    def headers(self):
        with self.lock:
            return self.quotas.headers(self.family, self.now(), time.time())

    def call(self, body):
        """(status, JSON body, extra headers) for a chat completion request."""
        try:
            req = json.loads(body)
            messages, max_tokens = req["messages"], req["max_tokens"]
            if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
                raise ValueError("messages")
            if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
                raise ValueError("max_tokens")
        except (ValueError, KeyError, TypeError) as e:
            return 400, {"error": {"type": "invalid_request_error", "message": "bad request: %s" % e}}, []
        prompt = prompt_tokens(messages)
        with self.lock:
            self.next_id += 1
            call_id = self.next_id
            admitted_at = self.now()
            ok, handle = self.quotas.admit(prompt, max_tokens, admitted_at)
            completion = self.rng.randint(1, max_tokens) if ok else 0
        record = {"id": call_id, "admitted": admitted_at, "prompt_tokens": prompt, "max_tokens": max_tokens}
        if not ok:
            wait, which = handle
            if wait == math.inf:
                record.update(status=400, done=admitted_at, refused_by=which)
                self.write_log(record)
                return 400, {"error": {"type": "invalid_request_error",
                                       "message": "prompt + max_tokens exceed the tokens per minute"}}, []
            record.update(status=429, done=admitted_at, refused_by=which)
            self.write_log(record)
            return 429, {"error": {"type": "rate_limit_exceeded", "message": "over the %s per minute" % which}}, [
                ("Retry-After", str(max(1, math.ceil(wait - 1e-9))))]
        time.sleep(self.latency)
        with self.lock:
            done = self.now()
            self.quotas.settle(handle, max_tokens - completion, done)
        record.update(status=200, done=done, completion_tokens=completion, charged=prompt + max_tokens,
                      refunded=max_tokens - completion, refused_by=None)
        self.write_log(record)
        return 200, {
            "id": "chatcmpl-%d" % call_id,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": str(req.get("model", "fake")),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "tok " * completion},
                         "finish_reason": "length" if completion == max_tokens else "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion},
        }, []


def make_handler(provider):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"   # keep-alive: every answer has a Content-Length

        def log_message(self, *args):
            pass

        def answer(self, status, body, extra=()):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in list(extra) + provider.headers():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):
            try:
                n = int(self.headers.get("Content-Length", ""))
                if n < 0 or n > 16 << 20:
                    raise ValueError
            except ValueError:
                self.close_connection = True
                return self.answer(411, {"error": {"message": "Content-Length required (16 MiB at most)"}})
            body = self.rfile.read(n)
            if self.path.split("?")[0] != "/v1/chat/completions":
                return self.answer(404, {"error": {"message": "no such endpoint"}})
            self.answer(*provider.call(body))

        def do_GET(self):
            self.answer(405, {"error": {"message": "POST /v1/chat/completions"}}, [("Allow", "POST")])

    return Handler


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--rpm", type=int, default=60, help="requests per minute")
    ap.add_argument("--tpm", type=int, default=10000, help="tokens per minute")
    ap.add_argument("--minute-seconds", type=float, default=60.0, help="how long a minute lasts")
    ap.add_argument("--algorithm", choices=sorted(ALGORITHMS), default="token-bucket")
    ap.add_argument("--headers", choices=["openai", "anthropic", "ietf", "none"], default="openai")
    ap.add_argument("--latency-ms", type=float, default=20.0, help="time to answer an admitted call")
    ap.add_argument("--seed", type=int, default=1, help="of the completion lengths")
    ap.add_argument("--log", help="one JSON line per call")
    ap.add_argument("--seconds", type=float, default=0, help="exit by itself after this long (0: never)")
    a = ap.parse_args()
    if a.rpm < 1 or a.tpm < 1 or a.minute_seconds <= 0 or a.latency_ms < 0:
        ap.error("--rpm and --tpm must be >= 1, --minute-seconds > 0, --latency-ms >= 0")

    provider = Provider(a)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", a.port), make_handler(provider))
    server.daemon_threads = True
    print("listening on 127.0.0.1:%d" % server.server_address[1], flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    stop.wait(a.seconds if a.seconds > 0 else None)
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
