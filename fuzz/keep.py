#!/usr/bin/env python3
"""The fewest inputs of a campaign's corpus that run lines of a target's fuzz-covers files
its kept corpus does not (greedy: the input adding most lines first, the smaller on a tie),
copied into fuzz/corpus/TARGET under their own names. Needs the coverage build that
`scripts/fuzz.sh --coverage TARGET` makes.

    python3 fuzz/keep.py TARGET DIR...     # DIR: a campaign's corpus, e.g. ~/sluice-fuzz/TARGET
    python3 fuzz/keep.py -n TARGET DIR...  # only say which
"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, "build-fuzz-coverage")


def covered_lines(binary, covers, inputs):
    """(file, line) of `covers` that `inputs` run, from a profile of those inputs alone."""
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, LLVM_PROFILE_FILE=os.path.join(d, "%p.profraw"))
        for i in range(0, len(inputs), 256):
            subprocess.run([binary, "-runs=0"] + inputs[i:i + 256], env=env, capture_output=True)
        prof = os.path.join(d, "all.profdata")
        subprocess.run(["llvm-profdata-14", "merge", "-sparse", "-o", prof] + glob.glob(os.path.join(d, "*.profraw")),
                       check=True)
        objects = []   # the libraries of the build the target loads (as scripts/fuzz.sh)
        for line in subprocess.run(["ldd", binary], capture_output=True, text=True).stdout.splitlines():
            words = line.split()
            if len(words) > 2 and words[2].startswith(BUILD + "/"):
                objects += ["-object", words[2]]
        shown = subprocess.run(["llvm-cov-14", "show", "-instr-profile=" + prof, binary] + objects,
                               capture_output=True, text=True, check=True).stdout
    got, current = set(), None
    for line in shown.splitlines():
        if line.startswith("/") and line.endswith(":"):
            current = line[:-1] if line[:-1] in covers else None
        elif current and line.count("|") >= 2:
            number, count = line.split("|")[:2]
            if number.strip().isdigit() and count.strip() not in ("", "0"):
                got.add((current, int(number)))
    return got


def main(args):
    dry = args[:1] == ["-n"]
    args = args[1:] if dry else args
    if len(args) < 2:
        sys.exit(__doc__)
    target, dirs = args[0], args[1:]
    kept = os.path.join(ROOT, "fuzz", "corpus", target)
    binary = os.path.join(BUILD, "fuzz", "fuzz_" + target)
    with open(os.path.join(ROOT, "fuzz", target + ".cpp")) as f:
        first = f.readline()
    if not first.startswith("// fuzz-covers:") or not os.path.exists(binary):
        sys.exit("keep: fuzz/%s.cpp names no fuzz-covers files, or %s is not built "
                 "(scripts/fuzz.sh --coverage %s)" % (target, binary, target))
    covers = {os.path.realpath(os.path.join(ROOT, f)) for f in first.split(":", 1)[1].split()}
    have = covered_lines(binary, covers, [os.path.join(kept, f) for f in os.listdir(kept)])
    gains = {}
    for d in dirs:
        for name in os.listdir(d):
            if not os.path.exists(os.path.join(kept, name)):
                path = os.path.join(d, name)
                gains[path] = covered_lines(binary, covers, [path]) - have
    while gains:
        best = max(gains, key=lambda p: (len(gains[p]), -os.path.getsize(p)))
        if not gains[best]:
            break
        added = gains.pop(best)
        for p in gains:
            gains[p] -= added
        print("%s: %d more lines" % (best, len(added)))
        if not dry:
            shutil.copy(best, kept)


if __name__ == "__main__":
    main(sys.argv[1:])
