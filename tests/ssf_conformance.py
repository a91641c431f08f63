"""Conformance with the third-party JOSE library `jwcrypto`: it plays an OpenID Shared Signals
transmitter, making the keys, serving their JWK Set and signing the Security Event Tokens it
pushes (RFC 8935) to a real `idem serve` (the binary given as argv[1]). Checks the 202s, the
exactly-once callbacks, one subject however its email is cased, RFC 8935's refusals (a forged
key under a known kid, HS256 keyed by the RSA public key, alg none, wrong iss and aud, no jti, a
wrong media type), the source's status and a single fetch of the JWK Set. Prints
`N passed, M failed` and exits non-zero on a failure."""

import base64
import http.server
import json
import sys
import tempfile
import time
import urllib.parse
import uuid

from conformance_http import request, serve, start_idem, wait_for, write_config
from jwcrypto import jwk, jws

API_KEY = "sk_ssf_conformance_key"
CALLBACK = "whsec_c2VjcmV0LWZvci1hY21lLWNhbGxiYWNrcw=="
ISSUER = "https://tx.example/ssf"
AUDIENCE = "https://idem.example/acme"
EVENT = "https://schemas.openid.net/secevent/risc/event-type/credential-compromise"
results = {"passed": 0, "failed": 0}


def check(name, ok, detail=""):
    results["passed" if ok else "failed"] += 1
    print(f"{'ok  ' if ok else 'FAIL'} {name} {detail}")


RSA = jwk.JWK.generate(kty="RSA", size=2048, kid="rsa-1")
EC = jwk.JWK.generate(kty="EC", crv="P-256", kid="ec-1")
jwks_fetches = []
callbacks = []


class Transmitter(http.server.BaseHTTPRequestHandler):
    """The transmitter's jwks_uri: the public halves of both keys."""

    def do_GET(self):
        if self.path != "/jwks":
            self.send_response(404)
            self.end_headers()
            return
        jwks_fetches.append(time.time())
        keys = jwk.JWKSet()
        keys.add(RSA)
        keys.add(EC)
        body = keys.export(private_keys=False).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/jwk-set+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Receiver(http.server.BaseHTTPRequestHandler):
    """The playbook's action: records each callback's path."""

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        callbacks.append(self.path)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def claims(**overrides):
    c = {"iss": ISSUER, "aud": [AUDIENCE], "jti": uuid.uuid4().hex, "iat": int(time.time()),
         "sub_id": {"format": "email", "email": "alice@example.com"}, "events": {EVENT: {}}}
    c.update(overrides)
    return {k: v for k, v in c.items() if v is not None}


def sign(payload, key, alg, kid):
    token = jws.JWS(json.dumps(payload).encode())
    token.add_signature(key, None, json.dumps({"alg": alg, "kid": kid, "typ": "secevent+jwt"}))
    return token.serialize(compact=True)


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def main():
    binary = sys.argv[1]
    transmitter, tx = serve(Transmitter)
    receiver, recv = serve(Receiver)
    with tempfile.TemporaryDirectory() as tmp:
        config = write_config(tmp, f"""
[idempotency]
key_secret = "ssf-conformance-key-secret-0123456789"
[tenants.acme]
api_key = "{API_KEY}"
callback_secret = "{CALLBACK}"
[tenants.acme.playbooks.breach]
decision = "deny"
actions = [ {{ name = "lock", url = "{recv}/lock" }} ]
[tenants.acme.sources.tx]
kind = "ssf"
issuer = "{ISSUER}"
audience = "{AUDIENCE}"
jwks = "{tx}/jwks"
[[tenants.acme.sources.tx.map]]
event = "{EVENT}"
type = "breach"
""")
        idem, base = start_idem(binary, config)
        try:
            push_url = f"{base}/v1/sources/acme/tx"
            bearer = {"Authorization": f"Bearer {API_KEY}"}

            def push(token, content_type="application/secevent+jwt"):
                return request(push_url, token.encode(), {"Content-Type": content_type}, "POST")

            def refused(name, token, err, **kw):
                status, h, body = push(token, **kw)
                try:
                    answer = json.loads(body)
                except ValueError:
                    answer = None
                ok = (status == 400 and h.get("content-type", "").split(";")[0] == "application/json"
                      and isinstance(answer, dict) and answer.get("err") == err
                      and isinstance(answer.get("description"), str))
                check(name, ok, f"{status} {h.get('content-type')} {body[:200]!r}")

            # 1. An RS256 SET, then the same token again: one decision, one callback.
            first = sign(claims(), RSA, "RS256", "rsa-1")
            status, _, body = push(first)
            check("an RS256 SET signed by jwcrypto is accepted: 202, empty", status == 202 and body == b"",
                  f"{status} {body[:200]!r}")
            status, _, body = push(first)
            check("the same SET again is accepted too: 202, empty", status == 202 and body == b"",
                  f"{status} {body[:200]!r}")
            n = wait_for(callbacks, 1)
            time.sleep(1)
            check("one callback for the SET sent twice", n == 1 and callbacks == ["/lock"], str(callbacks))

            # 2. An ES256 SET about the same subject, its members reordered and the email cased
            # otherwise: the same subject, a second decision (no once_per_subject).
            second = sign(claims(sub_id={"email": "alice@EXAMPLE.com", "format": "email"}),
                          EC, "ES256", "ec-1")
            status, _, body = push(second)
            check("an ES256 SET signed by jwcrypto is accepted: 202, empty", status == 202 and body == b"",
                  f"{status} {body[:200]!r}")
            n = wait_for(callbacks, 2)
            check("a second callback for the new jti", n == 2 and callbacks == ["/lock", "/lock"],
                  str(callbacks))
            subject = json.dumps({"format": "email", "email": "alice@example.com"})
            status, _, body = request(
                f"{base}/v1/decisions?subject_id={urllib.parse.quote(subject)}", headers=bearer)
            data = json.loads(body).get("data") if status == 200 else None
            check("both SETs are decisions of one subject, however its email is cased",
                  isinstance(data, list) and len(data) == 2
                  and all(d.get("decision") == "deny" and d.get("source") == "tx" for d in data),
                  f"{status} {body[:300]!r}")

            # 3. Refusals, RFC 8935 §2.3.
            forged = jwk.JWK.generate(kty="RSA", size=2048, kid="rsa-1")
            refused("a key not in the set under a known kid: invalid_key",
                    sign(claims(), forged, "RS256", "rsa-1"), "invalid_key")
            pem = RSA.export_to_pem(private_key=False)
            hmac_key = jwk.JWK(kty="oct", k=b64url(pem), kid="rsa-1")
            refused("HS256 keyed by the RSA public key's PEM: invalid_key",
                    sign(claims(), hmac_key, "HS256", "rsa-1"), "invalid_key")
            none = (b64url(json.dumps({"alg": "none", "kid": "rsa-1", "typ": "secevent+jwt"}).encode())
                    + "." + b64url(json.dumps(claims()).encode()) + ".")
            refused("alg none: invalid_key", none, "invalid_key")
            refused("another iss: invalid_issuer",
                    sign(claims(iss="https://evil.example/ssf"), RSA, "RS256", "rsa-1"), "invalid_issuer")
            refused("another aud: invalid_audience",
                    sign(claims(aud=["https://other.example/acme"]), RSA, "RS256", "rsa-1"),
                    "invalid_audience")
            refused("no jti: invalid_request", sign(claims(jti=None), RSA, "RS256", "rsa-1"),
                    "invalid_request")
            refused("pushed as application/json: invalid_request",
                    sign(claims(), RSA, "RS256", "rsa-1"), "invalid_request",
                    content_type="application/json")
            time.sleep(1)
            check("no callback for any refused SET", callbacks == ["/lock", "/lock"], str(callbacks))

            # 4. The source's status.
            status, _, body = request(f"{base}/v1/sources/acme/tx/status", headers=bearer)
            view = json.loads(body) if status == 200 else {}
            check("the status counts 2 accepted, 1 duplicate, 7 refused",
                  view.get("kind") == "ssf" and view.get("accepted") == 2
                  and view.get("duplicates") == 1 and view.get("refused") == 7,
                  f"{status} {body[:300]!r}")

            # 5. One fetch of the JWK Set: the forged SETs named a kid idem holds.
            check("the JWK Set was fetched exactly once", len(jwks_fetches) == 1, str(len(jwks_fetches)))
        finally:
            idem.terminate()
            idem.wait(timeout=10)
    transmitter.shutdown()
    receiver.shutdown()
    print(f"{results['passed']} passed, {results['failed']} failed")
    sys.exit(1 if results["failed"] else 0)


if __name__ == "__main__":
    main()
