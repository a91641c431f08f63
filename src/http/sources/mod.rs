//! `POST /v1/sources/{tenant}/{source}`: a provider's delivery, taken as it is sent. In order,
//! each refusal leaving nothing stored: the source (404), the body's size, the provider's
//! authentication over the raw bytes (401), the delivery's shape (400). Then every event is
//! routed by its type and claimed under the provider's event id, all at once, so one group
//! commit makes the batch durable; the answer counts what became of each event once every
//! accepted one's claim and decision are on disk. Callbacks are queued in the same write and
//! made by the retry worker after the answer: providers time out in seconds. An event's claim
//! lasts at least [`idem_actors::signals::EVENT_CLAIM_MIN`], the longest a provider retries.
//! An `ssf` source's SETs are taken by `ssf` (pushed here, or polled by `poll`); `take` carries
//! one event into the engine for every kind. Also `GET`, Okta's one-time verification of an
//! event hook, and `GET …/status`, what became of a source's events on this node.

pub mod poll;
pub mod ssf;
pub mod subscribe;
pub mod take;

use std::sync::Arc;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use idem_schemas::canonical;
use idem_schemas::timefmt::now_ms;
use idem_schemas::timefmt::rfc3339_millis;
use idem_schemas::{NamedSource, OktaVerification, SourceList, SourceReceipt, SubscriptionStatus};

use crate::config::Tenant;
use crate::http::auth::TenantAuth;
use crate::http::ingest::read_body;
use crate::http::metrics::{SOURCE_DELIVERIES, SOURCE_EVENTS};
use crate::http::problem::{ApiError, Kind};
use crate::http::{App, Live};
use crate::source::events;
use crate::source::runtime::SourceState;
use crate::source::verify::{self, Refused};
use crate::source::{Source, SourceKind, MAX_SOURCE_BODY};
use take::{Fate, Ready};

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
        Refused::Repeated(_) => ApiError::new(Kind::RepeatedHeader, refused.to_string()),
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
    let state = app.sources.of(&tenant.name, source);
    let (parts, body) = request.into_parts();
    if source.kind == SourceKind::Ssf {
        return ssf::push(&app, &live, tenant, source, &state, &parts, body).await;
    }
    match handle(&app, &live, tenant, source, &state, &parts, body).await {
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
    state: &SourceState,
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
        &verify::Received {
            headers,
            uri: &parts.uri,
            body: &bytes,
            now_secs: (now_ms() / 1000) as i64,
            tolerance_secs: live.config.signatures.tolerance.as_secs(),
            public_url: live.config.public_url.as_deref(),
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
    // An event repeated within the delivery is claimed once, by its first copy; the others are
    // its duplicates (the answer waits for the first, so they are acknowledged only once it is
    // durable), however many copies come, rather than each waiting on the claim.
    let mut claimed = std::collections::HashSet::new();
    let mut outcomes: Vec<Option<Result<Fate, ApiError>>> = Vec::with_capacity(events.len());
    let mut to_claim = Vec::new();
    let mut at = Vec::new();
    let mut first_refusal = None;
    for event in &events {
        let outcome = match take::prepare(source, event) {
            Ready::Ignored => Some(Ok(Fate::Ignored)),
            Ready::Refused(why) => {
                first_refusal.get_or_insert(why);
                Some(Ok(Fate::Refused))
            }
            Ready::Claim(p) if !claimed.insert(p.claim_key().to_string()) => {
                Some(Ok(Fate::REPEATED))
            }
            Ready::Claim(p) => {
                at.push(outcomes.len());
                to_claim.push(p);
                None
            }
        };
        outcomes.push(outcome);
    }
    let taken = take::claim_all(app, tenant, source, to_claim).await;
    for (n, outcome) in at.into_iter().zip(taken.outcomes) {
        outcomes[n] = outcome;
    }
    let mut receipt = SourceReceipt {
        accepted: 0,
        duplicates: 0,
        ignored: 0,
        refused: 0,
    };
    let mut failed = None;
    for outcome in outcomes.into_iter().flatten() {
        let label = match &outcome {
            Ok(fate) => fate.label(),
            Err(_) => "failed",
        };
        SOURCE_EVENTS
            .with_label_values(&[source.kind.as_str(), label])
            .inc();
        if let Ok(fate) = &outcome {
            state.count(*fate);
        }
        match outcome {
            Ok(Fate::Claimed {
                taken_now: true, ..
            }) => receipt.accepted += 1,
            Ok(Fate::Claimed { .. }) => receipt.duplicates += 1,
            Ok(Fate::Ignored) => receipt.ignored += 1,
            Ok(Fate::Refused) => receipt.refused += 1,
            Err(problem) => {
                failed.get_or_insert(problem);
            }
        }
    }
    // One line for a delivery's refused events, however many: the first one's reason.
    if let Some(first) = first_refusal {
        tracing::warn!(tenant = %tenant.name, source = %source.name, refused = receipt.refused, first = %first, "events refused (acknowledged, not claimed)");
    }
    // Over the tenant's rate limit: the others wait for the provider to send it again.
    if failed.is_none() {
        failed = taken.limited;
    }
    // One event not durable fails the delivery, so the provider sends it again; the events
    // claimed meanwhile are duplicates then.
    match failed {
        Some(problem) => Err(problem),
        None => Ok(receipt),
    }
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
            &verify::Received {
                headers: &headers,
                uri: &uri,
                body: &[],
                now_secs: 0,
                tolerance_secs: 0,
                public_url: live.config.public_url.as_deref(),
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

/// `GET /v1/sources/{tenant}/{source}/status`, with the tenant's Bearer key: what became of the
/// source's events on this node since it started, and what an SSF transmitter last announced.
/// Another tenant's source is indistinguishable from a missing one.
pub async fn status(
    State(app): State<Arc<App>>,
    TenantAuth {
        tenant: caller,
        live,
    }: TenantAuth,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, ApiError> {
    let (tenant, source) = find(&live, path)?;
    if caller.name != tenant.name {
        return Err(ApiError::new(Kind::NotFound, "no such tenant or source"));
    }
    let mut status = app.sources.of(&tenant.name, source).view(source.kind);
    if source.ssf.as_ref().is_some_and(|s| s.transmitter.is_some()) {
        let record = app
            .engine
            .streams()
            .subscription(&tenant.name, &source.name)
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "the store failed on a subscription");
                ApiError::new(Kind::Unavailable, "the store cannot be reached; retry")
            })?
            .unwrap_or_default();
        status.subscription = Some(SubscriptionStatus {
            stream_id: record.stream_id,
            status: record.status,
            events_delivered: record.events_delivered,
            verified_at: record.verified_at_ms.map(rfc3339_millis),
            last_error: record.last_error,
        });
    }
    Ok(Json(status).into_response())
}

/// `GET /v1/sources`, with the tenant's Bearer key: the tenant's sources by name, each with its
/// status on this node.
pub async fn list(
    State(app): State<Arc<App>>,
    TenantAuth { tenant, .. }: TenantAuth,
) -> Json<SourceList> {
    let mut data: Vec<NamedSource> = tenant
        .sources
        .values()
        .map(|source| NamedSource {
            name: source.name.clone(),
            status: app.sources.of(&tenant.name, source).view(source.kind),
        })
        .collect();
    data.sort_by(|a, b| a.name.cmp(&b.name));
    Json(SourceList { data })
}
