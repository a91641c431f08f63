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
use devtools::jose::{self, SigningKey};
use serde_json::{json, Value};

use crate::support::*;

const PUBLIC_URL: &str = "https://idem.example.test";
const OKTA_SECRET: &str = "okta-client-secret-0001";
const ENTRA_SECRET: &str = "entra-client-secret-0001";
const PUSH: &str = "urn:ietf:rfc:8935";
const POLL: &str = "urn:ietf:rfc:8936";
const REVOKED: &str = "https://schemas.openid.net/secevent/caep/event-type/session-revoked";
const COMPROMISE: &str =
    "https://schemas.openid.net/secevent/risc/event-type/credential-compromise";
const PUSH_CREDENTIAL: &str = "Bearer okta-push-credential-4711";

/// `acme`, a transmitter with an RSA and a P-256 key and receivers `okta` and `entra`; `beta`,
/// a transmitter whose tokens last 300 ms, with a receiver also called `okta` with okta's
/// secret; `gamma`, no transmitter. The keys are written to `dir`.
fn tenants(dir: &Path) -> String {
    let (rsa, ec) = (dir.join("acme-rsa.pem"), dir.join("acme-ec.pem"));
    std::fs::write(&rsa, jose::rsa_pem()).expect("write key");
    std::fs::write(&ec, jose::ec_pem()).expect("write key");
    format!(
        r#"
[tenants.acme]
api_key = "sk_transmitter_acme_0001"

[tenants.acme.ssf]
signing_keys = ["{rsa}", "{ec}"]

[tenants.acme.ssf.receivers.okta]
client_secret = "{OKTA_SECRET}"
audience = "https://okta.example.test"

[tenants.acme.ssf.receivers.entra]
client_secret = "{ENTRA_SECRET}"
audience = "https://entra.example.test"

[tenants.beta]
api_key = "sk_transmitter_beta_0001"

[tenants.beta.ssf]
signing_keys = ["{rsa}"]
token_lifetime = "300ms"

[tenants.beta.ssf.receivers.okta]
client_secret = "{OKTA_SECRET}"
audience = "https://okta.example.test"

[tenants.gamma]
api_key = "sk_transmitter_gamma_001"
"#,
        rsa = rsa.display(),
        ec = ec.display(),
    )
}

/// A config on `store` with `public_url` set.
fn config(dir: &Path, store: &str) -> String {
    format!("public_url = \"{PUBLIC_URL}\"\n")
        + &settings(store, &dir.join("data"), "", "")
        + &tenants(dir)
}

async fn start() -> (tempfile::TempDir, Idem, Client) {
    let dir = tempfile::tempdir().expect("tempdir");
    let idem = Idem::start(dir.path(), &config(dir.path(), &store_section()));
    let client = Client::new(&idem.base);
    (dir, idem, client)
}

fn form(body: &str) -> Req {
    Req::new(body)
        .without("content-type")
        .header("content-type", "application/x-www-form-urlencoded")
}

/// A token of `client_id` at `tenant`, by `client_secret_post`.
async fn token(client: &Client, tenant: &str, client_id: &str, secret: &str) -> String {
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
async fn call(client: &Client, method: &str, path: &str, token: &str, body: Value) -> Resp {
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
    let (_dir, _idem, client) = start().await;
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
    let fixture = SigningKey::rsa("fixture").jwk();
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
    let (_dir, _idem, client) = start().await;
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
    let (dir, idem, client) = start().await;
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
        .is_some_and(|e| e.contains(&json!(COMPROMISE))));
    assert_eq!(made["delivery"]["method"], PUSH);
    assert_eq!(
        made["delivery"]["endpoint_url"],
        "https://okta.example.test/ssf/push"
    );
    assert!(made["delivery"].get("authorization_header").is_none());
    assert_eq!(made["description"], "okta's push stream");

    // A poll stream gets its URL from the transmitter.
    let r = call(
        &client,
        "POST",
        "streams",
        &okta,
        json!({"delivery": {"method": POLL},
        "events_requested": [COMPROMISE]}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let poll_id = r.json()["stream_id"].as_str().expect("id").to_string();
    assert_eq!(
        r.json()["delivery"]["endpoint_url"],
        format!("{PUBLIC_URL}/ssf/acme/streams/{poll_id}/poll")
    );

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
    let mut both = vec![id.clone(), poll_id.clone()];
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
            json!({"stream_id": id, "delivery": {"method": POLL}}),
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
        json!({"stream_id": poll_id,
        "delivery": {"method": POLL}, "events_requested": [REVOKED, COMPROMISE]}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", text(&r));
    assert_eq!(r.json()["events_delivered"], json!([REVOKED, COMPROMISE]));
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
    let (_dir, _idem, client) = start().await;
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
        ("POST", "streams", json!({}), 400, "invalid-stream"),
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
            "PUT",
            "streams",
            json!({"stream_id": id}),
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

    // A receiver has at most 64 streams.
    for _ in 1..64 {
        let r = call(
            &client,
            "POST",
            "streams",
            &okta,
            json!({"delivery": {"method": POLL}}),
        )
        .await;
        assert_eq!(r.status, 201, "{}", text(&r));
    }
    let r = call(
        &client,
        "POST",
        "streams",
        &okta,
        json!({"delivery": {"method": POLL}}),
    )
    .await;
    assert_problem(&r, 409, "too-many-streams", "the 65th stream");
    let entra = token(&client, "acme", "entra", ENTRA_SECRET).await;
    let r = call(
        &client,
        "POST",
        "streams",
        &entra,
        json!({"delivery": {"method": POLL}}),
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
    let config = config(dir.path(), &on_postgres(&fresh_database()));
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
                json!([COMPROMISE])
            } else {
                json!([REVOKED, COMPROMISE])
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
        assert_eq!(r.json()["events_requested"], json!([REVOKED, COMPROMISE]));
    }
}
