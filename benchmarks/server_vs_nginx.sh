#!/usr/bin/env bash
# The example server beside nginx's limit_req at the same rate and burst, under the same
# load: `wrk -t2 -c50 -d10s` against each, one after the other, on 127.0.0.1, with 1, 2 and
# 4 worker processes each.
#
#   benchmarks/server_vs_nginx.sh [BUILD_DIR] [RATE_PER_S] [BURST] [WORKERS...]
#                                          (defaults: build 10 10 1 2 4)
#
# nginx (Debian nginx-light) and wrk are installed with apt-get when missing (root), with
# a policy-rc.d that keeps the package from starting its system service; nginx runs here
# in the foreground, as this user, from a configuration in a temporary directory, and is
# stopped by pid. nginx: `limit_req zone=z burst=B nodelay` at `rate=Rr/s` on one client
# address, `worker_processes N`, the zone in shared memory for all its workers; sluice: the
# example server at --rate R/s --burst B, with --workers N when N > 1 (its table in shared
# memory for all its workers). With N > 1 both listen with SO_REUSEPORT (nginx's
# `reuseport`), so the kernel spreads wrk's connections over the workers alike.
# Admitted = 2xx answers; "expected" is burst + rate x the run's seconds, what one exact
# token bucket admits to a client that always asks (wrk gives the seconds to 10 ms: at
# 1000/s, expected is known to +-10).
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
build=${1:-build}
rate=${2:-10}
burst=${3:-10}
shift $(($# < 3 ? $# : 3))
workers=("$@")
((${#workers[@]})) || workers=(1 2 4)

need=()
command -v nginx >/dev/null || [[ -x /usr/sbin/nginx ]] || need+=(nginx-light)
command -v wrk >/dev/null || need+=(wrk)
if ((${#need[@]})); then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    rm -f /usr/sbin/policy-rc.d
fi
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)

tmp=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Waits until something accepts on 127.0.0.1:$1 (nginx says nothing when it is ready).
wait_port() {
    for _ in $(seq 200); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.05
    done
    echo "nothing listens on port $1" >&2
    return 1
}

start_nginx() {   # N: sets nport, npid
    nport=$(free_port)
    local dir=$tmp/nginx-$1 reuse=
    ((1 < $1)) && reuse=" reuseport"
    mkdir -p "$dir/www"
    echo ok > "$dir/www/x"
    chmod -R a+rX "$tmp"   # nginx workers run as another user when started by root
    cat > "$dir/nginx.conf" <<CONF
daemon off;
worker_processes $1;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $dir/body;
    proxy_temp_path $dir/proxy;
    fastcgi_temp_path $dir/fastcgi;
    uwsgi_temp_path $dir/uwsgi;
    scgi_temp_path $dir/scgi;
    limit_req_zone \$binary_remote_addr zone=z:1m rate=${rate}r/s;
    limit_req_status 429;
    server {
        listen 127.0.0.1:$nport$reuse;
        # A static file: \`return\` would answer in the rewrite phase, before limit_req runs.
        location / { limit_req zone=z burst=$burst nodelay; root $dir/www; }
    }
}
CONF
    "$nginx_bin" -c "$dir/nginx.conf" -p "$dir" &
    npid=$!
    pids+=("$npid")
    wait_port "$nport"
}

start_sluice() {   # N: sets sport, spid
    local flag=()
    ((1 < $1)) && flag=(--workers "$1")
    "$build/examples/server" --port 0 --rate "$rate/s" --burst "$burst" "${flag[@]}" > "$tmp/server-$1.out" &
    spid=$!
    pids+=("$spid")
    for _ in $(seq 100); do [[ -s $tmp/server-$1.out ]] && break; sleep 0.05; done
    sport=$(sed -n 's/^listening on 127.0.0.1:\([0-9]*\)$/\1/p' "$tmp/server-$1.out")
    wait_port "$sport"
}

stop() {   # PID: SIGTERM, and wait for it (the sluice parent and nginx's master stop their workers)
    kill "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}

run() {   # NAME URL
    local out total non2xx secs admitted
    out=$(wrk -t2 -c50 -d10s "$2")
    total=$(sed -n 's/^ *\([0-9]*\) requests in \([0-9.]*\)s.*/\1/p' <<<"$out")
    secs=$(sed -n 's/^ *[0-9]* requests in \([0-9.]*\)s.*/\1/p' <<<"$out")
    non2xx=$(sed -n 's/^ *Non-2xx or 3xx responses: \([0-9]*\).*/\1/p' <<<"$out")
    admitted=$((total - ${non2xx:-0}))
    printf '%-34s %8d requests in %ss, %5d admitted (expected %s), %.2f/s after the burst (limit %s/s, burst %s)\n' \
        "$1" "$total" "$secs" "$admitted" "$(python3 -c "print(round($burst + $rate * $secs, 1))")" \
        "$(python3 -c "print(($admitted - $burst) / $secs)")" "$rate" "$burst"
}

echo "machine: $(nproc) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), Linux $(uname -r)"
echo "load: wrk -t2 -c50 -d10s, one client address; admitted = 2xx answers; $(uptime | sed 's/^ *//')"
nginx_version=$("$nginx_bin" -v 2>&1 | sed 's/.*\///')
for n in "${workers[@]}"; do
    start_nginx "$n"
    run "nginx $nginx_version limit_req, $n worker$( ((n > 1)) && echo s)" "http://127.0.0.1:$nport/x"
    stop "$npid"
    start_sluice "$n"
    run "sluice server, $n worker$( ((n > 1)) && echo s)" "http://127.0.0.1:$sport/api/x"
    stop "$spid"
done
echo "after: $(uptime | sed 's/^ *//')"
