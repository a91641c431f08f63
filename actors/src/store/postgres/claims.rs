//! Claims in PostgreSQL: one row per key, holding its current generation. Reads here; the
//! writes (start, append, complete) are made by the group commit (`batch`), which decides them
//! in the database: a start inserts the row or replaces an expired one, and an append updates it
//! only where the generation and the count of writes are the ones the writer holds.

use idem_schemas::ClaimEvent;
use tokio_postgres::Row;

use super::PgStore;
use crate::codec;
use crate::store::{ClaimId, ClaimLog, ClaimStore, LogHead, Read, StoreError};

/// The columns a claim is read from, in [`claim_log`]'s order.
pub(super) const COLUMNS: &str = "generation, expires_at_ms, log, writes, completed";

/// A claim row (selected with [`COLUMNS`]) as the log of `id`, if it has not expired at
/// `now_ms`.
pub(super) fn claim_log(
    id: &ClaimId,
    row: &Row,
    now_ms: u64,
) -> Result<Option<ClaimLog>, StoreError> {
    let generation: i64 = row.try_get(0)?;
    let expires_at_ms: i64 = row.try_get(1)?;
    let log: &[u8] = row.try_get(2)?;
    let writes: i32 = row.try_get(3)?;
    let completed: bool = row.try_get(4)?;
    // An expired claim is no claim: the key is free again.
    if expires_at_ms as u64 <= now_ms {
        return Ok(None);
    }
    let mut events: Vec<ClaimEvent> =
        codec::decode_entry(log).map_err(|_| StoreError::Malformed("idem_claims"))?;
    if completed && events.last() != Some(&ClaimEvent::Completed) {
        events.push(ClaimEvent::Completed);
    }
    Ok(Some(ClaimLog {
        events,
        head: LogHead {
            id: id.clone(),
            generation: generation as u64,
            expires_at_ms: expires_at_ms as u64,
            next: writes as u32,
        },
    }))
}

impl ClaimStore for PgStore {
    fn load_claim<'a>(&'a self, id: &'a ClaimId, now_ms: u64) -> Read<'a, Option<ClaimLog>> {
        Box::pin(async move {
            let client = self.client().await?;
            let row = super::row(
                &client,
                &format!("SELECT {COLUMNS} FROM idem_claims WHERE tenant = $1 AND digest = $2"),
                &[&id.tenant, &&id.digest[..]],
            )
            .await?;
            match row {
                Some(row) => claim_log(id, &row, now_ms),
                None => Ok(None),
            }
        })
    }

    fn complete_claim(&self, head: &LogHead) -> Result<(), StoreError> {
        self.queue_completion(head)
    }

    fn sweep_claims(&self, now_ms: u64, limit: usize) -> Result<usize, StoreError> {
        self.runtime.block_on(async {
            let client = self.client().await?;
            let swept = super::run(
                &client,
                "DELETE FROM idem_claims WHERE ctid IN \
                     (SELECT ctid FROM idem_claims WHERE expires_at_ms <= $1 LIMIT $2)",
                &[&(now_ms as i64), &(limit as i64)],
            )
            .await?;
            Ok(swept as usize)
        })
    }
}
