"""nginx (Debian's nginx-light) for the examples' tests and benchmarks: a static site of
ordinary HTML pages written the many ways real pages link (relative, single-quoted,
unquoted, upper-case, &amp;), and an nginx started on 127.0.0.1 in the foreground as
this user, from a configuration in a temporary directory, stopped by pid.

    site = write_site(dir, pages=300)
    n = Nginx(dir, limit="rate=20r/s", status=429, retry_after=1)
    ... n.port ... n.access_log() ...
    n.stop()
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)

BIG_FILE_BYTES = 20 * 1024 * 1024


def write_site(root, pages=300, big_file=True):
    """Writes `pages` HTML pages under root (index.html, dir/index.html, q.html and
    d<k>/p<i>.html), every one reachable from / only through relative links of every
    form, plus robots.txt (Disallow: /private/), a private page, a 20 MB binary and a
    directory reached through a 301 (/dir -> /dir/). Returns a dict: 'pages' (the request
    targets of the HTML pages), 'private', 'big', 'redirect', 'query'."""
    os.makedirs(os.path.join(root, "dir"), exist_ok=True)
    os.makedirs(os.path.join(root, "private"), exist_ok=True)
    content = pages - 3   # index.html, dir/index.html and q.html are pages too
    assert content >= 1
    dirs = min(10, content)

    def path(i):
        return "d%d/p%d.html" % (i % dirs, i)

    styles = [
        lambda h, t: '<a href="%s">%s</a>' % (h, t),
        lambda h, t: "<a href='%s'>%s</a>" % (h, t),
        lambda h, t: "<a href=%s>%s</a>" % (h, t),
        lambda h, t: '<A HREF="%s">%s</A>' % (h, t),
        lambda h, t: '<a class="x"\n   href = "%s" >%s</a>' % (h, t),
    ]
    for i in range(content):
        here = path(i)
        links = []
        for k, j in enumerate((2 * i + 1, 2 * i + 2, i)):   # a binary tree, and the page itself
            if j >= content:
                continue
            there = path(j)
            href = ("./" + os.path.basename(there)) if os.path.dirname(there) == os.path.dirname(here) \
                else "../" + there
            links.append(styles[(i + k) % len(styles)](href, "page %d" % j))
        if i == 7:
            links.append('<a href="../private/secret.html">private</a>')
        if i == 11:
            links.append('<a href="/d0/p0.html#top">fragment</a> <a href="mailto:x@example.com">mail</a>')
        body = "<!DOCTYPE html>\n<html><head><title>page %d</title></head><body>\n%s\n</body></html>\n" % (
            i, "\n".join(links))
        os.makedirs(os.path.join(root, os.path.dirname(here)), exist_ok=True)
        with open(os.path.join(root, here), "w") as f:
            f.write(body)
    index = ['<a href="d0/p0.html">start</a>', '<a href="dir">a directory</a>',
             '<a href="q.html?x=1&amp;y=2">a query</a>']
    if big_file:
        index.append('<a href="big.bin">a large file</a>')
    with open(os.path.join(root, "index.html"), "w") as f:
        f.write("<html><body>\n%s\n</body></html>\n" % "\n".join(index))
    with open(os.path.join(root, "dir", "index.html"), "w") as f:
        f.write("<html><body><a href='../d0/p0.html'>back</a></body></html>\n")
    with open(os.path.join(root, "q.html"), "w") as f:
        f.write("<html><body>query page</body></html>\n")
    with open(os.path.join(root, "private", "secret.html"), "w") as f:
        f.write("<html><body>not for crawlers</body></html>\n")
    with open(os.path.join(root, "robots.txt"), "w") as f:
        f.write("User-agent: *\nDisallow: /private/\n")
    if big_file:
        with open(os.path.join(root, "big.bin"), "wb") as f:
            f.truncate(BIG_FILE_BYTES)
    return {
        "pages": {"/", "/dir/", "/q.html?x=1&y=2"} | {"/" + path(i) for i in range(content)},
        "private": "/private/secret.html",
        "big": "/big.bin",
        "redirect": "/dir",
        "query": "/q.html?x=1&y=2",
    }


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Nginx:
    """nginx serving `root` on 127.0.0.1 behind `limit_req zone=z <burst>` at `rate`
    (e.g. "20r/s"); refused requests get `status` (503 is nginx's default), with
    `Retry-After: <retry_after>` when it is given. The access log has one line per request:
    `<msec> <status> <request_uri> <bytes_sent>`."""

    def __init__(self, root, rate="20r/s", burst=None, status=503, retry_after=None, nodelay=False):
        if NGINX is None:
            raise RuntimeError("nginx is not installed (Debian: apt-get install nginx-light)")
        self.dir = tempfile.mkdtemp(prefix="sluice-nginx-")
        self.port = free_port()
        self.log = os.path.join(self.dir, "access.log")
        os.chmod(self.dir, 0o755)
        # nginx's workers run as nobody when started by root: let them read the site.
        for d, _, files in os.walk(root):
            os.chmod(d, 0o755)
            for f in files:
                os.chmod(os.path.join(d, f), 0o644)
        p = root
        while p not in ("/", ""):
            os.chmod(p, os.stat(p).st_mode | 0o005)
            p = os.path.dirname(p)
        req = "limit_req zone=z%s%s;" % (" burst=%d" % burst if burst else "", " nodelay" if nodelay else "")
        refused = ""
        if retry_after is not None:
            # Only the refusals carry Retry-After (add_header in the location would put it on
            # every answer).
            refused = "error_page %d = @refused;\n        location @refused { add_header Retry-After %d always; " \
                      "return %d; }" % (status, retry_after, status)
        conf = os.path.join(self.dir, "nginx.conf")
        with open(conf, "w") as f:
            f.write("""daemon off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log error;
events {{ worker_connections 1024; }}
http {{
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    log_format t '$msec $status $request_uri $bytes_sent';
    access_log {log} t;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    limit_req_zone $binary_remote_addr zone=z:1m rate={rate};
    limit_req_status {status};
    server {{
        listen 127.0.0.1:{port};
        root {root};
        location / {{ {req} }}
        {refused}
    }}
}}
""".format(d=self.dir, log=self.log, rate=rate, status=status, port=self.port, root=os.path.abspath(root), req=req,
           refused=refused))
        self.proc = subprocess.Popen([NGINX, "-c", conf, "-p", self.dir], stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("nginx exited: %s" % self.proc.stderr.read().decode())
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.02)
        else:
            raise RuntimeError("nginx did not listen within 10 s")
        # The readiness probe went through limit_req's zone? No: a bare connect is no request.
        time.sleep(0.1)

    def access_log(self):
        """[(seconds, status, target, bytes)], times as nginx logged them (ms precision)."""
        rows = []
        with open(self.log) as f:
            for line in f:
                t, status, target, size = line.split()
                rows.append((float(t), int(status), target, int(size)))
        return rows

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)   # graceful: the log is complete when it exits
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
