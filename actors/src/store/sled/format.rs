//! The data directory's format: its trees, their keys and values (see `keys`), and sled's own
//! settings that shape the files. A directory written in another format is refused at open:
//! reading it would misread claims, and a claim misread as free would be decided twice.

use std::path::Path;
use std::time::{Duration, Instant};

use idem_schemas::{DeliveryEvent, DeliveryStatus};

use super::keys::{delivery_key, queued_key, split_status_key, status_byte, status_key};
use crate::codec;
use crate::store::StoreError;

/// The format this idem reads and writes. 2: one value per claim log; 3: 8 MiB segments; 4:
/// claim logs in expiry order behind an index, 16 MiB segments; 5: `completed` a flag on the
/// index entry, ids and digests stored as bytes; 6: a claim names its subject's claim, payload
/// fingerprints are of the body's RFC 8785 form, and decisions are kept for lookup; 7: a
/// decision names its source; 8: decisions swept in the order they were made, without an expiry
/// index; 9: queued deliveries indexed by endpoint; 10: records name the trace their decision
/// was made in (an older idem cannot read them; those of format 9 read as they were); 11:
/// decisions name the rule that decided and the rules that failed (likewise, from format 10).
pub const FORMAT: u8 = 11;

/// The older formats a directory is upgraded from when it opens.
const UPGRADES: [u8; 4] = [7, 8, 9, 10];

/// Where the data directory's format is written (sled's default tree).
pub const FORMAT_KEY: &[u8] = b"idem_format";

/// sled's page cache (its default is 1 GiB), by sled's own estimate; its real footprint is
/// about twice this. Leaves not cached are read back through the OS's page cache, so memory
/// follows the keys in use, not the keys on disk.
const CACHE_BYTES: u64 = 16 * 1024 * 1024;

/// sled's log segment (its default is 512 KiB; 16 MiB is its largest). sled relocates what is
/// live in a segment once half of it is dead, and most segments stay partly live for long (the
/// claim logs' leaves are written once and kept until they expire): larger segments keep less
/// dead space on disk, for a larger segment buffer in memory.
pub const SEGMENT_BYTES: usize = 16 * 1024 * 1024;

/// How long opening waits for another handle to let go of the data directory: one just dropped
/// in this process (sled's I/O threads release the file a moment after the last handle goes),
/// or an idem still exiting.
const LOCK_WAIT: Duration = Duration::from_secs(2);

/// Opens sled in `dir` with this format's settings, and checks (or marks) the format.
pub fn open(dir: &Path) -> Result<::sled::Db, StoreError> {
    let config = ::sled::Config::new()
        .path(dir)
        .cache_capacity(CACHE_BYTES)
        .segment_size(SEGMENT_BYTES);
    let started = Instant::now();
    let db = loop {
        match config.open() {
            Ok(db) => break db,
            // sled refuses a directory written with another segment size: an older format.
            Err(::sled::Error::Unsupported(why)) => {
                return Err(StoreError::Format(format!("an older format ({why})")))
            }
            // Another handle holds the directory's lock (sled says so only in its message).
            Err(::sled::Error::Io(e))
                if e.to_string().contains("could not acquire lock")
                    && started.elapsed() < LOCK_WAIT =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(e.into()),
        }
    };
    check(&db)?;
    Ok(db)
}

/// Refuses a data directory written in another format (upgrading the older ones this one only
/// adds to or drops a tree of); marks a new one with this format.
fn check(db: &::sled::Db) -> Result<(), StoreError> {
    match db.get(FORMAT_KEY)? {
        Some(found) if *found == [FORMAT] => Ok(()),
        Some(found) if UPGRADES.iter().any(|&old| *found == [old]) => upgrade(db, found[0]),
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

/// Upgrades a directory of an older format in place. Format 7 kept the decisions' expiry index,
/// which this format sweeps without; formats 7 and 8 lack the queued index, built here from the
/// deliveries listed as queued and under no other status (a crash part-way through a move
/// leaves a delivery listed under both: not counted, it is counted too few times until it
/// leaves the queue, never too many for ever). The mark goes last: sled recovers its log in
/// order, so a directory marked with this format holds the whole upgrade, and a crash before
/// the mark upgrades again (each step may run twice). Formats 9 and 10 only need the mark.
fn upgrade(db: &::sled::Db, from: u8) -> Result<(), StoreError> {
    if from == 7 {
        db.drop_tree("decision_expiry")?;
    }
    if from == 9 || from == 10 {
        db.insert(FORMAT_KEY, &[FORMAT])?;
        return Ok(());
    }
    let deliveries = db.open_tree("deliveries")?;
    let listing = db.open_tree("delivery_status")?;
    let queued = db.open_tree("delivery_queued")?;
    for key in listing.iter().keys() {
        let key = key?;
        let (tenant, status, id) = split_status_key(&key)?;
        if status != status_byte(DeliveryStatus::Queued) {
            continue;
        }
        let mut elsewhere = DeliveryStatus::ALL
            .into_iter()
            .filter(|&other| other != DeliveryStatus::Queued)
            .map(|other| listing.contains_key(status_key(tenant, other, id)));
        if elsewhere.any(|listed| !matches!(listed, Ok(false))) {
            continue;
        }
        let Some(first) = deliveries.get(delivery_key(id, 0))? else {
            continue;
        };
        let DeliveryEvent::Created(record) = codec::decode(&first)? else {
            return Err(StoreError::Malformed("deliveries"));
        };
        queued.insert(queued_key(tenant, &record.url, id), &[])?;
    }
    db.insert(FORMAT_KEY, &[FORMAT])?;
    Ok(())
}
