//! `GET /v1/endpoints`: the tenant's endpoints (each action URL of its playbooks, and one a
//! playbook no longer names while deliveries to it are queued) with their breaker state,
//! failures, last success and failure, and queued deliveries, as the store has them now.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use idem_actors::breaker::{Circuit, EndpointHealth};
use idem_schemas::timefmt::rfc3339_millis;
use idem_schemas::{EndpointList, EndpointState, EndpointView};

use crate::config::Tenant;
use crate::http::auth::TenantAuth;
use crate::http::problem::ApiError;
use crate::http::App;

/// The API's name for a breaker state.
pub fn state(circuit: Circuit) -> EndpointState {
    match circuit {
        Circuit::Closed => EndpointState::Closed,
        Circuit::Open { .. } => EndpointState::Open,
        Circuit::HalfOpen { .. } => EndpointState::HalfOpen,
    }
}

/// Every URL the tenant's playbooks call.
pub fn configured(tenant: &Tenant) -> impl Iterator<Item = &str> {
    tenant
        .playbooks
        .values()
        .flat_map(|p| p.actions.iter().filter_map(|a| a.url()))
}

/// `GET /v1/endpoints`.
pub async fn list(
    State(app): State<Arc<App>>,
    TenantAuth { tenant, .. }: TenantAuth,
) -> Result<Response, ApiError> {
    let (stored, queued) = app
        .engine
        .deliveries()
        .endpoints(&tenant.name)
        .await
        .map_err(|e| ApiError::read_failed("the endpoints", e))?;
    let mut health: BTreeMap<String, EndpointHealth> = configured(&tenant)
        .map(|url| (url.to_string(), EndpointHealth::default()))
        .collect();
    // A URL the playbooks no longer name (a reload removed it) is shown while deliveries to it
    // are still queued, and not after.
    let shown = |url: &str| health.contains_key(url) || queued.get(url).is_some_and(|n| *n > 0);
    let stored: Vec<_> = stored
        .into_iter()
        .filter(|(id, _)| shown(&id.url))
        .collect();
    health.extend(stored.into_iter().map(|(id, h)| (id.url, h)));
    let data = health
        .into_iter()
        .map(|(url, h)| EndpointView {
            state: state(h.circuit),
            consecutive_failures: h.consecutive_failures,
            last_success_at: h.last_success_ms.map(rfc3339_millis),
            last_failure_at: h.last_failure_ms.map(rfc3339_millis),
            queued: queued.get(&url).copied().unwrap_or(0),
            url,
        })
        .collect();
    Ok(Json(EndpointList { data }).into_response())
}
