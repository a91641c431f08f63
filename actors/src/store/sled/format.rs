//! The data directory's format: its trees, their keys and values (see `keys`), and sled's own
//! settings that shape the files. A directory written in another format is refused at open:
//! reading it would misread claims, and a claim misread as free would be decided twice.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::store::StoreError;

/// The format this idem reads and writes. 2: one value per claim log; 3: 8 MiB segments; 4:
/// claim logs in expiry order behind an index, 16 MiB segments; 5: `completed` a flag on the
/// index entry, ids and digests stored as bytes; 6: a claim names its subject's claim, payload
/// fingerprints are of the body's RFC 8785 form, and decisions are kept for lookup; 7: a
/// decision names its source; 8: decisions swept in the order they were made, without an expiry
/// index.
pub const FORMAT: u8 = 8;

/// The older format a directory is upgraded from when it opens.
const UPGRADES: u8 = 7;

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

/// Refuses a data directory written in another format (upgrading the one format this one only
/// drops a tree of); marks a new one with this format.
fn check(db: &::sled::Db) -> Result<(), StoreError> {
    match db.get(FORMAT_KEY)? {
        Some(found) if *found == [FORMAT] => Ok(()),
        // Format 7 differs only by the decisions' expiry index, which this format sweeps
        // without. The tree goes before the new mark: sled recovers its log in order, so a
        // directory marked 8 never still holds it, and a crash between the two upgrades again.
        Some(found) if *found == [UPGRADES] => {
            db.drop_tree("decision_expiry")?;
            db.insert(FORMAT_KEY, &[FORMAT])?;
            Ok(())
        }
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
