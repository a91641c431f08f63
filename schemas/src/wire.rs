//! The public JSON documents: what a tenant posts to `POST /v1/signals`, the decision it gets
//! back, the callback envelope its systems receive, and the RFC 9457 problem details of every
//! error. Each derives `ToSchema`, from which the files in `schemas/json/` are generated.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A signal as a tenant posts it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SignalRequest {
    /// Selects the tenant's playbook, e.g. `sim_swap`.
    #[serde(rename = "type")]
    #[schema(min_length = 1, max_length = 128)]
    pub signal_type: String,
    /// The identifier the signal is about (phone number, account id). Never stored or sent in
    /// clear: it becomes `subject_hash`.
    #[schema(min_length = 1)]
    pub subject: String,
    /// When the sender observed the signal (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    pub occurred_at: Option<String>,
    /// Any JSON object; echoed in every callback of the decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
}

/// The verdict a playbook reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Let it through.
    Allow,
    /// Refuse it.
    Deny,
    /// Ask for more proof.
    StepUp,
    /// Send it to a person.
    Review,
}

impl Verdict {
    /// The name used in JSON and in callback types (`decision.<name>`).
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Deny => "deny",
            Verdict::StepUp => "step_up",
            Verdict::Review => "review",
        }
    }
}

/// How the first attempt of one action's callback went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ActionStatus {
    /// The receiver answered 2xx.
    Delivered,
    /// A retryable failure (5xx, 429, network error, deadline): left to the retry queue.
    Queued,
    /// A terminal answer (4xx other than 429, 3xx): not retried.
    Failed,
    /// A Security Event Token whose stream was disabled: not sent.
    Dropped,
}

impl ActionStatus {
    /// The name used in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            ActionStatus::Delivered => "delivered",
            ActionStatus::Queued => "queued",
            ActionStatus::Failed => "failed",
            ActionStatus::Dropped => "dropped",
        }
    }
}

/// One action of a decision, as reported in the response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ActionResult {
    /// The action's name in the playbook.
    pub name: String,
    /// For a `set` action, the stream this SET goes to (one entry per stream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_id: Option<String>,
    /// The delivery's id: a callback's `webhook-id`, a SET's `jti`.
    pub delivery_id: String,
    /// The outcome of the inline attempt.
    pub status: ActionStatus,
}

/// The `201` body of a first processing, replayed byte for byte on a retry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionResponse {
    /// The decision's id, fixed when the claim was made.
    pub decision_id: String,
    /// The signal type.
    #[serde(rename = "type")]
    pub signal_type: String,
    /// The verdict.
    pub decision: Verdict,
    /// The playbook's rule that decided; absent when the playbook's default decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// Keyed digest of the subject (hex).
    pub subject_hash: String,
    /// One entry per playbook action, in playbook order.
    pub actions: Vec<ActionResult>,
    /// When the decision was made (RFC 3339, milliseconds).
    #[schema(format = DateTime)]
    pub created_at: String,
}

/// What one callback carries about its decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CallbackData {
    /// The tenant's name.
    pub tenant: String,
    /// The decision's id.
    pub decision_id: String,
    /// The verdict.
    pub decision: Verdict,
    /// The playbook's rule that decided; absent when the playbook's default decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// The playbook action this callback performs.
    pub action: String,
    /// The signal type.
    pub signal_type: String,
    /// Keyed digest of the subject (hex).
    pub subject_hash: String,
    /// The signal's metadata, `{}` when it had none.
    #[schema(value_type = Object)]
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

/// The body of every callback, built once and sent byte-identical on every attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CallbackEnvelope {
    /// `decision.<verdict>`.
    #[serde(rename = "type")]
    pub event_type: String,
    /// When the envelope was built (RFC 3339, milliseconds); never changes.
    #[schema(format = DateTime)]
    pub timestamp: String,
    /// The decision.
    pub data: CallbackData,
}

/// An error, as RFC 9457 problem details (`application/problem+json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Problem {
    /// A URI naming the kind of problem; each kind has its own.
    #[serde(rename = "type")]
    pub problem_type: String,
    /// A short summary of the kind.
    pub title: String,
    /// The HTTP status code.
    pub status: u16,
    /// What went wrong with this request and how to fix it.
    pub detail: String,
}

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryStatus {
    /// Waiting for its next attempt.
    Queued,
    /// A 2xx was received.
    Delivered,
    /// A terminal status was received (4xx other than 429, 3xx).
    Failed,
    /// Every attempt failed with a retryable error, or its endpoint stayed open too long.
    Dead,
    /// A Security Event Token whose stream was disabled before it was sent: never sent.
    Dropped,
}

/// Why a delivery is dead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeadReason {
    /// Every attempt of its schedule failed with a retryable error.
    AttemptsExhausted,
    /// Its endpoint stayed open longer than `max_hold`: it was held, not attempted.
    EndpointOpen,
}

impl DeliveryStatus {
    /// Every status, in index order.
    pub const ALL: [DeliveryStatus; 5] = [
        DeliveryStatus::Queued,
        DeliveryStatus::Delivered,
        DeliveryStatus::Failed,
        DeliveryStatus::Dead,
        DeliveryStatus::Dropped,
    ];

    /// The name used in JSON and query strings.
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Queued => "queued",
            DeliveryStatus::Delivered => "delivered",
            DeliveryStatus::Failed => "failed",
            DeliveryStatus::Dead => "dead",
            DeliveryStatus::Dropped => "dropped",
        }
    }

    /// Parses a name from a query string.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

/// One attempt of a delivery, as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AttemptView {
    /// 1 for the inline attempt, then counting every retry (across redeliveries).
    pub attempt: u32,
    /// When it started.
    #[schema(format = DateTime)]
    pub at: String,
    /// The receiver's status code, if it answered.
    pub status_code: Option<u16>,
    /// The network error or deadline, if it did not.
    pub error: Option<String>,
    /// How long it took.
    pub latency_ms: u64,
}

/// A delivery: one callback of a decision, with its attempt log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DeliveryView {
    /// The delivery id, also its `webhook-id`.
    pub id: String,
    /// The decision it belongs to.
    pub decision_id: String,
    /// The playbook action.
    pub action: String,
    /// Where it is POSTed.
    pub url: String,
    /// Where it stands.
    pub status: DeliveryStatus,
    /// When the next attempt is due, while queued.
    #[schema(format = DateTime)]
    pub next_attempt_at: Option<String>,
    /// Why it is dead, when it is.
    pub dead_reason: Option<DeadReason>,
    /// When it was created.
    #[schema(format = DateTime)]
    pub created_at: String,
    /// How many attempts were ever made.
    pub attempts_total: u32,
    /// The most recent attempts (at most 100), oldest first.
    pub attempts: Vec<AttemptView>,
}

/// A page of deliveries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DeliveryPage {
    /// The deliveries of this page.
    pub data: Vec<DeliveryView>,
    /// Pass as `after` to get the next page; absent on the last page.
    pub next_after: Option<String>,
}

/// Whether attempts go to an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EndpointState {
    /// Attempts go to it.
    Closed,
    /// It failed `breaker_threshold` times in a row: no attempts go to it until a probe.
    Open,
    /// One probe is running.
    HalfOpen,
}

/// One endpoint (an action URL of the tenant) and its health.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EndpointView {
    /// The action URL.
    pub url: String,
    /// The breaker.
    pub state: EndpointState,
    /// Retryable failures since its last 2xx or terminal answer (4xx other than 429, 3xx).
    pub consecutive_failures: u32,
    /// When an attempt it answered 2xx started.
    #[schema(format = DateTime)]
    pub last_success_at: Option<String>,
    /// When the last failed attempt started.
    #[schema(format = DateTime)]
    pub last_failure_at: Option<String>,
    /// Its deliveries waiting for an attempt.
    pub queued: u64,
}

/// The tenant's endpoints, by URL.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EndpointList {
    /// Every endpoint of the tenant's playbooks, and any other with a recorded health.
    pub data: Vec<EndpointView>,
}

/// Which deliveries a bulk redelivery takes (every field but `status` optional).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RedeliverRequest {
    /// `dead` or `failed`.
    pub status: DeliveryStatus,
    /// Created at or after this.
    #[schema(format = DateTime)]
    pub since: Option<String>,
    /// Created at or before this.
    #[schema(format = DateTime)]
    pub until: Option<String>,
    /// Of this playbook action only.
    pub action: Option<String>,
}

/// What a bulk redelivery did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Redelivered {
    /// How many deliveries got a new series of attempts.
    pub redelivered: u64,
}

/// What a source did with a provider's delivery: every event is counted once. `accepted`:
/// claimed now, its decision made (its callbacks follow); `duplicates`: claimed before (a
/// provider's retry); `ignored`: it has no type, or one no `map` entry matches; `refused`: it
/// has no usable id, a type over the limit, or no subject where the map says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SourceReceipt {
    /// Events claimed by this delivery.
    pub accepted: u64,
    /// Events claimed before.
    pub duplicates: u64,
    /// Events of a type the source does not map.
    pub ignored: u64,
    /// Events without a usable id, with a type over the limit, or without a subject.
    pub refused: u64,
}

/// RFC 8935 §2.3's error answer to a refused Security Event Token (`400`), also one entry of an
/// RFC 8936 poll request's `setErrs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetError {
    /// `invalid_request`, `invalid_key`, `invalid_issuer`, `invalid_audience`,
    /// `authentication_failed` or `access_denied`.
    pub err: String,
    /// What is wrong, in English.
    pub description: String,
}

/// `GET /v1/sources/{tenant}/{source}/status`: what became of a source's events on this node
/// since it started, and for `ssf` what its transmitter last announced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SourceStatus {
    /// The source's kind.
    pub kind: String,
    /// Events claimed.
    pub accepted: u64,
    /// Events claimed before (a sender's retry).
    pub duplicates: u64,
    /// Events of a type the source does not map, and SSF's own events.
    pub ignored: u64,
    /// Events without a usable id or subject, and refused SETs.
    pub refused: u64,
    /// When the last event arrived (RFC 3339), if one has.
    pub last_event_at: Option<String>,
    /// `ssf`: the last verification event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<VerificationStatus>,
    /// `ssf`: the last stream-updated event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<StreamStatus>,
    /// `ssf` with `poll`: the poll client's state on this node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll: Option<PollStatus>,
    /// `ssf` with `transmitter`: the stream idem made there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subscription: Option<SubscriptionStatus>,
}

/// The stream idem made at an `ssf` source's transmitter, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubscriptionStatus {
    /// The stream's id at the transmitter, once made (none once deleted).
    pub stream_id: Option<String>,
    /// Its status as the transmitter last said: `enabled`, `paused` or `disabled`.
    pub status: Option<String>,
    /// The event types the transmitter delivers on it.
    pub events_delivered: Vec<String>,
    /// When it was last verified (RFC 3339), if it was.
    pub verified_at: Option<String>,
    /// What went wrong last, if the last attempt failed.
    pub last_error: Option<String>,
}

/// `GET /v1/sources`: the tenant's sources, by name, each with its status on this node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SourceList {
    /// Every source of the tenant, by name.
    pub data: Vec<NamedSource>,
}

/// One source of [`SourceList`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NamedSource {
    /// Its name: `POST /v1/sources/{tenant}/{name}`.
    pub name: String,
    /// Its status.
    pub status: SourceStatus,
}

/// An SSF verification event as last received.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VerificationStatus {
    /// Its `state`, if it carried one.
    pub state: Option<String>,
    /// When it arrived (RFC 3339).
    pub at: String,
}

/// An SSF stream-updated event as last received.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StreamStatus {
    /// The stream's status: `enabled`, `paused` or `disabled`.
    pub status: Option<String>,
    /// Its `reason`, if it gave one.
    pub reason: Option<String>,
    /// When it arrived (RFC 3339).
    pub at: String,
}

/// An SSF source's poll client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PollStatus {
    /// When the last poll was answered (RFC 3339), if one was.
    pub last_at: Option<String>,
    /// The last poll's error, if it failed.
    pub last_error: Option<String>,
    /// SETs acknowledged.
    pub acked: u64,
}

/// The answer to Okta's one-time verification of an event hook.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OktaVerification {
    /// The `X-Okta-Verification-Challenge` header's value.
    pub verification: String,
}

/// One action of a decision as looked up later: its delivery and where that delivery stands now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecidedAction {
    /// The action's name in the playbook.
    pub name: String,
    /// For a `set` action, the stream this SET goes to (one entry per stream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_id: Option<String>,
    /// The delivery's id: a callback's `webhook-id`, a SET's `jti`.
    pub delivery_id: String,
    /// Where the delivery stands now.
    pub status: DeliveryStatus,
}

/// A decision as `GET /v1/decisions/{id}` shows it: the shape of the `201` body, with each
/// action's current delivery status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionView {
    /// The decision's id.
    pub decision_id: String,
    /// The signal type.
    #[serde(rename = "type")]
    pub signal_type: String,
    /// The verdict.
    pub decision: Verdict,
    /// The playbook's rule that decided; absent when the playbook's default decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// The rules whose evaluation failed for this decision (they did not match); absent when
    /// none did.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rule_errors: Vec<RuleError>,
    /// Keyed digest of the subject (hex).
    pub subject_hash: String,
    /// The source the signal came from (its name under the tenant's sources), or null for a
    /// signal posted to `POST /v1/signals`.
    pub source: Option<String>,
    /// One entry per playbook action, in playbook order.
    pub actions: Vec<DecidedAction>,
    /// When the decision was made (RFC 3339, milliseconds).
    #[schema(format = DateTime)]
    pub created_at: String,
    /// The id of the trace the decision was made in (W3C Trace Context, 32 lowercase hex
    /// digits), where tracing was on (absent otherwise); its callbacks' attempts belong to
    /// that trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}

/// A rule whose evaluation failed for a decision: it did not match.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RuleError {
    /// The rule's name.
    pub rule: String,
    /// Why its evaluation failed.
    pub message: String,
}

/// A tenant's live figures (`GET /v1/stats`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantStats {
    /// The tenant's name.
    pub tenant: String,
    /// When the answering node started: `signals` and `decisions` are counted from then, by
    /// that node.
    #[schema(format = DateTime)]
    pub since: String,
    /// Signals taken (authenticated and naming a playbook, or a source event mapped to one),
    /// duplicates included.
    pub signals: u64,
    /// Decisions made from them.
    pub decisions: u64,
    /// Deliveries waiting for an attempt now, counted up to `counted_to`.
    pub queued: u64,
    /// Deliveries that ran out of attempts, within their retention, counted up to `counted_to`.
    pub dead: u64,
    /// `queued` and `dead` stop counting here: this value means at least as many.
    pub counted_to: u64,
}

/// What a playbook would decide for a signal now (`POST /v1/playbooks/{type}/evaluate`): nothing
/// was claimed, stored or sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PlaybookEvaluation {
    /// The verdict.
    pub decision: Verdict,
    /// The rule that decides; absent when the playbook's default decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// The names of the actions the decision would run, in order.
    pub actions: Vec<String>,
    /// The rules whose evaluation failed (they did not match).
    pub errors: Vec<RuleError>,
}

/// A page of a subject's decisions, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DecisionPage {
    /// The decisions of this page.
    pub data: Vec<DecisionView>,
    /// Pass as `after` to get the next page; null on the last page.
    pub next_after: Option<String>,
}

/// `GET /.well-known/ssf-configuration/ssf/{tenant}`: a tenant's transmitter metadata (SSF
/// §7.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TransmitterMetadata {
    /// `1_0`.
    pub spec_version: String,
    /// `{public_url}/ssf/{tenant}`: every SET's `iss`.
    pub issuer: String,
    /// The JWK Set of the keys SETs are signed with.
    pub jwks_uri: String,
    /// `urn:ietf:rfc:8935` (push) and `urn:ietf:rfc:8936` (poll).
    pub delivery_methods_supported: Vec<String>,
    /// Streams: create, read, update, replace, delete.
    pub configuration_endpoint: String,
    /// A stream's status.
    pub status_endpoint: String,
    /// Adds a subject to a stream.
    pub add_subject_endpoint: String,
    /// Removes a subject from a stream.
    pub remove_subject_endpoint: String,
    /// Asks for a verification event on a stream.
    pub verification_endpoint: String,
    /// `[{"spec_urn": "urn:ietf:rfc:6749"}]`: OAuth 2.0 tokens from `POST /ssf/{tenant}/token`.
    pub authorization_schemes: Vec<AuthorizationScheme>,
    /// `ALL`: a stream includes every subject until one is removed.
    pub default_subjects: String,
}

/// An authorization scheme of a transmitter (SSF §7.1.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AuthorizationScheme {
    /// The scheme's specification.
    pub spec_urn: String,
}

/// `POST /ssf/{tenant}/token`: an access token (RFC 6749 §5.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AccessToken {
    /// The Bearer token for the stream management API.
    pub access_token: String,
    /// `Bearer`.
    pub token_type: String,
    /// Seconds it is good for.
    pub expires_in: u64,
    /// The scopes granted, space-separated: `ssf.read`, `ssf.manage`.
    pub scope: String,
}

/// An OAuth 2.0 error (RFC 6749 §5.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct OAuthError {
    /// `invalid_request`, `invalid_client`, `invalid_scope` or `unsupported_grant_type`.
    pub error: String,
    /// What is wrong, in English.
    pub error_description: String,
}

/// A stream's configuration as its receiver reads it (SSF §8.1.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StreamConfig {
    /// `st_…`, the transmitter's.
    pub stream_id: String,
    /// The tenant's issuer.
    pub iss: String,
    /// The receiver's configured audience.
    pub aud: String,
    /// The event types this transmitter sends: those of the tenant's playbooks' `set` actions.
    pub events_supported: Vec<String>,
    /// The event types the receiver asked for.
    pub events_requested: Vec<String>,
    /// Those of them this transmitter sends.
    pub events_delivered: Vec<String>,
    /// How SETs reach the receiver.
    pub delivery: StreamDelivery,
    /// The receiver's description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// How many seconds must pass between two verifications the receiver asks for.
    pub min_verification_interval: u64,
}

/// A stream's delivery method. The push `authorization_header` a receiver sends is kept sealed
/// and never read back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StreamDelivery {
    /// `urn:ietf:rfc:8935` (push) or `urn:ietf:rfc:8936` (poll).
    pub method: String,
    /// Push: the receiver's URL; poll: where the receiver polls.
    pub endpoint_url: Option<String>,
}

/// A stream's status (SSF §8.1.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StreamStatusBody {
    /// The stream.
    pub stream_id: String,
    /// `enabled`, `paused` or `disabled`.
    pub status: String,
    /// Why, as the receiver said when it set it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `POST /v1/sources/{tenant}/{source}/subscription`: the status idem asks the transmitter to
/// give the source's stream (SSF §8.1.2.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubscriptionChange {
    /// `enabled`, `paused` or `disabled`.
    pub status: String,
    /// Why, passed on to the transmitter (at most 1024 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `POST /v1/sources/{tenant}/{source}/subjects`: a subject idem asks the transmitter to add to
/// or remove from the source's stream (SSF §§8.1.3.2–8.1.3.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubjectChange {
    /// `add` or `remove`.
    pub action: String,
    /// A subject identifier (RFC 9493), an object with its `format`.
    #[schema(value_type = Object)]
    pub subject: serde_json::Value,
    /// `add` only: whether the subject's identity was verified (passed on as it is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified: Option<bool>,
}
