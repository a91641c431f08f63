//! Endpoint health in sled: the tree `endpoints` holds each endpoint's health under
//! `tenant length ‖ tenant ‖ url`. A change is applied as a compare-and-swap of the stored
//! health, so two callers never both win a probe; one that moves the breaker is made durable
//! before it is answered, so an open endpoint stays open across a crash.

use std::collections::HashMap;

use idem_schemas::timefmt::now_ms;

use super::keys::{queued_key, split_queued_key, tenant_prefix};
use super::SledStore;
use crate::breaker::{EndpointEvent, EndpointHealth, EndpointId, Noted};
use crate::codec;
use crate::settings::DeliverySettings;
use crate::store::{EndpointStore, LeaseStore, Read, Store, StoreError, Unit};

fn endpoint_key(tenant: &str, url: &str) -> Vec<u8> {
    let mut key = tenant_prefix(tenant);
    key.extend_from_slice(url.as_bytes());
    key
}

impl SledStore {
    /// Applies `event` to the endpoint's stored health; what it came to.
    fn apply_endpoint(
        &self,
        tenant: &str,
        url: &str,
        event: EndpointEvent,
        settings: &DeliverySettings,
    ) -> Result<(Noted, bool), StoreError> {
        self.commits.usable()?;
        let key = endpoint_key(tenant, url);
        loop {
            let old = self.endpoints.get(&key)?;
            let health = match &old {
                Some(bytes) => codec::decode(bytes)?,
                None => EndpointHealth::default(),
            };
            let Some(next) = health.apply(event, now_ms(), settings) else {
                return Ok((
                    Noted {
                        health,
                        changed: false,
                        was: health.circuit,
                    },
                    false,
                ));
            };
            let swapped =
                self.endpoints
                    .compare_and_swap(&key, old.as_ref(), Some(codec::encode(&next)?))?;
            if swapped.is_ok() {
                let moved = next.circuit.name() != health.circuit.name();
                return Ok((
                    Noted {
                        health: next,
                        changed: true,
                        was: health.circuit,
                    },
                    moved,
                ));
            }
        }
    }

    fn read_endpoints(
        &self,
        tenant: Option<&str>,
    ) -> Result<Vec<(EndpointId, EndpointHealth)>, StoreError> {
        let prefix = tenant.map(tenant_prefix).unwrap_or_default();
        let mut out = Vec::new();
        for entry in self.endpoints.scan_prefix(prefix) {
            let (key, value) = entry?;
            let tenant_len = *key.first().ok_or(StoreError::Malformed("endpoints"))? as usize;
            let split = |range: std::ops::Range<usize>| {
                key.get(range)
                    .and_then(|b| std::str::from_utf8(b).ok())
                    .map(str::to_string)
                    .ok_or(StoreError::Malformed("endpoints"))
            };
            let id = EndpointId {
                tenant: split(1..1 + tenant_len)?,
                url: split(1 + tenant_len..key.len())?,
            };
            out.push((id, codec::decode(&value)?));
        }
        Ok(out)
    }

    pub(super) fn read_queued_by_endpoint(
        &self,
        tenant: &str,
    ) -> Result<HashMap<String, u64>, StoreError> {
        let prefix = tenant_prefix(tenant);
        let mut counts: HashMap<String, u64> = HashMap::new();
        for key in self.queued.scan_prefix(&prefix).keys() {
            let key = key?;
            let url = split_queued_key(&key, prefix.len())?;
            match counts.get_mut(url) {
                Some(count) => *count += 1,
                None => {
                    counts.insert(url.to_string(), 1);
                }
            }
        }
        Ok(counts)
    }
}

impl EndpointStore for SledStore {
    fn note_endpoint<'a>(
        &'a self,
        tenant: &'a str,
        url: &'a str,
        event: EndpointEvent,
        settings: &'a DeliverySettings,
    ) -> Read<'a, Noted> {
        Box::pin(async move {
            let (noted, moved) = self.apply_endpoint(tenant, url, event, settings)?;
            if moved {
                // The breaker moved: durable before anyone acts on it.
                let store: &dyn Store = self;
                store.commit(Unit::new()).await?;
            }
            Ok(noted)
        })
    }

    fn endpoints<'a>(
        &'a self,
        tenant: Option<&'a str>,
    ) -> Read<'a, Vec<(EndpointId, EndpointHealth)>> {
        Box::pin(std::future::ready(
            self.commits
                .usable()
                .and_then(|()| self.read_endpoints(tenant)),
        ))
    }

    fn queued_by_endpoint<'a>(&'a self, tenant: &'a str) -> Read<'a, HashMap<String, u64>> {
        Box::pin(std::future::ready(
            self.commits
                .usable()
                .and_then(|()| self.read_queued_by_endpoint(tenant)),
        ))
    }

    fn queued_to<'a>(
        &'a self,
        tenant: &'a str,
        url: &'a str,
        limit: usize,
    ) -> Read<'a, Vec<String>> {
        let prefix = queued_key(tenant, url, "");
        let read = self.commits.usable().and_then(|()| {
            self.queued
                .scan_prefix(&prefix)
                .keys()
                .take(limit)
                .map(|key| {
                    let key = key?;
                    let id = key.get(prefix.len()..).unwrap_or_default();
                    Ok(String::from_utf8_lossy(id).into_owned())
                })
                .collect()
        });
        Box::pin(std::future::ready(read))
    }

    // One process holds the directory.
    fn live_nodes(&self) -> Read<'_, usize> {
        Box::pin(std::future::ready(Ok(1)))
    }
}

impl LeaseStore for SledStore {
    /// One process owns the directory: it holds every job, under one token.
    fn lease<'a>(&'a self, _job: &'a str) -> Read<'a, Option<u64>> {
        Box::pin(std::future::ready(Ok(Some(1))))
    }
}
