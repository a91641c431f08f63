//! Playbooks: how a signal becomes a decision. The tenant's playbook for the signal's type gives
//! the verdict and the callbacks; this module fixes everything about them at once (the decision
//! id, each callback's id and its envelope bytes with their timestamp), so that whatever runs
//! again later sends exactly the same thing.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use idem_schemas::timefmt::rfc3339_millis;
use idem_schemas::{CallbackData, CallbackEnvelope, Decision, PlannedDelivery, Verdict};
use serde::Deserialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The most actions one playbook may have (each is a callback per decision).
pub const MAX_ACTIONS: usize = 16;

/// A playbook: what a signal type becomes (`[tenants.<t>.playbooks.<type>]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Playbook {
    /// The verdict.
    pub decision: Verdict,
    /// The callbacks, in order.
    pub actions: Vec<Action>,
    /// Within this long after a decision for a subject, further signals of this type for that
    /// subject make no new decision: they get the first one's response.
    pub once_per_subject: Option<Duration>,
}

/// One callback of a playbook.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Action {
    /// Its name, unique in the playbook.
    pub name: String,
    /// Where it is POSTed.
    pub url: String,
}

/// A tenant's playbooks, by signal type.
pub type Playbooks = HashMap<String, Arc<Playbook>>;

/// What the playbook needs to know about the signal.
pub struct Signal<'a> {
    /// The tenant's name.
    pub tenant: &'a str,
    /// The signal type (the playbook's key).
    pub signal_type: &'a str,
    /// The source it came from, if any.
    pub source: Option<&'a str>,
    /// Keyed digest of the subject.
    pub subject_hash: String,
    /// The signal's metadata, echoed in every callback.
    pub metadata: Map<String, Value>,
}

/// The delivery id (and `webhook-id`) of `action` in decision `decision_id`: derived, so it is
/// the same wherever and however often it is computed for this claim. It starts with the
/// decision id's time-ordered part (a UUIDv7's first 16 hex digits), so deliveries sort by
/// creation time and the store's delivery trees grow at one end rather than at random places.
pub fn delivery_id(decision_id: &str, action: &str) -> String {
    let uuid = decision_id.strip_prefix("dec_").unwrap_or(decision_id);
    let time_part = uuid.get(..16).unwrap_or(uuid);
    let mut h = Sha256::new();
    h.update(decision_id.as_bytes());
    h.update([0]);
    h.update(action.as_bytes());
    format!(
        "msg_{time_part}{}",
        &idem_schemas::lower_hex(&h.finalize()[..8])
    )
}

/// Applies `playbook` to `signal` at `now_ms`.
pub fn decide(
    playbook: &Playbook,
    signal: Signal<'_>,
    now_ms: u64,
) -> Result<Decision, serde_json::Error> {
    let id = format!("dec_{}", uuid::Uuid::now_v7().simple());
    let timestamp = rfc3339_millis(now_ms);
    let deliveries = playbook
        .actions
        .iter()
        .map(|action| {
            let envelope = CallbackEnvelope {
                event_type: format!("decision.{}", playbook.decision.as_str()),
                timestamp: timestamp.clone(),
                data: CallbackData {
                    tenant: signal.tenant.to_string(),
                    decision_id: id.clone(),
                    decision: playbook.decision,
                    action: action.name.clone(),
                    signal_type: signal.signal_type.to_string(),
                    subject_hash: signal.subject_hash.clone(),
                    metadata: signal.metadata.clone(),
                },
            };
            Ok(PlannedDelivery {
                id: delivery_id(&id, &action.name),
                action: action.name.clone(),
                url: action.url.clone(),
                body: serde_json::to_vec(&envelope)?,
            })
        })
        .collect::<Result<Vec<_>, serde_json::Error>>()?;
    Ok(Decision {
        id,
        tenant: signal.tenant.to_string(),
        signal_type: signal.signal_type.to_string(),
        source: signal.source.map(str::to_string),
        verdict: playbook.decision,
        subject_hash: signal.subject_hash,
        created_at_ms: now_ms,
        deliveries,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_schemas::Verdict;

    #[test]
    fn fixes_ids_and_envelopes() {
        let playbook = Playbook {
            decision: Verdict::StepUp,
            actions: vec![
                Action {
                    name: "lock".into(),
                    url: "http://127.0.0.1:1/lock".into(),
                },
                Action {
                    name: "case".into(),
                    url: "http://127.0.0.1:1/case".into(),
                },
            ],
            once_per_subject: None,
        };
        let mut metadata = Map::new();
        metadata.insert("risk".into(), Value::from(97));
        let signal = Signal {
            tenant: "acme",
            signal_type: "sim_swap",
            source: None,
            subject_hash: "abc".into(),
            metadata,
        };
        let d = decide(&playbook, signal, 1_795_888_472_123).expect("decide");
        assert!(d.id.starts_with("dec_"));
        assert_eq!(d.deliveries.len(), 2);
        assert_eq!(d.deliveries[0].id, delivery_id(&d.id, "lock"));
        assert_ne!(d.deliveries[0].id, d.deliveries[1].id);
        let env: CallbackEnvelope = serde_json::from_slice(&d.deliveries[1].body).expect("json");
        assert_eq!(env.event_type, "decision.step_up");
        assert_eq!(env.timestamp, "2026-11-28T17:54:32.123Z");
        assert_eq!(env.data.action, "case");
        assert_eq!(env.data.decision_id, d.id);
        assert_eq!(env.data.metadata["risk"], 97);
    }

    #[test]
    fn delivery_ids_sort_by_decision_time_and_differ_per_action() {
        let earlier = "dec_0193a1b2c3d47000b000000000000001";
        let later = "dec_0193a1b2c3d57000a000000000000000";
        assert!(delivery_id(earlier, "lock") < delivery_id(later, "alert"));
        assert!(delivery_id(earlier, "lock").starts_with("msg_0193a1b2c3d47000"));
        assert_ne!(delivery_id(earlier, "lock"), delivery_id(earlier, "alert"));
        assert_eq!(delivery_id(earlier, "lock").len(), "msg_".len() + 32);
    }
}
