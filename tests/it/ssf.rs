//! Shared Signals in (docs/REFERENCE.md, "Shared Signals and CloudEvents") against a real
//! `idem serve`, a real receiver and a real transmitter in the test (its JWK Set served over
//! loopback, its SETs signed by the tests' own JOSE), on either store: a pushed SET is one
//! decision however often it comes, and one subject named two ways is one subject; every refusal
//! of RFC 8935's table answers its code with nothing claimed, the algorithm confusion attack
//! among them; unknown `kid`s never make idem fetch at will, and a rotated key is fetched once the
//! interval allows; SSF's own events are recorded, not decided; a polled SET is acknowledged only
//! once claimed, a refused one reported in `setErrs`, a SET both pushed and polled is one
//! decision, and a SIGKILL between the claim and the ack decides nothing twice; on two nodes
//! sharing PostgreSQL one polls, and the other takes over once the first is killed.

use std::time::Duration;

use devtools::metric_value;
use serde_json::{json, Value};

use crate::support::*;
use devtools::jose::{self, JwsKey};

const API_KEY: &str = "Bearer sk_ssf_test_key_0001";
const ISSUER: &str = "https://sts.example.test/ssf";
const AUDIENCE: &str = "https://idem.example.test/acme";
const PUSH_AUTH: &str = "Bearer push-credential-0123456789";
const RISC_COMPROMISE: &str =
    "https://schemas.openid.net/secevent/risc/event-type/credential-compromise";
const CAEP_REVOKED: &str = "https://schemas.openid.net/secevent/caep/event-type/session-revoked";
const VERIFICATION: &str = "https://schemas.openid.net/secevent/ssf/event-type/verification";
const STREAM_UPDATED: &str = "https://schemas.openid.net/secevent/ssf/event-type/stream-updated";

/// Tenant `acme`: a push source `entra` (with a push credential), a source `okta_ssf` without
/// one that also polls, both on the transmitter's JWK Set; `breach` decided once per subject.
fn acme(receiver: &Receiver, transmitter: &LoopbackTransmitter, refetch: &str) -> String {
    format!(
        r#"
[tenants.acme]
api_key = "sk_ssf_test_key_0001"
callback_secret = "{CALLBACK_SECRET}"

[tenants.acme.playbooks.breach]
decision = "deny"
once_per_subject = "1h"
actions = [ {{ name = "lock", url = "{lock}" }} ]

[tenants.acme.playbooks.revoked]
decision = "step_up"
actions = [ {{ name = "reauth", url = "{reauth}" }} ]

[tenants.acme.sources.entra]
kind = "ssf"
issuer = "{ISSUER}"
audience = "{AUDIENCE}"
jwks = "{jwks}"
secret = "{PUSH_AUTH}"
jwks_refetch = "{refetch}"
[[tenants.acme.sources.entra.map]]
event = "{RISC_COMPROMISE}"
type = "breach"
[[tenants.acme.sources.entra.map]]
event = "https://schemas.openid.net/secevent/caep/event-type/*"
type = "revoked"
subject = "/events/{CAEP_REVOKED}/subject"

[tenants.acme.sources.okta_ssf]
kind = "ssf"
issuer = "{ISSUER}"
audience = "{AUDIENCE}"
jwks = "{jwks}"
jwks_refetch = "{refetch}"
poll = {{ url = "{poll}", token = "{POLL_TOKEN}" }}
[[tenants.acme.sources.okta_ssf.map]]
event = "{RISC_COMPROMISE}"
type = "breach"
"#,
        lock = receiver.url("/lock"),
        reauth = receiver.url("/reauth"),
        jwks = transmitter.url("/jwks"),
        poll = transmitter.url("/poll"),
    )
}

/// idem with tenant `acme`, a transmitter serving `keys`, JWK Sets fetched at most once per
/// `refetch`.
async fn start(
    keys: &[&JwsKey],
    refetch: &str,
) -> (
    tempfile::TempDir,
    Receiver,
    Idem,
    Client,
    LoopbackTransmitter,
) {
    let transmitter = LoopbackTransmitter::start(jose::jwk_set(keys)).await;
    let t = transmitter.clone();
    let refetch = refetch.to_string();
    let (dir, receiver, idem, client) = Harness::new()
        .delivery("inline_timeout = \"2s\"\nschedule = [\"200ms\", \"200ms\"]")
        .tenants(move |r| acme(r, &t, &refetch))
        .start()
        .await;
    (dir, receiver, idem, client, transmitter)
}

/// A RISC credential-compromise SET about `subject`.
fn compromise(jti: &str, subject: Value) -> Value {
    json!({
        "iss": ISSUER, "aud": [AUDIENCE, "https://other.example"], "jti": jti,
        "iat": now_secs(), "sub_id": subject,
        "events": {RISC_COMPROMISE: {"credential_type": "password", "reason_admin": {"en": "found in a dump"}}}
    })
}

/// Now in Unix seconds: a SET's `iat` is checked against idem's clock.
fn now_secs() -> u64 {
    idem_schemas::timefmt::now_ms() / 1000
}

fn email(address: &str) -> Value {
    json!({"format": "email", "email": address})
}

/// Pushes `token` to `source` with `authorization` (none if empty).
async fn push_to(client: &Client, source: &str, token: &str, authorization: &str) -> Resp {
    let mut req = Req::new(token)
        .without("content-type")
        .header("content-type", "application/secevent+jwt");
    if !authorization.is_empty() {
        req = req.header("authorization", authorization);
    }
    client
        .send("POST", &format!("/v1/sources/acme/{source}"), req)
        .await
}

async fn push(client: &Client, token: &str) -> Resp {
    push_to(client, "entra", token, PUSH_AUTH).await
}

fn assert_accepted(r: &Resp, what: &str) {
    assert_eq!(r.status, 202, "{what}: {}", text(r));
    assert!(r.body.is_empty(), "{what}: a 202 has no body");
}

/// Asserts RFC 8935's refusal with `err`, and that the description echoes neither the issuer
/// nor the audience idem expects.
fn assert_refused(r: &Resp, err: &str, what: &str) {
    assert_eq!(r.status, 400, "{what}: {}", text(r));
    assert_eq!(r.header("content-type"), Some("application/json"), "{what}");
    assert_eq!(r.header("content-language"), Some("en"), "{what}");
    let body = r.json();
    assert_eq!(body["err"], err, "{what}: {body}");
    let description = body["description"].as_str().unwrap_or_default();
    assert!(!description.is_empty(), "{what}: no description");
    assert!(
        !description.contains(ISSUER) && !description.contains(AUDIENCE),
        "{what}: the description echoes what idem expects: {description}"
    );
}

async fn status(client: &Client, source: &str) -> Value {
    let r = client
        .send(
            "GET",
            &format!("/v1/sources/acme/{source}/status"),
            Req::new("").header("authorization", API_KEY),
        )
        .await;
    assert_eq!(r.status, 200, "{}", text(&r));
    r.json()
}

async fn decisions_by_subject_id(client: &Client, subject: &Value) -> Vec<Value> {
    let r = client
        .send(
            "GET",
            &format!("/v1/decisions?subject_id={}", enc(&subject.to_string())),
            Req::new("").header("authorization", API_KEY),
        )
        .await;
    assert_eq!(r.status, 200, "{}", text(&r));
    r.json()["data"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn a_pushed_set_is_one_decision_however_often_it_comes() {
    let rsa = JwsKey::rsa("rsa-1");
    let ec = JwsKey::ec("ec-1");
    let (_dir, receiver, _idem, client, transmitter) = start(&[&rsa, &ec], "60s").await;

    let first = rsa.sign(&compromise("jti-1", email("Alice@Example.com")));
    assert_accepted(&push(&client, &first).await, "a first SET");
    // RFC 8935: the same SET again is accepted too, and decides nothing.
    assert_accepted(&push(&client, &first).await, "the same SET again");
    // The same subject, written another way, in another SET signed with the other key: the
    // playbook decides once per subject, so this one is answered by the first decision.
    let again = ec.sign(&compromise(
        "jti-2",
        json!({"email": "alice@example.COM", "format": "email"}),
    ));
    assert_accepted(
        &push(&client, &again).await,
        "a second SET about the same subject",
    );
    let seen = exactly(&receiver, "/lock", 1).await;
    let body: Value = serde_json::from_slice(&seen[0].body).expect("callback JSON");
    assert_eq!(body["data"]["decision"], "deny");
    assert_eq!(body["data"]["metadata"]["event_id"], "jti-1");
    assert_eq!(body["data"]["metadata"]["event_type"], RISC_COMPROMISE);
    assert!(
        !contains(&seen[0].body, b"lice@"),
        "the callback carries the subject in clear"
    );

    // A CAEP event whose subject is inside the event (an older form), by a prefix route.
    let revoked = rsa.sign(&json!({
        "iss": ISSUER, "aud": AUDIENCE, "jti": "jti-3", "iat": now_secs(),
        "events": {CAEP_REVOKED: {"subject": {"format": "opaque", "id": "session-9"}, "event_timestamp": 1_764_000_001}}
    }));
    assert_accepted(&push(&client, &revoked).await, "a CAEP event");
    exactly(&receiver, "/reauth", 1).await;

    // The decisions API finds the subject by its identifier object, written either way.
    let found = decisions_by_subject_id(&client, &email("ALICE@example.com")).await;
    assert_eq!(found.len(), 1, "{found:?}");
    let none = decisions_by_subject_id(&client, &email("bob@example.com")).await;
    assert!(none.is_empty(), "{none:?}");

    let s = status(&client, "entra").await;
    assert_eq!(s["kind"], "ssf");
    assert_eq!(s["accepted"], 3, "{s}");
    assert_eq!(s["duplicates"], 1, "{s}");
    assert_eq!(s["refused"], 0, "{s}");
    assert!(s["last_event_at"].is_string(), "{s}");
    // The keys were fetched once, for the first SET.
    assert_eq!(transmitter.jwks_fetches(), 1);
}

#[tokio::test]
async fn every_refusal_answers_its_code_and_claims_nothing() {
    let rsa = JwsKey::rsa("rsa-1");
    let ec = JwsKey::ec("ec-1");
    let (_dir, receiver, _idem, client, transmitter) = start(&[&rsa, &ec], "60s").await;
    let good = compromise("jti-refused", email("carol@example.com"));
    let mut tampered = rsa.sign(&good);
    let payload_at = tampered.find('.').expect("dots") + 1;
    tampered.replace_range(
        payload_at..payload_at + 4,
        if &tampered[payload_at..payload_at + 4] == "AAAA" {
            "BBBB"
        } else {
            "AAAA"
        },
    );
    let with = |f: &dyn Fn(&mut Value)| {
        let mut claims = good.clone();
        f(&mut claims);
        rsa.sign(&claims)
    };
    let without = |claim: &str| {
        let mut claims = good.clone();
        if let Some(o) = claims.as_object_mut() {
            o.remove(claim);
        }
        rsa.sign(&claims)
    };
    let header = |alg: &str, kid: &str, typ: &str| json!({"alg": alg, "kid": kid, "typ": typ});
    let cases: Vec<(&str, String, &str, &str, &str)> = vec![
        // (what, token, content type, authorization, err)
        (
            "not a JWS",
            "not a token".into(),
            "application/secevent+jwt",
            PUSH_AUTH,
            "invalid_request",
        ),
        (
            "another content type",
            rsa.sign(&good),
            "application/json",
            PUSH_AUTH,
            "invalid_request",
        ),
        (
            "alg none",
            jose::unsigned("rsa-1", &good),
            "application/secevent+jwt",
            PUSH_AUTH,
            "invalid_key",
        ),
        (
            "HS256 keyed with the RSA public key (algorithm confusion)",
            jose::hs256_with("rsa-1", &rsa.public_bytes(), &good),
            "application/secevent+jwt",
            PUSH_AUTH,
            "invalid_key",
        ),
        (
            "ES256 over the RSA key's kid",
            ec.sign_with_header(&header("ES256", "rsa-1", "secevent+jwt"), &good),
            "application/secevent+jwt",
            PUSH_AUTH,
            "invalid_key",
        ),
        (
            "a tampered payload",
            tampered,
            "application/secevent+jwt",
            PUSH_AUTH,
            "invalid_key",
        ),
        (
            "an unknown kid",
            rsa.sign_with_header(&header("RS256", "who-knows", "secevent+jwt"), &good),
            "application/secevent+jwt",
            PUSH_AUTH,
            "invalid_key",
        ),
        (
            "typ JWT",
            rsa.sign_with_header(&header("RS256", "rsa-1", "JWT"), &good),
            "application/secevent+jwt",
            PUSH_AUTH,
            "invalid_request",
        ),
        (
            "another issuer",
            with(&|c| c["iss"] = json!("https://evil.example")),
            "application/secevent+jwt",
            PUSH_AUTH,
            "invalid_issuer",
        ),
        (
            "another audience",
            with(&|c| c["aud"] = json!("https://other.example")),
            "application/secevent+jwt",
            PUSH_AUTH,
            "invalid_audience",
        ),
        (
            "no jti",
            without("jti"),
            "application/secevent+jwt",
            PUSH_AUTH,
            "invalid_request",
        ),
        (
            "no iat",
            without("iat"),
            "application/secevent+jwt",
            PUSH_AUTH,
            "invalid_request",
        ),
        (
            "events not an object",
            with(&|c| c["events"] = json!([])),
            "application/secevent+jwt",
            PUSH_AUTH,
            "invalid_request",
        ),
        (
            "no subject where the map says",
            without("sub_id"),
            "application/secevent+jwt",
            PUSH_AUTH,
            "invalid_request",
        ),
        (
            "a wrong push credential",
            rsa.sign(&good),
            "application/secevent+jwt",
            "Bearer wrong",
            "authentication_failed",
        ),
        (
            "no push credential",
            rsa.sign(&good),
            "application/secevent+jwt",
            "",
            "authentication_failed",
        ),
    ];
    for (what, token, content_type, authorization, err) in &cases {
        let mut req = Req::new(token)
            .without("content-type")
            .header("content-type", content_type);
        if !authorization.is_empty() {
            req = req.header("authorization", authorization);
        }
        let r = client.send("POST", "/v1/sources/acme/entra", req).await;
        assert_refused(&r, err, what);
    }
    // Nothing was claimed: no callback, and the good SET is a first one afterwards.
    assert!(receiver.seen_on("/lock").is_empty());
    let s = status(&client, "entra").await;
    assert_eq!(s["refused"], cases.len() as u64, "{s}");
    assert_eq!(s["accepted"], 0, "{s}");
    assert_accepted(&push(&client, &rsa.sign(&good)).await, "the good SET");
    exactly(&receiver, "/lock", 1).await;
    // An attacker's kids made no fetch: the one fetch was the first SET's.
    assert_eq!(transmitter.jwks_fetches(), 1);
    let metrics = client.send("GET", "/metrics", Req::new("")).await;
    let text = String::from_utf8_lossy(&metrics.body).to_string();
    let invalid_key = metric_value(
        &text,
        r#"idem_source_deliveries_total{kind="ssf",outcome="invalid_key"}"#,
    );
    assert_eq!(invalid_key, Some(5.0), "{text}");
    // Each refused SET is an event refused, as the source's status counts it.
    let refused = metric_value(
        &text,
        r#"idem_source_events_total{kind="ssf",outcome="refused"}"#,
    );
    assert_eq!(refused, Some(cases.len() as f64), "{text}");
}

#[tokio::test]
async fn a_rotated_key_is_fetched_once_the_interval_allows() {
    let old = JwsKey::rsa("rsa-old");
    let new = JwsKey::ec("ec-new");
    let (_dir, receiver, _idem, client, transmitter) = start(&[&old], "3s").await;
    assert_accepted(
        &push(
            &client,
            &old.sign(&compromise("r-1", email("dave@example.com"))),
        )
        .await,
        "a SET with the old key",
    );
    assert_eq!(transmitter.jwks_fetches(), 1);
    // The transmitter publishes its new key and signs with it at once: within the interval idem
    // does not fetch again, so the SET is refused (the transmitter sends it again later).
    transmitter.set_jwks(jose::jwk_set(&[&old, &new]));
    let rotated = new.sign(&compromise("r-2", email("erin@example.com")));
    for _ in 0..5 {
        assert_refused(
            &push(&client, &rotated).await,
            "invalid_key",
            "a new kid within the interval",
        );
    }
    assert_eq!(
        transmitter.jwks_fetches(),
        1,
        "unknown kids made idem fetch"
    );
    // Once the interval has passed, one SET with the new kid fetches the set, and is taken.
    let r = eventually(
        Duration::from_secs(10),
        || push(&client, &rotated),
        |r| r.status == 202,
    )
    .await;
    assert_accepted(&r, "the new kid after the interval");
    assert_eq!(transmitter.jwks_fetches(), 2);
    exactly(&receiver, "/lock", 2).await;
    // The old key still verifies (rotation keeps both for a while).
    assert_accepted(
        &push(
            &client,
            &old.sign(&compromise("r-3", email("frank@example.com"))),
        )
        .await,
        "the old key after the rotation",
    );
    assert_eq!(transmitter.jwks_fetches(), 2);
}

#[tokio::test]
async fn ssf_own_events_are_recorded_not_decided() {
    let rsa = JwsKey::rsa("rsa-1");
    let (_dir, receiver, _idem, client, _transmitter) = start(&[&rsa], "60s").await;
    let verification = rsa.sign(&json!({
        "iss": ISSUER, "aud": AUDIENCE, "jti": "v-1", "iat": now_secs(),
        "sub_id": {"format": "opaque", "id": "stream-1"},
        "events": {VERIFICATION: {"state": "VGhlIHN0YXRlIG9mIHRoZSB2ZXJpZmljYXRpb24"}}
    }));
    assert_accepted(&push(&client, &verification).await, "a verification event");
    let updated = rsa.sign(&json!({
        "iss": ISSUER, "aud": AUDIENCE, "jti": "u-1", "iat": now_secs(),
        "sub_id": {"format": "opaque", "id": "stream-1"},
        "events": {STREAM_UPDATED: {"status": "paused", "reason": "maintenance"}}
    }));
    assert_accepted(&push(&client, &updated).await, "a stream-updated event");
    let s = status(&client, "entra").await;
    assert_eq!(
        s["verification"]["state"], "VGhlIHN0YXRlIG9mIHRoZSB2ZXJpZmljYXRpb24",
        "{s}"
    );
    assert!(s["verification"]["at"].is_string(), "{s}");
    assert_eq!(s["stream"]["status"], "paused", "{s}");
    assert_eq!(s["stream"]["reason"], "maintenance", "{s}");
    assert_eq!(s["ignored"], 2, "{s}");
    assert_eq!(s["accepted"], 0, "{s}");
    assert!(
        s.get("poll").is_none(),
        "a push-only source has no poll status: {s}"
    );
    let page = client
        .send(
            "GET",
            "/v1/decisions",
            Req::new("").header("authorization", API_KEY),
        )
        .await;
    assert_eq!(page.json()["data"].as_array().map(Vec::len), Some(0));
    assert!(receiver.seen_on("/lock").is_empty());
}

#[tokio::test]
async fn a_polled_set_is_acknowledged_once_claimed_and_is_one_decision_with_its_push() {
    let rsa = JwsKey::rsa("rsa-1");
    let (_dir, receiver, _idem, client, transmitter) = start(&[&rsa], "60s").await;
    let one = rsa.sign(&compromise("p-1", email("gina@example.com")));
    let two = rsa.sign(&compromise("p-2", email("hank@example.com")));
    let refused = {
        let mut claims = compromise("p-3", email("ida@example.com"));
        claims["aud"] = json!("https://someone.else");
        rsa.sign(&claims)
    };
    transmitter.fail_next(2);
    transmitter.queue("p-1", &one);
    transmitter.queue("p-2", &two);
    transmitter.queue("p-3", &refused);
    let acked = eventually(
        Duration::from_secs(20),
        || async { transmitter.acked() },
        |a| a.len() >= 2,
    )
    .await;
    assert_eq!(acked, vec!["p-1".to_string(), "p-2".to_string()]);
    let errs = transmitter.set_errs();
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs["p-3"]["err"], "invalid_audience");
    assert_eq!(transmitter.pending(), 0);
    exactly(&receiver, "/lock", 2).await;
    // The same SET pushed to the source that polled it is a duplicate.
    assert_accepted(
        &push_to(&client, "okta_ssf", &one, "").await,
        "a polled SET pushed",
    );
    exactly(&receiver, "/lock", 2).await;
    let s = status(&client, "okta_ssf").await;
    assert_eq!(s["accepted"], 2, "{s}");
    assert_eq!(s["duplicates"], 1, "{s}");
    assert_eq!(s["refused"], 1, "{s}");
    let metrics = text(&client.send("GET", "/metrics", Req::new("")).await);
    let refused = metric_value(
        &metrics,
        r#"idem_source_events_total{kind="ssf",outcome="refused"}"#,
    );
    assert_eq!(refused, Some(1.0), "a polled SET refused: {metrics}");
    assert_eq!(s["poll"]["acked"], 2, "{s}");
    assert!(s["poll"]["last_at"].is_string(), "{s}");
    assert!(
        s["poll"]["last_error"].is_null(),
        "the error is cleared by a good poll: {s}"
    );
}

#[tokio::test]
async fn a_crash_between_the_claim_and_the_ack_decides_nothing_twice() {
    let rsa = JwsKey::rsa("rsa-1");
    let (_dir, receiver, idem, _client, transmitter) = start(&[&rsa], "60s").await;
    // Every poll after the one that gives the SET is held: its ack never reaches the
    // transmitter.
    transmitter.queue_then_hold(
        "k-1",
        &rsa.sign(&compromise("k-1", email("kim@example.com"))),
    );
    // The decision is made and its callback sent: the claim is durable.
    exactly(&receiver, "/lock", 1).await;
    assert!(transmitter.acked().is_empty(), "acked before the crash");
    let config_path = idem.kill();
    transmitter.hold(false);
    let _idem = Idem::start_with(config_path, &[]);
    // After the restart the SET comes again, is a duplicate, and is acknowledged.
    let acked = eventually(
        Duration::from_secs(20),
        || async { transmitter.acked() },
        |a| !a.is_empty(),
    )
    .await;
    assert_eq!(acked, vec!["k-1".to_string()]);
    exactly(&receiver, "/lock", 1).await;
}

#[tokio::test]
async fn a_polled_set_not_taken_now_is_neither_acked_nor_refused() {
    let rsa = JwsKey::rsa("rsa-1");
    let (_dir, receiver, _idem, _client, transmitter) = start(&[&rsa], "1s").await;
    // The JWK Set is broken: idem cannot check the SET, which is not the SET's fault.
    transmitter.set_jwks(json!({"not": "a JWK Set"}));
    transmitter.queue(
        "l-1",
        &rsa.sign(&compromise("l-1", email("lee@example.com"))),
    );
    let fetches = eventually(
        Duration::from_secs(10),
        || async { transmitter.jwks_fetches() },
        |n| *n >= 2,
    )
    .await;
    assert!(fetches >= 2, "idem never tried the JWK Set again");
    assert!(
        transmitter.acked().is_empty(),
        "acked a SET it could not check"
    );
    assert!(
        transmitter.set_errs().is_empty(),
        "refused a SET for a failing fetch"
    );
    assert!(receiver.seen_on("/lock").is_empty());
    // The set is fixed: the SET is given again, taken and acknowledged.
    transmitter.set_jwks(jose::jwk_set(&[&rsa]));
    let acked = eventually(
        Duration::from_secs(10),
        || async { transmitter.acked() },
        |a| !a.is_empty(),
    )
    .await;
    assert_eq!(acked, vec!["l-1".to_string()]);
    exactly(&receiver, "/lock", 1).await;
}

#[tokio::test]
async fn on_two_nodes_one_polls_and_the_other_takes_over_when_it_dies() {
    let rsa = JwsKey::rsa("rsa-1");
    let transmitter = LoopbackTransmitter::start(jose::jwk_set(&[&rsa])).await;
    let receiver = Receiver::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let store = on_postgres(&test_database());
    // A node is gone, and its lease with it, 2 s after its last heartbeat.
    let config = settings(
        &store,
        &dir.path().join("data"),
        "in_flight_timeout = \"2s\"",
        "",
    ) + &acme(&receiver, &transmitter, "60s");
    let nodes: Vec<Idem> = (0..2)
        .map(|n| {
            let node_dir = dir.path().join(format!("node{n}"));
            std::fs::create_dir_all(&node_dir).expect("dir");
            let path = node_dir.join("idem.toml");
            std::fs::write(&path, &config).expect("config");
            Idem::start_with(path, &[])
        })
        .collect();
    let polled = |base: String| async move {
        let s = status(&Client::new(&base), "okta_ssf").await;
        s["poll"]["last_at"].is_string()
    };
    transmitter.queue(
        "n-1",
        &rsa.sign(&compromise("n-1", email("nell@example.com"))),
    );
    let acked = eventually(
        Duration::from_secs(15),
        || async { transmitter.acked() },
        |a| !a.is_empty(),
    )
    .await;
    assert_eq!(acked, vec!["n-1".to_string()]);
    // An ack takes two polls: by now a node polling without the lease would have polled too.
    let which: Vec<bool> = vec![
        polled(nodes[0].base.clone()).await,
        polled(nodes[1].base.clone()).await,
    ];
    assert_eq!(
        which.iter().filter(|p| **p).count(),
        1,
        "polling nodes: {which:?}"
    );
    let (holder, other) = if which[0] { (0, 1) } else { (1, 0) };
    let mut nodes: Vec<Option<Idem>> = nodes.into_iter().map(Some).collect();
    let other_base = nodes[other].as_ref().map(|n| n.base.clone()).expect("node");
    if let Some(node) = nodes[holder].take() {
        node.kill();
    }
    // The other node takes the source over once the first one's heartbeat has expired.
    transmitter.queue(
        "n-2",
        &rsa.sign(&compromise("n-2", email("otto@example.com"))),
    );
    let acked = eventually(
        Duration::from_secs(20),
        || async { transmitter.acked() },
        |a| a.len() >= 2,
    )
    .await;
    assert_eq!(acked, vec!["n-1".to_string(), "n-2".to_string()]);
    assert!(polled(other_base).await, "the other node polls now");
    exactly(&receiver, "/lock", 2).await;
}
