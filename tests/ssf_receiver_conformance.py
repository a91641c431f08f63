"""Conformance of idem as a Shared Signals transmitter, checked by a receiver written with the
third-party JOSE library `jwcrypto`, as an identity provider (Okta, say) would check it: it
reads the transmitter's metadata and JWK Set, gets a token with its client credentials, creates
a push stream to its own HTTP server, and verifies every Security Event Token a real
`idem serve` (the binary given as argv[1]) pushes for a SIM swap: the signature under the key
its `kid` names, the JOSE header, `iss`, `aud`, `jti`, `txn`, `sub_id`, the CAEP event, the
RFC 8935 headers, and one SET however often the signal is retried; then it verifies its stream
(SSF 8.1.4) and checks the verification SET, and polls a poll stream (RFC 8936) for a SET
until it acknowledges it. Last, with idem stopped, it looks for the subject it used in every file
of the data directory, or with `postgres` as argv[2] (idem on a fresh database of the local
server, 127.0.0.1:5432, user postgres) in a `pg_dump` of it, `bytea` values decoded: it must be
in none. Prints `N passed, M failed` and exits non-zero on a failure."""

import base64
import http.server
import json
import os
import re
import subprocess
import sys
import tempfile
import time

from conformance_http import fresh_database, request, serve, start_idem, wait_for, write_config
from jwcrypto import jwk, jws
from jwcrypto.common import json_decode

API_KEY = "sk_ssf_receiver_conformance"
CLIENT_ID = "okta"
CLIENT_SECRET = "okta-client-secret-conformance"
AUDIENCE = "https://okta.example/ssf"
PUSH_AUTH = "Bearer push-credential-for-idem"
REVOKED = "https://schemas.openid.net/secevent/caep/event-type/session-revoked"
VERIFICATION = "https://schemas.openid.net/secevent/ssf/event-type/verification"
PHONE = "+447700900999"
results = {"passed": 0, "failed": 0}
received = []


def check(name, ok, detail=""):
    results["passed" if ok else "failed"] += 1
    print(f"{'ok  ' if ok else 'FAIL'} {name} {detail if not ok else ''}")


def verified_claims(token, keys):
    """The claims of `token`, verified by jwcrypto under the key its `kid` names; {} if not."""
    parsed = jws.JWS()
    try:
        parsed.deserialize(token)
        parsed.verify(keys.get_key(parsed.jose_header.get("kid")), alg="ES256")
        return json_decode(parsed.payload)
    except Exception as e:  # jwcrypto raises its own InvalidJWSSignature
        print(f"     {e}")
        return {}


class Receiver(http.server.BaseHTTPRequestHandler):
    """The provider's push endpoint: keeps each SET with its headers, answers 202."""

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        received.append(({k.lower(): v for k, v in self.headers.items()}, body.decode()))
        self.send_response(202)
        self.end_headers()

    def log_message(self, *args):
        pass


def stored(tmp, database):
    """What the store holds: every file of the data directory, or the database's dump with
    each `bytea` value decoded from its hex."""
    if database is None:
        held = []
        for root, _, files in os.walk(os.path.join(tmp, "data")):
            for name in files:
                with open(os.path.join(root, name), "rb") as f:
                    held.append(f.read())
        return held
    dump = subprocess.run(["pg_dump", "--data-only", "--no-owner", database],
                          capture_output=True, check=True).stdout
    decoded = [bytes.fromhex(h.decode()) for h in re.findall(rb"\\\\x((?:[0-9a-f]{2})*)", dump)]
    return [dump] + decoded


def main():
    binary = sys.argv[1]
    database = fresh_database("conformance") if sys.argv[2:] == ["postgres"] else None
    store = f'[store]\nbackend = "postgres"\nurl = "{database}"\n' if database else ""
    server, recv = serve(Receiver)
    push_url = f"{recv}/ssf/events"
    signing = jwk.JWK.generate(kty="EC", crv="P-256")
    with tempfile.TemporaryDirectory() as tmp:
        key_file = os.path.join(tmp, "transmitter.pem")
        with open(key_file, "wb") as f:
            f.write(signing.export_to_pem(private_key=True, password=None))
        config = write_config(tmp, f"""
{store}
[idempotency]
key_secret = "ssf-receiver-conformance-key-secret-0123"
[tenants.acme]
api_key = "{API_KEY}"
[tenants.acme.playbooks.sim_swap]
decision = "deny"
actions = [ {{ name = "revoke", set = "{REVOKED}", subject_format = "phone_number" }} ]
[tenants.acme.ssf]
signing_keys = ["{key_file}"]
[tenants.acme.ssf.receivers.{CLIENT_ID}]
client_secret = "{CLIENT_SECRET}"
audience = "{AUDIENCE}"
endpoints = ["http://127.0.0.1"]
""")
        idem, base = start_idem(binary, config)
        try:
            issuer = f"{base}/ssf/acme"

            # 1. Discovery, as a receiver finds a transmitter: SSF §7.2's well-known URL.
            status, _, body = request(f"{base}/.well-known/ssf-configuration/ssf/acme")
            meta = json.loads(body) if status == 200 else {}
            check("the metadata names the issuer and spec 1_0",
                  meta.get("issuer") == issuer and meta.get("spec_version") == "1_0", str(meta))
            check("push delivery is offered",
                  "urn:ietf:rfc:8935" in meta.get("delivery_methods_supported", []), str(meta))
            status, _, body = request(meta.get("jwks_uri", ""))
            keys = jwk.JWKSet.from_json(body) if status == 200 else jwk.JWKSet()
            published = [k for k in keys["keys"]]
            check("the JWK Set holds the signing key's public half under its RFC 7638 thumbprint",
                  len(published) == 1 and published[0].get("kid") == signing.thumbprint()
                  and not published[0].has_private,
                  f"{status} {body[:300]!r}")

            # 2. OAuth 2.0 client credentials (client_secret_basic), then a push stream.
            basic = base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()
            status, _, body = request(
                f"{base}/ssf/acme/token", b"grant_type=client_credentials",
                {"Authorization": f"Basic {basic}",
                 "Content-Type": "application/x-www-form-urlencoded"}, "POST")
            token = json.loads(body).get("access_token") if status == 200 else None
            check("a token for the client credentials", bool(token), f"{status} {body[:200]!r}")
            bearer = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
            stream = {"delivery": {"method": "urn:ietf:rfc:8935", "endpoint_url": push_url,
                                   "authorization_header": PUSH_AUTH},
                      "events_requested": [REVOKED]}
            status, _, body = request(meta.get("configuration_endpoint", ""),
                                      json.dumps(stream).encode(), bearer, "POST")
            made = json.loads(body) if status == 201 else {}
            check("a push stream is created (201) and delivers the event asked for",
                  made.get("events_delivered") == [REVOKED] and made.get("aud") == AUDIENCE
                  and made.get("iss") == issuer, f"{status} {body[:300]!r}")
            status, _, body = request(f"{meta.get('status_endpoint')}?stream_id={made.get('stream_id')}",
                                      headers=bearer)
            check("its status is enabled",
                  status == 200 and json.loads(body).get("status") == "enabled", str(body))

            # 3. A SIM swap, posted twice under one key: one SET.
            signal = json.dumps({"type": "sim_swap", "subject": PHONE}).encode()
            posted = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json",
                      "Idempotency-Key": "swap-conformance-1"}
            status, _, body = request(f"{base}/v1/signals", signal, posted, "POST")
            decision = json.loads(body) if status == 201 else {}
            actions = decision.get("actions", [])
            check("the decision lists the SET with its stream",
                  len(actions) == 1 and actions[0].get("stream_id") == made.get("stream_id"),
                  f"{status} {body[:300]!r}")
            status, headers, _ = request(f"{base}/v1/signals", signal, posted, "POST")
            check("the retry is a replay", status == 201 and headers.get("idempotent-replayed") == "true",
                  str(status))
            n = wait_for(received, 1)
            time.sleep(1)
            check("one SET for the signal sent twice", n == 1 and len(received) == 1, str(len(received)))
            if not received:
                return
            headers, set_token = received[0]
            check("RFC 8935's headers: secevent+jwt, the stream's authorization",
                  headers.get("content-type") == "application/secevent+jwt"
                  and headers.get("authorization") == PUSH_AUTH, str(headers))

            # 4. The SET, verified by jwcrypto under the key its kid names.
            parsed = jws.JWS()
            parsed.deserialize(set_token)
            header = parsed.jose_header
            check("the JOSE header: ES256, typ secevent+jwt, the published kid",
                  header.get("alg") == "ES256" and header.get("typ") == "secevent+jwt"
                  and header.get("kid") == signing.thumbprint(), str(header))
            try:
                parsed.verify(keys.get_key(header.get("kid")), alg="ES256")
                verified = True
            except Exception as e:  # jwcrypto raises its own InvalidJWSSignature
                verified = False
                print(f"     {e}")
            check("the signature verifies under the published key", verified)
            claims = json_decode(parsed.payload) if verified else {}
            check("iss, aud and iat", claims.get("iss") == issuer and claims.get("aud") == AUDIENCE
                  and isinstance(claims.get("iat"), int), str(claims))
            check("jti is the SET's delivery id, txn the decision",
                  claims.get("jti") == actions[0].get("delivery_id")
                  and claims.get("txn") == decision.get("decision_id"), str(claims))
            check("sub_id names the subject as a phone number",
                  claims.get("sub_id") == {"format": "phone_number", "phone_number": PHONE},
                  str(claims))
            event = claims.get("events", {}).get(REVOKED, {})
            check("the CAEP event: event_timestamp and initiating_entity",
                  isinstance(event.get("event_timestamp"), int)
                  and event.get("initiating_entity") == "policy", str(claims))

            # 5. The stream verified (SSF 8.1.4): a verification SET echoing the state.
            stream_id = made.get("stream_id")
            asked = json.dumps({"stream_id": stream_id, "state": "conformance-state"}).encode()
            status, _, body = request(meta.get("verification_endpoint", ""), asked, bearer, "POST")
            check("a verification is asked for (204)", status == 204, f"{status} {body[:200]!r}")
            wait_for(received, 2)
            verification = verified_claims(received[1][1], keys) if len(received) >= 2 else {}
            check("the verification SET verifies, names the stream and echoes the state",
                  verification.get("sub_id") == {"format": "opaque", "id": stream_id}
                  and verification.get("aud") == AUDIENCE
                  and verification.get("events", {}).get(VERIFICATION) == {"state": "conformance-state"},
                  str(verification))
            status, _, _ = request(meta.get("verification_endpoint", ""), asked, bearer, "POST")
            check("another at once is 429", status == 429, str(status))

            # 6. A poll stream (RFC 8936): the SET waits until polled, comes again until
            # acknowledged, and never after.
            check("poll delivery is offered",
                  "urn:ietf:rfc:8936" in meta.get("delivery_methods_supported", []), str(meta))
            polled = {"delivery": {"method": "urn:ietf:rfc:8936"}, "events_requested": [REVOKED]}
            status, _, body = request(meta.get("configuration_endpoint", ""),
                                      json.dumps(polled).encode(), bearer, "POST")
            poll_stream = json.loads(body) if status == 201 else {}
            poll_url = poll_stream.get("delivery", {}).get("endpoint_url", "")
            check("a poll stream is created with the URL to poll",
                  poll_url.startswith(base), f"{status} {body[:300]!r}")
            signal = json.dumps({"type": "sim_swap", "subject": PHONE}).encode()
            posted["Idempotency-Key"] = "swap-conformance-2"
            status, _, body = request(f"{base}/v1/signals", signal, posted, "POST")
            actions = json.loads(body).get("actions", []) if status == 201 else []
            jti = next((a.get("delivery_id") for a in actions
                        if a.get("stream_id") == poll_stream.get("stream_id")), None)
            now = json.dumps({"returnImmediately": True}).encode()
            status, _, body = request(poll_url, now, bearer, "POST")
            sets = json.loads(body).get("sets", {}) if status == 200 else {}
            claims = verified_claims(sets[jti], keys) if jti in sets else {}
            check("the poll hands out the decision's SET, verified",
                  list(sets) == [jti] and claims.get("jti") == jti
                  and claims.get("sub_id") == {"format": "phone_number", "phone_number": PHONE},
                  f"{status} {body[:300]!r}")
            status, _, body = request(poll_url, now, bearer, "POST")
            again = json.loads(body).get("sets", {}) if status == 200 else {}
            check("unacknowledged, it comes again with the same bytes", again == sets, str(again))
            ack = json.dumps({"ack": [jti], "returnImmediately": True}).encode()
            status, _, body = request(poll_url, ack, bearer, "POST")
            after = json.loads(body).get("sets") if status == 200 else None
            status, _, body = request(poll_url, now, bearer, "POST")
            later = json.loads(body).get("sets") if status == 200 else None
            check("acknowledged, it is never handed out again", after == {} and later == {},
                  f"{after} {later}")
        finally:
            idem.terminate()
            idem.wait(timeout=10)
            server.shutdown()

        # 7. The subject reached the receiver in clear; the store never held it so (where the
        # stream it went to is found, so the search looks where the store writes).
        held = stored(tmp, database)
        where = "the database" if database else "the data directory"
        stream_id = made.get("stream_id", "").encode()
        check(f"{where} holds the stream", stream_id and any(stream_id in b for b in held),
              f"{len(held)} places looked at")
        check(f"{where} holds no subject in clear",
              held and not any(PHONE.encode() in b or PHONE[1:].encode() in b for b in held),
              f"{len(held)} places looked at")
    print(f"{results['passed']} passed, {results['failed']} failed")
    sys.exit(1 if results["failed"] else 0)


if __name__ == "__main__":
    main()
