//! The engine: the one handle the HTTP front uses. Built once from its settings, it owns the
//! store, the claim and delivery actor families, the retry worker and the sweeper, and stops
//! them in order. Its operations are the service's: submit a keyed signal (to its claim actor),
//! process a keyless one, tell a stream of itself, read, list and redeliver a tenant's
//! deliveries, sweep. Everything the service makes durable is made durable below this handle,
//! each thing in one place: a claim and its recovery point in the claim actor, an attempt in the
//! delivery actor, a keyless signal's deliveries in [`Engine::keyless`], a stream's own SETs in
//! [`Engine::tell_stream`], and what the deliveries API shows in [`Engine::read`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idem_schemas::stored::STREAM_SCHEME;
use idem_schemas::timefmt::now_ms;
use idem_schemas::{
    DecidedAction, Decision, DecisionRecord, DecisionView, DeliveryStatus, DeliveryView,
    StoredResponse, Stream, StreamState,
};

use crate::claim::{first_response, ClaimContext, ClaimError, Claims, Reply, Submission};
use crate::delivery::{
    new_logs, queued_log, record_of, Deliveries, DeliveryContext, DeliveryError, PollAnswer,
    RedeliverError,
};
use crate::digest::Digester;
use crate::dispatch::{ClientError, Dispatcher, Keyring};
use crate::endpoint::{EndpointHealth, EndpointId, Endpoints};
use crate::metrics::Metric;
use crate::seal::Sealer;
use crate::set;
use crate::settings::Settings;
use crate::store::{ClaimId, Halted, Node, Store, StoreError, Unit};
use crate::stream_event::{self, about_the_stream, StreamEvent};
use crate::supervise::RegistryError;

/// How many waiting SETs a poll stream's disabling drops at once.
pub const DROPPED_AT_ONCE: usize = 1000;

/// How long `/healthz` waits for the store's probe to become durable.
pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the engine failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A delivery could not be read.
    #[error(transparent)]
    Delivery(#[from] DeliveryError),
    /// The actors could not start.
    #[error(transparent)]
    Actors(#[from] RegistryError),
    /// A SET could not be made.
    #[error(transparent)]
    Set(#[from] set::SetError),
    /// The callback client could not be built.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// A response could not be serialised.
    #[error("cannot serialise the response: {0}")]
    Response(#[from] serde_json::Error),
    /// A claim failed.
    #[error(transparent)]
    Claim(#[from] ClaimError),
    /// A claim's log does not fold.
    #[error(transparent)]
    ClaimLog(#[from] crate::claim::phase::InvalidTransition),
}

/// A page of a tenant's deliveries.
#[derive(Debug)]
pub struct DeliveryList {
    /// The deliveries, in (status, id) order.
    pub data: Vec<DeliveryView>,
    /// Where the next page starts, if there is one.
    pub next_after: Option<(DeliveryStatus, String)>,
}

/// A page of a subject's decisions, newest first.
#[derive(Debug)]
pub struct DecisionList {
    /// The decisions.
    pub data: Vec<DecisionView>,
    /// Where the next page starts (the last decision's id), if there is one.
    pub next_after: Option<String>,
}

/// What `/metrics` reads at scrape time.
#[derive(Debug, Clone, Copy)]
pub struct Gauges {
    /// Claim actors alive.
    pub live_claims: usize,
    /// Delivery actors alive.
    pub live_deliveries: usize,
    /// Deliveries waiting for a retry.
    pub queued: u64,
    /// When the longest-waiting queued delivery was created (unix milliseconds).
    pub oldest_queued_created_ms: Option<u64>,
}

impl Gauges {
    /// How old the longest-waiting queued delivery is, in whole seconds (0 when none).
    pub fn oldest_queued_age_s(&self) -> u64 {
        self.oldest_queued_created_ms
            .map_or(0, |created| now_ms().saturating_sub(created) / 1000)
    }
}

/// What the key that seals SETs and push credentials at rest is derived for.
pub const SEAL_PURPOSE: &[u8] = b"idem/ssf-seal/v1";

/// The service's core: store, actors and background tasks.
pub struct Engine {
    store: Arc<dyn Store>,
    epoch: u64,
    settings: Arc<Settings>,
    digester: Digester,
    /// Seals SETs at rest, under a key derived from `key_secret`.
    sealer: Arc<Sealer>,
    endpoints: Arc<Endpoints>,
    dispatcher: Arc<Dispatcher>,
    claims: Arc<Claims>,
    deliveries: Arc<Deliveries>,
    /// Hands the other nodes' news of claims to the actors (on a store shared by nodes).
    news: Option<tokio::task::JoinHandle<()>>,
    retry_worker: tokio::task::JoinHandle<()>,
    /// Reads the endpoints' health again, every `endpoint::REFRESH`.
    refresher: tokio::task::JoinHandle<()>,
    sweeper: tokio::task::JoinHandle<()>,
}

/// A number no other process of this store had: claims made under another epoch have no live
/// holder and may be taken over at once.
fn process_epoch() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    nanos ^ (u64::from(std::process::id()) << 40)
}

impl Engine {
    /// Opens the store `settings` name and starts the actors and background tasks; callbacks
    /// are signed with the secrets `keyring` gives.
    pub async fn start(settings: Settings, keyring: Arc<dyn Keyring>) -> Result<Self, EngineError> {
        let settings = Arc::new(settings);
        let epoch = process_epoch();
        let store = crate::store::open(Node {
            epoch,
            settings: settings.clone(),
        })
        .await?;
        crate::metrics::count_deliveries(store.count_by_status().await?);
        let endpoints = Arc::new(Endpoints::new(store.clone(), settings.clone()));
        // What the breakers were before a restart holds from the first request on.
        endpoints.refresh().await?;
        let digester = Digester::new(&settings.idempotency.key_secret);
        let sealer = Arc::new(Sealer::new(digester.derived_key(SEAL_PURPOSE)));
        let dispatcher = Arc::new(Dispatcher::new(
            keyring,
            settings.delivery.inline_timeout,
            endpoints.clone(),
            store.clone(),
            sealer.clone(),
        )?);
        // Actor names are unique per engine: ractor's registry is process-wide.
        let instance = format!("idem-{epoch:x}");
        let deliveries = Arc::new(
            Deliveries::start(
                &instance,
                Arc::new(DeliveryContext::new(
                    store.clone(),
                    dispatcher.clone(),
                    settings.clone(),
                )),
            )
            .await?,
        );
        let wake_retries = Arc::new(tokio::sync::Notify::new());
        let claims = Claims::start(
            &instance,
            Arc::new(ClaimContext::new(
                store.clone(),
                dispatcher.clone(),
                settings.clone(),
                epoch,
                wake_retries.clone(),
            )),
        )
        .await?;
        let claims = Arc::new(claims);
        // Several nodes on one store: news of claims held elsewhere reaches the actors here.
        let news = store.claim_news().map(|mut heard| {
            let claims = claims.clone();
            tokio::spawn(async move {
                while let Some(news) = heard.recv().await {
                    claims.hear(news);
                }
            })
        });
        let shortest_step = settings.delivery.shortest_step();
        let retry_worker = crate::retry_worker::spawn(
            store.clone(),
            deliveries.clone(),
            crate::retry_worker::tick_for(shortest_step),
            wake_retries,
        );
        let refresher = endpoints.spawn_refresh();
        let sweeper = crate::sweeper::spawn(
            store.clone(),
            settings.idempotency.sweep_interval,
            shortest_step,
        );
        Ok(Engine {
            store,
            epoch,
            digester,
            sealer,
            settings,
            endpoints,
            dispatcher,
            claims,
            deliveries,
            news,
            retry_worker,
            refresher,
            sweeper,
        })
    }

    /// The store.
    pub(crate) fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The delivery actors.
    pub(crate) fn deliveries(&self) -> &Deliveries {
        &self.deliveries
    }

    /// This process's epoch, the holder of its claims.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The engine's settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The keyed digests of this engine's `key_secret`.
    pub(crate) fn digester(&self) -> &Digester {
        &self.digester
    }

    /// The keyed digest (hex) of `tenant`'s source event `event_id` at `source`: what a trace
    /// names the event by.
    pub fn event_digest(&self, tenant: &str, source: &str, event_id: &str) -> String {
        idem_schemas::lower_hex(&self.digester.source_event(tenant, source, event_id))
    }

    /// What seals SETs and push credentials at rest.
    pub fn sealer(&self) -> &Arc<Sealer> {
        &self.sealer
    }

    /// `tenant`'s endpoints with a stored health, and its queued deliveries by URL, as the
    /// store has them now.
    pub async fn endpoints(
        &self,
        tenant: &str,
    ) -> Result<(Vec<(EndpointId, EndpointHealth)>, HashMap<String, u64>), EngineError> {
        let stored = self.store.endpoints(Some(tenant)).await?;
        let queued = self.store.queued_by_endpoint(tenant).await?;
        Ok((stored, queued))
    }

    /// Every endpoint this node knows of, with its health as last read (for `/metrics`).
    pub fn known_endpoints(&self) -> Vec<(EndpointId, EndpointHealth)> {
        self.endpoints.known()
    }

    /// A claimed request: its claim actor decides what it gets.
    pub(crate) async fn submit(
        &self,
        id: &ClaimId,
        sub: Submission,
    ) -> Result<Reply, RegistryError> {
        self.claims.submit(id, sub).await
    }

    /// A keyless signal's decision: processed every time (at-least-once), through the same
    /// dispatch code as a keyed one; the response to send.
    pub(crate) async fn keyless(&self, decision: &Decision) -> Result<StoredResponse, EngineError> {
        let outcomes = self.dispatcher.dispatch(decision).await;
        // Queued callbacks are durable in the retry queue before the response says so.
        let logs = new_logs(decision, &outcomes, &self.settings);
        logs.counts.into_iter().for_each(Metric::count);
        let record = DecisionRecord::kept_for(decision, self.settings.decisions.retention);
        self.store
            .commit(
                Unit::new()
                    .keep_set_keys(crate::set::keys(decision))
                    .write_deliveries(logs.writes)
                    .record_decision(record),
            )
            .await?;
        Ok(first_response(decision, &outcomes)?)
    }

    /// Tells `tenant`'s stream `stream_id` (whose receiver's audience is `audience`) of
    /// `event` by a SET of `transmitter`'s, queued, due at once, and durable before this
    /// returns; its delivery id.
    pub async fn tell_stream(
        &self,
        tenant: &str,
        transmitter: &set::Transmitter,
        audience: &str,
        stream_id: &str,
        event: &StreamEvent,
    ) -> Result<String, EngineError> {
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

    /// `tenant`'s delivery `id` (another tenant's is as missing as a missing one).
    pub async fn delivery(
        &self,
        tenant: &str,
        id: &str,
    ) -> Result<Option<DeliveryView>, EngineError> {
        let view = self
            .deliveries
            .load(id)
            .await?
            .filter(|d| d.record.tenant == tenant)
            .map(|d| d.view());
        self.read().await?;
        Ok(view)
    }

    /// How many of `tenant`'s deliveries have `status`, counting no further than `cap`.
    pub async fn count_deliveries(
        &self,
        tenant: &str,
        status: DeliveryStatus,
        cap: u64,
    ) -> Result<u64, EngineError> {
        Ok(self.store.count_deliveries(tenant, status, cap).await?)
    }

    /// A page of `tenant`'s deliveries with `status` (every status when `None`), after the
    /// cursor `after`, at most `limit`.
    pub async fn list_deliveries(
        &self,
        tenant: &str,
        status: Option<DeliveryStatus>,
        after: Option<(DeliveryStatus, &str)>,
        limit: usize,
    ) -> Result<DeliveryList, EngineError> {
        let ids = self
            .store
            .list_deliveries(tenant, status, after, limit + 1)
            .await?;
        let has_more = ids.len() > limit;
        let mut data = Vec::with_capacity(limit);
        let mut last = None;
        for (status, id) in ids.into_iter().take(limit) {
            if let Some(d) = self.deliveries.load(&id).await? {
                data.push(d.view());
            }
            last = Some((status, id));
        }
        self.read().await?;
        Ok(DeliveryList {
            data,
            next_after: last.filter(|_| has_more),
        })
    }

    /// `tenant`'s decision `id` with each action's current delivery status (another tenant's is
    /// as missing as a missing one).
    pub async fn decision(
        &self,
        tenant: &str,
        id: &str,
    ) -> Result<Option<DecisionView>, EngineError> {
        let Some(record) = self.store.load_decision(tenant, id, now_ms()).await? else {
            return Ok(None);
        };
        let view = self.decision_view(record).await?;
        self.read().await?;
        Ok(view)
    }

    /// A page of `tenant`'s decisions (about `subject` only, and of `signal_type` only, if
    /// given), newest first, after the cursor `after`, at most `limit`.
    pub async fn decisions_about(
        &self,
        tenant: &str,
        subject: Option<&str>,
        signal_type: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<DecisionList, EngineError> {
        let subject_hash = subject.map(|s| self.digester.subject(tenant, s));
        let records = self
            .store
            .decisions_about(
                tenant,
                subject_hash.as_deref(),
                signal_type,
                after,
                limit + 1,
                now_ms(),
            )
            .await?;
        let has_more = records.len() > limit;
        let mut data = Vec::with_capacity(limit);
        for record in records.into_iter().take(limit) {
            data.extend(self.decision_view(record).await?);
        }
        self.read().await?;
        let next_after = data
            .last()
            .filter(|_| has_more)
            .map(|d| d.decision_id.clone());
        Ok(DecisionList { data, next_after })
    }

    /// A kept decision as the API shows it, with its deliveries' statuses now. A delivery is
    /// kept as long as its decision: one already forgotten (its node's clock ahead of this
    /// one's) means the decision is past its retention too.
    async fn decision_view(
        &self,
        record: DecisionRecord,
    ) -> Result<Option<DecisionView>, EngineError> {
        let mut actions = Vec::with_capacity(record.actions.len());
        for action in record.actions {
            let Some(delivery) = self.deliveries.load(&action.delivery_id).await? else {
                return Ok(None);
            };
            let status = delivery.placement.status;
            actions.push(DecidedAction {
                name: action.name,
                stream_id: idem_schemas::stored::stream_of(&delivery.record.url)
                    .map(str::to_string),
                delivery_id: action.delivery_id,
                status,
            });
        }
        Ok(Some(DecisionView {
            decision_id: record.id,
            signal_type: record.signal_type,
            decision: record.verdict,
            subject_hash: record.subject_hash,
            source: record.source,
            actions,
            created_at: idem_schemas::timefmt::rfc3339_millis(record.created_at_ms),
            trace_id: record.trace.map(|t| t.trace_id_hex()),
        }))
    }

    /// Starts a new series of attempts for `tenant`'s failed or dead delivery `id`.
    pub async fn redeliver(&self, tenant: &str, id: &str) -> Result<DeliveryView, RedeliverError> {
        let owned = self
            .deliveries
            .load(id)
            .await
            .map_err(|e| match e {
                DeliveryError::Store(e) => RedeliverError::Store(e),
                _ => RedeliverError::NotFound,
            })?
            .is_some_and(|d| d.record.tenant == tenant);
        if !owned {
            return Err(RedeliverError::NotFound);
        }
        self.deliveries.redeliver(id, None).await
    }

    /// The SETs waiting in `tenant`'s poll stream `stream_id`, oldest first, at most `limit`,
    /// each as (`jti`, token), and whether more wait. While the stream is paused or disabled
    /// only its events about itself are handed out.
    pub async fn waiting_sets(
        &self,
        tenant: &str,
        stream: &Stream,
        limit: usize,
    ) -> Result<(Vec<(String, Vec<u8>)>, bool), EngineError> {
        let url = format!("{STREAM_SCHEME}{}", stream.id);
        let ids = self.store.queued_to(tenant, &url, limit + 1).await?;
        let more = ids.len() > limit;
        let mut sets = Vec::with_capacity(limit.min(ids.len()));
        for id in ids.into_iter().take(limit) {
            let Some(delivery) = self.deliveries.load(&id).await? else {
                continue;
            };
            let record = &delivery.record;
            if stream.state != StreamState::Enabled && !about_the_stream(&record.action) {
                continue;
            }
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
    pub async fn answer_polled(
        &self,
        tenant: &str,
        stream_id: &str,
        id: &str,
        answer: PollAnswer,
    ) -> Result<bool, EngineError> {
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

    /// Drops the SETs of decisions waiting in `tenant`'s poll stream `stream_id`, which was
    /// disabled (up to [`DROPPED_AT_ONCE`] of them; any more are dropped when their hold ends).
    /// How many it dropped.
    pub async fn drop_polled(&self, tenant: &str, stream_id: &str) -> Result<usize, EngineError> {
        let url = format!("{STREAM_SCHEME}{stream_id}");
        let ids = self.store.queued_to(tenant, &url, DROPPED_AT_ONCE).await?;
        let mut dropped = 0;
        for id in ids {
            let answer = PollAnswer::Dropped;
            dropped += usize::from(self.answer_polled(tenant, stream_id, &id, answer).await?);
        }
        Ok(dropped)
    }

    /// Returns once every write made before it is durable. A delivery's record is in the store
    /// a moment before its actor's commit returns; what the deliveries API shows must not be
    /// undone by a crash in that moment, so each read makes what it read durable before it
    /// answers.
    async fn read(&self) -> Result<(), StoreError> {
        self.store.commit(Unit::new()).await.map(drop)
    }

    /// Deletes what has expired now (the sweeper does this every `sweep_interval`), and
    /// returns once that is durable.
    pub async fn sweep(&self) -> Result<(), StoreError> {
        let (store, requeue) = (self.store.clone(), self.settings.delivery.shortest_step());
        tokio::task::spawn_blocking(move || {
            while crate::sweeper::sweep_once(&*store, requeue)? > 0 {}
            Ok::<_, StoreError>(())
        })
        .await
        .map_err(|e| StoreError::from(std::io::Error::other(e)))??;
        self.read().await
    }

    /// The keyed digest of `subject` (as a signal names it) that a stream keeps.
    pub fn subject_digest(&self, tenant: &str, subject: &str) -> [u8; 32] {
        self.digester.subject_bytes(tenant, subject)
    }

    /// A key for `purpose`, derived from `key_secret` (see [`Digester::derived_key`]).
    pub fn derived_key(&self, purpose: &[u8]) -> [u8; 32] {
        self.digester.derived_key(purpose)
    }

    /// `tenant`'s Shared Signals stream `id`, if it exists.
    pub async fn stream(&self, tenant: &str, id: &str) -> Result<Option<Stream>, StoreError> {
        self.store.stream(tenant, id).await
    }

    /// `tenant`'s Shared Signals streams, by id.
    pub async fn streams(&self, tenant: &str) -> Result<Vec<Stream>, StoreError> {
        self.store.streams(tenant).await
    }

    /// Writes `stream` over the version before it (see [`crate::store::StreamStore::put_stream`]); whether
    /// it was written, durably.
    pub async fn put_stream(&self, tenant: &str, stream: &Stream) -> Result<bool, StoreError> {
        self.store.put_stream(tenant, stream).await
    }

    /// Removes `tenant`'s stream `id`, durably; whether it was there.
    pub async fn delete_stream(&self, tenant: &str, id: &str) -> Result<bool, StoreError> {
        self.store.delete_stream(tenant, id).await
    }

    /// Takes or keeps this node's lease on `job`, which one node at a time runs: its fencing
    /// token while this node holds it, none while another live node does.
    pub async fn lease(&self, job: &str) -> Result<Option<u64>, StoreError> {
        self.store.lease(job).await
    }

    /// Whether the store can make a write durable now (`/healthz`): a probe written through
    /// the same path as every write, given [`HEALTH_TIMEOUT`] to become durable.
    pub async fn health(&self) -> Result<(), StoreError> {
        tokio::time::timeout(HEALTH_TIMEOUT, self.store.probe())
            .await
            .map_err(|_| StoreError::Unresponsive(HEALTH_TIMEOUT))?
    }

    /// Watches for the store's failure for good, after which the process must exit so that a
    /// restart recovers from what is durable.
    pub fn halted(&self) -> Halted {
        self.store.halted()
    }

    /// The figures `/metrics` reads at scrape time.
    pub async fn gauges(&self) -> Gauges {
        Gauges {
            live_claims: self.claims.family().live(),
            live_deliveries: self.deliveries.family().live(),
            queued: self.store.queued().await.unwrap_or(0),
            oldest_queued_created_ms: self
                .store
                .oldest_queued()
                .await
                .ok()
                .flatten()
                .map(|record| record.created_at_ms),
        }
    }

    /// Stops the background tasks and the actors, in order, then makes everything written
    /// durable. Call once the HTTP front has stopped taking requests.
    pub async fn shutdown(&self) -> Result<(), StoreError> {
        // No new attempts start; the claim actors finish what they hold, then the delivery
        // actors; the sweeper last, as it only deletes.
        self.retry_worker.abort();
        self.refresher.abort();
        if let Some(news) = &self.news {
            news.abort();
        }
        self.claims.shutdown().await;
        self.deliveries.shutdown().await;
        self.sweeper.abort();
        self.read().await
    }
}
