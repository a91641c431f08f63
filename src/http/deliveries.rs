//! The tenant's view of its callbacks: `GET /v1/deliveries/{id}` (status and attempt log),
//! `GET /v1/deliveries?status=…&after=…&limit=…` (a page), and
//! `POST /v1/deliveries/{id}/redeliver` (a new series of attempts for a failed or dead one,
//! same `webhook-id`, same bytes). Authenticated by the tenant's Bearer key; another tenant's
//! delivery is indistinguishable from a missing one.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use idem_actors::RedeliverError;
use idem_schemas::{DeliveryPage, DeliveryStatus};

use crate::http::problem::{ApiError, Kind};
use crate::http::{query, App};

/// Page size when none is asked for, and the largest allowed.
const DEFAULT_LIMIT: usize = 50;
const MAX_LIMIT: usize = 500;

fn not_found(id: &str) -> ApiError {
    ApiError::new(
        Kind::NotFound,
        format!("no delivery {id:?} for this tenant"),
    )
}

/// `GET /v1/deliveries/{id}`.
pub async fn show(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let live = app.live.load_full();
    let tenant = live.api_keys.authenticate(&live.config, &headers)?;
    let view = app
        .engine
        .delivery(&tenant.name, &id)
        .await
        .map_err(|e| ApiError::read_failed("the delivery", e))?
        .ok_or_else(|| not_found(&id))?;
    Ok(Json(view).into_response())
}

/// `GET /v1/deliveries`.
pub async fn list(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Query(query): Query<query::Query>,
) -> Result<Response, ApiError> {
    let live = app.live.load_full();
    let tenant = live.api_keys.authenticate(&live.config, &headers)?;
    query::only(&query, &["status", "after", "limit"])?;
    let status = match query.get("status") {
        None => None,
        Some(s) => Some(DeliveryStatus::parse(s).ok_or_else(|| {
            query::invalid(format!(
                "status {s:?} is not one of queued, delivered, failed, dead"
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
        .list_deliveries(
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
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let live = app.live.load_full();
    let tenant = live.api_keys.authenticate(&live.config, &headers)?;
    match app.engine.redeliver(&tenant.name, &id).await {
        Ok(view) => Ok((StatusCode::ACCEPTED, Json(view)).into_response()),
        Err(RedeliverError::NotFound) => Err(not_found(&id)),
        Err(RedeliverError::NotFinal(status)) => Err(ApiError::new(
            Kind::NotRedeliverable,
            format!(
                "the delivery is {}; only failed or dead deliveries can be redelivered",
                status.as_str()
            ),
        )),
        Err(e) => Err(ApiError::read_failed("the delivery", e)),
    }
}
