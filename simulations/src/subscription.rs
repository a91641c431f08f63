//! A Shared Signals transmitter that idem subscribes to by itself: the source `ssf_sub` names
//! the transmitter's issuer and OAuth client credentials, no stream. At start and after every
//! restart, one node at a time makes its stream match the config (a poll stream asking for the
//! RISC event the source maps) and asks for a verification every `verify_every`, which the
//! transmitter sends as a SET on the stream. The transmitter then sends `--sets` SETs of its own
//! on the stream over the run (each about a subject of its own), and sends the first half of
//! them again once the run is over, as a transmitter that lost their acknowledgements. Through
//! idem's API, on nodes at random, the run pauses the stream a quarter in and enables it again
//! three quarters in, and adds a subject half way and removes it then. Whatever was killed when,
//! the checker finds exactly one stream made at the transmitter across every node and restart,
//! the stream verified and enabled in the source's status, the transmitter's stream paused once
//! idem answered the pause and enabled at the end, the subject added and then removed there,
//! every SET acknowledged and none refused, and one decision per (iss, jti).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use devtools::jose::{self, JwsKey};
use devtools::transmitter::{LoopbackTransmitter, CLIENT_ID, CLIENT_SECRET, STREAM_AUDIENCE};
use serde_json::{json, Value};

use crate::report::Report;
use crate::rng::Rng;
use crate::ssf::{encode, EVENT};

/// The source's name.
pub const SOURCE: &str = "ssf_sub";
/// How often idem asks for the stream's verification again.
const VERIFY_EVERY: &str = "2s";

/// The transmitter's signing key (the same fixture key each time it is made).
fn key() -> JwsKey {
    JwsKey::rsa("sub-key-1")
}

/// Starts the transmitter: its JWK Set, and verification SETs signed with its key.
pub async fn transmitter() -> Result<LoopbackTransmitter, String> {
    let tx = LoopbackTransmitter::try_start(jose::jwk_set(&[&key()]))
        .await
        .map_err(|e| e.to_string())?;
    tx.sign_with(key());
    Ok(tx)
}

/// The source's lines in the tenant's config.
pub fn config(tx: &LoopbackTransmitter) -> String {
    format!(
        r#"[tenants.sim.sources.{SOURCE}]
kind = "ssf"
audience = "{STREAM_AUDIENCE}"
jwks = "{jwks}"
transmitter = "{issuer}"
auth = {{ client_id = "{CLIENT_ID}", client_secret = "{CLIENT_SECRET}" }}
delivery = "poll"
verify_every = "{VERIFY_EVERY}"
[[tenants.sim.sources.{SOURCE}.map]]
event = "{EVENT}"
type = "port_out"
"#,
        jwks = tx.url("/jwks"),
        issuer = tx.issuer(),
    )
}

/// What the transmitter sent on the stream.
#[derive(Debug, Default)]
pub struct StreamOutcome {
    /// The stream the SETs went on, if one was made in time.
    pub stream: Option<String>,
    /// Each SET's jti and subject identifier.
    pub sets: Vec<(String, Value)>,
    /// What was asked of the stream through idem, and answered 2xx.
    pub managed: Vec<String>,
    /// The stream's status at the transmitter once idem answered the pause.
    pub paused: Option<String>,
    /// The subject added and removed through idem.
    pub watched: Value,
    pub unexpected: Vec<String>,
}

/// The SET `n` of the run of `seed`: its jti, subject and token.
fn set(tx: &LoopbackTransmitter, seed: u64, n: usize) -> (String, Value, String) {
    let jti = format!("sub-{seed}-{n}");
    let subject = json!({"format": "email", "email": format!("sub{seed}x{n}@sim.example")});
    let token = key().sign(&json!({
        "iss": tx.issuer(), "aud": [STREAM_AUDIENCE], "jti": jti,
        "iat": idem_schemas::timefmt::now_ms() / 1000,
        "sub_id": subject,
        "events": {EVENT: {"credential_type": "password"}}
    }));
    (jti, subject, token)
}

/// Waits (up to 30 s) for idem to make its stream, then sends `count` SETs on it over about
/// `seconds`.
pub async fn run(
    tx: &LoopbackTransmitter,
    bases: &[String],
    count: usize,
    seed: u64,
    seconds: u64,
) -> StreamOutcome {
    let mut out = StreamOutcome::default();
    let deadline = Instant::now() + Duration::from_secs(30);
    let stream = loop {
        if let Some(id) = tx.streams().keys().next() {
            break id.clone();
        }
        if Instant::now() > deadline {
            out.unexpected
                .push("idem made no stream at the transmitter within 30 s".into());
            return out;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let think = Duration::from_millis(seconds * 1000 / count.max(1) as u64);
    let http = reqwest::Client::new();
    let mut rng = Rng::new(seed.wrapping_mul(0x5ab));
    let watched = watched(seed);
    out.watched = watched.clone();
    for n in 0..count {
        // Through idem, to nodes at random: the stream paused a quarter in, a subject added
        // half way and removed three quarters in, and the stream enabled again then.
        let steps: &[(&str, Value)] = match n {
            _ if n == count / 4 => {
                &[("subscription", json!({"status": "paused", "reason": "sim"}))]
            }
            _ if n == count / 2 => &[("subjects", json!({"action": "add", "subject": watched}))],
            _ if n == 3 * count / 4 => &[
                ("subjects", json!({"action": "remove", "subject": watched})),
                ("subscription", json!({"status": "enabled"})),
            ],
            _ => &[],
        };
        for (what, body) in steps {
            match manage(&http, bases, what, body, &mut rng).await {
                Ok(()) => out.managed.push(format!("{what} {body}")),
                Err(e) => out.unexpected.push(e),
            }
            if body["status"] == "paused" {
                out.paused = tx.stream_status(&stream).map(|(status, _)| status);
            }
        }
        let (jti, subject, token) = set(tx, seed, n);
        tx.deliver(&stream, &jti, &token).await;
        out.sets.push((jti, subject));
        tokio::time::sleep(think).await;
    }
    out.stream = Some(stream);
    out
}

/// The subject added to the stream and removed again.
fn watched(seed: u64) -> Value {
    json!({"format": "email", "email": format!("watched{seed}@sim.example")})
}

/// POSTs `body` to the source's `what` (`subscription` or `subjects`) through a node at random
/// until it is answered 2xx (again after a 5xx, a broken connection or a stream not recorded
/// yet), within a minute.
async fn manage(
    http: &reqwest::Client,
    bases: &[String],
    what: &str,
    body: &Value,
    rng: &mut Rng,
) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let base = &bases[rng.range(0, bases.len() as u64) as usize];
        let sent = http
            .post(format!("{base}/v1/sources/sim/{SOURCE}/{what}"))
            .timeout(Duration::from_secs(5))
            .header("authorization", "Bearer sk_simulation_key")
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await;
        if let Ok(r) = sent {
            let status = r.status().as_u16();
            if (200..300).contains(&status) {
                return Ok(());
            }
            if status < 500 && status != 409 {
                let text = r.text().await.unwrap_or_default();
                return Err(format!("POST {what} {body} answered {status}: {text}"));
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.range(50, 300))).await;
    }
    Err(format!("POST {what} {body} never answered 2xx"))
}

/// Sends the first half of the SETs again (each given again on polls until acknowledged
/// again), then waits (up to a minute) until the transmitter holds none unacknowledged.
pub async fn settle(tx: &LoopbackTransmitter, out: &StreamOutcome, seed: u64) {
    if let Some(stream) = &out.stream {
        for n in 0..out.sets.len() / 2 {
            let (jti, _, token) = set(tx, seed, n);
            tx.deliver(stream, &jti, &token).await;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline && tx.pending() > 0 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The subscription in `ssf_sub`'s status at `base`, once verified (or the last one read
/// within 20 s).
async fn subscription(http: &reqwest::Client, base: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status =
            crate::sources::get_json(http, &format!("{base}/v1/sources/sim/{SOURCE}/status")).await;
        let subscription = status["subscription"].clone();
        if subscription["verified_at"].is_string() || Instant::now() > deadline {
            return subscription;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Checks the subscription's invariants, and adds the deliveries of its SETs' decisions to
/// `deliveries`.
pub async fn check(
    http: &reqwest::Client,
    base: &str,
    tx: &LoopbackTransmitter,
    outcome: &StreamOutcome,
    report: &mut Report,
    deliveries: &mut BTreeSet<String>,
) {
    for u in &outcome.unexpected {
        report.expect(false, || format!("{SOURCE}: {u}"));
    }
    let made = tx.streams_made();
    report.expect(made == 1, || {
        format!("{SOURCE}: {made} streams made at the transmitter, not one across every node and restart")
    });
    let subscription = subscription(http, base).await;
    report.expect(
        subscription["stream_id"].as_str() == outcome.stream.as_deref()
            && subscription["status"] == "enabled"
            && subscription["verified_at"].is_string(),
        || {
            format!(
                "{SOURCE}: the subscription is not the stream enabled and verified: {subscription}"
            )
        },
    );
    // What was asked through idem reached the transmitter: paused when answered, enabled again,
    // the subject added and then removed.
    let stream = outcome.stream.clone().unwrap_or_default();
    report.expect(outcome.paused.as_deref() == Some("paused"), || {
        format!(
            "{SOURCE}: the transmitter's stream was {:?} once idem answered the pause",
            outcome.paused
        )
    });
    let status = tx.stream_status(&stream).map(|(status, _)| status);
    report.expect(status.as_deref() == Some("enabled"), || {
        format!("{SOURCE}: the transmitter's stream ends {status:?}, not enabled again")
    });
    let watched = &outcome.watched;
    let changes: Vec<String> = tx
        .subjects()
        .into_iter()
        .filter(|(id, _, subject)| *id == stream && subject == watched)
        .map(|(_, action, _)| action)
        .collect();
    report.expect(
        changes.first().map(String::as_str) == Some("add")
            && changes.last().map(String::as_str) == Some("remove"),
        || format!("{SOURCE}: the subject's changes at the transmitter: {changes:?}, not added then removed"),
    );
    for jti in tx.pending_jtis() {
        report.expect(false, || format!("{SOURCE}: {jti} never acknowledged"));
    }
    for (jti, err) in tx.set_errs() {
        // A verification answered after a newer one was asked for is refused by its state.
        report.expect(!jti.starts_with("sub-"), || {
            format!("{SOURCE}: {jti} refused by a poll ({err})")
        });
    }
    for (jti, subject) in &outcome.sets {
        let decisions = crate::sources::decisions(
            http,
            &format!(
                "{base}/v1/decisions?subject_id={}",
                encode(&subject.to_string())
            ),
        )
        .await;
        report.expect(decisions.len() == 1, || {
            format!(
                "{SOURCE}: {jti}: {} decisions, not one per (iss, jti)",
                decisions.len()
            )
        });
        crate::sources::deliveries_of(&decisions, deliveries);
    }
}
