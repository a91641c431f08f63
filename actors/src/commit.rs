//! Group commit: the one way a write becomes durable. Writers insert into sled (memory), then ask
//! this flusher thread to commit and wait, or to call them back once it has. The thread takes
//! every request queued so far as one batch, makes it durable once, and wakes the whole batch, so
//! a burst of N writers costs one flush, not N. Durable means sled's `flush()` (which in 0.34.7
//! ends in `sync_file_range`, not a real sync), then `fdatasync` of sled's log file and of any
//! new blob file. One thread, because sled 0.34.7's `flush_async` deadlocks when called from
//! many tasks (sled issue 1308).

use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use tokio::sync::oneshot;

/// What a waiter hears when the flusher thread is gone.
const STOPPED: &str = "the group-commit thread has stopped";

/// Someone waiting for a commit: a task awaiting it, or a callback the flusher thread calls.
enum Waiter {
    Task(oneshot::Sender<Result<(), String>>),
    Callback(Box<dyn FnOnce(Result<(), String>) + Send>),
}

impl Waiter {
    fn wake(self, outcome: Result<(), String>) {
        match self {
            Waiter::Task(tx) => {
                let _ = tx.send(outcome);
            }
            Waiter::Callback(notify) => notify(outcome),
        }
    }
}

/// Handle to the flusher thread; dropping it ends the thread (and with it the thread's handle
/// on the database, so the store can be reopened at once).
pub struct GroupCommit {
    requests: Option<mpsc::Sender<Waiter>>,
    thread: Option<std::thread::JoinHandle<()>>,
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
        let thread = std::thread::Builder::new()
            .name("idem-group-commit".into())
            .spawn(move || run(db, log, blobs, queue))?;
        Ok(GroupCommit {
            requests: Some(requests),
            thread: Some(thread),
        })
    }

    /// Returns once every write made before this call is durable.
    pub async fn commit(&self) -> Result<(), String> {
        let (tx, rx) = oneshot::channel();
        self.request(Waiter::Task(tx));
        rx.await.map_err(|_| STOPPED.to_string())?
    }

    /// Calls `notify` once every write made before this call is durable (or the commit failed),
    /// on the flusher thread: it must only hand the news on (an actor's `cast`), never block.
    pub fn commit_then(&self, notify: impl FnOnce(Result<(), String>) + Send + 'static) {
        self.request(Waiter::Callback(Box::new(notify)));
    }

    /// Queues `waiter` for the next batch; if the thread has stopped, tells it so at once.
    fn request(&self, waiter: Waiter) {
        let refused = match &self.requests {
            Some(requests) => requests.send(waiter).err().map(|e| e.0),
            None => Some(waiter),
        };
        if let Some(waiter) = refused {
            waiter.wake(Err(STOPPED.to_string()));
        }
    }
}

fn run(db: sled::Db, log: File, blobs: PathBuf, queue: mpsc::Receiver<Waiter>) {
    let mut synced_blobs = HashSet::new();
    // Each batch covers every write that happened before its first request was sent, and every
    // request that queued up while the previous batch was syncing.
    while let Ok(first) = queue.recv() {
        let mut batch = vec![first];
        batch.extend(queue.try_iter());
        let timer = crate::metrics::FLUSH_SECONDS.start_timer();
        let outcome = sync(&db, &log, &blobs, &mut synced_blobs).map_err(|e| e.to_string());
        timer.observe_duration();
        if let Err(e) = &outcome {
            tracing::error!(error = %e, "group commit failed");
        }
        for waiter in batch {
            waiter.wake(outcome.clone());
        }
    }
}

fn sync(
    db: &sled::Db,
    log: &File,
    blobs: &Path,
    synced: &mut HashSet<PathBuf>,
) -> std::io::Result<()> {
    db.flush().map_err(std::io::Error::other)?;
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
