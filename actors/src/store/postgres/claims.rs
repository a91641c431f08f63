//! Claims in PostgreSQL: one row per key, holding its current generation. Reads here; the
//! writes (start, append, complete) are made by the group commit (`batch`), which decides them
//! in the database: a start inserts the row or replaces an expired one, and an append updates it
//! only where the generation and the count of writes are the ones the writer holds. Loads are
//! batched like writes: the loads asked for while one query runs go to the database together as
//! the next query, so a burst of new keys costs a few round trips, not one each.

use std::collections::HashMap;
use std::sync::Arc;

use deadpool_postgres::Pool;
use idem_schemas::ClaimEvent;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio_postgres::Row;

use super::PgStore;
use crate::codec;
use crate::store::{rule, ClaimId, ClaimLog, ClaimStore, LogHead, Read, StoreError};

/// The columns a claim is read from, in [`claim_log`]'s order.
pub(super) const COLUMNS: &str = "generation, expires_at_ms, log, writes, completed";

/// A claim row (selected with [`COLUMNS`]) as the log of `id`, if it holds the key at `now_ms`
/// (claims in flight up to `in_flight_timeout_ms`).
pub(super) fn claim_log(
    id: &ClaimId,
    row: &Row,
    now_ms: u64,
    in_flight_timeout_ms: u64,
) -> Result<Option<ClaimLog>, StoreError> {
    let generation: i64 = row.try_get(0)?;
    let expires_at_ms: i64 = row.try_get(1)?;
    let log: &[u8] = row.try_get(2)?;
    let writes: i32 = row.try_get(3)?;
    let completed: bool = row.try_get(4)?;
    // A replaceable claim is no claim: the key is free again. A generation is the time it was
    // claimed (a take-over adds one).
    let current = rule::Current {
        generation: generation as u64,
        expires_at_ms: expires_at_ms as u64,
        writes: writes as u32,
        completed,
        claimed_at_ms: generation as u64,
    };
    if rule::replaceable(&current, now_ms, in_flight_timeout_ms) {
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

/// A load waiting for its batch: the key, the time it is read at, and where its log goes.
pub(super) type Load = (
    ClaimId,
    u64,
    oneshot::Sender<Result<Option<ClaimLog>, StoreError>>,
);

/// The most keys one load query reads.
const MAX_LOADS: usize = 512;

/// How many load queries run at once.
const LOADS_IN_FLIGHT: usize = 2;

/// The load batcher, for claims in flight up to `in_flight_timeout_ms`: runs until every
/// sender is gone.
pub(super) async fn run_loads(
    pool: Pool,
    mut loads: mpsc::UnboundedReceiver<Load>,
    in_flight_timeout_ms: u64,
) {
    let in_flight = Arc::new(Semaphore::new(LOADS_IN_FLIGHT));
    while let Some((permit, batch)) = super::next_batch(&mut loads, &in_flight, MAX_LOADS).await {
        let pool = pool.clone();
        tokio::spawn(async move {
            let rows = load_rows(&pool, &batch).await;
            drop(permit);
            match rows {
                Ok(mut rows) => {
                    for (id, now_ms, reply) in batch {
                        let log = match rows.remove(&(id.tenant.clone(), id.digest.to_vec())) {
                            Some(row) => claim_log(&id, &row, now_ms, in_flight_timeout_ms),
                            None => Ok(None),
                        };
                        let _ = reply.send(log);
                    }
                }
                Err(e) => {
                    for (_, _, reply) in batch {
                        let _ = reply.send(Err(e.clone()));
                    }
                }
            }
        });
    }
}

/// The rows of the keys of `batch` that exist, by key.
async fn load_rows(
    pool: &Pool,
    batch: &[Load],
) -> Result<HashMap<(String, Vec<u8>), Row>, StoreError> {
    let tenants: Vec<&str> = batch.iter().map(|(id, _, _)| id.tenant.as_str()).collect();
    let digests: Vec<&[u8]> = batch.iter().map(|(id, _, _)| &id.digest[..]).collect();
    let client = pool.get().await?;
    let rows = super::rows(
        &client,
        &format!(
            "SELECT {COLUMNS}, c.tenant, c.digest FROM idem_claims c \
             JOIN unnest($1::text[], $2::bytea[]) AS u(tenant, digest) \
             ON c.tenant = u.tenant AND c.digest = u.digest"
        ),
        &[&tenants, &digests],
    )
    .await?;
    rows.into_iter()
        .map(|row| Ok(((row.try_get(5)?, row.try_get(6)?), row)))
        .collect()
}

impl ClaimStore for PgStore {
    fn load_claim<'a>(&'a self, id: &'a ClaimId, now_ms: u64) -> Read<'a, Option<ClaimLog>> {
        Box::pin(async move {
            let (reply, log) = oneshot::channel();
            self.loads
                .send((id.clone(), now_ms, reply))
                .map_err(|_| StoreError::Stopped)?;
            log.await.map_err(|_| StoreError::Stopped)?
        })
    }

    fn complete_claim(&self, head: &LogHead) -> Result<(), StoreError> {
        self.queue_completion(head)
    }

    fn sweep_claims(&self, now_ms: u64, limit: usize) -> Result<usize, StoreError> {
        self.runtime.block_on(async {
            let client = self.client().await?;
            // Up to `in_flight_timeout` before now: a row that expired by then is replaceable,
            // completed or not. One that expired since may still hold its key.
            let before =
                now_ms.saturating_sub(self.node.settings.idempotency.in_flight_timeout_ms());
            let swept = super::run(
                &client,
                "DELETE FROM idem_claims WHERE ctid IN \
                     (SELECT ctid FROM idem_claims WHERE expires_at_ms <= $1 LIMIT $2)",
                &[&(before as i64), &(limit as i64)],
            )
            .await?;
            Ok(swept as usize)
        })
    }
}
