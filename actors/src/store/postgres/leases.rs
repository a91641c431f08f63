//! Leases in PostgreSQL: one row per job in `idem_leases`, naming the node that holds it and
//! its fencing token. One statement takes or keeps a lease: it stays with a holder whose
//! heartbeat in `idem_nodes` is fresh by the database's clock, and passes (the token raised) to
//! the asking node once it is not, so two nodes never both hold it while both are alive.

use super::PgStore;
use crate::store::{LeaseStore, Read, StoreError};

impl LeaseStore for PgStore {
    fn lease<'a>(&'a self, job: &'a str) -> Read<'a, Option<u64>> {
        Box::pin(async move {
            let client = self.client().await?;
            let epoch = self.node.epoch as i64;
            let row = super::row(
                &client,
                "INSERT INTO idem_leases AS l (job, holder, token) VALUES ($1, $2, 1) \
                 ON CONFLICT (job) DO UPDATE SET holder = EXCLUDED.holder, \
                   token = CASE WHEN l.holder = EXCLUDED.holder THEN l.token ELSE l.token + 1 END \
                 WHERE l.holder = EXCLUDED.holder OR NOT EXISTS ( \
                   SELECT 1 FROM idem_nodes n WHERE n.epoch = l.holder \
                   AND n.heartbeat_at > clock_timestamp() - $3::float8 * interval '1 millisecond') \
                 RETURNING token",
                &[&job, &epoch, &(self.node_timeout().as_millis() as f64)],
            )
            .await?;
            match row {
                None => Ok(None),
                Some(row) => {
                    let token: i64 = row.try_get(0)?;
                    u64::try_from(token)
                        .map(Some)
                        .map_err(|_| StoreError::Malformed("idem_leases"))
                }
            }
        })
    }
}
