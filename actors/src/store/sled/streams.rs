//! Shared Signals streams in sled: the tree `ssf_streams` holds each stream under
//! `tenant length ‖ tenant ‖ id`. A change is a compare-and-swap of the bytes it was made from,
//! made durable before it is answered. A new stream is counted against its receiver's limit and
//! written under one lock of the store's: the data directory is this process's alone, so that
//! lock decides between every create there is, and the count is read from the streams
//! themselves, so nothing else is kept that could drift from them.

use idem_schemas::Stream;

use super::keys::tenant_prefix;
use super::SledStore;
use crate::codec;
use crate::store::{Created, Read, Store, StoreError, StreamStore, Unit, STREAMS_PER_RECEIVER};

fn stream_key(tenant: &str, id: &str) -> Vec<u8> {
    let mut key = tenant_prefix(tenant);
    key.extend_from_slice(id.as_bytes());
    key
}

impl SledStore {
    /// Swaps `stream` in over the version before it; whether it was.
    fn swap_stream(&self, tenant: &str, stream: &Stream) -> Result<bool, StoreError> {
        self.commits.usable()?;
        let key = stream_key(tenant, &stream.id);
        let old = self.streams.get(&key)?;
        let current = old
            .as_ref()
            .map(|bytes| codec::decode::<Stream>(bytes))
            .transpose()?;
        if current.map_or(0, |s| s.version) + 1 != stream.version {
            return Ok(false);
        }
        let new = codec::encode(stream)?;
        Ok(self
            .streams
            .compare_and_swap(&key, old.as_ref(), Some(new))?
            .is_ok())
    }

    /// Makes the new `stream` unless its id is taken or its receiver's streams are full.
    fn make_stream(&self, tenant: &str, stream: &Stream) -> Result<Created, StoreError> {
        if stream.version != 1 {
            return Ok(Created::Taken);
        }
        let _alone = self
            .creating_streams
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mine = self
            .read_streams(tenant)?
            .iter()
            .filter(|s| s.receiver == stream.receiver)
            .count();
        if mine >= STREAMS_PER_RECEIVER {
            return Ok(Created::Full);
        }
        let key = stream_key(tenant, &stream.id);
        let new = codec::encode(stream)?;
        Ok(
            match self
                .streams
                .compare_and_swap(&key, None::<&[u8]>, Some(new))?
            {
                Ok(()) => Created::Made,
                Err(_) => Created::Taken,
            },
        )
    }

    fn read_streams(&self, tenant: &str) -> Result<Vec<Stream>, StoreError> {
        self.commits.usable()?;
        self.streams
            .scan_prefix(tenant_prefix(tenant))
            .values()
            .map(|value| Ok(codec::decode(&value?)?))
            .collect()
    }

    fn read_stream(&self, tenant: &str, id: &str) -> Result<Option<Stream>, StoreError> {
        self.commits.usable()?;
        let value = self.streams.get(stream_key(tenant, id))?;
        Ok(value.map(|bytes| codec::decode(&bytes)).transpose()?)
    }

    /// Makes every write so far durable.
    async fn make_durable(&self) -> Result<(), StoreError> {
        let store: &dyn Store = self;
        store.commit(Unit::new()).await.map(drop)
    }
}

impl StreamStore for SledStore {
    fn stream<'a>(&'a self, tenant: &'a str, id: &'a str) -> Read<'a, Option<Stream>> {
        Box::pin(std::future::ready(self.read_stream(tenant, id)))
    }

    fn streams<'a>(&'a self, tenant: &'a str) -> Read<'a, Vec<Stream>> {
        Box::pin(std::future::ready(self.read_streams(tenant)))
    }

    fn put_stream<'a>(&'a self, tenant: &'a str, stream: &'a Stream) -> Read<'a, bool> {
        if stream.version == 1 {
            return Box::pin(async move {
                Ok(self.create_stream(tenant, stream).await? == Created::Made)
            });
        }
        Box::pin(async move {
            let written = self.swap_stream(tenant, stream)?;
            if written {
                self.make_durable().await?;
            }
            Ok(written)
        })
    }

    fn create_stream<'a>(&'a self, tenant: &'a str, stream: &'a Stream) -> Read<'a, Created> {
        Box::pin(async move {
            self.commits.usable()?;
            let created = self.make_stream(tenant, stream)?;
            if created == Created::Made {
                self.make_durable().await?;
            }
            Ok(created)
        })
    }

    fn delete_stream<'a>(&'a self, tenant: &'a str, id: &'a str) -> Read<'a, bool> {
        Box::pin(async move {
            self.commits.usable()?;
            let removed = self.streams.remove(stream_key(tenant, id))?.is_some();
            if removed {
                self.make_durable().await?;
            }
            Ok(removed)
        })
    }
}
