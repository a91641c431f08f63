//! The node handle: this process as an operator sees it. Whether its store can make a write
//! durable now (`/healthz`), a watch on the store's failure for good (after which the process
//! exits), the gauges `/metrics` reads at scrape time, its turn at jobs one node at a time runs
//! (by lease), and a sweep of what has expired.

use std::sync::Arc;
use std::time::Duration;

use idem_schemas::timefmt::now_ms;

use crate::claim::Claims;
use crate::delivery::DeliveryActors;
use crate::settings::Settings;
use crate::store::{Halted, Store, StoreError};

/// How long `/healthz` waits for the store's probe to become durable.
pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(5);

/// What `/metrics` reads at scrape time.
#[derive(Debug, Clone, Copy)]
pub struct Gauges {
    /// Claim actors alive.
    pub live_claims: usize,
    /// Delivery actors alive.
    pub live_deliveries: usize,
    /// Deliveries waiting for a retry.
    pub queued: u64,
    /// When the longest-waiting queued delivery was created (unix milliseconds).
    pub oldest_queued_created_ms: Option<u64>,
}

impl Gauges {
    /// How old the longest-waiting queued delivery is, in whole seconds (0 when none).
    pub fn oldest_queued_age_s(&self) -> u64 {
        self.oldest_queued_created_ms
            .map_or(0, |created| now_ms().saturating_sub(created) / 1000)
    }
}

/// The node handle: cheap to clone.
#[derive(Clone)]
pub struct Node {
    store: Arc<dyn Store>,
    claims: Arc<Claims>,
    deliveries: Arc<DeliveryActors>,
    settings: Arc<Settings>,
}

impl Node {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        claims: Arc<Claims>,
        deliveries: Arc<DeliveryActors>,
        settings: Arc<Settings>,
    ) -> Self {
        Node {
            store,
            claims,
            deliveries,
            settings,
        }
    }

    /// Whether the store can make a write durable now: a probe written through the same path
    /// as every write, given [`HEALTH_TIMEOUT`] to become durable.
    pub async fn health(&self) -> Result<(), StoreError> {
        tokio::time::timeout(HEALTH_TIMEOUT, self.store.probe())
            .await
            .map_err(|_| StoreError::Unresponsive(HEALTH_TIMEOUT))?
    }

    /// Watches for the store's failure for good, after which the process must exit so that a
    /// restart recovers from what is durable.
    pub fn halted(&self) -> Halted {
        self.store.halted()
    }

    /// The figures `/metrics` reads at scrape time.
    pub async fn gauges(&self) -> Gauges {
        Gauges {
            live_claims: self.claims.family().live(),
            live_deliveries: self.deliveries.family().live(),
            queued: self.store.queued().await.unwrap_or(0),
            oldest_queued_created_ms: self
                .store
                .oldest_queued()
                .await
                .ok()
                .flatten()
                .map(|record| record.created_at_ms),
        }
    }

    /// Takes or keeps this node's turn at `job`, which one node at a time runs: its fencing
    /// token while this node holds the job's lease, none while another live node does.
    pub async fn turn_at(&self, job: &str) -> Result<Option<u64>, StoreError> {
        self.store.lease(job).await
    }

    /// Deletes what has expired now (the sweeper does this every `sweep_interval`), and
    /// returns once that is durable.
    pub async fn sweep(&self) -> Result<(), StoreError> {
        let (store, requeue) = (self.store.clone(), self.settings.delivery.shortest_step());
        tokio::task::spawn_blocking(move || {
            while crate::sweeper::sweep_once(&*store, requeue)? > 0 {}
            Ok::<_, StoreError>(())
        })
        .await
        .map_err(|e| StoreError::from(std::io::Error::other(e)))??;
        self.store.settle().await
    }
}
