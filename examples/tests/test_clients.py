#!/usr/bin/env python3
"""End-to-end tests of api_client and loadgen against standin_server.py, a stand-in for
the example server with the same contract. The assertions are on the server's log: what
arrived when, not what the client says about itself.

usage: test_clients.py CASE API_CLIENT LOADGEN STANDIN_SERVER
Every case is bounded (an alarm after 50 s) and stops every process it started, also on
failure.
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile

CASE, API_CLIENT, LOADGEN, STANDIN = sys.argv[1:5]
procs = []
tmp = tempfile.mkdtemp(prefix='sluice-examples-')


class Timeout(Exception):
    pass


def on_alarm(*_):
    raise Timeout('test case took more than 50 s')


def check(cond, what):
    if not cond:
        raise AssertionError(what)
    print('ok:', what)


def start_standin(*args):
    """Starts the stand-in server; returns (port, log path)."""
    log = os.path.join(tmp, 'access-%d.log' % len(procs))
    p = subprocess.Popen([sys.executable, STANDIN, '--port', '0', '--access-log', log, '--seconds', '60', *args],
                         stdout=subprocess.PIPE, text=True)
    procs.append(p)
    line = p.stdout.readline().strip()
    m = re.fullmatch(r'listening on 127\.0\.0\.1:(\d+)', line)
    if not m:
        raise AssertionError('stand-in server said %r' % line)
    return int(m.group(1)), log


def read_log(path):
    """[(arrival s, response s, status, retry-after)], times relative to the first arrival."""
    rows = []
    with open(path) as f:
        for line in f:
            a, r, status, ra = line.rstrip("\n").split(" ", 3)
            rows.append((int(a), int(r), int(status), ra))
    rows.sort()
    if not rows:
        return rows
    t0 = rows[0][0]
    return [((a - t0) / 1e9, (r - t0) / 1e9, s, ra) for a, r, s, ra in rows]


def run(cmd, expect_rc=0, env=None):
    print('$', ' '.join(cmd), flush=True)
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=40, env=env)
    sys.stdout.write(res.stdout)
    sys.stdout.write(res.stderr)
    if expect_rc is not None:
        check(res.returncode == expect_rc, '%s exits with %d (got %d)' % (os.path.basename(cmd[0]), expect_rc,
                                                                          res.returncode))
    return res


def field(text, pattern):
    m = re.search(pattern, text)
    if not m:
        raise AssertionError('no %r in the output' % pattern)
    return float(m.group(1))


# ---- api_client ---------------------------------------------------------------------------

def api_client_converges():
    # The server allows 20/s with a burst of 10; the client guesses 100/s. A client that
    # did not adapt gets at most 20/s + 10 through: over 3 s at least 1 - 70/300 = 77 %
    # 429s. The adapting one has learned the quota within the first half (the controller
    # aims at a half-full quota, see sluice/adaptive_rate_controller.hpp), so in the second half it should see
    # (almost) none: at most 10 % is allowed for the 429s of a transient on a busy machine,
    # and it must still use the quota (at least 12 of the 20 per second).
    port, log = start_standin('--rate', '20/s', '--burst', '10')
    out = run([API_CLIENT, '--url', 'http://127.0.0.1:%d/api/items' % port, '--rate', '100/s', '--seconds', '6',
               '--concurrency', '4', '--quiet']).stdout
    rows = read_log(log)
    second = [r for r in rows if r[0] >= 3.0]
    n429 = sum(1 for r in second if r[2] == 429)
    ok = sum(1 for r in second if r[2] == 200)
    share = n429 / max(1, len(second))
    print('adaptive: %d requests, second half %d, 429 share there %.3f, 200s there %.1f/s' %
          (len(rows), len(second), share, ok / 3))
    check(share <= 0.10, 'adaptive client: 429 share in the second half %.3f <= 0.10' % share)
    check(ok / 3 >= 12, 'adaptive client uses the quota: %.1f/s of 200s in the second half >= 12/s' % (ok / 3))
    check(field(out, r'adaptations: (\d+)') >= 1, 'the client adapted its limiter')

    port, log = start_standin('--rate', '20/s', '--burst', '10')
    run([API_CLIENT, '--url', 'http://127.0.0.1:%d/api/items' % port, '--rate', '100/s', '--seconds', '3',
         '--concurrency', '4', '--quiet', '--no-adapt'])
    rows = read_log(log)
    base = sum(1 for r in rows if r[2] == 429) / max(1, len(rows))
    print('non-adaptive: %d requests, 429 share %.3f' % (len(rows), base))
    check(base >= 0.5, 'non-adaptive baseline: 429 share %.3f >= 0.5 (77 %% expected)' % base)
    check(share <= base / 5, 'adaptive share %.3f is at most a fifth of the baseline %.3f' % (share, base))


def api_client_retry_after():
    # No RateLimit fields. Requests 30 and 90 get a 429 with Retry-After: 2, the server
    # admitting the others: a Retry-After is no command to stop every worker, the client
    # goes on (the refusals tell the pace).
    port, log = start_standin('--rate', '1000/s', '--burst', '1000', '--no-headers', '--force-429', '30,90',
                              '--force-retry-after', '2')
    out = run([API_CLIENT, '--url', 'http://127.0.0.1:%d/api/items' % port, '--rate', '50/s', '--seconds', '3',
               '--concurrency', '4']).stdout
    rows = read_log(log)
    rejected = [r for r in rows if r[2] == 429]
    check(len(rejected) == 2, '%d forced 429s seen' % len(rejected))
    check(field(out, r'status 429: (\d+)') == len(rejected), 'the client counted the 429s the server sent')
    for r in rejected:
        went_on = [x for x in rows if r[1] < x[0] < r[1] + 0.5]
        check(len(went_on) >= 5, 'a lone 429 with Retry-After: 2 pauses nobody (%d arrivals in the next 0.5 s)'
              % len(went_on))
    check(re.search(r'Retry-After: 0 pauses, for the 2 refusals that carried one', out) is not None,
          'no pause claimed for the two lone refusals')

    # A Retry-After HTTP-date in the year 9999 (past what nanoseconds since 1970 hold): the
    # refused request waits at most max_pause, nobody else waits, nothing overflows (a
    # sanitizer build stops on a signed overflow).
    port, log = start_standin('--rate', '1000/s', '--burst', '1000', '--no-headers', '--force-429', '30',
                              '--force-retry-after', 'Fri, 31 Dec 9999 23:59:59 GMT')
    out = run([API_CLIENT, '--url', 'http://127.0.0.1:%d/api/items' % port, '--rate', '50/s', '--seconds', '2',
               '--concurrency', '4']).stdout
    rows = read_log(log)
    rejected = [r for r in rows if r[2] == 429]
    check(len(rejected) == 1, '%d forced 429s with a date in 9999 seen' % len(rejected))
    for r in rejected:
        went_on = [x for x in rows if r[1] < x[0] < r[1] + 0.5]
        check(len(went_on) >= 5, 'a 429 with a Retry-After in 9999 pauses nobody else (%d arrivals in the next 0.5 s)'
              % len(went_on))

    # Requests 30 to 46 refused (Retry-After: 2): the server refuses everything, and the
    # client sees it within a few refusals (those over 250 ms with nothing admitted) and
    # pauses every worker for the Retry-After, then goes on.
    port, log = start_standin('--rate', '1000/s', '--burst', '1000', '--no-headers', '--force-429',
                              ','.join(str(n) for n in range(30, 47)), '--force-retry-after', '2')
    out = run([API_CLIENT, '--url', 'http://127.0.0.1:%d/api/items' % port, '--rate', '50/s', '--seconds', '5',
               '--concurrency', '4']).stdout
    rows = read_log(log)
    gaps = [(rows[i + 1][0] - rows[i][0], rows[i]) for i in range(len(rows) - 1)]
    gap, before = max(gaps)
    refused_before = sum(1 for r in rows if r[2] == 429 and r[0] <= before[0])
    check(before[2] == 429 and gap >= 1.9, 'a pause of %.2f s (>= the Retry-After, less what was in flight) after '
          'a 429' % gap)
    check(refused_before <= 25, 'it began after %d refusals (a block is seen within 250 ms at 50/s)' % refused_before)
    check(sum(1 for r in rows if r[0] > before[0] + gap - 0.01 and r[2] == 200) >= 20, 'the client went on after it')
    check(field(out, r'Retry-After: (\d+) pauses') >= 1, 'the pause is counted')


def api_client_garbage():
    # Garbage RateLimit / RateLimit-Policy on every response, and two 429s whose
    # Retry-After is garbage too: the client ignores the fields, and a Retry-After it cannot
    # read is no pause (nor counted as one): the pace alone answers the refusal.
    port, log = start_standin('--rate', '1000/s', '--burst', '1000', '--garbage', '--force-429', '10,40')
    out = run([API_CLIENT, '--url', 'http://127.0.0.1:%d/api/items' % port, '--rate', '100/s', '--requests', '60',
               '--concurrency', '4']).stdout
    rows = read_log(log)
    check(len(rows) == 60, 'the server saw all 60 requests (%d)' % len(rows))
    check(field(out, r'sent: (\d+)') == 60, 'the client sent 60')
    check(re.search(r'Retry-After: 0 pauses, for the 2 refusals that carried one \(2 malformed, ignored\)', out)
          is not None, 'no pause claimed for the two unusable Retry-After fields')
    check(field(out, r'malformed RateLimit fields ignored: (\d+)') >= 60, 'the garbage RateLimit fields were ignored')
    check("following the server's RateLimit fields" not in out, 'the garbage fields did not set the pace')
    for r in (r for r in rows if r[2] == 429):
        went_on = [x for x in rows if r[1] < x[0] < r[1] + 0.5]
        check(len(went_on) >= 1, 'no pause after a 429 with an unusable Retry-After (%d arrivals in the next 0.5 s)'
              % len(went_on))

    # No RateLimit fields and no refusal: the client keeps to --rate (it used to climb to 10x).
    port2, log2 = start_standin('--rate', '1000/s', '--burst', '1000', '--no-headers')
    run([API_CLIENT, '--url', 'http://127.0.0.1:%d/api/items' % port2, '--rate', '50/s', '--seconds', '2', '--quiet'])
    rows = read_log(log2)
    span = rows[-1][0] - rows[0][0]
    check(len(rows) <= 50 * span + 2, 'nothing announced: %d requests in %.2f s, never above --rate 50/s'
          % (len(rows), span))

    # Nobody listening: every request fails, and the exit code says so.
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        closed = s.getsockname()[1]
    res = run([API_CLIENT, '--url', 'http://127.0.0.1:%d/api' % closed, '--requests', '3', '--quiet'], expect_rc=1)
    check('every request failed' in res.stderr, 'every request failed: exit 1, said on stderr')

    # --spawn-server, with the stand-in as the server binary: one command, the server gone after.
    res = run([API_CLIENT, '--spawn-server', '--server-bin', STANDIN, '--server-rate', '1000/s', '--server-burst',
               '1000', '--requests', '20', '--rate', '200/s', '--quiet'])
    check(field(res.stdout, r'status 200: (\d+)') == 20, '--spawn-server: 20 answered')
    pid = int(field(res.stderr, r'\(pid (\d+)\)'))
    try:
        os.kill(pid, 0)
        alive = True
    except ProcessLookupError:
        alive = False
    check(not alive, '--spawn-server: the server (pid %d) was stopped' % pid)

    for args, message in [
        (['--rate', 'fast'], 'a rate such as 100/s'),
        (['--url', 'http://10.1.2.3:80/api'], 'loopback'),
        (['--url', 'http://127.0.0.1/api'], 'port'),
        (['--url', 'http://127.0.0.1:99999/api'], 'bad port'),
        (['--concurrency', 'x'], 'not a valid number'),
        (['--redis', '10.1.2.3:6379'], ('loopback', 'not built with Redis support')),
        (['--redis-key', 'k'], 'needs --redis'),
        (['--spawn-server', '--server-bin', '/nonexistent/server'], 'cannot execute'),
    ]:
        cmd = [API_CLIENT, '--url', 'http://127.0.0.1:%d/api' % port] + args
        res = run(cmd, expect_rc=None)
        expected = message if isinstance(message, tuple) else (message,)
        check(res.returncode in (1, 2) and any(m in res.stderr for m in expected),
              'api_client %s: exit %d with "%s"' % (' '.join(args), res.returncode, message))


# ---- loadgen ------------------------------------------------------------------------------

def loadgen_exact_count():
    # Open loop: 200/s for 2 s is exactly 400 requests at the server, spaced 5 ms, so the
    # first and last arrive 1.995 s apart.
    port, log = start_standin('--rate', '100000/s', '--burst', '100000')
    csv = os.path.join(tmp, 'run.csv')
    png = os.path.join(tmp, 'run.png')
    out = run([LOADGEN, '--url', 'http://127.0.0.1:%d/api/items' % port, '--rate', '200', '--seconds', '2',
               '--connections', '4', '--csv', csv, '--plot', png]).stdout
    rows = read_log(log)
    check(len(rows) == 400, 'the server counted exactly 400 requests (%d)' % len(rows))
    span = rows[-1][0] - rows[0][0]
    check(1.9 <= span <= 2.1, 'they arrived over %.3f s (1.995 s on schedule)' % span)
    check(re.search(r'sent: 400  completed: 400  errors: 0', out) is not None, 'loadgen reports 400 sent, no error')
    # Every request's latency from its intended time is at least its service time, so
    # every percentile is too (an intended time after the actual send would break this).
    lat = re.search(r'latency \(from intended send time\):\s+p50=(\S+) p90=(\S+) p99=(\S+)', out)
    svc = re.search(r'service time \(from actual send\):\s+p50=(\S+) p90=(\S+) p99=(\S+)', out)
    check(all(float(lat.group(i)) >= float(svc.group(i)) for i in (1, 2, 3)),
          'latency from the intended time >= service time at p50, p90, p99')
    with open(csv) as f:
        lines = f.read().splitlines()
    check(lines[0] == 'second,sent,completed,errors,achieved_rate,p50_ms,p99_ms', 'CSV header')
    check(len(lines) - 1 >= 2, 'CSV has %d rows, one per second' % (len(lines) - 1))
    check(sum(int(l.split(',')[2]) for l in lines[1:]) == 400, 'the CSV rows add up to 400 completed')
    if shutil.which('gnuplot'):
        with open(png, 'rb') as f:
            check(f.read(8) == b'\x89PNG\r\n\x1a\n', 'gnuplot drew a PNG')
    # Without gnuplot on the PATH: a clear message, and the load run still succeeds.
    res = run([LOADGEN, '--url', 'http://127.0.0.1:%d/api/items' % port, '--rate', '50', '--seconds', '0.2',
               '--quiet', '--plot', os.path.join(tmp, 'none.png')], env={'PATH': '/nonexistent'})
    check('gnuplot not found' in res.stderr, 'missing gnuplot: a clear message, exit code 0')

    for args, message in [
        (['--rate', '0'], 'rate'),
        (['--seconds', '-1'], 'must be positive'),
        (['--url', 'http://192.168.0.1:80/'], 'loopback'),
    ]:
        res = run([LOADGEN, '--url', 'http://127.0.0.1:%d/api' % port] + args, expect_rc=None)
        check(res.returncode == 2 and message in res.stderr,
              'loadgen %s: exit %d with "%s"' % (' '.join(args), res.returncode, message))


def loadgen_coordinated_omission():
    # The 200th request stalls the whole server for 300 ms. Two connections, no more: the
    # ~60 requests due during the stall queue in loadgen. Measured from their intended
    # send times their latencies fall from 300 ms to 0 in 5 ms steps, so about 40 of the
    # 400 exceed 100 ms (p90 ~ 105 ms) and 4 exceed 280 ms (p99 ~ 285 ms). Measured from
    # the actual send (what coordinated omission reports) only the 2 requests caught on
    # the connections see the stall: p99 stays small.
    port, log = start_standin('--rate', '100000/s', '--burst', '100000', '--stall-at', '200', '--stall-ms', '300')
    out = run([LOADGEN, '--url', 'http://127.0.0.1:%d/api/items' % port, '--rate', '200', '--seconds', '2',
               '--connections', '2', '--max-connections', '2']).stdout
    check(len(read_log(log)) == 400, 'the server counted exactly 400 requests')
    lat = r'latency \(from intended send time\):\s+p50=\S+ p90=(\S+) p99=(\S+) p99.9=\S+ max=(\S+) ms'
    svc = r'service time \(from actual send\):\s+p50=\S+ p90=\S+ p99=(\S+) p99.9=\S+ max=(\S+) ms'
    m = re.search(lat, out)
    if not m or not re.search(svc, out):
        raise AssertionError('no latency lines in the output')
    p90, p99, mx = float(m.group(1)), float(m.group(2)), float(m.group(3))
    s = re.search(svc, out)
    s99 = float(s.group(1))
    check(280 <= mx <= 1500, 'max latency %.1f ms reflects the 300 ms stall' % mx)
    check(p99 >= 200, 'p99 %.1f ms >= 200 ms: the requests scheduled during the stall count' % p99)
    check(p90 >= 50, 'p90 %.1f ms >= 50 ms (about 105 ms expected)' % p90)
    check(s99 < p99 / 2, 'service-time p99 %.1f ms hides the stall (what CO correction fixes)' % s99)
    check(field(out, r'(\d+) requests queued at most') >= 30, 'requests queued while both connections stalled')


CASES = {f.__name__: f for f in [api_client_converges, api_client_retry_after, api_client_garbage,
                                 loadgen_exact_count, loadgen_coordinated_omission]}

if __name__ == '__main__':
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(50)
    status = 1
    try:
        CASES[CASE]()
        status = 0
    except (AssertionError, Timeout, subprocess.TimeoutExpired) as e:
        print('FAIL:', e)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(status)
