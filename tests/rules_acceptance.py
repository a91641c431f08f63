"""Acceptance of a playbook's rules (docs/RULES.md) against the real binary given as argv[1]: a
config whose `sim_swap` playbook has CEL rules over the signal's metadata and over the subject's
history, with `tests`, is checked by `idem check-config` and served by `idem serve`. Checks that
the rules decide (first match wins, the playbook's own decision by default, an evaluation error
does not match and is kept with the decision and counted), that the rule's name is in the
response, the decisions API and the callbacks (each verified with the third-party
`standardwebhooks` library), that `POST /v1/playbooks/{type}/evaluate` answers what a signal
would get and stores and sends nothing, that `check-config` refuses a bad rule or a failing test
naming its key and position, and that after a SIGHUP that changes the rules a replay answers the
decision stored before, while a bad rule's reload is refused and the running rules kept. Prints
`ok`/`FAIL` lines and `N passed, M failed`, and exits non-zero on a failure."""

import http.server
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import uuid

from conformance_http import request, serve, start_idem, wait_for, write_config
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

API_KEY = "sk_rules_acceptance_key"
CALLBACK = "whsec_c2VjcmV0LWZvci1hY21lLWNhbGxiYWNrcw=="
RULES = "tenants.acme.playbooks.sim_swap.rules"
results = {"passed": 0, "failed": 0}
callbacks = []


def check(name, ok, detail=""):
    results["passed" if ok else "failed"] += 1
    print(f"{'ok  ' if ok else 'FAIL'} {name}" + ("" if ok else f" {detail}"))


class Receiver(http.server.BaseHTTPRequestHandler):
    """The playbooks' actions: each callback's path, body, and whether its signature verifies."""

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        try:
            Webhook(CALLBACK).verify(body, {k: v for k, v in self.headers.items()})
            verified = True
        except WebhookVerificationError:
            verified = False
        callbacks.append((self.path, json.loads(body), verified))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def playbooks(recv, high_risk="deny"):
    """`breach` allows; `sim_swap` reviews by default, `high_risk` a risky signal, steps up a
    subject with a breach in the last hour, and (a rule that fails on a signal without a
    carrier) denies a port to an MVNO."""
    return f"""
[tenants.acme]
api_key = "{API_KEY}"
callback_secret = "{CALLBACK}"

[tenants.acme.playbooks.breach]
decision = "allow"

[tenants.acme.playbooks.sim_swap]
decision = "review"
actions = [{{ name = "open_case", url = "{recv}/case" }}]

[[{RULES}]]
name = "high-risk"
when = 'has(signal.metadata.risk) && signal.metadata.risk >= 90'
decision = "{high_risk}"
actions = [{{ name = "lock_account", url = "{recv}/lock" }}]

[[{RULES}]]
name = "after-breach"
when = 'subject.decisions("breach", duration("1h")) > 0'
decision = "step_up"
actions = [{{ name = "notify", url = "{recv}/notify" }}]

[[{RULES}]]
name = "mvno-port"
when = 'signal.metadata.carrier == "mvno"'
decision = "deny"

[[tenants.acme.playbooks.sim_swap.tests]]
signal = {{ subject = "+447700900123", metadata = {{ risk = 95 }} }}
history = [{{ type = "breach", ago = "5m" }}]
expect = {{ decision = "{high_risk}", rule = "high-risk" }}

[[tenants.acme.playbooks.sim_swap.tests]]
signal = {{ subject = "+447700900123" }}
history = [{{ type = "breach", ago = "5m" }}]
expect = {{ decision = "step_up", rule = "after-breach" }}

[[tenants.acme.playbooks.sim_swap.tests]]
signal = {{ subject = "+447700900123", metadata = {{ carrier = "big" }} }}
history = [{{ type = "breach", ago = "2h" }}]
expect = {{ decision = "review" }}
"""


SETTINGS = """
[idempotency]
key_secret = "rules-acceptance-key-secret-0123456789"
"""


def check_config(binary, tmp, text):
    path = os.path.join(tmp, "check.toml")
    with open(path, "w") as f:
        f.write(f'listen = "127.0.0.1:0"\ndata_dir = "{tmp}/check-data"\n{text}')
    out = subprocess.run([binary, "check-config", "--config", path], capture_output=True, text=True)
    return out.returncode, out.stderr


def refusals(binary, tmp, recv):
    good = SETTINGS + playbooks(recv)
    code, err = check_config(binary, tmp, good)
    check("check-config: the rules and their tests pass (exit 0)", code == 0, err)
    cases = [
        ("a syntax error names the key and line:column",
         good.replace("signal.metadata.risk >= 90", "signal.metadata.risk >= "), f"{RULES}[0].when: 1:"),
        ("an unknown variable names the key and line:column",
         good.replace("has(signal.metadata.risk) && signal.metadata.risk >= 90", "risk >= 90"),
         f"{RULES}[0].when: 1:1: unknown variable risk"),
        ("a condition that is no bool names the key",
         good.replace("has(signal.metadata.risk) && signal.metadata.risk >= 90", "1 + 2"),
         f"{RULES}[0].when: 1:1: is arithmetic, not a bool"),
        ("a name used twice names the key",
         good.replace('name = "after-breach"', 'name = "high-risk"'), f"{RULES}[1].name: \"high-risk\" is used twice"),
        ("subject.decisions with a non-constant argument names the key",
         good.replace('subject.decisions("breach", duration("1h"))', 'subject.decisions(signal.type, duration("1h"))'),
         f"{RULES}[1].when"),
        ("a failing test names the test and what it got",
         good.replace('expect = { decision = "step_up", rule = "after-breach" }',
                      'expect = { decision = "deny", rule = "after-breach" }'),
         "tenants.acme.playbooks.sim_swap.tests[1]: the test expects deny by rule \"after-breach\""),
    ]
    for name, text, says in cases:
        code, err = check_config(binary, tmp, text)
        check(f"check-config refuses {name} (exit 2)", code == 2 and says in err, f"{code} {err.strip()}")


def signal_body(kind, subject, metadata=None):
    body = {"type": kind, "subject": subject}
    if metadata is not None:
        body["metadata"] = metadata
    return json.dumps(body).encode()


def post(base, path, body, key=None):
    headers = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}
    if key:
        headers["Idempotency-Key"] = key
    status, h, answer = request(f"{base}{path}", body, headers, "POST")
    try:
        return status, h, answer, json.loads(answer)
    except ValueError:
        return status, h, answer, {}


def get(base, path):
    status, _, body = request(f"{base}{path}", headers={"Authorization": f"Bearer {API_KEY}"})
    return status, json.loads(body) if body else {}


def callbacks_of(decision_id):
    return [(p, b, v) for p, b, v in callbacks if b.get("data", {}).get("decision_id") == decision_id]


def served(binary, tmp, recv):
    path = write_config(tmp, SETTINGS + playbooks(recv))
    idem, base = start_idem(binary, path)
    try:
        # Over the signal's metadata.
        risky_key = f"rules-{uuid.uuid4().hex}"
        risky = signal_body("sim_swap", "+447700900201", {"risk": 95})
        status, _, first_bytes, r = post(base, "/v1/signals", risky, risky_key)
        check("a rule over metadata decides: 201 deny by high-risk",
              status == 201 and r.get("decision") == "deny" and r.get("rule") == "high-risk", f"{status} {r}")
        check("its actions are the rule's", [a.get("name") for a in r.get("actions", [])] == ["lock_account"],
              str(r.get("actions")))
        risky_id = r.get("decision_id")

        # Over the subject's history, and first match wins.
        subject = "+447700900202"
        status, _, _, b = post(base, "/v1/signals", signal_body("breach", subject), f"rules-{uuid.uuid4().hex}")
        check("a breach decided (allow)", status == 201 and b.get("decision") == "allow", f"{status} {b}")
        status, _, _, r = post(base, "/v1/signals", signal_body("sim_swap", subject, {"carrier": "big"}),
                               f"rules-{uuid.uuid4().hex}")
        check("a rule over history decides: step_up by after-breach",
              status == 201 and r.get("decision") == "step_up" and r.get("rule") == "after-breach", f"{status} {r}")
        history_id = r.get("decision_id")
        status, _, _, r = post(base, "/v1/signals", signal_body("sim_swap", subject, {"risk": 99}),
                               f"rules-{uuid.uuid4().hex}")
        check("both rules true: the first wins (deny by high-risk)",
              r.get("decision") == "deny" and r.get("rule") == "high-risk", str(r))

        # The default, and an evaluation error that does not match.
        status, _, _, r = post(base, "/v1/signals", signal_body("sim_swap", "+447700900203"),
                               f"rules-{uuid.uuid4().hex}")
        check("no rule matches: the playbook's review, no rule named",
              status == 201 and r.get("decision") == "review" and "rule" not in r
              and [a.get("name") for a in r.get("actions", [])] == ["open_case"], f"{status} {r}")
        default_id = r.get("decision_id")
        status, d = get(base, f"/v1/decisions/{default_id}")
        errors = d.get("rule_errors") or []
        check("a rule whose evaluation fails does not match and is kept with the decision",
              status == 200 and [e.get("rule") for e in errors] == ["mvno-port"] and "rule" not in d, str(d))

        # Named in the decisions API and the callbacks.
        status, d = get(base, f"/v1/decisions/{risky_id}")
        check("GET /v1/decisions/{id} names the rule", status == 200 and d.get("rule") == "high-risk", str(d))
        status, page = get(base, "/v1/decisions?subject=" + urllib.parse.quote(subject))
        rules = sorted(x.get("rule") or "" for x in page.get("data", []))
        check("the decisions list names each rule", rules == ["", "after-breach", "high-risk"], str(page))
        wait_for(callbacks, 4)
        time.sleep(0.5)
        for did, to, rule in [(risky_id, "/lock", "high-risk"), (history_id, "/notify", "after-breach"),
                              (default_id, "/case", None)]:
            got = callbacks_of(did)
            ok = (len(got) == 1 and got[0][0] == to and got[0][2]
                  and got[0][1].get("data", {}).get("rule") == rule)
            check(f"the callback to {to} verifies with standardwebhooks and names rule {rule}", ok, str(got))

        # The dry run: what a signal would get now, nothing stored, sent or counted.
        _, all_before = get(base, "/v1/decisions")
        sent_before = len(callbacks)
        status, _, _, e = post(base, "/v1/playbooks/sim_swap/evaluate", signal_body("sim_swap", "+447700900204",
                                                                                    {"risk": 95}))
        check("evaluate: 200 deny by high-risk, its actions",
              status == 200 and e == {"decision": "deny", "rule": "high-risk", "actions": ["lock_account"],
                                      "errors": []}, f"{status} {e}")
        status, _, _, e = post(base, "/v1/playbooks/sim_swap/evaluate", signal_body("sim_swap", subject))
        check("evaluate reads the history: step_up by after-breach",
              e.get("decision") == "step_up" and e.get("rule") == "after-breach", str(e))
        status, _, _, e = post(base, "/v1/playbooks/breach/evaluate", signal_body("breach", "+447700900205"))
        check("evaluate of a breach: allow", status == 200 and e.get("decision") == "allow", f"{status} {e}")
        status, _, _, e = post(base, "/v1/playbooks/sim_swap/evaluate", signal_body("sim_swap", "+447700900205"))
        check("the evaluated breach is no history: review, the failing rule in errors",
              e.get("decision") == "review" and "rule" not in e
              and [x.get("rule") for x in e.get("errors", [])] == ["mvno-port"], str(e))
        status, _, _, e = post(base, "/v1/playbooks/port_out/evaluate", signal_body("port_out", "x"))
        check("evaluate of an unknown type: 400 unknown-signal-type",
              status == 400 and e.get("type") == "urn:idem:problem:unknown-signal-type", f"{status} {e}")
        time.sleep(0.5)
        _, all_after = get(base, "/v1/decisions")
        check("evaluate stored nothing and sent nothing",
              all_after.get("data") == all_before.get("data") and len(callbacks) == sent_before,
              f"{len(all_after.get('data', []))} {len(all_before.get('data', []))} {len(callbacks)}")
        _, _, metrics = request(f"{base}/metrics")
        # One decision's mvno-port failed (the others matched before it); the dry runs' are not counted.
        line = 'idem_rule_errors_total{playbook="sim_swap",rule="mvno-port",tenant="acme"} 1'
        check("idem_rule_errors_total counts the decisions' failures, not the dry runs'",
              line in metrics.decode(), [m for m in metrics.decode().splitlines() if "rule_errors" in m])

        # A reload that changes the rules: a replay answers what was stored.
        write_config(tmp, SETTINGS + playbooks(recv, "allow"))
        idem.send_signal(signal.SIGHUP)
        deadline = time.time() + 10
        while time.time() < deadline:
            _, _, _, e = post(base, "/v1/playbooks/sim_swap/evaluate", signal_body("sim_swap", "+447700900206",
                                                                                {"risk": 95}))
            if e.get("decision") == "allow":
                break
            time.sleep(0.1)
        check("after the SIGHUP high-risk allows", e.get("decision") == "allow" and e.get("rule") == "high-risk",
              str(e))
        status, h, again, r = post(base, "/v1/signals", risky, risky_key)
        check("a replay after the rules changed answers the stored decision, byte for byte",
              status == 201 and again == first_bytes and h.get("idempotent-replayed") == "true"
              and r.get("decision") == "deny" and r.get("rule") == "high-risk", f"{status} {h} {r}")
        status, _, _, r = post(base, "/v1/signals", signal_body("sim_swap", "+447700900207", {"risk": 95}),
                               f"rules-{uuid.uuid4().hex}")
        check("a new signal gets the new rules: allow by high-risk",
              r.get("decision") == "allow" and r.get("rule") == "high-risk", str(r))
        time.sleep(0.5)
        check("the replay sent no second callback", len(callbacks_of(risky_id)) == 1, str(callbacks_of(risky_id)))

        # A reload with a bad rule is refused; the running rules stay.
        write_config(tmp, SETTINGS + playbooks(recv, "allow").replace("signal.metadata.risk >= 90",
                                                                      "signal.metadata.risk >= "))
        idem.send_signal(signal.SIGHUP)
        time.sleep(1)
        status, _, _, r = post(base, "/v1/signals", signal_body("sim_swap", "+447700900208", {"risk": 95}),
                               f"rules-{uuid.uuid4().hex}")
        check("a reload with a bad rule is refused, the running rules kept (allow by high-risk)",
              status == 201 and r.get("decision") == "allow" and r.get("rule") == "high-risk"
              and idem.poll() is None, f"{status} {r}")
    finally:
        idem.terminate()
        idem.wait(timeout=10)


def main():
    binary = sys.argv[1]
    receiver, recv = serve(Receiver)
    with tempfile.TemporaryDirectory() as tmp:
        refusals(binary, tmp, recv)
        served(binary, tmp, recv)
    receiver.shutdown()
    print(f"{results['passed']} passed, {results['failed']} failed")
    sys.exit(1 if results["failed"] else 0)


if __name__ == "__main__":
    main()
