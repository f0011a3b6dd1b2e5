#!/usr/bin/env python3
"""Draws the benchmark results people would rather look at than read, as SVG files:

  pace.svg    each grant's lateness against its ideal slot (first grant + i / R), at
              10,000/s, default and --strict (sluice-bench --scenario pace --trace)
  fanout.svg  the admitted rate over time (per 10 ms) of 100,000 coroutine waiters at
              100,000/s: sluice and Asio's floor (--trace), Go's x/time/rate as its mean
              rate (its peer program prints no per-grant times)
  keyed.svg   ns per check against the number of keys (uniform keys, one thread), string
              and u64 keys and the naive map, beside the run's pointer-chase reference
              (one dependent DRAM miss)
  shared.svg  each process's admissions per second on one Redis quota (4 x 32 callers)
  bandwidth.svg  100 connections sharing 50 MB/s: achieved against the cap, shares

It runs the benchmark itself (a release build's sluice-bench) and the Go peer when it is
there, keeps every JSON line in OUT/plots.jsonl, and prints what it ran.

    benchmarks/plot.py [--bench build-rel/benchmarks/sluice-bench] [--peers ../shared/peers]
                       [--out benchmarks/plots] [--only keyed,pace,...]

--only redraws the plots named (pace, fanout, keyed, shared, bandwidth) and keeps the other
scenarios' lines in plots.jsonl.

Needs python3-matplotlib (Debian), and redis-server for the shared plot."""

import argparse
import json
import os
import subprocess
import sys
import tempfile

try:
    import matplotlib
except ImportError:   # Debian's python3-matplotlib, seen from another python3 first in PATH
    sys.path.append("/usr/lib/python3/dist-packages")
    import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd, log):
    shown = " ".join(os.path.relpath(c, ROOT) if os.path.isabs(c) and c.startswith(ROOT) else c for c in cmd)
    print("$", shown, flush=True)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        print("  failed (%d): %s" % (out.returncode, out.stderr.strip()[:300]))
        return None
    line = next((l for l in out.stdout.splitlines() if l.startswith("{")), None)
    if line:
        log.write(line + "\n")
        return json.loads(line)
    return None


def read_trace(path):
    with open(path) as f:
        return [int(x) for x in f]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default=os.path.join(ROOT, "build-rel/benchmarks/sluice-bench"))
    ap.add_argument("--peers", default=os.path.join(ROOT, "../shared/peers"))
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks/plots"))
    ap.add_argument("--png", action="store_true", help="also write PNG copies (for a quick look)")
    ap.add_argument("--only", default="", help="comma-separated plots to redraw; the rest stay as they are")
    a = ap.parse_args()
    real_savefig = plt.Figure.savefig

    def savefig(fig, path, **kw):
        real_savefig(fig, path, dpi=110, **kw)
        if a.png:
            real_savefig(fig, path[:-4] + ".png", dpi=80)

    plt.Figure.savefig = savefig
    os.makedirs(a.out, exist_ok=True)
    tmp = tempfile.mkdtemp()
    only = set(x for x in a.only.split(",") if x)

    def want(name):
        return not only or name in only

    jsonl = os.path.join(a.out, "plots.jsonl")
    kept = []
    if only and os.path.exists(jsonl):
        for line in open(jsonl):
            try:
                if json.loads(line).get("scenario") not in only:
                    kept.append(line)
            except ValueError:
                pass
    log = open(jsonl, "w")
    log.writelines(kept)
    B = a.bench

    # --- pace: lateness of each grant against its ideal slot
    if want("pace"):
        rate = 10000
        fig, ax = plt.subplots(figsize=(8, 3.6))
        for strict, colour in ((False, "tab:blue"), (True, "tab:orange")):
            tr = os.path.join(tmp, "pace-%s.txt" % strict)
            r = run([B, "--scenario", "pace", "--rate", str(rate), "--n", "5000", "--strict=%s" % str(strict).lower(),
                     "--trace", tr], log)
            if r is None:
                continue
            t = read_trace(tr)
            late = [(x - i * 1e9 / rate) / 1e3 for i, x in enumerate(t)]
            ax.plot([i / rate for i in range(len(t))], late, ".", ms=1.5, color=colour, rasterized=True,
                    label="%s (gap error p50 %.1f %%, p99 %.0f %%)" % ("strict" if strict else "default",
                                                                       100 * r["gap_err_p50"], 100 * r["gap_err_p99"]))
        ax.set_xlabel("ideal time of the grant (s)")
        ax.set_ylabel("lateness (us)")
        ax.set_title("pace: one waiter, 10,000/s, burst 1: each grant against its slot")
        ax.legend(loc="upper right", markerscale=6, fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(a.out, "pace.svg"))

    # --- fanout: admitted per 10 ms
    if want("fanout"):
        fig, ax = plt.subplots(figsize=(8, 3.6))
        W, R = 100000, 100000
        for policy, colour in (("leaky", "tab:blue"), ("floor", "tab:gray")):
            tr = os.path.join(tmp, "fanout-%s.txt" % policy)
            r = run([B, "--scenario", "fanout", "--waiters", str(W), "--rate", str(R), "--policy", policy, "--trace", tr], log)
            if r is None:
                continue
            t = read_trace(tr)
            bins = {}
            for x in t:
                bins[x // 10_000_000] = bins.get(x // 10_000_000, 0) + 1
            xs = sorted(bins)
            ax.step([x / 100 for x in xs], [bins[x] * 100 for x in xs], where="post", color=colour, lw=1,
                    label="%s (wall %.3f s for an ideal %.3f s)" % ("sluice leaky_bucket" if policy == "leaky"
                                                                   else "Asio floor (a timer a waiter)",
                                                                   r["wall_s"], r["ideal_s"]))
        go = os.path.join(a.peers, "go", "run")
        if os.path.exists(go):
            r = run([go, "--scenario", "fanout", "--waiters", str(W), "--rate", str(R)], log)
            if r:
                ax.hlines(W / r["wall_s"], 0, r["wall_s"], colors="tab:green", lw=1.5,
                          label="Go x/time/rate: mean over its run (%.3f s)" % r["wall_s"])
        ax.axhline(R, color="black", lw=0.5, ls="--")
        ax.set_xlabel("time since the gate opened (s)")
        ax.set_ylabel("admitted per second (10 ms bins)")
        ax.set_title("fanout: 100,000 coroutine waiters at 100,000/s")
        ax.legend(loc="lower center", fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(a.out, "fanout.svg"))

    # --- keyed: ns per check against keys, and the run's own DRAM miss
    if want("keyed"):
        fig, ax = plt.subplots(figsize=(6, 3.6))
        chase = []
        for policy, key, colour, label in (("keyed", "string", "tab:blue", "sluice keyed<token_bucket>, string keys"),
                                           ("keyed", "u64", "tab:green", "sluice, std::uint64_t keys"),
                                           ("naive", "string", "tab:gray", "a map and a mutex (naive), string keys")):
            xs, ys = [], []
            for keys in (1000, 10000, 100000, 1000000):
                r = run([B, "--scenario", "keyed", "--keys", str(keys), "--dist", "uniform", "--ops", "2000000",
                         "--policy", policy, "--key", key], log)
                if r and "ns_per_op" in r:
                    xs.append(keys)
                    ys.append(r["ns_per_op"])
                    chase.append(r.get("chase_ns", 0))
            if xs:
                ax.plot(xs, ys, "o-", color=colour, label=label)
        if chase:
            c = sorted(chase)[len(chase) // 2]
            ax.axhline(c, color="black", lw=0.5, ls="--", label="one DRAM miss (pointer chase, median %.0f ns)" % c)
            ax.axhline(2 * c, color="black", lw=0.5, ls=":", label="two")
        ax.set_xscale("log")
        ax.set_xlabel("keys (uniform)")
        ax.set_ylabel("ns per check, one thread")
        ax.set_title("keyed: cost of a check against the number of keys")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(a.out, "keyed.svg"))

    # --- shared: each process's admissions per second (100 ms bins) on one Redis quota
    if want("shared"):
        tr = os.path.join(tmp, "shared.txt")
        r = run([B, "--scenario", "shared", "--procs", "4", "--concurrency", "32", "--rate", "1000", "--seconds", "3",
                 "--port", "6398", "--trace", tr], log)
        if r and os.path.exists(tr):
            per = {}
            for line in open(tr):
                p, i, n = (int(x) for x in line.split(","))
                per.setdefault(p, {})[i] = n
            fig, ax = plt.subplots(figsize=(8, 3.4))
            for p in sorted(per):
                xs = sorted(per[p])
                ax.step([x / 10 for x in xs], [per[p][x] * 10 for x in xs], where="post", lw=1,
                        label="process %d: %d admitted" % (p + 1, sum(per[p].values())))
            ax.axhline(1000 / len(per), color="black", lw=0.5, ls="--")
            ax.set_xlabel("time (s)")
            ax.set_ylabel("admitted per second (100 ms bins)")
            ax.set_title("shared: 4 processes x 32 callers, one redis::token_bucket of 1,000/s\n"
                         "%d admitted of %d allowed, %.0f decisions/s" % (r["admitted"], r["allowed"], r["decisions_per_s"]),
                         fontsize=9)
            ax.legend(fontsize=8, ncol=2)
            fig.tight_layout()
            fig.savefig(os.path.join(a.out, "shared.svg"))

    # --- bandwidth: shares of 100 connections
    if want("bandwidth"):
        r = run([B, "--scenario", "bandwidth", "--connections", "100", "--rate", "50MB/s", "--seconds", "5"], log)
        if r:
            fig, ax = plt.subplots(figsize=(6, 3.0))
            ax.bar(["cap", "achieved"], [r["cap_bytes_per_s"] / 1e6, r["achieved_bytes_per_s"] / 1e6],
                   color=["tab:gray", "tab:blue"])
            ax.set_ylabel("MB/s")
            ax.set_title("bandwidth: 100 connections sharing 50 MB/s\nshares %.3f-%.3f of equal, %.1f ms CPU per MB"
                         % (r["share_min"], r["share_max"], r["cpu_us_per_mb"] / 1e3), fontsize=9)
            fig.tight_layout()
            fig.savefig(os.path.join(a.out, "bandwidth.svg"))
    log.close()
    print("plots written to", os.path.relpath(a.out, ROOT))


if __name__ == "__main__":
    main()
