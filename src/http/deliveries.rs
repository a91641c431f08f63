//! The tenant's view of its callbacks: `GET /v1/deliveries/{id}` (status and attempt log),
//! `GET /v1/deliveries?status=…&after=…&limit=…` (a page), and
//! `POST /v1/deliveries/{id}/redeliver` (a new series of attempts for a failed or dead one,
//! same `webhook-id`, same bytes). Authenticated by the tenant's Bearer key; another tenant's
//! delivery is indistinguishable from a missing one.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use idem_actors::delivery::{DeliveryState, RedeliverError};
use idem_schemas::{DeliveryPage, DeliveryStatus};

use crate::http::problem::{ApiError, Kind};
use crate::http::App;

/// Page size when none is asked for, and the largest allowed.
const DEFAULT_LIMIT: usize = 50;
const MAX_LIMIT: usize = 500;

fn not_found(id: &str) -> ApiError {
    ApiError::new(
        Kind::NotFound,
        format!("no delivery {id:?} for this tenant"),
    )
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    tracing::error!(error = %e, "delivery API failed");
    ApiError::new(Kind::Internal, "the delivery could not be read; retry")
}

/// The authenticated tenant's delivery `id` (another tenant's is as missing as a missing one).
fn owned(app: &App, headers: &HeaderMap, id: &str) -> Result<DeliveryState, ApiError> {
    let live = app.live.load_full();
    let tenant = live.api_keys.authenticate(&live.config, headers)?;
    app.deliveries
        .load(id)
        .map_err(internal)?
        .filter(|d| d.record.tenant == tenant.name)
        .ok_or_else(|| not_found(id))
}

/// Returns once every write made before it is durable. A delivery's record is in the store a
/// moment before its actor's commit returns; what these endpoints show must not be undone by a
/// crash in that moment, so each makes what it read durable before it answers.
async fn durable(app: &App) -> Result<(), ApiError> {
    app.deliveries
        .context()
        .store
        .commit()
        .await
        .map_err(internal)
}

/// `GET /v1/deliveries/{id}`.
pub async fn show(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let view = owned(&app, &headers, &id)?.view();
    durable(&app).await?;
    Ok(Json(view).into_response())
}

/// `GET /v1/deliveries`.
pub async fn list(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let live = app.live.load_full();
    let tenant = live.api_keys.authenticate(&live.config, &headers)?;
    let invalid = |detail: String| ApiError::new(Kind::InvalidQuery, detail);
    if let Some(unknown) = query
        .keys()
        .find(|k| !["status", "after", "limit"].contains(&k.as_str()))
    {
        return Err(invalid(format!(
            "unknown parameter {unknown:?}; use status, after, limit"
        )));
    }
    let status = match query.get("status") {
        None => None,
        Some(s) => Some(DeliveryStatus::parse(s).ok_or_else(|| {
            invalid(format!(
                "status {s:?} is not one of queued, delivered, failed, dead"
            ))
        })?),
    };
    let limit = match query.get("limit") {
        None => DEFAULT_LIMIT,
        Some(l) => l
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_LIMIT).contains(n))
            .ok_or_else(|| invalid(format!("limit must be 1 to {MAX_LIMIT}")))?,
    };
    let after = match query.get("after") {
        None => None,
        Some(cursor) => Some(parse_cursor(cursor).ok_or_else(|| {
            invalid("after must be the next_after of a previous page".to_string())
        })?),
    };
    let ids = app
        .deliveries
        .context()
        .store
        .list_deliveries(
            &tenant.name,
            status,
            after.as_ref().map(|(s, id)| (*s, id.as_str())),
            limit + 1,
        )
        .map_err(internal)?;
    let has_more = ids.len() > limit;
    let mut data = Vec::with_capacity(limit);
    let mut last = None;
    for (st, id) in ids.into_iter().take(limit) {
        if let Some(d) = app.deliveries.load(&id).map_err(internal)? {
            data.push(d.view());
        }
        last = Some(format!("{}:{id}", st.as_str()));
    }
    let next_after = if has_more { last } else { None };
    durable(&app).await?;
    Ok(Json(DeliveryPage { data, next_after }).into_response())
}

fn parse_cursor(cursor: &str) -> Option<(DeliveryStatus, String)> {
    let (status, id) = cursor.split_once(':')?;
    Some((DeliveryStatus::parse(status)?, id.to_string()))
}

/// `POST /v1/deliveries/{id}/redeliver`.
pub async fn redeliver(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    owned(&app, &headers, &id)?;
    match app.deliveries.redeliver(&id).await {
        Ok(view) => Ok((StatusCode::ACCEPTED, Json(view)).into_response()),
        Err(RedeliverError::NotFound) => Err(not_found(&id)),
        Err(RedeliverError::NotFinal(status)) => Err(ApiError::new(
            Kind::NotRedeliverable,
            format!(
                "the delivery is {}; only failed or dead deliveries can be redelivered",
                status.as_str()
            ),
        )),
        Err(e) => Err(internal(e)),
    }
}
