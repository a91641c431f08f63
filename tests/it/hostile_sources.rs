//! What a hostile sender still gets at the sources (docs/REFERENCE.md, "Sources" and "Shared
//! Signals and CloudEvents"), against a real `idem serve`: a delivery that is not CloudEvents
//! 1.0 (an empty `source` or `id`, another `specversion`, a `ce-*` header twice) is refused
//! whole with nothing claimed; and `idem serve` on a database that takes the connection and
//! never answers gives up at `store.connect_timeout`, naming it, with a non-zero exit.

use serde_json::{json, Value};

use crate::support::*;

const API_KEY: &str = "Bearer sk_hostile_test_key_01";
const CE_SECRET: &str = "camara-sink-credential-0123456789";
const SWAPPED: &str = "org.camaraproject.sim-swap-subscriptions.v0.swapped";
const OPERATOR: &str = "https://notifications.telco.example/sim-swap";

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
    for (name, value) in [("ce-id", "e-4"), ("ce-source", "//other"), ("ce-type", SWAPPED)] {
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
        (&status["accepted"], &status["duplicates"], &status["refused"]),
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

/// The resident memory of the process `pid`, in KiB (`VmRSS` of /proc/<pid>/status).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS in {status}"))
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
    let before = rss_kib(idem.pid());
    let (a, b, c, d) = tokio::join!(
        post_ce(&client, batched, &bodies[0], &[]),
        post_ce(&client, batched, &bodies[1], &[]),
        post_ce(&client, batched, &bodies[2], &[]),
        post_ce(&client, batched, &bodies[3], &[]),
    );
    let after = rss_kib(idem.pid());
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
