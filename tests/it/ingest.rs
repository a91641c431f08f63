//! POST /v1/signals end to end: a real `idem serve`, a real receiver, real sled in a temp dir.

use std::time::Duration;

use devtools::metric_value;

use crate::support::*;

const DELIVERY: &str = "inline_timeout = \"1s\"";

#[tokio::test]
async fn first_processing_sends_signed_callbacks_and_a_retry_replays_the_bytes() {
    let (_dir, receiver, _idem, client) = Harness::new().delivery(DELIVERY).start().await;
    let key = unique("evt");
    let body = sim_swap("+447700900123");

    let first = client
        .signal(Req::new(&body).key(&key).acme_signed(&key))
        .await;
    assert_eq!(
        first.status,
        201,
        "{}",
        String::from_utf8_lossy(&first.body)
    );
    assert!(!first.replayed());
    let decision = first.json();
    assert_eq!(decision["type"], "sim_swap");
    assert_eq!(decision["decision"], "deny");
    assert!(decision["decision_id"]
        .as_str()
        .expect("id")
        .starts_with("dec_"));
    let actions = decision["actions"].as_array().expect("actions");
    assert_eq!(actions.len(), 2);
    assert!(actions.iter().all(|a| a["status"] == "delivered"));

    let seen = receiver.wait_for(2).await;
    assert_eq!(seen.len(), 2);
    for cb in &seen {
        assert!(
            cb.signed_with(CALLBACK_SECRET),
            "callback signature must verify"
        );
        assert_eq!(cb.header("content-type"), "application/json");
        assert!(cb.header("user-agent").starts_with("idem/"));
        let env: serde_json::Value = serde_json::from_slice(&cb.body).expect("envelope");
        assert_eq!(env["type"], "decision.deny");
        assert_eq!(env["data"]["decision_id"], decision["decision_id"]);
        assert_eq!(env["data"]["tenant"], "acme");
        assert_eq!(env["data"]["subject_hash"], decision["subject_hash"]);
        assert_eq!(env["data"]["metadata"]["risk"], 97);
        let action = env["data"]["action"].as_str().expect("action");
        let listed = actions
            .iter()
            .find(|a| a["name"] == action)
            .expect("listed action");
        assert_eq!(cb.header("webhook-id"), listed["delivery_id"]);
    }
    let mut paths: Vec<_> = seen.iter().map(|c| c.path.clone()).collect();
    paths.sort();
    assert_eq!(paths, ["/case", "/lock"]);

    let again = client
        .signal(Req::new(&body).key(&key).acme_signed(&key))
        .await;
    assert_eq!(again.status, 201);
    assert!(again.replayed());
    assert_eq!(again.body, first.body, "replay must be byte for byte");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(receiver.seen().len(), 2, "a replay sends no callbacks");
}

#[tokio::test]
async fn thirty_two_concurrent_copies_make_one_decision_and_one_set_of_callbacks() {
    let (_dir, receiver, _idem, client) = Harness::new().delivery(DELIVERY).start().await;
    // Slow callbacks keep the first request in flight while the copies arrive.
    receiver.answer("/notify", 200, Duration::from_millis(400));
    let key = unique("storm");
    let body = sim_swap("+15550001111");
    let copies = (0..32).map(|_| {
        let client = client.clone();
        let (key, body) = (key.clone(), body.clone());
        tokio::spawn(async move { client.signal(Req::new(&body).key(&key).beta()).await })
    });
    let responses: Vec<Resp> = futures::future::join_all(copies)
        .await
        .into_iter()
        .map(|r| r.expect("task"))
        .collect();
    let firsts: Vec<&Resp> = responses
        .iter()
        .filter(|r| r.status == 201 && !r.replayed())
        .collect();
    assert_eq!(firsts.len(), 1, "exactly one first processing");
    let decision_id = firsts[0].json()["decision_id"].clone();
    for r in &responses {
        match r.status {
            201 => assert_eq!(r.json()["decision_id"], decision_id),
            409 => {
                assert_eq!(r.problem_type(), "urn:idem:problem:key-in-flight");
                assert_eq!(r.header("retry-after"), Some("2"));
            }
            other => panic!("unexpected status {other}"),
        }
    }
    assert!(
        responses.iter().any(|r| r.status == 409),
        "copies during the flight get 409"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(receiver.seen().len(), 1, "one callback for the one action");
}

#[tokio::test]
async fn a_reserialised_body_is_a_retry_and_a_changed_body_is_refused() {
    let (_dir, _receiver, _idem, client) = Harness::new().delivery(DELIVERY).start().await;
    let key = unique("reorder");
    let first = client
        .signal(
            Req::new(r#"{"type":"sim_swap","subject":"+1555","metadata":{"a":1,"b":[1,2]}}"#)
                .key(&key)
                .beta(),
        )
        .await;
    assert_eq!(first.status, 201);
    let reordered = client
        .signal(Req::new("{ \"metadata\": {\"b\": [1, 2], \"a\": 1},\n  \"subject\": \"+1555\", \"type\": \"sim_swap\" }").key(&key).beta())
        .await;
    assert_eq!(reordered.status, 201);
    assert!(reordered.replayed());
    assert_eq!(reordered.body, first.body);
    let changed = client
        .signal(
            Req::new(r#"{"type":"sim_swap","subject":"+1556","metadata":{"a":1,"b":[1,2]}}"#)
                .key(&key)
                .beta(),
        )
        .await;
    assert_eq!(changed.status, 422);
    assert_eq!(changed.problem_type(), "urn:idem:problem:key-reused");
    // The quoted structured-field form names the same key.
    let quoted = client
        .signal(
            Req::new(r#"{"type":"sim_swap","subject":"+1555","metadata":{"a":1,"b":[1,2]}}"#)
                .key(&format!("\"{key}\""))
                .beta(),
        )
        .await;
    assert!(quoted.replayed());
    assert_eq!(quoted.body, first.body);
}

#[tokio::test]
async fn keys_are_scoped_to_their_tenant_and_keyless_signals_always_run() {
    let (_dir, receiver, _idem, client) = Harness::new().delivery(DELIVERY).start().await;
    let key = unique("shared");
    let body = sim_swap("+1555");
    let a = client
        .signal(Req::new(&body).key(&key).acme_signed(&key))
        .await;
    let b = client.signal(Req::new(&body).key(&key).beta()).await;
    assert_eq!((a.status, b.status), (201, 201));
    assert!(!a.replayed() && !b.replayed());
    assert_ne!(a.json()["decision_id"], b.json()["decision_id"]);
    assert_ne!(a.json()["subject_hash"], b.json()["subject_hash"]);
    receiver.wait_for(3).await;

    let one = client.signal(Req::new(&body).beta()).await;
    let two = client.signal(Req::new(&body).beta()).await;
    assert_eq!((one.status, two.status), (201, 201));
    assert!(!one.replayed() && !two.replayed());
    assert_ne!(one.json()["decision_id"], two.json()["decision_id"]);
    let seen = receiver.wait_for(5).await;
    assert_eq!(seen.iter().filter(|c| c.path == "/notify").count(), 3);
}

#[tokio::test]
async fn each_action_reports_the_outcome_of_its_inline_attempt() {
    let (_dir, receiver, _idem, client) = Harness::new().delivery(DELIVERY).start().await;
    receiver.answer("/busy", 503, Duration::ZERO);
    receiver.answer("/refused", 400, Duration::ZERO);
    receiver.answer("/moved", 302, Duration::ZERO);
    receiver.answer("/slow", 200, Duration::from_secs(3));
    receiver.answer("/limited", 429, Duration::ZERO);
    let r = client
        .signal(
            Req::new(r#"{"type":"outcomes","subject":"acct-1"}"#)
                .key(&unique("o"))
                .beta(),
        )
        .await;
    assert_eq!(r.status, 201);
    let statuses: Vec<(String, String)> = r.json()["actions"]
        .as_array()
        .expect("actions")
        .iter()
        .map(|a| {
            (
                a["name"].as_str().unwrap_or("").into(),
                a["status"].as_str().unwrap_or("").into(),
            )
        })
        .collect();
    let expect = [
        ("ok", "delivered"),
        ("busy", "queued"),
        ("refused", "failed"),
        ("moved", "failed"),
        ("slow", "queued"),
        ("limited", "queued"),
    ];
    let expect: Vec<(String, String)> = expect
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(statuses, expect);
}

#[tokio::test]
async fn a_playbook_without_actions_still_decides() {
    let (_dir, receiver, _idem, client) = Harness::new().delivery(DELIVERY).start().await;
    let key = unique("port");
    let r = client
        .signal(
            Req::new(r#"{"type":"port_out","subject":"+1555"}"#)
                .key(&key)
                .acme_signed(&key),
        )
        .await;
    assert_eq!(r.status, 201);
    assert_eq!(r.json()["decision"], "review");
    assert_eq!(r.json()["actions"], serde_json::json!([]));
    assert!(receiver.seen().is_empty());
}

#[tokio::test]
async fn an_expired_key_is_free_again() {
    // Decisions (and so their deliveries) kept no longer than the key.
    let (_dir, receiver, _idem, client) = Harness::new()
        .idempotency("key_ttl = \"2s\"")
        .delivery(DELIVERY)
        .decisions("retention = \"2s\"")
        .start()
        .await;
    let key = unique("ttl");
    let body = sim_swap("+1555");
    let first = client.signal(Req::new(&body).key(&key).beta()).await;
    assert_eq!(first.status, 201);
    let replay = client.signal(Req::new(&body).key(&key).beta()).await;
    assert!(replay.replayed());
    tokio::time::sleep(Duration::from_millis(2300)).await;
    // Expired: a new claim, a new decision, new callback ids — even for another payload.
    let other = client
        .signal(Req::new(&sim_swap("+1666")).key(&key).beta())
        .await;
    assert_eq!(other.status, 201);
    assert!(!other.replayed());
    assert_ne!(other.json()["decision_id"], first.json()["decision_id"]);
    let seen = receiver.wait_for(2).await;
    assert_ne!(seen[0].header("webhook-id"), seen[1].header("webhook-id"));

    // The expired claim's delivery is forgotten by the sweeper too, with its decision: the store
    // follows the window.
    let old = first.json()["actions"][0]["delivery_id"]
        .as_str()
        .expect("id")
        .to_string();
    let status = eventually(
        Duration::from_secs(5),
        || async { client.beta_delivery(&old).await.status },
        |s| *s == 404,
    )
    .await;
    assert_eq!(status, 404, "a final delivery past the window is forgotten");
    let fresh = other.json()["actions"][0]["delivery_id"]
        .as_str()
        .expect("id")
        .to_string();
    let kept = client.beta_delivery(&fresh).await;
    assert_eq!(kept.status, 200);
}

#[tokio::test]
async fn an_actor_waiting_on_its_callbacks_is_not_idle() {
    let (_dir, receiver, idem, client) = Harness::new()
        .idempotency("idle_actor_timeout = \"100ms\"")
        .delivery(DELIVERY)
        .start()
        .await;
    // The callback outlasts several idle timeouts: the actor holding the request must not stop.
    receiver.answer("/notify", 200, Duration::from_millis(450));
    let key = unique("busy");
    let body = sim_swap("+1555");
    let first = client.signal(Req::new(&body).key(&key).beta()).await;
    assert_eq!(
        first.status,
        201,
        "{}",
        String::from_utf8_lossy(&first.body)
    );
    assert_eq!(first.json()["actions"][0]["status"], "delivered");
    let replay = client.signal(Req::new(&body).key(&key).beta()).await;
    assert!(replay.replayed());
    assert_eq!(replay.body, first.body);
    assert!(!idem.stderr().contains("ERROR"), "{}", idem.stderr());
}

#[tokio::test]
async fn idle_actors_stop_and_are_rebuilt_from_their_log() {
    // Long enough that the actor is surely still up when the gauge is first read.
    let (_dir, _receiver, idem, client) = Harness::new()
        .idempotency("idle_actor_timeout = \"400ms\"")
        .delivery(DELIVERY)
        .start()
        .await;
    let key = unique("idle");
    let body = sim_swap("+1555");
    let first = client.signal(Req::new(&body).key(&key).beta()).await;
    assert_eq!(first.status, 201);
    let live = || async {
        let text = client.send("GET", "/metrics", Req::new("")).await.body;
        metric_value(
            &String::from_utf8(text).expect("utf8"),
            r#"idem_live_actors{family="claim"}"#,
        )
    };
    assert_eq!(live().await, Some(1.0), "the key's actor is up");
    let stopped = eventually(Duration::from_secs(5), live, |n| *n == Some(0.0)).await;
    assert_eq!(stopped, Some(0.0), "the idle actor stopped");
    let replay = client.signal(Req::new(&body).key(&key).beta()).await;
    assert!(replay.replayed());
    assert_eq!(replay.body, first.body);
    let changed = client
        .signal(Req::new(&sim_swap("+1666")).key(&key).beta())
        .await;
    assert_eq!(changed.status, 422);
    assert!(!idem.stderr().contains("ERROR"), "{}", idem.stderr());
}
