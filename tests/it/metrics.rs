//! `GET /metrics`: the Prometheus text reflects what happened — signals by outcome, decisions,
//! claim transitions, deliveries by status and attempt, queue depth, live actors, flush latency,
//! request latency by route (never by concrete path); and from the start, every series whose
//! labels are known, at zero, with the store's state.

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

/// Before anything happens, every series whose labels are known is there at zero (how signals
/// end, verdicts, claim and breaker moves, attempts, fenced writes, the configured sources'
/// outcomes, the traces' counters), so a rate or an alert reads 0 rather than nothing; the store
/// is `writable`. A source of a new kind, added by a reload, has its series from then on.
#[tokio::test]
async fn known_series_are_exported_at_zero_from_the_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let receiver = Receiver::start().await;
    let path = dir.path().join("idem.toml");
    let original = with_okta_hook(&config(&dir.path().join("data"), &receiver, "", ""));
    std::fs::write(&path, &original).expect("write");
    let idem = Idem::start_with(path.clone(), &[]);
    let client = Client::new(&idem.base);
    let page = text(&client.send("GET", "/metrics", Req::new("")).await);
    let zero = [
        r#"idem_signals_total{outcome="first"}"#,
        r#"idem_signals_total{outcome="key-in-flight"}"#,
        r#"idem_signals_total{outcome="unavailable"}"#,
        r#"idem_decisions_total{decision="deny"}"#,
        r#"idem_claim_transitions_total{state="taken_over"}"#,
        r#"idem_fenced_writes_total{what="claim"}"#,
        r#"idem_delivery_attempts_total{attempt="5+",outcome="dead"}"#,
        r#"idem_endpoint_transitions_total{to="open"}"#,
        r#"idem_actor_failures_total{family="delivery"}"#,
        r#"idem_source_events_total{kind="okta",outcome="first"}"#,
        r#"idem_source_events_total{kind="okta",outcome="failed"}"#,
        r#"idem_source_deliveries_total{kind="okta",outcome="ok"}"#,
        r#"idem_source_deliveries_total{kind="okta",outcome="source-unauthenticated"}"#,
        r#"idem_http_request_duration_seconds_count{method="POST",route="/v1/signals"}"#,
        "idem_trace_spans_dropped_total",
        "idem_trace_exports_failed_total",
        r#"idem_store_state{state="read_only"}"#,
        r#"idem_store_state{state="failing"}"#,
    ];
    for series in zero {
        assert_eq!(
            metric_value(&page, series),
            Some(0.0),
            "{series} in\n{page}"
        );
    }
    assert_eq!(
        metric_value(&page, r#"idem_store_state{state="writable"}"#),
        Some(1.0),
        "{page}"
    );
    assert!(!page.contains(r#"kind="ssf""#), "no ssf source yet: {page}");

    let with_ssf = format!(
        "{original}\n[tenants.beta.sources.sts]\nkind = \"ssf\"\nissuer = \"https://sts.example.test\"\n\
         audience = \"https://idem.example.test\"\njwks = \"http://127.0.0.1:9/jwks\"\n\
         [[tenants.beta.sources.sts.map]]\nevent = \"*\"\ntype = \"sim_swap\"\n"
    );
    std::fs::write(&path, with_ssf).expect("write");
    idem.signal(libc::SIGHUP);
    let series = r#"idem_source_deliveries_total{kind="ssf",outcome="invalid_audience"}"#;
    let page = eventually(
        std::time::Duration::from_secs(5),
        || async { text(&client.send("GET", "/metrics", Req::new("")).await) },
        |page| page.contains(series),
    )
    .await;
    assert_eq!(metric_value(&page, series), Some(0.0), "{page}");
    assert_eq!(
        metric_value(
            &page,
            r#"idem_source_events_total{kind="ssf",outcome="refused"}"#
        ),
        Some(0.0),
        "{page}"
    );
}
