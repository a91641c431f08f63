//! Subscriptions in PostgreSQL: one row per (tenant, source) in `idem_ssf_subscriptions`, its
//! record beside its version. A change is an `UPDATE` over the version it was made from (a new
//! record an `INSERT` that a taken key refuses), committed before it is answered, so every node
//! reads the same stream id and two changes made from one version cannot both be written.

use idem_schemas::Subscription;

use super::PgStore;
use crate::codec;
use crate::store::{Read, SubscriptionStore};

impl SubscriptionStore for PgStore {
    fn subscription<'a>(
        &'a self,
        tenant: &'a str,
        source: &'a str,
    ) -> Read<'a, Option<Subscription>> {
        Box::pin(async move {
            let client = self.client().await?;
            let row = super::row(
                &client,
                "SELECT record FROM idem_ssf_subscriptions WHERE tenant = $1 AND source = $2",
                &[&tenant, &source],
            )
            .await?;
            row.map(|row| Ok(codec::decode(row.try_get(0)?)?))
                .transpose()
        })
    }

    fn put_subscription<'a>(
        &'a self,
        tenant: &'a str,
        source: &'a str,
        record: &'a Subscription,
    ) -> Read<'a, bool> {
        Box::pin(async move {
            let client = self.client().await?;
            let bytes = codec::encode(record)?;
            let version = record.version as i64;
            let written = if record.version == 1 {
                super::run(
                    &client,
                    "INSERT INTO idem_ssf_subscriptions (tenant, source, version, record) \
                     VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                    &[&tenant, &source, &version, &bytes],
                )
                .await?
            } else {
                super::run(
                    &client,
                    "UPDATE idem_ssf_subscriptions SET version = $3, record = $4 \
                     WHERE tenant = $1 AND source = $2 AND version = $5",
                    &[&tenant, &source, &version, &bytes, &(version - 1)],
                )
                .await?
            };
            Ok(written == 1)
        })
    }
}
