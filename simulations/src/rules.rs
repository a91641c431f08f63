//! Rules under chaos: the simulated tenant's `sim_swap` playbook steps up a subject ending in an
//! even digit by a rule (with the playbook's own actions), and denies the others by its own
//! decision. Half way through the run the rule changes ([`change`]): every node's config is
//! rewritten so that the rule's decision is `review`, and every node is sent SIGHUP (a node
//! restarted meanwhile reads the new file), until each one's dry run
//! (`POST /v1/playbooks/sim_swap/evaluate`) answers the new decision. Whatever was killed when,
//! every answer of a keyed or keyless `sim_swap` signal names the rule its signal calls for and
//! a decision that rule had while the signal could have been claimed: a key answered before the
//! change began keeps the old decision in every answer after it (a replay answers what was
//! stored, never the rules evaluated again), a key first sent once every node had the new rule
//! gets the new one, and the decision the decisions API holds for each key is the one its
//! clients were answered (a decision recovered after a SIGKILL is the one that was stored). A
//! `port_out` answer names no rule.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::task::JoinHandle;

use crate::clients::{request, ClientOutcome};
use crate::process::IdemProcess;
use crate::report::Report;

/// The rule's name.
pub const RULE: &str = "even-subject";
/// The rule's decision before the change, and after it.
pub const BEFORE: &str = "step_up";
pub const AFTER: &str = "review";

/// The rule's condition and decision, as the config writes them.
fn rule_lines(decision: &str) -> String {
    format!("when = 'signal.subject.matches(\"[02468]$\")'\ndecision = \"{decision}\"\n")
}

/// The `[[rules]]` of the tenant's `sim_swap` playbook, its actions `actions` (the playbook's),
/// the rule's decision the one before the change.
pub fn sim_swap_rules(actions: &str) -> String {
    format!(
        "[[tenants.sim.playbooks.sim_swap.rules]]\nname = \"{RULE}\"\n{}actions = [ {actions} ]\n",
        rule_lines(BEFORE)
    )
}

/// When the rule changed: the configs were about to be rewritten (`began`), and every node
/// answered the new decision in its dry run (`done`, if it ever did).
#[derive(Debug, Clone, Copy)]
pub struct Change {
    pub began: Instant,
    pub done: Option<Instant>,
}

/// After `after`, rewrites each config in `configs` with the rule's new decision (each file
/// replaced whole, so a node starting meanwhile reads one or the other) and sends SIGHUP to
/// every node; when it began, and a task that waits (up to two minutes) until every node at
/// `bases` answers the new decision, and says when (the load goes on meanwhile: a node waiting
/// for its database answers late).
pub async fn change(
    nodes: Arc<Mutex<Vec<IdemProcess>>>,
    configs: Vec<PathBuf>,
    bases: &[String],
    after: Duration,
) -> Result<(Instant, JoinHandle<Option<Instant>>), String> {
    tokio::time::sleep(after).await;
    let began = Instant::now();
    for config in &configs {
        let text = std::fs::read_to_string(config).map_err(|e| e.to_string())?;
        let changed = text.replace(&rule_lines(BEFORE), &rule_lines(AFTER));
        if changed == text {
            return Err(format!("{}: the rule is not in it", config.display()));
        }
        let next = config.with_extension("toml.next");
        std::fs::write(&next, changed).map_err(|e| e.to_string())?;
        std::fs::rename(&next, config).map_err(|e| e.to_string())?;
    }
    for node in nodes.lock().map_err(|_| "poisoned")?.iter_mut() {
        node.reload();
    }
    let bases = bases.to_vec();
    let confirmed = tokio::spawn(async move {
        let http = reqwest::Client::new();
        let deadline = began + Duration::from_secs(120);
        for base in &bases {
            while evaluates(&http, base).await.as_deref() != Some(AFTER) {
                if Instant::now() > deadline {
                    return None;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
        Some(Instant::now())
    });
    Ok((began, confirmed))
}

/// The decision the node at `base` would make now for an even subject's `sim_swap`.
async fn evaluates(http: &reqwest::Client, base: &str) -> Option<String> {
    let answer = http
        .post(format!("{base}/v1/playbooks/sim_swap/evaluate"))
        .timeout(Duration::from_secs(15))
        .header("authorization", "Bearer sk_simulation_key")
        .header("content-type", "application/json")
        .body(json!({"type": "sim_swap", "subject": "+447700900002"}).to_string())
        .send()
        .await
        .ok()?;
    let body: Value = serde_json::from_slice(&answer.bytes().await.ok()?).ok()?;
    body["decision"].as_str().map(str::to_string)
}

/// What the rule check counted, for the run's summary.
#[derive(Debug, Default)]
pub struct Counted {
    /// Keys answered before the change began, retried after it.
    pub replayed_after: usize,
    /// Answers that name the new decision.
    pub new_decisions: usize,
}

/// Checks every answer the clients received against the rule its signal calls for, when it
/// could have been claimed, and each key's stored decision (read through `base`) against what
/// its clients were answered.
pub async fn check(
    base: &str,
    outcome: &ClientOutcome,
    change: &Change,
    report: &mut Report,
) -> Counted {
    let mut counted = Counted::default();
    report.expect(change.done.is_some(), || {
        "the rule change never reached every node".to_string()
    });
    let done = change
        .done
        .unwrap_or(change.began + Duration::from_secs(3600));
    // Per keyed label: its first answer's arrival and its first request's sending.
    let mut first: BTreeMap<&str, (Instant, Instant)> = BTreeMap::new();
    for a in &outcome.answers {
        let e = first.entry(&a.label).or_insert((a.at, a.first_sent));
        e.0 = e.0.min(a.at);
        e.1 = e.1.min(a.first_sent);
    }
    let http = reqwest::Client::new();
    let mut stored_checked = BTreeSet::new();
    for answer in &outcome.answers {
        let Some(job) = outcome.jobs.iter().find(|j| j.label == answer.label) else {
            continue;
        };
        let signal: Value = serde_json::from_str(&job.body).unwrap_or_default();
        let body: Value = serde_json::from_slice(&answer.body).unwrap_or_default();
        let subject = signal["subject"].as_str().unwrap_or_default();
        let even = subject.ends_with(['0', '2', '4', '6', '8']);
        // When the signal's decision was claimed: between these two moments.
        let (claimed_from, claimed_by) = match job.key {
            Some(_) => {
                let (answered, sent) = first
                    .get(answer.label.as_str())
                    .copied()
                    .unwrap_or((answer.at, answer.first_sent));
                (sent, answered)
            }
            None => (answer.sent, answer.at),
        };
        let allowed: &[&str] = if claimed_by < change.began {
            &[BEFORE]
        } else if claimed_from > done {
            &[AFTER]
        } else {
            &[BEFORE, AFTER]
        };
        let (rule, decisions) = match signal["type"].as_str() {
            Some("sim_swap") if even => (Some(RULE), allowed),
            Some("sim_swap") => (None, &["deny"][..]),
            _ => (None, &["review"][..]),
        };
        let decided = body["decision"].as_str().unwrap_or_default();
        report.expect(
            body["rule"].as_str() == rule && decisions.contains(&decided),
            || {
                format!(
                    "{}: decided {decided} by rule {}, its signal calls for {decisions:?} by \
                     {rule:?} (claimed between {} and {} ms from the change)",
                    answer.label,
                    body["rule"],
                    since(claimed_from, change),
                    since(claimed_by, change)
                )
            },
        );
        if rule.is_some() && decided == AFTER {
            counted.new_decisions += 1;
        }
        // The decision stored for the key is the one answered.
        if job.key.is_some() && stored_checked.insert(answer.label.as_str()) {
            let id = body["decision_id"].as_str().unwrap_or_default();
            let url = format!("{base}/v1/decisions/{id}");
            let stored = crate::sources::get_json(&http, &url).await;
            let same = stored["decision"] == body["decision"] && stored["rule"] == body["rule"];
            report.expect(same, || {
                format!(
                    "{}: answered {decided} by {}, the decisions API holds {stored}",
                    answer.label, body["rule"]
                )
            });
        }
    }
    // A retry after the change of every key answered before it: a replay of what was stored.
    let mut replayed = BTreeSet::new();
    for job in outcome.jobs.iter().filter(|j| j.key.is_some()) {
        if !replayed.insert(job.label.as_str()) {
            continue;
        }
        let Some((answered, _)) = first.get(job.label.as_str()) else {
            continue;
        };
        let Some(before) = outcome.answers.iter().find(|a| a.label == job.label) else {
            continue;
        };
        if *answered >= change.began {
            continue;
        }
        let was: Value = serde_json::from_slice(&before.body).unwrap_or_default();
        let now = match request(&http, base, job, 0).send().await {
            Ok(r) if r.status().as_u16() == 201 => r.bytes().await.ok(),
            _ => None,
        };
        let now: Value = now
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        report.expect(
            now["decision_id"] == was["decision_id"]
                && now["decision"] == was["decision"]
                && now["rule"] == was["rule"],
            || {
                format!(
                    "{}: replayed after the rule change as {} ({} by {}), answered {} ({} by \
                     {}) before it",
                    job.label,
                    now["decision_id"],
                    now["decision"],
                    now["rule"],
                    was["decision_id"],
                    was["decision"],
                    was["rule"]
                )
            },
        );
        counted.replayed_after += 1;
    }
    // The change must have been in play: keys decided before it replayed after it, and
    // decisions made by the new rule.
    report.expect(
        counted.replayed_after > 0 && counted.new_decisions > 0,
        || {
            format!(
                "the rule change was not in play: {} keys decided before it replayed after it, {} \
             decisions by the new rule",
                counted.replayed_after, counted.new_decisions
            )
        },
    );
    counted
}

/// Milliseconds from the change to `at` (negative before it).
fn since(at: Instant, change: &Change) -> i128 {
    at.saturating_duration_since(change.began).as_millis() as i128
        - change.began.saturating_duration_since(at).as_millis() as i128
}
