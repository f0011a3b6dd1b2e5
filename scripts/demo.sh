#!/usr/bin/env bash
# Installs the dependencies, configures and builds sluice, then runs the pacing demo:
#   scripts/demo.sh                          # --rate 200 --seconds 3
#   scripts/demo.sh --rate 1000 --seconds 5  # any pace_demo flags
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

meson compile -C "$build" examples/pace_demo

(($# > 0)) || set -- --rate 200 --seconds 3
exec "$build/examples/pace_demo" "$@"
