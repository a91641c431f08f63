//! The embedded store: sled trees on a local data directory (see `keys` for their layout), one
//! process at a time (sled locks the directory). A unit is applied to sled's trees in the
//! committing thread, then made durable by the group commit (`commit`), which calls back once
//! sled's flush and an `fdatasync` have covered it; units become durable in the order they were
//! applied.

mod claims;
mod commit;
mod decisions;
mod deliveries;
mod endpoints;
mod format;
mod keys;
mod pending;
mod set_keys;
mod streams;
mod subscriptions;
#[cfg(test)]
mod tests;

use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

pub use format::FORMAT;

use crate::store::rule::{self, Fencing};
use crate::store::{ClaimWrite, Halted, Read, Store, StoreError, Then, Unit, Written};
use commit::GroupCommit;
use idem_schemas::timefmt::now_ms;

/// The embedded store.
pub struct SledStore {
    db: ::sled::Db,
    /// `claim → expires_at ‖ generation [‖ completed]`: which log is a key's current one.
    claims: ::sled::Tree,
    /// The claim logs, in expiry order.
    claim_logs: ::sled::Tree,
    /// The delivery logs.
    deliveries: ::sled::Tree,
    /// The retry queue: queued deliveries by due time.
    due: ::sled::Tree,
    /// The tenants' listing: deliveries by tenant and status.
    by_status: ::sled::Tree,
    /// Queued deliveries by tenant and endpoint.
    queued: ::sled::Tree,
    /// Deliveries by the end of their retention.
    delivery_expiry: ::sled::Tree,
    /// Decisions kept for lookup, by tenant and id.
    decisions: ::sled::Tree,
    /// A subject's decisions, in the order they were made.
    by_subject: ::sled::Tree,
    /// Each endpoint's health, by tenant and URL.
    endpoints: ::sled::Tree,
    /// Shared Signals streams, by tenant and id.
    streams: ::sled::Tree,
    /// The key each SET is sealed under, by delivery id, until its delivery ends.
    set_keys: ::sled::Tree,
    /// The streams idem made at transmitters, by tenant and source.
    subscriptions: ::sled::Tree,
    /// `claim → marker` of each start with queued deliveries being applied (see `pending`).
    pending_starts: ::sled::Tree,
    commits: GroupCommit,
    /// Held (shared) while a unit that writes delivery logs is applied, and (alone) while the
    /// retry queue is read: a delivery's queue entry goes in before its records (so that a
    /// crash part-way leaves it findable), and a read between the two would hand out a
    /// delivery whose records are not all there yet.
    applying: RwLock<()>,
    /// Held while a new stream is counted against its receiver's limit and written.
    creating_streams: Mutex<()>,
    /// How long a claim may be in flight before it may be taken over, or replaced once expired.
    in_flight_timeout_ms: u64,
}

impl SledStore {
    /// Opens (or creates) the store in `dir`, for claims in flight up to `in_flight_timeout`.
    pub fn open(dir: &Path, in_flight_timeout: Duration) -> Result<Arc<Self>, StoreError> {
        std::fs::create_dir_all(dir)?;
        let db = format::open(dir)?;
        let store = Arc::new(SledStore {
            claims: db.open_tree("claims")?,
            claim_logs: db.open_tree("claim_logs")?,
            deliveries: db.open_tree("deliveries")?,
            due: db.open_tree("delivery_due")?,
            by_status: db.open_tree("delivery_status")?,
            queued: db.open_tree("delivery_queued")?,
            delivery_expiry: db.open_tree("delivery_expiry")?,
            decisions: db.open_tree("decisions")?,
            by_subject: db.open_tree("decisions_by_subject")?,
            endpoints: db.open_tree("endpoints")?,
            streams: db.open_tree("ssf_streams")?,
            subscriptions: db.open_tree("ssf_subscriptions")?,
            set_keys: db.open_tree("set_keys")?,
            pending_starts: db.open_tree("pending_starts")?,
            commits: GroupCommit::start(db.clone(), dir)?,
            applying: RwLock::new(()),
            creating_streams: Mutex::new(()),
            in_flight_timeout_ms: in_flight_timeout.as_millis() as u64,
            db,
        });
        let undone = store.settle_starts()?;
        if undone > 0 {
            tracing::warn!(undone, "starts a crash cut off part-way were undone");
        }
        Ok(store)
    }

    /// How many keys have a claim index entry.
    #[cfg(test)]
    pub fn claim_count(&self) -> usize {
        self.claims.len()
    }

    /// Applies a unit to the trees (memory until the next commit): what its claim write came
    /// to. What else of the unit is written follows [`rule::writes_with`].
    fn apply(&self, unit: Unit) -> Result<Written, StoreError> {
        self.commits.usable()?;
        let _applying = (!unit.deliveries.is_empty())
            .then(|| self.applying.read().unwrap_or_else(|p| p.into_inner()));
        // A decision's delivery logs go before the claim record that names them (no later
        // durable), so a claim write that is refused is found out before they are written.
        let carries = !unit.deliveries.is_empty()
            || !unit.decisions.is_empty()
            || !unit.erase_keys.is_empty();
        // A start that carries delivery logs is marked while it is applied (see `pending`).
        let marked = !unit.deliveries.is_empty();
        let refused = match &unit.claim {
            // What an append carries is written before it, so its whole rule is asked first;
            // without cargo, its own write is the check of the log's end.
            Some(ClaimWrite::Append(head, _)) => {
                let granted = match carries {
                    true => self.may_append(head)?,
                    false => self.is_current(head)?,
                };
                (!granted).then_some(Written::Fenced)
            }
            Some(ClaimWrite::Start(id, events)) if marked || !unit.keep_keys.is_empty() => {
                self.refuses_start(id, events)?
            }
            _ => None,
        };
        if let Some(refused) = refused.filter(|w| !rule::writes_with(w)) {
            return Ok(refused);
        }
        // A record appended to a delivery's log goes where the log ends, or nowhere. (One
        // process holds the directory: sled grants no leases, so no lease guards a record.)
        for write in unit.deliveries.iter().filter(|w| w.first_seq > 0) {
            let records = self.records(&write.id)?;
            if !rule::may_record(records, 0, write.first_seq, None, Fencing::in_force()) {
                return Ok(Written::Fenced);
            }
        }
        // A start that carries delivery logs (a decision whose callbacks are queued) is marked
        // first, and undone should it lose at its claim record (see `pending`). One that carries
        // only SET keys writes them before its claim record, as delivery logs go before theirs:
        // should the start lose after all, a key is left that opens nothing kept.
        let pending = self.mark_start(&unit)?;
        // A SET's key before its delivery, so the delivery is never found without it.
        self.keep_set_keys(&unit)?;
        for write in &unit.deliveries {
            self.write_delivery(write, unit.skip_existing)?;
        }
        if pending.is_some() {
            // A crash between the deliveries and the claim record, once sled's files hold them.
            crate::failpoint::hit_after("store.start_part_way", || {
                let _ = self.db.flush();
            });
        }
        let written = match unit.claim.clone() {
            None => Written::Nothing,
            Some(ClaimWrite::Start(id, events)) => self.start_claim(id, events)?,
            Some(ClaimWrite::Append(head, events)) => self.append_claim(head, events)?,
            // One process holds the directory: a holder that is not this process is gone, and
            // this process's own holder is gone once its actor failed. Nothing to bump.
            Some(ClaimWrite::TakeOver(head)) => match self.is_current(&head)? {
                true => Written::TakenOver(head),
                false => Written::Fenced,
            },
        };
        // The decision is kept with the claim record that makes it, never for a refused one.
        let granted = rule::writes_with(&written);
        if granted {
            for decision in &unit.decisions {
                self.keep_decision(decision)?;
            }
            self.erase_set_keys(&unit)?;
        }
        if let Some(pending) = pending {
            self.end_start(pending, granted)?;
        }
        Ok(written)
    }
}

impl Store for SledStore {
    // One process holds the directory: every waiter is on the holder's node.
    fn ask_holder(&self, _: &crate::store::ClaimId, _: u64) {}

    fn announce_answer(&self, _: &crate::store::ClaimId) {}

    fn claim_news(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<crate::store::ClaimNews>> {
        None
    }

    fn commit_then(&self, unit: Unit, then: Then) {
        match self.apply(unit) {
            // A refused write waits for the commit too: the claim that holds the key may have
            // been written a moment ago and is answered from only once it is durable.
            Ok(written) => self
                .commits
                .commit_then(Box::new(move |outcome| then(outcome.map(|()| written)))),
            Err(e) => then(Err(e)),
        }
    }

    fn probe(&self) -> Read<'_, ()> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let written = self
            .commits
            .usable()
            .and_then(|()| Ok(self.db.insert(HEALTH_KEY, &now_ms().to_be_bytes())?));
        match written {
            Ok(_) => self.commits.commit_then(Box::new(move |outcome| {
                let _ = tx.send(outcome);
            })),
            Err(e) => {
                let _ = tx.send(Err(e));
            }
        }
        Box::pin(async move { rx.await.map_err(|_| StoreError::Stopped)? })
    }

    fn halted(&self) -> Halted {
        self.commits.halted()
    }
}

/// Where `probe` writes (sled's default tree): the time of the last probe.
const HEALTH_KEY: &[u8] = b"idem_health";
