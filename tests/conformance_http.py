"""What the conformance scripts share: an HTTP request that returns every status (not only
2xx), and a wait for what a peer of theirs receives."""

import time
import urllib.error
import urllib.request


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
