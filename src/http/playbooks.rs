//! `POST /v1/playbooks/{type}/evaluate`: what the tenant's playbook for `type` would decide for
//! the signal in the body now (its verdict, the rule that decides, its actions' names, the
//! rules whose evaluation failed), its subject's history read from the kept decisions. A dry
//! run: it claims nothing, stores nothing and sends nothing. Authenticated by the tenant's
//! Bearer key; the body is a signal as `POST /v1/signals` takes it, of the path's type.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use idem_schemas::PlaybookEvaluation;

use crate::http::auth::TenantAuth;
use crate::http::ingest::{parse_signal, read_body, require_json, MAX_BODY};
use crate::http::problem::{ApiError, Kind};
use crate::http::App;

/// `POST /v1/playbooks/{type}/evaluate`.
pub async fn evaluate(
    State(app): State<Arc<App>>,
    TenantAuth { tenant, live }: TenantAuth,
    Path(signal_type): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    require_json(&headers)?;
    let bytes = read_body(&headers, body, live.config.http.read_timeout, MAX_BODY).await?;
    let (_, signal) = parse_signal(&bytes)?;
    if signal.signal_type != signal_type {
        return Err(ApiError::new(
            Kind::InvalidSignal,
            format!(
                "the signal's type {:?} is not the playbook's, {signal_type:?}",
                signal.signal_type
            ),
        ));
    }
    let playbook = tenant.playbooks.get(&signal_type).ok_or_else(|| {
        ApiError::new(
            Kind::UnknownSignalType,
            format!(
                "tenant {} has no playbook for signal type {signal_type:?}",
                tenant.name
            ),
        )
    })?;
    let evaluated = app
        .engine
        .decisions()
        .evaluate(&tenant.name, playbook, &signal)
        .await
        .map_err(|e| ApiError::read_failed("the subject's history", e))?;
    Ok(Json(PlaybookEvaluation {
        decision: evaluated.verdict,
        rule: evaluated.rule,
        actions: evaluated.actions,
        errors: evaluated.errors,
    })
    .into_response())
}
