#!/usr/bin/env bash
# The example server beside nginx's limit_req at the same rate and burst, under the same
# load: `wrk -t2 -c50 -d10s` against each, one after the other, on 127.0.0.1.
#
#   benchmarks/server_vs_nginx.sh [BUILD_DIR] [RATE_PER_S] [BURST]   (defaults: build 10 10)
#
# nginx (Debian nginx-light) and wrk are installed with apt-get when missing (root), with
# a policy-rc.d that keeps the package from starting its system service; nginx runs here
# in the foreground, as this user, from a configuration in a temporary directory, and is
# stopped by pid. nginx: `limit_req zone=z burst=B nodelay` at `rate=Rr/s` on one client
# address; sluice: the example server at --rate R/s --burst B. Admitted = 200 answers.
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
build=${1:-build}
rate=${2:-10}
burst=${3:-10}

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

# --- nginx
nport=$(free_port)
mkdir -p "$tmp/nginx/www"
echo ok > "$tmp/nginx/www/x"
chmod -R a+rX "$tmp"   # nginx workers run as another user when started by root
cat > "$tmp/nginx/nginx.conf" <<CONF
daemon off;
worker_processes 1;
pid $tmp/nginx/nginx.pid;
error_log $tmp/nginx/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $tmp/nginx/body;
    proxy_temp_path $tmp/nginx/proxy;
    fastcgi_temp_path $tmp/nginx/fastcgi;
    uwsgi_temp_path $tmp/nginx/uwsgi;
    scgi_temp_path $tmp/nginx/scgi;
    limit_req_zone \$binary_remote_addr zone=z:1m rate=${rate}r/s;
    limit_req_status 429;
    server {
        listen 127.0.0.1:$nport;
        # A static file: \`return\` would answer in the rewrite phase, before limit_req runs.
        location / { limit_req zone=z burst=$burst nodelay; root $tmp/nginx/www; }
    }
}
CONF
"$nginx_bin" -c "$tmp/nginx/nginx.conf" -p "$tmp/nginx" &
pids+=($!)

# --- the example server
"$build/examples/server" --port 0 --rate "$rate/s" --burst "$burst" > "$tmp/server.out" &
pids+=($!)
for _ in $(seq 100); do [[ -s $tmp/server.out ]] && break; sleep 0.05; done
sport=$(sed -n 's/^listening on 127.0.0.1:\([0-9]*\)$/\1/p' "$tmp/server.out")
sleep 0.3   # nginx's start (no readiness line to wait for)

run() {   # NAME URL
    local out total non2xx secs admitted
    out=$(wrk -t2 -c50 -d10s "$2")
    total=$(sed -n 's/^ *\([0-9]*\) requests in \([0-9.]*\)s.*/\1/p' <<<"$out")
    secs=$(sed -n 's/^ *[0-9]* requests in \([0-9.]*\)s.*/\1/p' <<<"$out")
    non2xx=$(sed -n 's/^ *Non-2xx or 3xx responses: \([0-9]*\).*/\1/p' <<<"$out")
    admitted=$((total - ${non2xx:-0}))
    printf '%-28s %8d requests in %ss, %5d admitted (%.2f/s after the burst; limit %s/s, burst %s)\n' \
        "$1" "$total" "$secs" "$admitted" "$(python3 -c "print(($admitted - $burst) / $secs)")" "$rate" "$burst"
}
echo "machine: $(nproc) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), Linux $(uname -r)"
echo "load: wrk -t2 -c50 -d10s, one client address; admitted = 2xx answers"
run "nginx $("$nginx_bin" -v 2>&1 | sed 's/.*\///') limit_req" "http://127.0.0.1:$nport/x"
run "sluice example server" "http://127.0.0.1:$sport/api/x"
