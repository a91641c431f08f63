//! Traces (`[telemetry]`), checked against a real OTLP/HTTP collector in the test: a signal
//! sent with a W3C `traceparent` is one trace, from its request span (whose parent is the
//! sender's span) through its claim, playbook and commits to every attempt of its callback,
//! the ones made after a SIGKILL included, each callback naming its own attempt's span in its
//! `traceparent`; a replay names the first trace in `traceresponse` and links its claim to the
//! first one; a source's event is a span of its request (kind, digest, outcome) with its claim
//! under it; a pushed SET names its own attempt too; no span carries the key, the subject or
//! the body; on PostgreSQL a retry made by another node belongs to the trace too; and a
//! collector that is down costs spans, not answers.

use std::time::Duration;

use crate::support::collector::{Collector, Exported};
use crate::support::*;

/// A fresh `traceparent` of a sender: its trace id and span id, and the header.
fn sender_span() -> (String, String, String) {
    let trace = uuid::Uuid::now_v7().simple().to_string();
    // The random part of another UUIDv7 (its first 16 digits are the time).
    let span = uuid::Uuid::now_v7().simple().to_string()[16..].to_string();
    let header = format!("00-{trace}-{span}-01");
    (trace, span, header)
}

/// Beta's keyed `sim_swap` about `subject`, sent under `traceparent`.
fn keyed_beta_signal(subject: &str, key: &str, traceparent: &str) -> Req {
    Req::new(&sim_swap(subject))
        .beta()
        .key(key)
        .header("traceparent", traceparent)
}

/// The one span of `spans` named `name`.
fn one<'a>(spans: &'a [Exported], name: &str) -> &'a Exported {
    let named: Vec<&Exported> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(named.len(), 1, "one {name} span in {spans:#?}");
    named[0]
}

/// The attempt spans of `spans`, by attempt number.
fn attempts(spans: &[Exported]) -> Vec<&Exported> {
    let mut all: Vec<&Exported> = spans.iter().filter(|s| s.name == "attempt").collect();
    all.sort_by_key(|s| s.attr("idem.attempt").parse::<u32>().unwrap_or(0));
    all
}

/// The span id a `traceparent` header names, checked to be of `trace`.
fn span_named(header: &str, trace: &str) -> String {
    let parts: Vec<&str> = header.split('-').collect();
    assert_eq!(parts.len(), 4, "a traceparent: {header:?}");
    assert_eq!(parts[1], trace, "{header:?} is of the signal's trace");
    parts[2].to_string()
}

/// The `trace_id` beta's decision answered by `r` names.
async fn decision_trace(client: &Client, r: &Resp) -> serde_json::Value {
    let path = format!("/v1/decisions/{}", decision_id(r));
    let decision = client.send("GET", &path, Req::new("").beta()).await;
    assert_eq!(decision.status, 200, "{}", text(&decision));
    decision.json()["trace_id"].clone()
}

/// Nothing a tenant sent is in any span: not the key, the subject or a byte of the body.
fn assert_nothing_sent_in(spans: &[Exported], sent: &[&str]) {
    for span in spans {
        for (key, value) in &span.attributes {
            for secret in sent {
                assert!(
                    !value.contains(secret),
                    "{secret:?} in {}'s {key} = {value:?}",
                    span.name
                );
            }
        }
    }
}

#[tokio::test]
async fn a_signals_trace_holds_its_request_claim_and_every_attempt_across_a_crash() {
    let collector = Collector::start().await;
    let section = collector.section();
    let (_dir, receiver, idem, client) = Harness::new()
        .delivery(r#"schedule = ["1s"]"#)
        // The key's actor outlives the request by far: the request's spans end all the same.
        .idempotency(r#"idle_actor_timeout = "1h""#)
        .answer("/notify", status(503))
        .tenants(move |r| test_tenants(r) + &section)
        .start()
        .await;
    let (trace, sender, parent) = sender_span();
    let key = unique("traced");
    let subject = "+15550001234";
    let body = sim_swap(subject);
    let send = |parent: &str| {
        Req::new(&body)
            .beta()
            .key(&key)
            .header("traceparent", parent)
            .header("tracestate", "vendor=opaque")
    };
    let first = client.signal(send(&parent)).await;
    assert_eq!(first.status, 201, "{}", text(&first));
    let named = first
        .header("traceresponse")
        .unwrap_or_default()
        .to_string();
    let claim_span = span_named(&named, &trace);

    // Before the crash: the request, its claim and the callback's failed first attempt.
    let before = collector
        .wait_for_trace(&trace, |s| {
            s.iter().any(|s| s.name == "POST /v1/signals") && !attempts(s).is_empty()
        })
        .await;
    let request = one(&before, "POST /v1/signals");
    assert_eq!(
        request.parent, sender,
        "the sender's span is the request's parent"
    );
    assert_eq!(request.kind, 2, "a server span");
    assert_eq!(request.attr("http.route"), "/v1/signals");
    assert_eq!(request.attr("http.response.status_code"), "201");
    let claim = one(&before, "claim");
    assert_eq!(claim.span_id, claim_span, "traceresponse names the claim");
    assert_eq!(claim.parent, request.span_id);
    assert_eq!(claim.attr("idem.outcome"), "first");
    let playbook = one(&before, "playbook");
    assert_eq!(playbook.parent, claim.span_id);
    assert_eq!(playbook.attr("idem.verdict"), "step_up");
    assert!(
        before
            .iter()
            .any(|s| s.name == "commit" && s.parent == claim.span_id),
        "the claim's commit: {before:#?}"
    );
    let inline = attempts(&before)[0];
    assert_eq!(
        (
            inline.attr("idem.attempt"),
            inline.attr("http.response.status_code")
        ),
        ("1", "503")
    );
    assert_eq!(inline.status, 2, "a failed attempt is an error");
    receiver.wait_for(1).await;

    // SIGKILL while the callback is queued; the next process retries it, now answered 200.
    let config = idem.kill();
    receiver.answer("/notify", 200, Duration::ZERO);
    let idem = Idem::start_with(config, &[]);
    let client = Client::new(&idem.base);
    let callbacks = receiver.wait_for(2).await;
    let after = collector
        .wait_for_trace(&trace, |s| {
            attempts(s)
                .iter()
                .any(|a| a.attr("http.response.status_code") == "200")
        })
        .await;
    let tries = attempts(&after);
    assert_eq!(tries.len(), 2, "{after:#?}");
    for (n, (attempt, callback)) in tries.iter().zip(&callbacks).enumerate() {
        assert_eq!(
            attempt.parent,
            claim.span_id,
            "attempt {} under the claim",
            n + 1
        );
        assert_eq!(attempt.kind, 3, "a client span");
        assert_eq!(attempt.attr("idem.attempt"), (n + 1).to_string());
        assert_eq!(attempt.attr("server.address"), "127.0.0.1");
        assert_eq!(
            span_named(callback.header("traceparent"), &trace),
            attempt.span_id,
            "callback {} names its own attempt",
            n + 1
        );
        assert_eq!(
            callback.header("webhook-id"),
            callbacks[0].header("webhook-id")
        );
    }
    assert_eq!(tries[1].attr("http.response.status_code"), "200");

    // A replay, in a trace of its own: it names the first trace, and its claim links to it.
    let (replay_trace, _, replay_parent) = sender_span();
    let replay = client.signal(send(&replay_parent)).await;
    assert!(replay.replayed());
    assert_eq!(
        replay.body, first.body,
        "the stored bytes, whatever the trace"
    );
    assert_eq!(replay.header("traceresponse"), Some(named.as_str()));
    let replayed = collector
        .wait_for_trace(&replay_trace, |s| s.iter().any(|s| s.name == "claim"))
        .await;
    let again = one(&replayed, "claim");
    assert_eq!(again.attr("idem.outcome"), "replayed");
    assert_eq!(again.links, vec![(trace.clone(), claim.span_id.clone())]);

    assert_eq!(
        decision_trace(&client, &first).await,
        trace.as_str(),
        "the decision's"
    );

    assert_nothing_sent_in(&collector.spans(), &[subject, &key, "2026-11-29T17:54:32Z"]);
}

#[tokio::test]
async fn a_source_event_is_a_span_of_its_request_with_its_kind_digest_and_outcome() {
    let collector = Collector::start().await;
    let section = collector.section();
    let (_dir, receiver, _idem, client) = Harness::new()
        .tenants(move |r| with_okta_hook(&test_tenants(r)) + &section)
        .start()
        .await;
    let (trace, sender, parent) = sender_span();
    let (uuid, who) = (unique("okta-event"), "traced.user@example.com");
    // The provider delivers the event, then delivers it again.
    for _ in 0..2 {
        let delivery = okta_hook_delivery(&uuid, who).header("traceparent", &parent);
        let r = client.send("POST", "/v1/sources/beta/hook", delivery).await;
        assert_eq!(r.status, 200, "{}", text(&r));
    }
    let callback = receiver.wait_for(1).await;
    let spans = collector
        .wait_for_trace(&trace, |s| {
            s.iter().filter(|s| s.name == "source event").count() == 2 && !attempts(s).is_empty()
        })
        .await;
    let named =
        |name: &str| -> Vec<&Exported> { spans.iter().filter(|s| s.name == name).collect() };
    let requests = named("POST /v1/sources/{tenant}/{source}");
    assert_eq!(requests.len(), 2, "{spans:#?}");
    assert!(requests.iter().all(|r| r.parent == sender));
    let mut events = named("source event");
    events.sort_by_key(|e| e.attr("idem.outcome").to_string());
    assert_eq!(
        events
            .iter()
            .map(|e| e.attr("idem.outcome"))
            .collect::<Vec<_>>(),
        ["first", "replayed"]
    );
    for event in &events {
        assert!(requests.iter().any(|r| r.span_id == event.parent));
        assert_eq!(event.attr("idem.source_kind"), "okta");
        assert_eq!(event.attr("idem.source"), "hook");
        let digest = event.attr("idem.event_id_digest");
        assert!(
            digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit()),
            "{digest}"
        );
        assert_eq!(digest, events[0].attr("idem.event_id_digest"), "one event");
    }
    // Each delivery's claim is under its event; the first decided, the second a replay.
    let claims = named("claim");
    let new = claims
        .iter()
        .find(|c| c.attr("idem.outcome") == "first")
        .expect("the event's decision");
    assert_eq!(new.parent, events[0].span_id);
    assert!(claims
        .iter()
        .any(|c| c.attr("idem.outcome") == "replayed" && c.parent == events[1].span_id));
    // Its callback is queued (a source's are) and made by the retry worker, in this trace.
    let attempt = attempts(&spans)[0];
    assert_eq!(attempt.parent, new.span_id);
    assert_eq!(
        span_named(callback[0].header("traceparent"), &trace),
        attempt.span_id
    );
    assert_nothing_sent_in(&collector.spans(), &[who, &uuid]);
}

#[tokio::test]
async fn a_pushed_set_names_its_own_attempt_in_its_traceparent() {
    use crate::transmitter::{push_to, set_delivery, token, OKTA_SECRET, REVOKED};
    let collector = Collector::start().await;
    let (_dir, receiver, _idem, client) =
        crate::transmitter::start_with(&collector.section()).await;
    let okta = token(&client, "acme", "okta", OKTA_SECRET).await;
    receiver.script("/okta", &[status(503), status(202)]);
    let stream = push_to(
        &client,
        &okta,
        &receiver.url("/okta"),
        serde_json::json!([REVOKED]),
    )
    .await;
    let (trace, _, parent) = sender_span();
    let subject = "+15550004321";
    let r = client
        .signal(
            Req::new(&sim_swap(subject))
                .header("authorization", "Bearer sk_transmitter_acme_0001")
                .header("traceparent", &parent),
        )
        .await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let jti = set_delivery(&r);
    let sent = receiver.wait_for(3).await;
    let sets: Vec<&Received> = sent.iter().filter(|s| s.path == "/okta").collect();
    assert_eq!(sets.len(), 2, "a 503, then the retry");
    let spans = collector
        .wait_for_trace(&trace, |s| {
            attempts(s)
                .iter()
                .filter(|a| a.attr("idem.delivery_id") == jti)
                .count()
                == 2
        })
        .await;
    let claim = one(&spans, "claim");
    let tries: Vec<&Exported> = attempts(&spans)
        .into_iter()
        .filter(|a| a.attr("idem.delivery_id") == jti)
        .collect();
    for (attempt, set) in tries.iter().zip(&sets) {
        assert_eq!(attempt.parent, claim.span_id);
        assert_eq!(attempt.attr("idem.stream_id"), stream);
        assert_eq!(
            span_named(set.header("traceparent"), &trace),
            attempt.span_id
        );
    }
    assert_eq!(
        sets[0].body, sets[1].body,
        "the same SET bytes, whatever the trace"
    );
    assert_nothing_sent_in(&collector.spans(), &[subject]);
}

#[tokio::test]
async fn on_postgresql_a_retry_made_by_another_node_belongs_to_the_trace() {
    let collector = Collector::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let receiver = Receiver::start().await;
    receiver.answer("/notify", 503, Duration::ZERO);
    let url = test_database();
    let config = config_on(
        &on_postgres(&url),
        &dir.path().join("data"),
        &receiver,
        "",
        r#"schedule = ["1s"]"#,
    ) + &collector.section();
    let node = |name: &str| {
        let node_dir = dir.path().join(name);
        std::fs::create_dir_all(&node_dir).expect("dir");
        std::fs::write(node_dir.join("idem.toml"), &config).expect("write");
        Idem::start_with(node_dir.join("idem.toml"), &[("OTEL_SERVICE_NAME", name)])
    };
    let a = node("idem-a");
    let (trace, _, parent) = sender_span();
    let first = Client::new(&a.base)
        .signal(keyed_beta_signal(
            "+15550001",
            &unique("pg-traced"),
            &parent,
        ))
        .await;
    assert_eq!(first.status, 201, "{}", text(&first));
    receiver.wait_for(1).await;
    // A span is exported once it ends: the request's ends last, after the answer.
    collector
        .wait_for_trace(&trace, |s| {
            s.iter().any(|s| s.name == "POST /v1/signals") && !attempts(s).is_empty()
        })
        .await;
    // Node a is gone; node b's retry worker finds the callback due in the database.
    a.kill();
    receiver.answer("/notify", 200, Duration::ZERO);
    let _b = node("idem-b");
    let callbacks = receiver.wait_for(2).await;
    let spans = collector
        .wait_for_trace(&trace, |s| attempts(s).len() == 2)
        .await;
    let claim = one(&spans, "claim");
    assert_eq!(claim.service, "idem-a");
    let tries = attempts(&spans);
    assert_eq!(tries.len(), 2, "{spans:#?}");
    assert_eq!(
        (tries[0].service.as_str(), tries[1].service.as_str()),
        ("idem-a", "idem-b")
    );
    for (attempt, callback) in tries.iter().zip(&callbacks) {
        assert_eq!(attempt.parent, claim.span_id);
        assert_eq!(
            span_named(callback.header("traceparent"), &trace),
            attempt.span_id
        );
    }
    assert_eq!(tries[1].attr("http.response.status_code"), "200");
}

#[tokio::test]
async fn a_collector_that_is_down_costs_spans_not_answers() {
    // A port nothing listens on: every export fails at once.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr");
    let section = format!("\n[telemetry]\notlp_endpoint = \"http://{closed}\"\n");
    let (_dir, receiver, _idem, client) = Harness::new()
        .tenants(move |r| test_tenants(r) + &section)
        .start()
        .await;
    let (_, _, parent) = sender_span();
    for n in 0..5 {
        let r = client
            .signal(keyed_beta_signal(
                "+15550002",
                &unique(&format!("down{n}")),
                &parent,
            ))
            .await;
        assert_eq!(r.status, 201, "{}", text(&r));
        assert!(r.header("traceresponse").is_some());
    }
    receiver.wait_for(5).await;
    let failed = eventually(
        Duration::from_secs(10),
        || async {
            let metrics = client.send("GET", "/metrics", Req::new("")).await;
            metric(&text(&metrics), "idem_trace_exports_failed_total")
        },
        |n| *n > 0,
    )
    .await;
    assert!(failed > 0, "failed exports are counted");
}

#[tokio::test]
async fn with_tracing_off_nothing_is_traced_and_no_header_is_added() {
    let (_dir, receiver, _idem, client) = Harness::new().start().await;
    let (_, _, parent) = sender_span();
    let r = client
        .signal(keyed_beta_signal("+15550003", &unique("untraced"), &parent))
        .await;
    assert_eq!(r.status, 201);
    assert_eq!(r.header("traceresponse"), None);
    let callback = receiver.wait_for(1).await;
    assert_eq!(callback[0].header("traceparent"), "");
    assert_eq!(decision_trace(&client, &r).await, serde_json::Value::Null);
}

/// The value of the unlabelled counter `name` in a Prometheus text.
fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}
