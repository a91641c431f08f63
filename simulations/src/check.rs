//! The checker: after the run has settled, it verifies the invariants from what the clients
//! received, what the receiver saw, and what idem's delivery API reports — never from idem's
//! word alone that all went well.
//!
//! 1. Every keyed signal was answered 201, with one decision per key (identical bodies), and a
//!    final retry replays it (no key stuck in flight).
//! 2. Callbacks traced to a key belong to that key's one decision.
//! 3. Per (decision, action), the receiver saw exactly one `webhook-id` and one body, every
//!    attempt correctly signed.
//! 4. Every action of every answered decision exists (no delivery lost) and is final: delivered
//!    (and then the receiver did answer 2xx for it) or dead after all its attempts, or held by
//!    its open endpoint past `max_hold`.
//! 5. A source's event makes exactly one decision if its type is mapped, none otherwise, and no
//!    answer counts it accepted twice.
//! 6. A SET makes exactly one decision per (iss, jti), pushed, polled or both, and every polled
//!    SET is acknowledged; a CloudEvent makes one per (source, id). The stream idem subscribes
//!    itself to: see `subscription`.
//! 7. The SETs of decisions to the tenant's own streams: see `streams`. A SET delivered was
//!    answered 2xx by the receiver or acknowledged by a poll.
//!
//! The rule each answer names, across a change of the rules mid-run: see `rules`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::clients::{request, ClientOutcome};
use crate::cloudevents::EventOutcome;
use crate::receiver::FaultyReceiver;
use crate::report::Report;
use crate::sources::SourceOutcome;
use crate::ssf::SetOutcome;
use crate::streams::Transmitted;
use crate::subscription::StreamOutcome;
use crate::MAX_RETRIES;
use devtools::transmitter::LoopbackTransmitter;

/// The webhook-ids and bodies seen for one (decision, action).
type Sightings = (BTreeSet<String>, BTreeSet<Vec<u8>>);

/// What the senders beside the clients saw.
pub struct SenderOutcomes<'a> {
    /// The Okta event hook.
    pub okta: &'a SourceOutcome,
    /// The Shared Signals transmitter.
    pub ssf: &'a SetOutcome,
    /// The CloudEvents operator.
    pub cloudevents: &'a EventOutcome,
    /// The transmitter idem subscribes to, and what it sent on the stream.
    pub subscribed: (&'a LoopbackTransmitter, &'a StreamOutcome),
}

/// Checks the run.
pub async fn check(
    base: &str,
    outcome: &ClientOutcome,
    sources: &SenderOutcomes<'_>,
    transmitted: Transmitted,
    receiver: &FaultyReceiver,
) -> Report {
    let mut report = Report::default();
    let http = reqwest::Client::new();
    for u in &outcome.unexpected {
        report.expect(false, || u.clone());
    }

    // 1. One decision per key, and no key stuck.
    let mut by_label: BTreeMap<&str, Vec<&[u8]>> = BTreeMap::new();
    for a in &outcome.answers {
        by_label.entry(&a.label).or_default().push(&a.body);
    }
    let mut key_decision: BTreeMap<String, String> = BTreeMap::new();
    let keyed: BTreeMap<&str, &crate::clients::SignalJob> = outcome
        .jobs
        .iter()
        .filter(|j| j.key.is_some())
        .map(|j| (j.label.as_str(), j))
        .collect();
    for (label, job) in &keyed {
        let bodies = by_label.get(label).cloned().unwrap_or_default();
        report.expect(!bodies.is_empty(), || format!("{label}: never answered"));
        let distinct: BTreeSet<&[u8]> = bodies.iter().copied().collect();
        report.expect(distinct.len() <= 1, || {
            format!(
                "{label}: {} different responses (more than one decision)",
                distinct.len()
            )
        });
        if let Some(first) = bodies.first() {
            let id = decision_id(first);
            key_decision.insert(label.to_string(), id);
            let again = request(&http, base, job, 0).send().await;
            let ok = match again {
                Ok(r) => {
                    let replayed = r.headers().get("idempotent-replayed").is_some();
                    let status = r.status().as_u16();
                    let body = r.bytes().await.map(|b| b.to_vec()).unwrap_or_default();
                    status == 201 && replayed && body == *first
                }
                Err(_) => false,
            };
            report.expect(ok, || {
                format!("{label}: the final retry did not replay the decision")
            });
        }
    }

    // 4. Every delivery of every answered decision, to its end.
    let mut deliveries = BTreeSet::new();
    // Every stream a decision listed a SET to.
    let mut named = BTreeSet::new();
    for a in &outcome.answers {
        let v: Value = serde_json::from_slice(&a.body).unwrap_or_default();
        for action in v["actions"].as_array().into_iter().flatten() {
            if let Some(id) = action["delivery_id"].as_str() {
                deliveries.insert(id.to_string());
            }
            if let Some(stream) = action["stream_id"].as_str() {
                named.insert(stream.to_string());
            }
        }
    }
    // 5. One decision per source event (its deliveries settle and are checked with the rest).
    crate::sources::check(&http, base, sources.okta, &mut report, &mut deliveries).await;
    // 6. One decision per SET and per CloudEvent.
    crate::ssf::check(&http, base, sources.ssf, &mut report, &mut deliveries).await;
    let (subscribed, on_stream) = sources.subscribed;
    crate::subscription::check(
        &http,
        base,
        subscribed,
        on_stream,
        &mut report,
        &mut deliveries,
    )
    .await;
    crate::cloudevents::check(
        &http,
        base,
        sources.cloudevents,
        &mut report,
        &mut deliveries,
    )
    .await;
    // Settle first: every delivery final (or the deadline passed), then read the receiver.
    let mut views = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    for id in &deliveries {
        let view = loop {
            let view = http
                .get(format!("{base}/v1/deliveries/{id}"))
                .header("authorization", "Bearer sk_simulation_key")
                .send()
                .await;
            let view = match view {
                Ok(r) if r.status().as_u16() == 404 => None,
                Ok(r) => r
                    .bytes()
                    .await
                    .ok()
                    .and_then(|b| serde_json::from_slice(&b).ok()),
                Err(_) => Some(Value::Null),
            };
            let queued = view
                .as_ref()
                .is_some_and(|v| v["status"] == "queued" || v.is_null());
            if !queued || Instant::now() > deadline {
                break view;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        views.push((id.clone(), view));
    }

    // 7. The SETs, once every poll stream's SET was acknowledged (or the deadline passed).
    let seen = receiver.seen.lock().map(|s| s.clone()).unwrap_or_default();
    let mut answered_ok: BTreeSet<String> = BTreeSet::new();
    crate::streams::check(
        base,
        transmitted,
        &seen,
        &named,
        &mut report,
        &mut answered_ok,
    )
    .await;

    // 2 and 3. What the receiver saw of callbacks.
    let seen: Vec<_> = seen.into_iter().filter(|c| !c.is_set()).collect();
    let mut per_key: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut per_action: BTreeMap<(String, String), Sightings> = BTreeMap::new();
    for cb in &seen {
        report.expect(cb.signature_ok, || {
            format!("{}: a callback with a bad signature", cb.webhook_id)
        });
        let env: Value = serde_json::from_slice(&cb.body).unwrap_or_default();
        let decision = env["data"]["decision_id"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let action = env["data"]["action"].as_str().unwrap_or("").to_string();
        let label = env["data"]["metadata"]["sim"]
            .as_str()
            .unwrap_or("")
            .to_string();
        per_key.entry(label).or_default().insert(decision.clone());
        let entry = per_action.entry((decision, action)).or_default();
        entry.0.insert(cb.webhook_id.clone());
        entry.1.insert(cb.body.clone());
    }
    for (label, decisions) in &per_key {
        if let Some(expected) = key_decision.get(label) {
            report.expect(decisions.len() == 1 && decisions.contains(expected), || {
                format!(
                    "{label}: callbacks of {} decisions for one key",
                    decisions.len()
                )
            });
        }
    }
    for ((decision, action), (ids, bodies)) in &per_action {
        report.expect(ids.len() == 1 && bodies.len() == 1, || {
            format!(
                "{decision}/{action}: {} webhook-ids and {} bodies",
                ids.len(),
                bodies.len()
            )
        });
    }

    answered_ok.extend(
        seen.iter()
            .filter(|c| c.answered_ok)
            .map(|c| c.webhook_id.clone()),
    );
    for (id, view) in views {
        let Some(view) = view else {
            report.expect(false, || format!("{id}: delivery lost (404)"));
            continue;
        };
        let status = view["status"].as_str().unwrap_or("?").to_string();
        let attempts = view["attempts"].as_array().map_or(0, Vec::len);
        match status.as_str() {
            "delivered" => report.expect(answered_ok.contains(&id), || {
                format!(
                    "{id}: delivered, but the receiver never answered it 2xx (to {})",
                    view["url"]
                )
            }),
            "dead" => report.expect(
                attempts > MAX_RETRIES || view["dead_reason"] == "endpoint_open",
                || format!("{id}: dead after only {attempts} attempts, its endpoint closed"),
            ),
            other => report.expect(false, || {
                let last = view["attempts"].as_array().and_then(|a| a.last());
                let last = last.map_or(Value::Null, |a| json!([a["status_code"], a["error"]]));
                format!(
                    "{id}: ended {other} after {attempts} attempts (action {}, to {}, created {}, \
                     next attempt {}, last attempt's code and error {last})",
                    view["action"], view["url"], view["created_at"], view["next_attempt_at"]
                )
            }),
        }
    }
    report
}

/// The `decision_id` of a decision's body.
pub fn decision_id(body: &[u8]) -> String {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v["decision_id"].as_str().map(str::to_string))
        .unwrap_or_default()
}
