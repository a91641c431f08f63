//! The senders: at-least-once clients. Each job is one signal; a client retries it (after a
//! 409, a 5xx, or a broken connection when idem died) until it gets a 201, as a webhook sender
//! would. Keyed jobs come in several copies of the same key; the first keys are storms whose
//! copies are all sent at once.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idem_schemas::signature::Secret;

use crate::args::RunArgs;
use crate::rng::Rng;
use crate::SIGNING_SECRET;

/// One signal to send until it is answered 201.
#[derive(Debug, Clone)]
pub struct SignalJob {
    /// Echoed in the signal's metadata (`sim`), so callbacks can be traced back to it.
    pub label: String,
    /// The idempotency key, for keyed jobs.
    pub key: Option<String>,
    /// The exact body.
    pub body: String,
}

/// A 201 a client received.
#[derive(Debug, Clone)]
pub struct Created {
    pub label: String,
    pub body: Vec<u8>,
    /// When this copy's first request was sent.
    pub first_sent: Instant,
    /// When the request answered was sent.
    pub sent: Instant,
    /// When the answer came.
    pub at: Instant,
}

/// What the clients saw.
#[derive(Debug, Default)]
pub struct ClientOutcome {
    pub requests: usize,
    pub firsts: usize,
    pub replays: usize,
    pub conflicts: usize,
    pub errors: usize,
    pub answers: Vec<Created>,
    /// Answers that should never happen (422, other 4xx, a job never answered).
    pub unexpected: Vec<String>,
    /// Every job of the plan, for the checker.
    pub jobs: Vec<SignalJob>,
}

/// The jobs of a run: storms first, then the rest shuffled.
pub fn plan(args: &RunArgs, rng: &mut Rng) -> Vec<SignalJob> {
    let body = |label: &str, n: usize, rng: &mut Rng| {
        let kind = if rng.chance(70) {
            "sim_swap"
        } else {
            "port_out"
        };
        format!(r#"{{"type":"{kind}","subject":"+4477009{n:05}","metadata":{{"sim":"{label}"}}}}"#)
    };
    let storms = args.keys.min(5);
    let mut storm_jobs = Vec::new();
    let mut rest = Vec::new();
    for k in 0..args.keys {
        let label = format!("key-{}-{k}", args.seed);
        let job = SignalJob {
            key: Some(label.clone()),
            body: body(&label, k, rng),
            label,
        };
        if k < storms {
            storm_jobs.extend(std::iter::repeat_n(job, args.clients));
        } else {
            let copies = rng.range(2, 6) as usize;
            rest.extend(std::iter::repeat_n(job, copies));
        }
    }
    for n in 0..args.keyless {
        let label = format!("keyless-{}-{n}", args.seed);
        rest.push(SignalJob {
            key: None,
            body: body(&label, 90_000 + n, rng),
            label,
        });
    }
    rng.shuffle(&mut rest);
    storm_jobs.extend(rest);
    storm_jobs
}

/// A signed request for `job`.
pub fn request(
    http: &reqwest::Client,
    base: &str,
    job: &SignalJob,
    attempt: usize,
) -> reqwest::RequestBuilder {
    let id = match &job.key {
        Some(key) => key.clone(),
        None => format!("{}-{attempt}", job.label),
    };
    let ts = idem_schemas::timefmt::now_ms() as i64 / 1000;
    let sig = Secret::parse(SIGNING_SECRET)
        .map(|s| s.sign(&id, ts, job.body.as_bytes()))
        .unwrap_or_default();
    let mut r = http
        .post(format!("{base}/v1/signals"))
        .timeout(Duration::from_secs(15))
        .header("authorization", "Bearer sk_simulation_key")
        .header("content-type", "application/json")
        .header("webhook-id", id)
        .header("webhook-timestamp", ts.to_string())
        .header("webhook-signature", sig)
        .body(job.body.clone());
    if let Some(key) = &job.key {
        r = r.header("idempotency-key", key);
    }
    r
}

/// Runs the plan with `clients` concurrent clients, each pausing up to `think` between jobs;
/// each request goes to one of `bases` (the nodes) at random, so a key's copies spread over them.
pub async fn run(
    bases: &[String],
    plan: Vec<SignalJob>,
    clients: usize,
    seed: u64,
    think: Duration,
) -> ClientOutcome {
    let jobs = plan.clone();
    let queue = Arc::new(Mutex::new(VecDeque::from(plan)));
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (queue, bases) = (queue.clone(), bases.to_vec());
        let mut rng = Rng::new(seed ^ (c as u64 + 1).wrapping_mul(0x1234_5678_9abc));
        tasks.push(tokio::spawn(async move {
            let http = reqwest::Client::new();
            let mut out = ClientOutcome::default();
            loop {
                let next = queue.lock().map(|mut q| q.pop_front()).unwrap_or(None);
                let Some(job) = next else { break };
                send_until_answered(&http, &bases, &job, &mut rng, &mut out).await;
                let pause = rng.range(0, 2 * think.as_millis() as u64 + 1);
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
            out
        }));
    }
    let mut total = ClientOutcome {
        jobs,
        ..ClientOutcome::default()
    };
    for t in tasks {
        if let Ok(o) = t.await {
            total.requests += o.requests;
            total.firsts += o.firsts;
            total.replays += o.replays;
            total.conflicts += o.conflicts;
            total.errors += o.errors;
            total.answers.extend(o.answers);
            total.unexpected.extend(o.unexpected);
        }
    }
    total
}

async fn send_until_answered(
    http: &reqwest::Client,
    bases: &[String],
    job: &SignalJob,
    rng: &mut Rng,
    out: &mut ClientOutcome,
) {
    let first_sent = Instant::now();
    let deadline = first_sent + Duration::from_secs(120);
    let mut attempt = 0;
    while Instant::now() < deadline {
        attempt += 1;
        out.requests += 1;
        let sent = Instant::now();
        let base = &bases[rng.range(0, bases.len() as u64) as usize];
        match request(http, base, job, attempt).send().await {
            Ok(r) => {
                let status = r.status().as_u16();
                let replayed = r.headers().get("idempotent-replayed").is_some();
                let body = r.bytes().await.map(|b| b.to_vec()).unwrap_or_default();
                match status {
                    201 => {
                        if replayed {
                            out.replays += 1;
                        } else {
                            out.firsts += 1;
                        }
                        out.answers.push(Created {
                            label: job.label.clone(),
                            body,
                            first_sent,
                            sent,
                            at: Instant::now(),
                        });
                        return;
                    }
                    409 => out.conflicts += 1,
                    500..=599 => out.errors += 1,
                    other => {
                        out.unexpected.push(format!(
                            "{}: unexpected {other}: {}",
                            job.label,
                            String::from_utf8_lossy(&body)
                        ));
                        return;
                    }
                }
            }
            Err(_) => out.errors += 1,
        }
        tokio::time::sleep(Duration::from_millis(rng.range(30, 250))).await;
    }
    out.unexpected
        .push(format!("{}: never answered 201", job.label));
}
