//! The tenant's view of its callbacks: `GET /v1/deliveries/{id}` (status and attempt log),
//! `GET /v1/deliveries?status=…&after=…&limit=…` (a page), and
//! `POST /v1/deliveries/{id}/redeliver` (a new series of attempts for a failed or dead one,
//! same `webhook-id`, same bytes), and `POST /v1/deliveries/redeliver` (every failed or dead
//! one a filter matches, once per `Idempotency-Key`). Authenticated by the tenant's Bearer key;
//! another tenant's delivery is indistinguishable from a missing one. Redelivery requests, one
//! or bulk, are limited per tenant to [`REDELIVERIES_PER_SECOND`], so no loop of them grows a
//! delivery's log without bound.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use idem_actors::{BulkReply, RedeliverError, RedeliverFilter};
use idem_schemas::timefmt::parse_rfc3339_ms;
use idem_schemas::{DeliveryPage, DeliveryStatus, RedeliverRequest};

use crate::config::Tenant;
use crate::http::auth::TenantAuth;
use crate::http::ingest::{read_body, require_json, stored, MAX_BODY};
use crate::http::problem::{ApiError, Kind};
use crate::http::{query, App};

/// Redelivery requests (single or bulk) a tenant may make per second, in bursts of as many.
pub const REDELIVERIES_PER_SECOND: u32 = 10;

/// Page size when none is asked for, and the largest allowed.
pub const DEFAULT_LIMIT: usize = 50;
/// The largest page asked for.
pub const MAX_LIMIT: usize = 500;

fn not_found(id: &str) -> ApiError {
    ApiError::new(
        Kind::NotFound,
        format!("no delivery {id:?} for this tenant"),
    )
}

/// `GET /v1/deliveries/{id}`.
pub async fn show(
    State(app): State<Arc<App>>,
    TenantAuth { tenant, .. }: TenantAuth,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let view = app
        .engine
        .deliveries()
        .show(&tenant.name, &id)
        .await
        .map_err(|e| ApiError::read_failed("the delivery", e))?
        .ok_or_else(|| not_found(&id))?;
    Ok(Json(view).into_response())
}

/// `GET /v1/deliveries`.
pub async fn list(
    State(app): State<Arc<App>>,
    TenantAuth { tenant, .. }: TenantAuth,
    Query(query): Query<query::Query>,
) -> Result<Response, ApiError> {
    query::only(&query, &["status", "after", "limit"])?;
    let status = match query.get("status") {
        None => None,
        Some(s) => Some(DeliveryStatus::parse(s).ok_or_else(|| {
            query::invalid(format!(
                "status {s:?} is not one of queued, delivered, failed, dead, dropped"
            ))
        })?),
    };
    let limit = query::limit(&query, DEFAULT_LIMIT, MAX_LIMIT)?;
    let after = match query.get("after") {
        None => None,
        Some(cursor) => Some(
            parse_cursor(cursor)
                .ok_or_else(|| query::invalid("after must be the next_after of a previous page"))?,
        ),
    };
    let page = app
        .engine
        .deliveries()
        .list(
            &tenant.name,
            status,
            after.as_ref().map(|(s, id)| (*s, id.as_str())),
            limit,
        )
        .await
        .map_err(|e| ApiError::read_failed("the delivery", e))?;
    let next_after = page
        .next_after
        .map(|(status, id)| format!("{}:{id}", status.as_str()));
    Ok(Json(DeliveryPage {
        data: page.data,
        next_after,
    })
    .into_response())
}

fn parse_cursor(cursor: &str) -> Option<(DeliveryStatus, String)> {
    let (status, id) = cursor.split_once(':')?;
    Some((DeliveryStatus::parse(status)?, id.to_string()))
}

/// `POST /v1/deliveries/{id}/redeliver`.
pub async fn redeliver(
    State(app): State<Arc<App>>,
    TenantAuth { tenant, .. }: TenantAuth,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    limit_redeliveries(&app, &tenant)?;
    match app.engine.deliveries().redeliver(&tenant.name, &id).await {
        Ok(view) => Ok((StatusCode::ACCEPTED, Json(view)).into_response()),
        Err(RedeliverError::NotFound) => Err(not_found(&id)),
        Err(RedeliverError::NotFinal(status)) => Err(ApiError::new(
            Kind::NotRedeliverable,
            format!(
                "the delivery is {}; only failed or dead deliveries can be redelivered",
                status.as_str()
            ),
        )),
        Err(RedeliverError::Erased) => Err(ApiError::new(
            Kind::NotRedeliverable,
            "the delivery is a Security Event Token whose delivery ended: its bytes, which name \
             the subject, were erased then, so there is nothing to send again"
                .to_string(),
        )),
        Err(e) => Err(ApiError::read_failed("the delivery", e)),
    }
}

/// Takes one of `tenant`'s redelivery tokens, or says when there will be one.
fn limit_redeliveries(app: &App, tenant: &Tenant) -> Result<(), ApiError> {
    let rate = REDELIVERIES_PER_SECOND;
    app.redeliveries.take(&tenant.name, rate).map_err(|wait| {
        ApiError::new(
            Kind::RateLimited,
            format!(
                "tenant {} may ask for {rate} redeliveries per second; retry after {wait} s",
                tenant.name
            ),
        )
        .retry_after(wait)
    })
}

/// A bulk redelivery's filter from its body.
fn parse_filter(bytes: &[u8]) -> Result<(serde_json::Value, RedeliverFilter), ApiError> {
    let invalid = |detail: String| ApiError::new(Kind::InvalidFilter, detail);
    // A member named twice is refused, as in a signal: which of the two filters would apply?
    let value = idem_schemas::canonical::parse(bytes).map_err(|e| match e {
        idem_schemas::canonical::ParseError::Duplicate(_) => invalid(e.to_string()),
        idem_schemas::canonical::ParseError::Syntax(_) => {
            ApiError::new(Kind::MalformedJson, e.to_string())
        }
    })?;
    let raw: RedeliverRequest = serde_json::from_value(value.clone()).map_err(|e| {
        invalid(format!(
            "the body must be an object with status (\"dead\" or \"failed\") and optionally \
             since, until, action: {e}"
        ))
    })?;
    let status = match raw.status {
        DeliveryStatus::Dead | DeliveryStatus::Failed => raw.status,
        other => {
            return Err(invalid(format!(
                "{} deliveries cannot be redelivered: use \"dead\" or \"failed\"",
                other.as_str()
            )))
        }
    };
    let time = |name: &str, raw: Option<String>| match raw {
        None => Ok(None),
        Some(text) => parse_rfc3339_ms(&text).map(Some).ok_or_else(|| {
            invalid(format!(
                "{name} {text:?} is not an RFC 3339 time like 2026-11-29T17:54:32Z"
            ))
        }),
    };
    let filter = RedeliverFilter {
        status,
        since_ms: time("since", raw.since)?,
        until_ms: time("until", raw.until)?,
        action: raw.action,
    };
    Ok((value, filter))
}

/// `POST /v1/deliveries/redeliver`.
pub async fn redeliver_matching(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let live = app.live.load_full();
    let key = crate::key::parse(&headers)
        .map_err(|e| ApiError::new(Kind::InvalidIdempotencyKey, e.to_string()))?;
    require_json(&headers)?;
    let bytes = read_body(&headers, body, live.config.http.read_timeout, MAX_BODY).await?;
    let (value, filter) = parse_filter(&bytes)?;
    let tenant = live.api_keys.authenticate(&headers)?;
    limit_redeliveries(&app, &tenant)?;
    // The redeliveries run to their end even if the client goes away meanwhile.
    let (run, name) = (app.clone(), tenant.name.clone());
    let reply = tokio::spawn(async move {
        let key = key.as_deref().map(|key| (key, &value));
        run.engine
            .signals()
            .redeliver_bulk(&name, &filter, key)
            .await
    })
    .await;
    let error = match reply {
        Ok(Ok(reply)) => return bulk_answer(reply),
        Ok(Err(e)) => e.to_string(),
        Err(e) => e.to_string(),
    };
    tracing::error!(tenant = %tenant.name, %error, "bulk redelivery failed");
    Err(ApiError::new(
        Kind::Internal,
        "the redeliveries could not all be stored; retry (with the same Idempotency-Key)",
    ))
}

/// The HTTP answer of a bulk redelivery.
fn bulk_answer(reply: BulkReply) -> Result<Response, ApiError> {
    match reply {
        BulkReply::First(response) => Ok(stored(&response, false)),
        BulkReply::Replayed(response) => Ok(stored(&response, true)),
        BulkReply::InFlight => Err(ApiError::new(
            Kind::KeyInFlight,
            "a bulk redelivery with this Idempotency-Key is still running; retry after a moment",
        )),
        BulkReply::Mismatch => Err(ApiError::new(
            Kind::KeyReused,
            "this Idempotency-Key was used with another filter; use a new key for a new request",
        )),
    }
}
