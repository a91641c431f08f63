//! The event log on disk: sled trees behind a narrow interface, so another store (PostgreSQL, on
//! the roadmap) can stand in.
//!
//! A claim's log is a few sled entries, one per write (a write holds one or more records,
//! `(u32 length ‖ record)*`), under `expires_at ‖ claim ‖ generation ‖ seq` in `claim_logs`; a
//! small index entry `claim → expires_at ‖ generation` in `claims` names the claim's current
//! log. Logs are thus stored in the order they expire, which is the order they are made: the
//! leaves a request writes are the few newest ones, which stay in sled's cache, a lookup by key
//! descends only the index, whose leaves are small, and an append writes only its own records
//! (an entry is never rewritten). The generation is the claim's `claimed_at_ms`: a key claimed
//! again after expiry starts a new log. A log's last record, `completed`, is a flag on its index
//! entry instead of an entry of its own: setting it rewrites a small value that exists already,
//! where a new entry, however small, is one more in leaves of ~400-byte entries that sled
//! consolidates every ten writes and splits every eight inserts, rewriting their parent too. As
//! an entry it cost 3.6 KB written per claim; as a flag, under 1 KB (`bench --scenario unique`:
//! 16.3 KB written per request before, 13.3 after; keyless signals write 7.8). The sweeper walks
//! `claim_logs` from its oldest entry and removes what expired, and the index entry of a log it
//! removes if that still names it. An expired generation reads as no claim at all, so what an
//! append racing the sweeper leaves behind is never read, and the next sweep removes it.
//!
//! A delivery's records live under `delivery id ‖ seq`. Two indexes follow each delivery: the
//! due index (`due_at ‖ id`, only while queued) is the durable retry queue the worker reads from
//! its oldest entry; the status index (`tenant ‖ status ‖ id`) serves the tenant's listing.

use std::path::Path;
use std::sync::Arc;

use idem_schemas::timefmt::now_ms;
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

/// One entry of a claim log, `(u32 length ‖ record)*`, split into its records.
fn split_records(value: &[u8]) -> Result<Vec<&[u8]>, StoreError> {
    let mut records = Vec::new();
    let mut rest = value;
    while !rest.is_empty() {
        let (len, tail) = rest
            .split_first_chunk::<4>()
            .ok_or(StoreError::MalformedKey("claim_logs"))?;
        let (record, tail) = tail
            .split_at_checked(u32::from_be_bytes(*len) as usize)
            .ok_or(StoreError::MalformedKey("claim_logs"))?;
        records.push(record);
        rest = tail;
    }
    Ok(records)
}

/// `events` as one log entry.
fn entry(events: &[ClaimEvent]) -> Result<Vec<u8>, StoreError> {
    let mut value = Vec::new();
    for event in events {
        let record = codec::encode(event)?;
        value.extend_from_slice(&(record.len() as u32).to_be_bytes());
        value.extend_from_slice(&record);
    }
    Ok(value)
}

/// The prefix of a claim generation's log entries: `expires_at ‖ claim ‖ generation`.
fn log_prefix(expires_at_ms: u64, claim: &[u8], generation: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(20 + claim.len());
    key.extend_from_slice(&expires_at_ms.to_be_bytes());
    key.extend_from_slice(claim);
    key.extend_from_slice(&generation.to_be_bytes());
    key
}

/// The key of entry `seq` of the log at `prefix`.
fn log_key(prefix: &[u8], seq: u32) -> Vec<u8> {
    [prefix, &seq.to_be_bytes()].concat()
}

/// `expires_at ‖ generation`, an index entry's value; `‖ COMPLETED` once the log is completed.
fn index_value(expires_at_ms: u64, generation: u64) -> [u8; 16] {
    let mut value = [0; 16];
    value[..8].copy_from_slice(&expires_at_ms.to_be_bytes());
    value[8..].copy_from_slice(&generation.to_be_bytes());
    value
}

/// The byte that follows an index entry's value when its log is completed.
const COMPLETED: u8 = 1;

/// An index entry's value back into `(expires_at, generation, completed)`.
fn parse_index(value: &[u8]) -> Option<(u64, u64, bool)> {
    let (expiry, rest) = value.split_at_checked(8)?;
    let (generation, flag) = rest.split_at_checked(8)?;
    let completed = match flag {
        [] => false,
        [COMPLETED] => true,
        _ => return None,
    };
    Some((
        u64::from_be_bytes(expiry.try_into().ok()?),
        u64::from_be_bytes(generation.try_into().ok()?),
        completed,
    ))
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

/// A claim's log as its owner last read or wrote it: where its next entry goes. An append
/// fails if that entry exists already (someone else appended), so the owner needs no read before
/// a write.
#[derive(Debug, Clone, PartialEq)]
pub struct LogHead {
    prefix: Vec<u8>,
    next: u32,
}

impl LogHead {
    /// The value of the index entry that names this log: `expires_at ‖ generation`, the two ends
    /// of its prefix.
    fn index_value(&self) -> Option<[u8; 16]> {
        let (expiry, _) = self.prefix.split_first_chunk::<8>()?;
        let generation = self.prefix.last_chunk::<8>()?;
        Some(index_value(
            u64::from_be_bytes(*expiry),
            u64::from_be_bytes(*generation),
        ))
    }
}

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
/// with a million keys in the window still takes under a millisecond; 64 MiB took the RSS with
/// that window full from about 240 to 334 MB.
const CACHE_BYTES: u64 = 16 * 1024 * 1024;

/// sled's log segment (its default is 512 KiB; 16 MiB is its largest). sled relocates what is
/// live in a segment once half of it is dead, and most segments stay partly live for long (the
/// claim logs' leaves are written once and kept until they expire, beside the many versions of
/// the newest leaf that die at once): larger segments keep more of the disk live. A million
/// one-write claims (`bench --scenario window`): 1,275 bytes per key at 8 MiB, 973 at 16 MiB.
/// The price is memory, a segment's buffer and sled's cleaner holding more (RSS with that window
/// full: 225 MB at 8 MiB, 239 at 16), which the small cache pays for.
const SEGMENT_BYTES: usize = 16 * 1024 * 1024;

/// The embedded store.
pub struct Store {
    db: sled::Db,
    claims: sled::Tree,
    claim_logs: sled::Tree,
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
        let claim_logs = db.open_tree("claim_logs")?;
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
            claim_logs,
            deliveries,
            due,
            by_status,
            delivery_expiry,
            commits,
        }))
    }

    /// Loads the latest generation of a claim's log, if it has one that has not expired.
    pub fn load_claim(&self, id: &ClaimId) -> Result<Option<ClaimLog>, StoreError> {
        let claim = id.prefix();
        let Some(index) = self.claims.get(&claim)? else {
            return Ok(None);
        };
        let (expires_at_ms, generation, completed) =
            parse_index(&index).ok_or(StoreError::MalformedKey("claims"))?;
        // An expired claim is no claim (the key is free again), whatever the sweeper has or has
        // not removed of it yet.
        if expires_at_ms <= now_ms() {
            return Ok(None);
        }
        let prefix = log_prefix(expires_at_ms, &claim, generation);
        let mut events = Vec::new();
        let mut next: u32 = 0;
        for item in self.claim_logs.scan_prefix(&prefix) {
            let (key, value) = item?;
            if key.get(prefix.len()..) != Some(&next.to_be_bytes()[..]) {
                return Err(StoreError::MalformedKey("claim_logs"));
            }
            for record in split_records(&value)? {
                events.push(codec::decode(record)?);
            }
            next += 1;
        }
        // An index naming a log that is not there, before its expiry, is damage, not a free key.
        if next == 0 {
            return Err(StoreError::MalformedKey("claims"));
        }
        // A log written without actions carries `completed` in its one entry.
        if completed && events.last() != Some(&ClaimEvent::Completed) {
            events.push(ClaimEvent::Completed);
        }
        Ok(Some(ClaimLog {
            generation,
            events,
            head: LogHead { prefix, next },
        }))
    }

    /// Starts generation `generation` of a claim's log with `events`, the first of them its
    /// `Claimed` (an expired generation is left to the sweeper). Like every write, durable with
    /// the next [`Store::commit`] (writes become durable in the order they were made).
    pub fn start_claim(
        &self,
        id: &ClaimId,
        generation: u64,
        events: &[ClaimEvent],
    ) -> Result<LogHead, StoreError> {
        let Some(ClaimEvent::Claimed(claim)) = events.first() else {
            return Err(StoreError::Commit(
                "a claim log starts with its claim".into(),
            ));
        };
        let index_key = id.prefix();
        let prefix = log_prefix(claim.expires_at_ms, &index_key, generation);
        self.claim_logs
            .insert(log_key(&prefix, 0), entry(events)?)?;
        // The index last: a crash between the two leaves a log nothing names, swept in time.
        self.claims
            .insert(index_key, &index_value(claim.expires_at_ms, generation))?;
        Ok(LogHead { prefix, next: 1 })
    }

    /// Appends `events` to the log `head` as one entry; [`StoreError::LogMismatch`] if the log
    /// on disk has moved past `head` (another writer appended).
    pub fn extend_claim(
        &self,
        head: &LogHead,
        events: &[ClaimEvent],
    ) -> Result<LogHead, StoreError> {
        // Written only where nothing is: one descent that checks and writes.
        if self
            .claim_logs
            .compare_and_swap(
                log_key(&head.prefix, head.next),
                None as Option<&[u8]>,
                Some(entry(events)?),
            )?
            .is_err()
        {
            return Err(StoreError::LogMismatch);
        }
        Ok(LogHead {
            prefix: head.prefix.clone(),
            next: head.next + 1,
        })
    }

    /// Records that the log at `head` is `completed`: the flag on its index entry, set only while
    /// the entry still names this log (a log the sweeper took, or a newer generation, is left
    /// alone).
    pub fn complete_claim(&self, id: &ClaimId, head: &LogHead) -> Result<(), StoreError> {
        let current = head
            .index_value()
            .ok_or(StoreError::MalformedKey("claim_logs"))?;
        let completed = [&current[..], &[COMPLETED]].concat();
        let _ = self
            .claims
            .compare_and_swap(id.prefix(), Some(&current[..]), Some(completed))?;
        Ok(())
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

    /// Calls `notify` once every write so far is durable, or the commit failed (group commit, on
    /// its thread: `notify` only hands the news on).
    pub fn commit_then(&self, notify: impl FnOnce(Result<(), StoreError>) + Send + 'static) {
        self.commits
            .commit_then(move |outcome| notify(outcome.map_err(StoreError::Commit)));
    }

    /// Deletes up to `limit` claim log entries that expired before `now_ms`, and the index entries
    /// of the logs they start; returns how many log entries. Only the expired generation is
    /// removed, so a claim made again since is untouched. Deletions need no commit of their own:
    /// a sweep lost in a crash is simply done again.
    pub fn sweep_expired(&self, now_ms: u64, limit: usize) -> Result<usize, StoreError> {
        let mut swept = 0;
        for key in self
            .claim_logs
            .range(..now_ms.to_be_bytes().to_vec())
            .keys()
            .take(limit)
        {
            let key = key?;
            // expires_at (8) ‖ claim ‖ generation (8) ‖ seq (4)
            let (claim, generation, seq) = key
                .get(8..)
                .and_then(|rest| rest.split_at_checked(rest.len().checked_sub(12)?))
                .map(|(claim, tail)| (claim, &tail[..8], &tail[8..]))
                .filter(|(claim, ..)| !claim.is_empty())
                .ok_or(StoreError::MalformedKey("claim_logs"))?;
            if seq == [0; 4] {
                // The index first: a crash that loses the log's removal leaves it to the next
                // sweep, never an index entry nothing will come back for. It goes only if it
                // still names this log (completed or not).
                let index = [&key[..8], generation].concat();
                if let Some(found) = self.claims.get(claim)? {
                    if found.starts_with(&index) {
                        let _ = self.claims.compare_and_swap(
                            claim,
                            Some(found),
                            None as Option<&[u8]>,
                        )?;
                    }
                }
            }
            self.claim_logs.remove(&key)?;
            swept += 1;
        }
        Ok(swept)
    }

    /// How many claims are stored (for tests and metrics).
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
/// 2: one value per claim log; 3: 8 MiB segments; 4: claim logs in expiry order, behind an index,
/// and 16 MiB segments; 5: `completed` a flag on the index entry, ids and digests stored as bytes.
const FORMAT: u8 = 5;

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

    /// A claim id of `tenant` whose digest is `byte` repeated.
    fn claim_id(tenant: &str, byte: u8) -> ClaimId {
        ClaimId {
            tenant: tenant.into(),
            digest: [byte; 32],
        }
    }

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
        let id = claim_id("acme", 1);
        let other = claim_id("acme2", 1);
        let t = now_ms();
        {
            let store = Store::open(dir.path()).expect("open");
            assert_eq!(store.load_claim(&id).expect("load"), None);
            let head = store
                .start_claim(&id, t, &[claimed(t, 1_000)])
                .expect("claim");
            store.extend_claim(&head, &[done()]).expect("append");
            store
                .start_claim(&id, t + 10, &[claimed(t + 10, 60_000)])
                .expect("claim again");
            store
                .start_claim(&other, t + 20, &[claimed(t + 20, 60_000)])
                .expect("claim");
            store.commit().await.expect("commit");
        }
        let store = Store::open(dir.path()).expect("reopen");
        let log = store.load_claim(&id).expect("load").expect("present");
        assert_eq!(log.generation, t + 10);
        assert_eq!(log.events, vec![claimed(t + 10, 60_000)]);

        // Once only the first generation has expired, the sweep removes its two entries and
        // nothing else; the key's index entry names the newer generation and stays.
        assert_eq!(store.sweep_expired(t + 1_001, 100).expect("sweep"), 2);
        assert_eq!(store.claim_count(), 2);
        assert_eq!(
            store
                .load_claim(&id)
                .expect("load")
                .expect("present")
                .generation,
            t + 10
        );
        assert_eq!(store.sweep_expired(t + 100_000, 100).expect("sweep"), 2);
        assert_eq!(store.claim_count(), 0);
        assert!(store.claim_logs.is_empty());
        assert_eq!(store.load_claim(&other).expect("load"), None);
    }

    #[tokio::test]
    async fn completion_flags_the_index_entry_of_its_own_log_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let id = claim_id("acme", 4);
        let t = now_ms();
        let first = {
            let store = Store::open(dir.path()).expect("open");
            let head = store
                .start_claim(&id, t, &[claimed(t, 1_000)])
                .expect("claim");
            let head = store.extend_claim(&head, &[done()]).expect("append");
            store.complete_claim(&id, &head).expect("complete");
            store.commit().await.expect("commit");
            head
        };
        let store = Store::open(dir.path()).expect("reopen");
        let log = store.load_claim(&id).expect("load").expect("present");
        assert_eq!(
            log.events,
            vec![claimed(t, 1_000), done(), ClaimEvent::Completed]
        );

        // A newer generation is not completed by the older log's completion.
        store
            .start_claim(&id, t + 10, &[claimed(t + 10, 60_000)])
            .expect("claim again");
        store.complete_claim(&id, &first).expect("stale complete");
        let log = store.load_claim(&id).expect("load").expect("present");
        assert_eq!(log.events, vec![claimed(t + 10, 60_000)]);

        // The sweep takes a completed log's index entry with it, and only that one.
        let other = claim_id("acme", 5);
        let head = store
            .start_claim(&other, t, &[claimed(t, 1_000)])
            .expect("claim");
        let head = store.extend_claim(&head, &[done()]).expect("append");
        store.complete_claim(&other, &head).expect("complete");
        assert_eq!(store.claim_count(), 2);
        assert_eq!(store.sweep_expired(t + 1_001, 100).expect("sweep"), 4);
        assert_eq!(store.claim_count(), 1);
        assert_eq!(store.load_claim(&other).expect("load"), None);
        assert!(store.load_claim(&id).expect("load").is_some());
    }

    #[tokio::test]
    async fn appends_must_extend_the_log_on_disk_and_corrupt_logs_are_errors() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("open");
        let id = claim_id("acme", 2);
        let t = now_ms();
        let first = store
            .start_claim(&id, t, &[claimed(t, 60_000)])
            .expect("claim");
        let second = store.extend_claim(&first, &[done()]).expect("extend");
        let log = store.load_claim(&id).expect("load").expect("present");
        assert_eq!(log.events, vec![claimed(t, 60_000), done()]);
        assert_eq!(log.head, second);
        // A stale head (the log moved on): nothing is written.
        assert!(matches!(
            store.extend_claim(&first, &[done()]),
            Err(StoreError::LogMismatch)
        ));
        assert_eq!(store.load_claim(&id).expect("load").expect("present"), log);

        // An expired claim reads as none before it is swept, and an append that races the
        // sweep leaves an entry that is never read and goes with the next sweep.
        let gone = claim_id("acme", 3);
        let head = store
            .start_claim(&gone, t - 100, &[claimed(t - 100, 50)])
            .expect("claim");
        assert_eq!(store.load_claim(&gone).expect("load"), None);
        assert_eq!(store.sweep_expired(t, 10).expect("sweep"), 1);
        store.extend_claim(&head, &[done()]).expect("late append");
        assert_eq!(store.load_claim(&gone).expect("load"), None);
        assert_eq!(store.sweep_expired(t, 10).expect("sweep"), 1);
        assert_eq!(store.claim_count(), 1);

        // Damage is reported, never decoded into a wrong state: an entry cut short, a gap in
        // the entries, an index entry of the wrong size, an index naming a missing log.
        let entry_key = |seq| log_key(&second.prefix, seq);
        let value = store
            .claim_logs
            .get(entry_key(1))
            .expect("get")
            .expect("entry");
        store
            .claim_logs
            .insert(entry_key(1), &value[..value.len() - 3])
            .expect("insert");
        assert!(matches!(
            store.load_claim(&id),
            Err(StoreError::MalformedKey("claim_logs"))
        ));
        store.claim_logs.remove(entry_key(1)).expect("remove");
        store
            .claim_logs
            .insert(entry_key(2), value)
            .expect("insert");
        assert!(matches!(
            store.load_claim(&id),
            Err(StoreError::MalformedKey("claim_logs"))
        ));
        let index = store.claims.get(id.prefix()).expect("get").expect("index");
        store.claims.insert(id.prefix(), &[1, 2]).expect("insert");
        assert!(matches!(
            store.load_claim(&id),
            Err(StoreError::MalformedKey("claims"))
        ));
        store.claims.insert(id.prefix(), index).expect("insert");
        for seq in 0..3 {
            store.claim_logs.remove(entry_key(seq)).expect("remove");
        }
        assert!(matches!(
            store.load_claim(&id),
            Err(StoreError::MalformedKey("claims"))
        ));
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
