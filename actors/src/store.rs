//! The event log on disk: sled trees behind a narrow interface, so another store (PostgreSQL, on
//! the roadmap) can stand in. A claim's log is one sled value under `tenant ‖ key digest`:
//! `generation ‖ (length ‖ record)*`, and appending events writes the value again with the
//! records added (events already there are never changed), as a compare-and-swap against the
//! value its owner last saw: no read before the write, and a log swept meanwhile stays swept.
//! One value per claim instead of one per event takes about a third less of sled's disk and
//! memory, since sled's cost is per tree entry.
//! The generation is the claim's `claimed_at_ms`: a key claimed again after expiry starts a new
//! log, and the sweeper removes a log only if it still holds the generation that expired. An
//! expiry index (`expires_at ‖ claim ‖ generation`) lets the sweeper find what to prune without
//! scanning every key.
//!
//! A delivery's records live under `delivery id ‖ seq`. Two indexes follow each delivery: the
//! due index (`due_at ‖ id`, only while queued) is the durable retry queue the worker reads from
//! its oldest entry; the status index (`tenant ‖ status ‖ id`) serves the tenant's listing.

use std::path::Path;
use std::sync::Arc;

use idem_schemas::{ClaimEvent, DeliveryEvent, DeliveryStatus};

use crate::codec::{self, CodecError};
use crate::commit::GroupCommit;

/// Identifies a claim: a tenant and the keyed digest of an idempotency key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClaimId {
    /// The tenant's name.
    pub tenant: String,
    /// HMAC-SHA-256 of the key under the server's `key_secret`.
    pub digest: [u8; 32],
}

impl ClaimId {
    fn prefix(&self) -> Vec<u8> {
        let tenant = self.tenant.as_bytes();
        let mut key = Vec::with_capacity(1 + tenant.len() + 32 + 12);
        // Tenant names are at most 64 bytes (config validation), so the length fits one byte.
        key.push(tenant.len() as u8);
        key.extend_from_slice(tenant);
        key.extend_from_slice(&self.digest);
        key
    }
}

/// A stored claim log: `generation ‖ (u32 length ‖ record)*`, split into its parts.
fn split_log(value: &[u8]) -> Result<(u64, Vec<&[u8]>), StoreError> {
    fn take<const N: usize>(bytes: &[u8]) -> Result<([u8; N], &[u8]), StoreError> {
        let (head, tail) = bytes
            .split_first_chunk::<N>()
            .ok_or(StoreError::MalformedKey("claims"))?;
        Ok((*head, tail))
    }
    let (generation, mut rest) = take::<8>(value)?;
    let mut records = Vec::new();
    while !rest.is_empty() {
        let (len, tail) = take::<4>(rest)?;
        let (record, tail) = tail
            .split_at_checked(u32::from_be_bytes(len) as usize)
            .ok_or(StoreError::MalformedKey("claims"))?;
        records.push(record);
        rest = tail;
    }
    Ok((u64::from_be_bytes(generation), records))
}

/// The latest generation of a claim's log.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimLog {
    /// The generation (`claimed_at_ms` of its `Claimed` event).
    pub generation: u64,
    /// Its events, in order.
    pub events: Vec<ClaimEvent>,
    /// The log as stored, which the next append extends.
    pub head: LogHead,
}

/// A claim's log as its owner last read or wrote it. An append names the head it extends and
/// fails if the log on disk is no longer that one, so the owner needs no read before a write.
#[derive(Debug, Clone, PartialEq)]
pub struct LogHead(sled::IVec);

/// Why the store failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// sled refused an operation.
    #[error("store: {0}")]
    Sled(#[from] sled::Error),
    /// A file operation failed.
    #[error("store: {0}")]
    Io(#[from] std::io::Error),
    /// A record did not decode.
    #[error("store: {0}")]
    Codec(#[from] CodecError),
    /// A group commit failed; the write may not be durable.
    #[error("store: commit failed: {0}")]
    Commit(String),
    /// A stored key or claim log has an impossible shape.
    #[error("store: malformed entry in {0}")]
    MalformedKey(&'static str),
    /// The data directory was written in another format: what was found there.
    #[error(
        "store: the data directory holds {0}, this idem reads and writes format {FORMAT}; \
         start it on an empty data_dir"
    )]
    Format(String),
    /// An append to a claim log that does not end where the writer expected.
    #[error("store: the claim log on disk is not the one being appended to")]
    LogMismatch,
}

/// sled's page cache (its default is 1 GiB), by sled's own estimate: its real footprint is
/// about twice this. Leaves not cached are read back through the OS's page cache, so a replay
/// with a million keys in the window still takes under a millisecond, and each 16 MiB more
/// would cost about 25 MB of RSS at that size.
const CACHE_BYTES: u64 = 16 * 1024 * 1024;

/// sled's log segment (its default is 512 KiB). sled rewrites a segment once enough of it is
/// dead, and with keys spread at random most segments are partly dead for long: larger segments
/// keep more of the disk live (a million one-record claims: 1.3 KB per key at 512 KiB, 0.9 at
/// 8 MiB). The price is memory, sled's background cleaner holding more (sled alone, same keys,
/// 64 MiB cache: 148 MB idle RSS at 512 KiB, 234 MB at 8 MiB), which the small cache pays for.
const SEGMENT_BYTES: usize = 8 * 1024 * 1024;

/// The embedded store.
pub struct Store {
    db: sled::Db,
    claims: sled::Tree,
    expiry: sled::Tree,
    deliveries: sled::Tree,
    due: sled::Tree,
    by_status: sled::Tree,
    delivery_expiry: sled::Tree,
    commits: GroupCommit,
}

/// Where a delivery sits in the indexes: its status, and while queued, when it is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// The status.
    pub status: DeliveryStatus,
    /// Due time (unix milliseconds) while queued.
    pub due_ms: Option<u64>,
}

fn status_byte(s: DeliveryStatus) -> u8 {
    match s {
        DeliveryStatus::Queued => 0,
        DeliveryStatus::Delivered => 1,
        DeliveryStatus::Failed => 2,
        DeliveryStatus::Dead => 3,
    }
}

fn tenant_prefix(tenant: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + tenant.len() + 40);
    key.push(tenant.len() as u8);
    key.extend_from_slice(tenant.as_bytes());
    key
}

fn status_key(tenant: &str, status: DeliveryStatus, id: &str) -> Vec<u8> {
    let mut key = tenant_prefix(tenant);
    key.push(status_byte(status));
    key.extend_from_slice(id.as_bytes());
    key
}

fn due_key(due_ms: u64, id: &str) -> Vec<u8> {
    let mut key = due_ms.to_be_bytes().to_vec();
    key.extend_from_slice(id.as_bytes());
    key
}

fn delivery_key(id: &str, seq: u32) -> Vec<u8> {
    let mut key = id.as_bytes().to_vec();
    key.push(0);
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

impl Store {
    /// Opens (or creates) the store in `dir`.
    pub fn open(dir: &Path) -> Result<Arc<Self>, StoreError> {
        std::fs::create_dir_all(dir)?;
        let db = open_sled(dir)?;
        check_format(&db)?;
        let claims = db.open_tree("claims")?;
        let expiry = db.open_tree("claim_expiry")?;
        let deliveries = db.open_tree("deliveries")?;
        let due = db.open_tree("delivery_due")?;
        let by_status = db.open_tree("delivery_status")?;
        let delivery_expiry = db.open_tree("delivery_expiry")?;
        let commits = GroupCommit::start(db.clone(), dir)?;
        // The status gauges start from what is on disk, then follow each transition.
        for status in DeliveryStatus::ALL {
            crate::metrics::DELIVERIES
                .with_label_values(&[status.as_str()])
                .set(0);
        }
        for key in by_status.iter().keys() {
            let key = key?;
            let tenant_len = key.first().copied().unwrap_or(0) as usize;
            if let Some(&byte) = key.get(1 + tenant_len) {
                if let Some(status) = DeliveryStatus::ALL.get(byte as usize) {
                    crate::metrics::DELIVERIES
                        .with_label_values(&[status.as_str()])
                        .inc();
                }
            }
        }
        Ok(Arc::new(Store {
            db,
            claims,
            expiry,
            deliveries,
            due,
            by_status,
            delivery_expiry,
            commits,
        }))
    }

    /// Loads the latest generation of a claim's log, if it has one.
    pub fn load_claim(&self, id: &ClaimId) -> Result<Option<ClaimLog>, StoreError> {
        let Some(value) = self.claims.get(id.prefix())? else {
            return Ok(None);
        };
        let (generation, records) = split_log(&value)?;
        let events = records
            .into_iter()
            .map(codec::decode)
            .collect::<Result<_, _>>()?;
        Ok(Some(ClaimLog {
            generation,
            events,
            head: LogHead(value),
        }))
    }

    /// Starts generation `generation` of a claim's log with `events` (replacing an expired
    /// generation), in one write. Like every write, durable with the next [`Store::commit`]
    /// (writes become durable in the order they were made).
    pub fn start_claim(
        &self,
        id: &ClaimId,
        generation: u64,
        events: &[ClaimEvent],
    ) -> Result<LogHead, StoreError> {
        self.write_claim(id, None, generation.to_be_bytes().to_vec(), events)
    }

    /// Appends `events` to the log `head`, in one write; [`StoreError::LogMismatch`] if the log
    /// on disk is no longer `head` (the sweeper removed it).
    pub fn extend_claim(
        &self,
        id: &ClaimId,
        head: &LogHead,
        events: &[ClaimEvent],
    ) -> Result<LogHead, StoreError> {
        self.write_claim(id, Some(head), head.0.to_vec(), events)
    }

    /// Writes `log ‖ events` in place of `head` (`None`: whatever is there). A `Claimed` event
    /// also enters the expiry index at `expires_at_ms`.
    fn write_claim(
        &self,
        id: &ClaimId,
        head: Option<&LogHead>,
        mut log: Vec<u8>,
        events: &[ClaimEvent],
    ) -> Result<LogHead, StoreError> {
        let key = id.prefix();
        let generation = log.get(..8).ok_or(StoreError::LogMismatch)?.to_vec();
        for event in events {
            let record = codec::encode(event)?;
            log.extend_from_slice(&(record.len() as u32).to_be_bytes());
            log.extend_from_slice(&record);
            if let ClaimEvent::Claimed(claim) = event {
                let mut index = claim.expires_at_ms.to_be_bytes().to_vec();
                index.extend_from_slice(&key);
                index.extend_from_slice(&generation);
                self.expiry.insert(index, &[])?;
            }
        }
        let log = sled::IVec::from(log);
        match head {
            None => {
                self.claims.insert(key, log.clone())?;
            }
            Some(head) => {
                // One descent that checks and writes, instead of a read and then a write.
                if self
                    .claims
                    .compare_and_swap(key, Some(&head.0), Some(log.clone()))?
                    .is_err()
                {
                    return Err(StoreError::LogMismatch);
                }
            }
        }
        Ok(LogHead(log))
    }

    /// Writes `events` as records `first_seq..` of a delivery's log and moves it in the indexes
    /// from `from` (none for a new delivery) to `to`. Not durable until the next [`Store::commit`];
    /// writes become durable in the order they were made, so a later durable write implies this
    /// one is durable too.
    pub fn stage_delivery(
        &self,
        tenant: &str,
        id: &str,
        first_seq: u32,
        events: &[DeliveryEvent],
        from: Option<Placement>,
        to: Placement,
    ) -> Result<(), StoreError> {
        // The new index entries first: a crash part-way leaves a delivery findable twice (and
        // the stale entry is ignored), never not at all.
        self.by_status
            .insert(status_key(tenant, to.status, id), &[])?;
        if let Some(due) = to.due_ms {
            self.due.insert(due_key(due, id), &[])?;
        }
        for (n, event) in events.iter().enumerate() {
            if let DeliveryEvent::Created(record) = event {
                self.delivery_expiry
                    .insert(due_key(record.expires_at_ms, id), &[])?;
            }
            let record = codec::encode(event)?;
            self.deliveries
                .insert(delivery_key(id, first_seq + n as u32), record)?;
        }
        if from.is_none_or(|f| f.status != to.status) {
            crate::metrics::DELIVERIES
                .with_label_values(&[to.status.as_str()])
                .inc();
        }
        if let Some(from) = from {
            if from.status != to.status {
                self.by_status.remove(status_key(tenant, from.status, id))?;
                crate::metrics::DELIVERIES
                    .with_label_values(&[from.status.as_str()])
                    .dec();
            }
            if let Some(due) = from.due_ms.filter(|d| Some(*d) != to.due_ms) {
                self.due.remove(due_key(due, id))?;
            }
        }
        Ok(())
    }

    /// A delivery's log, if it exists.
    pub fn load_delivery(&self, id: &str) -> Result<Option<Vec<DeliveryEvent>>, StoreError> {
        let mut prefix = id.as_bytes().to_vec();
        prefix.push(0);
        let mut events = Vec::new();
        for record in self.deliveries.scan_prefix(&prefix) {
            let (_, value) = record?;
            events.push(codec::decode(&value)?);
        }
        Ok((!events.is_empty()).then_some(events))
    }

    /// Whether a delivery's log exists (its first record), without reading it.
    pub fn delivery_exists(&self, id: &str) -> Result<bool, StoreError> {
        Ok(self.deliveries.contains_key(delivery_key(id, 0))?)
    }

    /// Up to `limit` entries of the due index due at or before `now_ms`, oldest first.
    pub fn due_deliveries(
        &self,
        now_ms: u64,
        limit: usize,
    ) -> Result<Vec<(u64, String)>, StoreError> {
        time_index(&self.due, "delivery_due", now_ms.saturating_add(1), limit)
    }

    /// Removes a due-index entry that no longer matches its delivery.
    pub fn drop_due(&self, due_ms: u64, id: &str) -> Result<(), StoreError> {
        self.due.remove(due_key(due_ms, id))?;
        Ok(())
    }

    /// Up to `limit` deliveries whose retention ended before `now_ms`: (index entry, id).
    pub fn expired_deliveries(
        &self,
        now_ms: u64,
        limit: usize,
    ) -> Result<Vec<(u64, String)>, StoreError> {
        time_index(&self.delivery_expiry, "delivery_expiry", now_ms, limit)
    }

    /// Deletes a final delivery's log and index entries (its retention entry at `expired_ms`).
    pub fn forget_delivery(
        &self,
        expired_ms: u64,
        tenant: &str,
        id: &str,
        status: DeliveryStatus,
    ) -> Result<(), StoreError> {
        let mut prefix = id.as_bytes().to_vec();
        prefix.push(0);
        let mut batch = sled::Batch::default();
        for key in self.deliveries.scan_prefix(&prefix).keys() {
            batch.remove(key?);
        }
        self.deliveries.apply_batch(batch)?;
        if self
            .by_status
            .remove(status_key(tenant, status, id))?
            .is_some()
        {
            crate::metrics::DELIVERIES
                .with_label_values(&[status.as_str()])
                .dec();
        }
        self.delivery_expiry.remove(due_key(expired_ms, id))?;
        Ok(())
    }

    /// Moves a delivery's retention entry from `expired_ms` to `until_ms` (it is not final yet).
    pub fn postpone_forgetting(
        &self,
        expired_ms: u64,
        until_ms: u64,
        id: &str,
    ) -> Result<(), StoreError> {
        self.delivery_expiry.insert(due_key(until_ms, id), &[])?;
        self.delivery_expiry.remove(due_key(expired_ms, id))?;
        Ok(())
    }

    /// When the longest-waiting queued delivery was created (unix milliseconds), if any is.
    pub fn oldest_queued_created_ms(&self) -> Result<Option<u64>, StoreError> {
        let Some(first) = self.due.iter().keys().next() else {
            return Ok(None);
        };
        let (_, id) = split_time_key(&first?, "delivery_due")?;
        let Some(created) = self
            .load_delivery(&id)?
            .and_then(|events| match events.first() {
                Some(DeliveryEvent::Created(record)) => Some(record.created_at_ms),
                _ => None,
            })
        else {
            return Ok(None);
        };
        Ok(Some(created))
    }

    /// How many deliveries are queued.
    pub fn queued_count(&self) -> usize {
        self.due.len()
    }

    /// Ids of `tenant`'s deliveries with `status` (every status when `None`), in (status, id)
    /// order, starting after `after` (a cursor returned by a previous page), at most `limit`.
    pub fn list_deliveries(
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
            let mut prefix = tenant_prefix(tenant);
            prefix.push(status_byte(st));
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
                    .map_err(|_| StoreError::MalformedKey("delivery_status"))?;
                out.push((st, id));
            }
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }

    /// Makes every write so far durable (group commit).
    pub async fn commit(&self) -> Result<(), StoreError> {
        self.commits.commit().await.map_err(StoreError::Commit)
    }

    /// Deletes up to `limit` claim generations that expired before `now_ms`; returns how many.
    /// Only the expired generation is removed, so a claim made again since is untouched.
    /// Deletions need no commit of their own: a sweep lost in a crash is simply done again.
    pub fn sweep_expired(&self, now_ms: u64, limit: usize) -> Result<usize, StoreError> {
        let mut swept = 0;
        for entry in self
            .expiry
            .range(..now_ms.to_be_bytes().to_vec())
            .take(limit)
        {
            let (index_key, _) = entry?;
            // expires_at (8) ‖ claim prefix ‖ generation (8)
            let (claim, generation) = index_key
                .get(8..)
                .filter(|rest| rest.len() > 8)
                .map(|rest| rest.split_at(rest.len() - 8))
                .ok_or(StoreError::MalformedKey("claim_expiry"))?;
            if let Some(log) = self.claims.get(claim)? {
                if log.get(..8) == Some(generation) {
                    // Removed only if unchanged since read: an actor appending at this moment
                    // wins, and the entry is looked at again by the next sweep.
                    if self
                        .claims
                        .compare_and_swap(claim, Some(&log), None as Option<&[u8]>)?
                        .is_err()
                    {
                        continue;
                    }
                }
            }
            self.expiry.remove(&index_key)?;
            swept += 1;
        }
        Ok(swept)
    }

    /// How many claim logs are stored (for tests and metrics).
    pub fn claim_count(&self) -> usize {
        self.claims.len()
    }

    /// Bytes the store occupies on disk, as sled reports it.
    pub fn size_on_disk(&self) -> Result<u64, StoreError> {
        Ok(self.db.size_on_disk()?)
    }
}

/// How long opening waits for another handle to let go of the data directory: one just dropped
/// in this process (sled's I/O threads release the file a moment after the last handle goes),
/// or an idem still exiting.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Opens sled in `dir`, with a bounded cache so memory follows the keys in use, not the keys on
/// disk.
fn open_sled(dir: &Path) -> Result<sled::Db, StoreError> {
    let config = sled::Config::new()
        .path(dir)
        .cache_capacity(CACHE_BYTES)
        .segment_size(SEGMENT_BYTES);
    let started = std::time::Instant::now();
    loop {
        match config.open() {
            Ok(db) => return Ok(db),
            // sled refuses a directory written with another segment size: an older format.
            Err(sled::Error::Unsupported(why)) => {
                return Err(StoreError::Format(format!("an older format ({why})")))
            }
            // Another handle holds the directory's lock (sled says so only in its message).
            Err(sled::Error::Io(e))
                if e.to_string().contains("could not acquire lock")
                    && started.elapsed() < LOCK_WAIT =>
            {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// The format of the data directory: its trees, their keys and values, and sled's segment size.
/// 2: one value per claim log; 3: 8 MiB segments.
const FORMAT: u8 = 3;

/// Where the data directory's format is written.
const FORMAT_KEY: &[u8] = b"idem_format";

/// Refuses a data directory written in another format (reading it would misread claims, and a
/// claim misread as free would be decided twice); marks a new one with this format.
fn check_format(db: &sled::Db) -> Result<(), StoreError> {
    match db.get(FORMAT_KEY)? {
        Some(found) if *found == [FORMAT] => Ok(()),
        Some(found) => Err(StoreError::Format(format!(
            "format {}",
            found.first().copied().unwrap_or(0)
        ))),
        // Only sled's default tree: a new directory.
        None if db.tree_names().len() <= 1 => {
            db.insert(FORMAT_KEY, &[FORMAT])?;
            Ok(())
        }
        None => Err(StoreError::Format(
            "an unmarked store, from before formats were marked".into(),
        )),
    }
}

/// Up to `limit` entries `time ‖ id` of a time index with `time` before `until`, oldest first.
fn time_index(
    tree: &sled::Tree,
    name: &'static str,
    until: u64,
    limit: usize,
) -> Result<Vec<(u64, String)>, StoreError> {
    let mut out = Vec::new();
    for entry in tree.range(..due_key(until, "")).take(limit) {
        let (key, _) = entry?;
        out.push(split_time_key(&key, name)?);
    }
    Ok(out)
}

/// `time ‖ id` back into its parts.
fn split_time_key(key: &[u8], tree: &'static str) -> Result<(u64, String), StoreError> {
    let (time, id) = key
        .split_at_checked(8)
        .ok_or(StoreError::MalformedKey(tree))?;
    let time = u64::from_be_bytes(
        time.try_into()
            .map_err(|_| StoreError::MalformedKey(tree))?,
    );
    let id = String::from_utf8(id.to_vec()).map_err(|_| StoreError::MalformedKey(tree))?;
    Ok((time, id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_schemas::{Claim, Decision, StoredResponse, Verdict};

    fn claimed(at: u64, ttl: u64) -> ClaimEvent {
        ClaimEvent::Claimed(Claim {
            fingerprint: [7; 32],
            holder: 1,
            claimed_at_ms: at,
            expires_at_ms: at + ttl,
            decision: Decision {
                id: format!("dec_{at}"),
                tenant: "acme".into(),
                signal_type: "sim_swap".into(),
                verdict: Verdict::Deny,
                subject_hash: "ab".into(),
                created_at_ms: at,
                deliveries: vec![],
            },
        })
    }

    fn done() -> ClaimEvent {
        ClaimEvent::Dispatched {
            outcomes: vec![],
            response: StoredResponse {
                status: 201,
                body: b"{}".to_vec(),
            },
        }
    }

    #[tokio::test]
    async fn appends_reload_and_generations_are_separate() {
        let dir = tempfile::tempdir().expect("tempdir");
        let id = ClaimId {
            tenant: "acme".into(),
            digest: [1; 32],
        };
        let other = ClaimId {
            tenant: "acme2".into(),
            digest: [1; 32],
        };
        {
            let store = Store::open(dir.path()).expect("open");
            assert_eq!(store.load_claim(&id).expect("load"), None);
            let head = store
                .start_claim(&id, 100, &[claimed(100, 50)])
                .expect("claim");
            store.extend_claim(&id, &head, &[done()]).expect("append");
            store
                .start_claim(&id, 200, &[claimed(200, 50)])
                .expect("claim again");
            store
                .start_claim(&other, 300, &[claimed(300, 50)])
                .expect("claim");
            store.commit().await.expect("commit");
        }
        let store = Store::open(dir.path()).expect("reopen");
        let log = store.load_claim(&id).expect("load").expect("present");
        assert_eq!(log.generation, 200);
        assert_eq!(log.events, vec![claimed(200, 50)]);

        // At 160 only generation 100 has expired: the sweep removes it and nothing else.
        assert_eq!(store.sweep_expired(160, 100).expect("sweep"), 1);
        assert_eq!(store.claim_count(), 2);
        assert_eq!(
            store
                .load_claim(&id)
                .expect("load")
                .expect("present")
                .generation,
            200
        );
        assert_eq!(store.sweep_expired(1_000, 100).expect("sweep"), 2);
        assert_eq!(store.claim_count(), 0);
        assert_eq!(store.load_claim(&other).expect("load"), None);
    }

    #[tokio::test]
    async fn appends_must_extend_the_log_on_disk_and_corrupt_logs_are_errors() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("open");
        let id = ClaimId {
            tenant: "acme".into(),
            digest: [2; 32],
        };
        let first = store
            .start_claim(&id, 100, &[claimed(100, 50)])
            .expect("claim");
        let second = store.extend_claim(&id, &first, &[done()]).expect("extend");
        let log = store.load_claim(&id).expect("load").expect("present");
        assert_eq!(log.events, vec![claimed(100, 50), done()]);
        assert_eq!(log.head, second);
        // A stale head (the log moved on), then a swept log: nothing is written.
        assert!(matches!(
            store.extend_claim(&id, &first, &[done()]),
            Err(StoreError::LogMismatch)
        ));
        assert_eq!(store.sweep_expired(1_000, 10).expect("sweep"), 1);
        assert!(matches!(
            store.extend_claim(&id, &second, &[done()]),
            Err(StoreError::LogMismatch)
        ));
        assert_eq!(store.load_claim(&id).expect("load"), None);
        let again = store
            .start_claim(&id, 100, &[claimed(100, 50)])
            .expect("claim");
        store.extend_claim(&id, &again, &[done()]).expect("extend");

        // A log cut short is reported, not decoded into a wrong state.
        let value = store.claims.get(id.prefix()).expect("get").expect("value");
        store
            .claims
            .insert(id.prefix(), &value[..value.len() - 3])
            .expect("insert");
        assert!(matches!(
            store.load_claim(&id),
            Err(StoreError::MalformedKey("claims"))
        ));
        store.claims.insert(id.prefix(), &[1, 2]).expect("insert");
        assert!(store.load_claim(&id).is_err());
    }

    #[test]
    fn a_data_directory_of_another_format_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        drop(Store::open(dir.path()).expect("new"));
        drop(Store::open(dir.path()).expect("same format"));

        let sled_at = |path: &Path, segment: usize| {
            sled::Config::new()
                .path(path)
                .segment_size(segment)
                .open()
                .expect("sled")
        };
        let refusal = |path: &Path| {
            let Err(StoreError::Format(found)) = Store::open(path) else {
                panic!("{} is not refused as another format", path.display());
            };
            found
        };

        // Written with sled's default segment size, as formats 2 and before were.
        let older = tempfile::tempdir().expect("tempdir");
        {
            let db = sled_at(older.path(), 512 * 1024);
            db.insert(FORMAT_KEY, &[2]).expect("insert");
            db.flush().expect("flush");
        }
        assert!(refusal(older.path()).starts_with("an older format"));

        // Written before formats were marked: trees, no mark.
        let old = tempfile::tempdir().expect("tempdir");
        {
            let db = sled_at(old.path(), SEGMENT_BYTES);
            db.open_tree("claims")
                .expect("tree")
                .insert(b"k", b"v")
                .expect("insert");
            db.flush().expect("flush");
        }
        assert!(refusal(old.path()).starts_with("an unmarked store"));

        // Marked with another format.
        let other = tempfile::tempdir().expect("tempdir");
        {
            let db = sled_at(other.path(), SEGMENT_BYTES);
            db.insert(FORMAT_KEY, &[FORMAT + 1]).expect("insert");
            db.flush().expect("flush");
        }
        assert_eq!(refusal(other.path()), format!("format {}", FORMAT + 1));
        let refused = Store::open(other.path()).err().expect("refused");
        assert!(refused.to_string().contains("empty data_dir"), "{refused}");
    }
}
