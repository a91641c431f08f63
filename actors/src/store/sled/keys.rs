//! How the sled store lays out its keys and values. Every key is built and taken apart here, so
//! the layout of the data directory (its format) is read in one place.
//!
//! - `claims`: `claim → expires_at ‖ generation [‖ COMPLETED]`, the index naming each key's
//!   current log; `claim` is `tenant length ‖ tenant ‖ digest`.
//! - `claim_logs`: `expires_at ‖ claim ‖ generation ‖ seq → (u32 length ‖ record)*`, one entry
//!   per write, in the order they expire.
//! - `deliveries`: `delivery id ‖ 0 ‖ seq → record`.
//! - `delivery_due` and `delivery_expiry`: `time ‖ delivery id`, the retry queue and the
//!   retention index.
//! - `delivery_status`: `tenant length ‖ tenant ‖ status ‖ delivery id`, the tenant's listing.
//! - `delivery_queued`: `tenant length ‖ tenant ‖ url length (u32) ‖ url ‖ delivery id`, while
//!   queued: the tenant's queued count per endpoint, read from the keys alone.
//! - `decisions`: `tenant length ‖ tenant ‖ decision id → record`.
//! - `decisions_by_subject`: `tenant length ‖ tenant ‖ digest length ‖ subject digest ‖
//!   decision id`, a subject's decisions in the order they were made.

use idem_schemas::{ClaimEvent, DecisionRecord, DeliveryStatus};

use crate::store::{rule, ClaimId, LogHead, StoreError, Timed};

/// A claim's index key: `tenant length ‖ tenant ‖ digest`.
pub fn claim_key(id: &ClaimId) -> Vec<u8> {
    let tenant = id.tenant.as_bytes();
    let mut key = Vec::with_capacity(1 + tenant.len() + 32);
    // Tenant names are at most 64 bytes (config validation), so the length fits one byte.
    key.push(tenant.len() as u8);
    key.extend_from_slice(tenant);
    key.extend_from_slice(&id.digest);
    key
}

/// The prefix of a claim generation's log entries: `expires_at ‖ claim ‖ generation`.
pub fn log_prefix(head: &LogHead) -> Vec<u8> {
    let claim = claim_key(&head.id);
    let mut key = Vec::with_capacity(24 + claim.len());
    key.extend_from_slice(&head.expires_at_ms.to_be_bytes());
    key.extend_from_slice(&claim);
    key.extend_from_slice(&head.generation.to_be_bytes());
    key
}

/// The key of entry `seq` of the log at `prefix`.
pub fn log_key(prefix: &[u8], seq: u32) -> Vec<u8> {
    [prefix, &seq.to_be_bytes()].concat()
}

/// A log entry's key split into `(expires_at, claim, generation, seq)`.
pub fn split_log_key(key: &[u8]) -> Result<(u64, &[u8], u64, u32), StoreError> {
    let malformed = StoreError::Malformed("claim_logs");
    let (expiry, rest) = key.split_first_chunk::<8>().ok_or(malformed.clone())?;
    let (rest, seq) = rest.split_last_chunk::<4>().ok_or(malformed.clone())?;
    let (claim, generation) = rest.split_last_chunk::<8>().ok_or(malformed.clone())?;
    if claim.is_empty() {
        return Err(malformed);
    }
    Ok((
        u64::from_be_bytes(*expiry),
        claim,
        u64::from_be_bytes(*generation),
        u32::from_be_bytes(*seq),
    ))
}

/// The byte that follows an index entry's value when its log is completed.
pub const COMPLETED: u8 = 1;

/// An index entry: which generation of a key is current, and whether it completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Index {
    /// When the generation expires.
    pub expires_at_ms: u64,
    /// The generation.
    pub generation: u64,
    /// Whether its log is completed.
    pub completed: bool,
}

impl Index {
    /// The index entry of the log at `head`, not completed.
    pub fn of(head: &LogHead) -> Self {
        Index {
            expires_at_ms: head.expires_at_ms,
            generation: head.generation,
            completed: false,
        }
    }

    /// The index entry of a new generation at `head` whose first write is `events`: completed
    /// if they end so (a decision with nothing to run, or with queued callbacks, written once).
    pub fn started(head: &LogHead, events: &[ClaimEvent]) -> Self {
        Index {
            completed: rule::completed_from_the_start(events),
            ..Index::of(head)
        }
    }

    /// As stored: `expires_at ‖ generation [‖ COMPLETED]`.
    pub fn value(&self) -> Vec<u8> {
        let mut value = Vec::with_capacity(17);
        value.extend_from_slice(&self.expires_at_ms.to_be_bytes());
        value.extend_from_slice(&self.generation.to_be_bytes());
        if self.completed {
            value.push(COMPLETED);
        }
        value
    }

    /// The generation as the claim rules read it (its log's length aside). A generation is the
    /// time it was claimed: sled's take-over grants no new one.
    pub fn current(&self) -> rule::Current {
        rule::Current {
            generation: self.generation,
            expires_at_ms: self.expires_at_ms,
            writes: 0,
            completed: self.completed,
            claimed_at_ms: self.generation,
        }
    }

    /// Parses a stored index entry.
    pub fn parse(value: &[u8]) -> Result<Self, StoreError> {
        let malformed = StoreError::Malformed("claims");
        let (expiry, rest) = value.split_first_chunk::<8>().ok_or(malformed.clone())?;
        let (generation, flag) = rest.split_first_chunk::<8>().ok_or(malformed.clone())?;
        let completed = match flag {
            [] => false,
            [COMPLETED] => true,
            _ => return Err(malformed),
        };
        Ok(Index {
            expires_at_ms: u64::from_be_bytes(*expiry),
            generation: u64::from_be_bytes(*generation),
            completed,
        })
    }

    /// Whether this entry names the same generation as `other` (completed or not).
    pub fn same_log(&self, other: &Index) -> bool {
        self.expires_at_ms == other.expires_at_ms && self.generation == other.generation
    }
}

/// The byte of a status in the listing index.
pub fn status_byte(s: DeliveryStatus) -> u8 {
    crate::store::status_number(s)
}

/// `tenant length ‖ tenant`, the start of a tenant's listing.
pub fn tenant_prefix(tenant: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + tenant.len() + 40);
    key.push(tenant.len() as u8);
    key.extend_from_slice(tenant.as_bytes());
    key
}

/// A listing entry: `tenant length ‖ tenant ‖ status ‖ id`.
pub fn status_key(tenant: &str, status: DeliveryStatus, id: &str) -> Vec<u8> {
    let mut key = tenant_prefix(tenant);
    key.push(status_byte(status));
    key.extend_from_slice(id.as_bytes());
    key
}

/// A listing entry's tenant, status byte and delivery id.
pub fn split_status_key(key: &[u8]) -> Result<(&str, u8, &str), StoreError> {
    let malformed = || StoreError::Malformed("delivery_status");
    let (&tenant_len, rest) = key.split_first().ok_or_else(malformed)?;
    let (tenant, rest) = rest
        .split_at_checked(tenant_len as usize)
        .ok_or_else(malformed)?;
    let (&status, id) = rest.split_first().ok_or_else(malformed)?;
    let text = |bytes| std::str::from_utf8(bytes).map_err(|_| malformed());
    Ok((text(tenant)?, status, text(id)?))
}

/// A queued delivery's entry in the count per endpoint: `tenant length ‖ tenant ‖ url length ‖
/// url ‖ id`.
pub fn queued_key(tenant: &str, url: &str, id: &str) -> Vec<u8> {
    let mut key = tenant_prefix(tenant);
    key.extend_from_slice(&(url.len() as u32).to_be_bytes());
    key.extend_from_slice(url.as_bytes());
    key.extend_from_slice(id.as_bytes());
    key
}

/// The URL of a queued delivery's entry, past its tenant's prefix of `prefix_len` bytes.
pub fn split_queued_key(key: &[u8], prefix_len: usize) -> Result<&str, StoreError> {
    key.get(prefix_len..)
        .and_then(|rest| rest.split_first_chunk::<4>())
        .and_then(|(len, rest)| rest.get(..u32::from_be_bytes(*len) as usize))
        .and_then(|url| std::str::from_utf8(url).ok())
        .ok_or(StoreError::Malformed("delivery_queued"))
}

/// A time index entry: `time ‖ id`.
pub fn time_key(at_ms: u64, id: &str) -> Vec<u8> {
    let mut key = at_ms.to_be_bytes().to_vec();
    key.extend_from_slice(id.as_bytes());
    key
}

/// A time index entry back into its parts.
pub fn split_time_key(key: &[u8], tree: &'static str) -> Result<Timed, StoreError> {
    let (time, id) = key
        .split_first_chunk::<8>()
        .ok_or(StoreError::Malformed(tree))?;
    let id = String::from_utf8(id.to_vec()).map_err(|_| StoreError::Malformed(tree))?;
    Ok(Timed {
        at_ms: u64::from_be_bytes(*time),
        id,
        lease: None,
    })
}

/// The prefix of a delivery's records: `id ‖ 0`.
pub fn delivery_prefix(id: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(id.len() + 5);
    key.extend_from_slice(id.as_bytes());
    key.push(0);
    key
}

/// The key of a delivery's record `seq`.
pub fn delivery_key(id: &str, seq: u32) -> Vec<u8> {
    let mut key = delivery_prefix(id);
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

/// A kept decision's key: `tenant length ‖ tenant ‖ id`.
pub fn decision_key(tenant: &str, id: &str) -> Vec<u8> {
    let mut key = tenant_prefix(tenant);
    key.extend_from_slice(id.as_bytes());
    key
}

/// The start of a subject's decisions: `tenant length ‖ tenant ‖ digest length ‖ digest`, the
/// digest as the bytes behind its hex.
pub fn subject_prefix(tenant: &str, subject_hash: &str) -> Vec<u8> {
    let digest = crate::store::subject_bytes(subject_hash);
    let mut key = tenant_prefix(tenant);
    // A subject digest is 32 bytes; an odd one stored by hand is cut rather than misread.
    key.push(digest.len().min(255) as u8);
    key.extend_from_slice(&digest[..digest.len().min(255)]);
    key
}

/// A decision's entry in its subject's listing: `subject prefix ‖ decision id`.
pub fn subject_listing(record: &DecisionRecord) -> Vec<u8> {
    let mut key = subject_prefix(&record.tenant, &record.subject_hash);
    key.extend_from_slice(record.id.as_bytes());
    key
}

/// The first key past every decision of the tenant whose decision `key` is (ids are ASCII, so
/// a key not before it is damage, refused rather than walked again).
pub fn past_tenant(key: &[u8]) -> Result<Vec<u8>, StoreError> {
    let malformed = || StoreError::Malformed("decisions");
    let len = *key.first().ok_or_else(malformed)? as usize;
    let prefix = key.get(..1 + len).ok_or_else(malformed)?;
    let past = [prefix, &[0xff]].concat();
    match past.as_slice() > key {
        true => Ok(past),
        false => Err(malformed()),
    }
}
