//! The retry worker: every tick, and whenever it is woken (a decision's callbacks were queued
//! due at once), it reads the retry queue from its oldest entry up to now — only
//! what is due, never every delivery — and wakes each due delivery's actor, which makes the
//! attempt. The queue is durable, so after a crash the first tick resumes every queued delivery.
//! Deliveries woken and not done yet (waiting for a place at their endpoint) are not woken again,
//! and the read goes past them (a store that leases due deliveries leaves them out itself).
//! A claim whose unit just wrote its queued callbacks' logs, new, hands those logs over instead
//! of waking it: their actors start from them, and the queue is not read. A log the queue may
//! have shown meanwhile (a read overlapped the unit) may have moved on (attempted and recorded
//! from that read), so its actor reads it instead.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem_schemas::timefmt::now_ms;
use tokio::sync::{mpsc, Notify};

use crate::delivery::{DeliveryActors, DeliveryError};
use crate::store::{DeliveryWrite, Store};

/// How many due deliveries one tick wakes at most.
const BATCH: usize = 1000;

/// How many hand-overs may wait for the worker; past that, a claim wakes it instead.
const HANDED_OVER: usize = 1024;

/// The way to the retry worker: wake it, or hand it logs just written.
#[derive(Clone)]
pub struct Retries {
    woken: Arc<Notify>,
    handed: mpsc::Sender<HandedOver>,
    reads: Arc<AtomicU64>,
}

/// New logs of queued deliveries, handed to the worker.
pub struct HandedOver {
    written: Vec<DeliveryWrite>,
    /// [`Retries::reads`] before their unit went to the store.
    reads: u64,
}

/// What the worker listens to: its wake-ups and its hand-overs.
pub struct Listening {
    woken: Arc<Notify>,
    handed: mpsc::Receiver<HandedOver>,
    reads: Arc<AtomicU64>,
}

impl Retries {
    /// A way to a retry worker, and what that worker listens to ([`spawn`]).
    pub fn new() -> (Retries, Listening) {
        let woken = Arc::new(Notify::new());
        let reads = Arc::new(AtomicU64::new(0));
        let (handed, listening) = mpsc::channel(HANDED_OVER);
        let retries = Retries {
            woken: woken.clone(),
            handed,
            reads: reads.clone(),
        };
        let listening = Listening {
            woken,
            handed: listening,
            reads,
        };
        (retries, listening)
    }

    /// Wakes the worker: queued deliveries are due now, and it reads the queue.
    pub fn wake(&self) {
        self.woken.notify_one();
    }

    /// Counts the worker's reads of the queue: up by one as a read starts and by one as it
    /// ends (odd while one runs). Taken before a unit goes to the store, and handed over with
    /// its logs: the same even count then means no read could have shown them.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::SeqCst)
    }

    /// Hands the worker `written`: the new logs of queued deliveries, due now, that a unit just
    /// made durable wrote (on a store that does not lease due deliveries), with [`reads`] as
    /// it was before that unit went to the store. With the worker too far behind, it is woken
    /// instead, and finds them in the queue.
    ///
    /// [`reads`]: Retries::reads
    pub fn hand_over(&self, written: Vec<DeliveryWrite>, reads: u64) {
        if self.handed.try_send(HandedOver { written, reads }).is_err() {
            self.wake();
        }
    }
}

/// Starts the worker, which also reads the queue once woken (wakes while it reads make one
/// more read), and starts the deliveries it is handed; it ends when the returned handle is
/// aborted.
pub fn spawn(
    store: Arc<dyn Store>,
    deliveries: Arc<DeliveryActors>,
    tick: Duration,
    listening: Listening,
) -> tokio::task::JoinHandle<()> {
    let Listening {
        woken,
        mut handed,
        reads,
    } = listening;
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(tick);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = interval.tick() => {}
                _ = woken.notified() => {}
                Some(HandedOver { written, reads: before }) = handed.recv() => {
                    // No read of the queue since (nor one running then): no attempt was made
                    // from one, and the logs are as written.
                    let unread = before % 2 == 0 && reads.load(Ordering::SeqCst) == before;
                    // Not all started (their actors could not be reached): the queue holds them.
                    if deliveries.start_written(written, unread).await.is_ok() {
                        continue;
                    }
                }
            }
            let skipped = match store.leases_due() {
                true => 0,
                false => deliveries.pending(),
            };
            reads.fetch_add(1, Ordering::SeqCst);
            let due = store.due(now_ms(), BATCH + skipped).await;
            reads.fetch_add(1, Ordering::SeqCst);
            let due = match due {
                Ok(due) => due,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the retry queue");
                    continue;
                }
            };
            for entry in due {
                if let Err(e) = deliveries.wake(&entry).await {
                    tracing::warn!(delivery = %entry.id, error = %e, "cannot wake delivery");
                    // Gone, or a log that does not fold (reported as it was read): nothing
                    // an attempt could be made from, so the queue lets go of it.
                    if matches!(
                        deliveries.load(&entry.id).await,
                        Ok(None) | Err(DeliveryError::Log(_))
                    ) {
                        let _ = store.drop_due(&entry).await;
                    }
                }
            }
        }
    })
}
