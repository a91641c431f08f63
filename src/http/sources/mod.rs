//! `POST /v1/sources/{tenant}/{source}`: a provider's delivery, taken as it is sent. In order,
//! each refusal leaving nothing stored: the source (404), the body's size, the provider's
//! authentication over the raw bytes (401), the delivery's shape (400). Then every event is
//! routed by its type and claimed under the provider's event id, all at once, so one group
//! commit makes the batch durable; the answer counts what became of each event once every
//! accepted one's claim and decision are on disk. Callbacks are queued in the same write and
//! their first attempts start after the answer (the retry worker is handed their logs), never
//! inside the request: providers time out in seconds. An event's claim
//! lasts at least [`idem_actors::signals::EVENT_CLAIM_MIN`], the longest a provider retries.
//! An `ssf` source's SETs are taken by `ssf` (pushed here, or polled by `poll`); `take` carries
//! one event into the engine for every kind. Also `GET`, Okta's one-time verification of an
//! event hook, and `GET …/status`, what became of a source's events on this node; `manage`
//! answers what a tenant asks of a subscribed source's stream.

pub mod manage;
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
use crate::http::refusals;
use crate::http::{App, Live};
use crate::source::events;
use crate::source::runtime::SourceState;
use crate::source::set::{Err as SetErr, SetRefusal};
use crate::source::verify::{self, Refused};
use crate::source::{Source, SourceKind, MAX_SOURCE_BODY};
use take::{Fate, Ready};

/// What a caller not authenticated as a source's sender is told, whatever the source and
/// whether there is one: why is logged, never answered.
pub const UNAUTHENTICATED: &str = "not authenticated as this source's sender (or no such source)";

/// Whether a request is a pushed SET, whose refusals take RFC 8935's form: by its media type,
/// not by its source, so that the form shows nothing of the source either.
fn is_set_push(headers: &HeaderMap) -> bool {
    events::has_media_type(headers, ssf::SECEVENT_JWT)
}

/// Where `source`'s sender reaches idem, as its check reads it: only Twilio's signature covers
/// the URL it posted to, so for any other kind nothing is made.
fn base_url(app: &App, live: &Live, source: &Source) -> String {
    match source.kind {
        SourceKind::Twilio => app.base_url(live),
        _ => String::new(),
    }
}

/// The largest body read of a request: a SET's, or a provider's delivery's.
fn body_limit(set_push: bool) -> usize {
    match set_push {
        true => crate::source::set::MAX_SET,
        false => MAX_SOURCE_BODY,
    }
}

/// The answer to a caller not authenticated as a source's sender, in its request's form.
fn unauthenticated_answer(set_push: bool) -> Response {
    match set_push {
        true => ssf::refused(&SetRefusal::new(
            SetErr::AuthenticationFailed,
            UNAUTHENTICATED,
        )),
        false => ApiError::new(Kind::SourceUnauthenticated, UNAUTHENTICATED).into_response(),
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

/// A refused authentication as answered: a stale timestamp (told only once the signature
/// matched) and a repeated header as they are, anything else as [`UNAUTHENTICATED`].
fn unauthenticated(refused: Refused) -> ApiError {
    match refused {
        Refused::Stale(_) => ApiError::new(Kind::StaleTimestamp, refused.to_string()),
        Refused::Repeated(_) => ApiError::new(Kind::RepeatedHeader, refused.to_string()),
        _ => ApiError::new(Kind::SourceUnauthenticated, UNAUTHENTICATED),
    }
}

/// The handler of a provider's delivery.
pub async fn receive(
    State(app): State<Arc<App>>,
    path: Result<Path<(String, String)>, PathRejection>,
    request: Request,
) -> Response {
    let live = app.live.load_full();
    let (parts, body) = request.into_parts();
    let set_push = is_set_push(&parts.headers);
    let surface = match set_push {
        true => refusals::SSF,
        false => refusals::SOURCES,
    };
    if let Some(name) = verify::repeated(&parts.headers) {
        let detail = Refused::Repeated(name).to_string();
        if refusals::note(surface, Kind::RepeatedHeader.describe().1) {
            tracing::info!(
                surface,
                header = name,
                "a delivery was refused: a header sent twice"
            );
        }
        return match set_push {
            true => ssf::refused(&SetRefusal::new(SetErr::InvalidRequest, detail)),
            false => ApiError::new(Kind::RepeatedHeader, detail).into_response(),
        };
    }
    // No such tenant or source: answered as a known source's unauthenticated caller is, once
    // its body is read as theirs is (so that its size or its pace shows nothing either).
    let Ok((tenant, source)) = find(&live, path) else {
        let limit = body_limit(set_push);
        let read = read_body(&parts.headers, body, live.config.http.read_timeout, limit).await;
        let reason = read
            .as_ref()
            .err()
            .map_or(refusals::UNKNOWN_SOURCE, ApiError::slug);
        if refusals::note(surface, reason) {
            tracing::info!(
                surface,
                reason,
                "a delivery to no such tenant or source was refused"
            );
        }
        return match read {
            Ok(_) => unauthenticated_answer(set_push),
            Err(problem) => problem.into_response(),
        };
    };
    let kind = source.kind.as_str();
    let state = app.sources.of(&tenant.name, source);
    if source.kind == SourceKind::Ssf {
        return ssf::push(&app, &live, tenant, source, &state, &parts, body).await;
    }
    match handle(&app, &live, tenant, source, &state, &parts, body).await {
        Ok(receipt) => {
            SOURCE_DELIVERIES.with_label_values(&[kind, "ok"]).inc();
            Json(receipt).into_response()
        }
        Err(Failed { problem, why }) => {
            SOURCE_DELIVERIES
                .with_label_values(&[kind, problem.slug()])
                .inc();
            let refused = problem.problem().status < 500;
            if refused && refusals::note(refusals::SOURCES, problem.slug()) {
                let reason = problem.slug();
                let detail = why.map_or_else(|| problem.detail().to_string(), |w| w.to_string());
                tracing::info!(tenant = %tenant.name, source = %source.name, kind, reason, detail, "a delivery was refused");
            }
            match set_push && problem.slug() == "source-unauthenticated" {
                true => unauthenticated_answer(true),
                false => problem.into_response(),
            }
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
) -> Result<SourceReceipt, Failed> {
    let set_push = is_set_push(&parts.headers);
    let headers = &parts.headers;
    let bytes = read_body(
        headers,
        body,
        live.config.http.read_timeout,
        body_limit(set_push),
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
            base_url: &base_url(app, live, source),
        },
    )
    .map_err(|refused| Failed {
        problem: unauthenticated(refused),
        why: Some(refused),
    })?;
    if source.kind == SourceKind::Cloudevents
        && events::has_media_type(headers, events::CLOUDEVENTS_BATCH)
    {
        let over = events::array_len(&bytes).filter(|n| *n > events::MAX_CLOUDEVENTS_BATCH);
        if let Some(n) = over {
            return Err(Failed::from(ApiError::new(
                Kind::PayloadTooLarge,
                format!(
                    "a batch of CloudEvents holds at most {} events, not {n}: send it in parts",
                    events::MAX_CLOUDEVENTS_BATCH
                ),
            )));
        }
    }
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
        Some(problem) => Err(problem.into()),
        None => Ok(receipt),
    }
}

/// Why a delivery was not taken: the answer, and for a refused authentication its reason,
/// which is logged, never answered.
struct Failed {
    problem: ApiError,
    why: Option<Refused>,
}

impl From<ApiError> for Failed {
    fn from(problem: ApiError) -> Self {
        Failed { problem, why: None }
    }
}

/// `GET`: Okta's one-time verification of an event hook, with the configured authorization.
/// No such source is answered as an unauthenticated caller is.
pub async fn verify_hook(
    State(app): State<Arc<App>>,
    path: Result<Path<(String, String)>, PathRejection>,
    headers: HeaderMap,
) -> Response {
    let live = app.live.load_full();
    let found =
        find(&live, path).map_err(|_| ApiError::new(Kind::SourceUnauthenticated, UNAUTHENTICATED));
    let answer = found.and_then(|(_, source)| {
        // Only an okta source answers GET; another is answered as no source is.
        if source.kind != SourceKind::Okta {
            return Err(ApiError::new(Kind::SourceUnauthenticated, UNAUTHENTICATED));
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
                base_url: &base_url(&app, &live, source),
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
        Err(problem) => {
            if refusals::note(refusals::SOURCES, problem.slug()) {
                tracing::info!(reason = problem.slug(), "Okta's verification was refused");
            }
            problem.into_response()
        }
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
    status.subscription = subscription(&app, &tenant.name, source).await?;
    Ok(Json(status).into_response())
}

/// The stream of a source subscribed at its transmitter, as the store records it (none for a
/// source wired by hand).
async fn subscription(
    app: &App,
    tenant: &str,
    source: &Source,
) -> Result<Option<SubscriptionStatus>, ApiError> {
    if source.ssf.as_ref().is_none_or(|s| s.transmitter.is_none()) {
        return Ok(None);
    }
    let record = app
        .engine
        .streams()
        .subscription(tenant, &source.name)
        .await
        .map_err(manage::unavailable)?
        .unwrap_or_default();
    Ok(Some(SubscriptionStatus {
        stream_id: record.stream_id,
        status: record.status,
        events_delivered: record.events_delivered,
        verified_at: record.verified_at_ms.map(rfc3339_millis),
        last_error: record.last_error,
    }))
}

/// `GET /v1/sources`, with the tenant's Bearer key: the tenant's sources by name, each with its
/// status on this node and, when subscribed, its stream as recorded.
pub async fn list(
    State(app): State<Arc<App>>,
    TenantAuth { tenant, .. }: TenantAuth,
) -> Result<Json<SourceList>, ApiError> {
    let mut data = Vec::with_capacity(tenant.sources.len());
    for source in tenant.sources.values() {
        let mut status = app.sources.of(&tenant.name, source).view(source.kind);
        status.subscription = subscription(&app, &tenant.name, source).await?;
        data.push(NamedSource {
            name: source.name.clone(),
            status,
        });
    }
    data.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Json(SourceList { data }))
}
