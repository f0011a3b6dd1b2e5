#!/usr/bin/env python3
"""Checks that the documentation stays documentation: measured figures live in
benchmarks/RESULTS.md (and the commit messages), nowhere else.

    scripts/check_docs.py [--root DIR]     # exit status 1 and one line a finding when it fails
    scripts/check_docs.py --self-test      # shows that every check can fail

It checks:
- docs/guide.md has at most 1000 lines, CHANGELOG.md at most 250;
- the prose of docs/guide.md, CHANGELOG.md and README.md (outside code blocks and `code`)
  quotes no measured figure: a range or a decimal with a unit, a ratio such as 1.06x, a load
  average, a number of millions; a number with a unit of time, size or percentage only when
  ALLOWED lists it as a documented default or constant;
- every link from docs/guide.md to one of its own sections or to a section of
  benchmarks/RESULTS.md names a heading that exists;
- the comments of the headers under include/ carry no measurement: no range of ns, us, ms
  or %, no "about N ns", no "N % of a check", no "on the project's VM", no load average.
A figure that belongs in the documentation (a new default, say) goes into ALLOWED with the
constant it documents."""

import argparse
import os
import re
import sys
import tempfile

MAX_LINES = {"docs/guide.md": 1000, "CHANGELOG.md": 250}
PROSE_FILES = ("docs/guide.md", "CHANGELOG.md", "README.md")

# Documented defaults and constants that prose may quote (number, one space, unit). Each is
# the value of a named option or constant, not something a run measured.
ALLOWED = {
    "30 us",     # limiter_options: strict mode watches the clock for the last 30 us
    "50 us",     # tsc_clock::max_drift
    "200 us",    # limiter_options::coalesce, shared_options::coalesce
    "1 ms",      # limiter_options::coalesce_max, leaky_bucket::default_slack, nginx's resolution
    "2 ms",      # limiter_options::strict_threshold
    "5 ms",      # the lease book's least lead; redis::cluster's first retry pause
    "8 ms",      # tsc_clock's line
    "10 ms",     # keyed_options::tick
    "50 ms",     # connection_config::reconnect_min
    "100 ms",    # redis::cluster's longest retry pause
    "200 ms",    # shared_options::probe_interval
    "250 ms",    # sentinel_config::timeout
    "1 s",       # connection_config::connect_timeout and command_timeout
    "2 s",       # connection_config::reconnect_max
    "30 s",      # the example server's --idle-timeout-ms default
    "60 s",      # what it was before 0.2 (CHANGELOG)
    "16 KiB",    # throttled_stream::chunk() default
    "40 bytes",  # shm::keyed_gcra::max_key_size
}

NUM = r"\d+(?:[,']\d{3})*(?:\.\d+)?"
UNIT = r"(?:ns|us|µs|ms|s|min|h|%|B|KB|KiB|MB|MiB|GB|GiB|bytes)"
FIGURE = re.compile(r"(?<![\w.^/-])(" + NUM + r")\s?(" + UNIT + r")(?![\w/])")
RANGE = re.compile(r"(?<![\w.^])" + NUM + r"\s?(?:-|–|to)\s?" + NUM + r"\s?" + UNIT + r"(?![\w/])")
DECIMAL_RANGE = re.compile(r"(?<![\w.^])\d+\.\d+\s?(?:-|–|to)\s?\d+\.\d+(?![\w.])")
RATIO = re.compile(r"(?<![\w.^])\d+(?:\.\d+)?x(?![\w])")
PHRASES = re.compile(r"load average|\bload \d|\d\s?(?:million|thousand|billion)\b|on (?:this|the project's|a quiet|a loaded) (?:2-core )?(?:VM|machine)\b"
                     r"|\bdecisions?/s\b|\bns per (?:check|op|post|decision)\b", re.I)

HEADER_PATTERNS = (
    (re.compile(r"(?<![\w.^])\d+(?:\.\d+)?\s?(?:-|to)\s?\d+(?:\.\d+)?\s?(?:ns|us|µs|ms|%)(?![\w])"), "a measured range"),
    (re.compile(r"\b(?:about|around|roughly|~)\s?\d[\d,.]*\s?(?:ns|us|µs|ms|%|cycles|MB)(?!\w)", re.I), "an approximate measurement"),
    (re.compile(r"\d\s?% of (?:a|an|the|its) (?:check|decision|post|call|run|test|compile|heavy)", re.I), "a share of a measured cost"),
    (re.compile(r"\b\d+(?:\.\d+)?x (?:faster|slower|cheaper|costlier)\b", re.I), "a measured speed-up"),
    (re.compile(r"\b(?:half|twice|a third|a quarter|a fifth) the (?:cost|time)\b", re.I), "a measured speed-up"),
    (re.compile(r"\b(?:the project's|this|our) (?:2-core )?(?:VM|virtual machine|machine)\b", re.I), "a machine's anecdote"),
    (re.compile(r"load average|\bcallgrind\b", re.I), "a benchmark anecdote"),
)


def prose_lines(text):
    """(line number, line) outside fenced code blocks, with `code` spans blanked out."""
    fenced = False
    for i, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            yield i, re.sub(r"`[^`]*`", "``", line)


def figures(text):
    """The measured figures in a Markdown text: [(line number, figure)]."""
    found = []
    for i, line in prose_lines(text):
        for m in RANGE.finditer(line):
            found.append((i, m.group(0)))
        for m in DECIMAL_RANGE.finditer(line):
            found.append((i, m.group(0)))
        for m in RATIO.finditer(line):
            found.append((i, m.group(0)))
        for m in PHRASES.finditer(line):
            found.append((i, m.group(0)))
        for m in FIGURE.finditer(line):
            value = "%s %s" % (m.group(1), m.group(2))
            if value not in ALLOWED:
                found.append((i, m.group(0)))
    return sorted(set(found))


def slug(heading):
    """GitHub's anchor of a Markdown heading."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(text):
    return {slug(m.group(1)) for m in re.finditer(r"(?m)^#{1,6}\s+(.*)$", text)}


def comments(text):
    """(line number, comment text) of a C++ header: // and /* */ comments."""
    out = []
    in_block = False
    for i, line in enumerate(text.splitlines(), 1):
        if in_block:
            end = line.find("*/")
            out.append((i, line if end < 0 else line[:end]))
            in_block = end < 0
            continue
        # Lua and other text inside raw strings is code, not a comment: skip R"...( lines'
        # contents crudely by looking at // only outside string literals.
        stripped = re.sub(r'"(?:\\.|[^"\\])*"', '""', line)
        c = stripped.find("//")
        b = stripped.find("/*")
        if c >= 0 and (b < 0 or c < b):
            out.append((i, stripped[c:]))
        elif b >= 0:
            end = stripped.find("*/", b)
            out.append((i, stripped[b:] if end < 0 else stripped[b:end]))
            in_block = end < 0
    return out


def check(root):
    problems = []

    def read(rel):
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            return f.read()

    for rel, most in MAX_LINES.items():
        n = len(read(rel).splitlines())
        if n > most:
            problems.append("%s: %d lines, at most %d" % (rel, n, most))

    for rel in PROSE_FILES:
        if not os.path.exists(os.path.join(root, rel)):
            continue
        for line, fig in figures(read(rel)):
            problems.append("%s:%d: a measured figure in the prose: %r (figures live in benchmarks/RESULTS.md; "
                            "a documented default goes into ALLOWED)" % (rel, line, fig))

    guide = read("docs/guide.md")
    results = read("benchmarks/RESULTS.md") if os.path.exists(os.path.join(root, "benchmarks/RESULTS.md")) else ""
    own, theirs = anchors(guide), anchors(results)
    for i, line in enumerate(guide.splitlines(), 1):
        for m in re.finditer(r"\]\(([^)\s]*)#([^)\s]+)\)", line):
            target, anchor = m.group(1), m.group(2)
            if target == "":
                if anchor not in own:
                    problems.append("docs/guide.md:%d: no section #%s in the guide" % (i, anchor))
            elif target.endswith("benchmarks/RESULTS.md"):
                if anchor not in theirs:
                    problems.append("docs/guide.md:%d: no section #%s in benchmarks/RESULTS.md" % (i, anchor))

    for dirpath, _, files in os.walk(os.path.join(root, "include")):
        for name in sorted(files):
            if not name.endswith((".hpp", ".hpp.in", ".h")):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            with open(path, encoding="utf-8") as f:
                text = f.read()
            for i, comment in comments(text):
                for pattern, what in HEADER_PATTERNS:
                    m = pattern.search(comment)
                    if m:
                        problems.append("%s:%d: %s in a comment: %r (measurements live in benchmarks/RESULTS.md "
                                        "and commit messages)" % (rel, i, what, m.group(0)))
    return problems


def self_test():
    """Each check fails on a file made to fail it, and passes on the same file without the fault."""
    guide_ok = "# g\n\n## 1. A\n\nSee [a](#1-a) and [r](../benchmarks/RESULTS.md#try-x). `coalesce` is 200 us.\n"
    cases = [
        ("a long guide", {"docs/guide.md": guide_ok + "x\n" * 1000}),
        ("a long changelog", {"CHANGELOG.md": "- x\n" * 251}),
        ("a range in the guide", {"docs/guide.md": guide_ok + "It took 12.6 to 17.4 ns.\n"}),
        ("a figure not allowed", {"docs/guide.md": guide_ok + "A check takes 13 ns.\n"}),
        ("a ratio", {"docs/guide.md": guide_ok + "The shm bucket is 1.06x the in-process one.\n"}),
        ("a decimal range", {"docs/guide.md": guide_ok + "shares 0.97-1.07 of equal\n"}),
        ("a percentage", {"README.md": "# r\n\nThe fleet admitted 97 % of the quota.\n"}),
        ("a load average", {"CHANGELOG.md": "- faster (load average 4.7)\n"}),
        ("a missing RESULTS.md section", {"docs/guide.md": guide_ok.replace("#try-x", "#nope")}),
        ("a missing guide section", {"docs/guide.md": guide_ok.replace("#1-a", "#2-b")}),
        ("a header range", {"include/sluice/x.hpp": "// a call here cost 30-45 % of a check\n"}),
        ("a header anecdote", {"include/sluice/x.hpp": "/// on the project's 2-core VM about 80 ns a post\n"}),
    ]
    base = {"docs/guide.md": guide_ok, "CHANGELOG.md": "# c\n\n- `coalesce_max` (1 ms)\n",
            "README.md": "# r\n\n```sh\nsluice-bench --rate 100000 # 12.5 ns\n```\n",
            "benchmarks/RESULTS.md": "# r\n\n## try: x\n", "include/sluice/x.hpp": "// coalesce: 200 us\nint x;\n"}

    def run(files):
        with tempfile.TemporaryDirectory() as d:
            for rel, text in files.items():
                os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
                with open(os.path.join(d, rel), "w", encoding="utf-8") as f:
                    f.write(text)
            return check(d)

    failed = 0
    clean = run(base)
    if clean:
        print("self-test: the clean files fail:\n  " + "\n  ".join(clean))
        failed += 1
    for name, change in cases:
        got = run(dict(base, **change))
        print("self-test: %-32s %s" % (name, ("caught: " + got[0]) if got else "NOT CAUGHT"))
        failed += not got
    print("self-test: %s" % ("every check can fail" if not failed else "%d check(s) broken" % failed))
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--self-test", action="store_true", help="show that every check can fail")
    a = ap.parse_args()
    if a.self_test:
        sys.exit(self_test())
    problems = check(a.root)
    for p in problems:
        print(p)
    print("check_docs: %s" % ("OK" if not problems else "%d problem(s)" % len(problems)))
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
