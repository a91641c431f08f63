//! A subject's history as a playbook's rules count it: for each `subject.decisions(...)` call of
//! its rules, the number of the tenant's kept decisions about the signal's subject (under its
//! keyed digest, never the subject itself) made within the call's window before now, read from
//! the store's decisions index, on any node that shares it.

use crate::rules::{Counts, History, MAX_COUNT};
use crate::store::{Store, StoreError};

/// What the history `calls` count of `tenant`'s subject whose digest is `subject_hash` at
/// `now_ms`.
pub async fn read(
    store: &dyn Store,
    tenant: &str,
    subject_hash: &str,
    calls: Vec<History>,
    now_ms: u64,
) -> Result<Counts, StoreError> {
    let mut counts = Counts::new();
    for call in calls {
        let since_ms = now_ms.saturating_sub(call.window.as_millis() as u64);
        let n = store
            .count_decisions(
                tenant,
                subject_hash,
                call.signal_type.as_deref(),
                since_ms,
                MAX_COUNT,
                now_ms,
            )
            .await?;
        counts.insert(call, n);
    }
    Ok(counts)
}
