//! The source client: an identity provider (an Okta event hook, `okta_sim`) delivering its
//! events at least once, in batches that overlap: each event is sent in two or three batches,
//! and a batch is sent again until it is answered 200 (after a 5xx, or a broken connection when
//! idem died), and sometimes once more after that, as a provider whose answer timed out would.
//! Some events are of a type the source does not map. The checker then asks the decisions API:
//! exactly one decision per mapped event, none for an unmapped one, and no event accepted twice.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::report::Report;
use crate::rng::Rng;

/// The Authorization value the simulated Okta sends.
pub const OKTA_AUTH: &str = "Basic c2ltdWxhdGVkLW9rdGE=";

/// One event the provider emits.
#[derive(Debug, Clone)]
pub struct OktaEvent {
    pub id: String,
    pub subject: String,
    /// Of a type the source maps (to `port_out`).
    pub mapped: bool,
}

/// What the provider saw.
#[derive(Debug, Default)]
pub struct SourceOutcome {
    pub events: Vec<OktaEvent>,
    pub requests: usize,
    pub answered: usize,
    pub errors: usize,
    /// Per event id, how many answers counted it accepted: the provider can only tell which
    /// batch was accepted, so an event accepted in two answers is one counted twice.
    pub accepted: BTreeMap<String, usize>,
    pub unexpected: Vec<String>,
}

/// `events` events, in overlapping batches (event numbers), shuffled.
pub fn plan(seed: u64, events: usize, rng: &mut Rng) -> (Vec<OktaEvent>, Vec<Vec<usize>>) {
    let all: Vec<OktaEvent> = (0..events)
        .map(|n| OktaEvent {
            id: format!("okta-{seed}-{n}"),
            subject: format!("+4479{n:06}"),
            mapped: n % 7 != 3,
        })
        .collect();
    let mut batches = Vec::new();
    let mut n = 0;
    while n < events {
        let size = rng.range(1, 5) as usize;
        let batch: Vec<usize> = (n..(n + size).min(events)).collect();
        // Each batch is sent twice or three times; the later copies also carry the next event,
        // so batches overlap without being the same.
        for copy in 0..rng.range(2, 4) {
            let mut b = batch.clone();
            if copy > 0 && n + size < events {
                b.push(n + size);
            }
            batches.push(b);
        }
        n += size;
    }
    rng.shuffle(&mut batches);
    (all, batches)
}

fn body(events: &[OktaEvent], batch: &[usize]) -> String {
    let items: Vec<Value> = batch
        .iter()
        .map(|&n| {
            let e = &events[n];
            json!({
                "uuid": e.id,
                "eventType": if e.mapped { "user.mfa.factor.deactivate" } else { "group.user_membership.add" },
                "published": "2026-11-30T10:00:00.000Z",
                "displayMessage": "Reset factor",
                "target": [{"alternateId": e.subject, "type": "User"}]
            })
        })
        .collect();
    json!({"eventType": "com.okta.event_hook", "data": {"events": items}}).to_string()
}

/// What a delivery sent until answered came to.
pub enum Delivered {
    /// Answered 200, with this receipt.
    Answered(Value),
    /// Answered another status than 200 or 5xx: refused, not to be sent again.
    Refused(u16, String),
    /// Never answered 200 within two minutes of trying.
    Never,
}

/// POSTs `body` with `headers` to `path` of a node at random each time until it is answered
/// (again after a 5xx or a broken connection, as an at-least-once sender does), counting each
/// request and each error in `counts`.
pub async fn until_answered(
    http: &reqwest::Client,
    bases: &[String],
    path: &str,
    headers: &[(&str, String)],
    body: &str,
    rng: &mut Rng,
    counts: (&mut usize, &mut usize),
) -> Delivered {
    let (requests, errors) = counts;
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        *requests += 1;
        let base = &bases[rng.range(0, bases.len() as u64) as usize];
        let mut request = http
            .post(format!("{base}{path}"))
            .timeout(Duration::from_secs(15))
            .body(body.to_string());
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        match request.send().await {
            Ok(r) if r.status().as_u16() == 200 => {
                let receipt: Value = r
                    .bytes()
                    .await
                    .ok()
                    .and_then(|b| serde_json::from_slice(&b).ok())
                    .unwrap_or_default();
                return Delivered::Answered(receipt);
            }
            Ok(r) if r.status().is_server_error() => *errors += 1,
            Ok(r) => {
                let status = r.status().as_u16();
                return Delivered::Refused(status, r.text().await.unwrap_or_default());
            }
            Err(_) => *errors += 1,
        }
        tokio::time::sleep(Duration::from_millis(rng.range(30, 250))).await;
    }
    Delivered::Never
}

/// Sends every batch until it is answered 200, to a node at random each time.
pub async fn run(
    bases: &[String],
    events: Vec<OktaEvent>,
    batches: Vec<Vec<usize>>,
    seed: u64,
    think: Duration,
) -> SourceOutcome {
    let http = reqwest::Client::new();
    let mut rng = Rng::new(seed.wrapping_mul(0x51));
    let mut out = SourceOutcome::default();
    for batch in &batches {
        let text = body(&events, batch);
        let again = rng.chance(20);
        let headers = [
            ("authorization", OKTA_AUTH.to_string()),
            ("content-type", "application/json".to_string()),
        ];
        // Sent until answered, and once more after that for some (an answer that timed out).
        let mut answers = 0;
        while answers <= usize::from(again) {
            let counts = (&mut out.requests, &mut out.errors);
            let path = "/v1/sources/sim/okta_sim";
            match until_answered(&http, bases, path, &headers, &text, &mut rng, counts).await {
                Delivered::Answered(receipt) => {
                    out.answered += 1;
                    let counted: u64 = ["accepted", "duplicates", "ignored", "refused"]
                        .iter()
                        .map(|k| receipt[k].as_u64().unwrap_or(0))
                        .sum();
                    if counted != batch.len() as u64 {
                        out.unexpected.push(format!(
                            "a batch of {} events answered {receipt}",
                            batch.len()
                        ));
                    }
                    // The answer says how many, not which: attribute acceptance only when the
                    // whole batch was accepted or none of it.
                    let mapped: Vec<&OktaEvent> = batch
                        .iter()
                        .map(|&n| &events[n])
                        .filter(|e| e.mapped)
                        .collect();
                    if receipt["accepted"].as_u64() == Some(mapped.len() as u64) {
                        for e in mapped {
                            *out.accepted.entry(e.id.clone()).or_default() += 1;
                        }
                    }
                    answers += 1;
                }
                Delivered::Refused(status, text) => {
                    out.unexpected
                        .push(format!("a batch answered {status}: {text}"));
                    break;
                }
                Delivered::Never => {
                    if answers == 0 {
                        out.unexpected
                            .push(format!("a batch of {batch:?} never answered 200"));
                    }
                    break;
                }
            }
        }
        tokio::time::sleep(think).await;
    }
    out.events = events;
    out
}

/// Checks the source's invariants, and adds the deliveries of its decisions to `deliveries`,
/// for the checker to settle and check like the others.
pub async fn check(
    http: &reqwest::Client,
    base: &str,
    outcome: &SourceOutcome,
    report: &mut Report,
    deliveries: &mut BTreeSet<String>,
) {
    for u in &outcome.unexpected {
        report.expect(false, || format!("source: {u}"));
    }
    for (id, times) in &outcome.accepted {
        report.expect(*times <= 1, || {
            format!("{id}: accepted in {times} answers (claimed twice)")
        });
    }
    for event in &outcome.events {
        let decisions = decisions(
            http,
            &format!(
                "{base}/v1/decisions?subject={}&type=port_out",
                event.subject.replace('+', "%2B")
            ),
        )
        .await;
        let want = usize::from(event.mapped);
        report.expect(decisions.len() == want, || {
            format!("{}: {} decisions, not {want}", event.id, decisions.len())
        });
        deliveries_of(&decisions, deliveries);
    }
}

/// The JSON body `url` answers with the simulation tenant's key (null if it cannot be read).
pub async fn get_json(http: &reqwest::Client, url: &str) -> Value {
    let read = http
        .get(url)
        .header("authorization", "Bearer sk_simulation_key")
        .send()
        .await;
    match read {
        Ok(r) => r
            .bytes()
            .await
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default(),
        Err(_) => Value::Null,
    }
}

/// The decisions a page of the decisions API at `url` lists (none if it cannot be read).
pub async fn decisions(http: &reqwest::Client, url: &str) -> Vec<Value> {
    let page = get_json(http, url).await;
    page["data"].as_array().cloned().unwrap_or_default()
}

/// Adds the deliveries of `decisions`' actions to `deliveries`.
pub fn deliveries_of(decisions: &[Value], deliveries: &mut BTreeSet<String>) {
    for d in decisions {
        for action in d["actions"].as_array().into_iter().flatten() {
            if let Some(id) = action["delivery_id"].as_str() {
                deliveries.insert(id.to_string());
            }
        }
    }
}
