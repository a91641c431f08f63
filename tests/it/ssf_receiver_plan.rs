//! idem as a Shared Signals receiver that subscribes itself (docs/SHARED-SIGNALS.md), against a
//! real `idem serve` and the loopback transmitter of the tests, on either store: the token it
//! calls the transmitter with comes from the token endpoint of the issuer's OAuth metadata with
//! its client credentials, is renewed before it expires and once when refused, and is never
//! logged; a static bearer is sent as it is; `transmitter` and `auth` are refused when written
//! half or wrong, naming their key.

use std::time::Duration;

use devtools::jose::{self, JwsKey};
use devtools::transmitter::{
    CLIENT_ID, CLIENT_SECRET, POLL_TOKEN, STREAM_AUDIENCE, VERIFICATION_EVENT,
};
use serde_json::{json, Value};

use crate::support::*;

const API_KEY: &str = "Bearer sk_ssf_receiver_key_0001";
const AUDIENCE: &str = "https://idem.example.test/acme";
const RISC_COMPROMISE: &str =
    "https://schemas.openid.net/secevent/risc/event-type/credential-compromise";

/// Tenant `acme` with the `ssf` source `entra` whose lines beneath its `kind` are `source`.
pub(crate) fn acme(receiver: &Receiver, source: &str) -> String {
    acme_text(&receiver.url("/lock"), source)
}

/// The lines of a source that polls `transmitter` with `auth`, its SETs checked as the
/// transmitter signs them.
fn polled_with(transmitter: &LoopbackTransmitter, auth: &str) -> String {
    format!(
        r#"issuer = "{issuer}"
audience = "{AUDIENCE}"
jwks = "{jwks}"
transmitter = "{issuer}"
auth = {auth}
delivery = "poll"
poll = {{ url = "{poll}" }}"#,
        issuer = transmitter.issuer(),
        jwks = transmitter.url("/jwks"),
        poll = transmitter.url("/poll"),
    )
}

fn client_credentials() -> String {
    format!(r#"{{ client_id = "{CLIENT_ID}", client_secret = "{CLIENT_SECRET}" }}"#)
}

/// idem polling a transmitter signing with `key`, its source written by `source`.
async fn start(
    key: &JwsKey,
    source: impl Fn(&LoopbackTransmitter) -> String,
    token_life: u64,
) -> (
    tempfile::TempDir,
    Receiver,
    Idem,
    Client,
    LoopbackTransmitter,
) {
    let transmitter = LoopbackTransmitter::start(jose::jwk_set(&[key])).await;
    transmitter.set_token_life(token_life);
    let lines = source(&transmitter);
    let (dir, receiver, idem, client) = Harness::new()
        .tenants(move |r| acme(r, &lines))
        .start()
        .await;
    (dir, receiver, idem, client, transmitter)
}

/// A RISC credential-compromise SET from `issuer`.
fn compromise(issuer: &str, jti: &str, email: &str) -> Value {
    json!({
        "iss": issuer, "aud": AUDIENCE, "jti": jti,
        "iat": idem_schemas::timefmt::now_ms() / 1000,
        "sub_id": {"format": "email", "email": email},
        "events": {RISC_COMPROMISE: {"credential_type": "password"}}
    })
}

/// Queues SET `jti` and waits until it is acknowledged.
async fn polled(transmitter: &LoopbackTransmitter, key: &JwsKey, jti: &str) {
    let token = key.sign(&compromise(
        &transmitter.issuer(),
        jti,
        &format!("{jti}@example.com"),
    ));
    transmitter.queue(jti, &token);
    let acked = eventually(
        Duration::from_secs(20),
        || async { transmitter.acked() },
        |a| a.iter().any(|j| j == jti),
    )
    .await;
    assert!(
        acked.iter().any(|j| j == jti),
        "{jti} never acked: {acked:?}"
    );
}

/// Waits until SET `jti` is acknowledged or reported in `setErrs`.
async fn polled_back(transmitter: &LoopbackTransmitter, jti: &str) {
    eventually(
        Duration::from_secs(20),
        || async { (transmitter.acked(), transmitter.set_errs()) },
        |(a, e)| a.iter().any(|j| j == jti) || e.contains_key(jti),
    )
    .await;
}

async fn status(client: &Client) -> Value {
    let r = client
        .send(
            "GET",
            "/v1/sources/acme/entra/status",
            Req::new("").header("authorization", API_KEY),
        )
        .await;
    assert_eq!(r.status, 200, "{}", text(&r));
    r.json()
}

#[tokio::test]
async fn oidssf_receiver_client_credentials_from_the_oauth_metadata_renewed_before_expiry() {
    let rsa = JwsKey::rsa("rsa-1");
    let (_dir, receiver, idem, client, transmitter) =
        start(&rsa, |t| polled_with(t, &client_credentials()), 1).await;
    polled(&transmitter, &rsa, "renew-1").await;
    // Tokens of one second: the poll client goes on with new ones, each before the last
    // expires, so the transmitter never refuses one.
    let given = eventually(
        Duration::from_secs(20),
        || async { transmitter.tokens_given() },
        |n| *n >= 4,
    )
    .await;
    assert!(given >= 4, "tokens renewed: {given}");
    polled(&transmitter, &rsa, "renew-2").await;
    assert_eq!(
        transmitter.unauthorized(),
        0,
        "a token used past its expiry"
    );
    exactly(&receiver, "/lock", 2).await;
    let s = status(&client).await;
    assert_eq!(s["poll"]["last_error"], Value::Null, "{s}");
    let log = idem.stderr();
    for secret in [CLIENT_SECRET, "access-token-"] {
        assert!(!log.contains(secret), "{secret} logged: {log}");
    }
}

#[tokio::test]
async fn oidssf_receiver_a_refused_token_is_renewed_once() {
    let rsa = JwsKey::rsa("rsa-1");
    let (_dir, _receiver, _idem, _client, transmitter) =
        start(&rsa, |t| polled_with(t, &client_credentials()), 3600).await;
    polled(&transmitter, &rsa, "before").await;
    assert_eq!(transmitter.tokens_given(), 1, "a live token is kept");
    transmitter.revoke_tokens();
    polled(&transmitter, &rsa, "after").await;
    assert_eq!(transmitter.tokens_given(), 2, "one new token on the 401");
    assert_eq!(transmitter.unauthorized(), 1, "the refused call, once");
}

#[tokio::test]
async fn oidssf_receiver_a_static_bearer_is_sent_as_it_is() {
    let rsa = JwsKey::rsa("rsa-1");
    let bearer = format!(r#"{{ bearer = "{POLL_TOKEN}" }}"#);
    let (_dir, _receiver, idem, _client, transmitter) =
        start(&rsa, move |t| polled_with(t, &bearer), 3600).await;
    polled(&transmitter, &rsa, "static-1").await;
    assert_eq!(
        transmitter.tokens_given(),
        0,
        "no token endpoint for a bearer"
    );
    assert_eq!(transmitter.unauthorized(), 0);
    assert!(!idem.stderr().contains(POLL_TOKEN), "the bearer logged");
}

/// `idem check-config` on tenant `acme` with source lines `source`: its exit code and stderr.
fn check(source: &str) -> (i32, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = settings("", dir.path(), "", "") + &acme_text("http://127.0.0.1:9/lock", source);
    let path = dir.path().join("idem.toml");
    std::fs::write(&path, config).expect("write config");
    check_config(&path)
}

/// Tenant `acme` calling `lock`, with the `ssf` source `entra` of lines `source`.
fn acme_text(lock: &str, source: &str) -> String {
    format!(
        r#"
[tenants.acme]
api_key = "sk_ssf_receiver_key_0001"
callback_secret = "{CALLBACK_SECRET}"

[tenants.acme.playbooks.breach]
decision = "deny"
actions = [ {{ name = "lock", url = "{lock}" }} ]

[tenants.acme.sources.entra]
kind = "ssf"
{source}
[[tenants.acme.sources.entra.map]]
event = "{RISC_COMPROMISE}"
type = "breach"
"#
    )
}

#[test]
fn transmitter_and_auth_written_half_or_wrong_are_refused_by_key() {
    let base = r#"issuer = "https://t.example/ssf"
audience = "https://idem.example/acme"
jwks = "https://t.example/jwks""#;
    let good = format!(
        "{base}\ntransmitter = \"https://t.example/ssf\"\nauth = {{ client_id = \"idem\", client_secret = \"s\" }}\ndelivery = \"push\""
    );
    assert_eq!(check(&good).0, 0, "{}", check(&good).1);
    let with = |rest: &str| format!("{base}\ntransmitter = \"https://t.example/ssf\"\n{rest}");
    for (lines, key) in [
        (
            with("auth = { bearer = \"b\" }"),
            "tenants.acme.sources.entra.delivery",
        ),
        (
            with("auth = { bearer = \"b\" }\ndelivery = \"pigeon\""),
            "tenants.acme.sources.entra.delivery",
        ),
        (
            with("auth = { bearer = \"b\" }\ndelivery = \"poll\"\nverify_every = \"10ms\""),
            "tenants.acme.sources.entra.verify_every",
        ),
        (
            format!("{base}\ndelivery = \"poll\""),
            "tenants.acme.sources.entra.delivery",
        ),
        (
            format!("{base}\ntransmitter = \"https://t.example/ssf\""),
            "tenants.acme.sources.entra.auth",
        ),
        (
            format!("{base}\nauth = {{ bearer = \"b\" }}"),
            "tenants.acme.sources.entra.transmitter",
        ),
        (
            format!("{base}\ntransmitter = \"t.example/ssf\"\nauth = {{ bearer = \"b\" }}"),
            "tenants.acme.sources.entra.transmitter",
        ),
        (
            format!("{base}\ntransmitter = \"https://t.example/ssf\"\nauth = {{ bearer = \"b\", client_secret = \"s\" }}"),
            "tenants.acme.sources.entra.auth",
        ),
        (
            format!("{base}\ntransmitter = \"https://t.example/ssf\"\nauth = {{ client_id = \"idem\" }}"),
            "tenants.acme.sources.entra.auth.client_secret",
        ),
        (
            format!("{base}\ntransmitter = \"https://t.example/ssf\"\nauth = {{ client_id = \"idem\", client_secret = \"s\", token_url = \"ftp://x\" }}"),
            "tenants.acme.sources.entra.auth.token_url",
        ),
        (
            format!("{base}\ntransmitter = \"https://t.example/ssf\"\nauth = {{ bearer = \"b\" }}\ndelivery = \"poll\"\npoll = {{ url = \"https://t.example/poll\", token = \"p\" }}"),
            "tenants.acme.sources.entra.poll.token",
        ),
    ] {
        let (code, err) = check(&lines);
        assert_ne!(code, 0, "accepted: {lines}");
        assert!(err.contains(key), "{key} not named for {lines}: {err}");
    }
}

/// The lines of a source subscribed at `transmitter` with client credentials, delivered by
/// `delivery`, its issuer and stream from the transmitter.
pub(crate) fn subscribed(transmitter: &LoopbackTransmitter, delivery: &str) -> String {
    format!(
        r#"audience = "{STREAM_AUDIENCE}"
jwks = "{jwks}"
transmitter = "{issuer}"
auth = {auth}
delivery = "{delivery}"
verify_every = "1h""#,
        issuer = transmitter.issuer(),
        jwks = transmitter.url("/jwks"),
        auth = client_credentials(),
    )
}

/// A config of idem listening on `port`, reached there (`public_url`), on the test store.
pub(crate) fn config_on_port(dir: &std::path::Path, port: u16, tenants: &str) -> String {
    format!("public_url = \"http://127.0.0.1:{port}\"\n")
        + &settings(&store_section(), &dir.join("data"), "", "").replace(
            "listen = \"127.0.0.1:0\"",
            &format!("listen = \"127.0.0.1:{port}\""),
        )
        + tenants
}

/// The subscription of `entra` once `done` holds for it (or the last one seen).
pub(crate) async fn subscription_when(client: &Client, done: impl Fn(&Value) -> bool) -> Value {
    eventually(
        Duration::from_secs(20),
        || async { status(client).await["subscription"].clone() },
        |s| done(s),
    )
    .await
}

#[tokio::test]
async fn oidssf_receiver_happy_path() {
    let rsa = JwsKey::rsa("rsa-1");
    let (_dir, receiver, _idem, client, transmitter) =
        start(&rsa, |t| subscribed(t, "poll"), 3600).await;
    transmitter.sign_with(JwsKey::rsa("rsa-1"));
    let s = subscription_when(&client, |s| s["status"] == "enabled").await;
    assert_eq!(s["stream_id"], "stream-1", "{s}");
    assert_eq!(s["events_delivered"], json!([RISC_COMPROMISE]), "{s}");
    assert_eq!(s["last_error"], Value::Null, "{s}");
    let streams = transmitter.streams();
    assert_eq!(streams.len(), 1, "{streams:?}");
    assert_eq!(
        streams["stream-1"]["delivery"]["method"],
        "urn:ietf:rfc:8936"
    );
    assert_eq!(
        streams["stream-1"]["events_requested"],
        json!([RISC_COMPROMISE])
    );
    // A verification was asked for, with a state of its own.
    let asked = transmitter.verifications();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(
        asked[0].1.as_ref().is_some_and(|s| s.len() >= 32),
        "{asked:?}"
    );
    // The stream's SETs are polled from where the stream says, and decided.
    let set = rsa.sign(&compromise(&transmitter.issuer(), "hp-1", "hp@example.com"));
    transmitter.deliver("stream-1", "hp-1", &set).await;
    let acked = eventually(
        Duration::from_secs(20),
        || async { transmitter.acked() },
        |a| a.iter().any(|j| j == "hp-1"),
    )
    .await;
    assert!(acked.iter().any(|j| j == "hp-1"), "{acked:?}");
    exactly(&receiver, "/lock", 1).await;
}

#[tokio::test]
async fn a_restart_and_a_reload_keep_one_stream_patched_or_replaced() {
    let rsa = JwsKey::rsa("rsa-1");
    let transmitter = LoopbackTransmitter::start(jose::jwk_set(&[&rsa])).await;
    let receiver = Receiver::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let port = devtools::free_port().expect("a free port");
    let tenants = acme(&receiver, &subscribed(&transmitter, "poll"));
    let config = config_on_port(dir.path(), port, &tenants);
    let idem = Idem::start(dir.path(), &config);
    let client = Client::new(&idem.base);
    let first = subscription_when(&client, |s| s["status"] == "enabled").await;
    assert_eq!(first["stream_id"], "stream-1", "{first}");
    idem.kill();

    // Started again on its data: the recorded stream is read, not made again.
    let reads = |t: &LoopbackTransmitter| t.calls().iter().filter(|c| *c == "GET /streams").count();
    let idem = Idem::start(dir.path(), &config);
    let client = Client::new(&idem.base);
    let read = eventually(
        Duration::from_secs(20),
        || async { reads(&transmitter) },
        |n| *n >= 1,
    )
    .await;
    assert_eq!(read, 1, "{:?}", transmitter.calls());
    assert_eq!(transmitter.streams_made(), 1, "{:?}", transmitter.calls());

    // Another event type: the stream's events_requested are PATCHed.
    const REVOKED: &str = "https://schemas.openid.net/secevent/caep/event-type/session-revoked";
    let patched = config.replace(
        "type = \"breach\"",
        &format!("type = \"breach\"\n[[tenants.acme.sources.entra.map]]\nevent = \"{REVOKED}\"\ntype = \"breach\""),
    );
    std::fs::write(&idem.config_path, &patched).expect("write");
    idem.signal(libc::SIGHUP);
    let s = subscription_when(&client, |s| {
        s["events_delivered"]
            .as_array()
            .is_some_and(|a| a.len() == 2)
    })
    .await;
    assert_eq!(s["stream_id"], "stream-1", "{s}");
    assert!(
        transmitter.calls().contains(&"PATCH /streams".to_string()),
        "{:?}",
        transmitter.calls()
    );

    // Push instead of poll: the whole configuration is PUT, with idem's push URL and a
    // credential of its own, which a push must carry.
    std::fs::write(
        &idem.config_path,
        patched.replace("delivery = \"poll\"", "delivery = \"push\""),
    )
    .expect("write");
    idem.signal(libc::SIGHUP);
    let pushed = eventually(
        Duration::from_secs(20),
        || async { transmitter.streams()["stream-1"]["delivery"].clone() },
        |d| d["method"] == "urn:ietf:rfc:8935",
    )
    .await;
    assert_eq!(
        pushed["endpoint_url"],
        format!("http://127.0.0.1:{port}/v1/sources/acme/entra"),
        "{pushed}"
    );
    let header = pushed["authorization_header"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        header.starts_with("Bearer ") && header.len() > 40,
        "{pushed}"
    );
    assert!(transmitter.calls().contains(&"PUT /streams".to_string()));
    assert_eq!(transmitter.streams_made(), 1, "never a second stream");
    let set = rsa.sign(&compromise(
        &transmitter.issuer(),
        "push-1",
        "push@example.com",
    ));
    assert_eq!(
        transmitter.deliver("stream-1", "push-1", &set).await,
        Some(202)
    );
    exactly(&receiver, "/lock", 1).await;
    let forged = client
        .send(
            "POST",
            "/v1/sources/acme/entra",
            Req::new(&rsa.sign(&compromise(
                &transmitter.issuer(),
                "push-2",
                "p2@example.com",
            )))
            .without("content-type")
            .header("content-type", "application/secevent+jwt")
            .header("authorization", "Bearer not-the-streams"),
        )
        .await;
    assert_eq!(forged.status, 400, "{}", text(&forged));
    assert_eq!(forged.json()["err"], "authentication_failed");
    assert!(
        !idem.stderr().contains(&header[7..]),
        "the push credential logged"
    );
}

#[tokio::test]
async fn a_stream_of_another_issuer_is_not_used() {
    let rsa = JwsKey::rsa("rsa-1");
    let transmitter = LoopbackTransmitter::start(jose::jwk_set(&[&rsa])).await;
    transmitter.set_stream_iss(Some("https://someone-else.example/ssf"));
    let lines = subscribed(&transmitter, "poll");
    let (_dir, _receiver, _idem, client) = Harness::new()
        .tenants(move |r| acme(r, &lines))
        .start()
        .await;
    let s = subscription_when(&client, |s| s["last_error"].is_string()).await;
    let error = s["last_error"].as_str().unwrap_or_default();
    assert!(error.contains("iss"), "{s}");
    transmitter.queue(
        "unused-1",
        &rsa.sign(&compromise(
            &transmitter.issuer(),
            "unused-1",
            "u@example.com",
        )),
    );
    // Nothing polls it; no verification is asked of it.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(transmitter.pending(), 1);
    assert!(transmitter.verifications().is_empty());
}

#[tokio::test]
async fn oidssf_receiver_stream_verification_by_state() {
    let rsa = JwsKey::rsa("rsa-1");
    let (_dir, _receiver, _idem, client, transmitter) =
        start(&rsa, |t| subscribed(t, "poll"), 3600).await;
    // No signing key yet: the verification asked for at the start is not sent.
    let s = subscription_when(&client, |s| s["status"] == "enabled").await;
    assert_eq!(s["verified_at"], Value::Null, "{s}");
    let asked = transmitter.verifications();
    let state = asked[0].1.clone().expect("a state");
    transmitter.sign_with(JwsKey::rsa("rsa-1"));
    let verification = |stream: &str, state: Option<&str>| {
        let mut event = json!({});
        if let Some(state) = state {
            event["state"] = json!(state);
        }
        transmitter.set_about(stream, json!({VERIFICATION_EVENT: event}))
    };
    // Another state, and the right state for another stream: refused, not verifying.
    transmitter.queue(
        "v-other-state",
        &verification("stream-1", Some("not-the-state")),
    );
    transmitter.queue("v-other-stream", &verification("stream-9", Some(&state)));
    // Unsolicited: acknowledged, not verifying.
    transmitter.queue("v-unsolicited", &verification("stream-1", None));
    for jti in ["v-other-state", "v-other-stream", "v-unsolicited"] {
        polled_back(&transmitter, jti).await;
    }
    let errs = transmitter.set_errs();
    assert_eq!(errs["v-other-state"]["err"], "invalid_state", "{errs:?}");
    assert_eq!(errs["v-other-stream"]["err"], "invalid_state", "{errs:?}");
    assert!(transmitter.acked().contains(&"v-unsolicited".to_string()));
    assert_eq!(
        status(&client).await["subscription"]["verified_at"],
        Value::Null
    );
    // The state asked for, for its stream: verified.
    transmitter.queue("v-right", &verification("stream-1", Some(&state)));
    polled_back(&transmitter, "v-right").await;
    assert!(transmitter.acked().contains(&"v-right".to_string()));
    let s = status(&client).await["subscription"].clone();
    assert!(s["verified_at"].is_string(), "{s}");
}

/// `method` on `path` of `entra` (`/subscription`, `/subjects`) with the tenant's key and
/// `body`.
async fn manage(client: &Client, method: &str, path: &str, body: &str) -> Resp {
    client
        .send(
            method,
            &format!("/v1/sources/acme/entra{path}"),
            Req::new(body).header("authorization", API_KEY),
        )
        .await
}

#[tokio::test]
async fn oidssf_receiver_stream_status_update() {
    let rsa = JwsKey::rsa("rsa-1");
    let (_dir, _receiver, idem, client, transmitter) =
        start(&rsa, |t| subscribed(t, "poll"), 3600).await;
    subscription_when(&client, |s| s["status"] == "enabled").await;
    // Paused through idem: the transmitter's answer is idem's, and recorded.
    let r = manage(
        &client,
        "POST",
        "/subscription",
        r#"{"status": "paused", "reason": "maintenance"}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", text(&r));
    assert_eq!(
        r.json(),
        json!({"stream_id": "stream-1", "status": "paused", "reason": "maintenance"})
    );
    assert_eq!(
        transmitter.stream_status("stream-1"),
        Some(("paused".into(), Some("maintenance".into())))
    );
    assert!(transmitter.calls().contains(&"POST /status".to_string()));
    assert_eq!(status(&client).await["subscription"]["status"], "paused");
    // Enabled again.
    let r = manage(&client, "POST", "/subscription", r#"{"status": "enabled"}"#).await;
    assert_eq!(r.status, 200, "{}", text(&r));
    assert_eq!(r.json()["status"], "enabled");
    assert_eq!(
        transmitter.stream_status("stream-1"),
        Some(("enabled".into(), None))
    );
    assert_eq!(status(&client).await["subscription"]["status"], "enabled");
    // What is not a status change is refused before the transmitter is asked.
    let asked = transmitter.calls().len();
    for (body, slug) in [
        (r#"{"status": "stopped"}"#, "invalid-stream"),
        (r#"{"status": "paused", "why": "x"}"#, "invalid-stream"),
        (r#"{"reason": "x"}"#, "invalid-stream"),
        (
            r#"{"status": "paused", "status": "enabled"}"#,
            "invalid-stream",
        ),
        ("paused", "malformed-json"),
    ] {
        let r = manage(&client, "POST", "/subscription", body).await;
        assert_problem(&r, 400, slug, body);
    }
    let long = format!(
        r#"{{"status": "paused", "reason": "{}"}}"#,
        "x".repeat(1025)
    );
    assert_problem(
        &manage(&client, "POST", "/subscription", &long).await,
        400,
        "invalid-stream",
        "a reason over 1024 bytes",
    );
    assert_eq!(
        transmitter.calls().len(),
        asked,
        "{:?}",
        transmitter.calls()
    );
    // Another tenant's key, no key, no such source.
    let r = client
        .send(
            "POST",
            "/v1/sources/acme/entra/subscription",
            Req::new(r#"{"status": "paused"}"#).header("authorization", "Bearer sk_nobody"),
        )
        .await;
    assert_eq!(r.status, 401, "{}", text(&r));
    let r = client
        .send(
            "POST",
            "/v1/sources/acme/nothing/subscription",
            Req::new(r#"{"status": "paused"}"#).header("authorization", API_KEY),
        )
        .await;
    assert_problem(&r, 404, "not-found", "no such source");
    // A stream the transmitter no longer has: its refusal, named.
    transmitter.drop_stream("stream-1");
    let r = manage(&client, "POST", "/subscription", r#"{"status": "paused"}"#).await;
    assert_problem(&r, 502, "transmitter-failed", "a stream gone");
    assert!(text(&r).contains("404"), "{}", text(&r));
    let log = idem.stderr();
    assert!(!log.contains("access-token-"), "a token logged: {log}");
}

#[tokio::test]
async fn subjects_added_and_removed_through_idem() {
    let rsa = JwsKey::rsa("rsa-1");
    let (_dir, _receiver, idem, client, transmitter) =
        start(&rsa, |t| subscribed(t, "poll"), 3600).await;
    subscription_when(&client, |s| s["status"] == "enabled").await;
    assert_eq!(transmitter.tokens_given(), 1);
    // Its token refused: one new one, shared with the poll client, and the call made with it.
    transmitter.revoke_tokens();
    let subject = json!({"format": "email", "email": "ann@example.com"});
    let r = manage(
        &client,
        "POST",
        "/subjects",
        &json!({"action": "add", "subject": subject, "verified": true}).to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", text(&r));
    assert_eq!(transmitter.tokens_given(), 2, "one new token on the 401");
    let r = manage(
        &client,
        "POST",
        "/subjects",
        &json!({"action": "remove", "subject": subject}).to_string(),
    )
    .await;
    assert_eq!(r.status, 204, "{}", text(&r));
    assert_eq!(
        transmitter.subjects(),
        vec![
            ("stream-1".to_string(), "add".to_string(), subject.clone()),
            (
                "stream-1".to_string(),
                "remove".to_string(),
                subject.clone()
            ),
        ]
    );
    for body in [
        json!({"action": "replace", "subject": subject}),
        json!({"action": "add", "subject": "ann@example.com"}),
        json!({"action": "add", "subject": {"email": "ann@example.com"}}),
        json!({"action": "remove", "subject": subject, "verified": true}),
        json!({"action": "add"}),
    ] {
        let r = manage(&client, "POST", "/subjects", &body.to_string()).await;
        assert_problem(&r, 400, "invalid-stream", &body.to_string());
    }
    assert_eq!(
        transmitter.subjects().len(),
        2,
        "refused before the transmitter"
    );
    let log = idem.stderr();
    assert!(!log.contains("access-token-"), "a token logged: {log}");
}

#[tokio::test]
async fn a_source_not_subscribed_or_without_a_stream_is_409() {
    let rsa = JwsKey::rsa("rsa-1");
    let transmitter = LoopbackTransmitter::start(jose::jwk_set(&[&rsa])).await;
    // `entra` calls the transmitter with a token it refuses: no stream is ever made.
    let lines = format!(
        r#"audience = "{STREAM_AUDIENCE}"
jwks = "{jwks}"
transmitter = "{issuer}"
auth = {{ bearer = "not-a-token-it-takes" }}
delivery = "poll"
[tenants.acme.sources.plain]
kind = "ssf"
issuer = "{issuer}"
audience = "{STREAM_AUDIENCE}"
jwks = "{jwks}""#,
        issuer = transmitter.issuer(),
        jwks = transmitter.url("/jwks"),
    );
    let (_dir, _receiver, _idem, client) = Harness::new()
        .tenants(move |r| acme(r, &lines))
        .start()
        .await;
    let s = subscription_when(&client, |s| s["last_error"].is_string()).await;
    assert!(
        s["last_error"].as_str().unwrap_or_default().contains("401"),
        "{s}"
    );
    for (method, path, body) in [
        ("POST", "/subscription", r#"{"status": "paused"}"#),
        ("DELETE", "/subscription", ""),
        (
            "POST",
            "/subjects",
            r#"{"action": "add", "subject": {"format": "email", "email": "a@b.c"}}"#,
        ),
    ] {
        let r = manage(&client, method, path, body).await;
        assert_problem(&r, 409, "no-stream", path);
        let r = client
            .send(
                method,
                &format!("/v1/sources/acme/plain{path}"),
                Req::new(body).header("authorization", API_KEY),
            )
            .await;
        assert_problem(&r, 409, "not-subscribed", path);
    }
    assert_eq!(transmitter.streams_made(), 0);
}

#[tokio::test]
async fn oidssf_receiver_stream_create_delete() {
    let rsa = JwsKey::rsa("rsa-1");
    let transmitter = LoopbackTransmitter::start(jose::jwk_set(&[&rsa])).await;
    let receiver = Receiver::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let port = devtools::free_port().expect("a free port");
    let lines = subscribed(&transmitter, "poll").replace("\"1h\"", "\"1s\"");
    let config = config_on_port(dir.path(), port, &acme(&receiver, &lines));
    let idem = Idem::start(dir.path(), &config);
    let client = Client::new(&idem.base);
    let made = subscription_when(&client, |s| s["status"] == "enabled").await;
    assert_eq!(made["stream_id"], "stream-1", "{made}");

    // The source dropped from the configuration: its stream is kept.
    let without = config_on_port(dir.path(), port, &acme_text(&receiver.url("/lock"), "").replace(
        "[tenants.acme.sources.entra]\nkind = \"ssf\"\n\n[[tenants.acme.sources.entra.map]]\nevent = \"https://schemas.openid.net/secevent/risc/event-type/credential-compromise\"\ntype = \"breach\"\n",
        "",
    ));
    std::fs::write(&idem.config_path, &without).expect("write");
    idem.signal(libc::SIGHUP);
    let configured = |want: u16| {
        let client = &client;
        async move {
            eventually(
                Duration::from_secs(20),
                || async {
                    let path = "/v1/sources/acme/entra/status";
                    let key = Req::new("").header("authorization", API_KEY);
                    client.send("GET", path, key).await.status
                },
                |s| *s == want,
            )
            .await
        }
    };
    assert_eq!(configured(404).await, 404, "the source is still configured");
    // Past a verification interval: nothing deleted, nothing made.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(
        !transmitter.calls().contains(&"DELETE /streams".to_string()),
        "{:?}",
        transmitter.calls()
    );
    assert!(transmitter.streams().contains_key("stream-1"));
    std::fs::write(&idem.config_path, &config).expect("write");
    idem.signal(libc::SIGHUP);
    assert_eq!(configured(200).await, 200, "the source is not back");
    let back = subscription_when(&client, |s| s["stream_id"] == "stream-1").await;
    assert_eq!(back["stream_id"], "stream-1", "{back}");

    // Deleted when asked: at the transmitter, and in the record.
    let r = manage(&client, "DELETE", "/subscription", "").await;
    assert_eq!(r.status, 204, "{}", text(&r));
    assert!(
        transmitter.streams().is_empty(),
        "{:?}",
        transmitter.streams()
    );
    let s = status(&client).await["subscription"].clone();
    assert_eq!(s["stream_id"], Value::Null, "{s}");
    assert_eq!(s["status"], Value::Null, "{s}");
    let r = manage(&client, "DELETE", "/subscription", "").await;
    assert_problem(&r, 409, "no-stream", "deleted already");
    // Not made again while idem runs, past its verification interval.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(transmitter.streams_made(), 1, "{:?}", transmitter.calls());
    idem.kill();

    // The next start makes one new stream.
    let idem = Idem::start(dir.path(), &config);
    let client = Client::new(&idem.base);
    let s = subscription_when(&client, |s| s["status"] == "enabled").await;
    assert_eq!(s["stream_id"], "stream-2", "{s}");
    assert_eq!(transmitter.streams_made(), 2, "{:?}", transmitter.calls());
    assert_eq!(transmitter.streams().len(), 1);
}

const STREAM_UPDATED: &str = "https://schemas.openid.net/secevent/ssf/event-type/stream-updated";

#[tokio::test]
async fn a_stream_updated_event_sets_the_status_shown() {
    let rsa = JwsKey::rsa("rsa-1");
    let (_dir, _receiver, _idem, client, transmitter) =
        start(&rsa, |t| subscribed(t, "poll"), 3600).await;
    subscription_when(&client, |s| s["status"] == "enabled").await;
    transmitter.sign_with(JwsKey::rsa("rsa-1"));
    let updated = |jti: &str, stream: &str, status: &str| {
        let set = transmitter.set_about(
            stream,
            json!({STREAM_UPDATED: {"status": status, "reason": "told by the transmitter"}}),
        );
        transmitter.queue(jti, &set);
    };
    // For another stream: acknowledged, shown as announced, not the subscription's status.
    updated("u-other", "stream-9", "disabled");
    polled_back(&transmitter, "u-other").await;
    assert!(transmitter.acked().contains(&"u-other".to_string()));
    let s = status(&client).await;
    assert_eq!(s["stream"]["status"], "disabled", "{s}");
    assert_eq!(s["subscription"]["status"], "enabled", "{s}");
    // For its stream: the subscription's status, on the store.
    updated("u-paused", "stream-1", "paused");
    polled_back(&transmitter, "u-paused").await;
    assert!(transmitter.acked().contains(&"u-paused".to_string()));
    let s = status(&client).await;
    assert_eq!(s["subscription"]["status"], "paused", "{s}");
    updated("u-enabled", "stream-1", "enabled");
    polled_back(&transmitter, "u-enabled").await;
    assert!(transmitter.acked().contains(&"u-enabled".to_string()));
    assert_eq!(status(&client).await["subscription"]["status"], "enabled");
    assert!(
        transmitter.set_errs().is_empty(),
        "{:?}",
        transmitter.set_errs()
    );
}

#[tokio::test]
async fn oidssf_receiver_stream_verification_again_after_verify_every() {
    let rsa = JwsKey::rsa("rsa-1");
    let (_dir, _receiver, _idem, client, transmitter) = start(
        &rsa,
        |t| subscribed(t, "poll").replace("\"1h\"", "\"1s\""),
        3600,
    )
    .await;
    transmitter.sign_with(JwsKey::rsa("rsa-1"));
    let first = subscription_when(&client, |s| s["verified_at"].is_string()).await;
    // Each interval: a verification with a new random state, which verifies the stream again.
    let asked = eventually(
        Duration::from_secs(20),
        || async { transmitter.verifications() },
        |v| v.len() >= 3,
    )
    .await;
    assert!(asked.len() >= 3, "{asked:?}");
    let states: std::collections::BTreeSet<_> = asked.iter().map(|(_, s)| s.clone()).collect();
    assert_eq!(states.len(), asked.len(), "a state used twice: {asked:?}");
    assert!(
        asked
            .iter()
            .all(|(stream, s)| stream == "stream-1" && s.as_ref().is_some_and(|s| s.len() >= 32)),
        "{asked:?}"
    );
    let again = subscription_when(&client, |s| s["verified_at"] != first["verified_at"]).await;
    assert!(again["verified_at"].is_string(), "{again}");
    assert_ne!(again["verified_at"], first["verified_at"], "{again}");
    assert_eq!(transmitter.streams_made(), 1);
    assert!(
        transmitter.set_errs().is_empty(),
        "{:?}",
        transmitter.set_errs()
    );
}

#[tokio::test]
async fn two_nodes_on_one_database_starting_at_once_make_one_stream() {
    let rsa = JwsKey::rsa("rsa-1");
    let transmitter = LoopbackTransmitter::start(jose::jwk_set(&[&rsa])).await;
    let receiver = Receiver::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let url = test_database();
    let tenants = acme(&receiver, &subscribed(&transmitter, "poll"));
    let nodes: Vec<_> = (0..2)
        .map(|n| {
            let node_dir = dir.path().join(format!("node{n}"));
            std::fs::create_dir_all(&node_dir).expect("dir");
            let config = settings(&on_postgres(&url), &node_dir.join("data"), "", "") + &tenants;
            let path = node_dir.join("idem.toml");
            std::fs::write(&path, config).expect("config");
            std::thread::spawn(move || Idem::start_with(path, &[]))
        })
        .collect();
    let nodes: Vec<Idem> = nodes
        .into_iter()
        .map(|n| n.join().expect("node started"))
        .collect();
    for node in &nodes {
        let client = Client::new(&node.base);
        let s = subscription_when(&client, |s| s["status"] == "enabled").await;
        assert_eq!(s["stream_id"], "stream-1", "{s}");
    }
    // A reconciliation round later on both nodes, still the one stream.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(transmitter.streams_made(), 1, "{:?}", transmitter.calls());
    // Managed through either node: the one stream.
    let other = Client::new(&nodes[1].base);
    let r = manage(&other, "POST", "/subscription", r#"{"status": "paused"}"#).await;
    assert_eq!(r.status, 200, "{}", text(&r));
    let first = Client::new(&nodes[0].base);
    assert_eq!(status(&first).await["subscription"]["status"], "paused");
}

#[test]
fn audience_and_jwks_are_optional_only_for_a_subscribed_source() {
    let subscribed =
        "transmitter = \"https://t.example/ssf\"\nauth = { bearer = \"b\" }\ndelivery = \"poll\"";
    let (code, err) = check(subscribed);
    assert_eq!(code, 0, "{err}");
    for (lines, key) in [
        (
            "issuer = \"https://t.example/ssf\"\njwks = \"https://t.example/jwks\"",
            "tenants.acme.sources.entra.audience",
        ),
        (
            "issuer = \"https://t.example/ssf\"\naudience = \"https://idem.example/acme\"",
            "tenants.acme.sources.entra.jwks",
        ),
    ] {
        let (code, err) = check(lines);
        assert_ne!(code, 0, "accepted: {lines}");
        assert!(err.contains(key), "{key} not named for {lines}: {err}");
    }
}

#[tokio::test]
async fn audience_and_keys_from_the_transmitter_when_not_written() {
    let rsa = JwsKey::rsa("rsa-1");
    let lines = |t: &LoopbackTransmitter| {
        subscribed(t, "poll")
            .lines()
            .filter(|l| !l.starts_with("audience") && !l.starts_with("jwks"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let (_dir, receiver, _idem, client, transmitter) = start(&rsa, lines, 3600).await;
    transmitter.sign_with(JwsKey::rsa("rsa-1"));
    subscription_when(&client, |s| s["verified_at"].is_string()).await;
    // Verified with the key of the metadata's jwks_uri, for the stream's aud.
    assert!(transmitter.jwks_fetches() >= 1);
    let set = rsa.sign(&compromise(&transmitter.issuer(), "aud-1", "a@example.com"));
    transmitter.deliver("stream-1", "aud-1", &set).await;
    let mut other = compromise(&transmitter.issuer(), "aud-2", "b@example.com");
    other["aud"] = json!("https://someone-else.example");
    transmitter
        .deliver("stream-1", "aud-2", &rsa.sign(&other))
        .await;
    polled_back(&transmitter, "aud-1").await;
    polled_back(&transmitter, "aud-2").await;
    assert!(transmitter.acked().contains(&"aud-1".to_string()));
    let errs = transmitter.set_errs();
    assert_eq!(errs["aud-2"]["err"], "invalid_audience", "{errs:?}");
    exactly(&receiver, "/lock", 1).await;
}
