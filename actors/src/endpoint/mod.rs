//! Endpoints: where each callback goes, and whether it may go now. `Endpoints` is the node's
//! way to the breaker (see [`crate::breaker`]) and to the limit of attempts at once per endpoint. The
//! breaker's state lives in the store, which applies each change atomically and durably: this
//! node keeps a copy to decide at no cost whether an attempt may go, learns every change it
//! makes from the store's answer, and reads the others' every [`REFRESH`]. The limit of
//! attempts at once is shared between the nodes alive on the store: each takes its part of
//! `max_in_flight` (at least one), so together they stay within it while there are no more nodes
//! than places.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem_schemas::timefmt::now_ms;

pub use crate::breaker::{Circuit, EndpointEvent, EndpointHealth, EndpointId, Gate, Noted};

use crate::settings::Settings;
use crate::store::{Store, StoreError};

/// How often the node reads the endpoints' health again from the store.
pub const REFRESH: Duration = Duration::from_millis(200);

/// What the node knows of one endpoint.
struct Entry {
    id: EndpointId,
    health: Mutex<EndpointHealth>,
    /// Attempts this node has running to it.
    in_flight: Mutex<usize>,
    freed: tokio::sync::Notify,
    /// The start of the latest 2xx attempt not yet told to the store (0: none): successes on a
    /// healthy endpoint are told once a refresh, not one write per callback.
    untold_success: AtomicU64,
    /// The same for terminal answers (4xx), which change only when the last failure was.
    untold_refusal: AtomicU64,
}

impl Entry {
    fn health(&self) -> EndpointHealth {
        *self.health.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps `health` unless this copy is newer (answers and reads may arrive out of order).
    fn keep(&self, health: EndpointHealth) {
        let mut mine = self.health.lock().unwrap_or_else(|p| p.into_inner());
        if health.version >= mine.version {
            *mine = health;
        }
    }
}

/// Whether an attempt may be made now.
pub enum Admission {
    /// Make it; the permit holds its place among the endpoint's attempts at once.
    Go(Permit),
    /// The endpoint is open or probing: not before this time (unix milliseconds).
    Held(u64),
    /// The endpoint has as many attempts running as it may.
    Busy,
}

/// A place among an endpoint's attempts at once, given back when dropped.
pub struct Permit(Arc<Entry>);

impl Drop for Permit {
    fn drop(&mut self) {
        let mut n = self.0.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        *n = n.saturating_sub(1);
        self.0.freed.notify_one();
    }
}

/// The node's way to endpoint health and limits.
pub struct Endpoints {
    store: Arc<dyn Store>,
    settings: Arc<Settings>,
    /// By tenant, then URL (so a lookup by `&str` allocates nothing).
    known: Mutex<HashMap<String, HashMap<String, Arc<Entry>>>>,
    /// How many attempts at once this node may make to one endpoint.
    share: AtomicUsize,
}

impl Endpoints {
    /// The endpoints of a node on `store`, each given at most `max_in_flight_per_endpoint`
    /// attempts at once across the nodes.
    pub fn new(store: Arc<dyn Store>, settings: Arc<Settings>) -> Self {
        Endpoints {
            store,
            share: AtomicUsize::new(settings.delivery.max_in_flight_per_endpoint),
            settings,
            known: Mutex::new(HashMap::new()),
        }
    }

    fn entry(&self, tenant: &str, url: &str) -> Arc<Entry> {
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = known.get(tenant).and_then(|urls| urls.get(url)) {
            return entry.clone();
        }
        let entry = Arc::new(Entry {
            id: EndpointId {
                tenant: tenant.to_string(),
                url: url.to_string(),
            },
            health: Mutex::new(EndpointHealth::default()),
            in_flight: Mutex::new(0),
            freed: tokio::sync::Notify::new(),
            untold_success: AtomicU64::new(0),
            untold_refusal: AtomicU64::new(0),
        });
        known
            .entry(tenant.to_string())
            .or_default()
            .insert(url.to_string(), entry.clone());
        entry
    }

    /// Whether an attempt to `tenant`'s `url` may be made now, waiting up to `wait` for a place
    /// among its attempts at once. On an open endpoint whose cooldown is over, the store lets
    /// one caller of any node make the probe.
    pub async fn admit(&self, tenant: &str, url: &str, wait: Duration) -> Admission {
        let entry = self.entry(tenant, url);
        match entry.health().gate(now_ms(), &self.settings.delivery) {
            Gate::Pass => {
                let Some(permit) = self.take(&entry, wait).await else {
                    return Admission::Busy;
                };
                // The endpoint may have opened while this attempt waited for its place.
                match entry.health().gate(now_ms(), &self.settings.delivery) {
                    Gate::Pass => Admission::Go(permit),
                    Gate::WaitUntil(at) => Admission::Held(at),
                    Gate::Probe => {
                        drop(permit);
                        self.probe(entry).await
                    }
                }
            }
            Gate::WaitUntil(at) => Admission::Held(at),
            Gate::Probe => self.probe(entry).await,
        }
    }

    /// Asks the store to let this caller probe the endpoint.
    async fn probe(&self, entry: Arc<Entry>) -> Admission {
        let noted = self.note(&entry, EndpointEvent::ProbeStarted).await;
        let later = |health: EndpointHealth| match health.gate(now_ms(), &self.settings.delivery) {
            Gate::WaitUntil(at) => Admission::Held(at),
            // Closed in between, or the store's clock is behind this node's.
            Gate::Pass | Gate::Probe => Admission::Held(now_ms() + 100),
        };
        match noted {
            // The probe is this caller's: it goes whatever else runs.
            Some(Noted { changed: true, .. }) => {
                *entry.in_flight.lock().unwrap_or_else(|p| p.into_inner()) += 1;
                Admission::Go(Permit(entry))
            }
            Some(Noted { health, .. }) => later(health),
            None => Admission::Held(
                now_ms() + self.settings.delivery.probe_timeout().as_millis() as u64,
            ),
        }
    }

    /// Takes a place among the endpoint's attempts at once, waiting up to `wait` for one.
    async fn take(&self, entry: &Arc<Entry>, wait: Duration) -> Option<Permit> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let freed = entry.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            {
                let mut n = entry.in_flight.lock().unwrap_or_else(|p| p.into_inner());
                if *n < self.share.load(Ordering::Relaxed) {
                    *n += 1;
                    return Some(Permit(entry.clone()));
                }
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                // A place freed as the wait ran out goes to the next waiter.
                entry.freed.notify_one();
                return None;
            }
        }
    }

    /// Tells the breaker how the attempt `permit` admitted ended. On a healthy endpoint a 2xx
    /// or a 4xx changes only the times shown, so it is told to the store with the next refresh.
    pub async fn answered(&self, permit: &Permit, event: EndpointEvent) {
        let entry = &permit.0;
        let healthy = {
            let health = entry.health();
            health.circuit == Circuit::Closed && health.consecutive_failures == 0
        };
        match event {
            EndpointEvent::Succeeded { at_ms } if healthy => {
                entry.untold_success.fetch_max(at_ms, Ordering::Relaxed);
            }
            EndpointEvent::Refused { at_ms } if healthy => {
                entry.untold_refusal.fetch_max(at_ms, Ordering::Relaxed);
            }
            _ => {
                self.note(entry, event).await;
            }
        }
    }

    /// Notes `event` in the store and keeps what it answers; `None` if the store failed (the
    /// breaker then stays as this node last knew it).
    async fn note(&self, entry: &Entry, event: EndpointEvent) -> Option<Noted> {
        let (tenant, url) = (entry.id.tenant.as_str(), entry.id.url.as_str());
        match self
            .store
            .note_endpoint(tenant, url, event, &self.settings.delivery)
            .await
        {
            Ok(noted) => {
                let (from, to) = (noted.was.name(), noted.health.circuit.name());
                if noted.changed && from != to {
                    // An endpoint opening is a receiver failing: worth a warning.
                    match noted.health.circuit {
                        Circuit::Open { .. } => {
                            tracing::warn!(tenant, url, "endpoint open, was {from}")
                        }
                        _ => tracing::info!(tenant, url, "endpoint {to}, was {from}"),
                    }
                    crate::metrics::ENDPOINT_TRANSITIONS
                        .with_label_values(&[to])
                        .inc();
                }
                entry.keep(noted.health);
                Some(noted)
            }
            Err(e) => {
                tracing::warn!(tenant, url, error = %e, "cannot note the endpoint's health");
                None
            }
        }
    }

    /// Tells the store the answers not told yet, reads every endpoint's health from it (the
    /// other nodes' changes), and takes this node's part of the attempts at once.
    pub async fn refresh(&self) -> Result<(), StoreError> {
        for entry in self.entries() {
            let success = entry.untold_success.swap(0, Ordering::Relaxed);
            let refusal = entry.untold_refusal.swap(0, Ordering::Relaxed);
            let events = [
                (success != 0).then_some(EndpointEvent::Succeeded { at_ms: success }),
                (refusal != 0).then_some(EndpointEvent::Refused { at_ms: refusal }),
            ];
            for event in events.into_iter().flatten() {
                self.note(&entry, event).await;
            }
        }
        for (id, health) in self.store.endpoints(None).await? {
            self.entry(&id.tenant, &id.url).keep(health);
        }
        let nodes = self.store.live_nodes().await?.max(1);
        let share = (self.settings.delivery.max_in_flight_per_endpoint / nodes).max(1);
        let before = self.share.swap(share, Ordering::Relaxed);
        crate::metrics::ENDPOINT_SHARE.set(share as i64);
        if share > before {
            // More places: the attempts waiting for one may go.
            for entry in self.entries() {
                entry.freed.notify_waiters();
            }
        }
        Ok(())
    }

    /// Refreshes every [`REFRESH`] until the returned handle is aborted.
    pub fn spawn_refresh(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let endpoints = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(REFRESH);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if let Err(e) = endpoints.refresh().await {
                    tracing::warn!(error = %e, "cannot read the endpoints' health");
                }
            }
        })
    }

    /// Every endpoint this node knows of, with its health as last read.
    pub fn known(&self) -> Vec<(EndpointId, EndpointHealth)> {
        self.entries()
            .into_iter()
            .map(|e| (e.id.clone(), e.health()))
            .collect()
    }

    /// Every endpoint known, as it is now.
    fn entries(&self) -> Vec<Arc<Entry>> {
        let known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        known
            .values()
            .flat_map(|urls| urls.values().cloned())
            .collect()
    }
}
