//! The simulated tenant as a Shared Signals transmitter: its `sim_swap` playbook also sends a
//! CAEP session-revoked SET, and its receiver `rx` has four streams asking for it, made before
//! the load: `push` (to the fault-injecting receiver), `paused` (pushed too, paused a quarter
//! into the run and enabled again three seconds later, through nodes at random), `off` (pushed,
//! disabled from the start) and `poll`, polled by a client of this module's through nodes at
//! random, long polls and immediate ones, acknowledging what it got in its next poll (or
//! later), until the checker is done. Then it checks, with the tenant's published keys: every
//! SET verifies; each (decision, stream) came under one `jti` with one body; nothing
//! acknowledged was handed out again; the paused stream got no decision's SET while paused
//! (what it held is sent after, as every delivery must end delivered); the disabled stream got
//! none.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use devtools::jose;
use serde_json::{json, Value};

use crate::receiver::Callback;
use crate::report::Report;
use crate::rng::Rng;

/// How the tenant's issuer is reached: the same on every node.
pub const PUBLIC_URL: &str = "https://idem.sim.example";
/// The event the `sim_swap` playbook's `set` action sends.
pub const REVOKED: &str = "https://schemas.openid.net/secevent/caep/event-type/session-revoked";
/// The receiver's OAuth client credentials and the `aud` of its streams.
const CLIENT_ID: &str = "rx";
const CLIENT_SECRET: &str = "sim-receiver-secret-0001";
const AUDIENCE: &str = "https://rx.sim.example";
/// The push streams' endpoints at the receiver.
const PUSH_PATH: &str = "/ssf/push";
const PAUSED_PATH: &str = "/ssf/paused";
const OFF_PATH: &str = "/ssf/off";
/// How long the paused stream stays paused (below `max_hold`, or its SETs would die waiting).
const PAUSE: Duration = Duration::from_secs(3);
/// How long after the pause is answered an attempt that read the stream before it may still
/// arrive (an attempt's deadline and then some).
const GRACE_MS: u64 = 800;

/// The `[tenants.sim.ssf]` section, its signing key written to `dir`.
pub fn config(dir: &Path) -> Result<String, String> {
    let key = dir.join("sim-transmitter.pem");
    std::fs::write(&key, jose::rsa_pem()).map_err(|e| e.to_string())?;
    Ok(format!(
        r#"
[tenants.sim.ssf]
signing_keys = ["{key}"]
[tenants.sim.ssf.receivers.{CLIENT_ID}]
client_secret = "{CLIENT_SECRET}"
audience = "{AUDIENCE}"
endpoints = ["http://127.0.0.1"]
"#,
        key = key.display()
    ))
}

/// The `sim_swap` playbook's `set` action.
pub fn action() -> String {
    format!(r#"{{ name = "revoke", set = "{REVOKED}", subject_format = "phone_number" }}"#)
}

/// The receiver's streams.
pub struct ReceiverStreams {
    token: String,
    push: String,
    paused: String,
    off: String,
    poll: String,
}

/// When the paused stream was paused and enabled again (answered), in ms since the epoch.
#[derive(Debug, Default, Clone, Copy)]
pub struct Pause {
    paused_ms: u64,
    resumed_ms: u64,
}

/// What the poll client saw.
#[derive(Debug, Default)]
pub struct Polled {
    /// Every SET handed out, with the number of the poll that handed it out.
    handed: Vec<(u64, String, String)>,
    /// Each `jti` whose acknowledgement was answered, with the number of that poll.
    acked: BTreeMap<String, u64>,
    /// Each `jti` acknowledged, whether or not an answer came (idem may have taken it).
    sent: BTreeSet<String>,
    polls: u64,
    errors: u64,
}

async fn token(http: &reqwest::Client, base: &str) -> Result<String, String> {
    let form = format!(
        "grant_type=client_credentials&client_id={CLIENT_ID}&client_secret={CLIENT_SECRET}"
    );
    let answer = http
        .post(format!("{base}/ssf/sim/token"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form)
        .send()
        .await
        .map_err(|e| format!("the receiver's token: {e}"))?;
    let body = json_of(answer).await?;
    body["access_token"]
        .as_str()
        .map(str::to_string)
        .ok_or(format!("no token: {body}"))
}

/// An answer's JSON body (an empty one is `null`).
async fn json_of(answer: reqwest::Response) -> Result<Value, String> {
    let bytes = answer.bytes().await.map_err(|e| e.to_string())?;
    match bytes.is_empty() {
        true => Ok(Value::Null),
        false => serde_json::from_slice(&bytes).map_err(|e| e.to_string()),
    }
}

/// A management call of the receiver's, until a node answers it (nodes die meanwhile).
async fn call(
    http: &reqwest::Client,
    bases: &[String],
    rng: &mut Rng,
    token: &str,
    path: &str,
    body: Value,
) -> Result<Value, String> {
    let mut last = String::new();
    for _ in 0..200 {
        let base = &bases[rng.range(0, bases.len() as u64) as usize];
        let sent = http
            .post(format!("{base}/ssf/sim/{path}"))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(body.to_string())
            .timeout(Duration::from_secs(3))
            .send()
            .await;
        match sent {
            Ok(r) if r.status().is_success() => return json_of(r).await,
            Ok(r) => last = format!("{} {}", r.status(), r.text().await.unwrap_or_default()),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(format!("{path}: {last}"))
}

/// Makes the receiver's four streams (the disabled one disabled) through `base`.
pub async fn create(base: &str, recv: &str, seed: u64) -> Result<ReceiverStreams, String> {
    let http = reqwest::Client::new();
    let token = token(&http, base).await?;
    let mut rng = Rng::new(seed.wrapping_mul(13).wrapping_add(5));
    let bases = [base.to_string()];
    let push = |path: &str| {
        json!({
            "delivery": {"method": "urn:ietf:rfc:8935", "endpoint_url": format!("{recv}{path}"),
                         "authorization_header": "Bearer sim-push-credential"},
            "events_requested": [REVOKED],
        })
    };
    let mut ids = Vec::new();
    for body in [
        push(PUSH_PATH),
        push(PAUSED_PATH),
        push(OFF_PATH),
        json!({"delivery": {"method": "urn:ietf:rfc:8936"}, "events_requested": [REVOKED]}),
    ] {
        let made = call(&http, &bases, &mut rng, &token, "streams", body).await?;
        let id = made["stream_id"].as_str().ok_or(format!("no id: {made}"))?;
        ids.push(id.to_string());
    }
    let status = json!({"stream_id": ids[2], "status": "disabled", "reason": "offboarded"});
    call(&http, &bases, &mut rng, &token, "streams/status", status).await?;
    Ok(ReceiverStreams {
        token,
        poll: ids.pop().unwrap_or_default(),
        off: ids.pop().unwrap_or_default(),
        paused: ids.pop().unwrap_or_default(),
        push: ids.pop().unwrap_or_default(),
    })
}

/// Pauses the paused stream a quarter into the run and enables it [`PAUSE`] later.
pub async fn pause(streams: &ReceiverStreams, bases: &[String], seed: u64, seconds: u64) -> Pause {
    let http = reqwest::Client::new();
    let mut rng = Rng::new(seed.wrapping_mul(17).wrapping_add(3));
    tokio::time::sleep(Duration::from_millis(seconds * 250)).await;
    set_paused(&http, bases, &mut rng, streams, "paused").await;
    let paused_ms = idem_schemas::timefmt::now_ms();
    tokio::time::sleep(PAUSE).await;
    // Enabled from the moment it is asked: an attempt may go before the answer comes.
    let resumed_ms = idem_schemas::timefmt::now_ms();
    set_paused(&http, bases, &mut rng, streams, "enabled").await;
    Pause {
        paused_ms,
        resumed_ms,
    }
}

/// Sets the paused stream's status to `state`, through nodes at random.
async fn set_paused(
    http: &reqwest::Client,
    bases: &[String],
    rng: &mut Rng,
    streams: &ReceiverStreams,
    state: &str,
) {
    let body = json!({"stream_id": streams.paused, "status": state});
    if let Err(e) = call(http, bases, rng, &streams.token, "streams/status", body).await {
        eprintln!("simulations: the paused stream: {e}");
    }
}

/// The streams of a run, as the checker takes them.
pub struct Transmitted {
    pub streams: ReceiverStreams,
    pub pause: Pause,
    pub poller: Poller,
}

/// The poll client, polling until it is finished.
pub struct Poller {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
    polled: Arc<Mutex<Polled>>,
}

impl Poller {
    /// Starts polling the poll stream through nodes at random.
    pub fn start(streams: &ReceiverStreams, bases: &[String], seed: u64) -> Poller {
        let stop = Arc::new(AtomicBool::new(false));
        let polled = Arc::new(Mutex::new(Polled::default()));
        let task = tokio::spawn(poll(streams, bases, seed, stop.clone(), polled.clone()));
        Poller { stop, task, polled }
    }

    /// Stops polling (after the poll under way): what it saw.
    pub async fn finish(self) -> Polled {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.task.await;
        let mut polled = self.polled.lock().unwrap_or_else(|p| p.into_inner());
        std::mem::take(&mut *polled)
    }
}

/// Polls until `stop`, through nodes at random, into `out`.
fn poll(
    streams: &ReceiverStreams,
    bases: &[String],
    seed: u64,
    stop: Arc<AtomicBool>,
    out: Arc<Mutex<Polled>>,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let bases = bases.to_vec();
    let (token, id) = (streams.token.clone(), streams.poll.clone());
    async move {
        let http = reqwest::Client::new();
        let mut rng = Rng::new(seed.wrapping_mul(19).wrapping_add(11));
        let mut unacked: BTreeSet<String> = BTreeSet::new();
        let mut n = 0u64;
        while !stop.load(Ordering::SeqCst) {
            n += 1;
            // Most of what it got is acknowledged in the next poll; some waits a poll or two,
            // and is handed out again meanwhile.
            let ack: Vec<String> = unacked.iter().filter(|_| rng.chance(80)).cloned().collect();
            let body = json!({
                "ack": ack,
                "maxEvents": rng.range(1, 8),
                "returnImmediately": rng.chance(50),
            });
            let base = &bases[rng.range(0, bases.len() as u64) as usize];
            let sent = http
                .post(format!("{base}/ssf/sim/streams/{id}/poll"))
                .bearer_auth(&token)
                .header("content-type", "application/json")
                .body(body.to_string())
                .timeout(Duration::from_secs(3))
                .send()
                .await;
            let answer = match sent {
                Ok(r) if r.status().is_success() => json_of(r).await.ok(),
                _ => None,
            };
            let answered = answer.is_some();
            {
                let mut polled = out.lock().unwrap_or_else(|p| p.into_inner());
                polled.polls += 1;
                polled.sent.extend(ack.iter().cloned());
                match answer {
                    // Whether its acknowledgements held is not known: they are made again.
                    None => polled.errors += 1,
                    Some(answer) => {
                        for jti in &ack {
                            unacked.remove(jti);
                            polled.acked.entry(jti.clone()).or_insert(n);
                        }
                        for (jti, set) in answer["sets"].as_object().into_iter().flatten() {
                            let set = set.as_str().unwrap_or_default().to_string();
                            polled.handed.push((n, jti.clone(), set));
                            unacked.insert(jti.clone());
                        }
                    }
                }
            }
            if !answered {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            tokio::time::sleep(Duration::from_millis(rng.range(0, 60))).await;
        }
    }
}

/// One SET as the checker reads it: through which stream, its `jti`, its bytes, its claims.
struct SeenSet<'a> {
    stream: &'a str,
    jti: String,
    body: &'a [u8],
    claims: Value,
}

/// Stops the poll client and checks the streams (module doc), `named` being every stream a
/// decision's answer listed a SET to, and adds to `delivered` every SET `jti` the receiver
/// answered 2xx or the poll client acknowledged (answered or not: a poll whose answer was lost
/// may have been taken), for the checker's test of delivered SETs.
pub async fn check(
    base: &str,
    run: Transmitted,
    pushed: &[Callback],
    named: &BTreeSet<String>,
    report: &mut Report,
    delivered: &mut BTreeSet<String>,
) {
    let Transmitted {
        streams,
        pause,
        poller,
    } = run;
    let polled = &poller.finish().await;
    let http = reqwest::Client::new();
    let jwks = match http.get(format!("{base}/ssf/sim/jwks")).send().await {
        Ok(r) => json_of(r).await.unwrap_or_default(),
        Err(_) => Value::Null,
    };
    let mut seen = Vec::new();
    let verify = |stream: &'static str, body: &[u8], report: &mut Report| {
        let token = String::from_utf8_lossy(body);
        match jose::verify(&token, &jwks) {
            Ok((_, claims)) => {
                report.expect(claims["aud"] == AUDIENCE, || {
                    format!("a SET to {stream} for {}", claims["aud"])
                });
                let jti = claims["jti"].as_str().unwrap_or_default().to_string();
                Some((jti, claims))
            }
            Err(e) => {
                report.expect(false, || {
                    format!("a SET to {stream} that does not verify: {e}")
                });
                None
            }
        }
    };
    // Each pushed decision's SET: when it first arrived, per (stream, decision).
    let mut first: BTreeMap<(&str, String), u64> = BTreeMap::new();
    let mut pushes = 0;
    for set in pushed.iter().filter(|c| c.is_set()) {
        let stream = match set.path.as_str() {
            PUSH_PATH => "push",
            PAUSED_PATH => "paused",
            OFF_PATH => "off",
            _ => "an unknown endpoint",
        };
        pushes += 1;
        if let Some((jti, claims)) = verify(stream, &set.body, report) {
            if set.answered_ok {
                delivered.insert(jti.clone());
            }
            if claims["events"].get(REVOKED).is_some() {
                let txn = claims["txn"].as_str().unwrap_or_default().to_string();
                let at = first.entry((stream, txn)).or_insert(set.at_ms);
                *at = (*at).min(set.at_ms);
            }
            seen.push(SeenSet {
                stream,
                jti,
                body: &set.body,
                claims,
            });
        }
    }
    for (_, jti, set) in &polled.handed {
        if let Some((claimed, claims)) = verify("poll", set.as_bytes(), report) {
            report.expect(claimed == *jti, || {
                format!("poll: {jti} handed out as {claimed}")
            });
            seen.push(SeenSet {
                stream: "poll",
                jti: jti.clone(),
                body: set.as_bytes(),
                claims,
            });
        }
    }
    delivered.extend(polled.sent.iter().cloned());

    // Each (decision, stream) under one jti, each jti with one body; only decisions' SETs.
    let mut per_decision: BTreeMap<(String, &str), BTreeSet<&str>> = BTreeMap::new();
    let mut bodies: BTreeMap<&str, BTreeSet<&[u8]>> = BTreeMap::new();
    for s in seen
        .iter()
        .filter(|s| s.claims["events"].get(REVOKED).is_some())
    {
        let txn = s.claims["txn"].as_str().unwrap_or_default().to_string();
        per_decision
            .entry((txn, s.stream))
            .or_default()
            .insert(&s.jti);
        bodies.entry(&s.jti).or_default().insert(s.body);
    }
    for ((txn, stream), jtis) in &per_decision {
        report.expect(jtis.len() == 1, || {
            format!("{txn} to {stream}: {} jtis", jtis.len())
        });
    }
    for (jti, b) in &bodies {
        report.expect(b.len() == 1, || {
            format!("{jti}: {} different bodies", b.len())
        });
    }

    // Nothing acknowledged handed out again.
    for (n, jti, _) in &polled.handed {
        if let Some(acked) = polled.acked.get(jti) {
            report.expect(n <= acked, || {
                format!("{jti}: handed out by poll {n}, after poll {acked} acknowledged it")
            });
        }
    }

    // The disabled stream got no decision's SET, and no answer named it; the paused one got none
    // while paused (each of its deliveries must still end delivered, with the rest). How many it
    // held and sent after is told: a decision whose SET reached `push` while `paused` was paused,
    // and reached `paused` after it was enabled (none, when a fault stopped every decision of
    // the pause).
    let off = first.keys().filter(|(s, _)| *s == "off").count();
    report.expect(off == 0, || format!("the disabled stream got {off} SETs"));
    report.expect(!named.contains(&streams.off), || {
        "a decision listed a SET to the disabled stream".to_string()
    });
    let paused = (pause.paused_ms + GRACE_MS)..pause.resumed_ms;
    let early = (first.iter())
        .filter(|((s, _), at)| *s == "paused" && paused.contains(*at))
        .count();
    report.expect(early == 0, || {
        format!("the paused stream got {early} SETs while paused")
    });
    let held = (first.iter())
        .filter(|((s, txn), _)| *s == "push" && !txn.is_empty())
        .filter(|(_, at)| (pause.paused_ms..pause.resumed_ms).contains(*at))
        .filter(|((_, txn), _)| {
            first
                .get(&("paused", txn.clone()))
                .is_some_and(|at| *at >= pause.resumed_ms)
        })
        .count();
    let ids = [&streams.push, &streams.paused, &streams.off, &streams.poll];
    println!(
        "streams: {pushes} SETs pushed ({} decisions' to a stream), {} handed out by {} polls \
         ({} errors), {} acknowledged, {held} held by the pause and sent after (streams {})",
        first.len(),
        polled.handed.len(),
        polled.polls,
        polled.errors,
        polled.acked.len(),
        ids.map(String::as_str).join(", "),
    );
}
