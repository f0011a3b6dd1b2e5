#!/usr/bin/env python3
"""One command for the results page: runs sluice-bench and the peer programs interleaved
(every scenario of a round, sluice and each peer one after the other, then the next round),
and writes the tables of benchmarks/RESULTS.md between its markers
(<!-- results:begin --> and <!-- results:end -->), min-max over the rounds. The machine is
named by its properties (cores, CPU model, kernel, clocksource, load average at the start
and the end); no path of it is printed. Every JSON line goes to --out (with its round).

    benchmarks/results.py [--bench build-rel/benchmarks/sluice-bench] [--peers ../shared/peers]
                          [--rounds 3] [--quick] [--out results.jsonl] [--no-write]

Build the benchmark first: meson setup build-rel --buildtype=release -Dtests=false
-Dexamples=false && ninja -C build-rel benchmarks/sluice-bench. A peer whose program is
missing or fails shows as "not run". --quick: small counts and one round, to check the
script in a minute."""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"


def machine():
    model = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        cs = open("/sys/devices/system/clocksource/clocksource0/current_clocksource").read().strip()
    except OSError:
        cs = "?"
    return "%d cores, %s, Linux %s, clocksource %s" % (os.cpu_count() or 0, model, platform.release(), cs)


def load():
    return "%.2f" % os.getloadavg()[0]


class Runner:
    def __init__(self, bench, peers, out):
        self.bench, self.peers, self.out = bench, peers, out
        self.results = {}   # (row, column) -> [values]

    def shown(self, cmd):
        if cmd[0] == self.bench:
            return "sluice-bench " + " ".join(cmd[1:])
        rel = os.path.relpath(cmd[0], self.peers)
        return "peers/" + rel + " " + " ".join(cmd[1:])

    def run(self, round_no, column, cmd, *wanted):
        """Runs cmd once; each (row, key[, scale]) in wanted takes that key of its JSON line."""
        if not os.path.exists(cmd[0]):
            return
        print("[round %d] %s" % (round_no, self.shown(cmd)), flush=True)
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            print("  timed out")
            return
        for line in p.stdout.splitlines():
            if not line.startswith("{"):
                continue
            try:
                j = json.loads(line)
            except ValueError:
                continue
            j["round"] = round_no
            self.out.write(json.dumps(j) + "\n")
            self.out.flush()
            if j.get("skipped"):
                continue
            for w in wanted:
                row, key, scale = (w + (1.0,))[:3]
                v = j.get(key)
                if isinstance(v, (int, float)):
                    self.results.setdefault((row, column), []).append(v * scale)
            return
        print("  no JSON line in its output (status %d)" % p.returncode)

    def cell(self, row, column, fmt):
        v = self.results.get((row, column))
        if not v:
            return "not run"
        lo, hi = min(v), max(v)
        if fmt % lo == fmt % hi:
            return fmt % lo
        return "%s %s %s" % (fmt % lo, "to" if lo < 0 or fmt.startswith("%+") else "-", fmt % hi)


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
            r.results.setdefault(("fleet 1000 rps", "redis-benchmark"), []).append(float(m.group(1)))
            r.out.write(json.dumps({"peer": "redis-benchmark", "round": round_no, "requests_per_s": float(m.group(1))}) + "\n")
    finally:
        srv.terminate()
        srv.wait()
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default=os.path.join(ROOT, "build-rel/benchmarks/sluice-bench"))
    ap.add_argument("--peers", default=os.path.join(ROOT, "../shared/peers"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default="results.jsonl")
    ap.add_argument("--no-write", action="store_true", help="print the tables, leave RESULTS.md alone")
    a = ap.parse_args()
    if not os.path.exists(a.bench):
        sys.exit("results.py: no benchmark at %s (build it first, see --help)" % a.bench)
    peers = os.path.abspath(a.peers)
    B = os.path.abspath(a.bench)
    rounds = 1 if a.quick else a.rounds
    ops = "1000000" if a.quick else "10000000"
    waiters = "10000" if a.quick else "100000"
    pace_n = {"100000": "2000", "10000": "2000", "1000": "500"} if a.quick else \
        {"100000": "20000", "10000": "20000", "1000": "5000"}
    keyed_ops = "200000" if a.quick else "2000000"
    start = datetime.datetime.now(datetime.timezone.utc)
    load0 = load()
    r = Runner(B, peers, open(a.out, "w"))
    go, guava = os.path.join(peers, "go", "run"), os.path.join(peers, "java-guava", "run")

    for rnd in range(1, rounds + 1):
        for t in ("1", "2"):
            for adm in ("true", "false"):
                row = "t%s %s" % (t, "admitting" if adm == "true" else "rejecting")
                args = ["--scenario", "try", "--threads", t, "--ops", ops, "--admitting=" + adm]
                r.run(rnd, "sluice", [B] + args + ["--policy", "gcra"], (row, "ns_per_op"))
                r.run(rnd, "sluice tsc", [B] + args + ["--policy", "gcra", "--clock", "tsc"], (row, "ns_per_op"))
                # The least one shared word can do: a bare CAS loop on the same clock.
                r.run(rnd, "floor", [B] + args + ["--policy", "floor"], (row, "ns_per_op"), ("clock read", "clock_ns"))
                r.run(rnd, "floor tsc", [B] + args + ["--policy", "floor", "--clock", "tsc"], (row, "ns_per_op"),
                      ("clock read", "clock_ns"))
                r.run(rnd, "Go", [go] + args, (row, "ns_per_op"))
                r.run(rnd, "Guava", [guava] + args, (row, "ns_per_op"))
        fan = ["--scenario", "fanout", "--waiters", waiters, "--rate", "100000"]
        for col, cmd in (("sluice coroutine", [B] + fan), ("sluice callback", [B] + fan + ["--waiter", "callback"]),
                         ("Asio floor", [B] + fan + ["--policy", "floor"]),
                         ("queue coroutine", [B] + fan + ["--policy", "queue"]),
                         ("queue callback", [B] + fan + ["--policy", "queue", "--waiter", "callback"]),
                         ("Go", [go] + fan)):
            r.run(rnd, col, cmd, ("fanout error", "rate_error", 100), ("fanout cpu", "cpu_us_per_acquire"),
                  ("fanout rss", "max_rss_kib", 1 / 1024))
        for rate, n in pace_n.items():
            args = ["--scenario", "pace", "--rate", rate, "--n", n]
            r.run(rnd, "sluice", [B] + args, ("pace " + rate, "achieved_rate"))
            r.run(rnd, "sluice strict", [B] + args + ["--strict"], ("pace " + rate, "achieved_rate"))
            r.run(rnd, "Go", [go] + args, ("pace " + rate, "achieved_rate"))
            r.run(rnd, "Guava", [guava] + args, ("pace " + rate, "achieved_rate"))
        for keys in ("1000", "1000000"):
            args = ["--scenario", "keyed", "--keys", keys, "--dist", "uniform", "--ops", keyed_ops]
            r.run(rnd, "sluice", [B] + args, ("keyed " + keys, "ns_per_op"), ("keyed " + keys + " chase", "chase_ns"),
                  ("keyed " + keys + " bytes", "bytes_per_key"))
            r.run(rnd, "naive map", [B] + args + ["--policy", "naive"], ("keyed " + keys, "ns_per_op"),
                  ("keyed " + keys + " bytes", "bytes_per_key"))
        sh = ["--scenario", "shared", "--procs", "2" if a.quick else "4", "--concurrency", "32", "--rate", "1000",
              "--seconds", "1" if a.quick else "3", "--port", "6397"]
        for col, extra in (("sluice exact", []), ("sluice lease 8", ["--lease", "8"])):
            r.run(rnd, col, [B] + sh + extra, ("shared", "decisions_per_s"), ("shared over", "over_admission", 100))
        # The fleet: one quota, 4 processes x 32 callers, burst 1, at the rates fleets have.
        secs = "1" if a.quick else "5"
        rlflex = os.path.join(peers, "node-rlflex", "run")
        for rate in ("1000", "10000", "100000"):
            base = ["--scenario", "shared", "--procs", "2" if a.quick else "4", "--concurrency", "32", "--rate", rate,
                    "--seconds", secs, "--port", "6398"]
            for col, cmd in (("sluice try, lease 64", [B] + base + ["--lease", "64"]),
                             ("sluice acquire, bucket", [B] + base + ["--mode", "acquire"]),
                             ("sluice acquire, window", [B] + base + ["--mode", "acquire", "--limiter", "window"]),
                             ("rate-limiter-flexible", [rlflex] + base)):
                r.run(rnd, col, cmd, ("fleet " + rate + " admitted", "admitted"), ("fleet " + rate + " allowed", "allowed"),
                      ("fleet " + rate + " over", "over_admission", 100),
                      ("fleet " + rate + " cmds", "commands_per_decision", 100),
                      ("fleet " + rate + " share min", "share_min"), ("fleet " + rate + " share max", "share_max"),
                      ("fleet " + rate + " decisions", "decisions_per_s"))
        # Waiting on Redis: W requests at once on one token bucket, all waiting for their
        # reserved slots (the first --seconds ahead), then woken at 100,000/s.
        wait = ["--scenario", "shared", "--mode", "wait", "--waiters", waiters, "--rate", "100000",
                "--seconds", "5" if a.quick else "20", "--port", "6396"]
        r.run(rnd, "sluice", [B] + wait, ("wait heap", "heap_bytes_per_waiter"), ("wait rss", "bytes_per_waiter"),
              ("wait peak", "max_rss_kib", 1 / 1024), ("wait cpu request", "cpu_us_per_request"),
              ("wait cpu", "cpu_us_per_wait"), ("wait waiting", "waiting_reserved"))
        redis_benchmark(r, rnd, 6399)

    end = datetime.datetime.now(datetime.timezone.utc)
    md = []
    md.append(BEGIN)
    md.append("## Side by side (generated by `benchmarks/results.py`)")
    md.append("")
    md.append("%s; %d round(s), interleaved, %s to %s UTC; load average %s at the start, %s at the end.%s"
              % (machine(), rounds, start.strftime("%Y-%m-%d %H:%M"), end.strftime("%H:%M"), load0, load(),
                 " Quick mode: small counts." if a.quick else ""))
    md.append("Each cell is min-max over the rounds; `peers/<peer>/run` are the peer programs.")
    md.append("")
    md.append("| try, ns per check | sluice | one-word floor | sluice, tsc_clock | floor, tsc_clock | Go x/time/rate | Guava |")
    md.append("| --- | --- | --- | --- | --- | --- | --- |")
    for row in ("t1 admitting", "t1 rejecting", "t2 admitting", "t2 rejecting"):
        md.append("| %s | %s |" % (row, " | ".join(r.cell(row, c, "%.1f")
                                                   for c in ("sluice", "floor", "sluice tsc", "floor tsc", "Go", "Guava"))))
    md.append("| one clock read | %s | | %s | | |" % (r.cell("clock read", "floor", "%.1f"), r.cell("clock read", "floor tsc", "%.1f")))
    md.append("")
    md.append("The one-word floor is a bare compare-and-swap loop on one `std::atomic<int64_t>` with the same")
    md.append("clock and constants (`--policy floor`): the least a limiter whose state is one shared word can")
    md.append("cost a check.")
    md.append("")
    md.append("| fanout, %s waiters at 100,000/s | sluice coroutines | sluice callbacks | one-timer queue, coroutines "
              "| one-timer queue, callbacks | Asio floor (a timer a waiter) | Go |" % waiters)
    md.append("| --- | --- | --- | --- | --- | --- | --- |")
    cols = ("sluice coroutine", "sluice callback", "queue coroutine", "queue callback", "Asio floor", "Go")
    md.append("| rate error, %% | %s |" % " | ".join(r.cell("fanout error", c, "%+.2f") for c in cols))
    md.append("| CPU per acquire, us | %s |" % " | ".join(r.cell("fanout cpu", c, "%.2f") for c in cols))
    md.append("| peak RSS, MB | %s |" % " | ".join(r.cell("fanout rss", c, "%.0f") for c in cols))
    md.append("")
    md.append("The one-timer queue (`--policy queue`) parks each waiter's handler in a FIFO and resumes")
    md.append("the due ones in order from one timer that wakes at most every 200 us, with no limiter")
    md.append("arithmetic, lock or cancellation: the least a one-timer engine can cost a waiter on Asio.")
    md.append("")
    md.append("| pace, achieved per second | sluice | sluice strict | Go | Guava |")
    md.append("| --- | --- | --- | --- | --- |")
    for rate in pace_n:
        md.append("| %s/s | %s |" % (rate, " | ".join(r.cell("pace " + rate, c, "%.0f")
                                                   for c in ("sluice", "sluice strict", "Go", "Guava"))))
    md.append("")
    md.append("| keyed, ns per check, uniform keys, one thread | sluice keyed | a map and a mutex "
              "| one DRAM miss (the run's pointer chase) | bytes per key, sluice / naive |")
    md.append("| --- | --- | --- | --- | --- |")
    for keys in ("1000", "1000000"):
        row = "keyed " + keys
        md.append("| %s keys | %s | %s | %s / %s |" % (
            keys, " | ".join(r.cell(row, c, "%.0f") for c in ("sluice", "naive map")),
            r.cell(row + " chase", "sluice", "%.0f"), r.cell(row + " bytes", "sluice", "%.0f"),
            r.cell(row + " bytes", "naive map", "%.0f")))
    md.append("")
    md.append("| shared, 1,000/s on one Redis | decisions per second | over-admission, % |")
    md.append("| --- | --- | --- |")
    for c in ("sluice exact", "sluice lease 8"):
        md.append("| %s | %s | %s |" % (c, r.cell("shared", c, "%.0f"), r.cell("shared over", c, "%+.2f")))
    md.append("")
    md.append("| fleet: 4 processes x 32 callers, burst 1, %s s, one Redis | admitted, %% of allowed | over-admission, %% "
              "| Redis commands, %% of decisions | shares, min / max of equal | decisions per second |" % secs)
    md.append("| --- | --- | --- | --- | --- | --- |")
    for rate in ("1000", "10000", "100000"):
        for c in ("sluice try, lease 64", "sluice acquire, bucket", "sluice acquire, window", "rate-limiter-flexible"):
            adm, alw = r.results.get(("fleet " + rate + " admitted", c)), r.results.get(("fleet " + rate + " allowed", c))
            if adm and alw:
                r.results[("fleet " + rate + " pct", c)] = [100.0 * x / y for x, y in zip(adm, alw)]
            md.append("| %s/s, %s | %s | %s | %s | %s / %s | %s |" % (
                rate, c, r.cell("fleet " + rate + " pct", c, "%.1f"), r.cell("fleet " + rate + " over", c, "%+.2f"),
                r.cell("fleet " + rate + " cmds", c, "%.2f"), r.cell("fleet " + rate + " share min", c, "%.2f"),
                r.cell("fleet " + rate + " share max", c, "%.2f"), r.cell("fleet " + rate + " decisions", c, "%.0f")))
    md.append("")
    md.append("| waiting on Redis: %s requests at once on one token bucket | waiting at once | heap per waiting "
              "request, bytes | resident per waiting request, bytes | peak RSS, MB | CPU per request, us "
              "| CPU per wait, us |" % waiters)
    md.append("| --- | --- | --- | --- | --- | --- | --- |")
    md.append("| sluice | %s |" % " | ".join(r.cell(row, "sluice", fmt) for row, fmt in (
        ("wait waiting", "%.0f"), ("wait heap", "%.0f"), ("wait rss", "%.0f"), ("wait peak", "%.0f"),
        ("wait cpu request", "%.2f"), ("wait cpu", "%.2f"))))
    md.append("")
    md.append("`--scenario shared --mode wait`: each request reserves its slot in Redis (pipelined round trips)")
    md.append("and waits locally until it; the key's first seconds are reserved ahead, so all wait at once, then")
    md.append("wake at 100,000/s. Heap: the heap in use when the last reservation is in, over the requests then")
    md.append("waiting; resident: the same with the process's RSS (which keeps what the round trips left in the")
    md.append("allocator); CPU per request: the whole run; CPU per wait: from the last reply on (the waits alone).")
    md.append("")
    md.append("redis-benchmark, the GCRA script by EVALSHA with 128 in flight (`-c 4 -P 32`): %s requests per second."
              % r.cell("fleet 1000 rps", "redis-benchmark", "%.0f"))
    md.append(END)
    block = "\n".join(md) + "\n"
    print()
    print(block)
    if a.no_write:
        return
    path = os.path.join(ROOT, "benchmarks", "RESULTS.md")
    text = open(path).read()
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + block.rstrip("\n") + text[text.index(END) + len(END):]
    else:
        # First time: after the introduction (before the first section).
        i = text.index("\n## ")
        text = text[:i + 1] + block + "\n" + text[i + 1:]
    open(path, "w").write(text)
    print("RESULTS.md updated")


if __name__ == "__main__":
    main()
