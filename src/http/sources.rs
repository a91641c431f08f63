//! `POST /v1/sources/{tenant}/{source}`: a provider's delivery, taken as it is sent. In order,
//! each refusal leaving nothing stored: the source (404), the body's size, the provider's
//! authentication over the raw bytes (401), the delivery's shape (400). Then every event is
//! routed by its type and claimed under the provider's event id, all at once, so one group
//! commit makes the batch durable; the answer counts what became of each event once every
//! accepted one's claim and decision are on disk. Callbacks are queued in the same write and
//! made by the retry worker after the answer: providers time out in seconds. An event's claim
//! lasts at least [`idem_actors::signal::EVENT_CLAIM_MIN`], the longest a provider retries.
//! Also `GET`, Okta's one-time verification of an event hook.

use std::sync::Arc;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use idem_actors::{By, Outcome, RegistryError, Routed, SignalError};
use idem_schemas::canonical;
use idem_schemas::timefmt::now_ms;
use idem_schemas::{OktaVerification, SignalRequest, SourceReceipt};
use serde_json::{Map, Value};

use crate::config::Tenant;
use crate::http::ingest::{decided, read_body};
use crate::http::metrics::{SOURCE_DELIVERIES, SOURCE_EVENTS};
use crate::http::problem::{ApiError, Kind};
use crate::http::{App, Live};
use crate::source::events::{self, Event};
use crate::source::verify::{self, Refused};
use crate::source::{Source, SourceKind, MAX_EVENT_ID, MAX_EVENT_TYPE, MAX_SOURCE_BODY};

/// What became of one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Taken {
    /// Claimed now: its decision is made, its callbacks follow.
    Accepted,
    /// Claimed before (a provider's retry).
    Duplicate,
    /// Its type matches no `map` entry.
    Ignored,
    /// No usable event id, a type over the limit, or no subject where the map says.
    Refused,
}

impl Taken {
    fn as_str(self) -> &'static str {
        match self {
            Taken::Accepted => "accepted",
            Taken::Duplicate => "duplicate",
            Taken::Ignored => "ignored",
            Taken::Refused => "refused",
        }
    }
}

/// The tenant and source a path names, or 404.
fn find(
    live: &Live,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<(&Tenant, &Source), ApiError> {
    let not_found = || ApiError::new(Kind::NotFound, "no such tenant or source");
    let Path((tenant, source)) = path.map_err(|_| not_found())?;
    let tenant = live.config.tenants.get(&tenant).ok_or_else(not_found)?;
    let source = tenant.sources.get(&source).ok_or_else(not_found)?;
    Ok((tenant, source))
}

fn unauthenticated(refused: Refused) -> ApiError {
    match refused {
        Refused::Stale(_) => ApiError::new(Kind::StaleTimestamp, refused.to_string()),
        other => ApiError::new(Kind::SourceUnauthenticated, other.to_string()),
    }
}

/// The handler of a provider's delivery.
pub async fn receive(
    State(app): State<Arc<App>>,
    path: Result<Path<(String, String)>, PathRejection>,
    request: Request,
) -> Response {
    let live = app.live.load_full();
    let (tenant, source) = match find(&live, path) {
        Ok(found) => found,
        Err(problem) => return problem.into_response(),
    };
    let kind = source.kind.as_str();
    let (parts, body) = request.into_parts();
    match handle(&app, &live, tenant, source, &parts, body).await {
        Ok(receipt) => {
            SOURCE_DELIVERIES.with_label_values(&[kind, "ok"]).inc();
            Json(receipt).into_response()
        }
        Err(problem) => {
            SOURCE_DELIVERIES
                .with_label_values(&[kind, problem.slug()])
                .inc();
            problem.into_response()
        }
    }
}

async fn handle(
    app: &App,
    live: &Arc<Live>,
    tenant: &Tenant,
    source: &Source,
    parts: &axum::http::request::Parts,
    body: axum::body::Body,
) -> Result<SourceReceipt, ApiError> {
    let headers = &parts.headers;
    let bytes = read_body(
        headers,
        body,
        live.config.http.read_timeout,
        MAX_SOURCE_BODY,
    )
    .await?;
    // Authenticated before anything is parsed: an unauthenticated delivery claims nothing.
    verify::check(
        source,
        &verify::Delivery {
            headers,
            uri: &parts.uri,
            body: &bytes,
            now_secs: (now_ms() / 1000) as i64,
            tolerance_secs: live.config.signatures.tolerance.as_secs(),
        },
    )
    .map_err(unauthenticated)?;
    let value =
        canonical::parse(&bytes).map_err(|e| ApiError::new(Kind::MalformedJson, e.to_string()))?;
    let events = events::read(source.kind, headers, &value).map_err(|e| {
        ApiError::new(
            Kind::InvalidEvents,
            format!("not a {} delivery: {e}", source.kind.as_str()),
        )
    })?;
    // Every event at once: their claims share the store's group commits.
    let outcomes =
        futures::future::join_all(events.iter().map(|event| take(app, tenant, source, event)))
            .await;
    let mut receipt = SourceReceipt {
        accepted: 0,
        duplicates: 0,
        ignored: 0,
        refused: 0,
    };
    let mut failed = None;
    for outcome in outcomes {
        let label = match &outcome {
            Ok(outcome) => outcome.as_str(),
            Err(_) => "failed",
        };
        SOURCE_EVENTS
            .with_label_values(&[source.kind.as_str(), label])
            .inc();
        match outcome {
            Ok(Taken::Accepted) => receipt.accepted += 1,
            Ok(Taken::Duplicate) => receipt.duplicates += 1,
            Ok(Taken::Ignored) => receipt.ignored += 1,
            Ok(Taken::Refused) => receipt.refused += 1,
            Err(problem) => {
                failed.get_or_insert(problem);
            }
        }
    }
    // One event not durable fails the delivery, so the provider sends it again; the events
    // claimed meanwhile are duplicates then.
    match failed {
        Some(problem) => Err(problem),
        None => Ok(receipt),
    }
}

/// Routes, checks and claims one event.
async fn take(
    app: &App,
    tenant: &Tenant,
    source: &Source,
    event: &Event<'_>,
) -> Result<Taken, ApiError> {
    let Some(route) = event.event_type.as_deref().and_then(|t| source.route(t)) else {
        return Ok(Taken::Ignored);
    };
    let event_type = event.event_type.clone().unwrap_or_default();
    if event_type.len() > MAX_EVENT_TYPE {
        tracing::warn!(tenant = %tenant.name, source = %source.name, "event refused: its type is over {MAX_EVENT_TYPE} bytes");
        return Ok(Taken::Refused);
    }
    let Some(event_id) = event
        .id
        .clone()
        .filter(|id| !id.is_empty() && id.len() <= MAX_EVENT_ID)
    else {
        tracing::warn!(tenant = %tenant.name, source = %source.name, event_type, "event refused: no event id (1 to {MAX_EVENT_ID} bytes)");
        return Ok(Taken::Refused);
    };
    let Some(subject) = events::subject(event.body, &route.subject) else {
        tracing::warn!(tenant = %tenant.name, source = %source.name, event_id, event_type, pointer = %route.subject, "event refused: no subject at the map's pointer");
        return Ok(Taken::Refused);
    };
    // The metadata is the event's name and nothing of its body, which carries personal data.
    let mut metadata = Map::new();
    metadata.insert("source".into(), Value::from(source.name.clone()));
    metadata.insert("event_id".into(), Value::from(event_id.clone()));
    metadata.insert("event_type".into(), Value::from(event_type));
    let routed = Routed {
        tenant: &tenant.name,
        playbooks: &tenant.playbooks,
        signal: SignalRequest {
            signal_type: route.signal_type.clone(),
            subject,
            occurred_at: None,
            metadata: Some(metadata),
        },
        by: By::Event {
            source: &source.name,
            id: &event_id,
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
        // durable, so the provider is asked to send it again (then it is a duplicate).
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

/// `GET`: Okta's one-time verification of an event hook, with the configured authorization.
pub async fn verify_hook(
    State(app): State<Arc<App>>,
    path: Result<Path<(String, String)>, PathRejection>,
    headers: HeaderMap,
) -> Response {
    let live = app.live.load_full();
    let answer = find(&live, path).and_then(|(_, source)| {
        if source.kind != SourceKind::Okta {
            return Err(ApiError::new(
                Kind::MethodNotAllowed,
                "only an okta source answers GET (Okta's event hook verification)",
            ));
        }
        let uri = axum::http::Uri::from_static("/");
        verify::check(
            source,
            &verify::Delivery {
                headers: &headers,
                uri: &uri,
                body: &[],
                now_secs: 0,
                tolerance_secs: 0,
            },
        )
        .map_err(unauthenticated)?;
        let challenge = headers
            .get("x-okta-verification-challenge")
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| {
                ApiError::new(
                    Kind::InvalidEvents,
                    "Okta's verification carries X-Okta-Verification-Challenge",
                )
            })?;
        Ok(OktaVerification {
            verification: challenge.to_string(),
        })
    });
    match answer {
        Ok(verification) => Json(verification).into_response(),
        Err(problem) => problem.into_response(),
    }
}
