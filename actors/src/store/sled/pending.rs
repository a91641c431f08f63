//! A claim started together with its queued deliveries (a decision whose callbacks are queued,
//! `Submission::queued`), written as plain sled writes behind a marker. Units become durable in
//! the order they were applied, so a crash keeps a prefix of a unit's writes: deliveries go
//! before the claim record that names them, and a prefix could keep them without it. For a unit
//! whose claim is already durable that is harmless; for a start it would leave callbacks of a
//! decision that was never made, which the provider's retry makes again under other ids. So the
//! start's first write is a marker naming every entry its deliveries and SET keys will write,
//! and its last is the marker's removal. A marker found when the store opens is a start cut off
//! part-way: kept if its claim record names its generation (all of it is there), undone
//! otherwise, before anything reads the queue. A start refused at its claim record undoes the
//! same entries at once. (A sled transaction would do the same, but sled 0.34 takes a
//! process-wide lock exclusively for each one, and every other operation shares it from then
//! on.)

use idem_schemas::{DeliveryEvent, DeliveryStatus};
use serde::{Deserialize, Serialize};

use super::claims::first_head;
use super::keys::{claim_key, delivery_key, queued_key, status_key, time_key, Index};
use super::SledStore;
use crate::codec;
use crate::store::{ClaimWrite, StoreError, Unit};

/// The trees a start's deliveries write to, as a marker names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum Tree {
    Deliveries,
    Due,
    ByStatus,
    Queued,
    Expiry,
    SetKeys,
}

/// A start under way: its generation and every entry its deliveries write.
#[derive(Debug, Serialize, Deserialize)]
struct Marker {
    generation: u64,
    entries: Vec<(Tree, Vec<u8>)>,
}

/// A marked start: where its marker is and what it names.
pub(super) struct Pending {
    key: Vec<u8>,
    marker: Marker,
}

impl SledStore {
    fn tree(&self, tree: Tree) -> &::sled::Tree {
        match tree {
            Tree::Deliveries => &self.deliveries,
            Tree::Due => &self.due,
            Tree::ByStatus => &self.by_status,
            Tree::Queued => &self.queued,
            Tree::Expiry => &self.delivery_expiry,
            Tree::SetKeys => &self.set_keys,
        }
    }

    /// Marks the start `unit` makes, if it carries delivery logs, naming every entry its new
    /// deliveries and SET keys are about to write.
    pub(super) fn mark_start(&self, unit: &Unit) -> Result<Option<Pending>, StoreError> {
        let Some(ClaimWrite::Start(claim, events)) = unit.claim_write() else {
            return Ok(None);
        };
        if unit.delivery_writes().is_empty() {
            return Ok(None);
        }
        let generation = first_head(claim.clone(), events)?.generation;
        let mut entries = Vec::new();
        let mut new = Vec::new();
        for write in unit.delivery_writes() {
            if write.first_seq == 0 && unit.skips_existing() && self.exists(&write.id)? {
                continue;
            }
            let id = &write.id;
            new.push(id.as_str());
            for (n, event) in write.events.iter().enumerate() {
                if let DeliveryEvent::Created(record) = event {
                    entries.push((Tree::Expiry, time_key(record.expires_at_ms, id)));
                }
                entries.push((
                    Tree::Deliveries,
                    delivery_key(id, write.first_seq + n as u32),
                ));
            }
            if write.from.is_none() {
                entries.push((
                    Tree::ByStatus,
                    status_key(&write.tenant, write.to.status, id),
                ));
                if let Some(due) = write.to.due_ms {
                    entries.push((Tree::Due, time_key(due, id)));
                }
                if write.to.status == DeliveryStatus::Queued {
                    entries.push((Tree::Queued, queued_key(&write.tenant, &write.url, id)));
                }
            }
        }
        // The keys of the deliveries it makes (one that exists already keeps its own).
        for key in unit.set_keys() {
            if new.contains(&key.delivery.as_str()) {
                entries.push((Tree::SetKeys, key.delivery.as_bytes().to_vec()));
            }
        }
        let pending = Pending {
            key: claim_key(claim),
            marker: Marker {
                generation,
                entries,
            },
        };
        self.pending_starts
            .insert(&pending.key, codec::encode(&pending.marker)?)?;
        Ok(Some(pending))
    }

    /// Ends a marked start: its entries undone unless its claim record was `written`, then
    /// its marker removed.
    pub(super) fn end_start(&self, pending: Pending, written: bool) -> Result<(), StoreError> {
        if !written {
            self.undo(&pending.marker)?;
        }
        self.pending_starts.remove(&pending.key)?;
        Ok(())
    }

    fn undo(&self, marker: &Marker) -> Result<(), StoreError> {
        for (tree, key) in &marker.entries {
            self.tree(*tree).remove(key)?;
        }
        Ok(())
    }

    /// Settles every start a crash cut off part-way (see the module doc): how many were
    /// undone. Run when the store opens, before anything reads it.
    pub(super) fn settle_starts(&self) -> Result<usize, StoreError> {
        let mut undone = 0;
        let markers: Vec<_> = self.pending_starts.iter().collect::<Result<_, _>>()?;
        for (key, value) in markers {
            let marker: Marker = codec::decode(&value)?;
            let named = match self.claims.get(&key)? {
                Some(index) => Index::parse(&index)?.generation == marker.generation,
                None => false,
            };
            if !named {
                self.undo(&marker)?;
                undone += 1;
            }
            self.pending_starts.remove(&key)?;
        }
        Ok(undone)
    }
}
