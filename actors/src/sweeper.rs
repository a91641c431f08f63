//! The expiry sweeper: a task that, every `period`, deletes claim generations whose `key_ttl`
//! has passed, by walking the expiry index from its oldest entry. The store's size follows the
//! keys in the window, and a tick touches only what is due.

use std::sync::Arc;
use std::time::Duration;

use idem_schemas::timefmt::now_ms;

use crate::store::Store;

/// How many generations one store call deletes before yielding.
const BATCH: usize = 1024;

/// Starts the sweeper; it ends when the returned handle is aborted.
pub fn spawn(store: Arc<Store>, period: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            loop {
                let store = store.clone();
                let swept =
                    tokio::task::spawn_blocking(move || store.sweep_expired(now_ms(), BATCH)).await;
                match swept {
                    Ok(Ok(n)) if n == BATCH => continue,
                    Ok(Ok(n)) => {
                        if n > 0 {
                            tracing::debug!(swept = n, "expired claims pruned");
                        }
                        break;
                    }
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
