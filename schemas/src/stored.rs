//! What the claim log keeps on disk. A claim's log is a sequence of `ClaimEvent`s: `Claimed`
//! (with the decision fixed: its id and every callback body), then `Dispatched` (the recovery
//! point: each action's outcome and the response built from them, replayed byte for byte), then
//! `Completed` (the response was handed out).
//! These types are encoded by the actors' codec (bincode), so they avoid serde features bincode
//! cannot carry (untagged enums, skipped fields, `serde_json::Value`). Ids and digests are
//! stored as the bytes behind their hex (see [`hex_text`]); bodies as bytes (`serde_bytes`),
//! read in one copy rather than byte by byte, in the same encoding as a list of bytes.

use serde::{Deserialize, Serialize};

use crate::trace::TraceContext;
use crate::wire::{
    ActionResult, ActionStatus, DecisionResponse, DeliveryStatus, RuleError, Verdict,
};

/// A decision as fixed when its claim is made: whatever runs after a crash sends these bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Decision {
    /// `dec_…`, unique per claim.
    #[serde(with = "hex_text")]
    pub id: String,
    /// The tenant's name.
    pub tenant: String,
    /// The signal type that selected the playbook.
    pub signal_type: String,
    /// The source the signal came from (its name under the tenant's sources); `None` for a
    /// signal posted to `POST /v1/signals`.
    pub source: Option<String>,
    /// The playbook's verdict.
    pub verdict: Verdict,
    /// Keyed digest of the subject (hex).
    #[serde(with = "hex_text")]
    pub subject_hash: String,
    /// When the decision was made, unix milliseconds.
    pub created_at_ms: u64,
    /// One callback per playbook action, in order.
    pub deliveries: Vec<PlannedDelivery>,
    /// The trace the decision was made in (its claim's span), when tracing is on: every
    /// attempt of its deliveries belongs to it.
    #[serde(deserialize_with = "crate::trace::stored_field")]
    pub trace: Option<TraceContext>,
    /// The playbook's rule that decided; `None`: the playbook's default.
    #[serde(deserialize_with = "rules_field")]
    pub rule: Option<String>,
    /// The rules whose evaluation failed (they did not match).
    #[serde(deserialize_with = "rules_field")]
    pub rule_errors: Vec<RuleError>,
}

/// One callback of a decision: where it goes and the exact bytes it sends.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PlannedDelivery {
    /// `msg_…`: the delivery id and its `webhook-id`, derived from the decision and action.
    #[serde(with = "hex_text")]
    pub id: String,
    /// The playbook action's name.
    pub action: String,
    /// Its destination: the action's URL, or for a Security Event Token the stream it goes to,
    /// `ssf:{stream_id}` (see [`stream_of`]).
    pub url: String,
    /// What it sends: the serialised `CallbackEnvelope`, or a SET sealed at rest under a key
    /// of its own.
    #[serde(with = "serde_bytes")]
    pub body: Vec<u8>,
    /// A SET's own key, wrapped: while the decision is being made it rides with it to the
    /// write that starts the claim, which keeps it beside the claim, never in its log, so that
    /// erasing it when the delivery ends leaves the SET unreadable. Never stored with the
    /// decision (`None` once read back, and for a callback).
    #[serde(skip)]
    pub key: Option<Vec<u8>>,
    /// A SET in clear, riding with its decision while it is made, for the attempt made
    /// inside the request: it sends what was sealed without opening it. Never stored (every
    /// later attempt opens the stored bytes).
    #[serde(skip)]
    pub token: Option<std::sync::Arc<str>>,
}

/// The scheme of a destination that is a Shared Signals stream rather than a URL.
pub const STREAM_SCHEME: &str = "ssf:";

/// The stream a delivery's destination names, if it is a SET's.
pub fn stream_of(destination: &str) -> Option<&str> {
    destination.strip_prefix(STREAM_SCHEME)
}

/// The claim itself: who holds it, until when, for which payload, and its decision.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Claim {
    /// Keyed digest of the canonical request body; a retry must match it.
    pub fingerprint: [u8; 32],
    /// The process epoch of the holder; a claim from an older epoch has no live holder.
    pub holder: u64,
    /// When the claim was made, unix milliseconds.
    pub claimed_at_ms: u64,
    /// When the key is free again, unix milliseconds.
    pub expires_at_ms: u64,
    /// The decision, fixed now.
    pub decision: Decision,
    /// For a playbook decided once per subject: the subject's claim, which runs the decision's
    /// actions unless another decision for the subject holds it (then its response is this
    /// key's).
    pub subject: Option<SubjectLink>,
}

/// The claim on a subject that a keyed claim's decision goes through (`once_per_subject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SubjectLink {
    /// The digest the subject's claim is known by.
    pub digest: [u8; 32],
    /// How long the subject's claim holds, in milliseconds.
    pub window_ms: u64,
}

/// One attempt at a callback and what came of it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AttemptRecord {
    /// When the attempt started, unix milliseconds.
    pub at_ms: u64,
    /// The receiver's status code, when it answered.
    pub code: Option<u16>,
    /// The network error or deadline, when it did not.
    pub error: Option<String>,
    /// How long the attempt took.
    pub latency_ms: u64,
    /// What a 429 or 503 asked for in `Retry-After`, in milliseconds.
    pub retry_after_ms: Option<u64>,
}

/// The outcome of one action's inline attempt.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ActionOutcome {
    /// The delivery's id.
    #[serde(with = "hex_text")]
    pub delivery_id: String,
    /// Delivered, queued for retry, or failed.
    pub status: ActionStatus,
    /// The attempt.
    pub attempt: AttemptRecord,
}

/// A response as it was sent, for replay byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StoredResponse {
    /// HTTP status.
    pub status: u16,
    /// The body's exact bytes.
    #[serde(with = "serde_bytes")]
    pub body: Vec<u8>,
    /// The trace of the decision it answers with, named in a `traceresponse` header beside
    /// the bytes (never in them).
    #[serde(deserialize_with = "crate::trace::stored_field")]
    pub trace: Option<TraceContext>,
}

/// An event of a claim's log.
// A log holds one `Claimed` and at most two small events after it, moved a handful of times:
// boxing the claim would cost an allocation per claim to save a few bytes of the others.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ClaimEvent {
    /// The key is claimed and the decision fixed (`in_flight`).
    Claimed(Claim),
    /// The actions ran: the recovery point (`dispatched`).
    Dispatched {
        /// Each action's outcome.
        outcomes: Vec<ActionOutcome>,
        /// The response built from them, the bytes every answer for this claim carries.
        response: StoredResponse,
    },
    /// The response was handed out (`completed`).
    Completed,
}

impl ClaimEvent {
    /// The state the event leads to, as the contract names it.
    pub fn name(&self) -> &'static str {
        match self {
            ClaimEvent::Claimed(_) => "claimed",
            ClaimEvent::Dispatched { .. } => "dispatched",
            ClaimEvent::Completed => "completed",
        }
    }
}

impl Decision {
    /// The response to a first processing of this decision, given its actions' outcomes.
    pub fn response(&self, outcomes: &[ActionOutcome]) -> DecisionResponse {
        let actions = self
            .deliveries
            .iter()
            .map(|d| ActionResult {
                name: d.action.clone(),
                stream_id: stream_of(&d.url).map(str::to_string),
                delivery_id: d.id.clone(),
                status: outcomes
                    .iter()
                    .find(|o| o.delivery_id == d.id)
                    .map_or(ActionStatus::Queued, |o| o.status),
            })
            .collect();
        DecisionResponse {
            decision_id: self.id.clone(),
            signal_type: self.signal_type.clone(),
            decision: self.verdict,
            rule: self.rule.clone(),
            subject_hash: self.subject_hash.clone(),
            actions,
            created_at: crate::timefmt::rfc3339_millis(self.created_at_ms),
        }
    }
}

/// A decision as kept for lookup (`decisions.retention`), keyless ones too: what its `201` body
/// said, less each action's status, which its delivery keeps.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DecisionRecord {
    /// `dec_…`.
    #[serde(with = "hex_text")]
    pub id: String,
    /// The tenant's name.
    pub tenant: String,
    /// The signal type.
    pub signal_type: String,
    /// The source the signal came from, if any.
    pub source: Option<String>,
    /// The verdict.
    pub verdict: Verdict,
    /// Keyed digest of the subject (hex).
    #[serde(with = "hex_text")]
    pub subject_hash: String,
    /// When the decision was made, unix milliseconds.
    pub created_at_ms: u64,
    /// When the record is forgotten, unix milliseconds.
    pub expires_at_ms: u64,
    /// Each action's name and delivery id, in playbook order.
    pub actions: Vec<RecordedAction>,
    /// The trace the decision was made in, when tracing was on.
    #[serde(deserialize_with = "crate::trace::stored_field")]
    pub trace: Option<TraceContext>,
    /// The playbook's rule that decided; `None`: the playbook's default.
    #[serde(deserialize_with = "rules_field")]
    pub rule: Option<String>,
    /// The rules whose evaluation failed (they did not match).
    #[serde(deserialize_with = "rules_field")]
    pub rule_errors: Vec<RuleError>,
}

/// One action of a kept decision.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RecordedAction {
    /// The playbook action's name.
    pub name: String,
    /// Its delivery's id.
    #[serde(with = "hex_text")]
    pub delivery_id: String,
}

impl DecisionRecord {
    /// The record of `decision`, kept for `retention` after it was made.
    pub fn kept_for(decision: &Decision, retention: std::time::Duration) -> Self {
        let expires_at_ms = decision
            .created_at_ms
            .saturating_add(retention.as_millis() as u64);
        DecisionRecord {
            id: decision.id.clone(),
            tenant: decision.tenant.clone(),
            signal_type: decision.signal_type.clone(),
            source: decision.source.clone(),
            verdict: decision.verdict,
            subject_hash: decision.subject_hash.clone(),
            created_at_ms: decision.created_at_ms,
            expires_at_ms,
            actions: decision
                .deliveries
                .iter()
                .map(|d| RecordedAction {
                    name: d.action.clone(),
                    delivery_id: d.id.clone(),
                })
                .collect(),
            trace: decision.trace,
            rule: decision.rule.clone(),
            rule_errors: decision.rule_errors.clone(),
        }
    }
}

/// What a delivery is, stored once when it is created: the envelope bytes every attempt sends.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DeliveryRecord {
    /// `msg_…`, also the `webhook-id`.
    #[serde(with = "hex_text")]
    pub id: String,
    /// The tenant whose callback this is.
    pub tenant: String,
    /// The decision it belongs to.
    #[serde(with = "hex_text")]
    pub decision_id: String,
    /// The playbook action.
    pub action: String,
    /// Where it is POSTed.
    pub url: String,
    /// The envelope, byte for byte.
    #[serde(with = "serde_bytes")]
    pub body: Vec<u8>,
    /// When the delivery was created, unix milliseconds.
    pub created_at_ms: u64,
    /// When a final delivery is forgotten (its claim's window), unix milliseconds.
    pub expires_at_ms: u64,
    /// The trace of its decision, which each of its attempts belongs to.
    #[serde(deserialize_with = "crate::trace::stored_field")]
    pub trace: Option<TraceContext>,
}

/// Where a delivery goes after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum NextStep {
    /// Try again at this time (unix milliseconds).
    RetryAt(u64),
    /// The receiver answered 2xx.
    Delivered,
    /// The receiver answered with a terminal status.
    Failed,
    /// Every attempt of the series failed with a retryable error.
    Dead,
    /// A SET's stream was disabled: it is not sent.
    Dropped,
}

impl NextStep {
    /// The status this step leaves the delivery in.
    pub fn status(self) -> DeliveryStatus {
        match self {
            NextStep::RetryAt(_) => DeliveryStatus::Queued,
            NextStep::Delivered => DeliveryStatus::Delivered,
            NextStep::Failed => DeliveryStatus::Failed,
            NextStep::Dead => DeliveryStatus::Dead,
            NextStep::Dropped => DeliveryStatus::Dropped,
        }
    }

    /// When the next attempt is due, if one is.
    pub fn due_ms(self) -> Option<u64> {
        match self {
            NextStep::RetryAt(at) => Some(at),
            _ => None,
        }
    }
}

/// An event of a delivery's log.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DeliveryEvent {
    /// The delivery exists; its bytes are fixed.
    Created(DeliveryRecord),
    /// An attempt was answered (or failed), and what follows.
    Answered {
        /// The attempt.
        attempt: AttemptRecord,
        /// What comes next.
        next: NextStep,
    },
    /// An operator asked for a new series of attempts, due at once.
    Redelivered {
        /// When, unix milliseconds.
        at_ms: u64,
    },
    /// No attempt was made: its endpoint is open or probing, so it waits, using up none of its
    /// attempts.
    Held {
        /// When it is due again, unix milliseconds.
        until_ms: u64,
    },
    /// Its endpoint stayed open for `max_hold` since it was first held: dead, with no attempt
    /// made.
    HeldTooLong {
        /// When, unix milliseconds.
        at_ms: u64,
    },
}

/// A Shared Signals stream a receiver made at its tenant's transmitter (SSF §8.1.1), as stored:
/// what the receiver chose and what has happened to it. What the transmitter derives (`iss`,
/// `aud`, `events_delivered`, a poll stream's URL) is not stored: it follows the configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stream {
    /// `st_…`: random, unique in the tenant.
    pub id: String,
    /// The receiver (its OAuth `client_id`) that made it and alone sees it.
    pub receiver: String,
    /// Bumped by every change: a change is written only over the version it was made from.
    pub version: u64,
    /// When it was made, unix milliseconds.
    pub created_at_ms: u64,
    /// Pushed to the receiver (RFC 8935) or polled by it (RFC 8936).
    pub method: StreamMethod,
    /// Where a push stream's SETs go.
    pub endpoint_url: Option<String>,
    /// A push stream's `authorization_header`, sealed under a key derived from `key_secret`.
    pub authorization: Option<Vec<u8>>,
    /// The event types the receiver asked for.
    pub events_requested: Vec<String>,
    /// The receiver's description.
    pub description: Option<String>,
    /// Enabled, paused or disabled (SSF §8.1.2).
    pub state: StreamState,
    /// Why it was last set, as the receiver said.
    pub reason: Option<String>,
    /// Keyed digests of the subjects removed from it (every other subject is included).
    pub removed_subjects: Vec<[u8; 32]>,
    /// When a verification was last asked for, unix milliseconds.
    pub verified_at_ms: Option<u64>,
}

/// How a stream's SETs reach its receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StreamMethod {
    /// `urn:ietf:rfc:8935`: POSTed to the receiver.
    Push,
    /// `urn:ietf:rfc:8936`: the receiver polls for them.
    Poll,
}

/// A stream's status (SSF §8.1.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StreamState {
    /// SETs are sent.
    Enabled,
    /// SETs are held, then sent once enabled.
    Paused,
    /// SETs are neither sent nor held.
    Disabled,
}

/// Ids and digests as they are stored: the bytes behind their lowercase hex, after a `dec_` or
/// `msg_` prefix if they have one (every id and digest idem makes), or else the text as it is.
/// A 64-digit subject digest takes 34 bytes instead of 65, an id 19 instead of 37: the claim log
/// is most of what idem writes, and sled writes each byte of it several times over (rewriting
/// and splitting the leaves that hold it).
pub mod hex_text {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    /// The prefixes an id may have, by their stored number.
    const PREFIXES: [&str; 3] = ["", "dec_", "msg_"];

    #[derive(Serialize, Deserialize)]
    enum Stored {
        /// `PREFIXES[prefix]` followed by `bytes` in lowercase hex.
        Hex { prefix: u8, bytes: Vec<u8> },
        /// Anything else, as is.
        Text(String),
    }

    /// [`Stored`] as it is written, borrowed: the same variants, encoded the same way.
    #[derive(Serialize)]
    enum Writing<'a> {
        Hex { prefix: u8, bytes: &'a [u8] },
        Text(&'a str),
    }

    /// The bytes an id or digest packs into, on the stack (one of idem's is at most 32).
    const PACKED: usize = 64;

    fn pack(text: &str) -> Option<Stored> {
        let (prefix, hex) = PREFIXES
            .iter()
            .enumerate()
            .rev()
            .find_map(|(n, p)| Some((n as u8, text.strip_prefix(p)?)))?;
        // Lowercase only, so that reading it back gives the same text.
        let bytes = crate::hex::decode_lower(hex).filter(|b| !b.is_empty())?;
        Some(Stored::Hex { prefix, bytes })
    }

    /// Stores `text` (serde `with`).
    pub fn serialize<S: Serializer>(text: &str, serializer: S) -> Result<S::Ok, S::Error> {
        let mut packed = [0u8; PACKED];
        if let Some((prefix, bytes)) = pack_into(text, &mut packed) {
            return Writing::Hex { prefix, bytes }.serialize(serializer);
        }
        match pack(text) {
            Some(Stored::Hex { prefix, bytes }) => Writing::Hex {
                prefix,
                bytes: &bytes,
            }
            .serialize(serializer),
            _ => Writing::Text(text).serialize(serializer),
        }
    }

    /// [`pack`] into `buffer`, when what `text` packs into fits it.
    fn pack_into<'b>(text: &str, buffer: &'b mut [u8; PACKED]) -> Option<(u8, &'b [u8])> {
        let (prefix, hex) = PREFIXES
            .iter()
            .enumerate()
            .rev()
            .find_map(|(n, p)| Some((n as u8, text.strip_prefix(p)?)))?;
        let len = hex.len() / 2;
        if hex.is_empty() || len > PACKED {
            return None;
        }
        let bytes = &mut buffer[..len];
        crate::hex::decode_lower_into(hex, bytes)?;
        Some((prefix, bytes))
    }

    /// Reads back what [`serialize`] stored (serde `with`).
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
        Ok(match Stored::deserialize(deserializer)? {
            Stored::Text(text) => text,
            Stored::Hex { prefix, bytes } => {
                let prefix = PREFIXES.get(prefix as usize).ok_or_else(|| {
                    serde::de::Error::custom(format!("unknown id prefix {prefix}"))
                })?;
                let mut text = String::with_capacity(prefix.len() + 2 * bytes.len());
                text.push_str(prefix);
                crate::hex::push_lower_hex(&mut text, &bytes);
                text
            }
        })
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn packed_ids_read_back_as_they_were() {
            for text in ["dec_00ff10ab", "msg_0193a1b2c3d47000b000000000000001", "9f"] {
                let Some(Stored::Hex { prefix, bytes }) = pack(text) else {
                    panic!("{text} not packed");
                };
                let back = format!("{}{}", PREFIXES[prefix as usize], crate::lower_hex(&bytes));
                assert_eq!(back, text);
            }
        }

        #[test]
        fn written_borrowed_as_stored() {
            let texts = [
                "dec_00ff10ab",
                &"9f".repeat(32),
                &"ab".repeat(40),
                "evt_1",
                "ABCD",
            ];
            for text in texts {
                let stored = pack(text).unwrap_or_else(|| Stored::Text(text.to_string()));
                let mut written = Vec::new();
                serialize(text, &mut serde_json::Serializer::new(&mut written)).expect("json");
                let expected = serde_json::to_vec(&stored).expect("json");
                assert_eq!(written, expected, "{text}");
            }
        }

        #[test]
        fn packs_ids_and_digests_and_keeps_anything_else_as_is() {
            let packed = |t: &str| match pack(t) {
                Some(Stored::Hex { prefix, bytes }) => Some((prefix, bytes.len())),
                _ => None,
            };
            assert_eq!(
                packed("dec_0193a1b2c3d47000b000000000000001"),
                Some((1, 16))
            );
            assert_eq!(
                packed("msg_0193a1b2c3d47000ab12cd34ef56ab78"),
                Some((2, 16))
            );
            assert_eq!(packed(&"9f".repeat(32)), Some((0, 32)));
            // Upper case, odd lengths, other prefixes and empty hex would not read back the same.
            for text in [
                "dec_ABCD", "abc", "dec_", "", "msg_xyz1", "evt_0011", "dec_00g0",
            ] {
                assert_eq!(packed(text), None, "{text:?}");
            }
        }
    }
}

/// The stream idem made at a transmitter for one of its `ssf` sources (idem as a receiver), as
/// stored: enough to find the stream again at the next start on any node, and what the
/// transmitter last said of it. Written over its version.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subscription {
    /// Bumped by every change: a change is written only over the version it was made from.
    pub version: u64,
    /// The transmitter's issuer the stream is at.
    pub transmitter: String,
    /// The stream's id at the transmitter; none once deleted (or before it is made).
    pub stream_id: Option<String>,
    /// `push` or `poll`: how the stream was made to deliver.
    pub delivery: String,
    /// The event types asked for.
    pub events_requested: Vec<String>,
    /// The event types the transmitter said it delivers.
    pub events_delivered: Vec<String>,
    /// A poll stream's endpoint, as the transmitter gave it.
    pub poll_url: Option<String>,
    /// The stream's `iss`: the stream is used only if it is the transmitter's issuer.
    pub iss: Option<String>,
    /// A push stream's `authorization_header`, sealed under a key derived from `key_secret`.
    pub authorization: Option<Vec<u8>>,
    /// The stream's status as the transmitter last said (`enabled`, `paused`, `disabled`).
    pub status: Option<String>,
    /// Why, as the transmitter said.
    pub reason: Option<String>,
    /// The `state` of the verification asked for last, until it arrives.
    pub verify_state: Option<String>,
    /// When a verification was last asked for, unix milliseconds.
    pub verify_asked_ms: Option<u64>,
    /// When the stream was last verified, unix milliseconds.
    pub verified_at_ms: Option<u64>,
    /// What went wrong last, if the last attempt failed.
    pub last_error: Option<String>,
}

thread_local! {
    static BEFORE_RULES: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `decode` (the decoding of one record written before rules) with every rule field read
/// as absent.
pub fn before_rules<R>(decode: impl FnOnce() -> R) -> R {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            BEFORE_RULES.set(false);
        }
    }
    BEFORE_RULES.set(true);
    let _reset = Reset;
    decode()
}

/// A stored decision's rule field (serde `deserialize_with`): absent (its default) in a record
/// written before rules, read as written otherwise.
fn rules_field<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    match BEFORE_RULES.get() {
        true => Ok(T::default()),
        false => T::deserialize(d),
    }
}
