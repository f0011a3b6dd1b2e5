#!/usr/bin/env python3
"""Checks that no header of include/sluice includes one of a higher layer.

The rooms are the table of docs/architecture.md ("Rooms"), lowest layer first: a row
`| N | room | what it holds | `glob`, `glob`... |`. A header is in the room whose glob names
it most closely (an exact path over a pattern, a longer pattern over a shorter one). The
check fails, listing each offence, when a header includes one of a higher layer, when a
header is in no room (a header directly in a detail/ folder is in none: detail/ is split by
room), when it includes a sluice header that does not exist, or when a glob names no header.

Usage: check_layers.py [--root DIR] [--inject FROM:TO ...] [--self-test]
  --root DIR     the source tree (default: the parent of this script's folder)
  --inject A:B   pretend header A also includes B (shows that the check fails)
  --self-test    checks the tree as it is, then with an upward include injected, and
                 fails unless the first passes and the second fails
"""
import argparse
import fnmatch
import pathlib
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*<(sluice/[^>]+)>', re.M)
ROW = re.compile(r'^\|\s*(\d+)\s*\|\s*([^|]+?)\s*\|[^|]*\|([^|]+)\|\s*$')


def read_rooms(doc):
    rooms = []
    for line in doc.read_text().splitlines():
        m = ROW.match(line)
        if m:
            rooms.append((int(m.group(1)), m.group(2), re.findall(r'`([^`]+)`', m.group(3))))
    return rooms


def room_of(path, rooms):
    best = None
    for layer, name, globs in rooms:
        for g in globs:
            if fnmatch.fnmatchcase(path, g):
                score = (g == path, len(g))
                if best is None or score > best[0]:
                    best = (score, layer, name)
    return None if best is None else best[1:]


def check(root, inject):
    rooms = read_rooms(root / 'docs' / 'architecture.md')
    if not rooms:
        return ['no rooms in docs/architecture.md'], {}
    inc = root / 'include'
    headers = {f.relative_to(inc).as_posix(): INCLUDE.findall(f.read_text())
               for f in sorted(inc.glob('sluice/**/*.hpp'))}
    if (inc / 'sluice' / 'version.hpp.in').exists():
        headers['sluice/version.hpp'] = []
    for pair in inject:
        a, b = pair.split(':')
        headers.setdefault(a, []).append(b)

    problems = []
    where = {h: room_of(h, rooms) for h in headers}
    problems += [f'{h}: in no room (add it to the table of docs/architecture.md)'
                 for h, r in where.items() if r is None]
    for layer, name, globs in rooms:
        problems += [f'room {layer} {name}: `{g}` names no header'
                     for g in globs if not any(fnmatch.fnmatchcase(h, g) for h in headers)]
    for h, includes in headers.items():
        for t in includes:
            if t not in headers:
                problems.append(f'{h}: includes {t}, which does not exist')
            elif where[h] and where[t] and where[t][0] > where[h][0]:
                problems.append(f'{h} (layer {where[h][0]}, {where[h][1]}) includes {t} '
                                f'(layer {where[t][0]}, {where[t][1]}): a lower layer may not include a higher one')
    return problems, where


def report(problems, where):
    for p in problems:
        print(p)
    counts = {}
    for r in where.values():
        if r:
            counts[r] = counts.get(r, 0) + 1
    print('check_layers: ' + ', '.join(f'{l} {n}: {c}' for (l, n), c in sorted(counts.items())) +
          f'; {len(problems)} problem(s)')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--root', default=str(pathlib.Path(__file__).resolve().parent.parent))
    ap.add_argument('--inject', action='append', default=[])
    ap.add_argument('--self-test', action='store_true')
    args = ap.parse_args()
    root = pathlib.Path(args.root)
    if args.self_test:
        clean, _ = check(root, [])
        # The lowest room's error header including a named limiter: an upward include.
        bad, _ = check(root, ['sluice/error.hpp:sluice/keyed.hpp'])
        upward = [p for p in bad if 'may not include a higher one' in p]
        print(f'check_layers --self-test: tree {len(clean)} problem(s); '
              f'with an upward include injected {len(upward)} upward')
        return 0 if not clean and len(upward) == 1 else 1
    problems, where = check(root, args.inject)
    report(problems, where)
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
