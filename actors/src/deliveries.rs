//! The deliveries handle: a tenant's callbacks and SETs as the API shows them (one, a page, a
//! count), a new series of attempts for a failed or dead one, and its endpoints' health. Another
//! tenant's delivery is as missing as a missing one. Every read settles what it read before it
//! answers (see [`crate::store`]'s `settle`).

use std::collections::HashMap;
use std::sync::Arc;

use idem_schemas::{DeliveryStatus, DeliveryView};

use crate::delivery::{DeliveryActors, DeliveryError, RedeliverError};
use crate::endpoint::{EndpointHealth, EndpointId, Endpoints};
use crate::store::{Store, StoreError};

/// Why deliveries could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DeliveriesError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A delivery could not be read.
    #[error(transparent)]
    Delivery(#[from] DeliveryError),
}

/// A page of a tenant's deliveries.
#[derive(Debug)]
pub struct DeliveryList {
    /// The deliveries, in (status, id) order.
    pub data: Vec<DeliveryView>,
    /// Where the next page starts, if there is one.
    pub next_after: Option<(DeliveryStatus, String)>,
}

/// The deliveries handle: cheap to clone.
#[derive(Clone)]
pub struct Deliveries {
    store: Arc<dyn Store>,
    actors: Arc<DeliveryActors>,
    endpoints: Arc<Endpoints>,
}

impl Deliveries {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        actors: Arc<DeliveryActors>,
        endpoints: Arc<Endpoints>,
    ) -> Self {
        Deliveries {
            store,
            actors,
            endpoints,
        }
    }

    /// `tenant`'s delivery `id`.
    pub async fn show(
        &self,
        tenant: &str,
        id: &str,
    ) -> Result<Option<DeliveryView>, DeliveriesError> {
        let view = self
            .actors
            .load(id)
            .await?
            .filter(|d| d.record.tenant == tenant)
            .map(|d| d.view());
        self.store.settle().await?;
        Ok(view)
    }

    /// How many of `tenant`'s deliveries have `status`, counting no further than `cap`.
    pub async fn count(
        &self,
        tenant: &str,
        status: DeliveryStatus,
        cap: u64,
    ) -> Result<u64, DeliveriesError> {
        Ok(self.store.count_deliveries(tenant, status, cap).await?)
    }

    /// A page of `tenant`'s deliveries with `status` (every status when `None`), after the
    /// cursor `after`, at most `limit`.
    pub async fn list(
        &self,
        tenant: &str,
        status: Option<DeliveryStatus>,
        after: Option<(DeliveryStatus, &str)>,
        limit: usize,
    ) -> Result<DeliveryList, DeliveriesError> {
        let ids = self
            .store
            .list_deliveries(tenant, status, after, limit + 1)
            .await?;
        let has_more = ids.len() > limit;
        let mut data = Vec::with_capacity(limit);
        let mut last = None;
        for (status, id) in ids.into_iter().take(limit) {
            if let Some(d) = self.actors.load(&id).await? {
                data.push(d.view());
            }
            last = Some((status, id));
        }
        self.store.settle().await?;
        Ok(DeliveryList {
            data,
            next_after: last.filter(|_| has_more),
        })
    }

    /// Starts a new series of attempts for `tenant`'s failed or dead delivery `id`.
    pub async fn redeliver(&self, tenant: &str, id: &str) -> Result<DeliveryView, RedeliverError> {
        let owned = self
            .actors
            .load(id)
            .await
            .map_err(|e| match e {
                DeliveryError::Store(e) => RedeliverError::Store(e),
                _ => RedeliverError::NotFound,
            })?
            .is_some_and(|d| d.record.tenant == tenant);
        if !owned {
            return Err(RedeliverError::NotFound);
        }
        self.actors.redeliver(id, None).await
    }

    /// `tenant`'s endpoints with a stored health, and its queued deliveries by URL, as the
    /// store has them now.
    pub async fn endpoints(
        &self,
        tenant: &str,
    ) -> Result<(Vec<(EndpointId, EndpointHealth)>, HashMap<String, u64>), DeliveriesError> {
        let stored = self.store.endpoints(Some(tenant)).await?;
        let queued = self.store.queued_by_endpoint(tenant).await?;
        Ok((stored, queued))
    }

    /// Every endpoint this node knows of, with its health as last read (for `/metrics`).
    pub fn known_endpoints(&self) -> Vec<(EndpointId, EndpointHealth)> {
        self.endpoints.known()
    }
}
