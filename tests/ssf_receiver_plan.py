"""The OpenID Foundation's Shared Signals receiver test plans (OIDSSFReceiverTestPlan and
OIDSSFReceiverTestPlanCaepInterop, openid-certification/conformance-suite), played against a
real `idem serve` (the binary given as argv[1]) that subscribes itself: this script is the
transmitter the plans make, written with the JOSE library `jwcrypto`. It serves its metadata at
`/.well-known/ssf-configuration/ssf`, OAuth metadata and a token endpoint giving tokens that
expire, the stream endpoints, verification, push with the stream's `authorization_header` and
an RFC 8936 poll endpoint, and signs every SET it sends. Each module of the plans is a named
group of checks, for a poll and a push subscription: idem creates one stream and keeps it
across a restart (read, not made again), updates and replaces it when its configuration
changes, asks for verification with a state of its own and is verified only by that state
(another is refused, `invalid_state`, pushed or polled; one without state is acknowledged),
reads the stream's status, accepts each event SET once (a duplicate decides nothing) and
refuses bad ones with RFC 8935's `err`, accepts a verification the transmitter pushes as soon
as it has made or replaced the stream, and, asked through its API, changes the stream's status,
adds and removes subjects, and deletes the stream (a new one made only at the next start). With `postgres` as argv[2] idem runs on a fresh
database of the local server (127.0.0.1:5432, user postgres). Prints `ok`/`FAIL` lines and
`N passed, M failed`, and exits non-zero on a failure."""

import base64
import http.server
import json
import signal
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid

from conformance_http import fresh_database, free_port, request, serve, start_idem, wait_for, write_config
from jwcrypto import jwk, jws

API_KEY = "sk_ssf_receiver_plan_key"
CLIENT_ID = "idem-receiver"
CLIENT_SECRET = "client-secret-of-the-receiver-plan"
AUDIENCE = "https://idem.example.test/acme"
CAEP = "https://schemas.openid.net/secevent/caep/event-type/"
REVOKED = CAEP + "session-revoked"
CREDENTIAL = CAEP + "credential-change"
COMPROMISE = "https://schemas.openid.net/secevent/risc/event-type/credential-compromise"
VERIFICATION = "https://schemas.openid.net/secevent/ssf/event-type/verification"
STREAM_UPDATED = "https://schemas.openid.net/secevent/ssf/event-type/stream-updated"
PUSH = "urn:ietf:rfc:8935"
POLL = "urn:ietf:rfc:8936"
TOKEN_LIFE = 3
results = {"passed": 0, "failed": 0}


def check(name, ok, detail=""):
    results["passed" if ok else "failed"] += 1
    print(f"{'ok  ' if ok else 'FAIL'} {name}" + ("" if ok else f" {detail}"))


def eventually(probe, done, timeout=15):
    """`probe()` once `done` holds for it, or the last one after `timeout` seconds."""
    deadline = time.time() + timeout
    value = probe()
    while not done(value) and time.time() < deadline:
        time.sleep(0.05)
        value = probe()
    return value


class Transmitter:
    """What the transmitter keeps: tokens, streams, verifications asked for, SETs waiting to be
    polled, what was acknowledged or reported, and every call made to it."""

    def __init__(self):
        self.lock = threading.Lock()
        self.key = jwk.JWK.generate(kty="RSA", size=2048, kid="tx-rsa-1")
        self.base = ""
        self.tokens = {}
        self.tokens_given = 0
        self.unauthorized = 0
        self.streams = {}
        self.status = {}
        self.verifications = []
        self.subjects = []
        self.pending = {}
        self.acked = []
        self.set_errs = {}
        self.calls = []
        self.made = 0
        self.unsolicited = []

    @property
    def issuer(self):
        return f"{self.base}/ssf"

    def sign(self, claims, key=None, alg="RS256", kid="tx-rsa-1"):
        token = jws.JWS(json.dumps(claims).encode())
        token.add_signature(key or self.key, None, json.dumps({"alg": alg, "kid": kid, "typ": "secevent+jwt"}))
        return token.serialize(compact=True)

    def claims(self, events, sub_id, **over):
        c = {"iss": self.issuer, "aud": AUDIENCE, "jti": uuid.uuid4().hex, "iat": int(time.time()),
             "sub_id": sub_id, "events": events}
        c.update(over)
        return c

    def verification(self, sid, state=None, **over):
        event = {} if state is None else {"state": state}
        return self.claims({VERIFICATION: event}, {"format": "opaque", "id": sid}, **over)

    def event(self, event_type, email, **over):
        members = {CREDENTIAL: {"credential_type": "password", "change_type": "revoke"},
                   COMPROMISE: {"credential_type": "password"}}.get(event_type, {})
        members = dict(members, event_timestamp=int(time.time()))
        return self.claims({event_type: members}, {"format": "email", "email": email}, **over)

    def deliver(self, sid, claims, token=None, authorization=None):
        """Sends a SET to stream `sid` as its delivery says: pushed (with the stream's
        authorization_header unless `authorization` is given), its status and answer; or queued
        for polling, (None, None)."""
        token = token or self.sign(claims)
        delivery = self.streams[sid]["delivery"]
        if delivery["method"] == POLL:
            with self.lock:
                self.pending[claims["jti"]] = token
            return None, None
        headers = {"Content-Type": "application/secevent+jwt", "Accept": "application/json"}
        auth = delivery.get("authorization_header") if authorization is None else authorization
        if auth:
            headers["Authorization"] = auth
        status, _, body = request(delivery["endpoint_url"], token.encode(), headers, "POST")
        try:
            return status, json.loads(body) if body else None
        except ValueError:
            return status, body

    def unsolicited_at_once(self, sid):
        """A verification without state sent to a stream just made or given a new delivery, as
        the call that did it is answered (SSF §8.1.4: a transmitter may send one at any time
        after it made the stream; the plan's OIDSSFReceiverUnsolicitedStreamVerificationTest
        does). A push answered 5xx (or not at all) is sent again, as RFC 8935 lets a
        transmitter; what each attempt got is kept in `unsolicited`: (stream, method, jti,
        statuses, last answer)."""
        claims = self.verification(sid)
        method = self.streams[sid]["delivery"]["method"]

        def send():
            statuses, answer = [], None
            for _ in range(50):
                try:
                    status, answer = self.deliver(sid, claims)
                except OSError as e:  # idem not answering (stopped): sent again, as a 5xx
                    status, answer = 599, str(e)
                statuses.append(status)
                if status is None or status < 500:
                    break
                time.sleep(0.1)
            self.unsolicited.append((sid, method, claims["jti"], statuses, answer))

        threading.Thread(target=send, daemon=True).start()

    def answer(self, jti):
        """Once stream `jti` is polled back: 'ack' or its setErr."""
        def probe():
            with self.lock:
                if jti in self.acked:
                    return "ack"
                return self.set_errs.get(jti)
        return eventually(probe, lambda v: v is not None)


def handler(tx):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def reply(self, status, body=None, content_type="application/json"):
            data = b"" if body is None else json.dumps(body).encode()
            self.send_response(status)
            if body is not None:
                self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def handle(self):
            try:
                super().handle()
            except (BrokenPipeError, ConnectionResetError):
                pass  # a connection of an idem SIGKILLed or stopped

        def body(self):
            raw = self.rfile.read(int(self.headers.get("content-length", 0)))
            return raw.decode()

        def admitted(self, method, path):
            auth = self.headers.get("authorization", "")
            token = auth.removeprefix("Bearer ")
            with tx.lock:
                tx.calls.append(f"{method} {path}")
                ok = auth.startswith("Bearer ") and tx.tokens.get(token, 0) > time.time()
                if not ok:
                    tx.unauthorized += 1
            if not ok:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Bearer error="invalid_token"')
                self.send_header("Content-Length", "0")
                self.end_headers()
            return ok

        def do_GET(self):
            url = urllib.parse.urlsplit(self.path)
            query = dict(urllib.parse.parse_qsl(url.query))
            base = tx.base
            if url.path == "/.well-known/ssf-configuration/ssf":
                return self.reply(200, {
                    "spec_version": "1_0", "issuer": tx.issuer, "jwks_uri": f"{base}/jwks",
                    "delivery_methods_supported": [PUSH, POLL],
                    "configuration_endpoint": f"{base}/streams", "status_endpoint": f"{base}/status",
                    "add_subject_endpoint": f"{base}/subjects:add",
                    "remove_subject_endpoint": f"{base}/subjects:remove",
                    "verification_endpoint": f"{base}/verify", "default_subjects": "ALL",
                    "authorization_schemes": [{"spec_urn": "urn:ietf:rfc:6749"}]})
            if url.path == "/.well-known/oauth-authorization-server/ssf":
                return self.reply(200, {"issuer": tx.issuer, "token_endpoint": f"{base}/token",
                                        "grant_types_supported": ["client_credentials"],
                                        "token_endpoint_auth_methods_supported": ["client_secret_basic"]})
            if url.path == "/jwks":
                keys = jwk.JWKSet()
                keys.add(tx.key)
                return self.reply(200, json.loads(keys.export(private_keys=False)),
                                  "application/jwk-set+json")
            if url.path == "/streams":
                if not self.admitted("GET", "/streams"):
                    return
                sid = query.get("stream_id")
                if sid is None:
                    return self.reply(200, list(tx.streams.values()))
                return self.reply(200, tx.streams[sid]) if sid in tx.streams else self.reply(404)
            if url.path == "/status":
                if not self.admitted("GET", "/status"):
                    return
                sid = query.get("stream_id")
                if sid not in tx.status:
                    return self.reply(404)
                return self.reply(200, {"stream_id": sid, "status": tx.status[sid]})
            return self.reply(404)

        def do_DELETE(self):
            url = urllib.parse.urlsplit(self.path)
            if url.path != "/streams" or not self.admitted("DELETE", "/streams"):
                return self.reply(404) if url.path != "/streams" else None
            sid = dict(urllib.parse.parse_qsl(url.query)).get("stream_id")
            if sid not in tx.streams:
                return self.reply(404)
            del tx.streams[sid]
            tx.status.pop(sid, None)
            return self.reply(204)

        def configured(self, sid, asked):
            delivery = dict(asked.get("delivery") or {"method": POLL})
            if delivery["method"] == POLL:
                delivery["endpoint_url"] = f"{tx.base}/poll/{sid}"
            return {"stream_id": sid, "iss": tx.issuer, "aud": AUDIENCE, "delivery": delivery,
                    "events_supported": [REVOKED, CREDENTIAL, COMPROMISE],
                    "events_requested": asked.get("events_requested") or [],
                    "events_delivered": [e for e in asked.get("events_requested") or []
                                         if e in (REVOKED, CREDENTIAL, COMPROMISE)],
                    "description": asked.get("description"), "min_verification_interval": 0}

        def change(self, method):
            raw = self.body()
            if not self.admitted(method, "/streams"):
                return
            try:
                body = json.loads(raw)
            except ValueError:
                return self.reply(400)
            if method == "POST":
                tx.made += 1
                sid = f"stream-{tx.made}"
                tx.streams[sid] = self.configured(sid, body)
                tx.status[sid] = "enabled"
                tx.unsolicited_at_once(sid)
                return self.reply(201, tx.streams[sid])
            sid = body.get("stream_id")
            if sid not in tx.streams:
                return self.reply(404)
            was = tx.streams[sid]["delivery"]
            asked = dict(tx.streams[sid]) if method == "PATCH" else {}
            asked.update({k: body[k] for k in ("delivery", "events_requested", "description") if k in body})
            tx.streams[sid] = self.configured(sid, asked)
            if tx.streams[sid]["delivery"] != was:
                tx.unsolicited_at_once(sid)
            return self.reply(200, tx.streams[sid])

        def do_PATCH(self):
            self.change("PATCH")

        def do_PUT(self):
            self.change("PUT")

        def do_POST(self):
            url = urllib.parse.urlsplit(self.path)
            if url.path == "/token":
                body = dict(urllib.parse.parse_qsl(self.body()))
                basic = self.headers.get("authorization", "").removeprefix("Basic ")
                try:
                    who = base64.b64decode(basic).decode()
                except ValueError:
                    who = ""
                if who != f"{CLIENT_ID}:{CLIENT_SECRET}":
                    return self.reply(401, {"error": "invalid_client"})
                if body.get("grant_type") != "client_credentials":
                    return self.reply(400, {"error": "unsupported_grant_type"})
                with tx.lock:
                    tx.tokens_given += 1
                    token = f"tx-token-{tx.tokens_given}-{uuid.uuid4().hex}"
                    tx.tokens[token] = time.time() + TOKEN_LIFE
                return self.reply(200, {"access_token": token, "token_type": "Bearer",
                                        "expires_in": TOKEN_LIFE})
            if url.path == "/streams":
                return self.change("POST")
            raw = self.body()
            path = "/poll" if url.path.startswith("/poll/") else url.path
            if not self.admitted("POST", path):
                return
            body = json.loads(raw or "{}")
            if url.path.startswith("/poll/"):
                with tx.lock:
                    for jti in body.get("ack", []):
                        if tx.pending.pop(jti, None) is not None:
                            tx.acked.append(jti)
                    for jti, err in body.get("setErrs", {}).items():
                        if tx.pending.pop(jti, None) is not None:
                            tx.set_errs[jti] = err
                for _ in range(10):
                    if tx.pending or body.get("returnImmediately"):
                        break
                    time.sleep(0.02)
                with tx.lock:
                    sets = dict(list(tx.pending.items())[: body.get("maxEvents", 100)])
                    more = len(tx.pending) > len(sets)
                return self.reply(200, {"sets": sets, "moreAvailable": more})
            sid = body.get("stream_id")
            if sid not in tx.streams:
                return self.reply(404)
            if url.path == "/verify":
                tx.verifications.append((sid, body.get("state")))
                return self.reply(204)
            if url.path == "/status":
                if body.get("status") not in ("enabled", "paused", "disabled"):
                    return self.reply(400)
                tx.status[sid] = body["status"]
                return self.reply(200, {"stream_id": sid, "status": body["status"]})
            if url.path in ("/subjects:add", "/subjects:remove"):
                tx.subjects.append((sid, url.path.split(":")[1], body.get("subject")))
                return self.reply(200 if url.path.endswith("add") else 204)
            return self.reply(404)

        def log_message(self, *args):
            pass

    return Handler


callbacks = []


class Callbacks(http.server.BaseHTTPRequestHandler):
    """The playbook's action: each decision's callback."""

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        callbacks.append(json.loads(body))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def source_lines(tx, delivery, events):
    maps = "".join(f'[[tenants.acme.sources.entra.map]]\nevent = "{e}"\ntype = "breach"\n' for e in events)
    return f"""[tenants.acme.sources.entra]
kind = "ssf"
transmitter = "{tx.issuer}"
auth = {{ client_id = "{CLIENT_ID}", client_secret = "{CLIENT_SECRET}" }}
delivery = "{delivery}"
verify_every = "1h"
{maps}"""


def config_text(store, port, callback, source):
    return f"""public_url = "http://127.0.0.1:{port}"
{store}
[idempotency]
key_secret = "ssf-receiver-plan-key-secret-0123456789"
[tenants.acme]
api_key = "{API_KEY}"
callback_secret = "whsec_c2VjcmV0LWZvci1hY21lLWNhbGxiYWNrcw=="
[tenants.acme.playbooks.breach]
decision = "deny"
actions = [ {{ name = "lock", url = "{callback}/lock" }} ]
{source}"""


def source_status(base):
    try:
        status, _, body = request(f"{base}/v1/sources/acme/entra/status",
                                  headers={"Authorization": f"Bearer {API_KEY}"})
    except OSError:  # not answering (yet, or any more): nothing to show
        return {}
    return json.loads(body) if status == 200 else {}


def subscription(base):
    return source_status(base).get("subscription") or {}


def decided(n, timeout=10):
    """How many callbacks there are once there are `n`, then a moment more for any extra."""
    wait_for(callbacks, n, timeout)
    time.sleep(0.5)
    return len(callbacks)


def manage(base, method, what, body=None):
    """A call to `/v1/sources/acme/entra/{what}` with the tenant's key: status, media type,
    parsed body."""
    data = json.dumps(body).encode() if body is not None else None
    status, h, answer = request(f"{base}/v1/sources/acme/entra/{what}", data,
                                {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"},
                                method)
    try:
        parsed = json.loads(answer) if answer else None
    except ValueError:
        parsed = None
    return status, h.get("content-type", ""), parsed


def managed(tx, base, sid, mode, events):
    """The plans' modules that need the receiver to change its stream: its status
    (OIDSSFReceiverStreamStatusUpdateTest), its subjects and its deletion
    (OIDSSFReceiverStreamCreateDeleteTest), asked of idem."""
    tag = f"({mode})"
    m = f"OIDSSFReceiverStreamStatusUpdateTest {tag}"
    for value in ("paused", "enabled"):
        status, _, answer = manage(base, "POST", "subscription", {"status": value, "reason": "the plan"})
        check(f"{m}: POST …/subscription {value}: 200 with the transmitter's answer",
              status == 200 and (answer or {}).get("status") == value and answer.get("stream_id") == sid,
              f"{status} {answer}")
        check(f"{m}: the transmitter's stream is {value}", tx.status.get(sid) == value, str(tx.status))
        sub = eventually(lambda: subscription(base), lambda s: s.get("status") == value)
        check(f"{m}: the subscription shows {value}", sub.get("status") == value, str(sub))
    status, kind, answer = manage(base, "POST", "subscription", {"status": "sleeping"})
    check(f"{m}: another status is 400 invalid-stream",
          status == 400 and kind.startswith("application/problem+json")
          and (answer or {}).get("type") == "urn:idem:problem:invalid-stream", f"{status} {answer}")

    m = f"OIDSSFReceiverSubjects {tag}"
    subject = {"format": "email", "email": "example.user@example.com"}
    status, _, _ = manage(base, "POST", "subjects", {"action": "add", "subject": subject, "verified": True})
    check(f"{m}: add: 200, the transmitter's add_subject_endpoint called with it",
          status == 200 and tx.subjects[-1:] == [(sid, "add", subject)], f"{status} {tx.subjects}")
    status, _, _ = manage(base, "POST", "subjects", {"action": "remove", "subject": subject})
    check(f"{m}: remove: 204, the transmitter's remove_subject_endpoint called with it",
          status == 204 and tx.subjects[-1:] == [(sid, "remove", subject)], f"{status} {tx.subjects}")
    status, _, answer = manage(base, "POST", "subjects", {"action": "forget", "subject": subject})
    check(f"{m}: another action is 400 invalid-stream",
          status == 400 and (answer or {}).get("type") == "urn:idem:problem:invalid-stream", f"{status} {answer}")

    m = f"OIDSSFReceiverStreamCreateDeleteTest {tag}"
    auth = tx.streams[sid]["delivery"].get("authorization_header")
    status, _, answer = manage(base, "DELETE", "subscription")
    check(f"{m}: DELETE …/subscription: 204, the stream deleted at the transmitter",
          status == 204 and "DELETE /streams" in tx.calls and sid not in tx.streams, f"{status} {answer}")
    sub = eventually(lambda: subscription(base), lambda s: s.get("stream_id") is None)
    check(f"{m}: the subscription has no stream", sub.get("stream_id") is None, str(sub))
    if auth:
        c = tx.event(events[0], "after-delete@example.com")
        status, _, body = request(f"{base}/v1/sources/acme/entra", tx.sign(c).encode(),
                                  {"Content-Type": "application/secevent+jwt", "Authorization": auth}, "POST")
        check(f"{m}: a push with the deleted stream's credential is refused",
              status == 400 and json.loads(body).get("err") == "authentication_failed", f"{status} {body}")
    time.sleep(2)
    check(f"{m}: no stream made again while idem runs", tx.made == 1, str(tx.calls))
    status, _, answer = manage(base, "POST", "subscription", {"status": "enabled"})
    check(f"{m}: a status change without a stream is 409 no-stream",
          status == 409 and (answer or {}).get("type") == "urn:idem:problem:no-stream", f"{status} {answer}")


def run(binary, mode, store, interop):
    """Both plans' modules on a subscription delivered by `mode`."""
    tx = Transmitter()
    server, tx.base = serve(handler(tx))
    cb_server, cb = serve(Callbacks)
    callbacks.clear()
    events = [REVOKED, CREDENTIAL] if interop else [COMPROMISE]
    plan = "OIDSSFReceiverTestPlanCaepInterop" if interop else "OIDSSFReceiverTestPlan"
    tag = f"({mode})"
    print(f"# {plan}, {mode}")
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        path = write_config(tmp, config_text(store, port, cb, source_lines(tx, mode, events)), port)
        idem, base = start_idem(binary, path)
        try:
            check(f"idem serves a source with only `transmitter`, `auth` and `delivery` {tag}",
                  base.startswith("http://"), f"exit {idem.wait(timeout=10)}" if not base else "")
            if not base:
                return
            # Stream creation.
            m = f"OIDSSFReceiverStreamCreateDeleteTest {tag}"
            sub = eventually(lambda: subscription(base), lambda s: s.get("stream_id"))
            sid = sub.get("stream_id")
            stream = tx.streams.get(sid, {})
            check(f"{m}: idem creates one stream (POST /streams once)",
                  tx.made == 1 and sid == "stream-1" and tx.calls.count("POST /streams") == 1,
                  f"{sub} {tx.calls}")
            check(f"{m}: events_requested are the map's event types",
                  sorted(stream.get("events_requested", [])) == sorted(events), str(stream))
            want = {"method": PUSH, "endpoint_url": f"http://127.0.0.1:{port}/v1/sources/acme/entra"} \
                if mode == "push" else {"method": POLL}
            d = stream.get("delivery", {})
            check(f"{m}: the delivery asked for is {mode}", all(d.get(k) == v for k, v in want.items()), str(d))
            if mode == "push":
                auth = d.get("authorization_header", "")
                check(f"{m}: a push stream carries an authorization_header idem made",
                      auth.startswith("Bearer ") and len(auth) > 40, str(d))
            if interop:
                check(f"OIDSSFReceiverStreamCaepInteropTest {tag}: OIDSSFEnsureStreamContainsCaepInteropEvent",
                      REVOKED in stream.get("events_requested", []), str(stream))

            # Verification.
            m = f"OIDSSFReceiverStreamVerificationTest {tag}"
            asked = eventually(lambda: list(tx.verifications), lambda v: v)
            state = asked[0][1] if asked else None
            check(f"{m}: idem asks for a verification of its stream with a random state",
                  len(asked) == 1 and asked[0][0] == sid and isinstance(state, str) and len(state) >= 16,
                  str(asked))
            check(f"{m}: idem reads the stream's status (GET /status)",
                  "GET /status" in eventually(lambda: list(tx.calls), lambda c: "GET /status" in c), str(tx.calls))
            now = subscription(base)
            check(f"{m}: not verified before the verification SET", now.get("verified_at") is None, str(now))

            def refused(name, claims, err, token=None, authorization=None):
                status, answer = tx.deliver(sid, claims, token, authorization)
                if mode == "push":
                    ok = status == 400 and isinstance(answer, dict) and answer.get("err") == err \
                        and isinstance(answer.get("description"), str)
                    check(name, ok, f"{status} {answer}")
                else:
                    got = tx.answer(claims["jti"])
                    check(name, isinstance(got, dict) and got.get("err") == err, str(got))

            def accepted(name, claims, token=None):
                status, answer = tx.deliver(sid, claims, token)
                if mode == "push":
                    check(name, status == 202, f"{status} {answer}")
                else:
                    got = tx.answer(claims["jti"])
                    check(name, got == "ack", str(got))

            refused(f"{m}: a wrong state is refused, invalid_state",
                    tx.verification(sid, "not-the-state-idem-asked-for"), "invalid_state")
            refused(f"{m}: the state for another stream is refused, invalid_state",
                    tx.verification("stream-9", state), "invalid_state")
            check(f"{m}: neither verifies", subscription(base).get("verified_at") is None)
            m = f"OIDSSFReceiverUnsolicitedStreamVerificationTest {tag}"
            got = eventually(lambda: list(tx.unsolicited), lambda u: u)
            (_, method, jti, statuses, answer), = got or [(None, None, None, [None], None)]
            if method == PUSH:
                check(f"{m}: one pushed as the create is answered is accepted (202; never a 4xx)",
                      statuses[-1] == 202 and all(x >= 500 for x in statuses[:-1]), f"{statuses} {answer}")
            else:
                check(f"{m}: one queued as the create is answered is acknowledged", tx.answer(jti) == "ack",
                      str(got))
            accepted(f"{m}: a verification without state is acknowledged", tx.verification(sid))
            check(f"{m}: and verifies nothing", subscription(base).get("verified_at") is None)
            m = f"OIDSSFReceiverStreamVerificationTest {tag}"
            accepted(f"{m}: the verification SET with idem's state is acknowledged", tx.verification(sid, state))
            sub = eventually(lambda: subscription(base), lambda s: s.get("verified_at") and s.get("status"))
            check(f"{m}: the stream is verified", isinstance(sub.get("verified_at"), str)
                  and sub.get("status") == "enabled" and sub.get("last_error") is None, str(sub))
            check(f"{m}: a verification decides nothing", decided(0, 0) == 0, str(callbacks))

            # Events.
            m = f"OIDSSFReceiverSupportedEventsTest {tag}" if not interop else \
                f"OIDSSFReceiverStreamCaepInteropTest {tag}"
            sent = []
            for i, event_type in enumerate(stream.get("events_delivered", [])):
                claims = tx.event(event_type, f"user{i}-{mode}@example.com")
                sent.append(claims)
                accepted(f"{m}: {event_type.rsplit('/', 1)[1]} accepted", claims)
            check(f"{m}: each event decided once", decided(len(sent)) == len(sent) == len(events),
                  f"{len(callbacks)} {len(sent)}")
            again = dict(sent[0])
            if mode == "push":
                status, _ = tx.deliver(sid, again)
                check(f"{m}: the same SET pushed again is 202, decided nothing", status == 202
                      and decided(len(sent)) == len(sent), f"{status} {len(callbacks)}")
            else:
                with tx.lock:
                    tx.acked.remove(again["jti"])
                tx.deliver(sid, again)
                check(f"{m}: the same SET polled again is acknowledged, decided nothing",
                      tx.answer(again["jti"]) == "ack" and decided(len(sent)) == len(sent), str(len(callbacks)))

            m = f"RFC 8935/8936 refusals {tag}"
            forged = jwk.JWK.generate(kty="RSA", size=2048, kid="tx-rsa-1")
            c = tx.event(events[0], "forged@example.com")
            refused(f"{m}: a key not the transmitter's: invalid_key", c, "invalid_key", tx.sign(c, forged))
            refused(f"{m}: another iss: invalid_issuer",
                    tx.event(events[0], "x@example.com", iss="https://evil.example/ssf"), "invalid_issuer")
            refused(f"{m}: another aud: invalid_audience",
                    tx.event(events[0], "x@example.com", aud="https://other.example/acme"), "invalid_audience")
            if mode == "push":
                refused(f"{m}: a push without the stream's authorization_header: authentication_failed",
                        tx.event(events[0], "x@example.com"), "authentication_failed", authorization="")
                refused(f"{m}: a push with another authorization_header: authentication_failed",
                        tx.event(events[0], "x@example.com"), "authentication_failed",
                        authorization="Bearer not-the-streams-credential")
            check(f"{m}: no refused SET decided", decided(len(sent)) == len(sent), str(len(callbacks)))

            # A stream-updated SET sets the status shown.
            m = f"OIDSSFReceiverStreamStatusUpdateTest {tag}"
            accepted(f"{m}: a stream-updated SET is acknowledged",
                     tx.claims({STREAM_UPDATED: {"status": "paused", "reason": "maintenance"}},
                               {"format": "opaque", "id": sid}))
            st = eventually(lambda: source_status(base), lambda s: (s.get("stream") or {}).get("status") == "paused")
            check(f"{m}: the transmitter's status is shown", (st.get("stream") or {}).get("status") == "paused",
                  str(st))

            # Tokens.
            m = f"OAuth client credentials {tag}"
            check(f"{m}: tokens renewed before they expire: no call refused",
                  tx.unauthorized == 0 and tx.tokens_given >= 1, f"{tx.unauthorized} {tx.tokens_given}")
            if mode == "poll":
                given = tx.tokens_given
                time.sleep(TOKEN_LIFE + 1)
                check(f"{m}: polling goes on with new tokens, none used past its expiry",
                      tx.tokens_given > given and tx.unauthorized == 0, f"{tx.tokens_given} {tx.unauthorized}")
                with tx.lock:
                    tx.tokens.clear()
                given = tx.tokens_given
                c = tx.event(events[0], "after-revoke@example.com")
                tx.deliver(sid, c)
                # A renewal due anyway may come first (the tokens live seconds): then nothing is
                # refused; else one call is, and a new token is fetched at once.
                check(f"{m}: a refused token is renewed once and the poll goes on",
                      tx.answer(c["jti"]) == "ack" and tx.unauthorized <= 1 and tx.tokens_given >= given + 1,
                      f"{tx.unauthorized} {tx.tokens_given - given}")
                decided(len(sent) + 1)
                sent.append(c)

            # Restart: the stream recorded is read, not made again; a change of the map PATCHes it.
            m = f"OIDSSFReceiverHappyPathTest {tag}"
            idem.kill()
            idem.wait(timeout=10)
            before = tx.calls.count("GET /streams")
            idem, base = start_idem(binary, path)
            reads = eventually(lambda: tx.calls.count("GET /streams"), lambda n: n > before)
            check(f"{m}: after a SIGKILL and a start, the stream is read (GET /streams), not made again",
                  reads > before and tx.made == 1, str(tx.calls))
            extra = COMPROMISE if interop else REVOKED
            write_config(tmp, config_text(store, port, cb, source_lines(tx, mode, events + [extra])), port)
            asked = len(tx.verifications)
            idem.send_signal(signal.SIGHUP)
            sub = eventually(lambda: subscription(base),
                             lambda s: len(s.get("events_delivered") or []) == len(events) + 1)
            check(f"{m}: idem still runs after the SIGHUP", idem.poll() is None, f"exit {idem.poll()}")
            check(f"{m}: a new event type in the map: the stream updated (PATCH), the same stream",
                  "PATCH /streams" in tx.calls and sub.get("stream_id") == sid and tx.made == 1,
                  f"{sub} {tx.calls}")
            check(f"{m}: after the update idem asks for a verification again",
                  eventually(lambda: len(tx.verifications), lambda n: n > asked) == asked + 1)
            other = "push" if mode == "poll" else "poll"
            write_config(tmp, config_text(store, port, cb, source_lines(tx, other, events + [extra])), port)
            asked = len(tx.verifications)
            idem.send_signal(signal.SIGHUP)
            method = PUSH if other == "push" else POLL
            d = eventually(lambda: tx.streams[sid]["delivery"], lambda d: d["method"] == method)
            check(f"{m}: another delivery: the stream replaced (PUT), {other} now",
                  "PUT /streams" in tx.calls and d["method"] == method and tx.made == 1,
                  f"{d} {tx.calls}")
            # idem asks for a verification once it has recorded the replaced stream (and the
            # push credential it made for it): the plan delivers from then on.
            check(f"{m}: after the replace idem asks for a verification again",
                  eventually(lambda: len(tx.verifications), lambda n: n > asked) == asked + 1)
            if other == "push":
                got = eventually(lambda: tx.unsolicited[1:], lambda u: u)
                statuses = got[0][3] if got else [None]
                check(f"{m}: a verification pushed as the replace is answered is accepted (202; never a 4xx)",
                      statuses[-1] == 202 and all(x >= 500 for x in statuses[:-1]), str(got))
            mode = other
            c = tx.event(events[0], "after-replace@example.com")
            accepted(f"{m}: SETs delivered by {other} after the replace are accepted", c)
            check(f"{m}: and decided", decided(len(sent) + 1) == len(sent) + 1, str(len(callbacks)))
            check(f"{m}: nothing deleted by a change of the config", "DELETE /streams" not in tx.calls)
            managed(tx, base, sid, mode, events)
            idem.kill()
            idem.wait(timeout=10)
            idem, base = start_idem(binary, path)
            sub = eventually(lambda: subscription(base), lambda s: s.get("stream_id"))
            check(f"OIDSSFReceiverStreamCreateDeleteTest ({mode}): the next start makes a new stream",
                  tx.made == 2 and sub.get("stream_id") == "stream-2", f"{sub} {tx.calls}")
        finally:
            idem.terminate()
            idem.wait(timeout=10)
            server.shutdown()
            cb_server.shutdown()


def main():
    binary = sys.argv[1]
    postgres = sys.argv[2:] == ["postgres"]
    for interop in (False, True):
        for mode in ("poll", "push"):
            store = ""
            if postgres:
                url = fresh_database(f"receiver_plan_{int(interop)}_{mode}")
                store = f'[store]\nbackend = "postgres"\nurl = "{url}"\n'
            run(binary, mode, store, interop)
    print(f"{results['passed']} passed, {results['failed']} failed")
    sys.exit(1 if results["failed"] else 0)


if __name__ == "__main__":
    main()
