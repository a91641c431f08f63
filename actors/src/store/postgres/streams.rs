//! Shared Signals streams in PostgreSQL: one row per stream in `idem_ssf_streams`, its record
//! beside its version. A change is an `UPDATE` over the version it was made from (a new stream
//! an `INSERT` that a taken id refuses), committed before it is answered, so every node reads
//! the same streams and two changes made from one version cannot both be written. A new stream
//! is counted against its receiver's limit and inserted in one transaction holding an advisory
//! lock on that receiver: the database decides between the nodes, and of creates racing on
//! any of them no more than the limit are made.

use idem_schemas::Stream;

use super::PgStore;
use crate::codec;
use crate::store::{Created, Read, StoreError, StreamStore, STREAMS_PER_RECEIVER};

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
            if stream.version == 1 {
                drop(client);
                return Ok(self.create_stream(tenant, stream).await? == Created::Made);
            }
            let written = super::run(
                &client,
                "UPDATE idem_ssf_streams SET version = $3, record = $4 \
                 WHERE tenant = $1 AND id = $2 AND version = $5",
                &[&tenant, &stream.id, &version, &record, &(version - 1)],
            )
            .await?;
            Ok(written == 1)
        })
    }

    fn create_stream<'a>(&'a self, tenant: &'a str, stream: &'a Stream) -> Read<'a, Created> {
        Box::pin(async move {
            if stream.version != 1 {
                return Ok(Created::Taken);
            }
            let record = codec::encode(stream)?;
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            // Every create of this receiver's, on every node, waits here for the one before
            // it to commit, and then counts what that one wrote.
            let receiver = format!(
                "idem_ssf_streams {} {tenant} {}",
                tenant.len(),
                stream.receiver
            );
            super::run(
                &tx,
                "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                &[&receiver],
            )
            .await?;
            let rows = super::rows(
                &tx,
                "SELECT record FROM idem_ssf_streams WHERE tenant = $1",
                &[&tenant],
            )
            .await?;
            let mut mine = 0;
            for row in &rows {
                let stored: Stream = codec::decode(row.try_get(0)?)?;
                mine += usize::from(stored.receiver == stream.receiver);
            }
            if mine >= STREAMS_PER_RECEIVER {
                return Ok(Created::Full);
            }
            let inserted = super::run(
                &tx,
                "INSERT INTO idem_ssf_streams (tenant, id, version, record) \
                 VALUES ($1, $2, 1, $3) ON CONFLICT DO NOTHING",
                &[&tenant, &stream.id, &record],
            )
            .await?;
            tx.commit().await?;
            Ok(if inserted == 1 {
                Created::Made
            } else {
                Created::Taken
            })
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
