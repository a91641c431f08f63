//! Shared Signals streams in PostgreSQL: one row per stream in `idem_ssf_streams`, its record
//! beside its version. A change is an `UPDATE` over the version it was made from (a new stream
//! an `INSERT` that a taken id refuses), committed before it is answered, so every node reads
//! the same streams and two changes made from one version cannot both be written.

use idem_schemas::Stream;

use super::PgStore;
use crate::codec;
use crate::store::{Read, StoreError, StreamStore};

impl StreamStore for PgStore {
    fn stream<'a>(&'a self, tenant: &'a str, id: &'a str) -> Read<'a, Option<Stream>> {
        Box::pin(async move {
            let client = self.client().await?;
            let row = super::row(
                &client,
                "SELECT record FROM idem_ssf_streams WHERE tenant = $1 AND id = $2",
                &[&tenant, &id],
            )
            .await?;
            row.map(|row| Ok(codec::decode(row.try_get(0)?)?))
                .transpose()
        })
    }

    fn streams<'a>(&'a self, tenant: &'a str) -> Read<'a, Vec<Stream>> {
        Box::pin(async move {
            let client = self.client().await?;
            let rows = super::rows(
                &client,
                "SELECT record FROM idem_ssf_streams WHERE tenant = $1 ORDER BY id",
                &[&tenant],
            )
            .await?;
            rows.iter()
                .map(|row| Ok(codec::decode(row.try_get(0)?)?))
                .collect::<Result<_, StoreError>>()
        })
    }

    fn put_stream<'a>(&'a self, tenant: &'a str, stream: &'a Stream) -> Read<'a, bool> {
        Box::pin(async move {
            let client = self.client().await?;
            let record = codec::encode(stream)?;
            let version = stream.version as i64;
            let written = if stream.version == 1 {
                super::run(
                    &client,
                    "INSERT INTO idem_ssf_streams (tenant, id, version, record) \
                     VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                    &[&tenant, &stream.id, &version, &record],
                )
                .await?
            } else {
                super::run(
                    &client,
                    "UPDATE idem_ssf_streams SET version = $3, record = $4 \
                     WHERE tenant = $1 AND id = $2 AND version = $5",
                    &[&tenant, &stream.id, &version, &record, &(version - 1)],
                )
                .await?
            };
            Ok(written == 1)
        })
    }

    fn delete_stream<'a>(&'a self, tenant: &'a str, id: &'a str) -> Read<'a, bool> {
        Box::pin(async move {
            let client = self.client().await?;
            let removed = super::run(
                &client,
                "DELETE FROM idem_ssf_streams WHERE tenant = $1 AND id = $2",
                &[&tenant, &id],
            )
            .await?;
            Ok(removed == 1)
        })
    }
}
