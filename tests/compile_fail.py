#!/usr/bin/env python3
"""Compiles each tests/compile_fail/*.cpp (syntax only) and checks the outcome it expects.

A case names its outcome in `// expect:` lines: `(compiles)` for the control, which must
compile; otherwise it must fail to compile, and every other `expect:` line is a regular
expression its diagnostics must match (the concept or requirement that rejected the type),
so that a case failing for another reason (a typo, a missing header) fails the test.

Usage: compile_fail.py DIR -- COMPILER ARGS...
"""
import pathlib
import re
import subprocess
import sys


def main() -> int:
    split = sys.argv.index("--")
    folder = pathlib.Path(sys.argv[1])
    compiler = sys.argv[split + 1:]
    cases = sorted(folder.glob("*.cpp"))
    if not cases:
        print(f"no cases in {folder}")
        return 1
    failed = 0
    for case in cases:
        expects = re.findall(r"^// expect: (.*)$", case.read_text(), re.M)
        if not expects:
            print(f"FAIL {case.name}: no `// expect:` line")
            failed += 1
            continue
        run = subprocess.run(compiler + ["-fsyntax-only", "-fconcepts-diagnostics-depth=2", str(case)],
                             capture_output=True, text=True)
        if expects == ["(compiles)"]:
            ok = run.returncode == 0
            why = "" if ok else "the control does not compile:\n" + run.stderr
        elif run.returncode == 0:
            ok, why = False, "compiled, but the concept should have rejected it"
        else:
            missing = [e for e in expects if not re.search(e, run.stderr)]
            ok = not missing
            why = "" if ok else f"failed, but not for the expected reason (no match for {missing}):\n{run.stderr[-3000:]}"
        print(f"{'ok  ' if ok else 'FAIL'} {case.name}" + ("" if ok else f": {why}"))
        failed += not ok
    print(f"{len(cases) - failed} of {len(cases)} cases as expected")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
