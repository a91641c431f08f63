//! One source event into the engine's signal path, for every kind of source. `prepare` reads
//! what needs no store (its route, id, type and subject) and says whether it is ignored, refused
//! or to be claimed, so a caller can refuse a whole delivery before anything of it is claimed;
//! `claim` hands the routed signal to the engine and says what became of it.

use idem_actors::{By, Outcome, RegistryError, Routed, SignalError};
use idem_schemas::SignalRequest;
use serde_json::{Map, Value};

use crate::config::Tenant;
use crate::http::ingest::decided;
use crate::http::problem::{ApiError, Kind};
use crate::http::App;
use crate::source::events::{self, Event};
use crate::source::{Route, Source, SourceKind, MAX_EVENT_ID, MAX_EVENT_TYPE};

pub use crate::source::runtime::Taken;

/// An event ready to be claimed.
pub struct Prepared<'s> {
    route: &'s Route,
    event_type: String,
    event_id: String,
    claim_key: String,
    subject: String,
}

impl Prepared<'_> {
    /// What the event is claimed under, within its source.
    pub fn claim_key(&self) -> &str {
        &self.claim_key
    }
}

/// What an event is, before any claim.
pub enum Ready<'s> {
    /// Its type matches no `map` entry.
    Ignored,
    /// It cannot be taken: why.
    Refused(String),
    /// It is to be claimed.
    Claim(Prepared<'s>),
}

/// Routes and checks `event` of `source`.
pub fn prepare<'s>(tenant: &Tenant, source: &'s Source, event: &Event<'_>) -> Ready<'s> {
    let Some(route) = event.event_type.as_deref().and_then(|t| source.route(t)) else {
        return Ready::Ignored;
    };
    let event_type = event.event_type.clone().unwrap_or_default();
    if event_type.len() > MAX_EVENT_TYPE {
        tracing::warn!(tenant = %tenant.name, source = %source.name, "event refused: its type is over {MAX_EVENT_TYPE} bytes");
        return Ready::Refused(format!("an event type is over {MAX_EVENT_TYPE} bytes"));
    }
    let (Some(event_id), Some(claim_key)) = (
        event
            .id
            .clone()
            .filter(|id| !id.is_empty() && id.len() <= MAX_EVENT_ID),
        event.claim_key(),
    ) else {
        tracing::warn!(tenant = %tenant.name, source = %source.name, event_type, "event refused: no event id (1 to {MAX_EVENT_ID} bytes)");
        return Ready::Refused(format!("an event has no id of 1 to {MAX_EVENT_ID} bytes"));
    };
    let pointer = match source.kind {
        SourceKind::Ssf => events::set_pointer(&route.subject, &event_type),
        _ => std::borrow::Cow::Borrowed(route.subject.as_str()),
    };
    let Some(subject) = events::subject(&event.body, &pointer) else {
        tracing::warn!(tenant = %tenant.name, source = %source.name, event_id, event_type, pointer = %route.subject, "event refused: no subject at the map's pointer");
        return Ready::Refused(format!(
            "the event {:?} has no subject (a string, a number or a subject identifier) at {}",
            event_type.chars().take(64).collect::<String>(),
            route.subject
        ));
    };
    Ready::Claim(Prepared {
        route,
        event_type,
        event_id,
        claim_key: claim_key.to_string(),
        subject,
    })
}

/// Claims a prepared event of `source` and says what became of it; an error when it is not
/// known to be durable (the sender is to send it again).
pub async fn claim(
    app: &App,
    tenant: &Tenant,
    source: &Source,
    prepared: Prepared<'_>,
) -> Result<Taken, ApiError> {
    // The metadata is the event's name and nothing of its body, which carries personal data.
    let mut metadata = Map::new();
    metadata.insert("source".into(), Value::from(source.name.clone()));
    metadata.insert("event_id".into(), Value::from(prepared.event_id));
    metadata.insert("event_type".into(), Value::from(prepared.event_type));
    let routed = Routed {
        tenant: &tenant.name,
        playbooks: &tenant.playbooks,
        signal: SignalRequest {
            signal_type: prepared.route.signal_type.clone(),
            subject: prepared.subject,
            occurred_at: None,
            metadata: Some(metadata),
        },
        by: By::Event {
            source: &source.name,
            id: &prepared.claim_key,
        },
    };
    let outcome = app.engine.signal(routed).await;
    if !matches!(outcome, Err(SignalError::NoPlaybook(_))) {
        app.stats.signal(&tenant.name);
    }
    match outcome {
        Ok(Outcome::Decided { verdict, .. }) => {
            decided(app, &tenant.name, verdict);
            Ok(Taken::Accepted)
        }
        // Claimed now, and its subject had a decision within the playbook's window: that one
        // answers for it, and no callback is made again.
        Ok(Outcome::Deduplicated { .. }) => Ok(Taken::Accepted),
        Ok(Outcome::Replayed { .. }) => Ok(Taken::Duplicate),
        // Another delivery of the event is still being claimed after the wait: not known to be
        // durable, so the sender is asked to send it again (then it is a duplicate).
        Ok(Outcome::InFlight) => Err(ApiError::new(
            Kind::Unavailable,
            "another delivery of an event is being taken right now; send the delivery again",
        )),
        Ok(Outcome::Mismatch) => Err(ApiError::new(
            Kind::Internal,
            "an event's claim holds another payload",
        )),
        Err(SignalError::Actors(RegistryError::Overloaded | RegistryError::Unavailable)) => {
            Err(ApiError::new(
                Kind::Unavailable,
                "too busy to take the delivery now; send it again",
            ))
        }
        Err(e) => Err(not_stored(tenant, source, &e)),
    }
}

/// A `500` for an event whose claim failed with `e`, which is logged, not shown.
fn not_stored(tenant: &Tenant, source: &Source, e: &dyn std::fmt::Display) -> ApiError {
    tracing::error!(tenant = %tenant.name, source = %source.name, error = %e, "a source event's claim failed");
    ApiError::new(
        Kind::Internal,
        "an event could not be stored; send the delivery again",
    )
}
