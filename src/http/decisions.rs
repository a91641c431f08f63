//! The decisions a tenant can look up: `GET /v1/decisions/{id}` (one decision, with each
//! action's current delivery status) and `GET /v1/decisions?subject=…&type=…&limit=…&after=…`
//! (a subject's decisions, newest first, a page at a time; without `subject`, the tenant's
//! newest decisions). `subject_id=` names the subject by an RFC 9493 subject identifier object
//! (as JSON), in the canonical form sources digest it in. The subject is digested for the
//! lookup, as it was when the decisions were made; it is never stored. Authenticated by the
//! tenant's Bearer key; another tenant's decision is indistinguishable from a missing one.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use idem_schemas::DecisionPage;

use crate::http::auth::TenantAuth;
use crate::http::problem::{ApiError, Kind};
use crate::http::{query, App};

/// Page size when none is asked for, and the largest allowed.
pub const DEFAULT_LIMIT: usize = 50;
/// The largest page asked for.
pub const MAX_LIMIT: usize = 200;

/// `GET /v1/decisions/{id}`.
pub async fn show(
    State(app): State<Arc<App>>,
    TenantAuth { tenant, .. }: TenantAuth,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let view = app
        .engine
        .decisions()
        .show(&tenant.name, &id)
        .await
        .map_err(|e| ApiError::read_failed("the decisions", e))?
        .ok_or_else(|| {
            ApiError::new(
                Kind::NotFound,
                format!("no decision {id:?} for this tenant (or it is past decisions.retention)"),
            )
        })?;
    Ok(Json(view).into_response())
}

/// `GET /v1/decisions[?subject=…]`: a subject's decisions, or without one the tenant's newest.
pub async fn list(
    State(app): State<Arc<App>>,
    TenantAuth { tenant, .. }: TenantAuth,
    Query(query): Query<query::Query>,
) -> Result<Response, ApiError> {
    query::only(&query, &["subject", "subject_id", "type", "after", "limit"])?;
    let subject = match (query.get("subject"), query.get("subject_id")) {
        (Some(_), Some(_)) => {
            return Err(query::invalid(
                "send subject or subject_id, not both",
            ))
        }
        (Some(s), None) if s.is_empty() => {
            return Err(query::invalid(
                "subject must not be empty: the identifier the signals were about, or leave it out for the newest decisions",
            ))
        }
        (Some(s), None) => Some(s.clone()),
        (None, Some(id)) => Some(subject_id(id)?),
        (None, None) => None,
    };
    let limit = query::limit(&query, DEFAULT_LIMIT, MAX_LIMIT)?;
    let after = match query.get("after") {
        Some(cursor) if !cursor.starts_with("dec_") => {
            return Err(query::invalid(
                "after must be the next_after of a previous page",
            ))
        }
        cursor => cursor.map(String::as_str),
    };
    let signal_type = query.get("type").map(String::as_str);
    let page = app
        .engine
        .decisions()
        .list(&tenant.name, subject.as_deref(), signal_type, after, limit)
        .await
        .map_err(|e| ApiError::read_failed("the decisions", e))?;
    Ok(Json(DecisionPage {
        data: page.data,
        next_after: page.next_after,
    })
    .into_response())
}

/// The subject a `subject_id` names: a subject identifier object, as JSON.
fn subject_id(text: &str) -> Result<String, ApiError> {
    let refused = || {
        query::invalid(
            "subject_id must be a subject identifier object as JSON (RFC 9493), like {\"format\":\"email\",\"email\":\"a@example.com\"}",
        )
    };
    let value = idem_schemas::canonical::parse(text.as_bytes()).map_err(|_| refused())?;
    if !value.is_object() {
        return Err(refused());
    }
    crate::source::subject::of(&value).ok_or_else(refused)
}
