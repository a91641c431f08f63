//! The streams handle: a tenant's Shared Signals streams as its transmitter keeps them (each
//! written over its version, durable when written), the SETs it tells a stream of itself, and a
//! poll stream's waiting SETs, handed out and answered. Receivers' subjects are kept as keyed
//! digests, made here.

use std::sync::Arc;

use idem_schemas::stored::STREAM_SCHEME;
use idem_schemas::timefmt::now_ms;
use idem_schemas::{DeliveryStatus, Stream, StreamMethod, StreamState, Subscription};

use crate::delivery::RedeliverError;
use crate::delivery::{queued_log, record_of, DeliveryActors, DeliveryError, PollAnswer, Sent};
use crate::digest::Digester;
use crate::metrics::Metric;
use crate::seal::Sealer;
use crate::set::{self, MakeSetError, SetIssuer};
use crate::settings::Settings;
use crate::store::{Created, Store, StoreError, Unit};
use crate::stream_event::{self, StreamEvent};
use crate::supervise::RegistryError;

/// How many of a stream's queued SETs one read takes: a poll stream's disabling drops at most
/// these at once, a push stream's releases them, a walk sends them a round.
pub const DROPPED_AT_ONCE: usize = 1000;

/// Why a stream's SETs could not be made, read or answered.
#[derive(Debug, thiserror::Error)]
pub enum StreamsError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A delivery could not be read.
    #[error(transparent)]
    Delivery(#[from] DeliveryError),
    /// A delivery's actor could not be reached.
    #[error(transparent)]
    Actors(#[from] RegistryError),
    /// A SET could not be made.
    #[error(transparent)]
    Set(#[from] MakeSetError),
}

/// The streams handle: cheap to clone.
#[derive(Clone)]
pub struct Streams {
    store: Arc<dyn Store>,
    deliveries: Arc<DeliveryActors>,
    digester: Digester,
    sealer: Arc<Sealer>,
    settings: Arc<Settings>,
}

impl Streams {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        deliveries: Arc<DeliveryActors>,
        (digester, sealer): (Digester, Arc<Sealer>),
        settings: Arc<Settings>,
    ) -> Self {
        Streams {
            store,
            deliveries,
            digester,
            sealer,
            settings,
        }
    }

    /// `tenant`'s stream `id`, if it exists.
    pub async fn get(&self, tenant: &str, id: &str) -> Result<Option<Stream>, StoreError> {
        self.store.stream(tenant, id).await
    }

    /// `tenant`'s streams, by id.
    pub async fn list(&self, tenant: &str) -> Result<Vec<Stream>, StoreError> {
        self.store.streams(tenant).await
    }

    /// Writes `stream` over the version before it (a new one at version 1); whether it was
    /// written, durably.
    pub async fn put(&self, tenant: &str, stream: &Stream) -> Result<bool, StoreError> {
        self.store.put_stream(tenant, stream).await
    }

    /// Makes the new `stream` (at version 1), durably, unless its id is taken or its receiver
    /// has [`crate::store::STREAMS_PER_RECEIVER`] streams already.
    pub async fn create(&self, tenant: &str, stream: &Stream) -> Result<Created, StoreError> {
        self.store.create_stream(tenant, stream).await
    }

    /// Removes `tenant`'s stream `id`, durably; whether it was there.
    pub async fn delete(&self, tenant: &str, id: &str) -> Result<bool, StoreError> {
        self.store.delete_stream(tenant, id).await
    }

    /// The record of the stream idem made for `tenant`'s source `source`, if any.
    pub async fn subscription(
        &self,
        tenant: &str,
        source: &str,
    ) -> Result<Option<Subscription>, StoreError> {
        self.store.subscription(tenant, source).await
    }

    /// Writes `record` over the version before it (a new one at version 1); whether it was
    /// written, durably.
    pub async fn put_subscription(
        &self,
        tenant: &str,
        source: &str,
        record: &Subscription,
    ) -> Result<bool, StoreError> {
        self.store.put_subscription(tenant, source, record).await
    }

    /// The keyed digest of `subject` (as a signal names it) that a stream keeps.
    pub fn subject_digest(&self, tenant: &str, subject: &str) -> [u8; 32] {
        self.digester.subject_bytes(tenant, subject)
    }

    /// What seals SETs and push credentials at rest.
    pub fn sealer(&self) -> &Arc<Sealer> {
        &self.sealer
    }

    /// Tells `tenant`'s stream `stream_id` (whose receiver's audience is `audience`) of
    /// `event` by a SET of `transmitter`'s, queued, due at once, and durable before this
    /// returns; its delivery id.
    pub async fn tell(
        &self,
        tenant: &str,
        transmitter: &SetIssuer,
        audience: &str,
        stream_id: &str,
        event: &StreamEvent,
    ) -> Result<String, StreamsError> {
        let now = now_ms();
        let id = format!("msg_{}", uuid::Uuid::now_v7().simple());
        let planned = stream_event::set(
            transmitter,
            &self.sealer,
            audience,
            stream_id,
            event,
            id.clone(),
            now,
        )?;
        // Of no decision: its record's decision id is empty.
        let record = record_of(tenant, ("", None), &planned, now, &self.settings);
        Metric::Moved {
            from: None,
            to: Some(DeliveryStatus::Queued),
        }
        .count();
        let unit = Unit::new()
            .keep_set_keys(set::key_of(&planned).into_iter().collect())
            .write_deliveries(vec![queued_log(record)]);
        self.store.commit(unit).await?;
        Ok(id)
    }

    /// The SETs waiting in `tenant`'s poll stream, oldest first, at most `limit`, each as
    /// (`jti`, token), and whether more wait. While the stream is paused or disabled none is
    /// handed out, its events about itself neither.
    pub async fn waiting(
        &self,
        tenant: &str,
        stream: &Stream,
        limit: usize,
    ) -> Result<(Vec<(String, Vec<u8>)>, bool), StreamsError> {
        if stream.state != StreamState::Enabled {
            return Ok((Vec::new(), false));
        }
        let url = format!("{STREAM_SCHEME}{}", stream.id);
        let ids = self.store.queued_to(tenant, &url, limit + 1).await?;
        let more = ids.len() > limit;
        let mut sets = Vec::with_capacity(limit.min(ids.len()));
        for id in ids.into_iter().take(limit) {
            let Some(delivery) = self.deliveries.load(&id).await? else {
                continue;
            };
            let record = &delivery.record;
            // Gone meanwhile (answered, or dead): its key is erased with its end.
            let Some(key) = self.store.set_key(&id).await? else {
                continue;
            };
            match set::open(&self.sealer, &id, &key, &record.body) {
                Ok(token) => sets.push((id, token)),
                Err(e) => {
                    tracing::error!(delivery = %id, error = %e, "a waiting SET does not open")
                }
            }
        }
        Ok((sets, more))
    }

    /// Gives `answer` to `tenant`'s SET `id`, waiting in the poll stream `stream_id`. Whether
    /// that answered a SET waiting there; durable before this returns.
    pub async fn answer(
        &self,
        tenant: &str,
        stream_id: &str,
        id: &str,
        answer: PollAnswer,
    ) -> Result<bool, StreamsError> {
        let url = format!("{STREAM_SCHEME}{stream_id}");
        let waiting = self
            .deliveries
            .load(id)
            .await?
            .is_some_and(|d| d.record.tenant == tenant && d.record.url == url);
        if !waiting {
            return Ok(false);
        }
        match self.deliveries.polled(id, &url, answer).await {
            Ok(answered) => Ok(answered),
            Err(RedeliverError::Store(e)) => Err(e.into()),
            Err(RedeliverError::Actor(e)) => Err(e.into()),
            Err(_) => Ok(false),
        }
    }

    /// Begins a walk through what `tenant`'s push stream `stream_id` held while it was paused:
    /// from now, the retry worker leaves what the stream holds to the walk, which
    /// [`HeldWalk::run`] makes once the stream is enabled (dropped unrun, it ends). Begun
    /// before the stream is enabled, so nothing it held goes out of turn in between.
    pub fn walk_held(&self, tenant: &str, stream_id: &str) -> HeldWalk {
        let url = format!("{STREAM_SCHEME}{stream_id}");
        let runs = self.deliveries.walks().begin(tenant, &url, now_ms());
        HeldWalk {
            streams: self.clone(),
            tenant: tenant.to_string(),
            url,
            runs,
        }
    }

    /// Begins and runs a walk (see [`HeldWalk::run`]) for each of `tenant`'s enabled push
    /// streams with SETs queued: what a walk cut short by a crash left held goes now, in
    /// order, rather than at its next look.
    pub async fn send_all_held(&self, tenant: &str) -> Result<(), StoreError> {
        for stream in self.store.streams(tenant).await? {
            if stream.state != StreamState::Enabled || stream.method != StreamMethod::Push {
                continue;
            }
            let url = format!("{STREAM_SCHEME}{}", stream.id);
            if self.store.queued_to(tenant, &url, 1).await?.is_empty() {
                continue;
            }
            self.walk_held(tenant, &stream.id).spawn();
        }
        Ok(())
    }

    /// Makes the SETs held for `tenant`'s push stream `stream_id`, which was disabled, due at
    /// once rather than at their next look (up to [`DROPPED_AT_ONCE`] of them; any more at
    /// their next look): its decisions' SETs are dropped, its own events held again. How many
    /// it moved.
    pub async fn release(&self, tenant: &str, stream_id: &str) -> Result<usize, StreamsError> {
        let url = format!("{STREAM_SCHEME}{stream_id}");
        let ids = self.store.queued_to(tenant, &url, DROPPED_AT_ONCE).await?;
        let now = now_ms();
        let mut released = 0;
        for id in ids {
            released += usize::from(self.deliveries.release(&id, now).await?);
        }
        Ok(released)
    }

    /// Drops the SETs of decisions waiting in `tenant`'s poll stream `stream_id`, which was
    /// disabled (up to [`DROPPED_AT_ONCE`] of them; any more are dropped when their hold ends).
    /// How many it dropped.
    pub async fn drop_waiting(&self, tenant: &str, stream_id: &str) -> Result<usize, StreamsError> {
        let url = format!("{STREAM_SCHEME}{stream_id}");
        let ids = self.store.queued_to(tenant, &url, DROPPED_AT_ONCE).await?;
        let mut dropped = 0;
        for id in ids {
            let answer = PollAnswer::Dropped;
            dropped += usize::from(self.answer(tenant, stream_id, &id, answer).await?);
        }
        Ok(dropped)
    }
}

/// A walk through what a push stream held while it was paused, begun by
/// [`Streams::walk_held`].
pub struct HeldWalk {
    streams: Streams,
    tenant: String,
    url: String,
    /// Whether this one runs it (not one running already, asked to go round once more).
    runs: bool,
}

impl HeldWalk {
    /// Runs it (see [`HeldWalk::run`]) on a task of its own.
    pub fn spawn(self) {
        tokio::spawn(async move {
            let url = self.url.clone();
            if let Err(e) = self.run().await {
                tracing::error!(error = %e, stream = %url, "a stream's held SETs go at their next look");
            }
        });
    }

    /// Sends what the stream held, now that it is enabled: oldest first, one attempt at a
    /// time, each once the one before it has its answer recorded (up to [`DROPPED_AT_ONCE`] a
    /// round, rounds until one sends nothing). Only SETs made before the walk began are its:
    /// those made since go as any other. If one must wait (its endpoint admits no attempt), it
    /// and the rest go at their next look. The queue is the walk's cursor: what was sent is no
    /// longer held, so a walk cut short by a crash is taken up when the node starts again
    /// ([`Streams::send_all_held`]). How many it sent.
    pub async fn run(self) -> Result<usize, StreamsError> {
        if !self.runs {
            return Ok(0);
        }
        let (streams, tenant, url) = (&self.streams, &self.tenant, &self.url);
        let walks = streams.deliveries.walks();
        let mut sent = 0;
        loop {
            let ids = streams
                .store
                .queued_to(tenant, url, DROPPED_AT_ONCE)
                .await?;
            let mut this_round = 0;
            for id in ids {
                match streams.deliveries.send_held(&id).await? {
                    Sent::Sent => {
                        this_round += 1;
                        crate::failpoint::hit("held.after_send");
                    }
                    Sent::NotHeld => {}
                    Sent::Waits => return Ok(sent + this_round),
                }
            }
            sent += this_round;
            if this_round == 0 && !walks.again(tenant, url) {
                return Ok(sent);
            }
        }
    }
}

impl Drop for HeldWalk {
    fn drop(&mut self) {
        if self.runs {
            self.streams.deliveries.walks().end(&self.tenant, &self.url);
        }
    }
}
