#!/usr/bin/env bash
# Installs the dependencies, configures and builds sluice, then runs the whole test suite:
#   scripts/test.sh                      # every test
#   scripts/test.sh --suite policy       # extra arguments go to `meson test`
# Works from any directory; idempotent. SLUICE_BUILD_DIR selects the build directory
# (default: build, relative to the repository root). Warnings are not errors here, as in
# any default build (a newer compiler must not stop a user); an existing build dir keeps
# its options, so CI configures it with -Dwerror=true before calling this.
set -euo pipefail

cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
build=${SLUICE_BUILD_DIR:-build}

scripts/install-deps.sh

if [[ -f $build/meson-private/coredata.dat ]]; then
  meson setup --reconfigure "$build" -Dtests=true >/dev/null
else
  meson setup "$build" -Dtests=true
fi

meson compile -C "$build"
exec meson test -C "$build" --print-errorlogs "$@"
