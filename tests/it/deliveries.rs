//! Durable, signed callbacks: after the inline attempt, each callback's delivery actor retries
//! 5xx/429/timeouts from the durable queue, up to `max_retries`, with the same id and bytes;
//! terminal answers stop at once; queued deliveries survive SIGKILL; the tenant API shows and
//! redelivers them.

use std::time::Duration;

use crate::support::*;

const DELIVERY: &str = "inline_timeout = \"500ms\"\nretry_interval = \"400ms\"\nmax_retries = 3";

fn ids_of(response: &Resp) -> std::collections::HashMap<String, String> {
    response.json()["actions"]
        .as_array()
        .expect("actions")
        .iter()
        .map(|a| {
            (
                a["name"].as_str().unwrap_or("").to_string(),
                a["delivery_id"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// Every attempt of delivery `id` on `path` carries the same bytes and a valid signature; how
/// many there were.
fn same_callback_every_time(receiver: &Receiver, path: &str, id: &str) -> usize {
    let seen: Vec<Received> = receiver
        .seen_on(path)
        .into_iter()
        .filter(|cb| cb.header("webhook-id") == id)
        .collect();
    assert!(!seen.is_empty());
    for cb in &seen {
        assert_eq!(
            cb.body, seen[0].body,
            "byte-identical body on every attempt"
        );
        assert!(
            cb.signed_with(CALLBACK_SECRET),
            "signature valid on every attempt"
        );
    }
    seen.len()
}

#[tokio::test]
async fn retries_follow_each_answer_to_its_end() {
    let (_dir, receiver, _idem, client) = Harness::new().delivery(DELIVERY).start().await;
    receiver.script("/busy", &[status(503), status(503), status(200)]);
    receiver.script("/refused", &[status(400), status(200)]);
    receiver.script("/moved", &[status(302), status(200)]);
    receiver.script("/slow", &[hang(Duration::from_secs(2)), status(200)]);
    let limited = ScriptedAnswer {
        status: 429,
        delay: Duration::ZERO,
        retry_after: Some(2),
        body: None,
    };
    receiver.script("/limited", &[limited, status(200)]);
    let r = client
        .signal(
            Req::new(r#"{"type":"outcomes","subject":"acct-7"}"#)
                .key(&unique("retry"))
                .beta(),
        )
        .await;
    assert_eq!(r.status, 201);
    let ids = ids_of(&r);

    let busy = until_status(&client, &ids["busy"], "delivered").await;
    assert_eq!(busy["attempts"].as_array().map(Vec::len), Some(3));
    assert_eq!(busy["attempts"][0]["status_code"], 503);
    assert_eq!(busy["attempts"][2]["status_code"], 200);
    let slow = until_status(&client, &ids["slow"], "delivered").await;
    assert_eq!(slow["attempts"].as_array().map(Vec::len), Some(2));
    assert!(slow["attempts"][0]["error"]
        .as_str()
        .is_some_and(|e| e.contains("no answer")));
    let limited = until_status(&client, &ids["limited"], "delivered").await;
    assert_eq!(limited["attempts"].as_array().map(Vec::len), Some(2));
    let l = receiver.seen_on("/limited");
    let waited = l[1].at.duration_since(l[0].at);
    assert!(
        waited >= Duration::from_millis(390) && waited < Duration::from_millis(1500),
        "Retry-After: 2 is capped at the schedule's longest step, the 400ms interval: {waited:?}"
    );

    for (path, name) in [("/refused", "refused"), ("/moved", "moved")] {
        let d = delivery(&client, &ids[name]).await;
        assert_eq!(d["status"], "failed", "{name}");
        assert_eq!(d["attempts"].as_array().map(Vec::len), Some(1));
        assert_eq!(same_callback_every_time(&receiver, path, &ids[name]), 1);
    }
    let ok = delivery(&client, &ids["ok"]).await;
    assert_eq!(ok["status"], "delivered");
    assert_eq!(ok["next_attempt_at"], serde_json::Value::Null);

    // Nothing more is attempted once final: wait several intervals and count again.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let counts = [
        ("/ok", "ok", 1),
        ("/busy", "busy", 3),
        ("/refused", "refused", 1),
        ("/moved", "moved", 1),
        ("/slow", "slow", 2),
        ("/limited", "limited", 2),
    ];
    for (path, name, n) in counts {
        assert_eq!(
            same_callback_every_time(&receiver, path, &ids[name]),
            n,
            "{path}"
        );
    }
}

#[tokio::test]
async fn a_delivery_that_always_fails_dies_after_its_retries_and_can_be_redelivered() {
    let (_dir, receiver, _idem, client) = Harness::new().delivery(DELIVERY).start().await;
    receiver.answer("/notify", 500, Duration::ZERO);
    let r = client
        .signal(Req::new(&sim_swap("+1555")).key(&unique("dead")).beta())
        .await;
    assert_eq!(r.status, 201);
    assert_eq!(r.json()["actions"][0]["status"], "queued");
    let id = ids_of(&r)["notify"].clone();

    let dead = until_status(&client, &id, "dead").await;
    assert_eq!(dead["dead_reason"], "attempts_exhausted", "{dead}");
    assert_eq!(
        dead["attempts"].as_array().map(Vec::len),
        Some(4),
        "1 inline + 3 retries"
    );
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(
        same_callback_every_time(&receiver, "/notify", &id),
        4,
        "no attempt after death"
    );

    let page = client
        .send("GET", "/v1/deliveries?status=dead", Req::new("").beta())
        .await;
    assert_eq!(page.status, 200);
    let listed: Vec<String> = page.json()["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|d| d["id"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(listed, std::slice::from_ref(&id));
    let queued = client
        .send("GET", "/v1/deliveries?status=queued", Req::new("").beta())
        .await;
    assert_eq!(queued.json()["data"], serde_json::json!([]));

    // Another tenant cannot see or redeliver it.
    let other = client
        .send(
            "GET",
            &format!("/v1/deliveries/{id}"),
            Req::new("").header("authorization", "Bearer sk_acme_test_key"),
        )
        .await;
    assert_eq!(other.status, 404);
    assert_eq!(other.problem_type(), "urn:idem:problem:not-found");
    let other = client
        .send(
            "POST",
            &format!("/v1/deliveries/{id}/redeliver"),
            Req::new("").header("authorization", "Bearer sk_acme_test_key"),
        )
        .await;
    assert_eq!(other.status, 404);

    receiver.answer("/notify", 200, Duration::ZERO);
    let again = client
        .send(
            "POST",
            &format!("/v1/deliveries/{id}/redeliver"),
            Req::new("").beta(),
        )
        .await;
    assert_eq!(
        again.status,
        202,
        "{}",
        String::from_utf8_lossy(&again.body)
    );
    let delivered = until_status(&client, &id, "delivered").await;
    assert_eq!(delivered["attempts"].as_array().map(Vec::len), Some(5));
    assert_eq!(delivered["dead_reason"], serde_json::Value::Null);
    assert_eq!(same_callback_every_time(&receiver, "/notify", &id), 5);

    let refused = client
        .send(
            "POST",
            &format!("/v1/deliveries/{id}/redeliver"),
            Req::new("").beta(),
        )
        .await;
    assert_eq!(refused.status, 409);
    assert_eq!(refused.problem_type(), "urn:idem:problem:not-redeliverable");
    let bad = client
        .send("GET", "/v1/deliveries?status=lost", Req::new("").beta())
        .await;
    assert_eq!(bad.status, 400);
    assert_eq!(bad.problem_type(), "urn:idem:problem:invalid-query");
    let anon = client.send("GET", "/v1/deliveries", Req::new("")).await;
    assert_eq!(anon.status, 401);
}

#[tokio::test]
async fn deliveries_list_in_pages() {
    let (_dir, _receiver, _idem, client) = Harness::new().delivery(DELIVERY).start().await;
    for _ in 0..5 {
        let r = client.signal(Req::new(&sim_swap("+1555")).beta()).await;
        assert_eq!(r.status, 201);
    }
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..10 {
        let path = match &after {
            Some(a) => format!("/v1/deliveries?status=delivered&limit=2&after={a}"),
            None => "/v1/deliveries?status=delivered&limit=2".to_string(),
        };
        let page = client.send("GET", &path, Req::new("").beta()).await.json();
        for d in page["data"].as_array().expect("data") {
            seen.push(d["id"].as_str().unwrap_or("").to_string());
        }
        match page["next_after"].as_str() {
            Some(next) => after = Some(next.to_string()),
            None => break,
        }
    }
    let mut unique_ids = seen.clone();
    unique_ids.sort();
    unique_ids.dedup();
    assert_eq!(seen.len(), 5);
    assert_eq!(unique_ids.len(), 5);
    let all = client
        .send("GET", "/v1/deliveries", Req::new("").beta())
        .await
        .json();
    assert_eq!(all["data"].as_array().map(Vec::len), Some(5));
}

#[tokio::test]
async fn queued_deliveries_survive_sigkill_and_keep_their_attempt_count() {
    let (_dir, receiver, idem, client) = Harness::new()
        .delivery("inline_timeout = \"500ms\"\nretry_interval = \"1s\"\nmax_retries = 5")
        .answer("/notify", status(503))
        .start()
        .await;
    let key = unique("crash");
    let r = client
        .signal(Req::new(&sim_swap("+1555")).key(&key).beta())
        .await;
    assert_eq!(r.status, 201);
    let keyless = client.signal(Req::new(&sim_swap("+1666")).beta()).await;
    assert_eq!(keyless.status, 201);
    let ids = [
        ids_of(&r)["notify"].clone(),
        ids_of(&keyless)["notify"].clone(),
    ];
    // Let one retry fail and be recorded too, so the count to keep is more than the inline one.
    for id in &ids {
        eventually(
            Duration::from_secs(5),
            || async {
                delivery(&client, id).await["attempts"]
                    .as_array()
                    .map_or(0, Vec::len)
            },
            |attempts| *attempts >= 2,
        )
        .await;
    }
    let before = receiver.seen_on("/notify").len();
    let config = idem.kill();

    receiver.answer("/notify", 200, Duration::ZERO);
    let idem = Idem::start_with(config, &[]);
    let client = Client::new(&idem.base);
    for id in &ids {
        let d = until_status(&client, id, "delivered").await;
        let attempts = d["attempts"].as_array().map(Vec::len).unwrap_or(0);
        assert!(attempts >= 3, "pre-crash attempts are kept: {d}");
        same_callback_every_time(&receiver, "/notify", id);
    }
    assert!(receiver.seen_on("/notify").len() > before);
    let replay = client
        .signal(Req::new(&sim_swap("+1555")).key(&key).beta())
        .await;
    assert!(replay.replayed());
}
