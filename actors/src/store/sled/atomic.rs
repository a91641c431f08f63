//! A claim started together with its queued deliveries (a decision whose callbacks are queued,
//! `Submission::queued`) or its SETs' keys, written as one sled transaction. Everywhere else a unit relies on
//! sled recovering its log in order (what was applied first is durable no later), which is
//! enough when the claim a unit's deliveries belong to is already durable. Here it is not: a
//! crash in the middle of the flush could keep the deliveries without the claim, and their
//! callbacks would go out for a decision the provider's retry then makes again under other
//! ids. A transaction is recovered whole or not at all.

use idem_schemas::{DeliveryEvent, DeliveryStatus};
use sled::transaction::{ConflictableTransactionError, TransactionError, Transactional};

use super::keys::{
    claim_key, decision_key, delivery_key, log_key, log_prefix, queued_key, status_key,
    subject_listing, time_key, Index,
};
use super::SledStore;
use crate::codec;
use crate::store::{ClaimWrite, StoreError, Unit, Written};

/// The trees the transaction writes, in the order of [`SledStore::start_atomically`]'s list.
const CLAIMS: usize = 0;
const CLAIM_LOGS: usize = 1;
const DELIVERIES: usize = 2;
const DUE: usize = 3;
const BY_STATUS: usize = 4;
const DELIVERY_EXPIRY: usize = 5;
const DECISIONS: usize = 6;
const BY_SUBJECT: usize = 7;
const QUEUED: usize = 8;
const SET_KEYS: usize = 9;

/// One insert: into which tree, the key, the value.
type Insert = (usize, Vec<u8>, Vec<u8>);

/// Why the transaction gave up.
enum Lost {
    /// The key's index moved since it was read: another start won.
    Raced,
}

impl SledStore {
    /// Starts the generation `unit` starts, writing its new delivery logs (those that exist
    /// already left alone when it skips existing ones), keeping its decisions and keeping its
    /// SET keys, all in one transaction. The caller found no generation holding the key
    /// ([`SledStore::refuses_start`]); should one have come meanwhile, the start is refused
    /// whole, like any start that loses.
    pub(super) fn start_atomically(&self, unit: Unit) -> Result<Written, StoreError> {
        let skip_existing = unit.skips_existing();
        let (deliveries, decisions) = (unit.delivery_writes(), unit.decisions());
        let Some(ClaimWrite::Start(id, events)) = unit.claim_write().cloned() else {
            return Err(StoreError::NotAClaim);
        };
        let head = super::claims::first_head(id, &events)?;
        let index_key = claim_key(&head.id);
        let current = self.claims.get(&index_key)?;
        let claim_writes: Vec<Insert> = vec![
            (
                CLAIM_LOGS,
                log_key(&log_prefix(&head), 0),
                codec::encode_entry(&events)?,
            ),
            (
                CLAIMS,
                index_key.clone(),
                Index::started(&head, &events).value(),
            ),
        ];
        // Each delivery's inserts, behind the key that says it exists.
        let mut delivery_writes: Vec<(Vec<u8>, Vec<Insert>)> = Vec::new();
        for write in deliveries {
            let mut inserts = vec![(
                BY_STATUS,
                status_key(&write.tenant, write.to.status, &write.id),
                Vec::new(),
            )];
            if let Some(due) = write.to.due_ms {
                inserts.push((DUE, time_key(due, &write.id), Vec::new()));
            }
            if write.to.status == DeliveryStatus::Queued {
                let queued = queued_key(&write.tenant, &write.url, &write.id);
                inserts.push((QUEUED, queued, Vec::new()));
            }
            for (n, event) in write.events.iter().enumerate() {
                if let DeliveryEvent::Created(record) = event {
                    let expiry = time_key(record.expires_at_ms, &write.id);
                    inserts.push((DELIVERY_EXPIRY, expiry, Vec::new()));
                }
                let key = delivery_key(&write.id, write.first_seq + n as u32);
                inserts.push((DELIVERIES, key, codec::encode(event)?));
            }
            delivery_writes.push((delivery_key(&write.id, 0), inserts));
        }
        // Each decision's inserts, behind its record's key (a record is written once).
        let mut decision_writes: Vec<(Vec<u8>, Vec<Insert>)> = Vec::new();
        for record in decisions {
            let key = decision_key(&record.tenant, &record.id);
            let inserts = vec![
                (DECISIONS, key.clone(), codec::encode(record)?),
                (BY_SUBJECT, subject_listing(record), Vec::new()),
            ];
            decision_writes.push((key, inserts));
        }
        // A start's deliveries are queued, so none ends a SET: its keys are all kept.
        let key_writes: Vec<Insert> = unit
            .set_keys()
            .iter()
            .map(|k| (SET_KEYS, k.delivery.as_bytes().to_vec(), k.wrapped.clone()))
            .collect();
        let trees = [
            &self.claims,
            &self.claim_logs,
            &self.deliveries,
            &self.due,
            &self.by_status,
            &self.delivery_expiry,
            &self.decisions,
            &self.by_subject,
            &self.queued,
            &self.set_keys,
        ];
        let outcome = trees[..].transaction(|t| {
            // The key's one actor is its only writer here; should anything have moved the
            // index since it was read, the start has lost.
            if t[CLAIMS].get(&index_key)? != current {
                return Err(ConflictableTransactionError::Abort(Lost::Raced));
            }
            let mut inserts: Vec<&Insert> = claim_writes.iter().chain(&key_writes).collect();
            for (exists, writes) in &delivery_writes {
                if !(skip_existing && t[DELIVERIES].get(exists)?.is_some()) {
                    inserts.extend(writes);
                }
            }
            for (exists, writes) in &decision_writes {
                if t[DECISIONS].get(exists)?.is_none() {
                    inserts.extend(writes);
                }
            }
            for (tree, key, value) in inserts {
                t[*tree].insert(key.as_slice(), value.as_slice())?;
            }
            Ok(())
        });
        match outcome {
            Ok(()) => Ok(Written::Claimed(head, events)),
            Err(TransactionError::Abort(Lost::Raced)) => self
                .refuses_start(&head.id, &events)?
                .map_or(Ok(Written::Fenced), Ok),
            Err(TransactionError::Storage(e)) => Err(e.into()),
        }
    }
}
