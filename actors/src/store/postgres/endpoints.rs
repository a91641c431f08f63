//! Endpoint health in PostgreSQL: one row per endpoint in `idem_endpoints`. A change is made in
//! a transaction of its own that locks the row, applies the breaker's transition by the
//! database's clock and commits: nodes serialise on the row, so exactly one wins a probe, and
//! the change is durable when it is answered. Only failures, probes and the first live answer
//! after them are written at once (a healthy endpoint's answers are told once a refresh), and
//! never inside the group commit, so no claim's transaction waits on an endpoint row.

use std::collections::HashMap;

use super::PgStore;
use crate::breaker::{EndpointEvent, EndpointHealth, EndpointId, Noted};
use crate::codec;
use crate::settings::DeliverySettings;
use crate::store::{EndpointStore, Read, StoreError};

impl EndpointStore for PgStore {
    fn note_endpoint<'a>(
        &'a self,
        tenant: &'a str,
        url: &'a str,
        event: EndpointEvent,
        settings: &'a DeliverySettings,
    ) -> Read<'a, Noted> {
        Box::pin(async move {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            let fresh = codec::encode(&EndpointHealth::default())?;
            super::run(
                &tx,
                "INSERT INTO idem_endpoints (tenant, url, health) VALUES ($1, $2, $3) \
                 ON CONFLICT DO NOTHING",
                &[&tenant, &url, &fresh],
            )
            .await?;
            let row = super::row(
                &tx,
                "SELECT health, (extract(epoch FROM clock_timestamp()) * 1000)::int8 \
                 FROM idem_endpoints WHERE tenant = $1 AND url = $2 FOR UPDATE",
                &[&tenant, &url],
            )
            .await?
            .ok_or(StoreError::Malformed("idem_endpoints"))?;
            let health: EndpointHealth = codec::decode(row.try_get(0)?)?;
            let now_ms = row.try_get::<_, i64>(1)? as u64;
            let noted = match health.apply(event, now_ms, settings) {
                None => Noted {
                    health,
                    changed: false,
                    was: health.circuit,
                },
                Some(next) => {
                    super::run(
                        &tx,
                        "UPDATE idem_endpoints SET health = $3 WHERE tenant = $1 AND url = $2",
                        &[&tenant, &url, &codec::encode(&next)?],
                    )
                    .await?;
                    Noted {
                        health: next,
                        changed: true,
                        was: health.circuit,
                    }
                }
            };
            tx.commit().await?;
            Ok(noted)
        })
    }

    fn endpoints<'a>(
        &'a self,
        tenant: Option<&'a str>,
    ) -> Read<'a, Vec<(EndpointId, EndpointHealth)>> {
        Box::pin(async move {
            let client = self.client().await?;
            let rows = super::rows(
                &client,
                "SELECT tenant, url, health FROM idem_endpoints \
                 WHERE $1::text IS NULL OR tenant = $1 ORDER BY tenant, url",
                &[&tenant],
            )
            .await?;
            rows.iter()
                .map(|row| {
                    let id = EndpointId {
                        tenant: row.try_get(0)?,
                        url: row.try_get(1)?,
                    };
                    Ok((id, codec::decode(row.try_get(2)?)?))
                })
                .collect()
        })
    }

    fn queued_by_endpoint<'a>(&'a self, tenant: &'a str) -> Read<'a, HashMap<String, u64>> {
        Box::pin(async move {
            let client = self.client().await?;
            // Read from the queued index alone (`idem_deliveries_queued`).
            let rows = super::rows(
                &client,
                "SELECT url, count(*) FROM idem_deliveries WHERE tenant = $1 AND status = 0 \
                 GROUP BY url",
                &[&tenant],
            )
            .await?;
            rows.iter()
                .map(|row| Ok((row.try_get(0)?, row.try_get::<_, i64>(1)? as u64)))
                .collect()
        })
    }

    fn queued_to<'a>(
        &'a self,
        tenant: &'a str,
        url: &'a str,
        limit: usize,
    ) -> Read<'a, Vec<String>> {
        Box::pin(async move {
            let client = self.client().await?;
            let rows = super::rows(
                &client,
                "SELECT id FROM idem_deliveries WHERE tenant = $1 AND url = $2 AND status = 0 \
                 ORDER BY id LIMIT $3",
                &[&tenant, &url, &(limit as i64)],
            )
            .await?;
            rows.iter().map(|row| Ok(row.try_get(0)?)).collect()
        })
    }

    fn live_nodes(&self) -> Read<'_, usize> {
        Box::pin(async move {
            let client = self.client().await?;
            let row = super::row(
                &client,
                "SELECT count(*) FROM idem_nodes \
                 WHERE heartbeat_at > clock_timestamp() - $1::float8 * interval '1 millisecond'",
                &[&(self.node_timeout().as_millis() as f64)],
            )
            .await?
            .ok_or(StoreError::Malformed("idem_nodes"))?;
            Ok(row.try_get::<_, i64>(0)? as usize)
        })
    }
}
