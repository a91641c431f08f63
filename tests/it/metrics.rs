//! `GET /metrics`: the Prometheus text reflects what happened — signals by outcome, decisions,
//! claim transitions, deliveries by status and attempt, queue depth, live actors, flush latency,
//! request latency by route (never by concrete path).

use devtools::metric_value;

use crate::support::*;

#[tokio::test]
async fn metrics_count_what_happened() {
    let (_dir, _receiver, _idem, client) =
        Harness::new().answer("/notify", status(503)).start().await;
    let key = unique("m");
    let body = sim_swap("+1555");
    assert_eq!(
        client.signal(Req::new(&body).key(&key).beta()).await.status,
        201
    );
    assert!(client
        .signal(Req::new(&body).key(&key).beta())
        .await
        .replayed());
    assert_eq!(
        client
            .signal(Req::new(&sim_swap("+1666")).key(&key).beta())
            .await
            .status,
        422
    );
    assert_eq!(client.signal(Req::new(&body).beta()).await.status, 201);
    assert_eq!(client.signal(Req::new(&body)).await.status, 401);
    let _ = client
        .send("GET", "/v1/deliveries/msg_nope", Req::new("").beta())
        .await;

    let r = client.send("GET", "/metrics", Req::new("")).await;
    assert_eq!(r.status, 200);
    assert!(r
        .header("content-type")
        .is_some_and(|c| c.starts_with("text/plain")));
    let text = String::from_utf8(r.body).expect("utf8");
    let expect = [
        (r#"idem_signals_total{outcome="first"}"#, 1.0),
        (r#"idem_signals_total{outcome="replayed"}"#, 1.0),
        (r#"idem_signals_total{outcome="key-reused"}"#, 1.0),
        (r#"idem_signals_total{outcome="keyless"}"#, 1.0),
        (r#"idem_signals_total{outcome="unauthorized"}"#, 1.0),
        // The keyed first and the keyless signal; the replay and the refused payload decide
        // nothing.
        (r#"idem_decisions_total{decision="step_up"}"#, 2.0),
        (r#"idem_claim_transitions_total{state="claimed"}"#, 1.0),
        (r#"idem_claim_transitions_total{state="completed"}"#, 1.0),
        (r#"idem_deliveries{status="queued"}"#, 2.0),
        (
            r#"idem_delivery_attempts_total{attempt="1",outcome="retry"}"#,
            2.0,
        ),
        ("idem_delivery_queue_depth", 2.0),
        (r#"idem_live_actors{family="claim"}"#, 1.0),
    ];
    for (series, want) in expect {
        assert_eq!(
            metric_value(&text, series),
            Some(want),
            "{series} in\n{text}"
        );
    }
    assert!(metric_value(&text, "idem_store_flush_seconds_count").is_some_and(|n| n >= 3.0));
    assert!(metric_value(
        &text,
        r#"idem_http_request_duration_seconds_count{method="POST",route="/v1/signals"}"#
    )
    .is_some_and(|n| n >= 5.0));
    assert!(
        text.contains(r#"route="/v1/deliveries/{id}""#),
        "routes are patterns, not paths"
    );
    assert!(!text.contains("msg_nope"));
}
