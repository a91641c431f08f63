//! What a hostile receiver still gets from idem's Shared Signals transmitter, against a real
//! `idem serve` on either store: no more streams than its limit however many creates race, no
//! endless guessing of a client secret, no stream that pushes into idem's own network, and no
//! request body whose meaning hangs on which of two duplicated members wins.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use devtools::jose;
use serde_json::{json, Value};

use crate::support::*;
use crate::transmitter::{
    acme_delivery, call, sim_swap_signal, start, token, ENTRA_SECRET, OKTA_SECRET, POLL, REVOKED,
};

const PUSH: &str = "urn:ietf:rfc:8935";

/// `acme`, a transmitter whose `sim_swap` playbook calls `receiver`'s `/lock` and sends a CAEP
/// session-revoked SET, with the receivers `okta` (no `endpoints`: any https URL outside idem's
/// network) and `entra` (whose `endpoints` name `http://127.0.0.1`), on `store`.
/// `ssf` goes in `[tenants.acme.ssf]`, `entra` in entra's table.
fn own_network_config(
    dir: &Path,
    store: &str,
    receiver: &Receiver,
    (ssf, entra): (&str, &str),
) -> String {
    let key = dir.join("acme-ec.pem");
    std::fs::write(&key, jose::ec_pem()).expect("write key");
    let delivery = "inline_timeout = \"2s\"\nschedule = [\"300ms\"]";
    settings(store, &dir.join("data"), "", delivery)
        + &format!(
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

[tenants.acme.ssf]
signing_keys = ["{key}"]
{ssf}

[tenants.acme.ssf.receivers.okta]
client_secret = "{OKTA_SECRET}"
audience = "https://okta.example.test"

[tenants.acme.ssf.receivers.entra]
client_secret = "{ENTRA_SECRET}"
audience = "https://entra.example.test"
{entra}
"#,
            key = key.display(),
            lock = receiver.url("/lock"),
        )
}

/// A listener on loopback that counts the connections made to it and answers none.
async fn counting_listener() -> (u16, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            drop(socket);
        }
    });
    (port, connections)
}

/// The delivery of the SET a sim swap's response lists for `stream`, once it is no longer
/// queued.
async fn set_to(client: &Client, r: &Resp, stream: &str) -> Value {
    let actions = r.json()["actions"].as_array().cloned().unwrap_or_default();
    let id = actions
        .iter()
        .find(|a| a["stream_id"] == stream)
        .and_then(|a| a["delivery_id"].as_str())
        .unwrap_or_else(|| panic!("no SET to {stream}: {}", text(r)))
        .to_string();
    let ended = |d: &Value| d["status"] != "queued";
    eventually(
        std::time::Duration::from_secs(10),
        || acme_delivery(client, &id),
        ended,
    )
    .await
}

/// The ids of `okta`'s streams, as it lists them.
async fn stream_ids(client: &Client, okta: &str) -> Vec<String> {
    let r = call(client, "GET", "streams", okta, json!(null)).await;
    assert_eq!(r.status, 200, "{}", text(&r));
    let listed = r.json();
    let listed = listed.as_array().expect("a list");
    listed
        .iter()
        .map(|s| s["stream_id"].as_str().expect("id").to_string())
        .collect()
}

#[tokio::test]
async fn thirty_two_racing_creates_leave_sixteen_streams_across_a_restart() {
    let (_dir, _receiver, idem, client) = start().await;
    let okta = token(&client, "acme", "okta", OKTA_SECRET).await;
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(32));
    let creates: Vec<_> = (0..32)
        .map(|_| {
            let (client, okta, start) = (client.clone(), okta.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                call(
                    &client,
                    "POST",
                    "streams",
                    &okta,
                    json!({"delivery": {"method": POLL}, "events_requested": [REVOKED]}),
                )
                .await
            })
        })
        .collect();
    let mut made = Vec::new();
    for create in creates {
        let r = create.await.expect("the create runs");
        if r.status == 201 {
            made.push(r.json()["stream_id"].as_str().expect("id").to_string());
        } else {
            assert_problem(&r, 409, "too-many-streams", "a create past the limit");
        }
    }
    assert_eq!(made.len(), 16, "made: {made:?}");
    let mut listed = stream_ids(&client, &okta).await;
    listed.sort();
    made.sort();
    assert_eq!(listed, made, "exactly the streams answered 201 are there");

    let idem = Idem::start_with(idem.kill(), &[]);
    let client = Client::new(&idem.base);
    assert_eq!(
        stream_ids(&client, &okta).await.len(),
        16,
        "after a SIGKILL"
    );
    let poll = json!({"delivery": {"method": POLL}});
    let r = call(&client, "POST", "streams", &okta, poll).await;
    assert_problem(&r, 409, "too-many-streams", "the 17th after the restart");
}

/// `body`, as it is written, to `acme`'s stream management API with `token`.
async fn raw(client: &Client, method: &str, path: &str, token: &str, body: &str) -> Resp {
    let req = Req::new(body).header("authorization", &format!("Bearer {token}"));
    client.send(method, &format!("/ssf/acme/{path}"), req).await
}

#[tokio::test]
async fn a_member_sent_twice_is_refused_by_every_stream_call_and_changes_nothing() {
    let (_dir, _receiver, _idem, client) = start().await;
    let okta = token(&client, "acme", "okta", OKTA_SECRET).await;
    let poll = json!({"delivery": {"method": POLL}, "events_requested": [REVOKED]});
    let r = call(&client, "POST", "streams", &okta, poll).await;
    assert_eq!(r.status, 201, "{}", text(&r));
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
    let status = call(
        &client,
        "GET",
        &format!("streams/status?stream_id={id}"),
        &okta,
        json!(null),
    )
    .await
    .json();

    let cases = [
        (
            "POST",
            "streams",
            format!(r#"{{"delivery": {{"method": "{POLL}", "method": "urn:ietf:rfc:8935"}}}}"#),
            "delivery.method",
        ),
        (
            "PATCH",
            "streams",
            format!(r#"{{"stream_id": "{id}", "description": "a", "description": "b"}}"#),
            "description",
        ),
        (
            "PUT",
            "streams",
            format!(
                r#"{{"stream_id": "{id}", "stream_id": "st_other", "delivery": {{"method": "{POLL}"}}}}"#
            ),
            "stream_id",
        ),
        (
            "POST",
            "streams/status",
            format!(r#"{{"stream_id": "{id}", "status": "enabled", "status": "disabled"}}"#),
            "status",
        ),
        (
            "POST",
            "streams/subjects:remove",
            format!(
                r#"{{"stream_id": "{id}", "subject": {{"format": "email", "email": "a@example.com", "email": "b@example.com"}}}}"#
            ),
            "subject.email",
        ),
        (
            "POST",
            "streams/subjects:add",
            format!(r#"{{"stream_id": "{id}", "subject": "a", "subject": "b"}}"#),
            "subject",
        ),
        (
            "POST",
            "streams/verify",
            format!(r#"{{"stream_id": "{id}", "state": "a", "state": "b"}}"#),
            "state",
        ),
    ];
    for (method, path, body, member) in cases {
        let r = raw(&client, method, path, &okta, &body).await;
        let what = format!("{method} {path}");
        assert_problem(&r, 400, "invalid-stream", &what);
        let detail = r.json()["detail"].as_str().unwrap_or_default().to_string();
        assert!(
            detail.contains(&format!("{member} is sent twice")),
            "{what}: {detail}"
        );
    }
    let after = call(
        &client,
        "GET",
        &format!("streams?stream_id={id}"),
        &okta,
        json!(null),
    )
    .await
    .json();
    assert_eq!(before, after, "the stream is as it was");
    let now = call(
        &client,
        "GET",
        &format!("streams/status?stream_id={id}"),
        &okta,
        json!(null),
    )
    .await
    .json();
    assert_eq!(status, now, "its status too");
    assert_eq!(stream_ids(&client, &okta).await, vec![id], "no stream made");
    // The same calls, each member once, are taken.
    let r = raw(
        &client,
        "POST",
        "streams/verify",
        &okta,
        &format!(
            r#"{{"stream_id": "{}", "state": "a"}}"#,
            before["stream_id"].as_str().unwrap_or_default()
        ),
    )
    .await;
    assert_eq!(r.status, 204, "{}", text(&r));
}

#[tokio::test]
async fn a_stream_into_idems_own_network_is_refused_unless_the_receivers_endpoints_name_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let receiver = Receiver::start().await;
    let entra = "endpoints = [\"http://127.0.0.1\"]";
    let config = own_network_config(dir.path(), &store_section(), &receiver, ("", entra));
    let idem = Idem::start(dir.path(), &config);
    let client = Client::new(&idem.base);
    let okta = token(&client, "acme", "okta", OKTA_SECRET).await;
    let push = |url: &str| json!({"delivery": {"method": PUSH, "endpoint_url": url}});
    for url in [
        "https://169.254.169.254/latest/meta-data/",
        "https://localhost/ssf",
        "https://idem.localhost/ssf",
        "https://10.0.0.1/ssf",
        "https://172.16.5.4/ssf",
        "https://192.168.0.10/ssf",
        "https://127.0.0.1:8443/ssf",
        "https://127.8.9.10/ssf",
        "https://0.0.0.0/ssf",
        "https://100.64.0.1/ssf",
        "https://[::1]/ssf",
        "https://[fc00::1]/ssf",
        "https://[fd00:ec2::254]/ssf",
        "https://[fe80::1]/ssf",
        "https://[::ffff:169.254.169.254]/ssf",
        "https://[::ffff:7f00:1]/ssf",
        "https://2130706433/ssf",
        "https://0x7f.1/ssf",
    ] {
        let r = call(&client, "POST", "streams", &okta, push(url)).await;
        assert_problem(&r, 400, "invalid-stream", url);
    }
    assert!(stream_ids(&client, &okta).await.is_empty(), "none made");

    // A stream outside may not be moved inside, by an update or a replacement.
    let r = call(
        &client,
        "POST",
        "streams",
        &okta,
        push("https://okta.example.test/ssf"),
    )
    .await;
    assert_eq!(r.status, 201, "{}", text(&r));
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
    for method in ["PATCH", "PUT"] {
        let body = json!({"stream_id": id, "delivery": {"method": PUSH,
                          "endpoint_url": "https://169.254.169.254/"}});
        let r = call(&client, method, "streams", &okta, body).await;
        assert_problem(&r, 400, "invalid-stream", method);
    }
    let after = call(
        &client,
        "GET",
        &format!("streams?stream_id={id}"),
        &okta,
        json!(null),
    )
    .await
    .json();
    assert_eq!(before, after, "unchanged");

    // Named in the receiver's endpoints, loopback is where it may push, and its SET goes.
    let entra = token(&client, "acme", "entra", ENTRA_SECRET).await;
    let r = call(
        &client,
        "POST",
        "streams",
        &entra,
        push(&receiver.url("/entra")),
    )
    .await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let named = r.json()["stream_id"].as_str().expect("id").to_string();
    let events = json!({"stream_id": named, "events_requested": [REVOKED]});
    let r = call(&client, "PATCH", "streams", &entra, events).await;
    assert_eq!(r.status, 200, "{}", text(&r));
    let r = sim_swap_signal(&client, "+15550004242", "named-1").await;
    assert_eq!(set_to(&client, &r, &named).await["status"], "delivered");
}

#[tokio::test]
async fn a_name_that_resolves_into_idems_own_network_is_not_connected_to() {
    // This machine's own name resolves to an address of its own (loopback or private).
    let host = std::process::Command::new("hostname")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .expect("hostname");
    let resolved: Vec<_> = tokio::net::lookup_host((host.as_str(), 0))
        .await
        .expect("the machine's name resolves")
        .collect();
    assert!(
        resolved.iter().all(|a| match a.ip() {
            std::net::IpAddr::V4(v4) => v4.is_loopback() || v4.is_private(),
            std::net::IpAddr::V6(v6) => v6.is_loopback() || (v6.segments()[0] & 0xfe00) == 0xfc00,
        }),
        "{host} resolves to {resolved:?}"
    );
    let (port, connections) = counting_listener().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let receiver = Receiver::start().await;
    let config = own_network_config(dir.path(), &store_section(), &receiver, ("", ""));
    let idem = Idem::start(dir.path(), &config);
    let client = Client::new(&idem.base);
    let okta = token(&client, "acme", "okta", OKTA_SECRET).await;
    // A name is taken when the stream is made: what it resolves to may change.
    let body = json!({"delivery": {"method": PUSH, "endpoint_url": format!("https://{host}:{port}/ssf")},
                      "events_requested": [REVOKED]});
    let r = call(&client, "POST", "streams", &okta, body).await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let id = r.json()["stream_id"].as_str().expect("id").to_string();
    let r = sim_swap_signal(&client, "+15550004343", "resolved-1").await;
    let delivery = set_to(&client, &r, &id).await;
    assert_eq!(delivery["status"], "failed", "{delivery}");
    let error = delivery["attempts"][0]["error"]
        .as_str()
        .unwrap_or_default();
    assert!(
        error.contains("inside idem's own network"),
        "the attempt says why: {delivery}"
    );
    assert_eq!(
        delivery["attempts_total"], 1,
        "refused for good: {delivery}"
    );
    assert_eq!(connections.load(Ordering::SeqCst), 0, "never connected");
}

/// A token request of `client_id` with `secret`, by `client_secret_post`.
async fn ask_token(client: &Client, client_id: &str, secret: &str) -> Resp {
    let body =
        format!("grant_type=client_credentials&client_id={client_id}&client_secret={secret}");
    let req = Req::new(&body)
        .without("content-type")
        .header("content-type", "application/x-www-form-urlencoded");
    client.send("POST", "/ssf/acme/token", req).await
}

fn assert_too_many(r: &Resp, what: &str) {
    assert_eq!(r.status, 429, "{what}: {}", text(r));
    assert_eq!(r.json()["error"], "temporarily_unavailable", "{what}");
    assert_eq!(r.header("cache-control"), Some("no-store"), "{what}");
    let wait: u64 = r
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{what}: no Retry-After"));
    assert!((1..=3600).contains(&wait), "{what}: Retry-After {wait}");
}

#[tokio::test]
async fn failed_token_requests_are_limited_by_client_and_by_address_and_right_ones_are_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    let receiver = Receiver::start().await;
    let limits = "token_failures = { per_client = 3, per_address = 5, every = \"1h\" }";
    let config = own_network_config(dir.path(), &store_section(), &receiver, (limits, ""));
    let idem = Idem::start(dir.path(), &config);
    let client = Client::new(&idem.base);
    // A receiver's own use, however often, and a couple of slips, are never refused.
    for n in 0..30 {
        let r = ask_token(&client, "okta", OKTA_SECRET).await;
        assert_eq!(r.status, 200, "token {n}: {}", text(&r));
    }
    for _ in 0..2 {
        let r = ask_token(&client, "okta", "okta-wrong-secret-00001").await;
        assert_eq!(r.status, 401, "{}", text(&r));
    }
    let r = ask_token(&client, "okta", OKTA_SECRET).await;
    assert_eq!(r.status, 200, "after two slips: {}", text(&r));

    // A third failure empties okta's bucket: from then on okta is refused, even with its
    // secret, until one comes back.
    let r = ask_token(&client, "okta", "okta-wrong-secret-00002").await;
    assert_eq!(r.status, 401, "{}", text(&r));
    let r = ask_token(&client, "okta", "okta-wrong-secret-00003").await;
    assert_too_many(&r, "okta's fourth guess");
    let r = ask_token(&client, "okta", OKTA_SECRET).await;
    assert_too_many(&r, "okta, its bucket empty");
    let r = ask_token(&client, "entra", ENTRA_SECRET).await;
    assert_eq!(r.status, 200, "another client: {}", text(&r));

    // The address has failed three times; two more, naming no client idem has, empty it.
    for _ in 0..2 {
        let r = ask_token(&client, "mallory", "mallory-guess-000000001").await;
        assert_eq!(r.status, 401, "{}", text(&r));
    }
    let r = ask_token(&client, "mallory", "mallory-guess-000000002").await;
    assert_too_many(&r, "the address's sixth failure");
    let r = ask_token(&client, "entra", ENTRA_SECRET).await;
    assert_too_many(&r, "any client from that address");
}

#[tokio::test]
async fn an_address_inside_no_longer_named_by_the_receiver_is_not_sent_to() {
    let (port, connections) = counting_listener().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let receiver = Receiver::start().await;
    let store = store_section();
    let named = "endpoints = [\"http://127.0.0.1\"]";
    let config = own_network_config(dir.path(), &store, &receiver, ("", named));
    let idem = Idem::start(dir.path(), &config);
    let client = Client::new(&idem.base);
    let entra = token(&client, "acme", "entra", ENTRA_SECRET).await;
    let url = format!("http://127.0.0.1:{port}/ssf");
    let body = json!({"delivery": {"method": PUSH, "endpoint_url": url},
                      "events_requested": [REVOKED]});
    let r = call(&client, "POST", "streams", &entra, body).await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let id = r.json()["stream_id"].as_str().expect("id").to_string();

    // The operator takes loopback out of entra's endpoints: its stream stays, and sends nothing.
    let config = own_network_config(dir.path(), &store, &receiver, ("", ""));
    std::fs::write(&idem.config_path, config).expect("write config");
    idem.signal(libc::SIGHUP);
    let probe = json!({"delivery": {"method": PUSH, "endpoint_url": "http://127.0.0.1:9/probe"}});
    let refused = eventually(
        std::time::Duration::from_secs(10),
        || call(&client, "POST", "streams", &entra, probe.clone()),
        |r: &Resp| r.status == 400,
    )
    .await;
    assert_problem(&refused, 400, "invalid-stream", "loopback, no longer named");
    let r = sim_swap_signal(&client, "+15550004444", "unnamed-1").await;
    let delivery = set_to(&client, &r, &id).await;
    assert_eq!(delivery["status"], "failed", "{delivery}");
    let error = delivery["attempts"][0]["error"]
        .as_str()
        .unwrap_or_default();
    assert!(
        error.contains("127.0.0.1 is inside idem's own network"),
        "the attempt says why: {delivery}"
    );
    assert_eq!(connections.load(Ordering::SeqCst), 0, "never connected");
}
