//! The expiry sweeper: a task that, every `period`, deletes claim generations whose `key_ttl`
//! has passed, final deliveries past their retention and decisions past theirs, each walked in
//! the order it expires from its oldest. The store's size follows the keys in the window, and a
//! tick touches little beyond what is due (on sled, one kept decision per tenant).

use std::sync::Arc;
use std::time::Duration;

use idem_schemas::timefmt::now_ms;

use crate::store::{Store, StoreError, Unit};

/// How many entries one store call deletes before yielding.
const BATCH: usize = 1024;

/// Deletes up to a batch of expired claim records, final deliveries and decisions; how many of
/// the largest kind. A delivery still queued at the end of its retention is looked at again
/// `requeue` later. Deletions need no commit of their own: a sweep lost in a crash is simply
/// done again.
pub fn sweep_once(store: &dyn Store, requeue: Duration) -> Result<usize, StoreError> {
    let now = now_ms();
    let claims = store.sweep_claims(now, BATCH)?;
    let forgotten = store.expire_deliveries(now, now + requeue.as_millis() as u64, BATCH)?;
    for status in &forgotten {
        crate::metrics::delivery_moved(Some(*status), None);
    }
    let decisions = store.expire_decisions(now, BATCH)?;
    Ok(claims.max(forgotten.len()).max(decisions))
}

/// Starts the sweeper; it ends when the returned handle is aborted.
pub fn spawn(
    store: Arc<dyn Store>,
    period: Duration,
    requeue: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            loop {
                let on = store.clone();
                let swept = tokio::task::spawn_blocking(move || sweep_once(&*on, requeue)).await;
                match swept {
                    // Each full batch is committed before the next, so a long sweep reaches the
                    // disk as it goes, and the writers' commits are not left behind one big one.
                    Ok(Ok(n)) if n == BATCH => {
                        if let Err(e) = store.commit(Unit::new()).await {
                            tracing::warn!(error = %e, "expiry sweep commit failed");
                            break;
                        }
                    }
                    Ok(Ok(_)) => break,
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "expiry sweep failed");
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "expiry sweep task failed");
                        break;
                    }
                }
            }
        }
    })
}
