//! What a hostile sender still gets at the sources (docs/REFERENCE.md, "Sources" and "Shared
//! Signals and CloudEvents"), against a real `idem serve`: a delivery that is not CloudEvents
//! 1.0 (an empty `source` or `id`, another `specversion`, a `ce-*` header twice) is refused
//! whole with nothing claimed; and `idem serve` on a database that takes the connection and
//! never answers gives up at `store.connect_timeout`, naming it, with a non-zero exit; a batch
//! of CloudEvents over the cap is refused before it takes memory; a Twilio signature made for
//! another URL does not pass whatever `Host` and `X-Forwarded-*` say; a GitHub delivery naming
//! its event twice is refused; and a caller without credentials gets the same answer from a
//! source that does not exist as from one that does.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use idem_schemas::hash::{hmac_sha1, hmac_sha256, sha256};
use idem_schemas::lower_hex;
use serde_json::{json, Value};

use crate::support::*;

const API_KEY: &str = "Bearer sk_hostile_test_key_01";
const CE_SECRET: &str = "camara-sink-credential-0123456789";
const SWAPPED: &str = "org.camaraproject.sim-swap-subscriptions.v0.swapped";
const OPERATOR: &str = "https://notifications.telco.example/sim-swap";
const TWILIO_TOKEN: &str = "twilio-auth-token-0123";
const GITHUB_SECRET: &str = "github webhook secret 0123";

/// Tenant `telco`: a CloudEvents source mapping CAMARA's SIM swap to a `deny`.
fn telco(receiver: &Receiver) -> String {
    format!(
        r#"
[tenants.telco]
api_key = "sk_hostile_test_key_01"
callback_secret = "{CALLBACK_SECRET}"

[tenants.telco.playbooks.sim_swap]
decision = "deny"
actions = [ {{ name = "lock", url = "{lock}" }} ]

[tenants.telco.sources.camara]
kind = "cloudevents"
secret = "{CE_SECRET}"
[[tenants.telco.sources.camara.map]]
event = "{SWAPPED}"
type = "sim_swap"
subject = "/data/phoneNumber"

[tenants.telco.sources.sms]
kind = "twilio"
secret = "{TWILIO_TOKEN}"
[[tenants.telco.sources.sms.map]]
event = "com.twilio.messaging.*"
type = "sim_swap"
subject = "/data/to"

[tenants.telco.sources.gh]
kind = "github"
secret = "{GITHUB_SECRET}"
[[tenants.telco.sources.gh.map]]
event = "member"
type = "sim_swap"
subject = "/member/login"
"#,
        lock = receiver.url("/lock"),
    )
}

/// A CAMARA SIM swap notification.
fn swapped(id: &str, source: &str, phone: &str) -> Value {
    json!({
        "id": id, "source": source, "type": SWAPPED, "specversion": "1.0",
        "data": {"phoneNumber": phone}
    })
}

async fn post_ce(client: &Client, content_type: &str, body: &str, extra: &[(&str, &str)]) -> Resp {
    let mut req = Req::new(body)
        .without("content-type")
        .header("content-type", content_type)
        .header("authorization", &format!("Bearer {CE_SECRET}"));
    for (name, value) in extra {
        req = req.header(name, value);
    }
    client.send("POST", "/v1/sources/telco/camara", req).await
}

async fn source_status(client: &Client) -> Value {
    client
        .send(
            "GET",
            "/v1/sources/telco/camara/status",
            Req::new("").header("authorization", API_KEY),
        )
        .await
        .json()
}

#[tokio::test]
async fn a_delivery_that_is_not_cloudevents_1_0_is_refused_whole() {
    let (_dir, _receiver, _idem, client) = Harness::new().tenants(telco).start().await;
    let structured = "application/cloudevents+json";
    let batched = "application/cloudevents-batch+json";
    let with = |field: &str, value: Value| {
        let mut event = swapped("e-1", OPERATOR, "+34600000001");
        event[field] = value;
        event
    };
    let bad = [
        ("an empty source", with("source", json!(""))),
        ("an empty id", with("id", json!(""))),
        ("an empty type", with("type", json!(""))),
        ("specversion 0.3", with("specversion", json!("0.3"))),
        ("a numeric specversion", with("specversion", json!(1.0))),
    ];
    for (what, event) in &bad {
        let r = post_ce(&client, structured, &event.to_string(), &[]).await;
        assert_problem(&r, 400, "invalid-events", what);
        // In a batch, one such member refuses the whole batch: its valid member is not taken.
        let batch = json!([swapped("e-2", OPERATOR, "+34600000002"), event]);
        let r = post_ce(&client, batched, &batch.to_string(), &[]).await;
        assert_problem(&r, 400, "invalid-events", &format!("a batch with {what}"));
    }
    // Binary mode: a required attribute's header twice, or empty.
    let data = json!({"phoneNumber": "+34600000003"}).to_string();
    let headers = [
        ("ce-specversion", "1.0"),
        ("ce-id", "e-3"),
        ("ce-source", OPERATOR),
        ("ce-type", SWAPPED),
    ];
    for (name, value) in [
        ("ce-id", "e-4"),
        ("ce-source", "//other"),
        ("ce-type", SWAPPED),
    ] {
        let mut twice = headers.to_vec();
        twice.push((name, value));
        let r = post_ce(&client, "application/json", &data, &twice).await;
        assert_problem(&r, 400, "invalid-events", &format!("{name} twice"));
    }
    let mut empty = headers.to_vec();
    empty[2] = ("ce-source", "");
    let r = post_ce(&client, "application/json", &data, &empty).await;
    assert_problem(&r, 400, "invalid-events", "an empty ce-source");

    // Nothing was claimed: every one of those events is a first one now.
    let status = source_status(&client).await;
    assert_eq!(
        (
            &status["accepted"],
            &status["duplicates"],
            &status["refused"]
        ),
        (&json!(0), &json!(0), &json!(0)),
        "{status}"
    );
    let batch = json!([
        swapped("e-1", OPERATOR, "+34600000001"),
        swapped("e-2", OPERATOR, "+34600000002")
    ]);
    let r = post_ce(&client, batched, &batch.to_string(), &[]).await;
    assert_eq!(receipt(&r), (2, 0, 0, 0));
    let r = post_ce(&client, "application/json", &data, &headers).await;
    assert_eq!(receipt(&r), (1, 0, 0, 0));
}

#[tokio::test]
async fn a_database_that_never_answers_ends_the_start_at_its_deadline() {
    // A "database" that accepts every connection and never says a word.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = silent.local_addr().expect("addr");
    let held = tokio::spawn(async move {
        let mut connections = Vec::new();
        while let Ok((connection, _)) = silent.accept().await {
            connections.push(connection);
        }
    });
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!(
        "[store]\nbackend = \"postgres\"\nurl = \"postgres://postgres@{addr}/idem\"\nconnect_timeout = \"300ms\"\n"
    );
    let receiver = Receiver::start().await;
    let config = settings(&store, &dir.path().join("data"), "", "") + &telco(&receiver);
    let config_path = dir.path().join("idem.toml");
    std::fs::write(&config_path, config).expect("write config");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_idem"))
        .arg("serve")
        .arg("--config")
        .arg(&config_path)
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn idem");
    // Generous: what is asserted is that it exits, not how fast.
    let mut status = None;
    for _ in 0..600 {
        status = child.try_wait().expect("wait");
        if status.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("idem serve still waits on a database that never answers");
    };
    let (mut stderr, mut stdout) = (String::new(), String::new());
    use std::io::Read;
    if let Some(mut pipe) = child.stderr.take() {
        pipe.read_to_string(&mut stderr).expect("stderr");
    }
    if let Some(mut pipe) = child.stdout.take() {
        pipe.read_to_string(&mut stdout).expect("stdout");
    }
    held.abort();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("store.connect_timeout") && stderr.contains("did not connect and answer"),
        "{stderr}"
    );
    assert!(!stdout.contains("listening"), "nothing is served: {stdout}");
}

#[tokio::test]
async fn a_flood_of_cloudevents_batches_is_refused_before_it_takes_memory() {
    let (_dir, _receiver, idem, client) = Harness::new().tenants(telco).start().await;
    let batched = "application/cloudevents-batch+json";
    let cap = ::idem::source::events::MAX_CLOUDEVENTS_BATCH;
    // A batch at the cap is taken: every event of it claimed.
    let at_cap: Vec<Value> = (0..cap)
        .map(|n| swapped(&format!("cap-{n}"), OPERATOR, &format!("+3461{n:07}")))
        .collect();
    let r = post_ce(&client, batched, &Value::from(at_cap).to_string(), &[]).await;
    assert_eq!(receipt(&r), (cap as u64, 0, 0, 0));

    // Four senders at once, each a batch of thousands of mapped events just under 1 MiB.
    let flood = |k: usize| {
        let events: Vec<Value> = (0..6_000)
            .map(|n| {
                json!({"id": format!("{k}-{n}"), "source": "s", "type": SWAPPED,
                    "specversion": "1.0", "data": {"phoneNumber": format!("+3462{n:07}")}})
            })
            .collect();
        let body = Value::from(events).to_string();
        assert!(body.len() < 1024 * 1024, "{} bytes", body.len());
        body
    };
    let bodies: Vec<String> = (0..4).map(flood).collect();
    let before = idem.memory().0;
    let (a, b, c, d) = tokio::join!(
        post_ce(&client, batched, &bodies[0], &[]),
        post_ce(&client, batched, &bodies[1], &[]),
        post_ce(&client, batched, &bodies[2], &[]),
        post_ce(&client, batched, &bodies[3], &[]),
    );
    let after = idem.memory().0;
    // A refused batch holds its body (under 1 MiB) while it is counted, nothing more: four at
    // once are a few MiB. The bound leaves room for the allocator's and the runtime's own
    // buffers, and is far below what 24,000 claims and decisions would take.
    let grown = after.saturating_sub(before);
    assert!(
        grown < 32 * 1024,
        "idem grew by {grown} KiB ({before} -> {after} KiB) under four flood batches"
    );
    for r in [a, b, c, d] {
        assert_problem(&r, 413, "payload-too-large", "a batch over the cap");
    }
    let status = source_status(&client).await;
    assert_eq!(status["accepted"], json!(cap), "{status}");
}

/// A Twilio Event Streams delivery to the sink `path` of `base`, signed over that URL.
fn twilio_signed_for(base: &str, id: &str) -> (String, Req) {
    let body = json!([{"specversion": "1.0", "type": "com.twilio.messaging.message.delivered",
        "source": "/2010-04-01/Accounts/AC1/Messages/SM1.json", "id": id,
        "data": {"to": "+15550001111"}}])
    .to_string();
    let path = format!(
        "/v1/sources/telco/sms?bodySHA256={}",
        lower_hex(&sha256(body.as_bytes()))
    );
    let url = format!("{base}{path}");
    let signature = STANDARD.encode(hmac_sha1(TWILIO_TOKEN.as_bytes(), &[url.as_bytes()]));
    (
        path,
        Req::new(&body).header("x-twilio-signature", &signature),
    )
}

#[tokio::test]
async fn a_twilio_signature_for_another_url_does_not_pass_whatever_the_host_headers_say() {
    let (_dir, _receiver, idem, client) = Harness::new().tenants(telco).start().await;
    // Signed for another deployment's URL, the request naming that host as a proxy would.
    let (path, req) = twilio_signed_for("https://other.example", "EZ-1");
    let req = req
        .header("x-forwarded-host", "other.example")
        .header("x-forwarded-proto", "https");
    let r = client.send("POST", &path, req).await;
    assert_problem(&r, 401, "source-unauthenticated", "signed for another URL");
    let (path, req) = twilio_signed_for("http://other.example", "EZ-1");
    let r = client
        .send("POST", &path, req.header("host", "other.example"))
        .await;
    assert_problem(
        &r,
        401,
        "source-unauthenticated",
        "Host set to the signed one",
    );
    // Signed for idem's own URL (no public_url: the loopback address it listens on): taken.
    let (path, req) = twilio_signed_for(&idem.base, "EZ-1");
    let r = client.send("POST", &path, req).await;
    assert_eq!(receipt(&r), (1, 0, 0, 0));
}

#[tokio::test]
async fn a_github_delivery_naming_its_event_twice_is_refused() {
    let (_dir, _receiver, _idem, client) = Harness::new().tenants(telco).start().await;
    let body = json!({"action": "added", "member": {"login": "mallory"}}).to_string();
    let sig = format!(
        "sha256={}",
        lower_hex(&hmac_sha256(GITHUB_SECRET.as_bytes(), &[body.as_bytes()]))
    );
    let signed = || {
        Req::new(&body)
            .header("x-hub-signature-256", &sig)
            .header("x-github-delivery", "d-1")
    };
    for (first, second) in [("member", "push"), ("push", "member"), ("member", "member")] {
        let req = signed()
            .header("x-github-event", first)
            .header("x-github-event", second);
        let r = client.send("POST", "/v1/sources/telco/gh", req).await;
        assert_problem(
            &r,
            400,
            "repeated-header",
            &format!("{first}, then {second}"),
        );
    }
    let r = client
        .send(
            "POST",
            "/v1/sources/telco/gh",
            signed().header("x-github-event", "member"),
        )
        .await;
    assert_eq!(receipt(&r), (1, 0, 0, 0), "nothing was claimed before");
}

#[tokio::test]
async fn without_credentials_no_source_and_a_source_answer_alike() {
    let (_dir, _receiver, _idem, client) = Harness::new().tenants(telco).start().await;
    let paths = [
        "/v1/sources/telco/camara",
        "/v1/sources/telco/gh",
        "/v1/sources/telco/sms",
        "/v1/sources/telco/nothing",
        "/v1/sources/nobody/camara",
    ];
    let event = swapped("e-1", OPERATOR, "+34600000001").to_string();
    type Attempt<'e> = (&'static str, Box<dyn Fn() -> Req + 'e>);
    let attempts: [Attempt; 4] = [
        ("no credentials", Box::new(|| Req::new(&event))),
        (
            "a wrong Bearer",
            Box::new(|| Req::new(&event).header("authorization", "Bearer guess-0123456789")),
        ),
        (
            "a wrong signature",
            Box::new(|| {
                Req::new(&event)
                    .header("x-hub-signature-256", "sha256=00ff")
                    .header("x-twilio-signature", "AAAA")
            }),
        ),
        (
            "a SET pushed",
            Box::new(|| {
                Req::new("eyJhbGciOiJSUzI1NiJ9.e30.c2ln")
                    .without("content-type")
                    .header("content-type", "application/secevent+jwt")
            }),
        ),
    ];
    for (what, req) in &attempts {
        let mut answers = Vec::new();
        for path in paths {
            let r = client.send("POST", path, req()).await;
            answers.push((
                path,
                r.status,
                r.header("content-type").map(str::to_owned),
                r.body,
            ));
        }
        let (_, status, content_type, body) = &answers[0];
        assert!(*status == 401 || *status == 400, "{what}: {status}");
        for (path, s, c, b) in &answers {
            assert_eq!(
                (s, c, b),
                (status, content_type, body),
                "{what}: {path} answers {}, {} {}",
                String::from_utf8_lossy(b),
                paths[0],
                String::from_utf8_lossy(body)
            );
        }
    }
    // Okta's verification GET: a source of another kind, and none, alike.
    let get = |path: &'static str| {
        let client = client.clone();
        async move {
            let r = client
                .send(
                    "GET",
                    path,
                    Req::new("").header("x-okta-verification-challenge", "v"),
                )
                .await;
            (r.status, r.body)
        }
    };
    assert_eq!(
        get("/v1/sources/telco/camara").await,
        get("/v1/sources/telco/nothing").await
    );
}

/// The sum of every `idem_refusals_total` series of `surface` in a `/metrics` text.
fn refusals_of(metrics: &str, surface: &str) -> f64 {
    let label = format!("surface=\"{surface}\"");
    metrics
        .lines()
        .filter(|l| l.starts_with("idem_refusals_total{") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn a_flood_of_refusals_is_counted_whole_and_logged_at_a_bounded_rate() {
    // Besides telco's sources, an SSF transmitter whose SETs are checked by its keys alone.
    let keys = tempfile::tempdir().expect("tempdir");
    let jwks = keys.path().join("jwks.json");
    let key = devtools::jose::JwsKey::rsa("k1");
    std::fs::write(&jwks, devtools::jose::jwk_set(&[&key]).to_string()).expect("write jwks");
    let jwks = jwks.display().to_string();
    let (_dir, _receiver, idem, client) = Harness::new()
        .tenants(move |receiver| {
            telco(receiver)
                + &format!(
                    r#"
[tenants.telco.sources.sts]
kind = "ssf"
issuer = "https://sts.example.com"
audience = "https://idem.example.com/telco"
jwks = "{jwks}"
[[tenants.telco.sources.sts.map]]
event = "https://schemas.openid.net/secevent/risc/event-type/credential-compromise"
type = "sim_swap"
"#
                )
        })
        .start()
        .await;
    let metrics = client.send("GET", "/metrics", Req::new("")).await;
    let metrics = String::from_utf8_lossy(&metrics.body).to_string();
    assert_eq!(
        refusals_of(&metrics, "sources"),
        0.0,
        "at zero from the start"
    );
    assert!(
        metrics.contains(r#"idem_refusals_total{reason="unknown-source",surface="sources"} 0"#),
        "{metrics}"
    );
    let logged_before = idem.stderr().lines().count();

    // 2,000 garbage POSTs: to no source, without credentials, with a wrong one, a SET that is
    // not one.
    let garbage = |n: usize| {
        let client = client.clone();
        async move {
            let (path, req) = match n % 4 {
                0 => (format!("/v1/sources/nobody/s{n}"), Req::new("garbage")),
                1 => ("/v1/sources/telco/camara".to_string(), Req::new("garbage")),
                2 => (
                    "/v1/sources/telco/gh".to_string(),
                    Req::new("garbage").header("x-hub-signature-256", "sha256=00"),
                ),
                _ => (
                    "/v1/sources/telco/sts".to_string(),
                    Req::new("garbage")
                        .without("content-type")
                        .header("content-type", "application/secevent+jwt"),
                ),
            };
            client.send("POST", &path, req).await.status
        }
    };
    for chunk in (0..2_000).collect::<Vec<_>>().chunks(50) {
        let statuses = futures::future::join_all(chunk.iter().map(|n| garbage(*n))).await;
        assert!(
            statuses.iter().all(|s| *s == 401 || *s == 400),
            "{statuses:?}"
        );
    }

    let metrics = client.send("GET", "/metrics", Req::new("")).await;
    let metrics = String::from_utf8_lossy(&metrics.body).to_string();
    let counted = refusals_of(&metrics, "sources") + refusals_of(&metrics, "ssf");
    assert_eq!(counted, 2_000.0, "every refusal is counted");
    assert_eq!(refusals_of(&metrics, "ssf"), 500.0);
    let log = idem.stderr();
    let refusal_lines: Vec<&str> = log
        .lines()
        .skip(logged_before)
        .filter(|l| l.contains("refused"))
        .collect();
    // At most so many a window on each of the two surfaces.
    let bound = 2 * ::idem::http::refusals::LINES_PER_INTERVAL as usize;
    assert!(
        !refusal_lines.is_empty() && refusal_lines.len() <= bound,
        "{} refusal lines for 2,000 refusals (at most {bound}): {}",
        refusal_lines.len(),
        refusal_lines
            .iter()
            .take(30)
            .copied()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
