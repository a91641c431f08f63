//! Decisions kept for lookup in PostgreSQL: one row per decision in `idem_decisions`, with its
//! record, its subject's digest and the end of its retention. A subject's decisions, newest
//! first, are one scan of the `(tenant, subject, id)` index backwards, and a tenant's of the
//! primary key `(tenant, id)`: ids are time-ordered.
//! Written by the group commit (`batch`), with the claim record that makes the decision.

use idem_schemas::DecisionRecord;
use tokio_postgres::Row;

use super::PgStore;
use crate::codec;
use crate::store::{first_decision_id_at, subject_bytes, DecisionStore, Read, StoreError};

fn record(row: &Row) -> Result<DecisionRecord, StoreError> {
    let bytes: &[u8] = row.try_get(0)?;
    codec::decode(bytes).map_err(|_| StoreError::Malformed("idem_decisions"))
}

impl DecisionStore for PgStore {
    fn load_decision<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
        now_ms: u64,
    ) -> Read<'a, Option<DecisionRecord>> {
        Box::pin(async move {
            let client = self.client().await?;
            let row = super::row(
                &client,
                "SELECT record FROM idem_decisions \
                 WHERE tenant = $1 AND id = $2 AND expires_at_ms > $3",
                &[&tenant, &id, &(now_ms as i64)],
            )
            .await?;
            row.as_ref().map(record).transpose()
        })
    }

    fn decisions_about<'a>(
        &'a self,
        tenant: &'a str,
        subject_hash: Option<&'a str>,
        signal_type: Option<&'a str>,
        before: Option<&'a str>,
        limit: usize,
        now_ms: u64,
    ) -> Read<'a, Vec<DecisionRecord>> {
        Box::pin(async move {
            let client = self.client().await?;
            let (now, limit) = (now_ms as i64, limit as i64);
            let rows = match subject_hash.map(subject_bytes) {
                Some(subject) => {
                    super::rows(
                        &client,
                        "SELECT record FROM idem_decisions \
                         WHERE tenant = $1 AND subject = $2 AND expires_at_ms > $3 \
                         AND ($4::text IS NULL OR id < $4) \
                         AND ($6::text IS NULL OR signal_type = $6) \
                         ORDER BY id DESC LIMIT $5",
                        &[&tenant, &subject, &now, &before, &limit, &signal_type],
                    )
                    .await?
                }
                // The tenant's newest: one backward scan of the primary key.
                None => {
                    super::rows(
                        &client,
                        "SELECT record FROM idem_decisions \
                         WHERE tenant = $1 AND expires_at_ms > $2 \
                         AND ($3::text IS NULL OR id < $3) \
                         AND ($5::text IS NULL OR signal_type = $5) \
                         ORDER BY id DESC LIMIT $4",
                        &[&tenant, &now, &before, &limit, &signal_type],
                    )
                    .await?
                }
            };
            rows.iter().map(record).collect()
        })
    }

    fn count_decisions<'a>(
        &'a self,
        tenant: &'a str,
        subject_hash: &'a str,
        signal_type: Option<&'a str>,
        since_ms: u64,
        limit: u64,
        now_ms: u64,
    ) -> Read<'a, u64> {
        Box::pin(async move {
            let client = self.client().await?;
            // One range of the `(tenant, subject, id)` index from `since_ms` on, each row's
            // type and expiry read from its heap tuple, up to `limit` rows.
            let since = first_decision_id_at(since_ms);
            let row = super::row(
                &client,
                "SELECT count(*) FROM (SELECT 1 FROM idem_decisions \
                 WHERE tenant = $1 AND subject = $2 AND id >= $3 AND expires_at_ms > $4 \
                 AND ($5::text IS NULL OR signal_type = $5) LIMIT $6) AS counted",
                &[
                    &tenant,
                    &subject_bytes(subject_hash),
                    &since,
                    &(now_ms as i64),
                    &signal_type,
                    &(limit.min(i64::MAX as u64) as i64),
                ],
            )
            .await?;
            let counted: i64 = match row {
                Some(row) => row.try_get(0)?,
                None => 0,
            };
            Ok(counted.max(0) as u64)
        })
    }

    fn expire_decisions(&self, now_ms: u64, limit: usize) -> Result<usize, StoreError> {
        self.runtime.block_on(async {
            let client = self.client().await?;
            let expired = super::run(
                &client,
                "DELETE FROM idem_decisions WHERE ctid IN \
                 (SELECT ctid FROM idem_decisions WHERE expires_at_ms <= $1 LIMIT $2)",
                &[&(now_ms as i64), &(limit as i64)],
            )
            .await?;
            Ok(expired as usize)
        })
    }
}
