//! The shapes idem speaks and stores. `wire` holds the public JSON documents (the signal a tenant
//! posts, the decision we answer, the callback envelope we send, problem details), `stored` the
//! events of the claim log, `signature` the Standard Webhooks scheme both directions use, and
//! `json_schema` turns the wire types into the JSON Schema files kept under `schemas/json/`.

pub mod json_schema;
pub mod signature;
pub mod stored;
pub mod timefmt;
pub mod wire;

pub use stored::{
    lower_hex, ActionOutcome, AttemptRecord, Claim, ClaimEvent, Decision, DecisionRecord,
    DeliveryEvent, DeliveryRecord, NextStep, PlannedDelivery, RecordedAction, StoredResponse,
    SubjectLink,
};
pub use wire::{
    ActionResult, ActionStatus, AttemptView, CallbackData, CallbackEnvelope, DecidedAction,
    DecisionPage, DecisionResponse, DecisionView, DeliveryPage, DeliveryStatus, DeliveryView,
    EndpointList, EndpointState, EndpointView, OktaVerification, Problem, RedeliverRequest,
    Redelivered, SignalRequest, SourceReceipt, TenantStats, Verdict,
};
