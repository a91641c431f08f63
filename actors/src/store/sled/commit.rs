//! Group commit: the one way a write becomes durable. Writers apply their unit to sled (memory),
//! then ask this flusher thread to call them back once it is durable. The thread takes every
//! request queued so far as one batch, makes it durable once, and calls the whole batch back, so
//! a burst of N writers costs one sync, not N. Durable means sled's `flush()` (which in 0.34.7
//! ends in `sync_file_range`, not a real sync), then `fdatasync` of sled's log file and of any
//! new blob file. One thread, because sled 0.34.7's `flush_async` deadlocks when called from
//! many tasks (sled issue 1308).
//!
//! A failed sync halts the store for good. After `fsync` fails, the kernel may already have
//! dropped the dirty pages it could not write (and marked them clean), so a later sync that
//! succeeds proves nothing about them, and sled's own cache holds records that may never reach
//! the disk: acknowledging anything written after them would build on records that can vanish.
//! PostgreSQL answers a failed `fsync` the same way (it stops, and recovers from its WAL at
//! restart). So every waiter from then on gets [`StoreError::Halted`], the store's halt watch
//! fires, and the process exits for its supervisor to restart it: recovery replays sled's log,
//! which holds exactly what was durable.

use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};

use crate::store::{Halted, StoreError};

/// Called back once a commit is done (or failed), on the flusher thread.
type Waiter = Box<dyn FnOnce(Result<(), StoreError>) + Send>;

/// Handle to the flusher thread; dropping it ends the thread (and with it the thread's handle
/// on the database, so the store can be reopened at once).
pub struct GroupCommit {
    requests: Option<mpsc::Sender<Waiter>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Set once a sync failed.
    halted: Halted,
}

impl Drop for GroupCommit {
    fn drop(&mut self) {
        self.requests.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl GroupCommit {
    /// Starts the flusher for `db`, whose files live in `dir`.
    pub fn start(db: sled::Db, dir: &Path) -> std::io::Result<Self> {
        let log = File::open(dir.join("db"))?;
        let blobs = dir.join("blobs");
        let (requests, queue) = mpsc::channel::<Waiter>();
        let (halt, halted) = tokio::sync::watch::channel(None);
        let thread = std::thread::Builder::new()
            .name("idem-group-commit".into())
            .spawn(move || run(db, log, blobs, queue, halt))?;
        Ok(GroupCommit {
            requests: Some(requests),
            thread: Some(thread),
            halted,
        })
    }

    /// The halt watch: set once a sync failed.
    pub fn halted(&self) -> Halted {
        self.halted.clone()
    }

    /// Refuses with [`StoreError::Halted`] once a sync failed.
    pub fn usable(&self) -> Result<(), StoreError> {
        match &*self.halted.borrow() {
            None => Ok(()),
            Some(e) => Err(StoreError::Halted(Arc::new(e.clone()))),
        }
    }

    /// Calls `notify` once every write made before this call is durable (or the commit failed),
    /// on the flusher thread: it must only hand the news on (an actor's `cast`), never block.
    pub fn commit_then(&self, notify: Waiter) {
        let refused = match &self.requests {
            Some(requests) => requests.send(notify).err().map(|e| e.0),
            None => Some(notify),
        };
        if let Some(notify) = refused {
            notify(Err(StoreError::Stopped));
        }
    }
}

fn run(
    db: sled::Db,
    log: File,
    blobs: PathBuf,
    queue: mpsc::Receiver<Waiter>,
    halt: tokio::sync::watch::Sender<Option<StoreError>>,
) {
    let mut synced_blobs = HashSet::new();
    let mut failed: Option<StoreError> = None;
    // Each batch covers every write that happened before its first request was sent, and every
    // request that queued up while the previous batch was syncing.
    while let Ok(first) = queue.recv() {
        let mut batch = vec![first];
        batch.extend(queue.try_iter());
        let outcome = match &failed {
            // Halted: no sync can vouch for what came after the failed one (see above).
            Some(e) => Err(StoreError::Halted(Arc::new(e.clone()))),
            None => {
                let timer = crate::metrics::FLUSH_SECONDS.start_timer();
                let outcome = sync(&db, &log, &blobs, &mut synced_blobs);
                timer.observe_duration();
                if let Err(e) = &outcome {
                    tracing::error!(error = %e, "group commit failed: the store halts");
                    failed = Some(e.clone());
                    halt.send_replace(Some(e.clone()));
                }
                outcome
            }
        };
        for waiter in batch {
            waiter(outcome.clone());
        }
    }
}

fn sync(
    db: &sled::Db,
    log: &File,
    blobs: &Path,
    synced: &mut HashSet<PathBuf>,
) -> Result<(), StoreError> {
    db.flush()?;
    if crate::failpoint::switched_on("store.sync") {
        return Err(std::io::Error::other("failpoint store.sync: an injected I/O error").into());
    }
    log.sync_data()?;
    // Values too large for a log segment go to blob files, which sled writes without syncing.
    let Ok(entries) = std::fs::read_dir(blobs) else {
        return Ok(());
    };
    let mut present = HashSet::new();
    let mut new_blob = false;
    for entry in entries.flatten() {
        let path = entry.path();
        if !synced.contains(&path) {
            File::open(&path)?.sync_data()?;
            new_blob = true;
        }
        present.insert(path);
    }
    if new_blob {
        File::open(blobs)?.sync_all()?;
    }
    *synced = present;
    Ok(())
}
