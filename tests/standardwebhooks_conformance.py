"""Conformance with the third-party `standardwebhooks` library: it signs the signals we accept
and verifies every callback we send. Runs a real `idem serve` (the binary given as argv[1]) and
a receiver built on the library. Prints `N passed, M failed` and exits non-zero on a failure."""

import http.server
import json
import sys
import tempfile
import time
from datetime import datetime, timezone

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from conformance_http import request, serve, start_idem, wait_for, write_config

SIGNING = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
CALLBACK_OLD = "whsec_b2xkLWNhbGxiYWNrLXNlY3JldA"  # unpadded, as some tools write them
CALLBACK_NEW = "whsec_bmV3LWNhbGxiYWNrLXNlY3JldC0yMDI2"
results = {"passed": 0, "failed": 0}


def check(name, ok, detail=""):
    results["passed" if ok else "failed"] += 1
    print(f"{'ok  ' if ok else 'FAIL'} {name} {detail}")


callbacks = []


class Receiver(http.server.BaseHTTPRequestHandler):
    attempts = {}

    def do_POST(self):
        body = self.rfile.read(int(self.headers["content-length"]))
        headers = {k: v for k, v in self.headers.items()}
        verdicts = []
        for secret in (CALLBACK_OLD, CALLBACK_NEW):
            try:
                Webhook(secret).verify(body, headers)
                verdicts.append(True)
            except WebhookVerificationError:
                verdicts.append(False)
        callbacks.append((self.path, headers, body, verdicts))
        n = Receiver.attempts.get(self.path, 0) + 1
        Receiver.attempts[self.path] = n
        # /flaky fails its first attempt, so a retry is verified too.
        status = 503 if self.path == "/flaky" and n == 1 else 200
        self.send_response(status)
        self.end_headers()

    def log_message(self, *args):
        pass


def main():
    binary = sys.argv[1]
    server, recv = serve(Receiver)
    with tempfile.TemporaryDirectory() as tmp:
        config = write_config(tmp, f"""
[idempotency]
key_secret = "conformance-key-secret-0123456789"
[delivery]
retry_interval = "300ms"
[tenants.acme]
api_key = "sk_acme_test_key"
signing_secret = "{SIGNING}"
callback_secret = ["{CALLBACK_OLD}", "{CALLBACK_NEW}"]
[tenants.acme.playbooks.sim_swap]
decision = "deny"
actions = [ {{ name = "lock_account", url = "{recv}/lock" }}, {{ name = "open_case", url = "{recv}/flaky" }} ]
""")
        idem, base = start_idem(binary, config)
        try:
            body = json.dumps({"type": "sim_swap", "subject": "+447700900123",
                               "metadata": {"risk": 97}}).encode()
            key = f"evt_{time.time_ns()}"
            now = datetime.now(tz=timezone.utc)
            signature = Webhook(SIGNING).sign(key, now, body.decode())
            headers = {"Authorization": "Bearer sk_acme_test_key", "Content-Type": "application/json",
                       "Idempotency-Key": key, "webhook-id": key,
                       "webhook-timestamp": str(int(now.timestamp())),
                       "webhook-signature": signature}
            status, _, first = request(base + "/v1/signals", body, headers, "POST")
            check("a request signed by the library is accepted", status == 201, str(status))
            status, h, again = request(base + "/v1/signals", body, headers, "POST")
            replayed = h.get("idempotent-replayed")
            check("the retry is replayed byte for byte", again == first and replayed == "true")
            bad = dict(headers, **{"webhook-signature": Webhook(CALLBACK_NEW).sign(key, now, body.decode())})
            status, _, _ = request(base + "/v1/signals", body, bad, "POST")
            check("a signature under another secret is refused", status == 401, str(status))

            n = wait_for(callbacks, 3)
            check("each action called back, the flaky one retried", n == 3, str(n))
            for path, h, cb_body, verdicts in callbacks:
                check(f"callback {path} verifies under both rotated secrets", verdicts == [True, True])
                envelope = json.loads(cb_body)
                check(f"callback {path} carries the envelope", envelope["type"] == "decision.deny"
                      and envelope["data"]["decision_id"] == json.loads(first)["decision_id"])
            flaky = [c for c in callbacks if c[0] == "/flaky"]
            check("the retry carries the same webhook-id and bytes",
                  len(flaky) == 2 and flaky[0][1]["webhook-id"] == flaky[1][1]["webhook-id"]
                  and flaky[0][2] == flaky[1][2])
        finally:
            idem.terminate()
            idem.wait(timeout=10)
    server.shutdown()
    print(f"{results['passed']} passed, {results['failed']} failed")
    sys.exit(1 if results["failed"] else 0)


if __name__ == "__main__":
    main()
