//! The retry worker: every tick it reads the due index from its oldest entry up to now — only
//! what is due, never every delivery — and wakes each due delivery's actor, which makes the
//! attempt. The index is durable, so after a crash the first tick resumes every queued delivery.

use std::sync::Arc;
use std::time::Duration;

use idem_schemas::timefmt::now_ms;

use crate::delivery::Deliveries;

/// How many due deliveries one tick wakes at most.
const BATCH: usize = 1000;

/// The worker's tick for a `retry_interval`: a fraction of it, so attempts are spaced by about
/// `retry_interval`, and at most a second, so a due delivery never waits long.
pub fn tick_for(retry_interval: Duration) -> Duration {
    (retry_interval / 4).clamp(Duration::from_millis(10), Duration::from_secs(1))
}

/// Starts the worker; it ends when the returned handle is aborted.
pub fn spawn(deliveries: Arc<Deliveries>, tick: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(tick);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            interval.tick().await;
            let due = match deliveries.context().store.due_deliveries(now_ms(), BATCH) {
                Ok(due) => due,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the retry queue");
                    continue;
                }
            };
            for (due_ms, id) in due {
                if let Err(e) = deliveries.wake(&id, due_ms).await {
                    tracing::warn!(delivery = %id, error = %e, "cannot wake delivery");
                    if matches!(deliveries.load(&id), Ok(None)) {
                        let _ = deliveries.context().store.drop_due(due_ms, &id);
                    }
                }
            }
        }
    })
}
