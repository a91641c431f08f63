//! idem as a Shared Signals transmitter under the OpenID Foundation's transmitter test plan
//! (docs/SHARED-SIGNALS.md): each test reproduces one of the plan's modules or conditions
//! against a real `idem serve` and is named after it. Tokens carry the CAEP interoperability
//! profile's scopes, and a write without `ssf.manage` is refused; a stream created without a
//! delivery is a poll stream; a paused or disabled stream gets nothing until it is enabled, and
//! then at once; a playbook's `set` action sends any CAEP 1.0 or RISC event with its own
//! members.

use std::path::Path;

use serde_json::{json, Value};

use crate::support::*;
use crate::transmitter::{call, sim_swap_signal, token, OKTA_SECRET, PUBLIC_URL, REVOKED};

const AUDITOR_SECRET: &str = "auditor-client-secret-0001";

/// Deliveries retried every 300 ms; a paused stream's SETs are looked at again only after a
/// minute (`breaker_cooldown`), so a test sees them go at once on enabling or not at all.
const DELIVERY: &str = "inline_timeout = \"2s\"\nschedule = [\"300ms\", \"300ms\", \"300ms\", \"300ms\", \"300ms\", \"300ms\"]\nbreaker_cooldown = \"60s\"";

/// `acme`, a transmitter with receivers `okta` (every scope) and `auditor` (`ssf.read` only),
/// whose `sim_swap` playbook sends `actions`; its key written to `dir`.
fn config(dir: &Path, actions: &str) -> String {
    let key = dir.join("acme-rsa.pem");
    std::fs::write(&key, devtools::jose::rsa_pem()).expect("write key");
    let settings = settings(&store_section(), &dir.join("data"), "", DELIVERY);
    format!(
        r#"public_url = "{PUBLIC_URL}"
{settings}
[tenants.acme]
api_key = "sk_transmitter_acme_0001"
callback_secret = "{CALLBACK_SECRET}"

[tenants.acme.playbooks.sim_swap]
decision = "deny"
actions = [
{actions}
]

[tenants.acme.ssf]
signing_keys = ["{key}"]

[tenants.acme.ssf.receivers.okta]
client_secret = "{OKTA_SECRET}"
audience = "https://okta.example.test"
endpoints = ["http://127.0.0.1"]

[tenants.acme.ssf.receivers.auditor]
client_secret = "{AUDITOR_SECRET}"
audience = "https://auditor.example.test"
scopes = ["ssf.read"]
"#,
        key = key.display(),
    )
}

const REVOKE: &str = r#"  { name = "revoke", set = "https://schemas.openid.net/secevent/caep/event-type/session-revoked", subject_format = "phone_number" },"#;

async fn start(actions: &str) -> (tempfile::TempDir, Receiver, Idem, Client) {
    let dir = tempfile::tempdir().expect("tempdir");
    let receiver = Receiver::start().await;
    let idem = Idem::start(dir.path(), &config(dir.path(), actions));
    let client = Client::new(&idem.base);
    (dir, receiver, idem, client)
}

/// The token endpoint's answer to `client_id` asking for `scope` (none: not sent).
async fn token_response(
    client: &Client,
    client_id: &str,
    secret: &str,
    scope: Option<&str>,
) -> Resp {
    let mut body =
        format!("grant_type=client_credentials&client_id={client_id}&client_secret={secret}");
    if let Some(scope) = scope {
        body += &format!("&scope={}", scope.replace(' ', "+"));
    }
    let req = Req::new(&body)
        .without("content-type")
        .header("content-type", "application/x-www-form-urlencoded");
    client.send("POST", "/ssf/acme/token", req).await
}

/// A token of `client_id` granted `scope`.
async fn scoped_token(client: &Client, client_id: &str, secret: &str, scope: &str) -> String {
    let r = token_response(client, client_id, secret, Some(scope)).await;
    assert_eq!(r.status, 200, "{}", text(&r));
    assert_eq!(r.json()["scope"], scope);
    r.json()["access_token"]
        .as_str()
        .expect("token")
        .to_string()
}

fn push_to(url: &str) -> Value {
    json!({
        "delivery": {"method": "urn:ietf:rfc:8935", "endpoint_url": url},
        "events_requested": [REVOKED],
    })
}

/// CAEPIOP §2.7.3 as the plan's OIDSSFValidateRequestedScope checks it: a token is granted the
/// scopes asked for, within the receiver's `scopes`, and says which.
#[tokio::test]
async fn oidssf_validate_requested_scope() {
    let (_dir, _receiver, _idem, client) = start(REVOKE).await;
    let r = token_response(&client, "okta", OKTA_SECRET, None).await;
    assert_eq!(r.status, 200, "{}", text(&r));
    assert_eq!(r.json()["scope"], "ssf.read ssf.manage", "all, unasked");
    scoped_token(&client, "okta", OKTA_SECRET, "ssf.read").await;
    scoped_token(&client, "okta", OKTA_SECRET, "ssf.manage").await;
    let r = token_response(&client, "auditor", AUDITOR_SECRET, None).await;
    assert_eq!(r.json()["scope"], "ssf.read", "{}", text(&r));
    for (client_id, secret, scope) in [
        ("okta", OKTA_SECRET, "ssf.write"),
        ("okta", OKTA_SECRET, "ssf.read openid"),
        ("auditor", AUDITOR_SECRET, "ssf.manage"),
        ("auditor", AUDITOR_SECRET, "ssf.read ssf.manage"),
    ] {
        let r = token_response(&client, client_id, secret, Some(scope)).await;
        assert_eq!(r.status, 400, "{client_id} asking {scope}: {}", text(&r));
        assert_eq!(r.json()["error"], "invalid_scope", "{}", text(&r));
    }
}

/// CAEPIOP §2.7.2 as the plan's OIDSSFEnsureTokenScopeSufficient checks it: reading and
/// polling need `ssf.read`; every write (create, update, replace, delete, status change,
/// subjects, verification) needs `ssf.manage`, and without it is 403 `insufficient_scope` and
/// changes nothing.
#[tokio::test]
async fn oidssf_ensure_token_scope_sufficient() {
    let (_dir, receiver, _idem, client) = start(REVOKE).await;
    let manage = scoped_token(&client, "okta", OKTA_SECRET, "ssf.manage").await;
    let read = scoped_token(&client, "okta", OKTA_SECRET, "ssf.read").await;
    let r = call(
        &client,
        "POST",
        "streams",
        &manage,
        push_to(&receiver.url("/s")),
    )
    .await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let id = r.json()["stream_id"].as_str().expect("id").to_string();
    let writes = [
        ("POST", "streams".to_string(), push_to(&receiver.url("/t"))),
        (
            "PATCH",
            "streams".into(),
            json!({"stream_id": id, "description": "x"}),
        ),
        ("PUT", "streams".into(), {
            let mut body = push_to(&receiver.url("/u"));
            body["stream_id"] = json!(id);
            body
        }),
        ("DELETE", format!("streams?stream_id={id}"), Value::Null),
        (
            "POST",
            "streams/status".into(),
            json!({"stream_id": id, "status": "paused"}),
        ),
        (
            "POST",
            "streams/subjects:add".into(),
            json!({"stream_id": id, "subject": {"format": "email", "email": "a@example.com"}}),
        ),
        (
            "POST",
            "streams/subjects:remove".into(),
            json!({"stream_id": id, "subject": {"format": "email", "email": "a@example.com"}}),
        ),
        (
            "POST",
            "streams/verify".into(),
            json!({"stream_id": id, "state": "s"}),
        ),
    ];
    let auditor = token(&client, "acme", "auditor", AUDITOR_SECRET).await;
    for token in [&read, &auditor] {
        for (method, path, body) in &writes {
            let r = call(&client, method, path, token, body.clone()).await;
            assert_problem(&r, 403, "insufficient-scope", &format!("{method} {path}"));
            assert_eq!(
                r.header("www-authenticate"),
                Some("Bearer error=\"insufficient_scope\", scope=\"ssf.manage\""),
                "{method} {path}"
            );
        }
    }
    // Nothing changed, and nothing was sent.
    let r = call(
        &client,
        "GET",
        &format!("streams?stream_id={id}"),
        &read,
        Value::Null,
    )
    .await;
    assert_eq!(r.status, 200, "{}", text(&r));
    assert_eq!(r.json()["delivery"]["endpoint_url"], receiver.url("/s"));
    assert_eq!(r.json().get("description"), None);
    let r = call(&client, "GET", "streams", &read, Value::Null).await;
    assert_eq!(r.json().as_array().map(Vec::len), Some(1), "{}", text(&r));
    let r = call(
        &client,
        "GET",
        &format!("streams/status?stream_id={id}"),
        &read,
        Value::Null,
    )
    .await;
    assert_eq!(r.json()["status"], "enabled", "{}", text(&r));
    // A token of manage alone reads nothing.
    let r = call(&client, "GET", "streams", &manage, Value::Null).await;
    assert_problem(&r, 403, "insufficient-scope", "a read with ssf.manage only");
    assert_eq!(
        r.header("www-authenticate"),
        Some("Bearer error=\"insufficient_scope\", scope=\"ssf.read\"")
    );
    // A poll is a read.
    let r = call(
        &client,
        "POST",
        "streams",
        &manage,
        json!({"delivery": {"method": "urn:ietf:rfc:8936"}}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let poll = r.json()["stream_id"].as_str().expect("id").to_string();
    let r = call(
        &client,
        "POST",
        &format!("streams/{poll}/poll"),
        &manage,
        json!({"returnImmediately": true}),
    )
    .await;
    assert_problem(&r, 403, "insufficient-scope", "a poll with ssf.manage only");
    let r = call(
        &client,
        "POST",
        &format!("streams/{poll}/poll"),
        &read,
        json!({"returnImmediately": true}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", text(&r));
    assert!(receiver.seen_on("/s").is_empty());
}

/// The plan's OIDSSFStreamControlNegativeTest*WithInvalidAccessToken modules (create, read,
/// update, replace, delete): a token that is not valid, expired or altered is 401 with
/// `error="invalid_token"`; no token is 401 `Bearer`; a token in the query string is refused.
#[tokio::test]
async fn oidssf_stream_control_negative_test_with_invalid_access_token() {
    let (_dir, receiver, _idem, client) = start(REVOKE).await;
    let okta = token(&client, "acme", "okta", OKTA_SECRET).await;
    let r = call(
        &client,
        "POST",
        "streams",
        &okta,
        push_to(&receiver.url("/s")),
    )
    .await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let id = r.json()["stream_id"].as_str().expect("id").to_string();
    let altered = format!("{}x", &okta[..okta.len() - 1]);
    let operations = [
        ("POST", "streams".to_string(), push_to(&receiver.url("/t"))),
        ("GET", format!("streams?stream_id={id}"), Value::Null),
        (
            "PATCH",
            "streams".into(),
            json!({"stream_id": id, "description": "x"}),
        ),
        ("PUT", "streams".into(), push_to(&receiver.url("/u"))),
        ("DELETE", format!("streams?stream_id={id}"), Value::Null),
    ];
    for (method, path, body) in &operations {
        for bad in ["not-a-token", altered.as_str()] {
            let r = call(&client, method, path, bad, body.clone()).await;
            assert_problem(&r, 401, "unauthorized", &format!("{method} {path}"));
            let challenge = r.header("www-authenticate").unwrap_or_default();
            assert!(
                challenge.starts_with("Bearer error=\"invalid_token\""),
                "{method} {path}: {challenge}"
            );
        }
        let req = Req::new(&body.to_string());
        let r = client.send(method, &format!("/ssf/acme/{path}"), req).await;
        assert_problem(
            &r,
            401,
            "unauthorized",
            &format!("{method} {path} with no token"),
        );
        assert_eq!(r.header("www-authenticate"), Some("Bearer"));
        let sep = if path.contains('?') { '&' } else { '?' };
        let req = Req::new(&body.to_string());
        let r = client
            .send(
                method,
                &format!("/ssf/acme/{path}{sep}access_token={okta}"),
                req,
            )
            .await;
        assert_eq!(
            r.status,
            400,
            "{method} {path} with the token in the query: {}",
            text(&r)
        );
        assert_eq!(
            r.header("www-authenticate"),
            Some("Bearer error=\"invalid_request\"")
        );
    }
    let r = call(
        &client,
        "GET",
        &format!("streams?stream_id={id}"),
        &okta,
        Value::Null,
    )
    .await;
    assert_eq!(r.status, 200, "the stream is as it was: {}", text(&r));
    assert_eq!(r.json()["delivery"]["endpoint_url"], receiver.url("/s"));
}

/// SSF §8.1.1.1 as the plan's OIDSSFHandleStreamCreateRequestValidation takes it: a stream
/// created without `delivery` is a poll stream (`urn:ietf:rfc:8936`, its `endpoint_url` the
/// transmitter's), whose SETs wait to be polled; a replace without `delivery` makes it one too.
#[tokio::test]
async fn oidssf_handle_stream_create_request_validation_without_delivery_is_poll() {
    let (_dir, receiver, _idem, client) = start(REVOKE).await;
    let okta = token(&client, "acme", "okta", OKTA_SECRET).await;
    let r = call(
        &client,
        "POST",
        "streams",
        &okta,
        json!({"events_requested": [REVOKED]}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let id = r.json()["stream_id"].as_str().expect("id").to_string();
    let poll_url = format!("{PUBLIC_URL}/ssf/acme/streams/{id}/poll");
    assert_eq!(
        r.json()["delivery"],
        json!({"method": "urn:ietf:rfc:8936", "endpoint_url": poll_url})
    );
    assert_eq!(r.json()["events_delivered"], json!([REVOKED]));
    let signal = sim_swap_signal(&client, "+15550002323", &unique("poll-default")).await;
    assert_eq!(signal.status, 201, "{}", text(&signal));
    let r = call(
        &client,
        "POST",
        &format!("streams/{id}/poll"),
        &okta,
        json!({"returnImmediately": true}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", text(&r));
    let sets = r.json()["sets"].as_object().cloned().unwrap_or_default();
    assert_eq!(sets.len(), 1, "{}", text(&r));

    let r = call(
        &client,
        "POST",
        "streams",
        &okta,
        push_to(&receiver.url("/push")),
    )
    .await;
    let push = r.json()["stream_id"].as_str().expect("id").to_string();
    let body = json!({"stream_id": push, "events_requested": [REVOKED]});
    let r = call(&client, "PUT", "streams", &okta, body).await;
    assert_eq!(r.status, 200, "{}", text(&r));
    assert_eq!(r.json()["delivery"]["method"], "urn:ietf:rfc:8936");
    let r = call(
        &client,
        "GET",
        &format!("streams?stream_id={push}"),
        &okta,
        Value::Null,
    )
    .await;
    assert_eq!(
        r.json()["delivery"]["endpoint_url"],
        format!("{PUBLIC_URL}/ssf/acme/streams/{push}/poll")
    );
}
