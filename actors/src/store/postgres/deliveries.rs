//! Deliveries in PostgreSQL: one row per callback, with its log, its status, and its due time
//! while queued (the retry queue is the rows with a due time, by an index on it). Reads here;
//! the writes are made by the group commit (`batch`).

use idem_schemas::{DeliveryEvent, DeliveryRecord, DeliveryStatus};

use super::PgStore;
use crate::codec;
use crate::store::{status_number, DeliveryStore, Read, StatusCounts, StoreError, Timed};

/// A stored status number back into its status.
fn status(number: i16) -> Result<DeliveryStatus, StoreError> {
    DeliveryStatus::ALL
        .get(number as usize)
        .copied()
        .ok_or(StoreError::Malformed("idem_deliveries"))
}

/// A delivery's log as stored, decoded.
fn events(log: &[u8]) -> Result<Vec<DeliveryEvent>, StoreError> {
    codec::decode_entry(log).map_err(|_| StoreError::Malformed("idem_deliveries"))
}

impl DeliveryStore for PgStore {
    fn load_delivery<'a>(&'a self, id: &'a str) -> Read<'a, Option<Vec<DeliveryEvent>>> {
        Box::pin(async move {
            let client = self.client().await?;
            let row = super::row(
                &client,
                "SELECT log FROM idem_deliveries WHERE id = $1",
                &[&id],
            )
            .await?;
            row.map(|row| events(row.try_get(0)?)).transpose()
        })
    }

    /// Leases what is due: rows locked by another node's lease query are skipped, and a row
    /// whose lease is live is not due to anyone else; the token fences the attempt's record.
    fn due(&self, now_ms: u64, limit: usize) -> Read<'_, Vec<Timed>> {
        Box::pin(async move {
            let client = self.client().await?;
            let rows = super::rows(
                &client,
                "UPDATE idem_deliveries d SET lease_token = d.lease_token + 1, \
                     lease_until = clock_timestamp() + $3::float8 * interval '1 millisecond' \
                     WHERE d.id IN (SELECT id FROM idem_deliveries WHERE due_ms <= $1 \
                     AND (lease_until IS NULL OR lease_until < clock_timestamp()) \
                     ORDER BY due_ms LIMIT $2 FOR UPDATE SKIP LOCKED) \
                     RETURNING d.due_ms, d.id, d.lease_token",
                &[
                    &(now_ms as i64),
                    &(limit as i64),
                    &(self.lease().as_millis() as f64),
                ],
            )
            .await?;
            rows.iter()
                .map(|row| {
                    Ok(Timed {
                        at_ms: row.try_get::<_, i64>(0)? as u64,
                        id: row.try_get(1)?,
                        lease: Some(row.try_get::<_, i64>(2)? as u64),
                    })
                })
                .collect()
        })
    }

    fn leases_due(&self) -> bool {
        true
    }

    /// The due time is a column of the delivery's own row, moved with every write: it cannot
    /// go stale, and there is nothing to drop.
    fn drop_due<'a>(&'a self, _: &'a Timed) -> Read<'a, ()> {
        Box::pin(std::future::ready(Ok(())))
    }

    /// Moves the row's due time under the lease that woke it (another node's lease since
    /// leaves the row alone), and lets the lease go.
    fn move_due<'a>(&'a self, from: &'a Timed, to_ms: u64) -> Read<'a, ()> {
        Box::pin(async move {
            let client = self.client().await?;
            let lease = from.lease.map(|l| l as i64);
            super::run(
                &client,
                "UPDATE idem_deliveries SET due_ms = $2, lease_until = NULL \
                 WHERE id = $1 AND status = 0 AND due_ms IS NOT NULL \
                 AND ($3::bigint IS NULL OR lease_token = $3)",
                &[&from.id, &(to_ms as i64), &lease],
            )
            .await?;
            Ok(())
        })
    }

    fn list_deliveries<'a>(
        &'a self,
        tenant: &'a str,
        only: Option<DeliveryStatus>,
        after: Option<(DeliveryStatus, &'a str)>,
        limit: usize,
    ) -> Read<'a, Vec<(DeliveryStatus, String)>> {
        Box::pin(async move {
            let client = self.client().await?;
            let only = only.map(|s| status_number(s) as i16);
            let (after_status, after_id) = match after {
                Some((s, id)) => (status_number(s) as i16, id),
                None => (-1, ""),
            };
            let rows = super::rows(
                &client,
                "SELECT status, id FROM idem_deliveries \
                     WHERE tenant = $1 AND ($2::smallint IS NULL OR status = $2) \
                     AND (status, id) > ($3, $4) ORDER BY status, id LIMIT $5",
                &[&tenant, &only, &after_status, &after_id, &(limit as i64)],
            )
            .await?;
            rows.iter()
                .map(|row| Ok((status(row.try_get(0)?)?, row.try_get(1)?)))
                .collect()
        })
    }

    fn count_deliveries<'a>(
        &'a self,
        tenant: &'a str,
        status: DeliveryStatus,
        cap: u64,
    ) -> Read<'a, u64> {
        Box::pin(async move {
            let client = self.client().await?;
            let row = super::row(
                &client,
                "SELECT count(*) FROM (SELECT 1 FROM idem_deliveries \
                 WHERE tenant = $1 AND status = $2 LIMIT $3) AS counted",
                &[&tenant, &(status_number(status) as i16), &(cap as i64)],
            )
            .await?;
            let counted: i64 = row.map_or(Ok(0), |row| row.try_get(0))?;
            Ok(counted as u64)
        })
    }

    fn expire_deliveries(
        &self,
        now_ms: u64,
        requeue_ms: u64,
        limit: usize,
    ) -> Result<Vec<DeliveryStatus>, StoreError> {
        self.runtime.block_on(async {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            let (now, limit) = (now_ms as i64, limit as i64);
            // Still queued at the end of its retention: looked at again later.
            super::run(
                &tx,
                "UPDATE idem_deliveries SET expires_at_ms = $3 WHERE id IN \
                 (SELECT id FROM idem_deliveries WHERE expires_at_ms < $1 AND status = 0 \
                 LIMIT $2)",
                &[&now, &limit, &(requeue_ms as i64)],
            )
            .await?;
            let rows = super::rows(
                &tx,
                "DELETE FROM idem_deliveries WHERE id IN \
                     (SELECT id FROM idem_deliveries WHERE expires_at_ms < $1 AND status <> 0 \
                     LIMIT $2) RETURNING status",
                &[&now, &limit],
            )
            .await?;
            tx.commit().await?;
            rows.iter().map(|row| status(row.try_get(0)?)).collect()
        })
    }

    fn queued(&self) -> Read<'_, u64> {
        Box::pin(async move {
            let client = self.client().await?;
            let row = super::row(
                &client,
                "SELECT count(*) FROM idem_deliveries WHERE status = 0",
                &[],
            )
            .await?;
            let row = row.ok_or(StoreError::Malformed("idem_deliveries"))?;
            Ok(row.try_get::<_, i64>(0)? as u64)
        })
    }

    fn oldest_queued(&self) -> Read<'_, Option<DeliveryRecord>> {
        Box::pin(async move {
            let client = self.client().await?;
            let row = super::row(
                &client,
                "SELECT log FROM idem_deliveries WHERE due_ms IS NOT NULL \
                     ORDER BY due_ms LIMIT 1",
                &[],
            )
            .await?;
            let Some(row) = row else {
                return Ok(None);
            };
            Ok(match events(row.try_get(0)?)?.into_iter().next() {
                Some(DeliveryEvent::Created(record)) => Some(record),
                _ => None,
            })
        })
    }

    fn count_by_status(&self) -> Read<'_, StatusCounts> {
        Box::pin(async move {
            let client = self.client().await?;
            let rows = super::rows(
                &client,
                "SELECT status, count(*) FROM idem_deliveries GROUP BY status",
                &[],
            )
            .await?;
            let mut counts = StatusCounts::default();
            for row in rows {
                let n = status_number(status(row.try_get(0)?)?) as usize;
                counts[n] = row.try_get::<_, i64>(1)? as u64;
            }
            Ok(counts)
        })
    }
}
