#!/usr/bin/env bash
# Installs the dependencies, configures and builds sluice, then runs the main demo: the
# example crawler against two example HTTP servers it starts on 127.0.0.1 (two "hosts"),
# each limiting clients to 30/s with a burst of 10, the crawler allowed 40/s per host: it
# reads each host's robots.txt, follows the servers' RateLimit fields to 30/s per host
# without a refusal, and fetches all 202 pages, with a live progress line and a summary
# (about 4 s).
#   scripts/demo.sh                                      # the scenario above
#   scripts/demo.sh --per-host-rate 20/s --max-pages 50  # any crawler flags instead
#   scripts/demo.sh pace --rate 1000 --seconds 5         # the pacing demo (pace_demo)
# Works from any directory; idempotent. SLUICE_BUILD_DIR selects the build directory
# (default: build, relative to the repository root).
set -euo pipefail

cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
build=${SLUICE_BUILD_DIR:-build}

scripts/install-deps.sh

if [[ -f $build/meson-private/coredata.dat ]]; then
  meson setup --reconfigure "$build" -Dexamples=true >/dev/null
else
  meson setup "$build" -Dexamples=true
fi

if [[ ${1:-} == pace ]]; then
  shift
  meson compile -C "$build" examples/pace_demo
  (($# > 0)) || set -- --rate 200 --seconds 3
  exec "$build/examples/pace_demo" "$@"
fi

meson compile -C "$build" examples/server examples/crawler
(($# > 0)) || set -- --spawn-servers 2 --per-host-rate 40/s \
  --server-args "--pages 100 --rate 30/s --burst 10"
exec "$build/examples/crawler" "$@"
