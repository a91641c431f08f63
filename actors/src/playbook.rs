//! Playbooks: how a signal becomes a decision. The tenant's playbook for the signal's type gives
//! the verdict and the actions (callbacks, and SETs to Shared Signals streams, see `set`); this
//! module fixes everything about them at once (the decision id, each delivery's id and its bytes
//! with their timestamp), so that whatever runs again later sends exactly the same thing. A
//! playbook with rules (see `rules`) decides by the first that matches, with its verdict and
//! actions, and by its own otherwise.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use idem_schemas::timefmt::rfc3339_millis;
use idem_schemas::{
    CallbackData, CallbackEnvelope, Decision, PlannedDelivery, SignalRequest, Stream, TraceContext,
    Verdict,
};
use ring::digest::{Context, SHA256};
use serde_json::{Map, Value};

use crate::action::{Action, Target};
use crate::digest::Digester;
use crate::rules::{self, Counts, Input, Rule, SourceOf};
use crate::seal::Sealer;
use crate::set::{self, MakeSetError, SetContext, SetIssuer};
use crate::trace;

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
    /// Its rules, in order: the first whose `when` is true decides instead.
    pub rules: Vec<Rule>,
}

impl Playbook {
    /// Whether any of its actions, or its rules' actions, is a SET.
    pub fn sends_sets(&self) -> bool {
        self.all_actions()
            .any(|a| matches!(a.target, Target::Set(_)))
    }

    /// Its own actions and its rules'.
    pub fn all_actions(&self) -> impl Iterator<Item = &Action> {
        let of_rules = self.rules.iter().flat_map(|r| &r.actions);
        self.actions.iter().chain(of_rules)
    }

    /// What its rules count of the subject's history, each once.
    pub fn history(&self) -> Vec<rules::History> {
        rules::history_of(&self.rules)
    }

    /// The verdict, the actions and the rule that decides `input` with the history `counts`
    /// (what [`Self::history`] names, counted), and the rules that failed.
    pub fn choose(&self, input: Input<'_>, counts: &Counts) -> Choice<'_> {
        let evaluation = rules::evaluate(&self.rules, input, counts);
        let rule = evaluation.matched.and_then(|n| self.rules.get(n));
        Choice {
            verdict: rule.map_or(self.decision, |r| r.decision),
            actions: rule.map_or(&self.actions, |r| &r.actions),
            rule: rule.map(|r| r.name.as_str()),
            errors: evaluation.errors,
        }
    }
}

/// What a playbook decides for one signal.
#[derive(Debug)]
pub struct Choice<'a> {
    /// The verdict.
    pub verdict: Verdict,
    /// The actions.
    pub actions: &'a [Action],
    /// The rule that decided; `None`: the playbook's default.
    pub rule: Option<&'a str>,
    /// The rules whose evaluation failed.
    pub errors: Vec<idem_schemas::RuleError>,
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
    pub source: Option<&'a SourceOf>,
    /// The subject, as the signal names it (only a SET carries it, sealed).
    pub subject: &'a str,
    /// The keyed digests of subjects.
    pub digester: &'a Digester,
    /// The signal's metadata, echoed in every callback.
    pub metadata: Map<String, Value>,
    /// The trace the decision is made in, if tracing is on.
    pub trace: Option<TraceContext>,
}

/// The delivery id (and `webhook-id`) of `action` in decision `decision_id`: derived, so it is
/// the same wherever and however often it is computed for this claim. It starts with the
/// decision id's time-ordered part (a UUIDv7's first 16 hex digits), so deliveries sort by
/// creation time and the store's delivery trees grow at one end rather than at random places.
pub fn delivery_id(decision_id: &str, action: &str) -> String {
    let uuid = decision_id.strip_prefix("dec_").unwrap_or(decision_id);
    let time_part = uuid.get(..16).unwrap_or(uuid);
    let mut h = Context::new(&SHA256);
    h.update(decision_id.as_bytes());
    h.update(&[0]);
    h.update(action.as_bytes());
    format!(
        "msg_{time_part}{}",
        &idem_schemas::lower_hex(&h.finish().as_ref()[..8])
    )
}

/// Why a decision could not be made.
#[derive(Debug, thiserror::Error)]
pub enum DecideError {
    /// A callback's envelope could not be serialised.
    #[error("cannot serialise a callback: {0}")]
    Envelope(#[from] serde_json::Error),
    /// A SET could not be made.
    #[error(transparent)]
    Set(#[from] MakeSetError),
    /// The playbook has a `set` action and the tenant no transmitter.
    #[error("a set action, and no transmitter to send it")]
    NoTransmitter,
    /// The playbook sends SETs, and the tenant's streams could not be read.
    #[error("the streams cannot be read: {0}")]
    Streams(String),
    /// The playbook's rules count the subject's history, and it could not be read.
    #[error("the subject's history cannot be read: {0}")]
    History(String),
}

/// Everything a signal's decision needs but the tenant's streams, owned: what its claim decides
/// with, only if the signal wins it.
pub struct Decider {
    /// The tenant's playbook for the signal's type.
    pub playbook: Arc<Playbook>,
    /// The tenant's name.
    pub tenant: String,
    /// The source the signal came from, if any.
    pub source: Option<SourceOf>,
    /// The signal.
    pub signal: SignalRequest,
    /// The tenant's transmitter, if it is one: where the playbook's `set` actions go.
    pub transmitter: Option<Arc<SetIssuer>>,
    /// The claim's span, the decision's trace (when tracing is on).
    pub trace: Option<TraceContext>,
}

impl Decider {
    /// Whether the decision reads the tenant's streams: it sends SETs, as a transmitter.
    pub fn reads_streams(&self) -> bool {
        self.transmitter.is_some() && self.playbook.sends_sets()
    }

    /// Whether the decision reads the subject's history: its playbook's rules count it.
    pub fn reads_history(&self) -> bool {
        self.playbook
            .rules
            .iter()
            .any(|r| !r.when.history().is_empty())
    }

    /// The keyed digest of the signal's subject, under which its history is kept.
    pub fn subject_hash(&self, digester: &Digester) -> String {
        digester.subject(&self.tenant, &self.signal.subject)
    }

    /// The decision, made at `now_ms` with the subject's history `counts` (see
    /// [`Playbook::history`]), its SETs (if it sends any) to `streams` as they are now, sealed
    /// by `sealer`; in a span of its own under the claim's.
    pub fn decide(
        self,
        digester: &Digester,
        sealer: &Sealer,
        streams: &[Stream],
        counts: &Counts,
        now_ms: u64,
    ) -> Result<Decision, DecideError> {
        let span = crate::trace_span!(
            "playbook",
            idem.signal_type = %self.signal.signal_type,
            idem.verdict = self.playbook.decision.as_str(),
            idem.decision_id = tracing::field::Empty,
            idem.deliveries = tracing::field::Empty,
        );
        trace::parent(&span, self.trace);
        let _in = span.enter();
        let sets = self.transmitter.as_deref().map(|transmitter| SetContext {
            transmitter,
            streams,
            sealer,
        });
        let signal = Signal {
            tenant: &self.tenant,
            signal_type: &self.signal.signal_type,
            source: self.source.as_ref(),
            subject: &self.signal.subject,
            digester,
            metadata: self.signal.metadata.unwrap_or_default(),
            trace: self.trace,
        };
        let decision = decide(&self.playbook, signal, sets.as_ref(), counts, now_ms)?;
        span.record("idem.decision_id", decision.id.as_str());
        span.record("idem.deliveries", decision.deliveries.len());
        Ok(decision)
    }
}

/// Applies `playbook` to `signal` at `now_ms` with the subject's history `counts`; its `set`
/// actions go to the streams of `sets`. A rule whose evaluation failed is counted.
pub fn decide(
    playbook: &Playbook,
    signal: Signal<'_>,
    sets: Option<&SetContext<'_>>,
    counts: &Counts,
    now_ms: u64,
) -> Result<Decision, DecideError> {
    let id = format!("dec_{}", uuid::Uuid::now_v7().simple());
    let timestamp = rfc3339_millis(now_ms);
    let subject_hash = signal.digester.subject(signal.tenant, signal.subject);
    let input = Input {
        signal_type: signal.signal_type,
        subject: signal.subject,
        metadata: &signal.metadata,
        source: signal.source,
        now_ms,
    };
    let choice = playbook.choose(input, counts);
    for error in &choice.errors {
        crate::metrics::rule_failed(signal.tenant, signal.signal_type, &error.rule);
    }
    let mut deliveries = Vec::with_capacity(choice.actions.len());
    for action in choice.actions {
        match &action.target {
            Target::Callback(url) => {
                let envelope = CallbackEnvelope {
                    event_type: format!("decision.{}", choice.verdict.as_str()),
                    timestamp: timestamp.clone(),
                    data: CallbackData {
                        tenant: signal.tenant.to_string(),
                        decision_id: id.clone(),
                        decision: choice.verdict,
                        rule: choice.rule.map(str::to_string),
                        action: action.name.clone(),
                        signal_type: signal.signal_type.to_string(),
                        subject_hash: subject_hash.clone(),
                        metadata: signal.metadata.clone(),
                    },
                };
                deliveries.push(PlannedDelivery {
                    id: delivery_id(&id, &action.name),
                    action: action.name.clone(),
                    url: url.clone(),
                    body: serde_json::to_vec(&envelope)?,
                    key: None,
                    token: None,
                });
            }
            Target::Set(set_action) => {
                let context = sets.ok_or(DecideError::NoTransmitter)?;
                let of = set::Of {
                    tenant: signal.tenant,
                    decision_id: &id,
                    subject: signal.subject,
                    digester: signal.digester,
                    now_ms,
                };
                deliveries.extend(set::plan(context, &of, &action.name, set_action, |key| {
                    delivery_id(&id, key)
                })?);
            }
        }
    }
    Ok(Decision {
        id,
        tenant: signal.tenant.to_string(),
        signal_type: signal.signal_type.to_string(),
        source: signal.source.map(|s| s.name.clone()),
        verdict: choice.verdict,
        subject_hash,
        created_at_ms: now_ms,
        deliveries,
        trace: signal.trace,
        rule: choice.rule.map(str::to_string),
        rule_errors: choice.errors,
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
                Action::callback("lock", "http://127.0.0.1:1/lock"),
                Action::callback("case", "http://127.0.0.1:1/case"),
            ],
            once_per_subject: None,
            rules: Vec::new(),
        };
        let mut metadata = Map::new();
        metadata.insert("risk".into(), Value::from(97));
        let signal = Signal {
            tenant: "acme",
            signal_type: "sim_swap",
            source: None,
            subject: "+15550001",
            digester: &Digester::new(b"a key secret for the playbook test"),
            metadata,
            trace: None,
        };
        let d = decide(&playbook, signal, None, &Counts::new(), 1_795_888_472_123).expect("decide");
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
