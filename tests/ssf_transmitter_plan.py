"""The OpenID Foundation's Shared Signals transmitter test plans (OIDSSFTransmitterTestPlan and
OIDSSFTransmitterTestPlanCaepInterop, openid-certification/conformance-suite), played against a
real `idem serve` (the binary given as argv[1]) by a receiver written here with the JOSE
library `jwcrypto`: each module of the plans is a named group of checks, for push and poll
streams, with the CAEP interoperability profile's scopes, `WWW-Authenticate` errors and events.
The receiver discovers idem's metadata, gets tokens, creates, reads, updates, replaces and
deletes streams, changes their status (nothing reaches a paused stream; enabling sends what was
held), asks for verifications, adds and removes subjects, and checks every SET it is sent or
polls: signature against the JWK Set, `typ`, one event, no `sub` or `exp`, `iss`, `aud`, the
verification's `state` and subject, and each CAEP event's members. Prints `ok`/`FAIL`/`n/a`
lines and `N passed, M failed`, and exits non-zero on a failure. A check is `n/a` only where
the plan looks at TLS, which idem leaves to what stands in front of it."""

import base64
import http.server
import json
import os
import sys
import tempfile
import time
import urllib.parse
import uuid

from conformance_http import request, serve, start_idem, write_config
from jwcrypto import jwk, jws

API_KEY = "sk_transmitter_plan_key"
OKTA_SECRET = "okta-client-secret-plan-0001"
AUDITOR_SECRET = "auditor-client-secret-plan-01"
PUSH_CREDENTIAL = "Bearer push-credential-of-the-plan-0001"
CAEP = "https://schemas.openid.net/secevent/caep/event-type/"
SSF = "https://schemas.openid.net/secevent/ssf/event-type/"
REVOKED = CAEP + "session-revoked"
CREDENTIAL = CAEP + "credential-change"
DEVICE = CAEP + "device-compliance-change"
INTEROP_EVENTS = [REVOKED, CREDENTIAL, DEVICE]
COMPROMISE = "https://schemas.openid.net/secevent/risc/event-type/credential-compromise"
VERIFICATION = SSF + "verification"
PUSH = "urn:ietf:rfc:8935"
POLL = "urn:ietf:rfc:8936"
CREDENTIAL_TYPES = {"password", "pin", "x509", "fido2-platform", "fido2-roaming", "fido-u2f",
                    "verifiable-credential", "phone-voice", "phone-sms", "app"}
results = {"passed": 0, "failed": 0}


def check(name, ok, detail=""):
    results["passed" if ok else "failed"] += 1
    print(f"{'ok  ' if ok else 'FAIL'} {name}" + ("" if ok else f" {detail}"))


def not_applicable(name, why):
    print(f"n/a  {name} ({why})")


pushes = []


class Receiver(http.server.BaseHTTPRequestHandler):
    """A push endpoint: records each request's path, Authorization, media type and body, and
    answers 202 as RFC 8935 §2.2 says."""

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        pushes.append({"path": self.path, "authorization": self.headers.get("authorization"),
                       "content_type": self.headers.get("content-type"), "token": body.decode()})
        self.send_response(202)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def config(tmp):
    key = jwk.JWK.generate(kty="RSA", size=2048)
    pem = os.path.join(tmp, "acme-rsa.pem")
    with open(pem, "wb") as f:
        f.write(key.export_to_pem(private_key=True, password=None))
    return write_config(tmp, f"""
[idempotency]
key_secret = "ssf-transmitter-plan-secret-0123456789"
[delivery]
inline_timeout = "2s"
schedule = ["300ms", "300ms", "300ms", "300ms", "300ms", "300ms"]
breaker_cooldown = "60s"
max_in_flight_per_endpoint = 1
[tenants.acme]
api_key = "{API_KEY}"
callback_secret = "whsec_c2VjcmV0LWZvci1hY21lLWNhbGxiYWNrcw=="
[tenants.acme.playbooks.sim_swap]
decision = "deny"
actions = [
  {{ name = "revoke", set = "{REVOKED}", subject_format = "phone_number", event = {{ reason_admin = {{ en = "SIM swap detected" }}, reason_user = {{ en = "Sign in again" }} }} }},
  {{ name = "password", set = "{CREDENTIAL}", subject_format = "phone_number", event = {{ credential_type = "password", change_type = "revoke", initiating_entity = "admin" }} }},
  {{ name = "device", set = "{DEVICE}", subject_format = "phone_number", event = {{ previous_status = "compliant", current_status = "not-compliant" }} }},
  {{ name = "compromise", set = "{COMPROMISE}", subject_format = "phone_number", event = {{ credential_type = "phone-sms" }} }},
]
[tenants.acme.ssf]
signing_keys = ["{pem}"]
min_verification_interval = "1s"
[tenants.acme.ssf.receivers.okta]
client_secret = "{OKTA_SECRET}"
audience = "https://okta.example.test"
endpoints = ["http://127.0.0.1"]
[tenants.acme.ssf.receivers.auditor]
client_secret = "{AUDITOR_SECRET}"
audience = "https://auditor.example.test"
scopes = ["ssf.read"]
""")


def b64(text):
    return base64.b64encode(text.encode()).decode()


class Plan:
    """The receiver's side of the plans against idem at `base`."""

    def __init__(self, base, recv):
        self.base = base
        self.recv = recv
        self.meta = {}
        self.keys = None
        self.token = None

    def metadata(self):
        status, _, body = request(f"{self.base}/.well-known/ssf-configuration/ssf/acme")
        self.meta = json.loads(body) if status == 200 else {}
        return status, self.meta

    def token_for(self, client, secret, scope=None):
        form = {"grant_type": "client_credentials"}
        if scope is not None:
            form["scope"] = scope
        status, _, body = request(f"{self.base}/ssf/acme/token", urllib.parse.urlencode(form).encode(),
                                  {"Content-Type": "application/x-www-form-urlencoded",
                                   "Authorization": "Basic " + b64(f"{client}:{secret}")}, "POST")
        return status, json.loads(body) if body else {}

    def call(self, method, endpoint, body=None, query=None, token=None, raw=None):
        """A call to one of the metadata's endpoints with the receiver's token (or `token`)."""
        url = self.meta[endpoint] + (("?" + urllib.parse.urlencode(query)) if query else "")
        headers = {"Authorization": f"Bearer {token or self.token}"}
        data = None
        if raw is not None or body is not None:
            data = raw.encode() if raw is not None else json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        status, h, answer = request(url, data, headers, method)
        try:
            parsed = json.loads(answer) if answer else None
        except ValueError:
            parsed = None
        return status, h, parsed

    def create(self, delivery, events=None, token=None):
        body = {"events_requested": events or INTEROP_EVENTS, "description": "the plan's stream"}
        if delivery is not None:
            body["delivery"] = delivery
        return self.call("POST", "configuration_endpoint", body, token=token)

    def push_delivery(self, path, authorization=PUSH_CREDENTIAL):
        d = {"method": PUSH, "endpoint_url": f"{self.recv}{path}"}
        if authorization:
            d["authorization_header"] = authorization
        return d

    def delete(self, stream_id):
        return self.call("DELETE", "configuration_endpoint", query={"stream_id": stream_id})

    def verify(self, stream_id, state):
        return self.call("POST", "verification_endpoint", {"stream_id": stream_id, "state": state})

    def poll(self, stream, ack=(), immediately=True, max_events=None):
        body = {"returnImmediately": immediately, "ack": list(ack)}
        if max_events is not None:
            body["maxEvents"] = max_events
        status, _, answer = request(stream["delivery"]["endpoint_url"], json.dumps(body).encode(),
                                    {"Authorization": f"Bearer {self.token}",
                                     "Content-Type": "application/json"}, "POST")
        return status, json.loads(answer) if answer else {}

    def jwks(self):
        if self.keys is None:
            _, _, body = request(self.meta["jwks_uri"])
            self.keys = jwk.JWKSet.from_json(body)
        return self.keys

    def verified(self, token):
        """The header and claims of a SET whose signature holds under idem's JWK Set (None when
        it does not)."""
        t = jws.JWS()
        try:
            t.deserialize(token)
            header = t.jose_header
            t.verify(self.jwks().get_key(header.get("kid")), alg=header.get("alg"))
        except Exception:  # noqa: BLE001 - any failure is a failed signature
            return None, None
        return header, json.loads(t.payload)


def set_checks(name, plan, stream, header, claims, interop):
    """The plan's conditions on every SET: AbstractOIDSSFTransmitterStreamVerificationTest's
    verifyParsedVerificationEventCommon."""
    check(f"{name}: OIDSSFVerifySignatureOfSecurityEventToken", claims is not None)
    if claims is None:
        return
    if interop:
        check(f"{name}: OIDSSFEnsureEventSignedWithRsa256", header.get("alg") == "RS256", str(header))
    check(f"{name}: OIDSSFEnsureSecurityEventTokenUsesTypeSecEventJwt",
          header.get("typ") == "secevent+jwt", str(header))
    check(f"{name}: OIDSSFEnsureSecurityEventTokenContainsSingleEvent",
          isinstance(claims.get("events"), dict) and len(claims["events"]) == 1, str(claims))
    check(f"{name}: OIDSSFEnsureSecurityEventTokenDoesNotContainSubClaim", "sub" not in claims)
    check(f"{name}: OIDSSFEnsureSecurityEventTokenDoesNotContainExpClaim", "exp" not in claims)
    check(f"{name}: OIDSSFEnsureSecurityEventTokenIssuerMatchesStreamConfigurationIssuer",
          claims.get("iss") == stream["iss"] == plan.meta["issuer"], f"{claims.get('iss')} {stream['iss']}")
    check(f"{name}: OIDSSFEnsureSecurityEventTokenIatIsNotInFuture",
          isinstance(claims.get("iat"), int) and claims["iat"] <= time.time() + 1, str(claims.get("iat")))
    aud = claims.get("aud")
    auds = set(aud) if isinstance(aud, list) else {aud}
    streams = set(stream["aud"]) if isinstance(stream["aud"], list) else {stream["aud"]}
    check(f"{name}: OIDSSFValidateSecurityEventTokenAudClaim", isinstance(aud, (str, list)), str(aud))
    check(f"{name}: OIDSSFEnsureEventContainsStreamAudience", auds <= streams, f"{auds} {streams}")


def verification_checks(name, plan, stream, token, state, interop, authorization=None, push=None):
    """A verification SET: the common conditions, then its subject, its state and (pushed) the
    stream's authorization header."""
    header, claims = plan.verified(token)
    set_checks(name, plan, stream, header, claims, interop)
    if claims is None:
        return
    event = claims.get("events", {}).get(VERIFICATION)
    check(f"{name}: a verification event", isinstance(event, dict), str(claims))
    check(f"{name}: OIDSSFValidateSecurityEventTokenTxnClaim (a stream's own SET has no txn)",
          "txn" not in claims, str(claims))
    check(f"{name}: OIDSSFCheckVerificationEventSubjectId",
          claims.get("sub_id") == {"format": "opaque", "id": stream["stream_id"]}, str(claims.get("sub_id")))
    check(f"{name}: OIDSSFCheckVerificationEventState",
          isinstance(event, dict) and event.get("state") == state, str(event))
    if push is not None:
        if authorization:
            check(f"{name}: OIDSSFCheckVerificationAuthorizationHeader",
                  push["authorization"] == authorization, str(push["authorization"]))
        else:
            check(f"{name}: OIDSSFEnsureNoAuthorizationHeaderIsPresentInPushRequest",
                  push["authorization"] is None, str(push["authorization"]))
        check(f"{name}: pushed as application/secevent+jwt",
              (push["content_type"] or "").split(";")[0] == "application/secevent+jwt", str(push))


def pushed_to(path, n=1, timeout=10):
    """The pushes to `path`, once there are `n` (or `timeout` seconds have passed)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = [p for p in pushes if p["path"] == path]
        if len(got) >= n:
            return got
        time.sleep(0.05)
    return [p for p in pushes if p["path"] == path]


def caep_event_checks(name, plan, stream, token, interop):
    """A CAEP or RISC event's SET: the common conditions, then OIDSSFExtractCaepEventData,
    OIDSSFValidateCaepCommonOptionalFields and the event type's own conditions."""
    header, claims = plan.verified(token)
    events = (claims or {}).get("events") or {"unreadable": {}}
    event_type, data = next(iter(events.items()))
    name = f"{name} {event_type.rsplit('/', 1)[-1]}"
    set_checks(name, plan, stream, header, claims, interop)
    if claims is None:
        return None
    check(f"{name}: OIDSSFValidateSecurityEventTokenTxnClaim", isinstance(claims.get("txn"), str))
    if event_type.startswith(CAEP):
        ok = (isinstance(data.get("event_timestamp"), int)
              and data.get("initiating_entity") in {"admin", "user", "policy", "system"}
              and all(isinstance(data[r], dict) and data[r]
                      and all(isinstance(k, str) and isinstance(v, str) for k, v in data[r].items())
                      for r in ("reason_admin", "reason_user") if r in data))
        check(f"{name}: OIDSSFValidateCaepCommonOptionalFields", ok, str(data))
    if event_type == REVOKED and interop:
        check(f"{name}: reason_admin (CAEP interoperability profile §3.1)",
              data.get("reason_admin") == {"en": "SIM swap detected"}, str(data))
    if event_type == CREDENTIAL:
        check(f"{name}: OIDSSFValidateCaepCredentialChangeEvent",
              data.get("credential_type") in CREDENTIAL_TYPES
              and data.get("change_type") in {"create", "revoke", "update", "delete"}, str(data))
    if event_type == DEVICE:
        statuses = {"compliant", "not-compliant"}
        check(f"{name}: OIDSSFValidateCaepDeviceComplianceChangeEvent",
              data.get("previous_status") in statuses and data.get("current_status") in statuses, str(data))
    if event_type == COMPROMISE:
        check(f"{name}: credential_type",
              data.get("credential_type") in CREDENTIAL_TYPES, str(data))
    return event_type


def sim_swap(base, phone, key):
    body = json.dumps({"type": "sim_swap", "subject": phone, "occurred_at": "2026-11-29T17:54:32Z",
                       "metadata": {"risk": 97}}).encode()
    return request(f"{base}/v1/signals", body, {"Authorization": f"Bearer {API_KEY}",
                                                "Content-Type": "application/json",
                                                "Idempotency-Key": key}, "POST")


def metadata_test(plan, interop):
    m = "OIDSSFTransmitterMetadataTest" + (" (caep_interop)" if interop else "")
    status, meta = plan.metadata()
    check(f"{m}: OIDSSFGetDynamicTransmitterConfiguration 200", status == 200, str(status))
    check(f"{m}: OIDSSFCheckTransmitterMetadataIssuer", meta.get("issuer") == f"{plan.base}/ssf/acme",
          str(meta.get("issuer")))
    not_applicable(f"{m}: OIDSSFEnsureHttpsUrlsTransmitterMetadataCheck",
                   "idem serves plain HTTP; TLS is terminated in front of it")
    not_applicable(f"{m}: OIDSSFValidateTlsConnectionConditionSequence",
                   "idem serves plain HTTP; TLS is terminated in front of it")
    check(f"{m}: OIDSSFRequiredFieldsTransmitterMetadataCheck", "issuer" in meta)
    check(f"{m}: OIDSSFDefaultSubjectsTransmitterMetadataCheck",
          meta.get("default_subjects", "ALL") in ("ALL", "NONE"), str(meta.get("default_subjects")))
    schemes = meta.get("authorization_schemes") or []
    check(f"{m}: OIDSSFAuthorizationSchemesTransmitterMetadataCheck",
          all(isinstance(s, dict) and str(s.get("spec_urn", "")).startswith("urn:") for s in schemes),
          str(schemes))
    if interop:
        check(f"{m}: OIDSSFCaepInteropAuthorizationSchemesTransmitterMetadataCheck",
              any(s.get("spec_urn") == "urn:ietf:rfc:6749" for s in schemes), str(schemes))
    check(f"{m}: OIDSSFCheckSupportedDeliveryMethods",
          {PUSH, POLL} <= set(meta.get("delivery_methods_supported") or []), str(meta))
    if interop:
        version = str(meta.get("spec_version", ""))
        check(f"{m}: OIDSSFSpecVersionTransmitterMetadataCheck",
              version.startswith("1_0") and "." not in version, version)
        for field, cond in [("jwks_uri", "OIDSSFCheckRequiredFieldJwksUri"),
                            ("configuration_endpoint", "OIDSSFCheckRequiredFieldConfigurationEndpoint"),
                            ("status_endpoint", "OIDSSFCheckRequiredFieldStatusEndpoint"),
                            ("verification_endpoint", "OIDSSFCheckRequiredFieldVerificationEndpoint")]:
            check(f"{m}: {cond}", isinstance(meta.get(field), str), str(meta.get(field)))
    check(f"{m}: OIDSSFEnsureNonEmptyArrayClaimsCheck",
          not any(isinstance(v, list) and not v for v in meta.values()), str(meta))
    status, h, body = request(meta.get("jwks_uri", f"{plan.base}/ssf/acme/jwks"))
    try:
        keys = json.loads(body)["keys"]
        jwk.JWKSet.from_json(body)
        ok = status == 200 and keys and all(k.get("kid") and k.get("use") == "sig" and "d" not in k
                                            for k in keys)
    except (ValueError, KeyError, TypeError):
        ok = False
    check(f"{m}: CheckJwksUri, FetchServerKeys, ValidateJwksSequence", ok, f"{status} {body[:200]!r}")


def scopes_test(plan):
    m = "OIDSSFValidateRequestedScope"
    status, t = plan.token_for("okta", OKTA_SECRET, "ssf.read ssf.manage")
    check(f"{m}: both scopes asked, both granted", status == 200 and t.get("scope") == "ssf.read ssf.manage"
          and t.get("token_type", "").lower() == "bearer" and isinstance(t.get("expires_in"), int), str(t))
    status, t = plan.token_for("okta", OKTA_SECRET)
    check(f"{m}: none asked, the receiver's scopes", status == 200
          and set(t.get("scope", "").split()) == {"ssf.read", "ssf.manage"}, str(t))
    status, t = plan.token_for("auditor", AUDITOR_SECRET, "ssf.manage")
    check(f"{m}: a scope beyond the receiver's is invalid_scope",
          status == 400 and t.get("error") == "invalid_scope", f"{status} {t}")
    status, t = plan.token_for("okta", "not-the-secret-at-all")
    check(f"{m}: a wrong secret is invalid_client", status == 401 and t.get("error") == "invalid_client",
          f"{status} {t}")
    m = "OIDSSFEnsureTokenScopeSufficient"
    _, read = plan.token_for("auditor", AUDITOR_SECRET, "ssf.read")
    read = read.get("access_token")
    status, h, body = plan.create({"method": POLL}, token=read)
    www = h.get("www-authenticate", "")
    check(f"{m}: creating with ssf.read only is 403 insufficient_scope, scope=\"ssf.manage\"",
          status == 403 and 'error="insufficient_scope"' in www and 'scope="ssf.manage"' in www,
          f"{status} {www} {body}")
    status, _, body = plan.call("GET", "configuration_endpoint", token=read)
    check(f"{m}: reading with ssf.read is 200, and the refused create made nothing",
          status == 200 and body == [], f"{status} {body}")


def invalid_token_tests(plan, interop):
    """The plan's OIDSSFStreamControlNegativeTest*WithInvalidAccessToken/Token modules."""
    status, _, stream = plan.create({"method": POLL})
    sid = (stream or {}).get("stream_id", "none")
    bad = f"invalid:{uuid.uuid4()}"  # as the plan's OIDSSFInjectInvalidAccessTokenOverride makes it
    calls = [("CreateStreamWithInvalidAccessToken", "POST", {"delivery": {"method": POLL}}, None),
             ("ReadStreamWithInvalidAccessToken", "GET", None, {"stream_id": sid}),
             ("DeleteStreamWithInvalidAccessToken", "DELETE", None, {"stream_id": sid})]
    if not interop:
        calls += [("UpdateStreamWithInvalidToken", "PATCH", {"stream_id": sid, "description": "x"}, None),
                  ("ReplaceStreamWithInvalidToken", "PUT", {"stream_id": sid, "delivery": {"method": POLL}},
                   None)]
    for module, method, body, query in calls:
        status, h, answer = plan.call(method, "configuration_endpoint", body, query, token=bad)
        www = h.get("www-authenticate", "")
        check(f"OIDSSFStreamControlNegativeTest{module}: 401, error=\"invalid_token\"",
              status == 401 and www.startswith("Bearer") and 'error="invalid_token"' in www,
              f"{status} {www} {answer}")
    altered = plan.token[:-2] + ("AA" if not plan.token.endswith("AA") else "BB")
    status, h, answer = plan.call("GET", "configuration_endpoint", query={"stream_id": sid}, token=altered)
    check("OIDSSFStreamControlNegativeTestReadStreamWithInvalidAccessToken: an altered token is 401 invalid_token",
          status == 401 and 'error="invalid_token"' in h.get("www-authenticate", ""), f"{status} {answer}")
    status, _, answer = plan.call("GET", "configuration_endpoint", query={"stream_id": sid})
    check("OIDSSFStreamControlNegativeTest*WithInvalidAccessToken: the stream is untouched",
          status == 200 and answer.get("description") == "the plan's stream", f"{status} {answer}")
    plan.delete(sid)


def unknown_stream_tests(plan, interop):
    """ReadUnknownStream, UpdateUnknownStream, ReplaceUnknownStream, DeleteUnknownStream: a stream
    made and deleted, then named."""
    _, _, stream = plan.create({"method": POLL})
    sid = stream["stream_id"]
    plan.delete(sid)
    calls = [("ReadUnknownStream", "GET", None, {"stream_id": sid}),
             ("DeleteUnknownStream", "DELETE", None, {"stream_id": sid})]
    if not interop:
        calls += [("UpdateUnknownStream", "PATCH", {"stream_id": sid, "description": "x"}, None),
                  ("ReplaceUnknownStream", "PUT", {"stream_id": sid, "delivery": {"method": POLL}}, None)]
    for module, method, body, query in calls:
        status, _, answer = plan.call(method, "configuration_endpoint", body, query)
        check(f"OIDSSFStreamControlNegativeTest{module}: 404", status == 404, f"{status} {answer}")


def broken_input_tests(plan, interop):
    status, _, answer = plan.call("POST", "configuration_endpoint", raw=";{ broken")
    check("OIDSSFStreamControlNegativeTestCreateStreamWithBrokenInput: 400", status == 400, f"{status} {answer}")
    status, _, answer = plan.call("GET", "configuration_endpoint")
    check("OIDSSFStreamControlNegativeTestCreateStreamWithBrokenInput: nothing made",
          status == 200 and answer == [], f"{status} {answer}")
    if interop:
        return
    _, _, stream = plan.create({"method": POLL})
    sid = stream["stream_id"]
    for module, method in [("UpdateStreamWithInvalidBody", "PATCH"), ("ReplaceStreamWithInvalidBody", "PUT")]:
        status, _, answer = plan.call(method, "configuration_endpoint", raw=";{ broken")
        check(f"OIDSSFStreamControlNegativeTest{module}: 400", status == 400, f"{status} {answer}")
    status, _, answer = plan.call("GET", "configuration_endpoint", query={"stream_id": sid})
    check("OIDSSFStreamControlNegativeTest*WithInvalidBody: the stream is untouched",
          status == 200 and answer.get("delivery", {}).get("method") == POLL
          and answer.get("description") == "the plan's stream", f"{status} {answer}")
    plan.delete(sid)


def duplicate_config_test(plan):
    m = "OIDSSFStreamControlNegativeTestCreateStreamWithDuplicateConfig"
    s1, _, a = plan.create({"method": POLL})
    s2, _, b = plan.create({"method": POLL})
    check(f"{m}: 201, then 201 (several streams per receiver) or 409", s1 == 201 and s2 in (201, 409),
          f"{s1} {s2} {b}")
    for stream in (a, b):
        if isinstance(stream, dict) and "stream_id" in stream:
            plan.delete(stream["stream_id"])


def happy_path_test(plan, mode, interop):
    m = f"OIDSSFStreamControlHappyPathTest ({mode}{', caep_interop' if interop else ''})"
    delivery = plan.push_delivery(f"/happy-{mode}") if mode == "push" else {"method": POLL}
    status, _, stream = plan.create(delivery)
    stream = stream or {}
    check(f"{m}: create 201", status == 201, f"{status} {stream}")
    check(f"{m}: OIDSSFCheckTransmitterMetadataIssuerMatchesIssuerInResponse (create)",
          stream.get("iss") == plan.meta["issuer"], str(stream.get("iss")))
    check(f"{m}: OIDSSFCheckStreamAudience", stream.get("aud") == "https://okta.example.test", str(stream))
    check(f"{m}: OIDSSFCheckStreamDeliveryMethod (create)",
          stream.get("delivery", {}).get("method") == delivery["method"], str(stream.get("delivery")))
    missing = {"stream_id", "iss", "aud", "events_delivered", "delivery"} - set(stream)
    check(f"{m}: OIDSSFStreamRequiredFieldsCheck", not missing, str(missing))
    check(f"{m}: OIDSSFStreamOptionalFieldsCheck",
          isinstance(stream.get("min_verification_interval", 0), int)
          and isinstance(stream.get("events_supported", []), list), str(stream))
    if mode == "push":
        check(f"{m}: the push stream keeps its authorization_header out of answers",
              PUSH_CREDENTIAL not in json.dumps(stream), str(stream))
    sid = stream.get("stream_id", "none")
    status, _, read = plan.call("GET", "configuration_endpoint", query={"stream_id": sid})
    read = read or {}
    check(f"{m}: read 200", status == 200 and read.get("stream_id") == sid, f"{status} {read}")
    check(f"{m}: OIDSSFCheckTransmitterMetadataIssuerMatchesIssuerInResponse (read)",
          read.get("iss") == plan.meta["issuer"])
    supported = read.get("events_supported") or []
    check(f"{m}: OIDSSFCheckSupportedEventsForStream",
          set(read.get("events_delivered") or []) <= set(supported)
          and set(read.get("events_delivered") or []) == set(INTEROP_EVENTS), str(read))
    if interop:
        check(f"{m}: OIDSSFEnsureAtLeastOneCaepInteropEventInStreamSupportedEvents",
              any(e in supported for e in INTEROP_EVENTS), str(supported))
    check(f"{m}: OIDSSFCheckStreamDeliveryMethod (read)",
          read.get("delivery", {}).get("method") == delivery["method"])
    if not interop:
        status, _, upd = plan.call("PATCH", "configuration_endpoint",
                                   {"stream_id": sid, "events_requested": [REVOKED]})
        check(f"{m}: OIDSSFUpdateStreamConfigCall 200, events_delivered updated",
              status == 200 and (upd or {}).get("events_delivered") == [REVOKED]
              and upd.get("iss") == plan.meta["issuer"], f"{status} {upd}")
        replace = {"stream_id": sid, "delivery": delivery, "events_requested": INTEROP_EVENTS}
        status, _, rep = plan.call("PUT", "configuration_endpoint", replace)
        check(f"{m}: OIDSSFReplaceStreamConfigCall 200, description reset",
              status == 200 and (rep or {}).get("events_delivered") == INTEROP_EVENTS
              and "description" not in {k for k, v in rep.items() if v is not None}
              and rep.get("iss") == plan.meta["issuer"], f"{status} {rep}")
    status, _, st = plan.call("GET", "status_endpoint", query={"stream_id": sid})
    check(f"{m}: OIDSSFReadStreamStatusCall 200 enabled",
          status == 200 and (st or {}).get("status") == "enabled", f"{status} {st}")
    if not interop:
        for value in ("enabled", "paused", "disabled", "enabled"):
            status, h, st = plan.call("POST", "status_endpoint",
                                      {"stream_id": sid, "status": value, "reason": "the plan"})
            check(f"{m}: OIDSSFUpdateStreamStatusCall {value}: 200, OIDSSFCheckExpectedJsonResponseContents",
                  status == 200 and h.get("content-type", "").startswith("application/json")
                  and (st or {}).get("status") == value, f"{status} {st}")
    status, _, _ = plan.delete(sid)
    check(f"{m}: OIDSSFDeleteStreamConfigCall 204", status == 204, str(status))
    status, _, _ = plan.call("GET", "configuration_endpoint", query={"stream_id": sid})
    check(f"{m}: the deleted stream is gone", status == 404, str(status))


def subject_control_test(plan):
    m = "OIDSSFStreamSubjectControlHappyPathTest"
    check(f"{m}: add_subject_endpoint and remove_subject_endpoint advertised",
          "add_subject_endpoint" in plan.meta and "remove_subject_endpoint" in plan.meta, str(plan.meta))
    _, _, stream = plan.create(plan.push_delivery("/subjects"), [REVOKED])
    sid = stream["stream_id"]
    subject = {"format": "email", "email": "example.user@example.com"}
    status, _, answer = plan.call("POST", "add_subject_endpoint",
                                  {"stream_id": sid, "subject": subject, "verified": True})
    check(f"{m}: OIDSSFAddSubjectToStreamConfigCall 200", status == 200, f"{status} {answer}")
    status, _, answer = plan.call("POST", "remove_subject_endpoint", {"stream_id": sid, "subject": subject})
    check(f"{m}: OIDSSFRemoveSubjectToStreamConfigCall 204", status == 204, f"{status} {answer}")
    # What the removal means: a decision about a removed subject is not sent to the stream.
    phone = {"format": "phone_number", "phone_number": "+15550100999"}
    status, _, _ = plan.call("POST", "remove_subject_endpoint", {"stream_id": sid, "subject": phone})
    sim_swap(plan.base, "+15550100999", "subjects-removed-1")
    sim_swap(plan.base, "+15550100998", "subjects-kept-1")
    got = pushed_to("/subjects", 1)
    time.sleep(1)
    got = pushed_to("/subjects", 1, 0)
    subjects = [(plan.verified(p["token"])[1] or {}).get("sub_id") for p in got]
    check(f"{m}: a removed subject is left out, the others sent",
          status == 204 and subjects == [{"format": "phone_number", "phone_number": "+15550100998"}],
          str(subjects))
    plan.call("POST", "add_subject_endpoint", {"stream_id": sid, "subject": phone})
    sim_swap(plan.base, "+15550100999", "subjects-added-1")
    got = pushed_to("/subjects", 2)
    check(f"{m}: a subject added again is sent again", len(got) == 2, str(len(got)))
    plan.delete(sid)


def without_delivery_test(plan):
    m = "OIDSSFHandleStreamCreateRequestValidation"
    status, _, stream = plan.create(None)
    stream = stream or {}
    d = stream.get("delivery", {})
    check(f"{m}: a stream created without delivery is a poll stream (SSF §8.1.1.1)",
          status == 201 and d.get("method") == POLL
          and str(d.get("endpoint_url", "")).startswith(plan.meta["issuer"]), f"{status} {stream}")
    if "stream_id" in stream:
        plan.delete(stream["stream_id"])


def push_verification_test(plan, interop, authorization):
    name = "OIDSSFTransmitterStreamVerificationPushTest" if authorization else \
        "OIDSSFTransmitterStreamVerificationPushNoAuthTest"
    m = name + (" (caep_interop)" if interop else "")
    path = f"/verify-{'auth' if authorization else 'noauth'}-{int(interop)}"
    status, _, stream = plan.create(plan.push_delivery(path, authorization))
    check(f"{m}: create 201", status == 201, f"{status} {stream}")
    status, _, answer = plan.verify(stream["stream_id"], "state-of-the-push-plan")
    check(f"{m}: OIDSSFTriggerVerificationEvent 204", status == 204, f"{status} {answer}")
    got = pushed_to(path, 1)
    check(f"{m}: OIDSSFGetOrWaitForPushRequest", len(got) == 1, str(len(got)))
    if got:
        verification_checks(m, plan, stream, got[0]["token"], "state-of-the-push-plan", interop,
                            authorization, got[0])
    status, h, answer = plan.verify(stream["stream_id"], "too-soon")
    check(f"{m}: OIDSSFWaitForMinVerificationInterval: sooner is 429 with Retry-After",
          status == 429 and "retry-after" in h, f"{status} {answer}")
    plan.delete(stream["stream_id"])


def poll_verification_tests(plan, interop):
    suffix = " (caep_interop)" if interop else ""
    # POLL_ONLY: the verification is handed out, and again while not acknowledged.
    m = "OIDSSFTransmitterStreamVerificationPollOnlyTest" + suffix
    _, _, stream = plan.create({"method": POLL})
    sid = stream["stream_id"]
    status, _, _ = plan.verify(sid, "state-poll-only")
    check(f"{m}: OIDSSFTriggerVerificationEvent 204", status == 204, str(status))
    status, first = plan.poll(stream, immediately=False)
    sets = first.get("sets", {})
    check(f"{m}: OIDSSFCallPollEndpoint 200, OIDSSFExtractReceivedSETs", status == 200 and len(sets) == 1,
          f"{status} {first}")
    for jti, token in sets.items():
        verification_checks(m, plan, stream, token, "state-poll-only", interop)
        claims = plan.verified(token)[1] or {}
        check(f"{m}: the SET's jti is the key it is listed under", claims.get("jti") == jti)
    status, again = plan.poll(stream)
    check(f"{m}: not acknowledged, handed out again with the same bytes",
          status == 200 and again.get("sets") == sets, str(again))

    # ACKNOWLEDGE_ONLY: acknowledged, it is not handed out again.
    m = "OIDSSFTransmitterStreamVerificationAckOnlyTest" + suffix
    status, acked = plan.poll(stream, ack=sets.keys(), max_events=0)
    check(f"{m}: OIDSSFCallPollEndpoint with ack only 200", status == 200, f"{status} {acked}")
    status, after = plan.poll(stream)
    check(f"{m}: the acknowledged verification is not handed out again",
          status == 200 and after.get("sets") == {}, str(after))

    # POLL_AND_ACKNOWLEDGE: a first verification polled, a second asked for, the first
    # acknowledged and the second polled in one call.
    m = "OIDSSFTransmitterStreamVerificationPollAndAckTest" + suffix
    time.sleep(stream.get("min_verification_interval", 1))
    plan.verify(sid, "state-first")
    _, first = plan.poll(stream, immediately=False)
    first = first.get("sets", {})
    time.sleep(stream.get("min_verification_interval", 1))
    status, _, _ = plan.verify(sid, "state-second")
    check(f"{m}: OIDSSFTriggerVerificationEvent (second) 204", status == 204, str(status))
    deadline = time.time() + 5
    second = {}
    while time.time() < deadline and not second:
        status, answer = plan.poll(stream, ack=first.keys())
        second = {j: t for j, t in answer.get("sets", {}).items() if j not in first}
        time.sleep(0.05)
    check(f"{m}: the first acknowledged, the second handed out",
          len(first) == 1 and len(second) == 1 and not set(answer.get("sets", {})) & set(first),
          f"{first.keys()} {answer}")
    for token in second.values():
        verification_checks(m, plan, stream, token, "state-second", interop)
    plan.delete(sid)


def quiet_status_tests(plan):
    """SSF §8.1.2.2 as the happy path's status updates and the profile take them: a change the
    receiver made is answered, not announced; nothing reaches a paused stream, push or poll, and
    enabling sends what was held at once."""
    m = "OIDSSFStreamControlHappyPathTest status (push)"
    path = "/paused"
    _, _, stream = plan.create(plan.push_delivery(path), [REVOKED])
    sid = stream["stream_id"]
    status, _, st = plan.call("POST", "status_endpoint", {"stream_id": sid, "status": "paused"})
    check(f"{m}: paused 200", status == 200 and st.get("status") == "paused", f"{status} {st}")
    sim_swap(plan.base, "+15550100101", "paused-1")
    status, _, _ = plan.verify(sid, "while-paused")
    check(f"{m}: a verification may be asked for while paused (204)", status == 204, str(status))
    time.sleep(1.5)
    check(f"{m}: nothing reaches a paused stream, no stream-updated SET either",
          pushed_to(path, 1, 0) == [], str(pushed_to(path, 1, 0)))
    status, _, st = plan.call("POST", "status_endpoint", {"stream_id": sid, "status": "enabled"})
    got = pushed_to(path, 2, 10)
    kinds = [list((plan.verified(p["token"])[1] or {}).get("events", {}))[:1] for p in got]
    check(f"{m}: enabling sends what was held at once (not at breaker_cooldown)",
          len(got) == 2 and sorted(k[0] for k in kinds) == sorted([REVOKED, VERIFICATION]), str(kinds))
    check(f"{m}: what was held arrives in the order it was held (the decision's SET, then the "
          "verification asked for after it)",
          [k[0] for k in kinds if k] == [REVOKED, VERIFICATION], str(kinds))
    check(f"{m}: no stream-updated SET for the receiver's own changes",
          not any(k and k[0] == SSF + "stream-updated" for k in kinds), str(kinds))
    plan.call("POST", "status_endpoint", {"stream_id": sid, "status": "disabled"})
    sim_swap(plan.base, "+15550100102", "disabled-1")
    time.sleep(1.5)
    check(f"{m}: nothing reaches a disabled stream", len(pushed_to(path, 3, 0)) == 2)
    plan.call("POST", "status_endpoint", {"stream_id": sid, "status": "enabled"})
    time.sleep(1.5)
    check(f"{m}: a disabled stream's SET is dropped, not sent on enabling", len(pushed_to(path, 3, 0)) == 2,
          str(len(pushed_to(path, 3, 0))))
    plan.delete(sid)

    m = "OIDSSFStreamControlHappyPathTest status (poll)"
    _, _, stream = plan.create({"method": POLL}, [REVOKED])
    sid = stream["stream_id"]
    plan.call("POST", "status_endpoint", {"stream_id": sid, "status": "paused"})
    sim_swap(plan.base, "+15550100103", "paused-poll-1")
    plan.verify(sid, "while-paused-poll")
    status, answer = plan.poll(stream)
    check(f"{m}: a paused poll stream hands out nothing", status == 200 and answer.get("sets") == {},
          str(answer))
    plan.call("POST", "status_endpoint", {"stream_id": sid, "status": "enabled"})
    status, answer = plan.poll(stream, immediately=False)
    types = sorted(list((plan.verified(t)[1] or {}).get("events", {}))[0] for t in answer.get("sets", {}).values())
    check(f"{m}: enabled, it hands out what was held", types == sorted([REVOKED, VERIFICATION]), str(types))
    plan.delete(sid)


def caep_interop_test(plan, mode):
    m = f"OIDSSFTransmitterStreamCaepInteropTest ({mode})"
    path = "/interop"
    delivery = plan.push_delivery(path) if mode == "push" else {"method": POLL}
    status, _, stream = plan.create(delivery, INTEROP_EVENTS + [COMPROMISE])
    check(f"{m}: create 201, iss, aud, delivery, required fields",
          status == 201 and stream.get("iss") == plan.meta["issuer"] and stream.get("aud")
          and stream.get("delivery", {}).get("method") == delivery["method"]
          and not {"stream_id", "iss", "aud", "events_delivered", "delivery"} - set(stream), str(stream))
    sid = stream["stream_id"]
    delivered = set(stream.get("events_delivered") or [])
    check(f"{m}: OIDSSFEnsureAtLeastOneCaepInteropEventInStreamSupportedEvents",
          set(INTEROP_EVENTS) <= delivered, str(delivered))
    status, _, read = plan.call("GET", "configuration_endpoint", query={"stream_id": sid})
    check(f"{m}: read 200", status == 200 and read.get("iss") == plan.meta["issuer"], f"{status} {read}")
    status, _, st = plan.call("GET", "status_endpoint", query={"stream_id": sid})
    check(f"{m}: OIDSSFReadStreamStatusCall 200", status == 200 and st.get("status") == "enabled")
    status, _, _ = plan.verify(sid, f"interop-{mode}")
    check(f"{m}: OIDSSFTriggerVerificationEvent 204", status == 204, str(status))
    status, _, answer = sim_swap(plan.base, f"+1555010020{int(mode == 'poll')}", f"interop-{mode}")
    actions = json.loads(answer).get("actions", []) if status in (200, 201) else []
    check(f"{m}: a SIM swap decided, each SET action listed with the stream",
          status == 201 and len(actions) == 4 and all(a.get("stream_id") == sid for a in actions),
          f"{status} {answer[:300]!r}")
    if mode == "push":
        got = pushed_to(path, 5)
        tokens = [p["token"] for p in got]
        check(f"{m}: each push carries the stream's authorization_header",
              got and all(p["authorization"] == PUSH_CREDENTIAL for p in got))
    else:
        tokens, acks = [], []
        deadline = time.time() + 10
        while time.time() < deadline and len(tokens) < 5:
            _, answer = plan.poll(stream, ack=acks, immediately=False)
            acks = list(answer.get("sets", {}))
            tokens += [t for j, t in answer.get("sets", {}).items()]
        plan.poll(stream, ack=acks)
        _, rest = plan.poll(stream)
        check(f"{m}: OIDSSFEventAckConsumer: acknowledged, none handed out again", rest.get("sets") == {},
              str(rest))
    seen = []
    for token in tokens:
        claims = plan.verified(token)[1] or {}
        if VERIFICATION in claims.get("events", {}):
            verification_checks(f"{m} verification", plan, stream, token, f"interop-{mode}", True)
            continue
        seen.append(caep_event_checks(m, plan, stream, token, True))
    check(f"{m}: OIDSSFEnsureAllCaepInteropEventsReceived (and RISC credential-compromise)",
          sorted(e for e in seen if e) == sorted(INTEROP_EVENTS + [COMPROMISE]), str(seen))
    status, _, _ = plan.delete(sid)
    check(f"{m}: OIDSSFDeleteStreamConfigCall 204", status == 204, str(status))


def main():
    binary = sys.argv[1]
    receiver, recv = serve(Receiver)
    with tempfile.TemporaryDirectory() as tmp:
        idem, base = start_idem(binary, config(tmp))
        try:
            plan = Plan(base, recv)
            _, t = plan.token_for("okta", OKTA_SECRET, "ssf.read ssf.manage")
            plan.token = t.get("access_token")
            for interop in (False, True):
                print(f"# {'OIDSSFTransmitterTestPlanCaepInterop' if interop else 'OIDSSFTransmitterTestPlan'}")
                metadata_test(plan, interop)
                for mode in ("push", "poll"):
                    happy_path_test(plan, mode, interop)
                broken_input_tests(plan, interop)
                invalid_token_tests(plan, interop)
                duplicate_config_test(plan)
                unknown_stream_tests(plan, interop)
                if not interop:
                    subject_control_test(plan)
                push_verification_test(plan, interop, PUSH_CREDENTIAL)
                push_verification_test(plan, interop, None)
                poll_verification_tests(plan, interop)
                if interop:
                    for mode in ("push", "poll"):
                        caep_interop_test(plan, mode)
            print("# CAEP interoperability profile §2.7 and SSF §8.1 beyond the plans' modules")
            scopes_test(plan)
            without_delivery_test(plan)
            quiet_status_tests(plan)
        finally:
            idem.terminate()
            idem.wait(timeout=10)
    receiver.shutdown()
    print(f"{results['passed']} passed, {results['failed']} failed")
    sys.exit(1 if results["failed"] else 0)


if __name__ == "__main__":
    main()
