#!/usr/bin/env bash
# Installs the build, test and benchmark dependencies of sluice on Debian 12 (bookworm),
# from Debian's own apt repositories only. Idempotent: when every package is already
# installed it makes no apt call at all. Needs root (or sudo) only when something is missing.
set -euo pipefail

packages=(
  g++
  meson
  ninja-build
  pkg-config
  libboost1.81-dev
  liburing-dev
  doctest-dev
  libbenchmark-dev
  redis-server          # also runs Sentinel (redis-server --sentinel): no redis-sentinel package needed
  libhiredis-dev
  python3
  gnuplot-nox
  cmake
  python3-prometheus-client
  doxygen
  curl
  wrk
  libxml2-dev           # the example crawler: HTML parsing
  liburiparser-dev      # the example crawler: URL resolution (RFC 3986)
  nginx-light           # the examples' end-to-end tests and benchmarks run against nginx
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [[ $status == installed ]] || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"

sudo=()
if ((EUID != 0)); then
  if command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
  else
    echo "install-deps: must run as root (or with sudo available) to install: ${missing[*]}" >&2
    exit 1
  fi
fi

export DEBIAN_FRONTEND=noninteractive
# nginx is run by the tests themselves, as this user, on a free port: its package must not
# start the system service (on port 80). A policy-rc.d that forbids it, while apt runs,
# unless the machine has one of its own.
policy=/usr/sbin/policy-rc.d
if [[ " ${missing[*]} " == *" nginx-light "* && ! -e $policy ]]; then
  "${sudo[@]}" sh -c "printf '#!/bin/sh\nexit 101\n' > $policy && chmod +x $policy"
  trap '"${sudo[@]}" rm -f "$policy"' EXIT
fi
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
