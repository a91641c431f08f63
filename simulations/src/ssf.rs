//! The Shared Signals transmitter: it serves its JWK Set and an RFC 8936 poll endpoint, and
//! sends `--sets` Security Event Tokens at least once. Some it pushes to the source `ssf_push`
//! (two or three times each, to nodes at random, again after a 5xx, a broken connection or an
//! `invalid_key`), some it queues for the source `ssf_poll` to poll (given again on every poll
//! until acknowledged), and some of those it also pushes to `ssf_poll`: one SET, both ways. Half
//! way through it rotates its key: it publishes a second key beside the first, waits past the
//! sources' `jwks_refetch`, and signs the rest with the new one. Each SET is about a subject of
//! its own (an RFC 9493 email identifier, cased at random), so the checker asks the decisions
//! API for exactly one decision per SET, and the poll endpoint for no SET left unacknowledged.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use devtools::jose::{self, JwsKey};
use devtools::transmitter::LoopbackTransmitter;
use serde_json::{json, Value};

use crate::report::Report;
use crate::rng::Rng;

/// The transmitter's `iss`, the sources' `audience`, the event type they map.
pub const ISSUER: &str = "https://transmitter.sim.example/ssf";
/// What the sources expect among `aud`.
pub const AUDIENCE: &str = "https://idem.sim.example/sim";
/// The RISC event the SETs carry.
pub const EVENT: &str = "https://schemas.openid.net/secevent/risc/event-type/credential-compromise";
/// The Bearer token of the poll endpoint.
pub use devtools::transmitter::POLL_TOKEN;

/// How a SET travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    Push,
    Poll,
    Both,
}

/// One SET the transmitter sends.
#[derive(Debug, Clone)]
pub struct SentSet {
    pub jti: String,
    /// Its subject identifier, as the decisions API is asked for it.
    pub subject: Value,
    way: Way,
}

/// What the transmitter saw.
#[derive(Debug, Default)]
pub struct SetOutcome {
    pub sets: Vec<SentSet>,
    pub pushes: usize,
    pub accepted: usize,
    pub errors: usize,
    pub unexpected: Vec<String>,
    /// SETs queued for polling that were never acknowledged.
    pub unacked: Vec<String>,
    pub set_errs: usize,
}

/// `count` SETs, each with its way, in a shuffled order.
pub fn plan(seed: u64, count: usize, rng: &mut Rng) -> Vec<SentSet> {
    let mut sets: Vec<SentSet> = (0..count)
        .map(|n| {
            let local = format!("set{seed}x{n}");
            // The subject as the decisions API is asked: lower-cased. The SET writes it with
            // its domain upper-cased at random, which must make no difference.
            SentSet {
                jti: format!("jti-{seed}-{n}"),
                subject: json!({"format": "email", "email": format!("{local}@sim.example")}),
                way: [Way::Push, Way::Push, Way::Poll, Way::Both][rng.range(0, 4) as usize],
            }
        })
        .collect();
    rng.shuffle(&mut sets);
    sets
}

fn claims(set: &SentSet, upper: bool) -> Value {
    let email = set.subject["email"].as_str().unwrap_or_default();
    let email = match upper {
        true => email.replace("@sim.example", "@SIM.Example"),
        false => email.to_string(),
    };
    json!({
        "iss": ISSUER, "aud": [AUDIENCE], "jti": set.jti,
        "iat": idem_schemas::timefmt::now_ms() / 1000,
        "sub_id": {"email": email, "format": "email"},
        "events": {EVENT: {"credential_type": "password"}}
    })
}

/// Sends every SET its way over about `seconds`, rotating the key half way.
pub async fn run(
    transmitter: &LoopbackTransmitter,
    bases: &[String],
    sets: Vec<SentSet>,
    seed: u64,
    seconds: u64,
) -> SetOutcome {
    let http = reqwest::Client::new();
    let mut rng = Rng::new(seed.wrapping_mul(0x55f));
    let mut out = SetOutcome::default();
    let old = JwsKey::ec("sim-key-1");
    let new = JwsKey::ec("sim-key-2");
    transmitter.set_jwks(jose::jwk_set(&[&old]));
    let think = Duration::from_millis(seconds * 1000 / sets.len().max(1) as u64);
    let half = sets.len() / 2;
    let mut rotated_at = None;
    for (n, set) in sets.iter().enumerate() {
        if n == half {
            // Publish the new key beside the old one, then wait past jwks_refetch before
            // signing with it: a receiver that fetched just before sees it at its next fetch.
            transmitter.set_jwks(jose::jwk_set(&[&old, &new]));
            rotated_at = Some(Instant::now());
        }
        let key = match rotated_at {
            Some(at) if at.elapsed() > Duration::from_millis(1_200) => &new,
            _ => &old,
        };
        let token = key.sign(&claims(set, rng.chance(50)));
        if matches!(set.way, Way::Poll | Way::Both) {
            transmitter.queue(&set.jti, &token);
        }
        let source = match set.way {
            Way::Push => Some("ssf_push"),
            Way::Both => Some("ssf_poll"),
            Way::Poll => None,
        };
        if let Some(source) = source {
            for _ in 0..rng.range(1, 3) {
                push(&http, bases, source, &token, &mut rng, &mut out).await;
            }
        }
        tokio::time::sleep(think).await;
    }
    out.sets = sets;
    out
}

/// Pushes `token` to `source` until it is answered 202 (or refused otherwise, which is
/// unexpected), to a node at random each time.
async fn push(
    http: &reqwest::Client,
    bases: &[String],
    source: &str,
    token: &str,
    rng: &mut Rng,
    out: &mut SetOutcome,
) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        out.pushes += 1;
        let base = &bases[rng.range(0, bases.len() as u64) as usize];
        let sent = http
            .post(format!("{base}/v1/sources/sim/{source}"))
            .timeout(Duration::from_secs(15))
            .header("content-type", "application/secevent+jwt")
            .body(token.to_string())
            .send()
            .await;
        match sent {
            Ok(r) if r.status().as_u16() == 202 => {
                out.accepted += 1;
                return;
            }
            Ok(r) if r.status().is_server_error() => out.errors += 1,
            Ok(r) => {
                let status = r.status().as_u16();
                let body: Value = r
                    .bytes()
                    .await
                    .ok()
                    .and_then(|b| serde_json::from_slice(&b).ok())
                    .unwrap_or_default();
                // A new key within a node's refetch interval: sent again later, as a
                // transmitter does.
                if status == 400 && body["err"] == "invalid_key" {
                    out.errors += 1;
                } else {
                    out.unexpected.push(format!(
                        "a SET pushed to {source} answered {status}: {body}"
                    ));
                    return;
                }
            }
            Err(_) => out.errors += 1,
        }
        tokio::time::sleep(Duration::from_millis(rng.range(50, 300))).await;
    }
    out.unexpected
        .push(format!("a SET pushed to {source} never answered 202"));
}

/// Waits (up to a minute) for every polled SET to be acknowledged, and notes what is left.
pub async fn settle(transmitter: &LoopbackTransmitter, out: &mut SetOutcome) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline && transmitter.pending() > 0 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    out.unacked = transmitter.pending_jtis();
    let set_errs = transmitter.set_errs();
    out.set_errs = set_errs.len();
    for (jti, err) in &set_errs {
        out.unexpected
            .push(format!("{jti}: refused by a poll ({err})"));
    }
}

/// Checks the SETs' invariants, and adds the deliveries of their decisions to `deliveries`.
pub async fn check(
    http: &reqwest::Client,
    base: &str,
    outcome: &SetOutcome,
    report: &mut Report,
    deliveries: &mut BTreeSet<String>,
) {
    for u in &outcome.unexpected {
        report.expect(false, || format!("ssf: {u}"));
    }
    for jti in &outcome.unacked {
        report.expect(false, || format!("{jti}: polled and never acknowledged"));
    }
    for set in &outcome.sets {
        let subject = set.subject.to_string();
        let decisions = crate::sources::decisions(
            http,
            &format!("{base}/v1/decisions?subject_id={}", encode(&subject)),
        )
        .await;
        report.expect(decisions.len() == 1, || {
            format!(
                "{} ({:?}): {} decisions, not one per (iss, jti)",
                set.jti,
                set.way,
                decisions.len()
            )
        });
        crate::sources::deliveries_of(&decisions, deliveries);
    }
}

/// `text` percent-encoded for a query.
pub fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
