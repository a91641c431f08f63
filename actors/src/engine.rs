//! The engine: built once from its settings, it opens the store, starts the claim and delivery
//! actor families, the retry worker, the endpoints' refresher and the sweeper, and hands out
//! one cheap handle per path: [`Signals`] (a signal in, decided once), [`Deliveries`],
//! [`Decisions`], [`Streams`] (a transmitter's streams and their SETs) and [`Node`] (health,
//! gauges, jobs, sweeps). `shutdown` stops what it started, in order. Everything the service
//! makes durable is made durable below these handles.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::attempt::{Attempts, ClientError, Keyring};
use crate::claim::{ClaimContext, Claims};
use crate::decisions::Decisions;
use crate::deliveries::Deliveries;
use crate::delivery::{DeliveryActors, DeliveryContext};
use crate::digest::Digester;
use crate::endpoint::Endpoints;
use crate::node::Node;
use crate::retry_worker::Retries;
use crate::seal::Sealer;
use crate::settings::Settings;
use crate::signals::Signals;
use crate::store::{Process, Store, StoreError};
use crate::streams::Streams;
use crate::supervise::RegistryError;

/// Why the engine could not start.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The actors could not start.
    #[error(transparent)]
    Actors(#[from] RegistryError),
    /// The callback client could not be built.
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// What the key that seals SETs and push credentials at rest is derived for.
pub const SEAL_PURPOSE: &[u8] = b"idem/ssf-seal/v1";

/// The service's core: its handles and the tasks it started.
pub struct Engine {
    signals: Signals,
    deliveries: Deliveries,
    decisions: Decisions,
    streams: Streams,
    node: Node,
    digester: Digester,
    store: Arc<dyn Store>,
    claims: Arc<Claims>,
    delivery_actors: Arc<DeliveryActors>,
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
        let store = crate::store::open(Process {
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
        let attempts = Arc::new(Attempts::new(
            keyring.clone(),
            settings.delivery.inline_timeout,
            endpoints.clone(),
            store.clone(),
            sealer.clone(),
        )?);
        // Actor names are unique per engine: ractor's registry is process-wide.
        let instance = format!("idem-{epoch:x}");
        let delivery_actors = Arc::new(
            DeliveryActors::start(
                &instance,
                Arc::new(DeliveryContext::new(
                    store.clone(),
                    attempts.clone(),
                    settings.clone(),
                )),
            )
            .await?,
        );
        let (retries, listening) = Retries::new();
        let claims = Arc::new(
            Claims::start(
                &instance,
                Arc::new(ClaimContext::new(
                    store.clone(),
                    attempts,
                    (digester.clone(), sealer.clone()),
                    settings.clone(),
                    epoch,
                    retries,
                )),
            )
            .await?,
        );
        // Several nodes on one store: news of claims held elsewhere reaches the actors here.
        let news = store.claim_news().map(|mut heard| {
            let claims = claims.clone();
            tokio::spawn(async move {
                while let Some(news) = heard.recv().await {
                    claims.hear(news);
                }
            })
        });
        let streams = Streams::new(
            store.clone(),
            delivery_actors.clone(),
            (digester.clone(), sealer),
            settings.clone(),
        );
        // What a push stream held when a node stopped part-way through sending it goes now, in
        // order: its walk is begun before the retry worker's first look.
        for tenant in keyring.transmitters() {
            if let Err(e) = streams.send_all_held(&tenant).await {
                tracing::warn!(%tenant, error = %e, "cannot read the streams: what they held goes at its next look");
            }
        }
        let retry_worker = crate::retry_worker::spawn(
            store.clone(),
            delivery_actors.clone(),
            settings.delivery.retry_tick(),
            listening,
        );
        let refresher = endpoints.spawn_refresh();
        let sweeper = crate::sweeper::spawn(
            store.clone(),
            settings.idempotency.sweep_interval,
            settings.delivery.shortest_step(),
        );
        Ok(Engine {
            signals: Signals::new(claims.clone(), delivery_actors.clone(), epoch),
            deliveries: Deliveries::new(store.clone(), delivery_actors.clone(), endpoints),
            decisions: Decisions::new(store.clone(), delivery_actors.clone(), digester.clone()),
            streams,
            node: Node::new(
                store.clone(),
                claims.clone(),
                delivery_actors.clone(),
                settings,
            ),
            digester,
            store,
            claims,
            delivery_actors,
            news,
            retry_worker,
            refresher,
            sweeper,
        })
    }

    /// Signals in: each decided once.
    pub fn signals(&self) -> &Signals {
        &self.signals
    }

    /// A tenant's deliveries.
    pub fn deliveries(&self) -> &Deliveries {
        &self.deliveries
    }

    /// A tenant's kept decisions.
    pub fn decisions(&self) -> &Decisions {
        &self.decisions
    }

    /// A tenant's Shared Signals streams, as its transmitter keeps them.
    pub fn streams(&self) -> &Streams {
        &self.streams
    }

    /// This node: health, gauges, jobs, sweeps.
    pub fn node(&self) -> &Node {
        &self.node
    }

    /// The keyed digests of this engine's `key_secret` (and the keys derived from it).
    pub fn digester(&self) -> &Digester {
        &self.digester
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
        self.delivery_actors.shutdown().await;
        self.sweeper.abort();
        self.store.settle().await
    }
}
