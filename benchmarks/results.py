#!/usr/bin/env python3
"""Writes benchmarks/RESULTS.md, the one page of sluice's figures, whole, from one run.

One command, from the repository root, on a machine doing nothing else:

    python3 benchmarks/results.py

It configures a release build (build-rel: --buildtype=release, tests and benchmarks, the
examples when their dependencies are installed) when there is none, builds what the run
needs (sluice-bench, the two simulation tests, the example programs), then runs sluice-bench, its floors and the peer programs
interleaved (each round runs every job once, one after the other, then the next round;
--rounds, 3 by default), the two simulations and the example programs against nginx once,
and plot.py. Every JSON line is kept in a raw file (benchmarks/results.jsonl: each line with
its job and round, after one line that names the machine and the run) and RESULTS.md is
written from that file: tables of min-max over the rounds, each under the text that says
what it measures and over a caption naming its floor and peers. The page's top names the
machine (CPU model, cores, kernel, clocksource), the compiler and build type, the git
commit, the dates, the rounds and the load average at the start and the end. Nothing else
writes RESULTS.md, and nothing is ever merged into it from another run: change the text
here, and run again.

    python3 benchmarks/results.py [--rounds 3] [--build build-rel] [--peers ../shared/peers]
    python3 benchmarks/results.py --quick --only try,pace --page /tmp/results.md   # a smoke run
    python3 benchmarks/results.py --before OLD/sluice-bench --only try             # A/B check
    python3 benchmarks/results.py --from benchmarks/results.jsonl                 # the page again

--quick: small counts and one round, to check the script in minutes. --only SECTION,...: those
sections alone. Either needs --page FILE (never RESULTS.md), and keeps the raw lines beside
it. --before BENCH: each sluice job also runs with an older sluice-bench, just before the same
job with this one, and the before/after table of medians is printed (and written to
--compare FILE): a check that nothing got slower, never written into RESULTS.md (a page only
with --page). --from FILE
runs nothing: it writes the page again from a raw file (RESULTS.md only from a complete run's).
--bench PATH uses that sluice-bench and builds nothing. A peer whose program is missing, or a
section whose tool is (redis-server, nginx, python3-matplotlib), shows as "not run" and is
named at the top of the page."""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS_MD = os.path.join(ROOT, "benchmarks", "RESULTS.md")
SECTIONS = ("try", "policies", "fanout", "pace", "keyed", "shared", "shm", "bandwidth", "simulation", "examples", "plots")
MIN_ROUNDS = 3   # RESULTS.md is never written from fewer

# ------------------------------------------------------------------------------------------
# The page's text: what each table measures. Figures come only from the raw lines.

INTRO = """\
# sluice benchmark results

Every figure of sluice's documentation, in one place. `sluice-bench` (benchmarks/, protocol
v1) runs beside its floors (what the same work costs with no limiter, or with the least one)
and the peer programs that implement the same scenarios with Go's golang.org/x/time/rate,
Guava, bottleneck, rate-limiter-flexible and limits (`peers/<peer>/run`: a companion set of
programs, not part of this repository), interleaved, in the same rounds on the same machine.
Each cell is min-max over the rounds; under each table a caption names its floor and its
peers, or says why there is none.

This page is written whole by one run of `benchmarks/results.py` (do not edit it by hand:
change the script). To measure again, from the repository root, on a machine doing nothing
else:

    python3 benchmarks/results.py

It configures and builds a release tree (`build-rel`) when needed; `--rounds N` sets the
rounds (3 by default, the fewest this page is written from)."""

TRY_TEXT = """\
`--scenario try`: T threads make `--ops` non-blocking checks on one shared limiter, admitting
(a bucket that never runs dry) or rejecting (1,000/s, burst 1: almost every check refused).
ns per check is the run's wall time over the checks, so with two threads it is half of what
one check costs a thread, as in the peers. The first column is what a user runs: the public
`try_acquire()` of a `sluice::token_bucket<>` on the default clock (`sluice::default_clock`),
reading the decision's `remaining` and `reset_after` as a server answering with RateLimit
fields does. The one-word floor (`--policy floor`) is a bare compare-and-swap loop on one
`std::atomic<int64_t>` with the same clock and constants: the least a limiter whose state is
one shared word can cost a check. `policy::gcra` alone (`--policy gcra`) is the policy without
the limiter around it, reading only `admitted`. Reading the clock is part of every check, so
the other clocks are columns too: `std::chrono::steady_clock` (named as the `Clock`) and
`sluice::coarse_clock` (`CLOCK_MONOTONIC_COARSE`, one kernel tick of resolution). The last
row is one read of each clock alone: 2 million reads on one thread, measured by the process
just before its run. The Node peers make 2,000,000 checks a run."""

TRY_CAPTION = """\
*Floor: the one-word floor on each clock, and one clock read. Peers: Go's x/time/rate
(`Allow`), Guava (`tryAcquire`), limiter (npm, `tryRemoveTokens`; one JS thread, so no
two-thread rows) and rate-limiter-flexible (`RateLimiterMemory.consume`, T async callers on
one event loop).*"""

TICKET_CAPTION = """\
*`try_admit(1)`: the check with a ticket, dropped unsettled (kept at its cost). `try_admit(2)`,
`settle(t, 1)`: a ticket settled one lower, under the limiter's lock; rejecting (burst 1), it
asks 1 and settles 1 when admitted. `peek(1)`: what the check would answer, nothing taken.*"""

POLICIES_TEXT = """\
`--scenario try --policy all`: the same checks on each limiter's policy, in one run. Admitting:
`gcra` at 10^9/s with a burst of 10^9; `leaky` at 10^9/s, burst 1, 1 s of slack; the windows
with the largest limit each allows and windows short enough that it is never hit;
`sliding_log` 65,536 per 100 us; `all_of` is `gcra` and `fixed_window` together. Rejecting:
1,000/s with burst 1, or 1 per 1 ms window."""

POLICIES_CAPTION = """\
*Floor: the one-word floor and the clock read alone (the last two rows). No peer: no peer
library offers these policies side by side; the try table has the peers' token buckets.*"""

FANOUT_TEXT = """\
`--scenario fanout`: W waiters on one leaky bucket (burst 1, slack 0) at 100,000/s, one
thread: coroutines (`co_spawn`, each awaiting `async_acquire`) or callbacks. Rate error is the
wall time to the last grant against W / rate (+ is faster than the rate allows); CPU per
acquire is the process's CPU over that time divided by W. Both are counted from before the
first waiter is spawned, as Go's are (its wall and CPU run from before its goroutines start);
the "after the spawn" rows count sluice's from the start gate, once every coroutine is
parked (callbacks have nothing to spawn: both rows agree). A coroutine run's rate error may
carry a stall near its end, when glibc gives back to the system the heap that the last
frames and operations freed (the run is measured with glibc's defaults). The last two
columns set `limiter_options::coalesce` to 1 ms instead of its default 200 us
(`--coalesce-us 1000`): fewer timer wake-ups, each releasing more waiters."""

FANOUT_CAPTION = """\
*Floors: the one-timer queue (`--policy queue`: each waiter's handler parked in a FIFO and
resumed in order from one timer that wakes at most every 200 us, with no limiter arithmetic,
lock or cancellation: the least a one-timer engine can cost a waiter on Asio) and Asio alone
(`--policy floor`: a steady_timer of its own for each waiter, set to its slot). Peer: Go's
x/time/rate (a goroutine a waiter). Not run at this size: Guava (a thread a waiter, capped at
2,000), bottleneck and rate-limiter-flexible (their timers cannot grant more than one permit a
millisecond).*"""

PACE_TEXT = """\
`--scenario pace`: one waiter acquires `--n` times in a row with burst 1 at the rate given,
in the default mode (coalesced wake-ups, 1 ms of slack), with a 5 ms slack (`--slack-us
5000`) and in strict mode (`--strict`). Achieved: grants per second over the run. Gap error:
the relative error of each gap between two grants against 1 / rate, its median. A stall of
the process longer than the slack starts a new schedule (a policy cannot tell a stalled
caller from one back from idleness), so a machine that stalls shows in the achieved rate of
the default mode. The Node peers make 2,000 acquires a run."""

PACE_CAPTION = """\
*Floor: Asio alone (`--policy floor`: one steady_timer awaited to each slot of the schedule,
no limiter, no slack). Peers: Go's x/time/rate (`Wait`), Guava (`acquire`), bottleneck
(`minTime`) and rate-limiter-flexible (`RateLimiterQueue`).*"""

KEYED_TEXT = """\
`--scenario keyed`: one thread makes non-blocking checks on one `keyed<token_bucket<>, Key>`
over K keys drawn uniformly, admitting (no key goes idle, so every check is a look-up, a
decision and a clock read). Each check makes its key from its index, as a server has it
(just parsed, in cache). Key types: `string` ("client-123456", looked up as a
`std::string_view`), `u64` (`std::uint64_t`), IPv4 (`boost::asio::ip::address_v4`), IPv6
(`unsigned __int128`). DRAM misses per check: ns per check over the pointer chase. Bytes per
key: the resident memory after filling the store, less before, over K. New key: the cost of
inserting one (the fill, timed apart). Two threads: the aggregate ns per check."""

KEYED_CAPTION = """\
*Floors: the run's own pointer chase over 128 MB (one dependent DRAM miss, the least a check
of a table larger than the caches costs) and the textbook store (`--policy naive`: one
`std::mutex` around a `std::unordered_map<Key, unique_ptr<gcra>>`, no eviction, no cap). No
peer: no peer library has a keyed scenario.*"""

SHARED_TEXT = """\
`--scenario shared`: P processes x C concurrent callers make non-blocking attempts for D
seconds against ONE `redis::token_bucket` of Q/s with burst 1, on a redis-server the benchmark
starts on 127.0.0.1 and stops by pid. Exact: one script call (EVALSHA) per decision,
pipelined on one connection a process. `--lease N`: each process reserves runs of up to N
future slots and hands them out locally. The server's own bound: redis-benchmark runs the
token bucket's script by EVALSHA with the same 128 commands in flight (`-c 4 -P 32`) on a
redis-server of its own."""

SHARED_CAPTION = """\
*Floor: redis-benchmark, the server alone running the GCRA script. Peers:
rate-limiter-flexible (`RateLimiterRedis`, ioredis) and limits (`MovingWindowRateLimiter`,
redis-py), whose windows are whole seconds: burst Q, not 1.*"""

FLEET_TEXT = """\
The fleet: one quota shared by P processes x 32 callers, burst 1, at the rates fleets have.
Tries with leases of up to 64 slots; waiting callers (`--mode acquire`, `async_acquire` with
a max_wait of 1 s) on the token bucket and on `redis::sliding_window` (its waiters queue in
Redis). Admitted is a share of what the quota allows over the run; shares are each process's
admissions against an equal share."""

FLEET_CAPTION = """\
*Floor: what the quota allows (admitted is a share of it), and the next table's one script
call a decision for the decisions a second. Peers: rate-limiter-flexible and limits, trying
(their 1 s windows of Q allow a burst of Q; neither has waiting callers nor per-process
shares).*"""

WINDOW_TEXT = """\
Decisions one Redis makes a second for one key, every caller trying (`--mode try`) at a rate
the fleet cannot reach (never refused for the rate): `redis::sliding_window` (limit Q/10 per
100 ms) sends the tries of one key that come while its previous call is in flight as one
batched script call, one call per key in flight a process; `redis::token_bucket` (burst 1)
sends one call a try. The round trip is the median of the processes' last ones."""

WINDOW_CAPTION = """\
*Floor: one script call a decision (`--limiter floor`: the window's keys and arguments to a
script of the scripts' shared prelude and one SET), the least an unbatched decision costs on
this path. Peers: rate-limiter-flexible and limits, one command a decision.*"""

WAIT_TEXT = """\
`--scenario shared --mode wait`: each request reserves its slot in Redis (pipelined round
trips) and waits locally until it; the key's first seconds are reserved ahead, so all wait at
once, then wake at 100,000/s. Heap: the heap in use when the last reservation is in, over the
requests then waiting; resident: the same with the process's RSS (which keeps what the round
trips left in the allocator); CPU per request: the whole run; CPU per wait: from the last
reply on (the waits alone)."""

WAIT_CAPTION = """\
*Floor: the fanout table's Asio alone and one-timer queue, the least a local wait costs. No
peer: no peer library reserves a slot in Redis and waits for it.*"""

SHM_TEXT = """\
`--scenario try --backend shm`: the token bucket on a shared-memory segment
(`shm::token_bucket<>`, the default clock), its `try_acquire(1)` read as the try section reads
it, beside the in-process `token_bucket<>` in the same run, both through the same closure and
timed in alternating blocks (10 each). One process: T threads on each. Two processes: two
forked processes (each its own limiter on the one segment) against two threads on one
in-process limiter; ns per check is the wall time over all checks. Ratio: shm over
in-process, line by line of the same round (goal: within 1.15). The last row names
`std::chrono::steady_clock` as both limiters' Clock: what the shared bucket would cost on the
clock that every process reads exactly alike."""

SHM_CAPTION = """\
*Floor: the one-word floor of the try section with the same threads (two threads for the
two-process rows) and clock. No peer: no peer library shares a bucket between processes
without a server.*"""

SHM_KEYED_TEXT = """\
`--scenario keyed --backend shm`: the keyed scenario (one thread, uniform keys, admitting)
on `shm::keyed_bucket<>`, one table of 1,000,000 keys in a shared-memory segment, beside the
in-process `keyed<token_bucket<>>` of the same size in the same process and round. Ratio:
shm over in-process, round by round (goal: within 1.5). u64 keys: a table of integer keys
(`table_options::integer_keys`, 32-byte slots), as the in-process u64 store holds u64 keys
only. Bytes per key: resident memory after filling, over the keys (the table's slots are
fixed: two a key of its cap)."""

SHM_KEYED_CAPTION = """\
*Floor: the run's pointer chase (one dependent DRAM miss). No peer: no peer library keeps a
table of buckets in shared memory.*"""

SHM_FLEET_TEXT = """\
`--scenario shared --backend shm`: the fleet of the Redis section (P processes x 32 callers,
burst 1, the same JSON keys) on one `shm::token_bucket` in a shared-memory segment: no server.
Try: `async_try_acquire` in a loop, each caller's next attempt as soon as the last one
completes (the Redis fleet's loop); acquire: `async_acquire` with a max_wait of 1 s (slots
reserved in the shared word, in order across processes). Fleet CPU: the processes' CPU time
over the run, in cores: with burst 1 a permit nobody asks for at its instant is lost, so a
trying fleet admits no more than the share of the time one of its processes is on a CPU to
ask."""

SHM_FLEET_CAPTION = """\
*Floor: the same processes each reading the clock and compare-and-swapping one shared word
(GCRA, burst 1) in a bare loop, no Asio, no limiter (`--limiter floor`): what burst 1 lets any
design's tries admit on this machine. No peer: no peer library shares a bucket between
processes without a server.*"""

BANDWIDTH_TEXT = """\
`--scenario bandwidth`: loopback TCP connections, each sending side a `throttled_stream`
whose writes pass one token bucket shared by all (burst 64 KiB). The error over the cap is
the bucket's burst spread over the run (B / D of the rate); shares are each connection's
bytes against an equal share; CPU per MB counts both ends."""

BANDWIDTH_CAPTION = """\
*Floor: the cap itself (achieved and the error are against it). No peer: no peer library
shapes a stream's bytes.*"""

SIM_RATE_TEXT = """\
`tests/test_adaptive_rate.cpp`, a discrete-event simulation on manual time (deterministic: one
run): a client sends evenly at the rate of `sluice::adaptive_rate_controller` and pauses when
told; each simulated server answers with the fields a real one would send, written and read
by `sluice::http`. Measured after convergence. Quota used: the admitted requests over what the
server would grant in that time (a burst can lift it a little above 100 %). The test asserts
at most 1 % refused and at least 95 % of the quota used against servers that send the
fields, and at most 1 % refused against servers that send only refusals (AIMD)."""

SIM_RATE_CAPTION = """\
*Floor: the server's quota (100 % used, none refused). No peer: the peers have no adaptive
client; the examples section runs the API client against nginx.*"""

SIM_CONC_TEXT = """\
`tests/test_adaptive_concurrency.cpp`: a closed loop against a server whose latency is flat up
to a knee and grows with the load above it; the knee moves 100, 200, 50, 400, each phase long
enough to settle, the last third measured. Each cell: the limit's range (mean). AIMD is told
that 1.2 times the base latency is too slow; Vegas needs no threshold."""

SIM_CONC_CAPTION = """\
*Floor: the knee itself (the column's heading). No peer: Netflix's concurrency-limits, whose
algorithms these follow, is a Java library with no program in the peers.*"""

EXAMPLES_TEXT = """\
`benchmarks/examples_vs_nginx.py`, once: the example programs against nginx (Debian's
nginx-light) on 127.0.0.1, each run with an nginx of its own, counted from nginx's access log
(issues 26 and 41). Crawler: a static site of 300 pages (relative, quoted and upper-case
links, a robots.txt, a redirect, a 20 MB file) behind `limit_req rate=20r/s` with burst 0, 5
and 20, each with and without `nodelay` (without, nginx delays what exceeds the rate within
the burst), refusing with 429 and `Retry-After: 1` or with nginx's 503 alone; the crawler's
`--per-host-rate` at 15, 40 and 100/s; the ideal time is pages / min(pace, 20) per second,
the goal within 15 % of it. API client: `limit_req rate=50r/s burst=B nodelay` (B = 1, 10,
50), 429 with or without `Retry-After: 1`, 20 s runs started at 25, 50 and 100/s with
`--max-rate 200/s` (and one at 100/s with the default `--max-rate`, 100/s), the rate admitted
and the requests refused from 3 s after the first refusal; the goal >= 95 % of 50/s and <= 1 %
refused. A slowing host: the crawler at 100/s, 16 in flight at most, against
`examples/tests/slow_host.py` (never refuses; latency 50 ms x (1 + (in flight - 1) / 4), so
twice the unloaded 50 ms at 5 in flight, 50/s), with the in-flight cap following latency (the
default) and fixed at 16; the goal within 15 % of 50/s with the host's p99 latency at most
100 ms.
Server: 2,000 idle connections under `ulimit -n 1024`, a request every 100 ms for 5 s while they
are held; the goal answers within 10 ms at < 5 % CPU, and the RSS within 10 % of its start once
they are gone."""

EXAMPLES_CAPTION = """\
*Floor: the ideal time and rate (the crawler's ideal column, the API client's 50/s, the slowing
host's 50/s at twice its unloaded latency). Peer:
nginx itself, the server the clients meet and whose `limit_req` the server's limit follows.*"""

PLOTS_TEXT = """\
Drawn by `benchmarks/plot.py` (python3-matplotlib) in this run, from runs of its own whose
JSON lines it keeps in `plots/plots.jsonl`.

![pacing: each grant's lateness against its slot, default and strict](plots/pace.svg)

![fanout: admitted per 10 ms for 100,000 waiters, sluice, Asio's floor and Go](plots/fanout.svg)

![keyed: ns per check against the number of keys](plots/keyed.svg)

![shared: each process's admissions per second on one Redis quota](plots/shared.svg)

![bandwidth: 100 connections sharing 50 MB/s](plots/bandwidth.svg)"""

# ------------------------------------------------------------------------------------------
# The jobs of one round.

TRY_ROWS = (("t1 admitting", "1", "true"), ("t1 rejecting", "1", "false"),
            ("t2 admitting", "2", "true"), ("t2 rejecting", "2", "false"))
TRY_COLS = (("sluice", "sluice `token_bucket<>::try_acquire`"), ("floor", "one-word floor"),
            ("sluice policy", "`policy::gcra` alone"), ("sluice steady", "sluice, steady_clock"),
            ("floor steady", "floor, steady_clock"), ("sluice coarse", "sluice, coarse_clock"),
            ("go", "Go x/time/rate"), ("guava", "Guava"), ("bottleneck", "limiter (npm)"),
            ("rlflex", "rate-limiter-flexible"))
TICKET_COLS = (("sluice", "`try_acquire(1)`"), ("sluice admit", "`try_admit(1)`"),
               ("sluice settle", "`try_admit(2)`, `settle(t, 1)`"), ("sluice peek", "`peek(1)`"),
               ("floor", "one-word floor"))
POLICIES = (("gcra", "token_bucket (`gcra`)"), ("leaky", "leaky_bucket (`gcra`, burst 1)"),
            ("fixed_window", "fixed_window (`fixed_counter`)"), ("sliding_log", "sliding_window (`sliding_log`)"),
            ("sliding_window_counter", "sliding_window_counter (`weighted_counter`)"),
            ("all_of", "all_of<gcra, fixed_counter>"), ("floor", "one-word floor"), ("clock", "the clock read alone"))
FANOUT_COLS = (("sluice coroutine", "sluice coroutines"), ("sluice callback", "sluice callbacks"),
               ("queue coroutine", "one-timer queue, coroutines"), ("queue callback", "one-timer queue, callbacks"),
               ("asio floor", "Asio alone (a timer a waiter)"), ("go", "Go"),
               ("sluice coroutine 1ms", "sluice coroutines, coalesce 1 ms"),
               ("sluice callback 1ms", "sluice callbacks, coalesce 1 ms"))
PACE_RATES = ("100000", "10000", "1000")
PACE_COLS = (("sluice", "sluice"), ("sluice slack 5ms", "sluice, 5 ms slack"), ("sluice strict", "sluice strict"),
             ("floor", "Asio alone (a timer to each slot)"), ("go", "Go"), ("guava", "Guava"),
             ("bottleneck", "bottleneck"), ("rlflex", "rate-limiter-flexible"))
SHARED_ROWS = (("exact", "sluice, exact"), ("lease 8", "sluice, lease 8"), ("rlflex", "rate-limiter-flexible"),
               ("limits", "limits"))
SHM_ROWS = (("t1 admitting", ["--threads", "1", "--admitting=true"], ["--threads", "1", "--admitting=true"]),
            ("t1 rejecting", ["--threads", "1", "--admitting=false"], ["--threads", "1", "--admitting=false"]),
            ("2 processes admitting", ["--procs", "2", "--admitting=true"], ["--threads", "2", "--admitting=true"]),
            ("2 processes rejecting", ["--procs", "2", "--admitting=false"], ["--threads", "2", "--admitting=false"]),
            ("t1 rejecting, steady_clock", ["--threads", "1", "--admitting=false", "--clock", "steady"],
             ["--threads", "1", "--admitting=false", "--clock", "steady"]))
SHM_FLEET = (("try", []), ("floor: clock + CAS, bare loop", ["--limiter", "floor"]), ("acquire", ["--mode", "acquire"]))
SHM_KEYED = (("1,000,000 string keys", ["--key", "string"]), ("1,000,000 u64 keys", ["--key", "u64"]))
FLEET_RATES = ("1000", "10000", "100000")
FLEET_COLS = ("sluice try, lease 64", "sluice acquire, bucket", "sluice acquire, window", "rate-limiter-flexible", "limits")
WINDOW_ROWS = (("sluice window", ["--limiter", "window"]), ("sluice bucket", ["--limiter", "bucket"]),
               ("floor: one script call a decision", ["--limiter", "floor"]), ("rate-limiter-flexible", None),
               ("limits", None))


def peer(peers, name):
    return os.path.join(peers, name, "run")


def plan(a, B, peers):
    """[(section, job, cmd)] of one round; cmd None for redis-benchmark (run by redis_benchmark())."""
    quick = a.quick
    go, guava = peer(peers, "go"), peer(peers, "java-guava")
    bottleneck, rlflex, limits = peer(peers, "node-bottleneck"), peer(peers, "node-rlflex"), peer(peers, "python-limits")
    ops = "1000000" if quick else "10000000"
    node_ops = "200000" if quick else "2000000"
    waiters = "10000" if quick else "100000"
    keyed_ops = "200000" if quick else "2000000"
    jobs = []
    for row, t, adm in TRY_ROWS:
        args = ["--scenario", "try", "--threads", t, "--ops", ops, "--admitting=" + adm]
        node = ["--scenario", "try", "--threads", t, "--ops", node_ops, "--admitting=" + adm]
        jobs += [("try", "try/%s/sluice" % row, [B] + args),
                 ("try", "try/%s/floor" % row, [B] + args + ["--policy", "floor"]),
                 ("try", "try/%s/sluice policy" % row, [B] + args + ["--policy", "gcra"]),
                 ("try", "try/%s/sluice steady" % row, [B] + args + ["--clock", "steady"]),
                 ("try", "try/%s/floor steady" % row, [B] + args + ["--policy", "floor", "--clock", "steady"]),
                 ("try", "try/%s/sluice coarse" % row, [B] + args + ["--clock", "coarse"]),
                 ("try", "try/%s/sluice admit" % row, [B] + args + ["--policy", "admit"]),
                 ("try", "try/%s/sluice settle" % row, [B] + args + ["--policy", "settle"]),
                 ("try", "try/%s/sluice peek" % row, [B] + args + ["--policy", "peek"]),
                 ("try", "try/%s/go" % row, [go] + args),
                 ("try", "try/%s/guava" % row, [guava] + args),
                 ("try", "try/%s/bottleneck" % row, [bottleneck] + node),
                 ("try", "try/%s/rlflex" % row, [rlflex] + node)]
        jobs.append(("policies", "policies/%s" % row, [B] + args + ["--policy", "all"]))
    fan = [B, "--scenario", "fanout", "--waiters", waiters, "--rate", "100000"]
    for col, cmd in (("sluice coroutine", fan), ("sluice callback", fan + ["--waiter", "callback"]),
                     ("queue coroutine", fan + ["--policy", "queue"]),
                     ("queue callback", fan + ["--policy", "queue", "--waiter", "callback"]),
                     ("asio floor", fan + ["--policy", "floor"]), ("go", [go] + fan[1:]),
                     ("sluice coroutine 1ms", fan + ["--coalesce-us", "1000"]),
                     ("sluice callback 1ms", fan + ["--waiter", "callback", "--coalesce-us", "1000"])):
        jobs.append(("fanout", "fanout/" + col, cmd))
    for rate in PACE_RATES:
        n = ("500" if rate == "1000" else "2000") if quick else ("5000" if rate == "1000" else "20000")
        args = ["--scenario", "pace", "--rate", rate, "--n", n]
        node = ["--scenario", "pace", "--rate", rate, "--n", "500" if quick else "2000"]
        jobs += [("pace", "pace/%s/sluice" % rate, [B] + args),
                 ("pace", "pace/%s/sluice slack 5ms" % rate, [B] + args + ["--slack-us", "5000"]),
                 ("pace", "pace/%s/sluice strict" % rate, [B] + args + ["--strict"]),
                 ("pace", "pace/%s/floor" % rate, [B] + args + ["--policy", "floor"]),
                 ("pace", "pace/%s/go" % rate, [go] + args),
                 ("pace", "pace/%s/guava" % rate, [guava] + args),
                 ("pace", "pace/%s/bottleneck" % rate, [bottleneck] + node),
                 ("pace", "pace/%s/rlflex" % rate, [rlflex] + node)]
    for keys in ("1000", "1000000"):
        args = [B, "--scenario", "keyed", "--keys", keys, "--dist", "uniform", "--ops", keyed_ops]
        jobs += [("keyed", "keyed/%s/string" % keys, args), ("keyed", "keyed/%s/naive" % keys, args + ["--policy", "naive"])]
    args = [B, "--scenario", "keyed", "--keys", "1000000", "--dist", "uniform", "--ops", keyed_ops]
    for key in ("u64", "ipv4", "ipv6"):
        jobs.append(("keyed", "keyed/1000000/" + key, args + ["--key", key]))
    for key in ("string", "u64"):
        jobs.append(("keyed", "keyed/1000000/%s t2" % key, args + ["--key", key, "--threads", "2"]))
    procs = "2" if quick else "4"
    base = ["--scenario", "shared", "--procs", procs, "--concurrency", "32", "--rate", "1000",
            "--seconds", "1" if quick else "3", "--port", "6397"]
    jobs += [("shared", "shared/exact", [B] + base), ("shared", "shared/lease 8", [B] + base + ["--lease", "8"]),
             ("shared", "shared/rlflex", [rlflex] + base), ("shared", "shared/limits", [limits] + base),
             ("shared", "redis-benchmark", None)]
    secs = "1" if quick else "5"
    for rate in FLEET_RATES:
        base = ["--scenario", "shared", "--procs", procs, "--concurrency", "32", "--rate", rate,
                "--seconds", secs, "--port", "6398"]
        for col, cmd in (("sluice try, lease 64", [B] + base + ["--lease", "64"]),
                         ("sluice acquire, bucket", [B] + base + ["--mode", "acquire"]),
                         ("sluice acquire, window", [B] + base + ["--mode", "acquire", "--limiter", "window"]),
                         ("rate-limiter-flexible", [rlflex] + base), ("limits", [limits] + base)):
            jobs.append(("shared", "fleet/%s/%s" % (rate, col), cmd))
    base = ["--scenario", "shared", "--procs", procs, "--concurrency", "32", "--rate", "200000", "--seconds", secs,
            "--port", "6399"]
    for row, extra in WINDOW_ROWS:
        if extra is None:
            cmd = [rlflex if row == "rate-limiter-flexible" else limits] + base
        else:
            cmd = [B] + base + ["--mode", "try"] + extra
        jobs.append(("shared", "window/" + row, cmd))
    jobs.append(("shared", "wait", [B, "--scenario", "shared", "--mode", "wait", "--waiters", waiters, "--rate", "100000",
                                    "--seconds", "5" if quick else "20", "--port", "6396"]))
    for row, extra, floor in SHM_ROWS:
        jobs.append(("shm", "shm/try/" + row, [B, "--scenario", "try", "--backend", "shm", "--ops", ops] + extra))
        jobs.append(("shm", "shm/try floor/" + row, [B, "--scenario", "try", "--policy", "floor", "--ops", ops] + floor))
    for row, extra in SHM_KEYED:
        jobs.append(("shm", "shm/keyed/" + row, [B, "--scenario", "keyed", "--backend", "shm", "--keys", "1000000",
                                                 "--dist", "uniform", "--ops", keyed_ops] + extra))
    for col, extra in SHM_FLEET:
        jobs.append(("shm", "shm/fleet/" + col, [B, "--scenario", "shared", "--backend", "shm", "--procs", procs,
                                                 "--concurrency", "32", "--rate", "100000", "--seconds", secs] + extra))
    conns = "10" if quick else "100"
    jobs.append(("bandwidth", "bandwidth", [B, "--scenario", "bandwidth", "--connections", conns, "--rate", "50MB/s",
                                            "--seconds", "1" if quick else "5"]))
    return jobs


# ------------------------------------------------------------------------------------------
# The machine, the build and the run.

def sh(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def machine():
    """The machine by its properties (no path or host name): cores, CPU, kernel, clocksource."""
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        with open("/sys/devices/system/clocksource/clocksource0/current_clocksource") as f:
            cs = f.read().strip()
    except OSError:
        cs = "?"
    return {"cpu": model, "cores": os.cpu_count() or 0, "kernel": "Linux " + platform.release(), "clocksource": cs}


def compiler(build):
    """The C++ compiler of a Meson build dir (its log), else the c++ on PATH."""
    log = os.path.join(build, "meson-logs", "meson-log.txt") if build else ""
    if log and os.path.exists(log):
        with open(log, errors="replace") as f:
            for line in f:
                m = re.match(r"C\+\+ compiler for the host machine: (?:ccache )?(.*)", line)
                if m:
                    v = re.search(r'"([^"]+)"', m.group(1))
                    return v.group(1) if v else m.group(1).strip()
    out = sh(["c++", "--version"]) if shutil.which("c++") else None
    return out.stdout.splitlines()[0] if out and out.stdout else "?"


def build_type(build):
    try:
        with open(os.path.join(build, "meson-info", "intro-buildoptions.json")) as f:
            opts = {o["name"]: o["value"] for o in json.load(f)}
        return "buildtype=%s, b_ndebug=%s" % (opts.get("buildtype", "?"), opts.get("b_ndebug", "?"))
    except (OSError, ValueError, TypeError):
        return "?"


def commit():
    """The git commit the run measured, "-dirty" when the tree has changes to tracked files."""
    out = sh(["git", "-C", ROOT, "describe", "--always", "--dirty", "--abbrev=12"])
    return out.stdout.strip() or "?"


def shown_path(path):
    path = os.path.abspath(path)
    return os.path.relpath(path, ROOT) if path.startswith(ROOT + os.sep) else path


def load():
    return "%.2f" % os.getloadavg()[0]


def now_utc():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")


BUILD_TARGETS = ("benchmarks/sluice-bench", "tests/test_adaptive_rate", "tests/test_adaptive_concurrency",
                 "examples/crawler", "examples/api_client", "examples/server")


def build(build_dir):
    """Configures build_dir as a release build when it is not configured, and builds the
    targets of the run that it has (an example that lacks its dependencies is left out)."""
    if not os.path.exists(os.path.join(build_dir, "meson-private", "coredata.dat")):
        print("$ meson setup %s --buildtype=release -Dtests=true -Dbenchmarks=true" % os.path.relpath(build_dir, ROOT),
              flush=True)
        subprocess.run(["meson", "setup", build_dir, "--buildtype=release", "-Dtests=true", "-Dbenchmarks=true"],
                       cwd=ROOT, check=True)
    known = set(sh(["ninja", "-C", build_dir, "-t", "targets", "all"]).stdout.split())
    targets = [t for t in BUILD_TARGETS if t + ":" in known]
    print("$ ninja -C %s %s" % (os.path.relpath(build_dir, ROOT), " ".join(targets)), flush=True)
    subprocess.run(["ninja", "-C", build_dir] + targets, check=True)


class Runner:
    def __init__(self, bench, peers, out):
        self.bench, self.peers, self.out = bench, peers, out

    def shown(self, cmd):
        if cmd[0] == self.bench:
            return "sluice-bench " + " ".join(cmd[1:])
        if cmd[0].startswith(self.peers):
            return "peers/" + os.path.relpath(cmd[0], self.peers) + " " + " ".join(cmd[1:])
        return " ".join(os.path.relpath(c, ROOT) if c.startswith(ROOT) else c for c in cmd)

    def keep(self, j, job, round_no):
        j["job"], j["round"] = job, round_no
        self.out.write(json.dumps(j) + "\n")
        self.out.flush()

    def run(self, round_no, job, cmd, timeout=900):
        """Runs cmd once and keeps every JSON line it prints, tagged with job and round (a
        peer's "skipped" line too: the page says why the cell is empty)."""
        if not os.path.exists(cmd[0]):
            return
        print("[round %d] %s" % (round_no, self.shown(cmd)), flush=True)
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            print("  timed out")
            return
        kept = 0
        for line in p.stdout.splitlines():
            if line.startswith("{"):
                try:
                    j = json.loads(line)
                except ValueError:
                    continue
                self.keep(j, job, round_no)
                kept += 1
        if not kept:
            print("  no JSON line in its output (status %d)" % p.returncode)


def gcra_script():
    text = open(os.path.join(ROOT, "include", "sluice", "redis", "scripts.hpp")).read()
    # The script as the limiter sends it: the shared prelude, then the GCRA body.
    pre = re.search(r'prelude\[\] = R"lua\((.*?)\)lua"', text, re.S)
    body = re.search(r'gcra_text = with_prelude\(R"lua\((.*?)\)lua"', text, re.S)
    return pre.group(1) + body.group(1) if pre and body else None


def redis_benchmark(r, round_no, port):
    """The GCRA script through redis-benchmark (EVALSHA, 4 connections x 32 pipelined, the
    128 commands in flight of the shared scenario) on a redis-server of its own."""
    script = gcra_script()
    if not script or not shutil.which("redis-server") or not shutil.which("redis-benchmark"):
        return
    d = tempfile.mkdtemp()
    srv = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                            "--appendonly", "no", "--dir", d], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True, text=True).stdout.strip() == "PONG":
                break
            time.sleep(0.05)
        sha = subprocess.run(["redis-cli", "-p", str(port), "SCRIPT", "LOAD", script],
                             capture_output=True, text=True).stdout.strip()
        cmd = ["redis-benchmark", "-p", str(port), "-c", "4", "-P", "32", "-n", "1000000", "-q",
               "EVALSHA", sha, "2", "{bench:shared}", "{bench:shared}:cfg", "1000", "1", "1", "0", "try"]
        print("[round %d] %s" % (round_no, " ".join(cmd[:9]) + " ..."), flush=True)
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300).stdout
        m = re.search(r"([0-9.]+) requests per second", out.replace("\r", "\n"))
        if m:
            r.keep({"peer": "redis-benchmark", "requests_per_s": float(m.group(1))}, "redis-benchmark", round_no)
    finally:
        srv.terminate()
        srv.wait()
        shutil.rmtree(d, ignore_errors=True)


SIM_RATE_LINE = re.compile(r"^(\S.*?)\s+sent\s+(\d+)\s+refused\s+([0-9.]+) %\s+quota used\s+([0-9.]+) %")
SIM_CONC_LINE = re.compile(r"(\w+) knee (\d+): limit (\d+) to (\d+), mean ([0-9.]+)")


def examples(r, build, quick):
    """The example programs against nginx, once."""
    script = os.path.join(ROOT, "benchmarks", "examples_vs_nginx.py")
    if not os.path.exists(os.path.join(build, "examples", "crawler")):
        print("  no examples/crawler in %s (the examples need their dependencies: scripts/install-deps.sh)" % build)
        return
    if not shutil.which("nginx"):
        print("  no nginx (nginx-light: scripts/install-deps.sh): the examples section is not run")
        return
    start = now_utc()
    # The whole matrix: some 90 runs of up to 20 s each.
    r.run(1, "examples", [sys.executable, script, "--build", build, "--json"] + (["--quick"] if quick else []),
          timeout=5400)
    nginx = sh(["nginx", "-v"]).stderr.strip()
    r.keep({"run": "when", "start": start, "end": now_utc()[11:], "nginx": nginx, "quick": quick}, "examples", 1)


def plots(bench, peers, out_dir):
    """benchmarks/plot.py in this run, into out_dir (the plots beside the page). True when drawn."""
    print("$ benchmarks/plot.py --out %s" % os.path.relpath(out_dir), flush=True)
    p = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "plot.py"), "--bench", bench, "--peers", peers,
                        "--out", out_dir])
    return p.returncode == 0


def simulations(r, build):
    """The two simulation tests, once (they run on manual time: deterministic)."""
    for name in ("test_adaptive_rate", "test_adaptive_concurrency"):
        exe = os.path.join(build, "tests", name)
        if not os.path.exists(exe):
            print("  no %s in %s" % (name, build))
            continue
        print("[once] tests/%s" % name, flush=True)
        p = subprocess.run([exe], capture_output=True, text=True, timeout=900)
        for line in p.stdout.splitlines():
            m = SIM_RATE_LINE.match(line)
            if m:
                r.keep({"case": m.group(1), "sent": int(m.group(2)), "refused_pct": float(m.group(3)),
                        "quota_used_pct": float(m.group(4))}, "sim/adaptive_rate", 1)
            m = SIM_CONC_LINE.search(line)
            if m:
                r.keep({"algorithm": m.group(1), "knee": int(m.group(2)), "low": int(m.group(3)),
                        "high": int(m.group(4)), "mean": float(m.group(5))}, "sim/adaptive_concurrency", 1)
        if p.returncode:
            print("  %s failed (status %d): its figures are kept, check the test" % (name, p.returncode))


# ------------------------------------------------------------------------------------------
# The page, from the raw lines alone.

class Results:
    def __init__(self, lines):
        self.meta = next((l["meta"] for l in lines if "meta" in l), {})
        self.lines = [l for l in lines if "job" in l and not l.get("skipped")]
        self.skipped = {l["job"]: l["skipped"] for l in lines if "job" in l and l.get("skipped")}
        self.jobs = {l["job"] for l in self.lines}

    def values(self, job, key, scale=1.0, **where):
        out = []
        for l in self.lines:
            if l["job"] == job and all(l.get(k) == v for k, v in where.items()):
                v = l.get(key)
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    out.append(v * scale)
        return out

    def empty(self, job):
        """What an empty cell says: why a peer skipped the job, that the job ran without this
        figure (a peer that does not report it), or that it did not run."""
        why = self.skipped.get(job)
        if why:
            return "skipped (%s)" % why if isinstance(why, str) else "skipped"
        return "n/a" if job in self.jobs else "not run"

    @staticmethod
    def span(v, fmt, empty="not run"):
        if not v:
            return empty
        lo, hi = min(v), max(v)
        if fmt % lo == fmt % hi:
            return fmt % lo
        return "%s %s %s" % (fmt % lo, "to" if lo < 0 or fmt.startswith("%+") else "-", fmt % hi)

    def cell(self, job, key, fmt, scale=1.0, **where):
        return self.span(self.values(job, key, scale, **where), fmt, self.empty(job))

    def ratio(self, job, num, den, fmt, scale=1.0):
        """num / den line by line (of the same job and round)."""
        v = [scale * l[num] / l[den] for l in self.lines
             if l["job"] == job and isinstance(l.get(num), (int, float)) and l.get(den)]
        return self.span(v, fmt, self.empty(job))

    def ran(self, prefix):
        return any(l["job"].startswith(prefix) for l in self.lines)


BEFORE = "before/"

# The section of a job, by the first part of its name.
JOB_SECTION = {"try": "try", "policies": "policies", "fanout": "fanout", "pace": "pace", "keyed": "keyed",
               "shared": "shared", "fleet": "shared", "window": "shared", "wait": "shared", "redis-benchmark": "shared",
               "shm": "shm", "bandwidth": "bandwidth", "sim": "simulation", "examples": "examples", "plots": "plots"}

# What a before/after table compares, per section: (key, format, lower is better).
BEFORE_AFTER_KEYS = {
    "try": (("ns_per_op", "%.1f ns", True),),
    "policies": (("ns_per_op", "%.1f ns", True),),
    "fanout": (("cpu_us_per_acquire", "%.3f us", True), ("rate_error", "%+.3f %%", None),
               ("max_rss_kib", "%.0f KiB", True)),
    "pace": (("achieved_rate", "%.0f/s", False), ("gap_err_p50", "%.2f", True)),
    "keyed": (("ns_per_op", "%.1f ns", True), ("bytes_per_key", "%.0f B", True)),
    "shared": (("decisions_per_s", "%.0f/s", False), ("over_admission", "%+.4f", None),
               ("commands_per_decision", "%.3f", True), ("cpu_us_per_request", "%.2f us", True),
               ("heap_bytes_per_waiter", "%.0f B", True)),
    "shm": (("ns_per_op", "%.1f ns", True), ("over_admission", "%+.4f", None), ("share_min", "%.2f", False),
            ("share_max", "%.2f", True)),
    "bandwidth": (("cpu_us_per_mb", "%.0f us", True), ("rate_error", "%+.4f", None)),
}


def before_after(lines):
    """The median of each job's figures with the --before binary and with --bench, same run:
    a Markdown table, for stdout or --compare, never for RESULTS.md."""
    jobs, groups = [], {}
    for l in lines:
        job = l.get("job", "")
        if l.get("skipped"):
            continue
        base = job[len(BEFORE):] if job.startswith(BEFORE) else job
        if not base or base.startswith(("sim", "redis-benchmark", "examples")):
            continue
        # A job whose lines differ by policy or backend (policies, shm) compares each apart.
        label = base + ("" if "policy" not in l or not base.startswith("policies") else " " + str(l["policy"]))
        label += " " + str(l["backend"]) if base.startswith("shm/") and "backend" in l else ""
        if label not in groups:
            groups[label] = ([], [])
            jobs.append(label)
        groups[label][0 if job.startswith(BEFORE) else 1].append(l)
    rows = []
    for label in jobs:
        before, after = groups[label]
        if not before or not after:
            continue
        section = JOB_SECTION.get(label.split("/")[0], label.split("/")[0])
        for key, fmt, lower in BEFORE_AFTER_KEYS.get(section, ()):
            b = [x[key] for x in before if isinstance(x.get(key), (int, float))]
            a = [x[key] for x in after if isinstance(x.get(key), (int, float))]
            if not b or not a:
                continue
            mb, ma = statistics.median(b), statistics.median(a)
            change = "" if mb == 0 else "%+.1f %%" % (100.0 * (ma - mb) / abs(mb))
            worse = "" if lower is None or mb == ma else ("worse" if (ma > mb) == lower else "better")
            rows.append([label, key, fmt % mb, fmt % ma, change, worse])
    return (["Before (--before) and after (--bench), medians of the same rounds:", ""]
            + table(["job", "figure", "before", "after", "change", ""], rows))


def spawn_key(column, key):
    """The fanout figure that counts spawning the waiters, as Go's do: Go's wall and CPU run
    from before its goroutines start; sluice's `*_incl_spawn` from before its coroutines are
    spawned (callbacks have nothing to spawn: the two figures agree)."""
    return key if column == "go" else key + "_incl_spawn"


def table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def shm_ratios(res, job):
    """shm over in-process ns per check, round by round, for one job."""
    ratios = []
    for rnd in sorted({l["round"] for l in res.lines if l["job"] == job}):
        by = {l.get("backend"): l for l in res.lines if l["job"] == job and l["round"] == rnd}
        if "local" in by and "shm" in by and by["local"].get("ns_per_op"):
            ratios.append(by["shm"]["ns_per_op"] / by["local"]["ns_per_op"])
    return ratios


def header(m):
    """The run: machine, compiler, commit, dates, rounds, load."""
    if not m:
        return ["No run recorded."]
    mach = m.get("machine", {})
    if isinstance(mach, str):
        mach = {"cpu": mach}
    rows = [["Machine", "%s, %s cores, %s, clocksource %s" % (mach.get("cpu", "?"), mach.get("cores", "?"),
                                                             mach.get("kernel", "?"), mach.get("clocksource", "?"))],
            ["Compiler", "%s (%s)" % (m.get("compiler", "?"), m.get("build_type", "?"))],
            ["Commit", "`%s`" % m.get("commit", "?")],
            ["Date", "%s to %s UTC" % (m.get("start", "?"), m.get("end", "?"))],
            ["Rounds", "%s, interleaved (simulations and the examples once)" % m.get("rounds", "?")],
            ["Load average", "%s at the start, %s at the end" % (m.get("load_start", "?"), m.get("load_end", "?"))]]
    out = table(["This run", ""], rows)
    if m.get("quick") or m.get("only"):
        out += ["", "**A partial run (%s): not figures to quote.**"
                % ", ".join(x for x in ("--quick" if m.get("quick") else "",
                                        "--only " + ",".join(m["only"]) if m.get("only") else "") if x)]
    if m.get("not_run"):
        out += ["", "Not run in this run: %s." % "; ".join(m["not_run"])]
    return out


def render(res):
    m = res.meta

    def want(section):
        return not m.get("only") or section in m["only"]

    md = [INTRO, ""] + header(m) + [""]

    if want("try"):
        md += ["## try: one non-blocking check", "", TRY_TEXT, ""]
        md += table(["try, ns per check"] + [c[1] for c in TRY_COLS],
                    [[row] + [res.cell("try/%s/%s" % (row, c), "ns_per_op", "%.1f") for c, _ in TRY_COLS]
                     for row, _, _ in TRY_ROWS])
        t1 = "try/t1 admitting/"
        md.append("| one clock read | | %s | | | %s | %s | | | | |" % (
            res.cell(t1 + "floor", "clock_ns", "%.1f"), res.cell(t1 + "floor steady", "clock_ns", "%.1f"),
            res.cell(t1 + "sluice coarse", "clock_ns", "%.1f")))
        clocks = sorted({str(l.get("clock")) for l in res.lines if l["job"].startswith("try/") and l["job"].endswith("/sluice")})
        md += ["", TRY_CAPTION, "", "The default clock read `%s` in this run (the JSON lines' `clock`)." % ", ".join(clocks or ["?"])]
        md += ["", "A cost known after the call, beside the check and its floor (the same token bucket):", ""]
        md += table(["try, ns per call"] + [c[1] for c in TICKET_COLS],
                    [[row] + [res.cell("try/%s/%s" % (row, c), "ns_per_op", "%.1f") for c, _ in TICKET_COLS]
                     for row, _, _ in TRY_ROWS])
        md += ["", TICKET_CAPTION]

    if want("policies"):
        md += ["", "## Every limiter's check", "", POLICIES_TEXT, ""]
        md += table(["policy, ns per check"] + [r[0] for r in TRY_ROWS],
                    [[label] + [res.cell("policies/" + row, "ns_per_op", "%.1f", policy=p) for row, _, _ in TRY_ROWS]
                     for p, label in POLICIES])
        md += ["", POLICIES_CAPTION]

    if want("fanout"):
        waiters = next((str(l.get("waiters")) for l in res.lines if l["job"] == "fanout/sluice coroutine"), "W")
        md += ["", "## fanout: many waiters on one limiter", "", FANOUT_TEXT, ""]
        md += table(["fanout, %s waiters at 100,000/s" % waiters] + [c[1] for c in FANOUT_COLS],
                    [["rate error including spawn, %"] + [res.cell("fanout/" + c, spawn_key(c, "rate_error"), "%+.2f", 100)
                                                          for c, _ in FANOUT_COLS],
                     ["rate error after the spawn, %"] + [res.cell("fanout/" + c, "rate_error", "%+.3f", 100)
                                                          if c != "go" else "" for c, _ in FANOUT_COLS],
                     ["CPU per acquire including spawn, us"] + [res.cell("fanout/" + c, spawn_key(c, "cpu_us_per_acquire"), "%.2f")
                                                                for c, _ in FANOUT_COLS],
                     ["CPU per acquire after the spawn, us"] + [res.cell("fanout/" + c, "cpu_us_per_acquire", "%.2f")
                                                                if c != "go" else "" for c, _ in FANOUT_COLS],
                     ["peak RSS, MB"] + [res.cell("fanout/" + c, "max_rss_kib", "%.0f", 1 / 1024) for c, _ in FANOUT_COLS]])
        md += ["", FANOUT_CAPTION]

    if want("pace"):
        md += ["", "## pace: one waiter at a steady rate", "", PACE_TEXT, ""]
        md += table(["pace, achieved per second"] + [c[1] for c in PACE_COLS],
                    [["%s/s" % rate] + [res.cell("pace/%s/%s" % (rate, c), "achieved_rate", "%.0f") for c, _ in PACE_COLS]
                     for rate in PACE_RATES])
        md.append("")
        md += table(["pace, gap error p50, %"] + [c[1] for c in PACE_COLS],
                    [["%s/s" % rate] + [res.cell("pace/%s/%s" % (rate, c), "gap_err_p50", "%.2f", 100) for c, _ in PACE_COLS]
                     for rate in PACE_RATES])
        md += ["", PACE_CAPTION]

    if want("keyed"):
        md += ["", "## keyed: one limiter per key", "", KEYED_TEXT, ""]
        rows = []
        for label, job, t2 in (("1,000 string keys", "keyed/1000/string", None),
                               ("1,000 string keys, a map and a mutex", "keyed/1000/naive", None),
                               ("1,000,000 string keys", "keyed/1000000/string", "keyed/1000000/string t2"),
                               ("1,000,000 u64 keys", "keyed/1000000/u64", "keyed/1000000/u64 t2"),
                               ("1,000,000 IPv4 keys (`address_v4`)", "keyed/1000000/ipv4", None),
                               ("1,000,000 IPv6 keys (`unsigned __int128`)", "keyed/1000000/ipv6", None),
                               ("1,000,000 string keys, a map and a mutex", "keyed/1000000/naive", None)):
            rows.append([label, res.cell(job, "ns_per_op", "%.0f"), res.cell(job, "chase_ns", "%.0f"),
                         res.cell(job, "misses_per_check", "%.2f"), res.cell(job, "bytes_per_key", "%.0f"),
                         res.cell(job, "insert_ns_per_key", "%.0f"), res.cell(t2, "ns_per_op", "%.0f") if t2 else ""])
        md += table(["keyed, uniform keys, one thread", "ns per check", "one DRAM miss (the run's pointer chase), ns",
                     "DRAM misses per check", "bytes per key", "new key, ns", "two threads, ns per check"], rows)
        md += ["", KEYED_CAPTION]

    if want("shared"):
        md += ["", "## shared: one quota in Redis", "", SHARED_TEXT, ""]
        rows = [[label, res.cell("shared/" + c, "decisions_per_s", "%.0f"), res.cell("shared/" + c, "over_admission", "%+.2f", 100)]
                for c, label in SHARED_ROWS]
        rows.append(["floor: redis-benchmark, EVALSHA of the GCRA script, 128 in flight",
                     res.cell("redis-benchmark", "requests_per_s", "%.0f"), ""])
        md += table(["shared, 1,000/s on one Redis", "decisions per second", "over-admission, %"], rows)
        md += ["", SHARED_CAPTION]
        fleet = [l for l in res.lines if l["job"].startswith("fleet/") and "seconds" in l and "procs" in l]
        secs, procs = (str(fleet[0]["seconds"]), str(fleet[0]["procs"])) if fleet else ("D", "P")
        md += ["", FLEET_TEXT, ""]
        rows = []
        for rate in FLEET_RATES:
            for c in FLEET_COLS:
                job = "fleet/%s/%s" % (rate, c)
                rows.append(["%s/s, %s" % (rate, c), res.ratio(job, "admitted", "allowed", "%.1f", 100),
                             res.cell(job, "over_admission", "%+.2f", 100), res.cell(job, "commands_per_decision", "%.2f", 100),
                             "%s / %s" % (res.cell(job, "share_min", "%.2f"), res.cell(job, "share_max", "%.2f")),
                             res.cell(job, "decisions_per_s", "%.0f")])
        md += table(["fleet: %s processes x 32 callers, burst 1, %s s, one Redis" % (procs, secs), "admitted, % of the quota",
                     "over-admission, %", "Redis commands, % of decisions", "shares, min / max of equal",
                     "decisions per second"], rows)
        md += ["", FLEET_CAPTION]
        md += ["", WINDOW_TEXT, ""]
        md += table(["one key, %s processes x 32 callers, 200,000/s, tries, %s s" % (procs, secs), "decisions per second",
                     "Redis commands, % of decisions", "round trip, us", "fleet CPU, cores", "shares, min / max of equal"],
                    [[c, res.cell("window/" + c, "decisions_per_s", "%.0f"), res.cell("window/" + c, "commands_per_decision", "%.2f", 100),
                      res.cell("window/" + c, "round_trip_us", "%.0f"), res.cell("window/" + c, "fleet_cpu_cores", "%.2f"),
                      "%s / %s" % (res.cell("window/" + c, "share_min", "%.2f"), res.cell("window/" + c, "share_max", "%.2f"))]
                     for c, _ in WINDOW_ROWS])
        md += ["", WINDOW_CAPTION]

    if want("shared"):
        md += ["", "## Waiting on Redis", "", WAIT_TEXT, ""]
        wn = next((str(l.get("waiters")) for l in res.lines if l["job"] == "wait" and "waiters" in l), "W")
        md += table(["waiting on Redis: %s requests at once on one token bucket" % wn, "waiting at once",
                     "heap per waiting request, bytes", "resident per waiting request, bytes", "peak RSS, MB",
                     "CPU per request, us", "CPU per wait, us"],
                    [["sluice"] + [res.cell("wait", key, fmt, scale) for key, fmt, scale in (
                        ("waiting_reserved", "%.0f", 1), ("heap_bytes_per_waiter", "%.0f", 1), ("bytes_per_waiter", "%.0f", 1),
                        ("max_rss_kib", "%.0f", 1 / 1024), ("cpu_us_per_request", "%.2f", 1), ("cpu_us_per_wait", "%.2f", 1))]])
        md += ["", WAIT_CAPTION]

    if want("shm"):
        md += ["", "## shm: one quota in shared memory", "", SHM_TEXT, ""]
        rows = []
        for row, _, _ in SHM_ROWS:
            job = "shm/try/" + row
            rows.append([row, res.cell(job, "ns_per_op", "%.1f", backend="local"), res.cell(job, "ns_per_op", "%.1f", backend="shm"),
                         res.span(shm_ratios(res, job), "%.2f"), res.cell("shm/try floor/" + row, "ns_per_op", "%.1f")])
        md += table(["try, ns per check", "in-process `token_bucket<>`", "`shm::token_bucket<>`", "shm / in-process",
                     "one-word floor"], rows)
        md += ["", SHM_CAPTION, "", SHM_KEYED_TEXT, ""]
        rows = []
        for row, _ in SHM_KEYED:
            job = "shm/keyed/" + row
            rows.append([row, res.cell(job, "ns_per_op", "%.0f", backend="local"), res.cell(job, "ns_per_op", "%.0f", backend="shm"),
                         res.span(shm_ratios(res, job), "%.2f"), res.cell(job, "chase_ns", "%.0f"),
                         res.cell(job, "bytes_per_key", "%.0f", backend="local"),
                         res.cell(job, "bytes_per_key", "%.0f", backend="shm"), res.cell(job, "insert_ns_per_key", "%.0f", backend="shm")])
        md += table(["keyed, one thread, ns per check", "in-process `keyed<token_bucket<>>`", "`shm::keyed_bucket<>`", "shm / in-process",
                     "one DRAM miss, ns", "bytes per key, in-process", "bytes per key, shm", "new key, shm, ns"], rows)
        md += ["", SHM_KEYED_CAPTION, "", SHM_FLEET_TEXT, ""]
        shm_fleet = [l for l in res.lines if l["job"].startswith("shm/fleet/") and "procs" in l]
        sp, ss = (str(shm_fleet[0]["procs"]), str(shm_fleet[0]["seconds"])) if shm_fleet else ("P", "D")
        md += table(["fleet: %s processes x 32 callers, 100,000/s, burst 1, %s s, one segment" % (sp, ss),
                     "admitted, % of the quota", "over-admission, %", "shares, min / max of equal", "decisions per second",
                     "fleet CPU, cores"],
                    [[col, res.ratio("shm/fleet/" + col, "admitted", "allowed", "%.1f", 100),
                      res.cell("shm/fleet/" + col, "over_admission", "%+.2f", 100),
                      "%s / %s" % (res.cell("shm/fleet/" + col, "share_min", "%.2f"), res.cell("shm/fleet/" + col, "share_max", "%.2f")),
                      res.cell("shm/fleet/" + col, "decisions_per_s", "%.0f"),
                      res.cell("shm/fleet/" + col, "fleet_cpu_cores", "%.2f")] for col, _ in SHM_FLEET])
        md += ["", SHM_FLEET_CAPTION]

    if want("bandwidth"):
        md += ["", "## Bandwidth", "", BANDWIDTH_TEXT, ""]
        conns = next((str(l.get("connections")) for l in res.lines if l["job"] == "bandwidth"), "C")
        md += table(["bandwidth: %s connections sharing 50 MB/s" % conns, "achieved, MB/s", "error over the cap, %",
                     "shares, min / max of equal", "CPU per MB, us"],
                    [["sluice throttled_stream", res.cell("bandwidth", "achieved_bytes_per_s", "%.2f", 1e-6),
                      res.cell("bandwidth", "rate_error", "%+.2f", 100),
                      "%s / %s" % (res.cell("bandwidth", "share_min", "%.3f"), res.cell("bandwidth", "share_max", "%.3f")),
                      res.cell("bandwidth", "cpu_us_per_mb", "%.0f")]])
        md += ["", BANDWIDTH_CAPTION]

    if want("simulation"):
        md += ["", "## Adaptive rate (simulation)", "", SIM_RATE_TEXT, ""]
        cases = []
        for l in res.lines:
            if l["job"] == "sim/adaptive_rate" and l["case"] not in cases:
                cases.append(l["case"])
        md += table(["server, client's first rate", "refused, %", "quota used, %"],
                    [[c, res.cell("sim/adaptive_rate", "refused_pct", "%.2f", case=c),
                      res.cell("sim/adaptive_rate", "quota_used_pct", "%.1f", case=c)] for c in cases]
                    or [["not run", "", ""]])
        md += ["", SIM_RATE_CAPTION]
    if want("simulation"):
        md += ["", "## Adaptive concurrency (simulation)", "", SIM_CONC_TEXT, ""]
        algos, knees = [], []
        for l in res.lines:
            if l["job"] == "sim/adaptive_concurrency":
                if l["algorithm"] not in algos:
                    algos.append(l["algorithm"])
                if l["knee"] not in knees:
                    knees.append(l["knee"])

        def conc(a, k):
            got = [l for l in res.lines if l["job"] == "sim/adaptive_concurrency" and l["algorithm"] == a and l["knee"] == k]
            return "%d-%d (%.0f)" % (got[0]["low"], got[0]["high"], got[0]["mean"]) if got else ""
        md += table(["algorithm"] + ["knee %d" % k for k in knees] if knees else ["algorithm", "limit"],
                    [[a] + [conc(a, k) for k in knees] for a in algos] or [["not run", ""]])
        md += ["", SIM_CONC_CAPTION]

    if want("examples"):
        md += ["", "## The example programs against nginx", "", EXAMPLES_TEXT, ""]
        ex = [l for l in res.lines if l["job"] == "examples"]
        when = next((l for l in ex if l.get("run") == "when"), None)
        if when:
            md += ["%s; %s to %s UTC." % (when["nginx"].replace("nginx version: ", ""), when["start"], when["end"]), ""]
        md += table(["crawler, 300 pages behind limit_req 20r/s", "pages fetched", "time, s", "ideal, s", "over the ideal, %",
                     "refused", "exit"],
                    [["%s, burst %d%s, paced at %d/s" % (l["refusal"], l.get("burst", 0),
                                                         " nodelay" if l.get("nodelay") else "", l["pace"]),
                      "%d of %d" % (l["fetched"], l["pages"]),
                      "%.2f" % l["seconds"], "%.2f" % l["ideal_seconds"], "%+.1f" % ((l["seconds"] / l["ideal_seconds"] - 1) * 100),
                      "%d of %d" % (l["refused"], l["requests"]), "%d" % l["exit"]]
                     for l in ex if l.get("run") == "crawler"] or [["not run", "", "", "", "", "", ""]])
        md.append("")
        md += table(["api_client, limit_req 50r/s nodelay", "admitted from 3 s after the first refusal, /s",
                     "% of 50/s (ideal 100)", "refused then", "first refusal, s", "holds >= 47/s from, s"],
                    [["from %d/s, burst %d, %s, --max-rate %s" % (l["start"], l["burst"],
                                                                 "Retry-After: 1" if l["retry_after"] else "no Retry-After",
                                                                 l["max_rate"]),
                      "%.1f" % l["settled_rate"], "%.1f" % l["quota_pct"],
                      "%d of %d (%.2f %%)" % (l["settled_refused"], l["settled_requests"],
                                              100 * l["settled_refused"] / max(1, l["settled_requests"])),
                      "%.2f" % l["first_refusal_s"] if l.get("first_refusal_s") is not None else "none",
                      "%d" % l["held_from_s"] if l.get("held_from_s") is not None else "never"]
                     for l in ex if l.get("run") == "api_client" and "start" in l] or [["not run", "", "", "", "", ""]])
        md.append("")
        md += table(["crawler against a slowing host, in-flight cap", "pages", "pages/s", "ideal, /s", "% of the ideal",
                     "host's p99 latency, ms", "unloaded, ms"],
                    [[l["adaptive"] if l["adaptive"] == "off" else "%s (following latency)" % l["adaptive"],
                      "%d" % l["pages"], "%.1f" % l["rate"], "%.0f" % l["ideal_rate"],
                      "%.0f" % (100 * l["rate"] / l["ideal_rate"]), "%.1f" % l["p99_ms"], "%.0f" % l["unloaded_ms"]]
                     for l in ex if l.get("run") == "slow_host"] or [["not run", "", "", "", "", "", ""]])
        md.append("")
        md += table(["server, idle connections under ulimit -n 1024", "answers", "latency p50 / max, ms", "CPU, %",
                     "RSS start / held / after, MiB"],
                    [["%d" % l["idle"], "%d, %s" % (l["requests"], "all 200" if l["all_200"] else "not all 200"),
                      "%.2f / %.2f" % (l["p50_ms"], l["max_ms"]), "%.1f" % l["cpu_pct"],
                      "%.1f / %.1f / %.1f" % (l["rss_start_kib"] / 1024, l["rss_held_kib"] / 1024, l["rss_after_kib"] / 1024)]
                     for l in ex if l.get("run") == "server"] or [["not run", "", "", "", ""]])
        md += ["", EXAMPLES_CAPTION]

    if want("plots"):
        md += ["", "## Plots", ""]
        md += [PLOTS_TEXT if m.get("plots") else "Not drawn in this run (`benchmarks/plot.py` needs python3-matplotlib)."]
        md.append("")
    return re.sub(r"\n{3,}", "\n\n", "\n".join(md))


# ------------------------------------------------------------------------------------------

def not_run(res, only):
    """The sections (and peers) a run meant to run and got no line from."""
    missing = []
    for section, prefix in (("try", "try/"), ("policies", "policies/"), ("fanout", "fanout/"), ("pace", "pace/"),
                            ("keyed", "keyed/"), ("shared", "shared/exact"), ("shm", "shm/"), ("bandwidth", "bandwidth"),
                            ("simulation", "sim/"), ("examples", "examples")):
        if section in only and not res.ran(prefix):
            missing.append("the %s section" % section)
    jobs = [l["job"] for l in res.lines] + list(res.skipped)
    for name, suffix, sections in (("Go", "/go", {"try", "fanout", "pace"}), ("Guava", "/guava", {"try", "pace"}),
                                   ("bottleneck", "/bottleneck", {"try", "pace"}),
                                   ("rate-limiter-flexible", "/rlflex", {"try", "pace", "shared"}),
                                   ("limits", "/limits", {"shared"})):
        if sections & set(only) and not any(j.endswith(suffix) for j in jobs):
            missing.append("the %s peer" % name)
    return missing


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--build", default=os.path.join(ROOT, "build-rel"),
                    help="the release build dir, configured and built as needed (default build-rel)")
    ap.add_argument("--bench", help="this sluice-bench, and build nothing")
    ap.add_argument("--peers", default=os.path.join(ROOT, "..", "shared", "peers"))
    ap.add_argument("--rounds", type=int, default=MIN_ROUNDS)
    ap.add_argument("--quick", action="store_true", help="small counts, one round: checks the script")
    ap.add_argument("--only", help="comma-separated sections to run: " + ",".join(SECTIONS))
    ap.add_argument("--page", help="where the page goes (default benchmarks/RESULTS.md, for a complete run only)")
    ap.add_argument("--out", help="the raw lines (default benchmarks/results.jsonl beside RESULTS.md, else PAGE.jsonl)")
    ap.add_argument("--from", dest="src", metavar="FILE", help="run nothing: write the page from this raw file")
    ap.add_argument("--no-write", action="store_true", help="print the page instead of writing it")
    ap.add_argument("--before", metavar="BENCH",
                    help="an older sluice-bench: each sluice job also runs with it, just before the same job, and the "
                         "before/after table is printed (an A/B check: the page never goes to RESULTS.md)")
    ap.add_argument("--compare", metavar="FILE", help="with --before: also write the before/after table here")
    a = ap.parse_args()

    only = set(a.only.split(",")) if a.only else set(SECTIONS)
    if only - set(SECTIONS):
        sys.exit("results.py: unknown section(s) %s (%s)" % (",".join(sorted(only - set(SECTIONS))), ",".join(SECTIONS)))
    complete = not (a.quick or a.only or a.before) and a.rounds >= MIN_ROUNDS
    if a.page:
        page = os.path.abspath(a.page)
    elif a.src or complete:
        page = RESULTS_MD
    elif a.no_write:
        page = RESULTS_MD   # printed, not written
    elif a.before:
        page = None   # an A/B check: the before/after table alone
    else:
        sys.exit("results.py: a partial run (--quick, --only, --rounds below %d) writes its page to --page FILE "
                 "(or --no-write), never RESULTS.md" % MIN_ROUNDS)
    to_results = page == RESULTS_MD and not a.no_write
    if to_results and not a.src and not complete:
        sys.exit("results.py: RESULTS.md is written only by a complete run of %d rounds or more, without --quick, "
                 "--only or --before: give --page FILE" % MIN_ROUNDS)
    if page == RESULTS_MD:
        out = a.out or os.path.join(ROOT, "benchmarks", "results.jsonl")
    elif page:
        out = a.out or os.path.splitext(page)[0] + ".jsonl"
    else:
        out = a.out or os.path.join(tempfile.gettempdir(), "sluice-results-%d.jsonl" % os.getpid())
    if a.src:
        with open(a.src) as f:
            lines = [json.loads(l) for l in f if l.strip()]
    else:
        build_dir = os.path.abspath(a.build)
        if a.bench:
            B = os.path.abspath(a.bench)
            # The bench's own build dir names the compiler, and holds the simulations and examples.
            own = os.path.dirname(os.path.dirname(B))
            if a.build == ap.get_default("build") and os.path.exists(os.path.join(own, "meson-info")):
                build_dir = own
        else:
            build(build_dir)
            B = os.path.join(build_dir, "benchmarks", "sluice-bench")
        if only - {"simulation", "examples"} and not os.path.exists(B):
            sys.exit("results.py: no benchmark at %s" % B)
        peers = os.path.abspath(a.peers)
        rounds = 1 if a.quick else a.rounds
        meta = {"machine": machine(), "compiler": compiler(build_dir), "build_type": build_type(build_dir),
                "commit": commit(), "rounds": rounds, "quick": a.quick, "only": sorted(only) if a.only else [],
                "before": bool(a.before), "load_start": load(), "start": now_utc()}
        raw = out + ".partial"
        r = Runner(B, peers, open(raw, "w"))
        if "simulation" in only:
            simulations(r, build_dir)
        if "examples" in only:
            examples(r, build_dir, a.quick)
        for rnd in range(1, rounds + 1):
            for section, job, cmd in plan(a, B, peers):
                if section not in only:
                    continue
                if cmd is None:
                    redis_benchmark(r, rnd, 6399)
                    continue
                if a.before and cmd[0] == B:
                    r.run(rnd, BEFORE + job, [os.path.abspath(a.before)] + cmd[1:])
                r.run(rnd, job, cmd)
        r.out.close()
        if "plots" in only and page and not a.quick and not a.before:
            meta["plots"] = plots(B, peers, os.path.join(os.path.dirname(page), "plots"))
        meta["end"] = now_utc()
        meta["load_end"] = load()
        with open(raw) as f:
            body = f.read()
        with open(out, "w") as f:
            f.write(json.dumps({"meta": meta}) + "\n" + body)
        os.remove(raw)
        print("raw lines in %s" % shown_path(out))
        with open(out) as f:
            lines = [json.loads(l) for l in f if l.strip()]
        res = Results(lines)
        meta["not_run"] = not_run(res, only) + (["the plots (benchmarks/plot.py needs python3-matplotlib)"]
                                                 if "plots" in only and page and not meta.get("plots") else [])
        lines[0] = {"meta": meta}
        with open(out, "w") as f:
            f.write("".join(json.dumps(l) + "\n" for l in lines))

    if any(l.get("job", "").startswith(BEFORE) for l in lines):
        ab = before_after(lines)
        print("\n" + "\n".join(ab))
        if a.compare:
            with open(a.compare, "w") as f:
                f.write("\n".join(ab) + "\n")
            print("before/after table in %s" % shown_path(a.compare))
        lines = [l for l in lines if not l.get("job", "").startswith(BEFORE)]
    if page is None:
        return
    res = Results(lines)
    m = res.meta
    if to_results and (m.get("quick") or m.get("only") or m.get("before") or int(m.get("rounds") or 0) < MIN_ROUNDS):
        sys.exit("results.py: %s is not a complete run of %d rounds or more: RESULTS.md is left alone (give --page FILE)"
                 % (a.src or out, MIN_ROUNDS))
    text = render(res)
    if a.no_write:
        print(text)
        return
    with open(page, "w") as f:
        f.write(text if text.endswith("\n") else text + "\n")
    print("%s written" % shown_path(page))


if __name__ == "__main__":
    main()
