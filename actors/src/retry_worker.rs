//! The retry worker: every tick, and whenever it is woken (a decision's callbacks were queued
//! due at once), it reads the retry queue from its oldest entry up to now — only
//! what is due, never every delivery — and wakes each due delivery's actor, which makes the
//! attempt. The queue is durable, so after a crash the first tick resumes every queued delivery.
//! Deliveries woken and not done yet (waiting for a place at their endpoint) are not woken again,
//! and the read goes past them (a store that leases due deliveries leaves them out itself).

use std::sync::Arc;
use std::time::Duration;

use idem_schemas::timefmt::now_ms;
use tokio::sync::Notify;

use crate::delivery::{DeliveryActors, DeliveryError};
use crate::store::Store;

/// How many due deliveries one tick wakes at most.
const BATCH: usize = 1000;

/// Starts the worker, which also reads the queue once `woken` is notified (wakes while it
/// reads make one more read); it ends when the returned handle is aborted.
pub fn spawn(
    store: Arc<dyn Store>,
    deliveries: Arc<DeliveryActors>,
    tick: Duration,
    woken: Arc<Notify>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(tick);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = interval.tick() => {}
                _ = woken.notified() => {}
            }
            let skipped = match store.leases_due() {
                true => 0,
                false => deliveries.pending(),
            };
            let due = match store.due(now_ms(), BATCH + skipped).await {
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
