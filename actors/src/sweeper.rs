//! The expiry sweeper: a task that, every `period`, deletes claim generations whose `key_ttl`
//! has passed and final deliveries past their retention, each by walking a tree kept in expiry
//! order (the claim logs themselves; the deliveries' retention index) from its oldest entry. The
//! store's size follows the keys in the window, and a tick touches only what is due.

use std::sync::Arc;
use std::time::Duration;

use idem_schemas::timefmt::now_ms;

use crate::delivery::DeliveryContext;

/// How many entries one store call deletes before yielding.
const BATCH: usize = 1024;

/// Starts the sweeper; it ends when the returned handle is aborted.
pub fn spawn(deliveries: Arc<DeliveryContext>, period: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            loop {
                let ctx = deliveries.clone();
                let swept = tokio::task::spawn_blocking(move || {
                    let now = now_ms();
                    let claims = ctx.store.sweep_expired(now, BATCH)?;
                    let forgotten = ctx.sweep(now, BATCH)?;
                    Ok::<_, crate::StoreError>(claims.max(forgotten))
                })
                .await;
                match swept {
                    // Each full batch is committed before the next, so a long sweep reaches the
                    // disk as it goes, and the writers' commits are not left behind one big one.
                    Ok(Ok(n)) if n == BATCH => {
                        if let Err(e) = deliveries.store.commit().await {
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
