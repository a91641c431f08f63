//! The CloudEvents client: a mobile operator (CAMARA SIM swap notifications) sending
//! `--cloudevents` events at least once to the source `camara`, each two or three times, in a
//! mode picked at random each time (structured, binary, or in a batch with its neighbours), to
//! nodes at random, again after a 5xx or a broken connection. Every other event reuses the `id`
//! of the one before it under another `source` attribute, which the CloudEvents spec makes a
//! different event. Each is about a phone number of its own, so the checker asks for exactly one
//! decision per (source, id).

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{json, Value};

use crate::report::Report;
use crate::rng::Rng;
use crate::sources::{until_answered, Delivered};

/// The Bearer secret the operator sends.
pub const SECRET: &str = "simulated-camara-sink-credential";
/// The CAMARA SIM swap event type.
pub const SWAPPED: &str = "org.camaraproject.sim-swap-subscriptions.v0.swapped";

/// One event the operator emits.
#[derive(Debug, Clone)]
pub struct CloudEvent {
    pub id: String,
    pub source: String,
    pub phone: String,
}

/// What the operator saw.
#[derive(Debug, Default)]
pub struct EventOutcome {
    pub events: Vec<CloudEvent>,
    pub requests: usize,
    pub answered: usize,
    pub errors: usize,
    pub unexpected: Vec<String>,
}

/// `count` events; pairs share an `id` under two `source`s.
pub fn plan(seed: u64, count: usize) -> Vec<CloudEvent> {
    (0..count)
        .map(|n| CloudEvent {
            id: format!("ce-{seed}-{}", n / 2),
            source: format!("https://operator{}.sim.example/sim-swap", n % 2),
            phone: format!("+4478{seed:02}{n:05}"),
        })
        .collect()
}

fn event(e: &CloudEvent) -> Value {
    json!({
        "specversion": "1.0", "id": e.id, "source": e.source, "type": SWAPPED,
        "datacontenttype": "application/json", "time": "2026-12-01T10:00:00.000Z",
        "data": {"phoneNumber": e.phone, "subscriptionId": "sub-1"}
    })
}

/// A request carrying `events[at..]` in some mode: its content type, extra headers, body, and
/// how many events it carries.
fn request(
    events: &[CloudEvent],
    at: usize,
    rng: &mut Rng,
) -> (String, Vec<(String, String)>, String, usize) {
    let e = &events[at];
    match rng.range(0, 3) {
        0 => (
            "application/cloudevents+json".into(),
            Vec::new(),
            event(e).to_string(),
            1,
        ),
        1 => (
            "application/json".into(),
            vec![
                ("ce-specversion".into(), "1.0".into()),
                ("ce-id".into(), e.id.clone()),
                ("ce-source".into(), e.source.clone()),
                ("ce-type".into(), SWAPPED.into()),
            ],
            event(e)["data"].to_string(),
            1,
        ),
        _ => {
            let end = (at + rng.range(1, 4) as usize).min(events.len());
            let batch: Vec<Value> = events[at..end].iter().map(event).collect();
            (
                "application/cloudevents-batch+json".into(),
                Vec::new(),
                Value::from(batch).to_string(),
                end - at,
            )
        }
    }
}

/// Sends every event (two or three times) over about `seconds`.
pub async fn run(
    bases: &[String],
    events: Vec<CloudEvent>,
    seed: u64,
    seconds: u64,
) -> EventOutcome {
    let http = reqwest::Client::new();
    let mut rng = Rng::new(seed.wrapping_mul(0xce));
    let mut out = EventOutcome::default();
    let think = Duration::from_millis(seconds * 1000 / events.len().max(1) as u64);
    for at in 0..events.len() {
        for _ in 0..rng.range(2, 4) {
            let (content_type, extra, body, carried) = request(&events, at, &mut rng);
            let mut headers = vec![
                ("authorization", format!("Bearer {SECRET}")),
                ("content-type", content_type),
            ];
            headers.extend(extra.iter().map(|(n, v)| (n.as_str(), v.clone())));
            let counts = (&mut out.requests, &mut out.errors);
            let path = "/v1/sources/sim/camara";
            match until_answered(&http, bases, path, &headers, &body, &mut rng, counts).await {
                Delivered::Answered(receipt) => {
                    let counted = receipt["accepted"].as_u64().unwrap_or(0)
                        + receipt["duplicates"].as_u64().unwrap_or(0);
                    if counted != carried as u64 {
                        out.unexpected
                            .push(format!("{carried} events answered {receipt}"));
                    }
                    out.answered += 1;
                }
                Delivered::Refused(status, text) => out
                    .unexpected
                    .push(format!("CloudEvents answered {status}: {text}")),
                Delivered::Never => out
                    .unexpected
                    .push(format!("{} never answered 200", events[at].id)),
            }
        }
        tokio::time::sleep(think).await;
    }
    out.events = events;
    out
}

/// Checks one decision per (source, id), and adds their deliveries to `deliveries`.
pub async fn check(
    http: &reqwest::Client,
    base: &str,
    outcome: &EventOutcome,
    report: &mut Report,
    deliveries: &mut BTreeSet<String>,
) {
    for u in &outcome.unexpected {
        report.expect(false, || format!("cloudevents: {u}"));
    }
    for e in &outcome.events {
        let decisions = crate::sources::decisions(
            http,
            &format!(
                "{base}/v1/decisions?subject={}&type=sim_swap",
                e.phone.replace('+', "%2B")
            ),
        )
        .await;
        report.expect(decisions.len() == 1, || {
            format!(
                "{} from {}: {} decisions, not one per (source, id)",
                e.id,
                e.source,
                decisions.len()
            )
        });
        crate::sources::deliveries_of(&decisions, deliveries);
    }
}
