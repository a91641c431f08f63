//! `GET /v1/stats`: a tenant's live figures, what the console's header shows and refreshes. The
//! signals it sent and the decisions made from them are counted by the node that answers, since
//! it started (each node counts what it took: nothing is written for them on the hot path); its
//! queued and dead deliveries are read from the store, shared by every node, counted up to
//! [`COUNTED_TO`] so that a long outage costs the page no long scan.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use axum::extract::State;

use axum::response::{IntoResponse, Response};
use axum::Json;
use idem_schemas::timefmt::rfc3339_millis;
use idem_schemas::{DeliveryStatus, TenantStats};

use crate::http::auth::TenantAuth;
use crate::http::problem::ApiError;
use crate::http::App;

/// Queued and dead deliveries are counted up to this many; as many means at least.
pub const COUNTED_TO: u64 = 10_000;

#[derive(Default)]
struct Counts {
    signals: AtomicU64,
    decisions: AtomicU64,
}

/// Signals and decisions per tenant, as this node counted them.
pub struct Tally {
    started_ms: u64,
    tenants: RwLock<HashMap<String, Counts>>,
}

impl Tally {
    /// A tally starting at `started_ms`, with nothing counted.
    pub fn new(started_ms: u64) -> Self {
        Tally {
            started_ms,
            tenants: RwLock::default(),
        }
    }

    /// Counts a signal of `tenant`: authenticated and naming one of its playbooks, or a source
    /// event mapped to one.
    pub fn signal(&self, tenant: &str) {
        self.add(tenant, |c| &c.signals);
    }

    /// Counts a decision made for `tenant`.
    pub fn decision(&self, tenant: &str) {
        self.add(tenant, |c| &c.decisions);
    }

    /// `tenant`'s signals and decisions so far.
    fn read(&self, tenant: &str) -> (u64, u64) {
        let tenants = self.tenants.read().unwrap_or_else(PoisonError::into_inner);
        tenants.get(tenant).map_or((0, 0), |c| {
            (
                c.signals.load(Ordering::Relaxed),
                c.decisions.load(Ordering::Relaxed),
            )
        })
    }

    // Tenants are the configured ones (only authenticated requests count), so the map stays
    // small; the write lock is taken once per tenant.
    fn add(&self, tenant: &str, counter: fn(&Counts) -> &AtomicU64) {
        if let Some(counts) = self
            .tenants
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(tenant)
        {
            counter(counts).fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut tenants = self.tenants.write().unwrap_or_else(PoisonError::into_inner);
        counter(tenants.entry(tenant.to_string()).or_default()).fetch_add(1, Ordering::Relaxed);
    }
}

/// `GET /v1/stats`.
pub async fn show(
    State(app): State<Arc<App>>,
    TenantAuth { tenant, .. }: TenantAuth,
) -> Result<Response, ApiError> {
    let count = |status| {
        app.engine
            .deliveries()
            .count(&tenant.name, status, COUNTED_TO)
    };
    let (queued, dead) =
        tokio::try_join!(count(DeliveryStatus::Queued), count(DeliveryStatus::Dead))
            .map_err(|e| ApiError::read_failed("the deliveries", e))?;
    let (signals, decisions) = app.stats.read(&tenant.name);
    Ok(Json(TenantStats {
        tenant: tenant.name.clone(),
        since: rfc3339_millis(app.stats.started_ms),
        signals,
        decisions,
        queued,
        dead,
        counted_to: COUNTED_TO,
    })
    .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_tenant_has_its_own_counts() {
        let tally = Tally::new(0);
        tally.signal("acme");
        tally.signal("acme");
        tally.decision("acme");
        tally.signal("beta");
        assert_eq!(tally.read("acme"), (2, 1));
        assert_eq!(tally.read("beta"), (1, 0));
        assert_eq!(tally.read("gamma"), (0, 0));
    }
}
