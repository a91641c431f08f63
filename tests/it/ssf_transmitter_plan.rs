//! idem as a Shared Signals transmitter under the OpenID Foundation's transmitter test plan
//! (docs/SHARED-SIGNALS.md): each test reproduces one of the plan's modules or conditions
//! against a real `idem serve` and is named after it. Tokens carry the CAEP interoperability
//! profile's scopes, and a write without `ssf.manage` is refused; a stream created without a
//! delivery is a poll stream; a paused or disabled stream gets nothing until it is enabled, and
//! then at once; a playbook's `set` action sends any CAEP 1.0 or RISC event with its own
//! members.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::*;
use crate::transmitter::{
    acme_delivery, call, sim_swap_signal, token, verified, OKTA_SECRET, PUBLIC_URL, REVOKED,
};

const AUDITOR_SECRET: &str = "auditor-client-secret-0001";

/// Deliveries retried every 300 ms, one at a time per endpoint; a paused stream's SETs are
/// looked at again only after a minute (`breaker_cooldown`), so a test sees them go at once on
/// enabling or not at all.
const DELIVERY: &str = "inline_timeout = \"2s\"\nschedule = [\"300ms\", \"300ms\", \"300ms\", \"300ms\", \"300ms\", \"300ms\"]\nbreaker_cooldown = \"60s\"\nmax_in_flight_per_endpoint = 1";

/// `acme`, a transmitter with receivers `okta` (every scope) and `auditor` (`ssf.read` only),
/// whose `sim_swap` playbook sends `actions`; its key written to `dir`.
fn config(dir: &Path, actions: &str) -> String {
    config_with(dir, actions, DELIVERY)
}

/// As [`config`], with `delivery` as the `[delivery]` section.
pub(crate) fn config_with(dir: &Path, actions: &str, delivery: &str) -> String {
    let key = dir.join("acme-rsa.pem");
    std::fs::write(&key, devtools::jose::rsa_pem()).expect("write key");
    let settings = settings(&store_section(), &dir.join("data"), "", delivery);
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

pub(crate) const REVOKE: &str = r#"  { name = "revoke", set = "https://schemas.openid.net/secevent/caep/event-type/session-revoked", subject_format = "phone_number" },"#;

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

const VERIFICATION: &str = "https://schemas.openid.net/secevent/ssf/event-type/verification";

/// Each received SET's (verified) event type and `jti`.
pub(crate) async fn events(client: &Client, received: &[Received]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for r in received {
        let (_, claims) = verified(client, r).await;
        let events = claims["events"].as_object().expect("events");
        let event_type = events.keys().next().expect("an event").clone();
        out.push((
            event_type,
            claims["jti"].as_str().unwrap_or_default().to_string(),
        ));
    }
    out
}

/// `POST streams/status` of `id` to `status`, answered 200 with that status.
pub(crate) async fn set_status(client: &Client, token: &str, id: &str, status: &str) {
    let body = json!({"stream_id": id, "status": status, "reason": "maintenance"});
    let r = call(client, "POST", "streams/status", token, body).await;
    assert_eq!(r.status, 200, "{}", text(&r));
    assert_eq!(r.json()["status"], status);
}

/// A push stream of `okta`'s to `url`, paused, then holding the SETs of `n` sim swaps (of
/// `phones` and two digits): `okta`'s token, the stream's id and the SETs' delivery ids, in
/// the order decided.
pub(crate) async fn paused_with_held(
    client: &Client,
    url: &str,
    n: usize,
    phones: &str,
) -> (String, String, Vec<String>) {
    let okta = token(client, "acme", "okta", OKTA_SECRET).await;
    let r = call(client, "POST", "streams", &okta, push_to(url)).await;
    let id = r.json()["stream_id"].as_str().expect("id").to_string();
    set_status(client, &okta, &id, "paused").await;
    let mut decided = Vec::new();
    for n in 0..n {
        let r = sim_swap_signal(client, &format!("{phones}{n:02}"), &unique("held")).await;
        let ids = set_ids(&r);
        assert_eq!(ids.len(), 1, "one SET: {}", text(&r));
        decided.push(ids[0].clone());
    }
    (okta, id, decided)
}

/// The SET delivery ids of a sim swap's response (after its callback).
fn set_ids(r: &Resp) -> Vec<String> {
    let actions = r.json()["actions"].as_array().cloned().unwrap_or_default();
    actions
        .iter()
        .filter_map(|a| a["delivery_id"].as_str().map(str::to_string))
        .collect()
}

/// The plan's OIDSSFStreamControlHappyPathTest sets a stream's status to each value in turn:
/// each change is answered, not announced (no stream-updated SET), and once a pause or a
/// disabling is answered nothing reaches the stream, a verification asked for meanwhile
/// neither; enabling sends what it held at once (long before `breaker_cooldown`).
#[tokio::test]
async fn oidssf_stream_control_happy_path_update_stream_status_is_quiet() {
    let (_dir, receiver, _idem, client) = start(REVOKE).await;
    let okta = token(&client, "acme", "okta", OKTA_SECRET).await;
    let r = call(
        &client,
        "POST",
        "streams",
        &okta,
        push_to(&receiver.url("/held")),
    )
    .await;
    let id = r.json()["stream_id"].as_str().expect("id").to_string();
    set_status(&client, &okta, &id, "paused").await;
    let first = sim_swap_signal(&client, "+15550003434", &unique("quiet-1")).await;
    let second = sim_swap_signal(&client, "+15550003535", &unique("quiet-2")).await;
    let (first, second) = (set_ids(&first), set_ids(&second));
    assert_eq!((first.len(), second.len()), (1, 1), "one SET each");
    let r = call(
        &client,
        "POST",
        "streams/verify",
        &okta,
        json!({"stream_id": id, "state": "q1"}),
    )
    .await;
    assert_eq!(r.status, 204, "{}", text(&r));
    // A few retry ticks: nothing is sent, no attempt used up.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(receiver.seen_on("/held").is_empty(), "sent while paused");
    let delivery = acme_delivery(&client, &first[0]).await;
    assert_eq!(
        (
            delivery["status"].as_str(),
            delivery["attempts_total"].as_u64()
        ),
        (Some("queued"), Some(0))
    );

    set_status(&client, &okta, &id, "enabled").await;
    let sent = tokio::time::timeout(Duration::from_secs(15), exactly(&receiver, "/held", 3))
        .await
        .expect("sent at once on enabling, not at the next cooldown");
    let told = events(&client, &sent).await;
    let types: Vec<&str> = told.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        types.iter().filter(|t| **t == VERIFICATION).count(),
        1,
        "the verification waited: {told:?}"
    );
    let mut revokes: Vec<&str> = told
        .iter()
        .filter(|(t, _)| t == REVOKED)
        .map(|(_, jti)| jti.as_str())
        .collect();
    // Released oldest first; on a shared store two nodes' actors may still send them in
    // either order.
    revokes.sort();
    let mut held = [first[0].as_str(), second[0].as_str()];
    held.sort();
    assert_eq!(revokes, held, "both held SETs, once each");

    // Disabled: a verification waits, a decision's SET is not made; enabled, the verification
    // goes, and the stream is told of neither change.
    set_status(&client, &okta, &id, "disabled").await;
    let r = sim_swap_signal(&client, "+15550003636", &unique("quiet-3")).await;
    assert!(set_ids(&r).is_empty(), "{}", text(&r));
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let r = call(
        &client,
        "POST",
        "streams/verify",
        &okta,
        json!({"stream_id": id, "state": "q2"}),
    )
    .await;
    assert_eq!(r.status, 429, "within the interval: {}", text(&r));
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(receiver.seen_on("/held").len(), 3, "sent while disabled");
    set_status(&client, &okta, &id, "enabled").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let told = events(&client, &receiver.seen_on("/held")).await;
    assert_eq!(told.len(), 3, "nothing announced: {told:?}");
}

/// What a paused push stream held goes out on enabling oldest first, one attempt at a time:
/// the receiver sees the SETs of twenty decisions in the order they were decided, the
/// verification asked for after them last, though the endpoint admits many attempts at once.
#[tokio::test]
async fn held_sets_go_out_oldest_first_once_a_paused_push_stream_is_enabled() {
    let dir = tempfile::tempdir().expect("tempdir");
    let receiver = Receiver::start().await;
    let delivery = "inline_timeout = \"2s\"\nschedule = [\"300ms\", \"300ms\"]\nbreaker_cooldown = \"60s\"\nmax_in_flight_per_endpoint = 16";
    let idem = Idem::start(dir.path(), &config_with(dir.path(), REVOKE, delivery));
    let client = Client::new(&idem.base);
    let url = receiver.url("/in-order");
    let (okta, id, decided) = paused_with_held(&client, &url, 20, "+155500041").await;
    let body = json!({"stream_id": id, "state": "last"});
    let r = call(&client, "POST", "streams/verify", &okta, body).await;
    assert_eq!(r.status, 204, "{}", text(&r));
    let early = eventually(
        LATE,
        || async { receiver.seen_on("/in-order") },
        |s| !s.is_empty(),
    );
    assert!(early.await.is_empty(), "sent while paused");

    set_status(&client, &okta, &id, "enabled").await;
    let sent = exactly(&receiver, "/in-order", 21).await;
    let told = events(&client, &sent).await;
    let revokes: Vec<&str> = told[..20].iter().map(|(_, jti)| jti.as_str()).collect();
    assert_eq!(revokes, decided, "in the order decided: {told:?}");
    assert_eq!(told[20].0, VERIFICATION, "asked for last, sent last");
}

/// As [`oidssf_stream_control_happy_path_update_stream_status_is_quiet`], for a poll stream
/// (the plan's OIDSSFTransmitterStreamVerificationPollOnlyTest polls its verification): a
/// paused poll stream hands out nothing, its verification neither, until it is enabled.
#[tokio::test]
async fn oidssf_transmitter_stream_verification_poll_only_waits_while_paused() {
    let (_dir, _receiver, _idem, client) = start(REVOKE).await;
    let okta = token(&client, "acme", "okta", OKTA_SECRET).await;
    let r = call(
        &client,
        "POST",
        "streams",
        &okta,
        json!({"events_requested": [REVOKED]}),
    )
    .await;
    let id = r.json()["stream_id"].as_str().expect("id").to_string();
    set_status(&client, &okta, &id, "paused").await;
    let r = call(
        &client,
        "POST",
        "streams/verify",
        &okta,
        json!({"stream_id": id, "state": "p1"}),
    )
    .await;
    assert_eq!(r.status, 204, "{}", text(&r));
    let signal = sim_swap_signal(&client, "+15550004545", &unique("quiet-poll")).await;
    let held = set_ids(&signal);
    assert_eq!(held.len(), 1, "{}", text(&signal));
    let poll = |client: Client, okta: String, id: String| async move {
        let r = call(
            &client,
            "POST",
            &format!("streams/{id}/poll"),
            &okta,
            json!({"returnImmediately": true}),
        )
        .await;
        assert_eq!(r.status, 200, "{}", text(&r));
        r.json()["sets"].as_object().cloned().unwrap_or_default()
    };
    let sets = poll(client.clone(), okta.clone(), id.clone()).await;
    assert!(sets.is_empty(), "handed out while paused: {sets:?}");
    set_status(&client, &okta, &id, "enabled").await;
    let sets = poll(client.clone(), okta.clone(), id.clone()).await;
    assert_eq!(sets.len(), 2, "{sets:?}");
    assert!(sets.contains_key(&held[0]));
    let verification = sets
        .iter()
        .find(|(jti, _)| **jti != held[0])
        .and_then(|(_, token)| token.as_str())
        .expect("the verification");
    let jwks = client
        .send("GET", "/ssf/acme/jwks", Req::new(""))
        .await
        .json();
    let (_, claims) = devtools::jose::verify(verification, &jwks).expect("verifies");
    assert_eq!(claims["events"][VERIFICATION], json!({"state": "p1"}));
}

const CREDENTIAL_CHANGE: &str =
    "https://schemas.openid.net/secevent/caep/event-type/credential-change";
const DEVICE_COMPLIANCE: &str =
    "https://schemas.openid.net/secevent/caep/event-type/device-compliance-change";
const CREDENTIAL_COMPROMISE: &str =
    "https://schemas.openid.net/secevent/risc/event-type/credential-compromise";

/// A playbook sending the CAEP interoperability profile's events with their own members, and
/// a RISC credential-compromise.
const INTEROP: &str = r#"  { name = "revoke", set = "https://schemas.openid.net/secevent/caep/event-type/session-revoked", subject_format = "phone_number", event = { reason_admin = { en = "SIM swap detected" }, reason_user = { en = "Sign in again" } } },
  { name = "password", set = "https://schemas.openid.net/secevent/caep/event-type/credential-change", subject_format = "phone_number", event = { credential_type = "password", change_type = "revoke", initiating_entity = "admin" } },
  { name = "device", set = "https://schemas.openid.net/secevent/caep/event-type/device-compliance-change", subject_format = "phone_number", event = { previous_status = "compliant", current_status = "not-compliant" } },
  { name = "compromise", set = "https://schemas.openid.net/secevent/risc/event-type/credential-compromise", subject_format = "phone_number", event = { credential_type = "phone-sms" } },"#;

/// The plan's OIDSSFTransmitterStreamCaepInteropTest with its OIDSSFValidateCaepCommonOptionalFields,
/// OIDSSFValidateCaepCredentialChangeEvent and OIDSSFValidateCaepDeviceComplianceChangeEvent
/// conditions: `events_supported` is what the tenant's playbooks send, and each SET carries its
/// action's own members besides `event_timestamp` and `initiating_entity`.
#[tokio::test]
async fn oidssf_transmitter_stream_caep_interop_test() {
    let (_dir, receiver, _idem, client) = start(INTEROP).await;
    let okta = token(&client, "acme", "okta", OKTA_SECRET).await;
    let mut body = push_to(&receiver.url("/interop"));
    body["events_requested"] = json!([
        REVOKED,
        CREDENTIAL_CHANGE,
        DEVICE_COMPLIANCE,
        CREDENTIAL_COMPROMISE,
        "https://schemas.openid.net/secevent/caep/event-type/session-established"
    ]);
    let r = call(&client, "POST", "streams", &okta, body).await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let mut supported = vec![
        REVOKED,
        CREDENTIAL_CHANGE,
        DEVICE_COMPLIANCE,
        CREDENTIAL_COMPROMISE,
    ];
    supported.sort();
    assert_eq!(r.json()["events_supported"], json!(supported));
    assert_eq!(
        r.json()["events_delivered"],
        json!([
            REVOKED,
            CREDENTIAL_CHANGE,
            DEVICE_COMPLIANCE,
            CREDENTIAL_COMPROMISE
        ]),
        "what was asked for among what is sent"
    );
    let signal = sim_swap_signal(&client, "+15550005656", &unique("interop")).await;
    assert_eq!(signal.status, 201, "{}", text(&signal));
    let sent = exactly(&receiver, "/interop", 4).await;
    let events = by_event_type(&client, &sent, "+15550005656").await;
    let caep = |uri: &str| {
        let event = events[uri].clone();
        assert!(event["event_timestamp"].is_u64(), "{uri}: {event}");
        event
    };
    let revoked = caep(REVOKED);
    assert_eq!(revoked["reason_admin"], json!({"en": "SIM swap detected"}));
    assert_eq!(revoked["reason_user"], json!({"en": "Sign in again"}));
    assert_eq!(revoked["initiating_entity"], "policy");
    let changed = caep(CREDENTIAL_CHANGE);
    assert_eq!(
        (
            changed["credential_type"].as_str(),
            changed["change_type"].as_str(),
            changed["initiating_entity"].as_str()
        ),
        (Some("password"), Some("revoke"), Some("admin"))
    );
    let device = caep(DEVICE_COMPLIANCE);
    assert_eq!(
        (
            device["previous_status"].as_str(),
            device["current_status"].as_str()
        ),
        (Some("compliant"), Some("not-compliant"))
    );
    assert_eq!(
        events[CREDENTIAL_COMPROMISE],
        json!({"credential_type": "phone-sms"}),
        "RISC: its members only"
    );
}

/// The event of each SET `received` (verified, about the phone number `subject`), by type.
async fn by_event_type(
    client: &Client,
    received: &[Received],
    subject: &str,
) -> serde_json::Map<String, Value> {
    let mut events = serde_json::Map::new();
    for r in received {
        let (_, claims) = verified(client, r).await;
        assert_eq!(
            claims["sub_id"],
            json!({"format": "phone_number", "phone_number": subject})
        );
        let (uri, event) = claims["events"]
            .as_object()
            .and_then(|e| e.iter().next())
            .expect("an event");
        events.insert(uri.clone(), event.clone());
    }
    events
}

/// A `set` action's event is checked against its type's required members when the config is
/// read: `idem check-config` names the key of what is missing or wrong, and the playbook never
/// sends an event its receivers would refuse.
#[tokio::test]
async fn oidssf_validate_caep_credential_change_event_members_are_checked_in_the_config() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (event, key) in [
        ("{ credential_type = \"password\" }", "event.change_type"),
        (
            "{ credential_type = \"password\", change_type = \"rotate\" }",
            "event.change_type",
        ),
        (
            "{ credential_type = \"\", change_type = \"revoke\" }",
            "event.credential_type",
        ),
        (
            "{ credential_type = \"pin\", change_type = \"create\", reason_admin = \"text\" }",
            "event.reason_admin",
        ),
        (
            "{ credential_type = \"pin\", change_type = \"create\", event_timestamp = 5 }",
            "event.event_timestamp",
        ),
    ] {
        let action =
            format!("  {{ name = \"password\", set = \"{CREDENTIAL_CHANGE}\", event = {event} }},");
        let path = dir.path().join("idem.toml");
        std::fs::write(&path, config(dir.path(), &action)).expect("write config");
        let (code, stderr) = check_config(&path);
        assert_ne!(code, 0, "{event} accepted");
        assert!(stderr.contains(key), "{event}: {stderr}");
    }
}

const CAEP_TYPE: &str = "https://schemas.openid.net/secevent/caep/event-type/";
const RISC_TYPE: &str = "https://schemas.openid.net/secevent/risc/event-type/";

/// Every CAEP 1.0 and RISC 1.0 event type (`caep/…` or `risc/…`), with the members CAEP 1.0
/// final and RISC 1.0 require of its events, as a TOML table.
const EVERY_EVENT: &[(&str, &str)] = &[
    ("caep/session-revoked", "{}"),
    (
        "caep/token-claims-change",
        "{ claims = { role = \"ro-admin\" } }",
    ),
    (
        "caep/credential-change",
        "{ credential_type = \"passkey\", change_type = \"create\" }",
    ),
    (
        "caep/assurance-level-change",
        "{ namespace = \"NIST-AAL\", current_level = \"nist-aal1\" }",
    ),
    (
        "caep/device-compliance-change",
        "{ previous_status = \"compliant\", current_status = \"not-compliant\" }",
    ),
    ("caep/session-established", "{}"),
    ("caep/session-presented", "{}"),
    (
        "caep/risk-level-change",
        "{ principal = \"USER\", current_level = \"HIGH\" }",
    ),
    ("risc/account-credential-change-required", "{}"),
    ("risc/account-purged", "{}"),
    ("risc/account-disabled", "{}"),
    ("risc/account-enabled", "{}"),
    ("risc/identifier-changed", "{}"),
    ("risc/identifier-recycled", "{}"),
    (
        "risc/credential-compromise",
        "{ credential_type = \"password\" }",
    ),
    ("risc/opt-in", "{}"),
    ("risc/opt-out-initiated", "{}"),
    ("risc/opt-out-cancelled", "{}"),
    ("risc/opt-out-effective", "{}"),
    ("risc/recovery-activated", "{}"),
    ("risc/recovery-information-changed", "{}"),
    ("risc/sessions-revoked", "{}"),
];

/// The URI of `short` (`caep/…` or `risc/…`).
fn event_uri(short: &str) -> String {
    match short.split_once('/') {
        Some(("caep", name)) => format!("{CAEP_TYPE}{name}"),
        Some(("risc", name)) => format!("{RISC_TYPE}{name}"),
        _ => panic!("not an event type: {short}"),
    }
}

/// `members` as JSON, from the TOML table it is written as.
fn members_json(members: &str) -> Value {
    let doc: toml::Table = toml::from_str(&format!("m = {members}")).expect("a TOML table");
    serde_json::to_value(&doc["m"]).expect("as JSON")
}

/// Every CAEP 1.0 and RISC 1.0 event type can be sent with just its required members (a
/// credential type beyond CAEP's list, a risk level change without its recommended
/// `risk_reason`), and each reaches the stream with them.
/// (A playbook has at most 16 actions: CAEP's and RISC's go from two servers.)
#[tokio::test]
async fn every_caep_and_risc_event_type_is_sent_with_its_required_members() {
    let (caep, risc) = EVERY_EVENT.split_at(8);
    assert!(
        caep.iter().all(|(s, _)| s.starts_with("caep/")),
        "CAEP's 8 first"
    );
    sent_with_their_members(caep).await;
    sent_with_their_members(risc).await;
}

/// A playbook sends each of `events` with its members; a stream asking for them gets each once,
/// with those members.
async fn sent_with_their_members(events: &[(&str, &str)]) {
    let actions: Vec<String> = events
        .iter()
        .enumerate()
        .map(|(n, (short, members))| {
            format!(
                "  {{ name = \"e{n}\", set = \"{}\", subject_format = \"phone_number\", event = {members} }},",
                event_uri(short)
            )
        })
        .collect();
    let (_dir, receiver, _idem, client) = start(&actions.join("\n")).await;
    let okta = token(&client, "acme", "okta", OKTA_SECRET).await;
    let uris: Vec<String> = events.iter().map(|(s, _)| event_uri(s)).collect();
    let mut body = push_to(&receiver.url("/every"));
    body["events_requested"] = json!(uris);
    let r = call(&client, "POST", "streams", &okta, body).await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let mut delivered: Vec<&str> = r.json()["events_delivered"]
        .as_array()
        .expect("events_delivered")
        .iter()
        .filter_map(Value::as_str)
        .map(|s| uris.iter().find(|u| *u == s).expect("asked for").as_str())
        .collect();
    delivered.sort();
    let mut every: Vec<&str> = uris.iter().map(String::as_str).collect();
    every.sort();
    assert_eq!(delivered, every, "each is delivered");

    let signal = sim_swap_signal(&client, "+15550007878", &unique("every")).await;
    assert_eq!(signal.status, 201, "{}", text(&signal));
    let sent = exactly(&receiver, "/every", events.len()).await;
    let got = by_event_type(&client, &sent, "+15550007878").await;
    for (short, members) in events {
        let uri = event_uri(short);
        let mut event = got
            .get(&uri)
            .cloned()
            .unwrap_or_else(|| panic!("{uri} not sent"));
        let event = event.as_object_mut().expect("an object");
        if short.starts_with("caep/") {
            assert!(
                event.remove("event_timestamp").is_some_and(|t| t.is_u64()),
                "{uri}"
            );
            assert_eq!(
                event.remove("initiating_entity"),
                Some(json!("policy")),
                "{uri}"
            );
        }
        assert_eq!(Value::Object(event.clone()), members_json(members), "{uri}");
    }
}

/// For each CAEP 1.0 and RISC 1.0 event type with a required member, a `set` action without
/// it is refused when the config is read, naming the key.
#[tokio::test]
async fn a_set_action_missing_a_required_member_is_refused_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("idem.toml");
    let mut refused = 0;
    for (short, members) in EVERY_EVENT {
        let all = members_json(members);
        for missing in all.as_object().expect("a table").keys() {
            let rest: Vec<String> = all
                .as_object()
                .expect("a table")
                .iter()
                .filter(|(k, _)| *k != missing)
                .map(|(k, v)| format!("{k} = {v}"))
                .collect();
            let event = format!("{{ {} }}", rest.join(", "));
            let action = format!(
                "  {{ name = \"missing\", set = \"{}\", event = {event} }},",
                event_uri(short)
            );
            std::fs::write(&path, config(dir.path(), &action)).expect("write config");
            let (code, stderr) = check_config(&path);
            assert_ne!(code, 0, "{short} without {missing} accepted");
            let key = format!("actions[0].event.{missing}");
            assert!(stderr.contains(&key), "{short} without {missing}: {stderr}");
            refused += 1;
        }
    }
    assert_eq!(refused, 10, "every required member of every event type");
}
