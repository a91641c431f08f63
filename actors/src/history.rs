//! A subject's history as a playbook's rules count it: for each `subject.decisions(...)` call of
//! its rules, the number of the tenant's kept decisions about the signal's subject (under its
//! keyed digest, never the subject itself) made within the call's window before now, read from
//! the store's decisions index, on any node that shares it.

use crate::digest::Digester;
use crate::playbook::Decider;
use crate::rules::{Counts, MAX_COUNT};
use crate::store::{Store, StoreError};

/// What `decider`'s playbook's rules count of its subject's history at `now_ms`.
pub async fn read(
    store: &dyn Store,
    decider: &Decider,
    digester: &Digester,
    now_ms: u64,
) -> Result<Counts, StoreError> {
    let calls = decider.playbook.history();
    let mut counts = Counts::new();
    if calls.is_empty() {
        return Ok(counts);
    }
    let subject_hash = decider.subject_hash(digester);
    for call in calls {
        let since_ms = now_ms.saturating_sub(call.window.as_millis() as u64);
        let n = store
            .count_decisions(
                &decider.tenant,
                &subject_hash,
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
