#!/usr/bin/env python3
"""Writes the seed corpus fuzz/corpus/TARGET/seed-* from the inputs of the tests (test_rate,
test_http_fields, test_http_fuzz, test_redis_fsm, test_redis_sans_io,
test_redis_sentinel_fsm, and the crawler's test_robots, test_url, test_links): text as it is for the parsers, and for the Redis machines the
same scenarios in the byte stream their targets read (fuzz/fuzz.hpp: fuzz::input). Inputs
found by fuzzing are kept beside them as found-*; this script leaves those alone.

    python3 fuzz/seeds.py      # from the repository root
"""
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def write(target, seeds):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        if f.startswith("seed-"):
            os.remove(os.path.join(d, f))
    for i, s in enumerate(seeds):
        with open(os.path.join(d, "seed-%02d" % i), "wb") as f:
            f.write(s if isinstance(s, bytes) else s.encode())


# ---- the byte stream of fuzz::input -------------------------------------------------------
def u8(v): return bytes([v & 0xFF])
def u16(v): return struct.pack("<H", v)
def i32(v): return struct.pack("<i", v)
def i64(v): return struct.pack("<q", v)


def number(v):
    """fuzz::input::number(): the shortest encoding of v."""
    if 0 <= v < 64:
        return u8(v)
    if v >= 0 and v % 1000 == 0 and v // 1000 < 65536:
        return u8(0x40) + u16(v // 1000)
    if 0 <= v < 2**32:
        return u8(0x80) + struct.pack("<I", v)
    return u8(0xC0) + i64(v)


def text(s):
    s = s.encode() if isinstance(s, str) else s
    return u8(len(s)) + s


# fuzz::any_reply
def nil(): return u8(0)
def integer(v): return u8(1) + i64(v)
def bulk(s): return u8(2) + text(s)
def status(s): return u8(3) + text(s)
def error(s): return u8(4) + text(s)
def array(*elements): return u8(5) + u8(len(elements)) + b"".join(elements)


def verdict(*v):
    """An array of six or nine integers (the script's reply)."""
    assert len(v) in (6, 9)
    return u8(6) + u8(1 if len(v) == 9 else 0) + b"".join(number(x) for x in v)


def granted(wait_us, state=42, taken=1, interval=100, burst=10):
    return verdict(1, wait_us, 0, 0, 1_000_000, state, taken, interval, burst)


def refused(wait_us, interval=100, burst=10):
    return verdict(0, wait_us, 0, 0, 1_000_000, 0, 0, interval, burst)


# fuzz::any_answer: no error (a byte >= 2), the reply, not cancelled, the round trip.
def answer(reply, cancelled=False, err=None):
    head = u8({None: 2, "unavailable": 0, "error": 1}[err])
    body = reply if err is None else b""
    return head + body + u8(0 if cancelled else 1) + number(1000) + i32(100)


# ---- the parsers: the tests' inputs as text -----------------------------------------------
rates = ["100/s", "5/min", "5/m", "2500/h", "1/d", "1/w", "1/y", "10/250ms", "0.5/s", "1000/us", "1/ns",
         "4/sec", "2/hour", "1/day", "1.5/3s", "3 / 2h", "0.1/s", "0.3/s", ".5/s", "5./s", "0.000000001/ns",
         "1/9223372036.854775808s", "1.00000000000000000001/s", "3/1.00000000000000000001s", "1/0.9ns",
         "2000000000/s", "1/300y", "1/0.0ms", "1/s x", " \t7/ 2 min \t",
         "1/1.00000000000000000001s", "7/", "7/ 5", "0/s", "0.0000000001/s"]
write("parse_rate", rates)

policies = ['"default";q=100;w=10', '"permin";q=50;w=60,"perhr";q=1000;w=3600',
            '"peruser";q=65535;qu="content-bytes";w=10;pk=:sdfjLJUOUH==:', '"default";q=100;w=1;sluice-burst=10',
            '"d";sluice-burst=10;q=100;w=1;acme=?0;sluice-burst=12', '"a";q=999999999999999;w=999999999999999']
limits = ['"default";r=50;t=30', '"default";r=999;pk=:dHJpYWwxMjEzMjM=:', '"a";t=3;r=7 ,\t"b";  r=0',
          '"x";r=1;acme=7;r=2', '"x";t=1', 'x;r=1', '"x";r=-1', '"x";r=1;t=1.5', '"x";r=1;pk="s"']
lists = ['"x\\"y\\\\z";r=1;acme=?0;d=-12.5;tk=abc/d:e, ("i" 1;a 2.25);p',
         "-999999999999.999, 0.5, -0, 007, 1.10", "1234567890123.0", "limit=100, remaining=50, reset=30",
         "*tok;*k=:AQID:, ?1;a;b=?0, ()"] + policies + limits
write("sf_list", lists)
write("ratelimit_fields", policies + limits + ['"x";w=1', '"x";q=1;w=0', '"x";q=1;qu=7', '"x";q=1;pk=?1', '"x";q=1.5'])

NOW_2026 = 1780000000 * 10**9
NOW_1994 = 784111777 * 10**9
dates = ["Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994",
         "Tue, 29 Feb 2000 23:59:60 GMT", "Sat, 01 Jan 0000 00:00:00 GMT", "Fri, 31 Dec 9999 23:59:59 GMT",
         "Wednesday, 01-Jan-76 00:00:00 GMT", "120", " 0 ", "9223372036854775808"]
write("retry_after", [i64(NOW_2026) + d.encode() for d in dates] + [i64(NOW_1994 - 10**10) + dates[0].encode()])

# ---- RESP off the wire --------------------------------------------------------------------
write("resp_reader", [
    "*3\r\n$6\r\nmaster\r\n:42\r\n*0\r\n-NOAUTH no\r\n",
    "*2\r\n$9\r\n127.0.0.1\r\n$4\r\n6379\r\n",
    "*9\r\n:1\r\n:5000\r\n:9\r\n:100000\r\n:1000000\r\n:77\r\n:1\r\n:100\r\n:10\r\n",
    "*6\r\n:0\r\n:3000\r\n:0\r\n:0\r\n:1000000\r\n:0\r\n",
    "-NOSCRIPT No matching script. Please use EVAL.\r\n+OK\r\n$-1\r\n*-1\r\n",
    b"EVALSHA\x00e0e1f9fabfc9d4800c877a703b823ac0578ff8db\x002\x00{sluice:k}\x00{sluice:k}:cfg\x00100\x0010\x001\x000\x00try",
])

# ---- replies as values --------------------------------------------------------------------
# Then the call it answers: mode (0 try, 1 reserve, 2 lease, 3 configure), n, max_wait_us.
def call(mode, n=1, max_wait=0): return u8(mode) + number(n) + number(max_wait)
write("verdict", [granted(5000, 77) + call(1, 1, 10_000), refused(3000) + call(0), verdict(0, 0, 0, 0, 1, 0) + call(2),
                  verdict(1, 0, 9, 100000, 1, 0) + call(0), array(integer(1), integer(0)), nil(), error("ERR x"),
                  granted(5000, 77, 3) + call(2, 2, 10_000), refused(3000) + call(2, 4, 0), granted(0) + call(3),
                  array(*([integer(1)] * 5 + [bulk("7")])), verdict(2, 0, 0, 0, 1, 0),
                  granted(0, interval=2**52) + call(0)])

# eval_fsm: (error, reply) for EVALSHA; after NOSCRIPT, (error, reply) for the load, then EVALSHA again.
OK = u8(0)
NOSCRIPT = error("NOSCRIPT No matching script. Please use EVAL.")
write("eval_fsm", [
    OK + integer(7),
    OK + error("WRONGTYPE Operation against a key holding the wrong kind of value"),
    OK + NOSCRIPT + OK + bulk("e0e1f9fabfc9d4800c877a703b823ac0578ff8db") + OK + integer(1),
    OK + NOSCRIPT + OK + error("ERR Error compiling script") + OK + NOSCRIPT,
    u8(1) + nil(),
    OK + NOSCRIPT + OK + error("ERR Error compiling script") + u8(1) + nil(),
])

# reply_queue: ops (0/1 push [deadline, mark?], 2/3 pop [replied, error], 4 link gone, 5 new link)
def push(mark=False): return u8(0) + u8(5) + u8(1 if mark else 0)
def pop(replied=True, err=False): return u8(2) + u8(1 if replied else 0) + u8(1 if err else 0)
write("reply_queue", [
    push() + push() + pop() + pop(True, True),
    push(True) + push() + push() + pop(True, True) + pop() + pop(False),
    push(True) + push() + u8(4) + pop(False) + pop(False) + u8(5) + push() + pop(),
    push() + push(True) + push() + pop() + pop(True, True) + pop(),
])

# sentinel_fsm: count of Sentinels, their ports; then per step: ask (error byte, answer) or
# role (error byte, answer). Answer bytes < 160 name 10.0.0.(b % 4):6379 + (b >> 2) % 3.
def sentinels(*ports): return u8(len(ports)) + b"".join(u8(p) for p in ports)
ASK_OK, ROLE_OK = u8(1), u8(1)
MASTER, SLAVE, SENTINEL = u8(0), u8(1), u8(2)
write("sentinel_fsm", [
    sentinels(1, 2, 3) + ASK_OK + u8(5) + ROLE_OK + MASTER,
    sentinels(1, 2, 3) + u8(0) + u8(5) + ASK_OK + u8(170) + ASK_OK + u8(6) + ROLE_OK + MASTER,
    sentinels(1, 2, 3) + ASK_OK + u8(5) + ROLE_OK + SLAVE + ASK_OK + u8(5) + ASK_OK + u8(6) + ROLE_OK + MASTER,
    sentinels(1) + ASK_OK + u8(5) + ROLE_OK + SENTINEL + ASK_OK + u8(5) + u8(0) + MASTER,
    sentinels(1, 2, 3) + ASK_OK + u8(200) + array(bulk("127.0.0.1"), bulk("0")) + ASK_OK + u8(170) + ASK_OK + u8(170),
])

# sentinel_events: count of configured Sentinels, their ports (26000 + b % 24); then per
# step an op byte: 0 refresh (from, peers: count, then port and flags per peer), 1 add,
# 2 promote, 3 a +switch-master payload (text, then flags), 4 a +sentinel payload, 5 a reply.
def peers(*ps): return u8(len(ps)) + b"".join(u8(p) + u8(f) for p, f in ps)
write("sentinel_events", [
    sentinels(1, 2) + u8(0) + u8(2) + peers((1, 0), (3, 0)) + u8(2) + u8(3) + u8(0) + u8(1) + peers(),
    sentinels(1) + u8(0) + u8(9) + peers(*[(p, 0) for p in range(10, 17)]) + u8(1) + u8(20) + u8(1) + u8(21),
    sentinels(1, 2, 3) + u8(0) + u8(1) + peers((2, 1), (3, 2)) + u8(0) + u8(4) + peers((5, 3)),
    sentinels(1) + u8(3) + text("m 127.0.0.1 6379 127.0.0.1 6380") + u8(1) + u8(1) + u8(1),
    sentinels(1) + u8(3) + text("m ::1 6379 0:0::1 6380") + u8(1) + u8(0) + u8(7) + u8(1),
    sentinels(1) + u8(3) + text("m host-a 6379 host-b 6380") + u8(1) + u8(1) + u8(1),
    sentinels(1) + u8(3) + text("m 127.0.0.1 6379 127.0.0.1 6380 extra"),
    sentinels(1) + u8(4) + text("sentinel 8d1f 127.0.0.1 26380 @ m 127.0.0.1 6379"),
    sentinels(1) + u8(5) + array(bulk("message"), bulk("+sentinel"), bulk("sentinel 8d1f 127.0.0.1 26380 @ m 127.0.0.1 6379")),
    sentinels(1) + u8(5) + array(bulk("message"), bulk("+switch-master"), bulk("m 127.0.0.1 1 127.0.0.1 2")),
])

# lease_book: interval_us, ttl (ms), lease_size, start; then per step: time advance, op
# (0 take n, 2 the reservation's reply [rtt, reply], 3 close).
def lease_head(interval_us=1000, ttl_ms=50, size=16, start=0):
    return number(interval_us - 1) + u16(ttl_ms) + u8(size - 1) + number(start)
def take(dt, n=1): return number(dt) + u8(0) + u8(n - 1)
def reply_(dt, reply, rtt=100_000): return number(dt) + u8(2) + number(rtt) + reply
def close(dt): return number(dt) + u8(3) + u8(0)
MS, US = 1_000_000, 1000
write("lease_book", [
    lease_head() + take(0) + reply_(0, refused(80_000, 1000, 1)) + take(29 * MS) + take(MS) +
    reply_(0, granted(3000, 900, 4, 1000, 1)) + take(0) + take(999_999) + close(53 * MS),
    lease_head() + take(0) + reply_(0, granted(3000, 100, 4, 1000, 1)) + take(0) +
    reply_(0, granted(9000, 300, 2, 1000, 1)) + close(0),
    lease_head(10, 250, 64) + b"".join(take(2 * US) for _ in range(6)) + reply_(200 * US, granted(0, 500, 1, 10, 1)) +
    b"".join(take(2 * US) for _ in range(20)),
])

# try_fsm: interval, ttl, lease_size, leasing?, start; then per step: time advance, op
# (0 request n, 3 reply to call i, 6 start the background reservations, 7 failure policy).
def try_head(leasing, interval_us=100, ttl_ms=250, size=64, start=10 * MS):
    return number(interval_us - 1) + u16(ttl_ms) + u8(size - 1) + u8(1 if leasing else 0) + number(start)
def request(dt, n=1): return number(dt) + u8(0) + u8(n)
def respond(dt, i, ans): return number(dt) + u8(3) + u8(i) + ans
def background(dt): return number(dt) + u8(6)
def policy(dt, b): return number(dt) + u8(7) + u8(b)
write("try_fsm", [
    try_head(False) + request(0, 3) + respond(0, 0, answer(refused(2000))) + request(0) +
    respond(0, 0, answer(b"", err="unavailable")) + policy(0, 0) + request(0),
    try_head(True) + request(0) + request(0) + request(0) + respond(200 * US, 0, answer(granted(0, 500, 1))) +
    background(0) + respond(0, 0, answer(granted(100, 700, 2))) + request(0) + request(0),
    try_head(True) + request(0) + respond(0, 0, answer(refused(0))) + request(MS),
    try_head(False) + request(0, 0),
    try_head(False) + request(0) + respond(0, 0, answer(refused(0))),
    try_head(False) + policy(0, 1 << 2) + request(0),
    try_head(True) + request(0) + respond(200 * US, 0, answer(granted(0, 500, 8))) +
    b"".join(request(100 * US) for _ in range(8)),
])

# acquire_fsm: start, flags (b % 3: bucket, window, configure; 8: not routed; >> 4: policy),
# n, max_wait; then the steps: an answer and the round trip for a call, a wake-up choice
# (0 closed, 1 cancelled, 7 on time but closed meanwhile, else on time) and its time for a
# sleep, an outcome for a fallback.
def acq_head(kind, n, max_wait, start=100 * MS, routed=True, policy_=2):
    return number(start) + u8(kind | (0 if routed else 8) | (policy_ << 4)) + u8(n) + number(max_wait)
WAKE = u8(2)
write("acquire_fsm", [
    acq_head(0, 2, 7_500_999) + answer(granted(5000, 77, 2)) + number(0) + WAKE,
    acq_head(0, 1, 0) + answer(granted(0)) + number(0),
    acq_head(0, 1, MS) + answer(refused(3000)) + number(0),
    acq_head(0, 3, 1000 * MS) + answer(granted(9000, 1234, 3), cancelled=True) + number(0),
    acq_head(0, 1, 1000 * MS) + answer(granted(9000, 99)) + number(0) + u8(0) + number(MS),
    acq_head(0, 1, 40 * MS) + answer(b"", err="unavailable") + number(0) + u8(2) + number(0),
    acq_head(1, 2, 10 * MS) + answer(verdict(0, 3000, 0, 0, 1, 0)) + number(0) + WAKE +
    answer(verdict(0, 4000, 0, 0, 1, 0)) + number(2 * MS) + WAKE + answer(verdict(0, 1001, 0, 0, 1, 0)) + number(0),
    acq_head(1, 1, 10 * MS) + answer(verdict(1, 0, 0, 0, 1, 0)) + number(0),
    acq_head(0, 1, MS, routed=False, policy_=1),
    acq_head(1, 1, 10 * MS, routed=False) + u8(2) + number(0),
    acq_head(1, 1, MS) + answer(verdict(0, 5000, 0, 0, 1, 0)) + number(0),
    acq_head(1, 1, 10 * MS) + answer(verdict(0, 3000, 0, 0, 1, 0)) + number(0) + u8(7),
    # configure: span, count, then 0 a call, 1 invalid, 2 closed; the call's answer.
    acq_head(2, 1, 0) + number(1000) + number(10) + u8(0) + answer(verdict(1, 0, 0, 0, 1, 0, 0, 1000, 10)),
    acq_head(2, 1, 0) + number(1000) + number(10) + u8(1),
    acq_head(2, 1, 0) + number(1000) + number(10) + u8(2),
    acq_head(2, 1, 0) + number(1000) + number(10) + u8(0) + answer(b"", err="error"),
    acq_head(2, 1, 0) + number(1000) + number(10) + u8(0) + answer(verdict(0, 0, 0, 0, 1, 0, 0, 1000, 10)),
])

# cluster_replies: a redirection (flag 1, MOVED?, text) or a CLUSTER SLOTS reply (flag 0,
# asked host?, array?, count, ranges: shape byte, first, last, host string?, host, port
# integer?, port).
def slot_range(first, last, host, port):
    return u8(1) + number(first) + number(last) + u8(1) + text(host) + u8(1) + number(port)
write("cluster_replies", [
    u8(1) + u8(1) + b"MOVED 3999 127.0.0.1:6381",
    u8(1) + u8(0) + b"ASK 3999 127.0.0.1:6381",
    u8(1) + u8(1) + b"MOVED 16383 redis-2.internal:7000",
    u8(0) + u8(1) + u8(1) + u8(3) + slot_range(0, 5460, "127.0.0.1", 7000) +
    slot_range(5461, 10922, "", 7001) + slot_range(10923, 16383, "127.0.0.1", 7002),
])

# limiter_core: probe interval (ms - 1), start; then per step: time advance, op (0 a reply:
# sent us, round trip us, the reply, counted as the fallback's?; 1 unreachable; 2 two
# routes; 3 a request's check: b % 3 == 0 n = 0, else n - 1 as u16; b % 16 == 15 close()).
def on_reply(dt, reply, sent=1_700_000_000_000_000, rtt=100, fallback=False):
    return number(dt) + u8(0) + number(sent) + i32(rtt) + reply + u8(fallback)
write("limiter_core", [
    u8(199) + number(1000 * MS) + on_reply(0, verdict(1, 0, 8, 200_000, 1_700_000_000_000_050, 5, 2, 100_000, 10)) +
    number(0) + u8(1) + number(0) + u8(2) + number(200 * MS) + u8(2) + on_reply(0, refused(3000)) +
    number(0) + u8(3) + u8(0) + number(0) + u8(3) + u8(1) + u16(5000),
    u8(9) + number(0) + on_reply(0, refused(3000), fallback=True) + number(0) + u8(3) + u8(1) + u16(5) +
    number(0) + u8(3) + u8(15) + number(0) + u8(3) + u8(31),
])

# server_request: a mode byte (bit 0: the peer is a trusted proxy; bit 1: the proxies write
# Forwarded; bits 2-6: ms between two requests; bit 7: the client waits at the end instead
# of closing), the size of the pieces the bytes arrive in (0: at once), a line of ranges to
# trust, then one connection's bytes (what the example server's tests send).
def conn(stream, trusted=False, forwarded=False, ms=0, waits=False, piece=0, ranges=""):
    mode = (1 if trusted else 0) | (2 if forwarded else 0) | (min(ms, 31) << 2) | (128 if waits else 0)
    return u8(mode) + u8(piece) + ranges.encode() + b"\n" + (stream.encode() if isinstance(stream, str) else stream)


def req(target="/", fields="", version="1.1", method="GET", body=""):
    host = "Host: example.test\r\n" if version == "1.1" else ""
    return "%s %s HTTP/%s\r\n%s%s\r\n%s" % (method, target, version, host, fields, body)


GET = req("/api/items?id=7")
write("server_request", [
    conn(GET, ms=31),
    conn(GET * 8 + req("/metrics") + req("/api/work?a=1&ms=250") + req("/site/5") + req("/site/x") + req("/robots.txt") + req("/"), ms=20),
    conn(GET * 17, piece=7),   # past the cap of requests a connection carries
    conn(req(fields="X-Forwarded-For: 203.0.113.9\r\nX-Forwarded-For: 198.51.100.4, 10.1.2.3\r\n") * 3,
         trusted=True, ms=5, ranges="10.0.0.0/8 fd00::/8 ::ffff:127.0.0.0/104"),
    conn(req(fields="X-Forwarded-For: [2001:db8::7]:4711, ::ffff:10.0.0.1, 192.0.2.9:80, unknown\r\n") +
         req(fields="X-Forwarded-For: 10.0.0.1, [fd00::2]\r\n"), trusted=True, ranges="10.0.0.0/8 fd00::/8"),
    conn(req(fields='Forwarded: for=unknown, for="[2001:db8:cafe::17]:4711";proto=http\r\n'
                    'Forwarded: For="\\1.2.3.4";;by=_x;, for="192.0.2.43:_p-1";host="%s"\r\n' % ("h" * 70)),
         trusted=True, forwarded=True, ranges="192.0.2.0/24 1.2.3.4"),
    conn(req("http://example.test/p?q=1", method="HEAD")),
    conn(req(version="1.0") + req(version="1.0", fields="Connection: keep-alive\r\n") + GET),
    conn(req("/submit", "Content-Length: 5\r\n", method="POST", body="hello") + GET, piece=3),
    conn(req(fields="Content-Length: 10\r\n", body="0123456789") + GET, piece=1),
    conn(req(fields="Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n", body="3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n") + GET),
    conn(req(fields="Transfer-Encoding: chunked\r\nContent-Length: 3\r\n", body="0\r\n\r\n")),
    conn(req(fields="Transfer-Encoding: chunked, chunked\r\n", body="0\r\n\r\n")),
    conn(req(fields="Transfer-Encoding: foo, chunked\r\n", body="0\r\n\r\n")),
    conn(req(version="1.0", fields="Transfer-Encoding: chunked\r\n", body="0\r\n\r\n")),
    conn(req(fields="X-A: one\r\n two\r\n"), piece=2),
    conn(req(fields="Transfer-Encoding: chunked\r\n", body="5\r\nhello\r\n0\r\n\r\n") + GET, piece=2),
    conn(req(fields="Transfer-Encoding: chunked;q=1\r\n", body="0\r\n\r\n")),
    conn(req(fields="Transfer-Encoding: gzip\r\nContent-Length: 3\r\n", body="abc")),
    conn("GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\nGET / HTTP/1.1\r\nHost: h:8o\r\n\r\n"),
    conn("GET / HTTP/1.1\r\nHost: [::1]x\r\n\r\n"),
    conn("GET / HTTP/1.1\r\nHost: [::1]:8x\r\n\r\n"),
    conn("GET / HTTP/1.1\r\nHost: a b\r\n\r\n"),
    conn("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nab"),
    conn("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
    conn("GET / HTTP/2.0\r\nHost: a\r\n\r\n"),
    conn(req(fields="X-Long: " + "x" * 9000 + "\r\n")),
    conn("GET /" + "a" * 9000 + " HTTP/1.1\r\n"),
    conn("GET / HTTP/1.1\r\nHost: a\r\n", waits=True),
    conn(req(fields="Content-Length: 2000000\r\n")),
    conn("GET * HTTP/1.1\r\nHost: a\r\n\r\n"),
    # Expect: 100-continue: accepted (a body of known length, a chunked one, a list), refused
    # by the client's limit (burst 5), ignored in HTTP/1.0, refused for its method, /metrics.
    conn(req(fields="Expect: 100-continue\r\nContent-Length: 5\r\n", body="hello") +
         req(fields="Expect: foo, 100-Continue\r\nTransfer-Encoding: chunked\r\n", body="0\r\n\r\n") + GET, piece=4),
    conn(GET * 5 + req(fields="Expect: 100-continue\r\nContent-Length: 3\r\n", body="abc") + GET),
    conn(req(version="1.0", fields="Expect: 100-continue\r\nContent-Length: 2\r\n", body="hi") +
         req(method="POST", fields="Expect: 100-continue\r\nContent-Length: 2\r\n", body="hi")),
    conn(req("/metrics", fields="X-Forwarded-For: 127.0.0.1\r\nExpect: 100-continue\r\nContent-Length: 1\r\n", body="x") +
         req("/metrics", fields="Expect: 100-continue\r\nContent-Length: 1\r\n", body="x"), trusted=True),
])

# ---- what a crawled site sends (examples/crawler) ------------------------------------------
# robots: a mode byte (bit 0: a small limit, the byte's top six bits part of it; bit 1: plain
# rules), the User-Agent, a path, a pattern, then the file (after a byte of the limit in
# mode 1) or, mode 2, the rules (allow?, pattern).
ROBOTS = ("User-Agent : foobot\nDisallow: /a\n\nuser-agent: *\ndisallow: /b\n\nUser-agent: FOOBOT/1.0\n"
          "Disallow: /c\nuser-agent: barbot\nuser-agent: bazbot\ndisallow: /d   # a comment\n")
RFC = ("User-agent: *\nAllow: /example/page/\nDisallow: /example/page/disallowed.gif\nDisallow: /example/\n"
       "Allow: /same\nDisallow: /same\nDisallow: /*.php$\nDisallow: /private*/\nCrawl-delay: 2.5\n")
def robots(mode, agent, path, pattern, body):
    return u8(mode) + text(agent) + text(path) + text(pattern) + (body.encode() if isinstance(body, str) else body)
def rule(allow, pattern): return u8(1 if allow else 0) + text(pattern)
write("robots", [
    robots(0, "FooBot/2.1", "/c/x", "/fish*.php", ROBOTS),
    robots(0, "sluice-crawler/0.2", "/example/page/x.html", "/*.php$", RFC),
    robots(0, "bot", "/caf%C3%A9/x", "/a*b*c$", "User-agent: *\r\nDisallow: /caf\xc3\xa9\r\nDisallow: /%7ejoe\r"
           "Crawl-delay: 2.5\r\nDisallow:\nSitemap: http://x/s.xml\nCrawl-delay: soon\n"),
    robots(0, "", "/", "*", "Disallow: /\nfoo bar\nUser-agent: *\nAllow: /\n"),
    robots(1 + 4 * 30, "bot", "/example/x", "/private/", u8(20) + RFC.encode()),
    robots(1 + 4 * 63, "bot", "/private/x", "/private/", u8(63) + b"User-agent: *\r\nDisallow: /private/\r\n"
           b"Allow: /\n" + b"x" * 200 + b"\nDisallow: /later/\n"),
    robots(2, "bot", "/example/page/x.php", "/ab*ba$", rule(1, "/example/page/") + rule(0, "/example/") +
           rule(0, "/*.php$") + rule(1, "/same") + rule(0, "/same") + rule(0, "/*")),
    robots(2, "bot", "/aXbYbZc", "/a**a", rule(0, "/a*b*c$") + rule(1, "/a*") + rule(0, "$")),
])

# url: the base (length-prefixed), then the reference as a page writes it.
def url(base, ref): return text(base) + (ref.encode() if isinstance(ref, str) else ref)
BASE = "http://a/b/c/d;p?q"
write("url", [
    url(BASE, "g;x?y#s"), url(BASE, "../../../g"), url(BASE, "//g:8080/x/./y/../z"), url(BASE, "?y"),
    url(BASE, "  /a b\tc\n%zz<>\"{}|\\^`"), url(BASE, "g#s#t"), url(BASE, b"/caf\xc3\xa9?q=\xff"),
    url("http://[::1]:8080/x", "//[fe80::1]/y"), url("http://Example.COM:80/%7euser/", "HTTP://EXAMPLE.com/%7Ea"),
    url("http://host/", "mailto:x@y"), url("http://user@host:99999/", "https://h/"), url("localhost:8080/", "x"),
    url("http://h/a/b", "./../../.."), url("http://h/", "javascript:void(0)"), url("http://h/p", ""),
    url("http://h:99999/", "http:///x"), url("http://h:0/x", "http:/.//h://x"),
])

# links: a byte choosing the charset (0 none, 1 utf-8, 3 iso-8859-1, 5 utf-16, 7 unknown), then the page.
def page(cs, html): return u8(cs) + (html.encode() if isinstance(html, str) else html)
write("links", [
    page(0, "<!doctype html><html><body>\n<a href=\"p1.html\">double</a><a href='p2.html'>single</a>"
            "<A HREF=\"P3.html\">upper</A><a href=p4.html>unquoted</a><a hReF = \"dir/p5.html\" >sp</a>"
            "<a href=\"page?a=1&amp;b=2\">entity</a><a href=\"x&#47;y\">n</a><a name=\"anchor\">no</a>"
            "<area href=\"/map.html\"><link href=\"/style.css\" rel=\"stylesheet\"><img src=\"i.png\"></body></html>"),
    page(0, "<html><head><base href=\"http://h/base/\"><base href=\"/second/\">"
            "<meta name=\"ROBOTS\" content=\"noindex, NoFollow\"></head><body><a href=\"x\">x</a></body></html>"),
    page(0, "<meta name=robots content=none><a href=a>a</a>"),
    page(0, "<a href=\"/ok\"><p><a href=/broken<div></a><!-- <a href=/commented> --><script>'<a href=/s>'</script>"),
    page(1, b"<a href=\"/caf\xc3\xa9\">cafe</a><a href=\"/\xe2\x82\xac\">euro</a><a href=\"/\xf0\x9f\x98\x80\">"),
    page(3, b"<meta charset=\"iso-8859-1\"><a href=\"/caf\xe9\">cafe</a>"),
    page(0, b"<a href=\"/\xed\xa0\x80\">surrogate</a><a href=\"/\xc0\xaf\">overlong</a><a href=\"/\xf4\x90\x80\x80\">"),
    page(5, "\ufeff<a href=\"/u16\">x</a>".encode("utf-16-le")),
    page(7, "<a href='/unknown-charset'>x</a>"),
])

# frontier: --max-pages (0..31), the bound per host (0..7), then steps: a link (an even byte:
# host in bits 1-2, target in bits 3-6) or a redirect (1, from, to: host << 4 | target).
def link(host, target): return u8(host << 1 | target << 3)
def moved(a, b): return u8(1) + u8(a) + u8(b)
write("frontier", [
    u8(0) + u8(0) + link(0, 1) + moved(0x01, 0x01),                                  # to itself
    u8(0) + u8(0) + moved(0x01, 0x02) + moved(0x02, 0x03) + moved(0x03, 0x01) + moved(0x04, 0x02),  # 3, then into
    u8(0) + u8(0) + moved(0x09, 0x01) + moved(0x01, 0x02) + moved(0x02, 0x01) + moved(0x01, 0x05),  # led in before
    u8(0) + u8(0) + moved(0x01, 0x03) + moved(0x02, 0x03) + moved(0x03, 0x04) + moved(0x05, 0x01) +
    moved(0x04, 0x05),                                                               # chains join, then close
    u8(5) + u8(2) + b"".join(link(h, t) for h in range(3) for t in range(3)),        # the bounds
    u8(0) + u8(3) + b"".join(link(1, t) for t in range(8)) + link(1, 2) + moved(0x12, 0x13),
])


# provider_limits: now, then fields: a byte (bit 7 the name's case changed; 0-20 a known
# name, in the target's order; 127 a name of the input's own), the value.
PL_NAMES = ["x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests",
            "x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"] + \
           ["anthropic-ratelimit-%s-%s" % (q, p) for q in ("requests", "tokens", "input-tokens", "output-tokens")
            for p in ("limit", "remaining", "reset")] + ["retry-after", "ratelimit", "ratelimit-policy"]
NOW_2024 = 1714564800 * 10**9


def fields(*kv, now=NOW_2024):
    out = i64(now)
    for name, value in kv:
        upper = name.startswith("^")
        name = name.lstrip("^")
        out += u8(PL_NAMES.index(name) | (0x80 if upper else 0)) if name in PL_NAMES else u8(127) + text(name)
        out += text(value)
    return out


write("provider_limits", [
    fields(("x-ratelimit-limit-requests", "60"), ("x-ratelimit-limit-tokens", "150000"),
           ("x-ratelimit-remaining-requests", "59"), ("x-ratelimit-remaining-tokens", "149984"),
           ("x-ratelimit-reset-requests", "1s"), ("x-ratelimit-reset-tokens", "6m0s")),
    fields(("x-ratelimit-reset-requests", "1h2m3.5s"), ("x-ratelimit-reset-tokens", "20ms"),
           ("^x-ratelimit-limit-tokens", " 10 "), ("x-ratelimit-remaining-requests", "007")),
    fields(("x-ratelimit-reset-requests", "2562047h47m16.854775807s"), ("x-ratelimit-reset-tokens", "1.5\u00b5s"),
           ("x-ratelimit-limit-requests", "18446744073709551615"), ("x-ratelimit-remaining-tokens", "0")),
    fields(("x-ratelimit-reset-requests", "9223372036854775808ns"), ("x-ratelimit-reset-tokens", "-1s"),
           ("x-ratelimit-limit-requests", "18446744073709551616"), ("x-ratelimit-limit-tokens", "1.5"),
           ("x-ratelimit-remaining-tokens", "1e3"), ("x-ratelimit-remaining-requests", "")),
    fields(("x-ratelimit-reset-requests", ".5s"), ("x-ratelimit-reset-tokens", "5.s1ns0.0000000019s"),
           ("x-ratelimit-limit-tokens", "0")),
    fields(("anthropic-ratelimit-requests-limit", "50"), ("anthropic-ratelimit-requests-remaining", "49"),
           ("anthropic-ratelimit-requests-reset", "2024-05-01T12:00:01Z"),
           ("anthropic-ratelimit-tokens-limit", "100000"), ("anthropic-ratelimit-tokens-remaining", "90000"),
           ("anthropic-ratelimit-tokens-reset", "2024-05-01T14:00:06.5+02:00"),
           ("anthropic-ratelimit-input-tokens-limit", "80000"),
           ("anthropic-ratelimit-input-tokens-remaining", "79000"),
           ("anthropic-ratelimit-input-tokens-reset", "2024-05-01t11:59:00z"),
           ("anthropic-ratelimit-output-tokens-limit", "20000"),
           ("anthropic-ratelimit-output-tokens-remaining", "11000"),
           ("anthropic-ratelimit-output-tokens-reset", "2024-05-01T06:30:00.123456789999-05:30"),
           ("retry-after", "7")),
    fields(("anthropic-ratelimit-requests-reset", "2262-04-11T23:47:16.854775807Z"),
           ("anthropic-ratelimit-tokens-reset", "1677-09-21T00:12:43.145224192Z"),
           ("anthropic-ratelimit-input-tokens-reset", "2016-12-31T23:59:60-00:00"),
           ("anthropic-ratelimit-output-tokens-reset", "2024-02-30T00:00:00Z"), now=-2**63),
    fields(("anthropic-ratelimit-requests-reset", "2024-05-01T24:00:00Z"),
           ("anthropic-ratelimit-tokens-reset", "2024-05-01T12:00:00+24:00"),
           ("anthropic-ratelimit-input-tokens-reset", "9999-12-31T23:59:59Z"),
           ("anthropic-ratelimit-output-tokens-reset", "2024-05-01T12:00:00.Z")),
    fields(("ratelimit-policy", '"rpm";q=60;w=60, "tpm";q=100000;qu="tokens";w=60'),
           ("ratelimit", '"rpm";r=10;t=6, "tpm";r=5000;t=3')),
    fields(("ratelimit-policy", '"min";q=60;w=60, "day";q=1000;w=86400, "bytes";q=1;qu="content-bytes"'),
           ("ratelimit", '"min";r=40;t=20, "day";r=7;t=3600, "bytes";r=0'),
           ("ratelimit-policy", '"i";q=8;qu="input-tokens", "o";q=9;qu="output-tokens"'),
           ("ratelimit", '"x";r=3, "x";r=1')),
    fields(("ratelimit-policy", '"a";q=-1'), ("ratelimit", '"a";r=1;t=999999999999999'),
           ("x-ratelimit-remaining-requests", "12")),
    fields(("ratelimit", "r=1"), ("ratelimit-policy", '"r";q=5'), ("x-ratelimit-remaining-requests", "12")),
    fields(("x-ratelimit-limit-requests", "60"), ("^x-ratelimit-limit-requests", "60"),
           ("retry-after", "1"), ("retry-after", "2"), ("X-Ratelimit-Limit-Request", "1"), ("", "")),
    fields(("retry-after", "Wed, 01 May 2024 12:00:30 GMT")),
    fields(("retry-after", "9999999999999")),
    fields(("retry-after", "Fri, 31 Dec 9999 23:59:59 GMT")),
])


# shm_table: byte 0 bit 0 clear; a shape byte (keys - 1 in bits 0-5, bit 6 two shards,
# bit 7 integer keys); patches (length, u16 offset in the segment, bytes) ended by a zero
# length; then operations: op (bits 0-2 which, 4-5 n, bit 3 a byte written after it, bit 7
# time advances), [number], integer flag, integer key, string key, then what the op reads.
# The segment: header 128 bytes, the keyed header 128 (its lock at 64), each shard 128 (its
# lock first), then the slots.
def shm_op(which, n=1, key=1, skey="k", integer=True, advance=None, extra=b"", poke=None):
    op = which | (n << 4) | (0x80 if advance is not None else 0) | (0x08 if poke else 0)
    out = u8(op) + (number(advance) if advance is not None else b"") + u8(1 if integer else 0) + u8(key) + text(skey) + extra
    return out + (u16(poke[0]) + u8(poke[1]) if poke else b"")
def shm_patch(at, data):
    return u8(len(data)) + u16(at) + data
SHARD0 = 128 + 128
ops = (shm_op(0, key=1) + shm_op(0, key=2) + shm_op(1, integer=False, skey="client-a") + shm_op(0, key=1, n=3) +
       shm_op(3, key=1) + shm_op(4, key=1, extra=number(5000)) + shm_op(5, key=1, extra=u8(1) + u8(0)) +
       shm_op(6, key=2) + shm_op(7) + shm_op(0, key=9, advance=100_000))
write("shm_table", [
    u8(0) + u8(15) + u8(0) + ops,                                        # 16 keys, one shard
    u8(0) + u8(15 | 0x40) + u8(0) + ops,                                 # two shards
    u8(0) + u8(3 | 0x80) + u8(0) + ops,                                  # integer keys, full soon
    u8(0) + u8(15) + shm_patch(SHARD0, i32(0x40000000)) + u8(0) + ops,   # a holder died: repair
    u8(0) + u8(15) + shm_patch(128 + 64, i32(0x40000000)) + u8(0) + ops, # the table's lock
    u8(0) + u8(15) + shm_patch(SHARD0 + 16, i32(7)) + u8(0) + ops,       # a lock of another kind
    u8(0) + u8(15) + shm_patch(SHARD0, i32(12345)) + u8(0) + ops,        # held by someone else
    u8(0) + u8(15) + shm_patch(0, b"garbage!") + u8(0) + ops,            # not a segment
    u8(0) + u8(15) + u8(0) + ops + shm_op(0, key=3, poke=(128 + 128 + 128 + 8, 0x7f)) + ops,
    u8(1) + text("x" * 200) + u8(1) + u8(0) + u8(1) + u8(0),             # the header check alone
    u8(1) + text("x" * 200) + u8(0) + u8(0) + u8(1) + u8(0),
])
