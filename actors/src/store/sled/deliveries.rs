//! Delivery logs in sled. A delivery's records live under `id ‖ 0 ‖ seq`. Four indexes follow
//! each delivery: the due index (`due_at ‖ id`, only while queued) is the durable retry queue the
//! worker reads from its oldest entry; the status index (`tenant ‖ status ‖ id`) serves the
//! tenant's listing; the queued index (`tenant ‖ url ‖ id`, only while queued) counts what waits
//! for each endpoint; the retention index (`expires_at ‖ id`) is walked by the sweeper.

use idem_schemas::{DeliveryEvent, DeliveryRecord, DeliveryStatus};

use super::keys::{
    delivery_key, delivery_prefix, queued_key, split_time_key, status_byte, status_key, time_key,
};
use super::SledStore;
use crate::codec;
use std::future::ready;

use crate::store::{DeliveryStore, DeliveryWrite, Read, StatusCounts, StoreError, Timed};

impl SledStore {
    /// A delivery's log, if it exists.
    pub(super) fn read_delivery(&self, id: &str) -> Result<Option<Vec<DeliveryEvent>>, StoreError> {
        let mut events = Vec::new();
        for record in self.deliveries.scan_prefix(delivery_prefix(id)) {
            let (_, value) = record?;
            events.push(codec::decode(&value)?);
        }
        Ok((!events.is_empty()).then_some(events))
    }

    /// How many records a delivery's log holds (its last record's number, plus one).
    pub(super) fn records(&self, id: &str) -> Result<u32, StoreError> {
        let prefix = delivery_prefix(id);
        let Some(last) = self.deliveries.scan_prefix(&prefix).keys().next_back() else {
            return Ok(0);
        };
        let last = last?;
        let seq = last
            .get(prefix.len()..)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .ok_or(StoreError::Malformed("deliveries"))?;
        Ok(u32::from_be_bytes(seq) + 1)
    }

    /// Whether a delivery exists.
    pub(super) fn exists(&self, id: &str) -> Result<bool, StoreError> {
        Ok(self.deliveries.contains_key(delivery_key(id, 0))?)
    }

    /// Up to `limit` queued deliveries due at or before `now_ms`, oldest first.
    pub(super) fn read_due(&self, now_ms: u64, limit: usize) -> Result<Vec<Timed>, StoreError> {
        // No unit is part-way through writing a delivery meanwhile: an entry read here has all
        // of its delivery's records beside it.
        let _alone = self.applying.write().unwrap_or_else(|p| p.into_inner());
        time_index(&self.due, "delivery_due", now_ms.saturating_add(1), limit)
    }

    /// Forgets a due entry.
    pub(super) fn remove_due(&self, due: &Timed) -> Result<(), StoreError> {
        self.due.remove(time_key(due.at_ms, &due.id))?;
        Ok(())
    }

    /// A page of a tenant's listing (see `DeliveryStore::list_deliveries`).
    pub(super) fn read_listing(
        &self,
        tenant: &str,
        status: Option<DeliveryStatus>,
        after: Option<(DeliveryStatus, &str)>,
        limit: usize,
    ) -> Result<Vec<(DeliveryStatus, String)>, StoreError> {
        let statuses: Vec<DeliveryStatus> = match status {
            Some(s) => vec![s],
            None => DeliveryStatus::ALL.to_vec(),
        };
        let mut out = Vec::new();
        for st in statuses {
            if let Some((after_status, _)) = after {
                if status_byte(st) < status_byte(after_status) {
                    continue;
                }
            }
            let prefix = status_key(tenant, st, "");
            let start = match after {
                Some((after_status, id)) if after_status == st => {
                    let mut k = status_key(tenant, st, id);
                    k.push(0);
                    k
                }
                _ => prefix.clone(),
            };
            for entry in self.by_status.range(start..) {
                let (key, _) = entry?;
                if !key.starts_with(&prefix) || out.len() >= limit {
                    break;
                }
                let id = String::from_utf8(key[prefix.len()..].to_vec())
                    .map_err(|_| StoreError::Malformed("delivery_status"))?;
                out.push((st, id));
            }
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }

    /// Forgets final deliveries past their retention (see `DeliveryStore::expire_deliveries`).
    fn expire(
        &self,
        now_ms: u64,
        requeue_ms: u64,
        limit: usize,
    ) -> Result<Vec<DeliveryStatus>, StoreError> {
        let mut forgotten = Vec::new();
        for expired in time_index(&self.delivery_expiry, "delivery_expiry", now_ms, limit)? {
            match self.listed(&expired.id)? {
                // Still queued: looked at again later.
                Some((_, DeliveryStatus::Queued)) => {
                    self.delivery_expiry
                        .insert(time_key(requeue_ms, &expired.id), &[])?;
                }
                Some((tenant, status)) => {
                    let mut batch = ::sled::Batch::default();
                    for key in self
                        .deliveries
                        .scan_prefix(delivery_prefix(&expired.id))
                        .keys()
                    {
                        batch.remove(key?);
                    }
                    self.deliveries.apply_batch(batch)?;
                    self.by_status
                        .remove(status_key(&tenant, status, &expired.id))?;
                    forgotten.push(status);
                }
                None => {}
            }
            self.delivery_expiry
                .remove(time_key(expired.at_ms, &expired.id))?;
        }
        Ok(forgotten)
    }

    /// How many deliveries are queued.
    fn read_queued(&self) -> Result<u64, StoreError> {
        Ok(self.due.len() as u64)
    }

    /// The record of the longest-waiting queued delivery.
    fn read_oldest_queued(&self) -> Result<Option<DeliveryRecord>, StoreError> {
        let Some(first) = self.due.iter().keys().next() else {
            return Ok(None);
        };
        let oldest = split_time_key(&first?, "delivery_due")?;
        Ok(self
            .read_delivery(&oldest.id)?
            .and_then(|events| match events.into_iter().next() {
                Some(DeliveryEvent::Created(record)) => Some(record),
                _ => None,
            }))
    }

    /// Deliveries by status, in `DeliveryStatus::ALL` order.
    fn read_counts(&self) -> Result<StatusCounts, StoreError> {
        let mut counts = StatusCounts::default();
        for key in self.by_status.iter().keys() {
            let key = key?;
            let tenant_len = key.first().copied().unwrap_or(0) as usize;
            if let Some(count) = key
                .get(1 + tenant_len)
                .and_then(|&byte| counts.get_mut(byte as usize))
            {
                *count += 1;
            }
        }
        Ok(counts)
    }

    /// A delivery's tenant and the status it is listed under, if it exists.
    fn listed(&self, id: &str) -> Result<Option<(String, DeliveryStatus)>, StoreError> {
        let Some(first) = self.deliveries.get(delivery_key(id, 0))? else {
            return Ok(None);
        };
        let DeliveryEvent::Created(record) = codec::decode(&first)? else {
            return Err(StoreError::Malformed("deliveries"));
        };
        for status in DeliveryStatus::ALL {
            if self
                .by_status
                .contains_key(status_key(&record.tenant, status, id))?
            {
                return Ok(Some((record.tenant, status)));
            }
        }
        Ok(None)
    }

    /// Writes a delivery's records and moves it in the indexes. With `skip_existing`, a new
    /// delivery that exists already is left alone.
    pub(super) fn write_delivery(
        &self,
        write: &DeliveryWrite,
        skip_existing: bool,
    ) -> Result<(), StoreError> {
        if write.first_seq == 0 && skip_existing && self.exists(&write.id)? {
            return Ok(());
        }
        let (id, to) = (&write.id, write.to);
        let was_queued = write.from.map(|from| from.status) == Some(DeliveryStatus::Queued);
        let is_queued = to.status == DeliveryStatus::Queued;
        let queued = || queued_key(&write.tenant, &write.url, id);
        // The queued count's entry goes before the records that move a delivery out of the
        // queue, and after those that move it in: a crash part-way counts a delivery too few
        // times until it leaves the queue, never too many for ever.
        if was_queued && !is_queued {
            self.queued.remove(queued())?;
        }
        // The new listing and queue entries first: a crash part-way leaves a delivery findable
        // twice (and the stale entry is ignored), never not at all.
        self.by_status
            .insert(status_key(&write.tenant, to.status, id), &[])?;
        if let Some(due) = to.due_ms {
            self.due.insert(time_key(due, id), &[])?;
        }
        for (n, event) in write.events.iter().enumerate() {
            if let DeliveryEvent::Created(record) = event {
                self.delivery_expiry
                    .insert(time_key(record.expires_at_ms, id), &[])?;
            }
            self.deliveries.insert(
                delivery_key(id, write.first_seq + n as u32),
                codec::encode(event)?,
            )?;
        }
        if is_queued && !was_queued {
            self.queued.insert(queued(), &[])?;
        }
        self.end_set(write)?;
        if let Some(from) = write.from {
            if from.status != to.status {
                self.by_status
                    .remove(status_key(&write.tenant, from.status, id))?;
            }
            if let Some(due) = from.due_ms.filter(|d| Some(*d) != to.due_ms) {
                self.due.remove(time_key(due, id))?;
            }
        }
        Ok(())
    }
}

/// The embedded store answers at once: each read is done when it is asked for.
impl DeliveryStore for SledStore {
    fn load_delivery<'a>(&'a self, id: &'a str) -> Read<'a, Option<Vec<DeliveryEvent>>> {
        Box::pin(ready(
            self.commits.usable().and_then(|()| self.read_delivery(id)),
        ))
    }

    fn due(&self, now_ms: u64, limit: usize) -> Read<'_, Vec<Timed>> {
        let due = self
            .commits
            .usable()
            .and_then(|()| self.read_due(now_ms, limit));
        Box::pin(async move {
            let due = due?;
            // The trees answer what was applied, durable or not: a queued delivery is handed
            // out only once the group commit after this read has made it, and the claim written
            // with it, durable (units are durable in the order applied), so no callback leaves
            // for a claim a crash could still lose.
            if !due.is_empty() {
                let (tx, rx) = tokio::sync::oneshot::channel();
                self.commits.commit_then(Box::new(move |outcome| {
                    let _ = tx.send(outcome);
                }));
                rx.await.map_err(|_| StoreError::Stopped)??;
            }
            Ok(due)
        })
    }

    fn leases_due(&self) -> bool {
        false
    }

    fn drop_due<'a>(&'a self, due: &'a Timed) -> Read<'a, ()> {
        Box::pin(ready(self.remove_due(due)))
    }

    fn move_due<'a>(&'a self, from: &'a Timed, to_ms: u64) -> Read<'a, ()> {
        if to_ms == from.at_ms {
            return Box::pin(ready(Ok(())));
        }
        // The new entry first: a crash between the two leaves it findable twice, and the
        // delivery tells which entry is its own (`DeliveryState::queued_at`).
        let moved = self
            .commits
            .usable()
            .and_then(|()| Ok(self.due.insert(time_key(to_ms, &from.id), &[])?))
            .and_then(|_| self.remove_due(from));
        Box::pin(ready(moved))
    }

    fn list_deliveries<'a>(
        &'a self,
        tenant: &'a str,
        status: Option<DeliveryStatus>,
        after: Option<(DeliveryStatus, &'a str)>,
        limit: usize,
    ) -> Read<'a, Vec<(DeliveryStatus, String)>> {
        Box::pin(ready(
            self.commits
                .usable()
                .and_then(|()| self.read_listing(tenant, status, after, limit)),
        ))
    }

    fn expire_deliveries(
        &self,
        now_ms: u64,
        requeue_ms: u64,
        limit: usize,
    ) -> Result<Vec<DeliveryStatus>, StoreError> {
        self.expire(now_ms, requeue_ms, limit)
    }

    fn count_deliveries<'a>(
        &'a self,
        tenant: &'a str,
        status: DeliveryStatus,
        cap: u64,
    ) -> Read<'a, u64> {
        Box::pin(ready(self.commits.usable().and_then(|()| {
            // The listing's entries of `status`: `status_key` with no id is their prefix.
            let entries = self.by_status.scan_prefix(status_key(tenant, status, ""));
            entries
                .keys()
                .take(cap as usize)
                .try_fold(0, |n, key| key.map(|_| n + 1))
                .map_err(StoreError::from)
        })))
    }

    fn queued(&self) -> Read<'_, u64> {
        Box::pin(ready(self.read_queued()))
    }

    fn oldest_queued(&self) -> Read<'_, Option<DeliveryRecord>> {
        Box::pin(ready(self.read_oldest_queued()))
    }

    fn count_by_status(&self) -> Read<'_, StatusCounts> {
        Box::pin(ready(self.read_counts()))
    }
}

/// Up to `limit` entries `time ‖ id` of a time index with `time` before `until`, oldest first.
fn time_index(
    tree: &::sled::Tree,
    name: &'static str,
    until: u64,
    limit: usize,
) -> Result<Vec<Timed>, StoreError> {
    let mut out = Vec::new();
    for entry in tree.range(..time_key(until, "")).take(limit) {
        let (key, _) = entry?;
        out.push(split_time_key(&key, name)?);
    }
    Ok(out)
}
