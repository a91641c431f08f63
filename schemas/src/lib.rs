//! The shapes idem speaks and stores. `wire` holds the public JSON documents (the signal a tenant
//! posts, the decision we answer, the callback envelope we send, problem details), `stored` the
//! events of the claim log, `signature` the Standard Webhooks scheme both directions use,
//! `canonical` the strict JSON parser and RFC 8785's canonical form bodies are fingerprinted by,
//! `hex` the hexadecimal of digests and ids, `trace` the W3C trace context a decision keeps, and `json_schema` turns the wire types into the
//! JSON Schema files kept under `schemas/json/`.

pub mod canonical;
pub mod hash;
pub mod hex;
pub mod json_schema;
pub mod signature;
pub mod stored;
pub mod timefmt;
pub mod trace;
pub mod wire;

pub use hex::lower_hex;
pub use stored::{
    ActionOutcome, AttemptRecord, Claim, ClaimEvent, Decision, DecisionRecord, DeliveryEvent,
    DeliveryRecord, NextStep, PlannedDelivery, RecordedAction, StoredResponse, Stream,
    StreamMethod, StreamState, SubjectLink, Subscription,
};
pub use trace::TraceContext;
pub use wire::{
    AccessToken, ActionResult, ActionStatus, AttemptView, AuthorizationScheme, CallbackData,
    CallbackEnvelope, DeadReason, DecidedAction, DecisionPage, DecisionResponse, DecisionView,
    DeliveryPage, DeliveryStatus, DeliveryView, EndpointList, EndpointState, EndpointView,
    NamedSource, OAuthError, OktaVerification, PlaybookEvaluation, PollStatus, Problem,
    RedeliverRequest, Redelivered, RuleError, SetError, SignalRequest, SourceList, SourceReceipt,
    SourceStatus, StreamConfig, StreamDelivery, StreamStatus, StreamStatusBody, SubjectChange,
    SubscriptionChange, SubscriptionStatus, TenantStats, TransmitterMetadata, Verdict,
    VerificationStatus,
};
