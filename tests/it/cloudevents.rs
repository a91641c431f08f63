//! CloudEvents in (docs/REFERENCE.md, "Shared Signals and CloudEvents") against a real `idem
//! serve` and a real receiver, on either store: a CAMARA SIM swap notification becomes a `deny`
//! end to end, structured, batched or binary, and the same event (its `source` and `id`) in
//! another mode is a duplicate, while the same `id` from another `source` is another event; a
//! wrong or missing Bearer secret is refused with nothing claimed.

use serde_json::{json, Value};

use crate::support::*;

const API_KEY: &str = "Bearer sk_ce_test_key_00001";
const SECRET: &str = "camara-sink-credential-0123456789";
const SWAPPED: &str = "org.camaraproject.sim-swap-subscriptions.v0.swapped";
const OPERATOR: &str = "https://notifications.telco.example/sim-swap";

fn tenant(receiver: &Receiver) -> String {
    format!(
        r#"
[tenants.telco]
api_key = "sk_ce_test_key_00001"
callback_secret = "{CALLBACK_SECRET}"

[tenants.telco.playbooks.sim_swap]
decision = "deny"
actions = [ {{ name = "lock", url = "{lock}" }} ]

[tenants.telco.sources.camara]
kind = "cloudevents"
secret = "{SECRET}"
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
        "datacontenttype": "application/json", "time": "2026-12-01T10:00:00.000Z",
        "data": {"phoneNumber": phone, "subscriptionId": "qs15-h556-rt89-1298"}
    })
}

async fn post(client: &Client, content_type: &str, body: &str, extra: &[(&str, &str)]) -> Resp {
    let mut req = Req::new(body)
        .without("content-type")
        .header("content-type", content_type)
        .header("authorization", &format!("Bearer {SECRET}"));
    for (name, value) in extra {
        req = req.header(name, value);
    }
    client.send("POST", "/v1/sources/telco/camara", req).await
}

#[tokio::test]
async fn a_sim_swap_is_one_deny_in_every_mode() {
    let (_dir, receiver, _idem, client) = Harness::new()
        .delivery("inline_timeout = \"2s\"\nschedule = [\"200ms\", \"200ms\"]")
        .tenants(tenant)
        .start()
        .await;
    let event = swapped("123655", OPERATOR, "+346661113334");
    let structured = post(
        &client,
        "application/cloudevents+json; charset=utf-8",
        &event.to_string(),
        &[],
    )
    .await;
    assert_eq!(receipt(&structured), (1, 0, 0, 0));
    // The same event in binary mode: its attributes in headers, its data the body.
    let binary = post(
        &client,
        "application/json",
        &event["data"].to_string(),
        &[
            ("ce-specversion", "1.0"),
            ("ce-id", "123655"),
            ("ce-source", OPERATOR),
            ("ce-type", SWAPPED),
        ],
    )
    .await;
    assert_eq!(receipt(&binary), (0, 1, 0, 0));
    // A batch: the same event again, the same id from another source, and an unmapped type.
    let batch = json!([
        event,
        swapped("123655", "https://other.telco.example", "+346661119999"),
        {"id": "x", "source": OPERATOR, "type": "org.camaraproject.other", "specversion": "1.0"},
    ]);
    let batched = post(
        &client,
        "application/cloudevents-batch+json",
        &batch.to_string(),
        &[],
    )
    .await;
    assert_eq!(receipt(&batched), (1, 1, 1, 0));

    let seen = eventually(
        std::time::Duration::from_secs(15),
        || async { receiver.seen_on("/lock") },
        |s| s.len() >= 2,
    )
    .await;
    assert_eq!(seen.len(), 2, "{seen:?}");
    let body: Value = serde_json::from_slice(&seen[0].body).expect("callback JSON");
    assert_eq!(body["data"]["decision"], "deny");
    assert_eq!(body["data"]["metadata"]["event_id"], "123655");
    for callback in &seen {
        assert!(
            !contains(&callback.body, b"+34666111"),
            "a phone number in a callback"
        );
    }
    let found = client
        .send(
            "GET",
            &format!("/v1/decisions?subject={}", enc("+346661113334")),
            Req::new("").header("authorization", API_KEY),
        )
        .await;
    assert_eq!(found.json()["data"].as_array().map(Vec::len), Some(1));

    let status = client
        .send(
            "GET",
            "/v1/sources/telco/camara/status",
            Req::new("").header("authorization", API_KEY),
        )
        .await
        .json();
    assert_eq!(status["kind"], "cloudevents");
    assert_eq!(
        (
            &status["accepted"],
            &status["duplicates"],
            &status["ignored"]
        ),
        (&json!(2), &json!(2), &json!(1)),
        "{status}"
    );
    assert!(status.get("verification").is_none(), "{status}");
}

#[tokio::test]
async fn a_wrong_secret_or_shape_claims_nothing() {
    let (_dir, receiver, _idem, client) = Harness::new().tenants(tenant).start().await;
    let event = swapped("1", OPERATOR, "+34600000001").to_string();
    for (what, authorization) in [
        ("a wrong secret", "Bearer wrong"),
        ("another scheme", &format!("Basic {SECRET}") as &str),
    ] {
        let r = client
            .send(
                "POST",
                "/v1/sources/telco/camara",
                Req::new(&event)
                    .without("content-type")
                    .header("content-type", "application/cloudevents+json")
                    .header("authorization", authorization),
            )
            .await;
        assert_problem(&r, 401, "source-unauthenticated", what);
    }
    // JSON without ce-* headers is not a CloudEvent.
    let r = post(&client, "application/json", &event, &[]).await;
    assert_problem(&r, 400, "invalid-events", "plain JSON");
    // The event after all that is a first one.
    let r = post(&client, "application/cloudevents+json", &event, &[]).await;
    assert_eq!(receipt(&r), (1, 0, 0, 0));
    let seen = eventually(
        std::time::Duration::from_secs(15),
        || async { receiver.seen_on("/lock") },
        |s| !s.is_empty(),
    )
    .await;
    assert_eq!(seen.len(), 1);
}
