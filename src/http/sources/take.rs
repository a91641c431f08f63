//! One source event into the engine's signal path, for every kind of source. `prepare` reads
//! what needs no store (its route, id, type and subject) and says whether it is ignored, refused
//! or to be claimed, so a caller can refuse a whole delivery before anything of it is claimed;
//! `claim` hands the routed signal to the engine and says what became of it.

use idem_actors::{By, Outcome, RegistryError, SignalError};
use idem_schemas::SignalRequest;
use serde_json::{Map, Value};
use tracing::Instrument;

use crate::config::Tenant;
use crate::http::problem::{ApiError, Kind};
use crate::http::submit::submit;
use crate::http::App;
use crate::source::events::{self, Event};
use crate::source::{Route, Source, SourceKind, MAX_EVENT_ID, MAX_EVENT_TYPE};

pub use crate::source::runtime::Fate;

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

/// Routes and checks `event` of `source`. A refusal is not logged here: a delivery of many
/// refused events is logged once, by its caller.
pub fn prepare<'s>(source: &'s Source, event: &Event<'_>) -> Ready<'s> {
    let Some(route) = event.event_type.as_deref().and_then(|t| source.route(t)) else {
        return Ready::Ignored;
    };
    let event_type = event.event_type.clone().unwrap_or_default();
    if event_type.len() > MAX_EVENT_TYPE {
        return Ready::Refused(format!("an event type is over {MAX_EVENT_TYPE} bytes"));
    }
    let (Some(event_id), Some(claim_key)) = (
        event
            .id
            .clone()
            .filter(|id| !id.is_empty() && id.len() <= MAX_EVENT_ID),
        event.claim_key(),
    ) else {
        return Ready::Refused(format!("an event has no id of 1 to {MAX_EVENT_ID} bytes"));
    };
    let pointer = match source.kind {
        SourceKind::Ssf => events::set_pointer(&route.subject, &event_type),
        _ => std::borrow::Cow::Borrowed(route.subject.as_str()),
    };
    let Some(subject) = events::subject(&event.body, &pointer) else {
        return Ready::Refused(format!(
            "the event {event_id:?} of type {:?} has no subject (a string, a number or a subject \
             identifier) at {}",
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
) -> Result<Fate, ApiError> {
    // The metadata is the event's name and nothing of its body, which carries personal data.
    let mut metadata = Map::new();
    metadata.insert("source".into(), Value::from(source.name.clone()));
    metadata.insert("event_id".into(), Value::from(prepared.event_id));
    metadata.insert(
        "event_type".into(),
        Value::from(prepared.event_type.clone()),
    );
    let signal = SignalRequest {
        signal_type: prepared.route.signal_type.clone(),
        subject: prepared.subject,
        occurred_at: None,
        metadata: Some(metadata),
    };
    let span = idem_actors::trace_span!(
        "source event",
        idem.source = %source.name,
        idem.source_kind = source.kind.as_str(),
        idem.event_id_digest = tracing::field::Empty,
        idem.outcome = tracing::field::Empty,
    );
    if !span.is_disabled() {
        let signals = app.engine.signals();
        let digest = signals.event_digest(&tenant.name, &source.name, &prepared.claim_key);
        span.record("idem.event_id_digest", digest);
    }
    let by = By::Event {
        source: &source.name,
        kind: source.kind.as_str(),
        event_type: &prepared.event_type,
        id: &prepared.claim_key,
    };
    let live = app.live.load();
    let outcome = submit(app, &live, tenant, signal, by)
        .instrument(span.clone())
        .await;
    let fate = fate(tenant, source, outcome);
    if !span.is_disabled() {
        let label = match &fate {
            Ok(fate) => fate.label(),
            Err(problem) => problem.slug(),
        };
        span.record("idem.outcome", label);
    }
    fate
}

/// What became of an event, from what the engine made of its signal.
fn fate(
    tenant: &Tenant,
    source: &Source,
    outcome: Result<Outcome, SignalError>,
) -> Result<Fate, ApiError> {
    match outcome {
        // Claimed now (its subject's decision may answer for it, and then no callback is made
        // again), or before.
        Ok(
            o @ (Outcome::Decided { .. } | Outcome::Deduplicated { .. } | Outcome::Replayed { .. }),
        ) => Ok(Fate::of(&o)),
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

/// What came of a delivery's events to be claimed, in their order, and, when the tenant's
/// `rate_limit` stopped some from being claimed now, the 429 that says when to send again.
pub struct EventFates {
    /// Each event's outcome; `None` for one not claimed now.
    pub outcomes: Vec<Option<Result<Fate, ApiError>>>,
    /// Set when some were not claimed for the tenant's rate limit.
    pub limited: Option<ApiError>,
}

/// Claims `prepared` (the events of one delivery that are to be claimed) within `tenant`'s
/// `rate_limit`: each new decision takes a token, and a duplicate gives its token back, so a
/// provider that sends a large batch again once told to wait makes progress with each try. The
/// events go in waves of as many as there are tokens, each wave's claims at once (they share
/// the store's group commits); without a limit, one wave.
pub async fn claim_all(
    app: &App,
    tenant: &Tenant,
    source: &Source,
    prepared: Vec<Prepared<'_>>,
) -> EventFates {
    let mut outcomes: Vec<Option<Result<Fate, ApiError>>> = std::iter::repeat_with(|| None)
        .take(prepared.len())
        .collect();
    let mut waiting = prepared.into_iter().enumerate().peekable();
    let mut limited = None;
    let mut tokens = 0;
    while waiting.peek().is_some() {
        let wave = match tenant.rate_limit {
            None => usize::MAX,
            Some(rate) => {
                if tokens == 0 {
                    match app.limiter.take_up_to(&tenant.name, rate, waiting.len()) {
                        Ok(n) => tokens = n,
                        Err(wait) => {
                            limited = Some(over_the_limit(tenant, rate, wait));
                            break;
                        }
                    }
                }
                std::mem::take(&mut tokens)
            }
        };
        let results = futures::future::join_all(
            waiting
                .by_ref()
                .take(wave)
                .map(|(n, p)| async move { (n, claim(app, tenant, source, p).await) }),
        )
        .await;
        for (n, result) in results {
            // Only an event taken now uses up its token.
            if !matches!(
                result,
                Ok(Fate::Claimed {
                    taken_now: true,
                    ..
                })
            ) {
                tokens += 1;
            }
            outcomes[n] = Some(result);
        }
    }
    if let Some(rate) = tenant.rate_limit.filter(|_| tokens > 0) {
        app.limiter.give_back(&tenant.name, rate, tokens);
    }
    EventFates { outcomes, limited }
}

/// The 429 of a delivery that `tenant`'s `rate` stopped part-way: the events taken are
/// durable, and sent again after `wait` seconds they are duplicates, which take nothing.
fn over_the_limit(tenant: &Tenant, rate: u32, wait: u64) -> ApiError {
    ApiError::new(
        Kind::RateLimited,
        format!(
            "tenant {} may make {rate} decisions per second; send the delivery again after \
             {wait} s for the events not taken yet",
            tenant.name
        ),
    )
    .retry_after(wait)
}

/// A `500` for an event whose claim failed with `e`, which is logged, not shown.
fn not_stored(tenant: &Tenant, source: &Source, e: &dyn std::fmt::Display) -> ApiError {
    tracing::error!(tenant = %tenant.name, source = %source.name, error = %e, "a source event's claim failed");
    ApiError::new(
        Kind::Internal,
        "an event could not be stored; send the delivery again",
    )
}
