"""The fake LLM provider's own test (examples/tests/fake_llm_provider.py): its accounting
step by step with the time given (both algorithms: charges at admission, refunds at
completion, refusals that charge nothing, the waits and resets announced), its field
formats (Go durations, RFC 3339, the three families read back), then the process itself
on loopback: keep-alive, the OpenAI answer, 429 with Retry-After past either quota,
exactly the quota admitted to concurrent clients, the log.

usage: test_fake_llm_provider.py"""

import datetime
import http.client
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fake_llm_provider as fake  # noqa: E402
from harness import check, finish, spawn  # noqa: E402

PROVIDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_llm_provider.py")


def close(a, b):
    return abs(a - b) < 1e-9


def token_bucket():
    b = fake.TokenBucket(60, 3.0, 0.0)          # 60 a minute of 3 s: 20 a second
    check(b.remaining(0) == 60 and close(b.reset_after(0), 0), "bucket: full at first")
    check(b.wait(60, 0) == 0 and b.wait(61, 0) == math.inf, "bucket: the whole quota at once, never more")
    b.take(60, 0)
    check(b.remaining(0) == 0 and close(b.wait(1, 0), 0.05), "bucket: empty, one unit in 50 ms")
    check(close(b.reset_after(0), 3.0), "bucket: whole again in one minute")
    check(b.remaining(1.5) == 30, "bucket: half refilled in half a minute")
    b.refund(None, 100, 1.5)
    check(b.remaining(1.5) == 60, "bucket: a refund never fills past the quota")
    b.take(10, 2.0)
    check(b.remaining(2.0) == 50 and b.remaining(1.0) == 50, "bucket: time going back changes nothing")


def sliding_window():
    w = fake.SlidingWindow(10, 3.0, 0.0)
    e1 = w.take(6, 0.0)
    w.take(4, 1.0)
    check(w.remaining(1.0) == 0 and close(w.wait(1, 1.0), 2.0), "window: full; the first charge leaves at t=3")
    check(close(w.wait(5, 1.0), 2.0) and close(w.wait(7, 1.0), 3.0), "window: waits until enough has left")
    check(w.wait(11, 1.0) == math.inf, "window: more than the quota never")
    check(close(w.reset_after(1.0), 3.0), "window: empty when the last charge leaves, at t=4")
    w.refund(e1, 3, 2.0)
    check(w.remaining(2.0) == 3 and w.wait(3, 2.0) == 0, "window: a refund frees its units at once")
    check(w.remaining(3.0) == 6, "window: the first charge (less its refund) leaves at t=3")
    w.refund(e1, 3, 3.5)
    check(w.remaining(3.5) == 6, "window: a refund of a charge already gone gives nothing")
    e3 = w.take(2, 3.5)
    w.refund(e3, 5, 3.6)
    check(w.remaining(3.6) == 6, "window: a refund gives back at most what was charged")


def quotas():
    for algorithm in ("token-bucket", "sliding-window"):
        q = fake.Quotas(3, 1000, 60.0, algorithm, 0.0)
        ok, h = q.admit(100, 300, 0.0)
        check(ok and q.tokens.remaining(0.0) == 600 and q.requests.remaining(0.0) == 2,
              "%s: admitted, charged 1 request and prompt + max_tokens" % algorithm)
        ok2, (wait, which) = q.admit(100, 600, 0.0)
        check(not ok2 and which == "tokens" and wait > 0, "%s: past the tokens quota: refused" % algorithm)
        check(q.tokens.remaining(0.0) == 600 and q.requests.remaining(0.0) == 2, "%s: a refusal charges nothing"
              % algorithm)
        q.settle(h, 300 - 120, 0.0)
        check(q.tokens.remaining(0.0) == 780, "%s: the unused output given back at completion" % algorithm)
        q.admit(1, 1, 0.0)
        q.admit(1, 1, 0.0)
        ok3, (wait, which) = q.admit(1, 1, 0.0)
        # The bucket gives a request back every 20 s; the window when the first leaves it.
        back = 20.0 if algorithm == "token-bucket" else 60.0
        check(not ok3 and which == "requests" and close(wait, back),
              "%s: past the requests quota: refused, a request back in %g s (%s)" % (algorithm, back, wait))
        ok4, (wait, _) = q.admit(600, 401, 0.0)
        check(not ok4 and wait == math.inf, "%s: beyond the tokens quota: never" % algorithm)


def formats():
    cases = {0: "0s", 1e-9: "1ns", 1.5e-6: "1.5us", 0.02: "20ms", 1: "1s", 1.5: "1.5s", 360: "6m0s",
             3723.5: "1h2m3.5s", 7200: "2h0m0s", 0.0999999999: "100ms"}
    for seconds, text in cases.items():
        check(fake.go_duration(seconds) == text, "Go duration of %r: %s (%s)" % (seconds, text, fake.go_duration(seconds)))
    check(fake.rfc3339(1714564800.25) == "2024-05-01T12:00:00.250000Z", "RFC 3339 instant")
    q = fake.Quotas(60, 1000, 3.0, "token-bucket", 0.0)
    q.admit(100, 100, 0.0)
    h = dict(q.headers("openai", 0.0, 0))
    check(h == {"x-ratelimit-limit-requests": "60", "x-ratelimit-limit-tokens": "1000",
                "x-ratelimit-remaining-requests": "59", "x-ratelimit-remaining-tokens": "800",
                "x-ratelimit-reset-requests": "50ms", "x-ratelimit-reset-tokens": "600ms"}, "openai fields: %s" % h)
    h = dict(q.headers("anthropic", 0.0, 1714564800.0))
    check(h == {"anthropic-ratelimit-requests-limit": "60", "anthropic-ratelimit-requests-remaining": "59",
                "anthropic-ratelimit-requests-reset": "2024-05-01T12:00:00.050000Z",
                "anthropic-ratelimit-tokens-limit": "1000", "anthropic-ratelimit-tokens-remaining": "800",
                "anthropic-ratelimit-tokens-reset": "2024-05-01T12:00:00.600000Z"}, "anthropic fields: %s" % h)
    h = dict(q.headers("ietf", 0.0, 0))
    check(h == {"RateLimit-Policy": '"rpm";q=60;w=3, "tpm";q=1000;qu="tokens";w=3',
                "RateLimit": '"rpm";r=59;t=1, "tpm";r=800;t=1'}, "IETF fields: %s" % h)
    check(q.headers("none", 0.0, 0) == [], "no fields")


def start(*args):
    p = spawn([sys.executable, PROVIDER, "--port", "0", *args], stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    m = re.fullmatch(r"listening on 127\.0\.0\.1:(\d+)\n", line)
    if not m:
        raise AssertionError("unexpected first line: %r" % line)
    return p, int(m.group(1))


def post(conn, body, path="/v1/chat/completions"):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    conn.request("POST", path, data, {"Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, json.loads(r.read())


def chat(prompt_bytes, max_tokens):
    return {"model": "m", "max_tokens": max_tokens, "messages": [{"role": "user", "content": "x" * prompt_bytes}]}


def process():
    log = tempfile.NamedTemporaryFile(prefix="fake-llm-", suffix=".log", delete=False).name
    # A minute of 600 s: nothing refills during the test to speak of (2 tokens a second).
    p, port = start("--rpm", "5", "--tpm", "1200", "--minute-seconds", "600", "--latency-ms", "0",
                    "--headers", "openai", "--log", log, "--seed", "7")
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    statuses, remaining, tokens_left, used = [], [], [], 0
    for _ in range(4):
        status, h, body = post(conn, chat(399, 100))   # 100 prompt tokens (399 bytes, rounded up)
        statuses.append(status)
        remaining.append(int(h["x-ratelimit-remaining-requests"]))
        tokens_left.append(int(h["x-ratelimit-remaining-tokens"]))
        if status == 200:
            u = body["usage"]
            check(u["prompt_tokens"] == 100 and 1 <= u["completion_tokens"] <= 100 and
                  u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"] and
                  body["choices"][0]["message"]["role"] == "assistant",
                  "the answer's usage: prompt 100, completion in 1..100, total their sum (%s)" % u)
            used += u["total_tokens"]
    check(statuses == [200] * 4 and remaining == [4, 3, 2, 1], "4 calls on one connection, requests left 4..1 (%s)"
          % remaining)
    check(0 <= tokens_left[-1] - (1200 - used) <= 3,
          "tokens left: 1200 less prompt + completion of each call, the unused output refunded (%d, %d)"
          % (tokens_left[-1], 1200 - used))
    status, h, body = post(conn, chat(3, 2000))
    check(status == 400, "prompt + max_tokens beyond the tokens quota: 400 (%d)" % status)
    status, h, body = post(conn, chat(4, 10))
    check(status == 200, "the fifth request (%d)" % status)
    status, h, body = post(conn, chat(4, 10))
    check(status == 429 and int(h.get("retry-after", "0")) >= 100,
          "past the requests quota: 429, Retry-After %s s (a request back in 120 s)" % h.get("retry-after"))
    check(h["x-ratelimit-remaining-requests"] == "0", "and no request left")
    for bad in (b"{", b'{"messages": []}', b'{"messages": [], "max_tokens": 0}', b'{"messages": "x", "max_tokens": 1}',
                b'{"messages": [], "max_tokens": true}'):
        status, _, _ = post(conn, bad)
        check(status == 400, "bad body %r: 400" % bad)
    status, _, _ = post(conn, chat(1, 1), "/v1/completions")
    check(status == 404, "another path: 404")
    conn.request("GET", "/v1/chat/completions")
    r = conn.getresponse()
    r.read()
    check(r.status == 405, "GET: 405")
    conn.close()
    p.terminate()
    check(p.wait(timeout=5) == 0, "SIGTERM: exit code 0")
    rows = fake.read_log(log)
    check([r["status"] for r in rows] == [200] * 4 + [400, 200, 429],
          "the log: one line per call (%s)" % [r["status"] for r in rows])
    check(all(r["charged"] == r["prompt_tokens"] + r["max_tokens"] and
              r["refunded"] == r["max_tokens"] - r["completion_tokens"] for r in rows if r["status"] == 200),
          "the log: charged prompt + max_tokens, refunded the unused output")
    check(rows[-1]["refused_by"] == "requests", "the log: refused by the requests quota")
    s = fake.summarize(rows, 5, 1200, 600.0, 0.0, 60.0)
    check(s["calls"] == 7 and s["admitted"] == 5 and s["refused"] == 1 and
          s["tokens"] == used + sum(r["prompt_tokens"] + r["completion_tokens"] for r in rows[5:6]) and
          close(s["requests_share"], 10.0) and close(s["tokens_share"], s["tokens"] / 120),
          "summarize: 5 of 5 requests a minute admitted in a tenth of a minute, the tokens kept (%s)" % s)
    os.unlink(log)

    # 12 clients at once on their own connections, 5 requests a minute: exactly 5 admitted.
    for algorithm in ("token-bucket", "sliding-window"):
        p, port = start("--rpm", "5", "--tpm", "100000", "--minute-seconds", "600", "--latency-ms", "50",
                        "--algorithm", algorithm, "--headers", "none")
        results = []

        def one():
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            status, h, _ = post(c, chat(40, 10))
            results.append((status, h))
            c.close()

        threads = [threading.Thread(target=one) for _ in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        statuses = sorted(s for s, _ in results)
        check(statuses == [200] * 5 + [429] * 7, "%s: 12 concurrent calls, 5 a minute: 5 admitted (%s)"
              % (algorithm, statuses))
        check(all("x-ratelimit-limit-requests" not in h and "ratelimit" not in h for _, h in results),
              "%s: --headers none: no quota fields" % algorithm)
        check(all("retry-after" in h for s, h in results if s == 429), "%s: but 429 has Retry-After" % algorithm)
        p.terminate()
        p.wait(timeout=5)

    # The other families, read back as a client reads them.
    for family, names in (("anthropic", ["anthropic-ratelimit-tokens-reset"]), ("ietf", ["ratelimit", "ratelimit-policy"])):
        p, port = start("--headers", family, "--minute-seconds", "3", "--latency-ms", "0")
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        status, h, _ = post(conn, chat(400, 100))
        check(status == 200 and all(n in h for n in names), "%s: fields on the answer (%s)" % (family, sorted(h)))
        if family == "anthropic":
            reset = datetime.datetime.strptime(h["anthropic-ratelimit-tokens-reset"], "%Y-%m-%dT%H:%M:%S.%fZ")
            ahead = reset.replace(tzinfo=datetime.timezone.utc).timestamp() - datetime.datetime.now(
                datetime.timezone.utc).timestamp()
            check(-1 < ahead <= 3, "anthropic: the tokens quota whole again within a minute of 3 s (%.3f s)" % ahead)
        else:
            check(h["ratelimit-policy"] == '"rpm";q=60;w=3, "tpm";q=10000;qu="tokens";w=3',
                  "ietf: the policy with w=3 (%s)" % h["ratelimit-policy"])
        conn.close()
        p.terminate()
        p.wait(timeout=5)


token_bucket()
sliding_window()
quotas()
formats()
process()
finish()
