//! idem as a Shared Signals transmitter (docs/REFERENCE.md, "Shared Signals out") against a
//! real `idem serve` on either store: its metadata and JWK Set (every key under its RFC 7638
//! thumbprint, read back by the tests' own JOSE), OAuth client credentials for its receivers
//! (tokens refused once altered, expired, for another tenant or another secret), and stream
//! management, each receiver seeing and changing only its own streams, durable across a
//! SIGKILL, with the push credential and removed subjects never held in clear; on two nodes
//! sharing PostgreSQL, a token of one is good at the other and concurrent changes to one stream
//! lose nothing.

use std::path::Path;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use devtools::jose::{self, JwsKey};
use serde_json::{json, Value};

use crate::support::*;

pub(crate) const PUBLIC_URL: &str = "https://idem.example.test";
pub(crate) const OKTA_SECRET: &str = "okta-client-secret-0001";
pub(crate) const ENTRA_SECRET: &str = "entra-client-secret-0001";
const PUSH: &str = "urn:ietf:rfc:8935";
pub(crate) const POLL: &str = "urn:ietf:rfc:8936";
pub(crate) const REVOKED: &str =
    "https://schemas.openid.net/secevent/caep/event-type/session-revoked";
const DISABLED: &str = "https://schemas.openid.net/secevent/risc/event-type/account-disabled";
const PUSH_CREDENTIAL: &str = "Bearer okta-push-credential-4711";
const VERIFICATION: &str = "https://schemas.openid.net/secevent/ssf/event-type/verification";

/// `acme`, a transmitter with an RSA and a P-256 key and receivers `okta` and `entra`, whose
/// `sim_swap` playbook calls `receiver`'s `/lock` and sends a CAEP session-revoked SET naming
/// the subject as a phone number (and whose `offboarding` sends a RISC account-disabled); `beta`, a transmitter whose tokens last a second, with a
/// receiver also called `okta` with okta's secret; `gamma`, no transmitter. The keys are written
/// to `dir`.
fn tenants(dir: &Path, receiver: &Receiver) -> String {
    let (rsa, ec) = (dir.join("acme-rsa.pem"), dir.join("acme-ec.pem"));
    std::fs::write(&rsa, jose::rsa_pem()).expect("write key");
    std::fs::write(&ec, jose::ec_pem()).expect("write key");
    format!(
        r#"
[tenants.acme]
api_key = "sk_transmitter_acme_0001"
callback_secret = "{CALLBACK_SECRET}"

[tenants.acme.playbooks.sim_swap]
decision = "deny"
actions = [
  {{ name = "lock", url = "{lock}" }},
  {{ name = "revoke", set = "{REVOKED}", subject_format = "phone_number" }},
]

[tenants.acme.playbooks.offboarding]
decision = "deny"
actions = [{{ name = "disable", set = "{DISABLED}" }}]

[tenants.acme.ssf]
signing_keys = ["{rsa}", "{ec}"]

[tenants.acme.ssf.receivers.okta]
client_secret = "{OKTA_SECRET}"
audience = "https://okta.example.test"
endpoints = ["http://127.0.0.1", "https://okta.example.test/ssf"]

[tenants.acme.ssf.receivers.entra]
client_secret = "{ENTRA_SECRET}"
audience = "https://entra.example.test"
endpoints = ["http://127.0.0.1"]

[tenants.beta]
api_key = "sk_transmitter_beta_0001"

[tenants.beta.ssf]
signing_keys = ["{rsa}"]
token_lifetime = "1s"

[tenants.beta.ssf.receivers.okta]
client_secret = "{OKTA_SECRET}"
audience = "https://okta.example.test"
endpoints = ["http://127.0.0.1", "https://okta.example.test/ssf"]

[tenants.gamma]
api_key = "sk_transmitter_gamma_001"
"#,
        rsa = rsa.display(),
        ec = ec.display(),
        lock = receiver.url("/lock"),
    )
}

/// Deliveries retried every 300 ms; a paused stream looked at again as often.
const DELIVERY: &str = "inline_timeout = \"2s\"\nschedule = [\"300ms\", \"300ms\", \"300ms\", \"300ms\", \"300ms\", \"300ms\"]\nbreaker_cooldown = \"300ms\"";

/// A config on `store` with `public_url` set, calling `receiver`.
fn config(dir: &Path, store: &str, receiver: &Receiver) -> String {
    format!("public_url = \"{PUBLIC_URL}\"\n") + &config_here(dir, store, receiver)
}

/// [`config`] without `public_url`: the issuer is where idem listens.
fn config_here(dir: &Path, store: &str, receiver: &Receiver) -> String {
    settings(store, &dir.join("data"), "", DELIVERY) + &tenants(dir, receiver)
}

pub(crate) async fn start() -> (tempfile::TempDir, Receiver, Idem, Client) {
    start_with("").await
}

/// [`start`], with `extra` at the end of the config (a `[telemetry]` section).
pub(crate) async fn start_with(extra: &str) -> (tempfile::TempDir, Receiver, Idem, Client) {
    let dir = tempfile::tempdir().expect("tempdir");
    let receiver = Receiver::start().await;
    let config = config(dir.path(), &store_section(), &receiver) + extra;
    let idem = Idem::start(dir.path(), &config);
    let client = Client::new(&idem.base);
    (dir, receiver, idem, client)
}

fn form(body: &str) -> Req {
    Req::new(body)
        .without("content-type")
        .header("content-type", "application/x-www-form-urlencoded")
}

/// A token of `client_id` at `tenant`, by `client_secret_post`.
pub(crate) async fn token(client: &Client, tenant: &str, client_id: &str, secret: &str) -> String {
    let r = client
        .send(
            "POST",
            &format!("/ssf/{tenant}/token"),
            form(&format!(
                "grant_type=client_credentials&client_id={client_id}&client_secret={secret}"
            )),
        )
        .await;
    assert_eq!(r.status, 200, "{}", text(&r));
    assert_eq!(r.header("cache-control"), Some("no-store"));
    let body = r.json();
    assert_eq!(body["token_type"], "Bearer");
    body["access_token"].as_str().expect("token").to_string()
}

/// A call to the stream management API of `acme` with `token`.
pub(crate) async fn call(
    client: &Client,
    method: &str,
    path: &str,
    token: &str,
    body: Value,
) -> Resp {
    let req = Req::new(&body.to_string()).header("authorization", &format!("Bearer {token}"));
    client.send(method, &format!("/ssf/acme/{path}"), req).await
}

fn push_stream() -> Value {
    json!({
        "delivery": {"method": PUSH, "endpoint_url": "https://okta.example.test/ssf/push",
                     "authorization_header": PUSH_CREDENTIAL},
        "events_requested": [REVOKED, "urn:example:not-ours"],
        "description": "okta's push stream",
    })
}

#[tokio::test]
async fn the_metadata_and_jwk_set_name_the_issuer_and_every_key() {
    let (_dir, _receiver, _idem, client) = start().await;
    let r = client
        .send(
            "GET",
            "/.well-known/ssf-configuration/ssf/acme",
            Req::new(""),
        )
        .await;
    assert_eq!(r.status, 200, "{}", text(&r));
    let meta = r.json();
    let issuer = format!("{PUBLIC_URL}/ssf/acme");
    assert_eq!(meta["spec_version"], "1_0");
    assert_eq!(meta["issuer"], issuer);
    assert_eq!(meta["jwks_uri"], format!("{issuer}/jwks"));
    assert_eq!(meta["delivery_methods_supported"], json!([PUSH, POLL]));
    assert_eq!(meta["configuration_endpoint"], format!("{issuer}/streams"));
    for (name, path) in [
        ("status_endpoint", "status"),
        ("add_subject_endpoint", "subjects:add"),
        ("remove_subject_endpoint", "subjects:remove"),
    ] {
        assert_eq!(meta[name], format!("{issuer}/streams/{path}"), "{name}");
    }
    assert_eq!(
        meta["authorization_schemes"],
        json!([{"spec_urn": "urn:ietf:rfc:6749"}])
    );
    assert_eq!(meta["default_subjects"], "ALL");

    let r = client.send("GET", "/ssf/acme/jwks", Req::new("")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/jwk-set+json"));
    let keys = r.json()["keys"].as_array().expect("keys").clone();
    assert_eq!(keys.len(), 2);
    // The signing key first: the fixture RSA key, its modulus as the tests' JOSE reads it.
    let fixture = JwsKey::rsa("fixture").jwk();
    assert_eq!(keys[0]["kty"], "RSA");
    assert_eq!(
        (&keys[0]["n"], &keys[0]["e"]),
        (&fixture["n"], &fixture["e"])
    );
    assert_eq!(keys[0]["alg"], "RS256");
    assert_eq!(keys[1]["kty"], "EC");
    assert_eq!(keys[1]["alg"], "ES256");
    for key in &keys {
        assert_eq!(key["use"], "sig");
        assert_eq!(key["kid"], jose::thumbprint(key), "{key}");
        assert!(key.get("d").is_none(), "no private member: {key}");
    }
    // A tenant with no transmitter has none of it.
    for path in [
        "/.well-known/ssf-configuration/ssf/gamma",
        "/ssf/gamma/jwks",
    ] {
        let r = client.send("GET", path, Req::new("")).await;
        assert_problem(&r, 404, "not-found", path);
    }
}

#[tokio::test]
async fn a_receiver_gets_a_token_by_its_client_credentials_and_nothing_else_does() {
    let (_dir, _receiver, _idem, client) = start().await;
    let basic = |id: &str, secret: &str| {
        form("grant_type=client_credentials").header(
            "authorization",
            &format!("Basic {}", STANDARD.encode(format!("{id}:{secret}"))),
        )
    };
    let r = client
        .send("POST", "/ssf/acme/token", basic("okta", OKTA_SECRET))
        .await;
    assert_eq!(r.status, 200, "{}", text(&r));
    let by_basic = r.json()["access_token"]
        .as_str()
        .expect("token")
        .to_string();
    assert_eq!(r.json()["expires_in"], 3600);
    let by_post = token(&client, "acme", "entra", ENTRA_SECRET).await;
    for t in [&by_basic, &by_post] {
        let r = call(&client, "GET", "streams", t, json!(null)).await;
        assert_eq!(r.status, 200, "{}", text(&r));
        assert_eq!(r.json(), json!([]));
    }

    // RFC 6749 §5.2's refusals.
    let refusals = [
        (basic("okta", "not-okta-secret-000"), 401, "invalid_client"),
        (basic("nobody", OKTA_SECRET), 401, "invalid_client"),
        (
            form(&format!(
                "grant_type=client_credentials&client_id=okta&client_secret={ENTRA_SECRET}"
            )),
            401,
            "invalid_client",
        ),
        (form("grant_type=client_credentials"), 401, "invalid_client"),
        (
            form(&format!(
                "grant_type=password&client_id=okta&client_secret={OKTA_SECRET}"
            )),
            400,
            "unsupported_grant_type",
        ),
        (
            form(&format!("client_id=okta&client_secret={OKTA_SECRET}")),
            400,
            "invalid_request",
        ),
        (
            form(&format!(
                "grant_type=client_credentials&client_secret={OKTA_SECRET}"
            ))
            .header(
                "authorization",
                &format!("Basic {}", STANDARD.encode(format!("okta:{OKTA_SECRET}"))),
            ),
            400,
            "invalid_request",
        ),
        (
            Req::new(&json!({"grant_type": "client_credentials"}).to_string()),
            400,
            "invalid_request",
        ),
    ];
    for (n, (req, status, error)) in refusals.into_iter().enumerate() {
        let r = client.send("POST", "/ssf/acme/token", req).await;
        assert_eq!(
            (r.status, r.json()["error"].as_str()),
            (status, Some(error)),
            "refusal {n}: {}",
            text(&r)
        );
        assert_eq!(r.header("cache-control"), Some("no-store"));
    }
    let r = client
        .send("POST", "/ssf/acme/token", basic("okta", "x"))
        .await;
    assert_eq!(r.header("www-authenticate"), Some("Basic realm=\"idem\""));

    // A token is refused once altered, at another tenant (whose receiver has the same name and
    // secret), and once expired.
    let beta = token(&client, "beta", "okta", OKTA_SECRET).await;
    let mut altered = by_basic.clone();
    altered.insert(
        altered.len() - 3,
        if altered.ends_with('A') { 'B' } else { 'A' },
    );
    for (what, t) in [
        ("altered", altered.as_str()),
        ("another tenant's", beta.as_str()),
        ("no token", ""),
    ] {
        let r = call(&client, "GET", "streams", t, json!(null)).await;
        assert_problem(&r, 401, "unauthorized", what);
    }
    let beta_list = |t: String| {
        let client = client.clone();
        async move {
            let req = Req::new("").header("authorization", &format!("Bearer {t}"));
            client.send("GET", "/ssf/beta/streams", req).await.status
        }
    };
    let fresh = token(&client, "beta", "okta", OKTA_SECRET).await;
    assert_eq!(beta_list(fresh.clone()).await, 200);
    let expired = eventually(
        Duration::from_secs(5),
        || beta_list(fresh.clone()),
        |status| *status != 200,
    )
    .await;
    assert_eq!(expired, 401);
    // No transmitter, no token endpoint.
    let r = client
        .send("POST", "/ssf/gamma/token", basic("okta", OKTA_SECRET))
        .await;
    assert_eq!(r.status, 404);
}

#[tokio::test]
async fn streams_are_managed_by_their_receiver_alone_and_outlive_a_sigkill() {
    let (dir, _receiver, idem, client) = start().await;
    let okta = token(&client, "acme", "okta", OKTA_SECRET).await;
    let entra = token(&client, "acme", "entra", ENTRA_SECRET).await;

    let r = call(&client, "POST", "streams", &okta, push_stream()).await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let made = r.json();
    let id = made["stream_id"].as_str().expect("stream_id").to_string();
    assert!(id.starts_with("st_"), "{id}");
    assert_eq!(made["iss"], format!("{PUBLIC_URL}/ssf/acme"));
    assert_eq!(made["aud"], "https://okta.example.test");
    assert_eq!(
        made["events_requested"],
        json!([REVOKED, "urn:example:not-ours"])
    );
    assert_eq!(made["events_delivered"], json!([REVOKED]));
    assert!(made["events_supported"]
        .as_array()
        .is_some_and(|e| e.contains(&json!(DISABLED))));
    assert_eq!(made["delivery"]["method"], PUSH);
    assert_eq!(
        made["delivery"]["endpoint_url"],
        "https://okta.example.test/ssf/push"
    );
    assert!(made["delivery"].get("authorization_header").is_none());
    assert_eq!(made["description"], "okta's push stream");

    let r = call(
        &client,
        "POST",
        "streams",
        &okta,
        json!({"delivery": {"method": PUSH, "endpoint_url": "http://127.0.0.1:9/second"},
        "events_requested": [DISABLED]}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let second_id = r.json()["stream_id"].as_str().expect("id").to_string();

    let r = call(
        &client,
        "GET",
        &format!("streams?stream_id={id}"),
        &okta,
        json!(null),
    )
    .await;
    assert_eq!((r.status, r.json()), (200, made.clone()));
    let r = call(&client, "GET", "streams", &okta, json!(null)).await;
    let mut listed: Vec<String> = r
        .json()
        .as_array()
        .expect("list")
        .iter()
        .map(|s| s["stream_id"].as_str().expect("id").to_string())
        .collect();
    listed.sort();
    let mut both = vec![id.clone(), second_id.clone()];
    both.sort();
    assert_eq!(listed, both);

    // Another receiver neither sees nor changes okta's streams.
    let r = call(&client, "GET", "streams", &entra, json!(null)).await;
    assert_eq!(r.json(), json!([]));
    for (method, path, body) in [
        ("GET", format!("streams?stream_id={id}"), json!(null)),
        (
            "PATCH",
            "streams".into(),
            json!({"stream_id": id, "description": "entra's now"}),
        ),
        (
            "PUT",
            "streams".into(),
            json!({"stream_id": id, "delivery": {"method": PUSH,
                "endpoint_url": "http://127.0.0.1:9/entra"}}),
        ),
        ("DELETE", format!("streams?stream_id={id}"), json!(null)),
        ("GET", format!("streams/status?stream_id={id}"), json!(null)),
        (
            "POST",
            "streams/status".into(),
            json!({"stream_id": id, "status": "disabled"}),
        ),
        (
            "POST",
            "streams/subjects:remove".into(),
            json!({"stream_id": id, "subject": {"format": "email", "email": "a@example.com"}}),
        ),
    ] {
        let r = call(&client, method, &path, &entra, body).await;
        assert_problem(&r, 404, "not-found", &format!("entra {method} {path}"));
    }

    // PATCH changes what it names; PUT replaces every receiver-supplied property.
    let r = call(
        &client,
        "PATCH",
        "streams",
        &okta,
        json!({"stream_id": id, "description": "renamed", "iss": "https://evil.example"}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", text(&r));
    assert_eq!(r.json()["description"], "renamed");
    assert_eq!(r.json()["iss"], format!("{PUBLIC_URL}/ssf/acme"));
    assert_eq!(r.json()["events_delivered"], json!([REVOKED]));
    let r = call(
        &client,
        "PUT",
        "streams",
        &okta,
        json!({"stream_id": second_id,
        "delivery": {"method": PUSH, "endpoint_url": "http://127.0.0.1:9/replaced"},
        "events_requested": [REVOKED, DISABLED]}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", text(&r));
    assert_eq!(r.json()["events_delivered"], json!([REVOKED, DISABLED]));
    assert!(r.json().get("description").is_none());

    // Status, with its reason.
    let r = call(
        &client,
        "GET",
        &format!("streams/status?stream_id={id}"),
        &okta,
        json!(null),
    )
    .await;
    assert_eq!(r.json(), json!({"stream_id": id, "status": "enabled"}));
    let r = call(
        &client,
        "POST",
        "streams/status",
        &okta,
        json!({"stream_id": id, "status": "paused", "reason": "maintenance"}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", text(&r));
    assert_eq!(
        r.json(),
        json!({"stream_id": id, "status": "paused", "reason": "maintenance"})
    );

    // Subjects: removed, added back, removed again (a second remove changes nothing).
    let subject = json!({"format": "email", "email": "Carol.Swap@Example.com"});
    for (path, status) in [
        ("subjects:remove", 204),
        ("subjects:add", 200),
        ("subjects:remove", 204),
        ("subjects:remove", 204),
    ] {
        let r = call(
            &client,
            "POST",
            &format!("streams/{path}"),
            &okta,
            json!({"stream_id": id, "subject": subject}),
        )
        .await;
        assert_eq!(r.status, status, "{path}: {}", text(&r));
    }

    // Killed with no chance to flush, the streams are as they were answered.
    let config_path = idem.kill();
    let idem = Idem::start_with(config_path.clone(), &[]);
    let client = Client::new(&idem.base);
    let r = call(
        &client,
        "GET",
        &format!("streams/status?stream_id={id}"),
        &okta,
        json!(null),
    )
    .await;
    assert_eq!(
        r.status,
        200,
        "the token outlives the restart: {}",
        text(&r)
    );
    assert_eq!(
        r.json(),
        json!({"stream_id": id, "status": "paused", "reason": "maintenance"})
    );
    let r = call(
        &client,
        "GET",
        &format!("streams?stream_id={id}"),
        &okta,
        json!(null),
    )
    .await;
    assert_eq!(r.json()["description"], "renamed");

    // The push credential and the subject are not held in clear.
    let held = stored(&config_path, &dir.path().join("data"));
    assert!(
        held.iter()
            .all(|(_, bytes)| !contains(bytes, PUSH_CREDENTIAL.as_bytes())),
        "the push credential is stored in clear"
    );
    for form in ["carol.swap@example.com", "Carol.Swap@Example.com"] {
        assert_subject_not_held(&held, form);
    }

    // Deleted, it is gone.
    let r = call(
        &client,
        "DELETE",
        &format!("streams?stream_id={id}"),
        &okta,
        json!(null),
    )
    .await;
    assert_eq!(r.status, 204);
    let r = call(
        &client,
        "GET",
        &format!("streams?stream_id={id}"),
        &okta,
        json!(null),
    )
    .await;
    assert_problem(&r, 404, "not-found", "deleted");
    let r = call(
        &client,
        "DELETE",
        &format!("streams?stream_id={id}"),
        &okta,
        json!(null),
    )
    .await;
    assert_problem(&r, 404, "not-found", "deleted twice");
}

#[tokio::test]
async fn a_bad_stream_request_is_refused_and_changes_nothing() {
    let (_dir, _receiver, _idem, client) = start().await;
    let okta = token(&client, "acme", "okta", OKTA_SECRET).await;
    let r = call(&client, "POST", "streams", &okta, push_stream()).await;
    let id = r.json()["stream_id"].as_str().expect("id").to_string();
    let before = call(
        &client,
        "GET",
        &format!("streams?stream_id={id}"),
        &okta,
        json!(null),
    )
    .await
    .json();
    for (method, path, body, status, slug) in [
        (
            "POST",
            "streams",
            json!({"delivery": {}}),
            400,
            "invalid-stream",
        ),
        (
            "POST",
            "streams",
            json!({"delivery": {"method": "urn:example:pigeon"}}),
            400,
            "invalid-stream",
        ),
        (
            "POST",
            "streams",
            json!({"delivery": {"method": PUSH}}),
            400,
            "invalid-stream",
        ),
        (
            "PATCH",
            "streams",
            json!({"description": "no id"}),
            400,
            "invalid-stream",
        ),
        (
            "PATCH",
            "streams",
            json!({"stream_id": id, "delivery": {"method": PUSH,
            "endpoint_url": "javascript:alert(1)"}}),
            400,
            "invalid-stream",
        ),
        (
            "PATCH",
            "streams",
            json!({"stream_id": id, "events_requested": "all"}),
            400,
            "invalid-stream",
        ),
        (
            "POST",
            "streams",
            json!({"delivery": {"method": "urn:example:carrier-pigeon"}}),
            400,
            "invalid-stream",
        ),
        (
            "PATCH",
            "streams",
            json!({"stream_id": id, "delivery": {"method": PUSH,
            "endpoint_url": "http://10.0.0.1/internal"}}),
            400,
            "invalid-stream",
        ),
        (
            "POST",
            "streams",
            json!({"delivery": {"method": PUSH,
            "endpoint_url": "https://okta.example.test/elsewhere"}}),
            400,
            "invalid-stream",
        ),
        (
            "PUT",
            "streams",
            json!({"stream_id": id, "delivery": {"method": PUSH}}),
            400,
            "invalid-stream",
        ),
        (
            "PATCH",
            "streams",
            json!({"stream_id": "st_none", "description": "x"}),
            404,
            "not-found",
        ),
        (
            "POST",
            "streams/status",
            json!({"stream_id": id, "status": "asleep"}),
            400,
            "invalid-stream",
        ),
        (
            "POST",
            "streams/subjects:remove",
            json!({"stream_id": id, "subject": {}}),
            400,
            "invalid-stream",
        ),
        ("DELETE", "streams", json!(null), 400, "invalid-query"),
    ] {
        let r = call(&client, method, path, &okta, body.clone()).await;
        assert_problem(&r, status, slug, &format!("{method} {path} {body}"));
    }
    let r = client
        .send(
            "PATCH",
            "/ssf/acme/streams",
            Req::new("{not json").header("authorization", &format!("Bearer {okta}")),
        )
        .await;
    assert_problem(&r, 400, "malformed-json", "not JSON");
    let after = call(
        &client,
        "GET",
        &format!("streams?stream_id={id}"),
        &okta,
        json!(null),
    )
    .await
    .json();
    assert_eq!(before, after);

    // A receiver has at most 16 streams.
    for _ in 1..16 {
        let r = call(
            &client,
            "POST",
            "streams",
            &okta,
            json!({"delivery": {"method": PUSH, "endpoint_url": "http://127.0.0.1:9/n"}}),
        )
        .await;
        assert_eq!(r.status, 201, "{}", text(&r));
    }
    let r = call(
        &client,
        "POST",
        "streams",
        &okta,
        json!({"delivery": {"method": PUSH, "endpoint_url": "http://127.0.0.1:9/n"}}),
    )
    .await;
    assert_problem(&r, 409, "too-many-streams", "the 17th stream");
    let entra = token(&client, "acme", "entra", ENTRA_SECRET).await;
    let r = call(
        &client,
        "POST",
        "streams",
        &entra,
        json!({"delivery": {"method": PUSH, "endpoint_url": "http://127.0.0.1:9/n"}}),
    )
    .await;
    assert_eq!(
        r.status,
        201,
        "another receiver's streams are its own: {}",
        text(&r)
    );
}

#[tokio::test]
async fn two_nodes_share_streams_and_tokens_and_concurrent_changes_lose_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let receiver = Receiver::start().await;
    let config = config(dir.path(), &on_postgres(&test_database()), &receiver);
    let nodes: Vec<(Idem, Client)> = (0..2)
        .map(|n| {
            let node_dir = dir.path().join(format!("node{n}"));
            std::fs::create_dir_all(&node_dir).expect("dir");
            let path = node_dir.join("idem.toml");
            std::fs::write(&path, &config).expect("config");
            let idem = Idem::start_with(path, &[]);
            let client = Client::new(&idem.base);
            (idem, client)
        })
        .collect();
    let (a, b) = (&nodes[0].1, &nodes[1].1);
    // A token from one node is good at the other: no session is kept.
    let okta = token(a, "acme", "okta", OKTA_SECRET).await;
    let r = call(b, "POST", "streams", &okta, push_stream()).await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let id = r.json()["stream_id"].as_str().expect("id").to_string();
    let r = call(
        a,
        "GET",
        &format!("streams?stream_id={id}"),
        &okta,
        json!(null),
    )
    .await;
    assert_eq!(r.status, 200, "{}", text(&r));

    // Node a renames the stream while node b changes its events, at once: each reads back
    // its own change, which the other's (made from an older version) must not have undone.
    let read = |client: &Client| {
        let client = client.clone();
        let (okta, id) = (okta.clone(), id.clone());
        async move {
            let r = call(
                &client,
                "GET",
                &format!("streams?stream_id={id}"),
                &okta,
                json!(null),
            )
            .await;
            r.json()
        }
    };
    let rename = async {
        for n in 0..40 {
            let r = call(
                a,
                "PATCH",
                "streams",
                &okta,
                json!({"stream_id": id, "description": format!("a{n}")}),
            )
            .await;
            assert_eq!(r.status, 200, "{}", text(&r));
            assert_eq!(
                read(a).await["description"],
                format!("a{n}"),
                "a's change {n} was undone"
            );
        }
    };
    let events = async {
        for n in 0..40 {
            let events = if n % 2 == 0 {
                json!([DISABLED])
            } else {
                json!([REVOKED, DISABLED])
            };
            let r = call(
                b,
                "PATCH",
                "streams",
                &okta,
                json!({"stream_id": id, "events_requested": events}),
            )
            .await;
            assert_eq!(r.status, 200, "{}", text(&r));
            assert_eq!(
                read(b).await["events_requested"],
                events,
                "b's change {n} was undone"
            );
        }
    };
    tokio::join!(rename, events);
    for client in [a, b] {
        let r = call(
            client,
            "GET",
            &format!("streams?stream_id={id}"),
            &okta,
            json!(null),
        )
        .await;
        assert_eq!(r.json()["description"], "a39");
        assert_eq!(r.json()["events_requested"], json!([REVOKED, DISABLED]));
    }
}

pub(crate) const PHONE: &str = "+15550007777";
pub(crate) const ACME_KEY: &str = "Bearer sk_transmitter_acme_0001";

/// `acme`'s `sim_swap` about `subject` under `key`.
pub(crate) async fn sim_swap_signal(client: &Client, subject: &str, key: &str) -> Resp {
    let req = Req::new(&sim_swap(subject))
        .header("authorization", ACME_KEY)
        .key(key);
    client.signal(req).await
}

/// A push stream of `token`'s receiver to `url`, requesting `events`; its id.
pub(crate) async fn push_to(client: &Client, token: &str, url: &str, events: Value) -> String {
    let body = json!({
        "delivery": {"method": PUSH, "endpoint_url": url,
                     "authorization_header": PUSH_CREDENTIAL},
        "events_requested": events,
    });
    let r = call(client, "POST", "streams", token, body).await;
    assert_eq!(r.status, 201, "{}", text(&r));
    r.json()["stream_id"].as_str().expect("id").to_string()
}

/// The delivery id of the SET a sim swap's response lists second (after its callback).
pub(crate) fn set_delivery(r: &Resp) -> String {
    let id = r.json()["actions"][1]["delivery_id"]
        .as_str()
        .map(str::to_string);
    id.unwrap_or_else(|| panic!("no SET: {}", text(r)))
}

/// `acme`'s delivery `id` once it is no longer queued.
pub(crate) async fn until_ended(client: &Client, id: &str) -> Value {
    let ended = |d: &Value| d["status"] != "queued";
    eventually(Duration::from_secs(10), || acme_delivery(client, id), ended).await
}

/// `acme`'s delivery `id` as the deliveries API shows it.
pub(crate) async fn acme_delivery(client: &Client, id: &str) -> Value {
    let req = Req::new("").header("authorization", ACME_KEY);
    let r = client
        .send("GET", &format!("/v1/deliveries/{id}"), req)
        .await;
    assert_eq!(r.status, 200, "{}", text(&r));
    r.json()
}

/// The SET `received` carried, verified against `acme`'s JWK Set by the tests' own JOSE.
pub(crate) async fn verified(client: &Client, received: &Received) -> (Value, Value) {
    let jwks = client
        .send("GET", "/ssf/acme/jwks", Req::new(""))
        .await
        .json();
    let token = std::str::from_utf8(&received.body).expect("a SET is text");
    jose::verify(token, &jwks).unwrap_or_else(|e| panic!("the SET does not verify: {e}"))
}

#[tokio::test]
async fn a_decision_sends_one_set_to_each_stream_that_asked_for_it_with_the_same_bytes_each_time() {
    let (dir, receiver, idem, client) = start().await;
    let okta = token(&client, "acme", "okta", OKTA_SECRET).await;
    let entra = token(&client, "acme", "entra", ENTRA_SECRET).await;
    receiver.script("/okta", &[status(503), status(202)]);
    let asked = push_to(&client, &okta, &receiver.url("/okta"), json!([REVOKED])).await;
    // Streams that get nothing of it: another event, the subject removed (named as the SET
    // names it), disabled.
    push_to(
        &client,
        &okta,
        &receiver.url("/okta-risc"),
        json!([DISABLED]),
    )
    .await;
    let removed = push_to(&client, &entra, &receiver.url("/entra"), json!([REVOKED])).await;
    let r = call(
        &client,
        "POST",
        "streams/subjects:remove",
        &entra,
        json!({"stream_id": removed,
            "subject": {"format": "phone_number", "phone_number": PHONE}}),
    )
    .await;
    assert_eq!(r.status, 204);
    let disabled = push_to(
        &client,
        &entra,
        &receiver.url("/entra-off"),
        json!([REVOKED]),
    )
    .await;
    let r = call(
        &client,
        "POST",
        "streams/status",
        &entra,
        json!({"stream_id": disabled, "status": "disabled"}),
    )
    .await;
    assert_eq!(r.status, 200);

    let first = sim_swap_signal(&client, PHONE, "swap-1").await;
    assert_eq!(first.status, 201, "{}", text(&first));
    let response = first.json();
    let decision_id = response["decision_id"]
        .as_str()
        .expect("decision")
        .to_string();
    let actions = response["actions"].as_array().expect("actions").clone();
    assert_eq!(actions.len(), 2, "the callback and one SET: {actions:?}");
    assert_eq!(actions[0]["name"], "lock");
    assert!(actions[0].get("stream_id").is_none());
    assert_eq!(actions[1]["name"], "revoke");
    assert_eq!(actions[1]["stream_id"], asked);
    let set_id = actions[1]["delivery_id"].as_str().expect("id").to_string();

    // The first attempt got a 503, the retry a 202: the same bytes both times.
    let sent = exactly(&receiver, "/okta", 2).await;
    assert_eq!(sent[0].body, sent[1].body, "a retry sends the same bytes");
    for received in &sent {
        assert_eq!(received.header("content-type"), "application/secevent+jwt");
        assert_eq!(received.header("accept"), "application/json");
        assert_eq!(received.header("authorization"), PUSH_CREDENTIAL);
        assert_eq!(
            received.header("webhook-signature"),
            "",
            "a SET is not a callback"
        );
    }
    let (header, claims) = verified(&client, &sent[0]).await;
    let jwks = client
        .send("GET", "/ssf/acme/jwks", Req::new(""))
        .await
        .json();
    assert_eq!(header["typ"], "secevent+jwt");
    assert_eq!(header["alg"], "RS256");
    assert_eq!(header["kid"], jwks["keys"][0]["kid"], "the first key signs");
    assert_eq!(claims["iss"], format!("{PUBLIC_URL}/ssf/acme"));
    assert_eq!(claims["aud"], "https://okta.example.test");
    assert_eq!(claims["jti"], set_id);
    assert_eq!(claims["txn"], decision_id);
    assert_eq!(
        claims["sub_id"],
        json!({"format": "phone_number", "phone_number": PHONE})
    );
    let event = &claims["events"][REVOKED];
    assert_eq!(event["initiating_entity"], "policy");
    assert!(event["event_timestamp"].is_u64(), "{claims}");
    assert!(claims["iat"].is_u64());
    let delivery = eventually(
        Duration::from_secs(10),
        || acme_delivery(&client, &set_id),
        |d| d["status"] == "delivered",
    )
    .await;
    assert_eq!(delivery["url"], format!("ssf:{asked}"));
    assert_eq!(delivery["attempts"][0]["status_code"], 503);

    // The decision shows the SET's stream; a retry of the signal sends nothing again.
    let req = Req::new("").header("authorization", ACME_KEY);
    let view = client
        .send("GET", &format!("/v1/decisions/{decision_id}"), req)
        .await
        .json();
    assert_eq!(view["actions"][1]["stream_id"], asked);
    assert_eq!(view["actions"][1]["status"], "delivered");
    let again = sim_swap_signal(&client, PHONE, "swap-1").await;
    assert_replay_of(&again, &first, "the same key");
    exactly(&receiver, "/okta", 2).await;
    for quiet in ["/okta-risc", "/entra"] {
        assert!(receiver.seen_on(quiet).is_empty(), "{quiet} got a SET");
    }
    assert!(
        receiver.seen_on("/entra-off").is_empty(),
        "a disabled stream gets nothing, not even news of its status"
    );

    // The SET names the subject; the store holds neither it nor the SET in clear, and its
    // key is erased now that it was delivered.
    let config_path = idem.kill();
    let held = stored(&config_path, &dir.path().join("data"));
    assert_subject_not_held(&held, PHONE);
    assert!(held
        .iter()
        .all(|(_, bytes)| !contains(bytes, &sent[0].body[..40])));
    assert!(
        !set_key_kept(&config_path, &dir.path().join("data"), &set_id).await,
        "the delivered SET's key is erased"
    );
}

#[tokio::test]
async fn a_set_the_receiver_refuses_fails_with_its_err_kept() {
    let (_dir, receiver, _idem, client) = start().await;
    let okta = token(&client, "acme", "okta", OKTA_SECRET).await;
    receiver.script(
        "/okta",
        &[refuse_set(
            r#"{"err":"invalid_audience","description":"not this receiver"}"#,
        )],
    );
    push_to(&client, &okta, &receiver.url("/okta"), json!([REVOKED])).await;
    let r = sim_swap_signal(&client, "+15550008888", "refused-1").await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let set_id = set_delivery(&r);
    let delivery = until_ended(&client, &set_id).await;
    assert_eq!(delivery["status"], "failed", "a 400 is final: {delivery}");
    assert_eq!(delivery["attempts"][0]["status_code"], 400);
    assert_eq!(
        delivery["attempts"][0]["error"],
        "invalid_audience: not this receiver"
    );
    exactly(&receiver, "/okta", 1).await;
    // Its bytes were erased when it failed: there is nothing to redeliver.
    let req = Req::new("").header("authorization", ACME_KEY);
    let path = format!("/v1/deliveries/{set_id}/redeliver");
    let r = client.send("POST", &path, req).await;
    assert_problem(&r, 409, "not-redeliverable", "a failed SET");
    assert!(text(&r).contains("erased"), "{}", text(&r));
    exactly(&receiver, "/okta", 1).await;
}

#[tokio::test]
async fn a_keyless_decisions_set_is_retried_with_the_same_bytes_until_delivered() {
    let (_dir, receiver, _idem, client) = start().await;
    let okta = token(&client, "acme", "okta", OKTA_SECRET).await;
    receiver.script("/okta", &[status(503), status(202)]);
    push_to(&client, &okta, &receiver.url("/okta"), json!([REVOKED])).await;
    let req = Req::new(&sim_swap("+15550007777")).header("authorization", ACME_KEY);
    let r = client.signal(req).await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let set_id = set_delivery(&r);
    let delivery = until_ended(&client, &set_id).await;
    assert_eq!(delivery["status"], "delivered", "{delivery}");
    let sent = exactly(&receiver, "/okta", 2).await;
    assert_eq!(sent[0].body, sent[1].body, "the retry sends the same bytes");
    let (_, claims) = verified(&client, &sent[1]).await;
    assert_eq!(claims["jti"], set_id);
}

#[tokio::test]
async fn a_set_queued_at_a_sigkill_is_sent_after_the_restart_with_the_same_jti_and_bytes() {
    let (_dir, receiver, idem, client) = start().await;
    let okta = token(&client, "acme", "okta", OKTA_SECRET).await;
    receiver.answer("/okta", 503, Duration::ZERO);
    push_to(&client, &okta, &receiver.url("/okta"), json!([REVOKED])).await;
    let r = sim_swap_signal(&client, "+15550009999", "killed-1").await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let set_id = set_delivery(&r);
    let before = eventually(
        Duration::from_secs(10),
        || async { receiver.seen_on("/okta") },
        |seen| !seen.is_empty(),
    )
    .await;
    let config_path = idem.kill();
    receiver.answer("/okta", 202, Duration::ZERO);
    let idem = Idem::start_with(config_path, &[]);
    let client = Client::new(&idem.base);
    let delivery = eventually(
        Duration::from_secs(15),
        || acme_delivery(&client, &set_id),
        |d| d["status"] == "delivered",
    )
    .await;
    assert_eq!(delivery["status"], "delivered");
    let sent = receiver.seen_on("/okta");
    assert!(sent.len() >= 2, "{sent:?}");
    for received in &sent {
        assert_eq!(
            received.body, before[0].body,
            "every attempt sends the first bytes"
        );
    }
    let (_, claims) = verified(&client, &sent[sent.len() - 1]).await;
    assert_eq!(claims["jti"], set_id);
}

#[tokio::test]
async fn a_paused_stream_holds_its_sets_until_enabled_and_a_disabled_one_sends_none() {
    let (_dir, receiver, _idem, client) = start().await;
    let okta = token(&client, "acme", "okta", OKTA_SECRET).await;
    let held = push_to(&client, &okta, &receiver.url("/held"), json!([REVOKED])).await;
    let set_status = |id: String, status: &'static str| {
        let (client, okta) = (client.clone(), okta.clone());
        async move {
            let body = json!({"stream_id": id, "status": status});
            let r = call(&client, "POST", "streams/status", &okta, body).await;
            assert_eq!(r.status, 200, "{}", text(&r));
        }
    };
    // The pause is answered, not announced: nothing reaches the stream from then on.
    set_status(held.clone(), "paused").await;
    let r = sim_swap_signal(&client, "+15550001212", "paused-1").await;
    assert_eq!(r.status, 201, "{}", text(&r));
    assert_eq!(r.json()["actions"][1]["status"], "queued");
    let set_id = set_delivery(&r);
    // Held a few cooldowns, with no attempt made.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(receiver.seen_on("/held").is_empty(), "while paused");
    let delivery = acme_delivery(&client, &set_id).await;
    assert_eq!(
        (
            delivery["status"].as_str(),
            delivery["attempts_total"].as_u64()
        ),
        (Some("queued"), Some(0))
    );
    set_status(held.clone(), "enabled").await;
    let delivery = eventually(
        Duration::from_secs(10),
        || acme_delivery(&client, &set_id),
        |d| d["status"] == "delivered",
    )
    .await;
    assert_eq!(delivery["attempts_total"], 1);
    // Once enabled, the held SET goes, and only it.
    let told = events(&client, &exactly(&receiver, "/held", 1).await).await;
    assert_eq!(told[0].0, REVOKED, "{told:?}");
    // The same status again changes nothing, and sends nothing.
    set_status(held, "enabled").await;
    exactly(&receiver, "/held", 1).await;

    // A stream disabled while its SET waits for a retry: the SET is not sent again, and the
    // stream is told nothing.
    receiver.script("/off", &[status(503), status(202)]);
    let off = push_to(&client, &okta, &receiver.url("/off"), json!([REVOKED])).await;
    let r = sim_swap_signal(&client, "+15550001313", "disabled-1").await;
    let set_id = r.json()["actions"]
        .as_array()
        .and_then(|a| a.iter().find(|a| a["stream_id"] == off.as_str()))
        .and_then(|a| a["delivery_id"].as_str())
        .expect("a SET to the stream to be disabled")
        .to_string();
    eventually(
        Duration::from_secs(10),
        || async { receiver.seen_on("/off") },
        |s| !s.is_empty(),
    )
    .await;
    let body = json!({"stream_id": off, "status": "disabled", "reason": "offboarded"});
    let r = call(&client, "POST", "streams/status", &okta, body).await;
    assert_eq!(r.status, 200, "{}", text(&r));
    let delivery = until_ended(&client, &set_id).await;
    assert_eq!(delivery["status"], "dropped", "{delivery}");
    let attempts = delivery["attempts"].as_array().expect("attempts");
    assert_eq!(
        attempts[attempts.len() - 1]["error"],
        "the stream is disabled"
    );
    let req = Req::new("").header("authorization", ACME_KEY);
    let listed = client
        .send("GET", "/v1/deliveries?status=dropped", req)
        .await
        .json();
    let ids: Vec<&str> = listed["data"]
        .as_array()
        .expect("a page")
        .iter()
        .filter_map(|d| d["id"].as_str())
        .collect();
    assert_eq!(ids, [set_id.as_str()], "listed as dropped: {listed}");
    let told = events(&client, &exactly(&receiver, "/off", 1).await).await;
    assert_eq!(told[0].0, REVOKED, "the first attempt, before: {told:?}");
}

/// Each received SET's (verified) event type and event.
async fn events(client: &Client, received: &[Received]) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for r in received {
        let (_, claims) = verified(client, r).await;
        let events = claims["events"].as_object().expect("events");
        let (event_type, event) = events.iter().next().expect("an event");
        out.push((event_type.clone(), event.clone()));
    }
    out
}

#[tokio::test]
async fn a_receiver_verifies_its_own_stream_at_most_once_an_interval() {
    let (_dir, receiver, _idem, client) = start().await;
    let okta = token(&client, "acme", "okta", OKTA_SECRET).await;
    let entra = token(&client, "acme", "entra", ENTRA_SECRET).await;
    let id = push_to(&client, &okta, &receiver.url("/verify"), json!([REVOKED])).await;
    let metadata = client
        .send(
            "GET",
            "/.well-known/ssf-configuration/ssf/acme",
            Req::new(""),
        )
        .await
        .json();
    assert_eq!(
        metadata["verification_endpoint"],
        format!("{PUBLIC_URL}/ssf/acme/streams/verify")
    );

    let body = json!({"stream_id": id, "state": "a7f3"});
    let r = call(&client, "POST", "streams/verify", &entra, body.clone()).await;
    assert_problem(&r, 404, "not-found", "another receiver's stream");
    let r = call(
        &client,
        "POST",
        "streams/verify",
        &okta,
        json!({"stream_id": id, "state": 7}),
    )
    .await;
    assert_problem(&r, 400, "invalid-stream", "a state that is not a string");
    let r = call(&client, "POST", "streams/verify", &okta, body.clone()).await;
    assert_eq!(r.status, 204, "{}", text(&r));
    let again = call(&client, "POST", "streams/verify", &okta, body).await;
    assert_problem(&again, 429, "rate-limited", "sooner than the interval");
    let wait: u64 = again
        .header("retry-after")
        .and_then(|w| w.parse().ok())
        .expect("Retry-After");
    assert!((1..=15).contains(&wait), "{wait}");

    let sent = exactly(&receiver, "/verify", 1).await;
    let (header, claims) = verified(&client, &sent[0]).await;
    assert_eq!(header["typ"], "secevent+jwt");
    assert_eq!(claims["iss"], format!("{PUBLIC_URL}/ssf/acme"));
    assert_eq!(claims["aud"], "https://okta.example.test");
    assert_eq!(claims["sub_id"], json!({"format": "opaque", "id": id}));
    assert_eq!(claims["events"][VERIFICATION], json!({"state": "a7f3"}));
    let stream = call(
        &client,
        "GET",
        &format!("streams?stream_id={id}"),
        &okta,
        Value::Null,
    )
    .await;
    assert_eq!(stream.json()["min_verification_interval"], 15);
}

#[tokio::test]
async fn the_reference_receiver_takes_each_set_once_and_refuses_a_forged_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let receiver = Receiver::start().await;
    let idem = Idem::start(
        dir.path(),
        &config_here(dir.path(), &store_section(), &receiver),
    );
    let client = Client::new(&idem.base);
    let issuer = format!("{}/ssf/acme", idem.base);
    let reference = ReceiveProc::start_with(
        "127.0.0.1:0",
        &dir.path().join("receive.seen"),
        &[
            "--ssf-issuer",
            &issuer,
            "--ssf-audience",
            "https://okta.example.test",
        ],
    );
    let okta = token(&client, "acme", "okta", OKTA_SECRET).await;
    // One stream pushes to the reference receiver; another to the test's, which hands what it
    // gets to the reference receiver twice, as a transmitter's retry would.
    push_to(
        &client,
        &okta,
        &format!("{}/ssf", reference.base),
        json!([REVOKED]),
    )
    .await;
    push_to(&client, &okta, &receiver.url("/copy"), json!([REVOKED])).await;
    let r = sim_swap_signal(&client, PHONE, "reference-1").await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let direct = reference.wait_line("new SET ");
    assert!(
        direct.starts_with(&format!("new SET {issuer} msg_")),
        "{direct}"
    );
    assert!(direct.contains(&format!("events={REVOKED}")), "{direct}");
    assert!(direct.contains(PHONE), "{direct}");
    let copied = exactly(&receiver, "/copy", 1).await;
    let send = |body: Vec<u8>| {
        let url = format!("{}/ssf", reference.base);
        async move {
            let response = reqwest::Client::new()
                .post(url)
                .header("content-type", "application/secevent+jwt")
                .body(body)
                .send()
                .await
                .expect("the reference receiver answers");
            let status = response.status().as_u16();
            (status, response.text().await.unwrap_or_default())
        }
    };
    assert_eq!(send(copied[0].body.clone()).await.0, 202);
    let first = reference.wait_line("new SET ");
    assert_ne!(first, direct, "another stream, another jti");
    assert_eq!(send(copied[0].body.clone()).await.0, 202);
    let again = reference.wait_line("duplicate SET ");
    assert!(
        again.contains(first.split(' ').nth(3).expect("the jti")),
        "{again}"
    );
    // The same claims under another signature: refused with RFC 8935's err.
    let mut forged = copied[0].body.clone();
    let last = forged.len() - 2;
    forged[last] = if forged[last] == b'A' { b'B' } else { b'A' };
    let (status, body) = send(forged).await;
    assert_eq!(status, 400, "{body}");
    let err: Value = serde_json::from_str(&body).expect("RFC 8935's error");
    assert_eq!(err["err"], "invalid_key", "{body}");
}
