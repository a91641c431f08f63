"""What the conformance scripts share: a config written for idem, a real `idem serve` started on it, a peer of
theirs served on loopback, an HTTP request that returns every status (not only 2xx), and a
wait for what a peer receives."""

import http.server
import os
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request


def write_config(tmp, rest, port=0):
    """An idem config in the directory `tmp`, listening on loopback at `port` (0: a free one)
    with its data under `tmp`, then `rest` (TOML); its path."""
    path = os.path.join(tmp, "idem.toml")
    with open(path, "w") as f:
        f.write(f'listen = "127.0.0.1:{port}"\ndata_dir = "{tmp}/data"\n{rest}')
    return path


def free_port():
    """A loopback port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fresh_database(prefix):
    """A new database `idem_test_<prefix>_<pid>` on the local server (127.0.0.1:5432, user
    postgres; dropped by `scripts/test`'s sweep); its URL."""
    name = f"idem_test_{prefix}_{os.getpid()}"
    for sql in (f"DROP DATABASE IF EXISTS {name}", f"CREATE DATABASE {name}"):
        subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-qc", sql], check=True,
                       env=dict(os.environ, PGOPTIONS="-c client_min_messages=warning"))
    return f"postgres://postgres@127.0.0.1:5432/{name}"


def start_idem(binary, config, env=None):
    """`binary serve --config config` (with `env` added to the environment), and the base URL
    it prints once it listens."""
    idem = subprocess.Popen([binary, "serve", "--config", config], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True,
                            env=dict(os.environ, **(env or {})))
    return idem, idem.stdout.readline().strip().removeprefix("idem listening on ")


def serve(handler):
    """A server of `handler` on a free loopback port, in a thread of its own, and its URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def request(url, body=None, headers=None, method="GET"):
    """The status, lower-cased headers and body of a request."""
    req = urllib.request.Request(url, data=body, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


def wait_for(items, n, timeout=10):
    """How many `items` there are once there are `n`, or `timeout` seconds have passed."""
    deadline = time.time() + timeout
    while len(items) < n and time.time() < deadline:
        time.sleep(0.05)
    return len(items)
