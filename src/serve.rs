//! `idem serve`: opens the store, starts the claim supervisor and the expiry sweeper, serves
//! HTTP until a shutdown signal, then stops taking requests, lets those in flight finish, stops
//! the actors and makes the store durable one last time.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use idem_actors::claim::ClaimContext;
use idem_actors::{
    ClaimRegistry, ClaimSettings, Deliveries, DeliveryContext, DeliverySettings, Dispatcher,
    Keyring, Store,
};
use idem_schemas::signature::Secret;

use crate::config::Config;
use crate::digest::Digester;
use crate::http::{self, App, Live};

/// Why the service could not run.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The store could not be opened or flushed.
    #[error(transparent)]
    Store(#[from] idem_actors::StoreError),
    /// The listener could not be bound or failed.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The configured address.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The HTTP server failed.
    #[error("http server: {0}")]
    Http(std::io::Error),
    /// The actors could not start.
    #[error(transparent)]
    Actors(#[from] idem_actors::RegistryError),
    /// The callback client could not be built.
    #[error(transparent)]
    Client(#[from] idem_actors::dispatch::ClientError),
}

/// Callback secrets from the configuration in force (a reload rotates them at once).
struct ConfigKeyring(Arc<ArcSwap<Live>>);

impl Keyring for ConfigKeyring {
    fn callback_secrets(&self, tenant: &str) -> Vec<Secret> {
        self.0
            .load()
            .config
            .tenants
            .get(tenant)
            .map(|t| t.callback_secrets.clone())
            .unwrap_or_default()
    }
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

/// Runs the service until `shutdown` completes. `on_listen` is told the bound address. With
/// `reload_from`, SIGHUP reloads the tenants (API keys, secrets, playbooks) and the signature
/// tolerance from that file without dropping in-flight work; a bad file is refused and logged,
/// and the running configuration stays.
pub async fn run(
    config: Config,
    reload_from: Option<PathBuf>,
    on_listen: impl FnOnce(std::net::SocketAddr),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let store = Store::open(&config.data_dir)?;
    let live = Arc::new(ArcSwap::from_pointee(Live::new(config.clone())));
    let keyring = Arc::new(ConfigKeyring(live.clone()));
    let dispatcher = Arc::new(Dispatcher::new(keyring, config.delivery.inline_timeout)?);
    let epoch = process_epoch();
    let instance = format!("idem-{epoch:x}");
    let delivery_ctx = Arc::new(DeliveryContext {
        store: store.clone(),
        dispatcher: dispatcher.clone(),
        settings: DeliverySettings {
            max_retries: config.delivery.max_retries,
            retry_interval: config.delivery.retry_interval,
            attempt_timeout: config.delivery.inline_timeout,
            idle_timeout: config.idempotency.idle_actor_timeout,
            retention: config.idempotency.key_ttl,
        },
    });
    let deliveries = Arc::new(Deliveries::start(&instance, delivery_ctx.clone()).await?);
    let ctx = Arc::new(ClaimContext {
        store: store.clone(),
        dispatcher: dispatcher.clone(),
        deliveries: delivery_ctx.clone(),
        settings: ClaimSettings {
            key_ttl: config.idempotency.key_ttl,
            in_flight_timeout: config.idempotency.in_flight_timeout,
            idle_timeout: config.idempotency.idle_actor_timeout,
            max_live_actors: config.idempotency.max_live_actors,
            holder: epoch,
        },
    });
    let claims = ClaimRegistry::start(&instance, ctx).await?;
    let sweeper = idem_actors::sweeper::spawn(delivery_ctx, config.idempotency.sweep_interval);
    let retry_worker = idem_actors::retry_worker::spawn(
        deliveries.clone(),
        idem_actors::retry_worker::tick_for(config.delivery.retry_interval),
    );

    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| ServeError::Listen {
            addr: config.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(ServeError::Http)?;
    let reloader =
        reload_from.map(|path| tokio::spawn(reload_on_sighup(path, live.clone(), config.clone())));
    let app = Arc::new(App {
        live,
        digester: Digester::new(&config.idempotency.key_secret),
        limiter: Default::default(),
        claims,
        deliveries,
        dispatcher,
    });
    on_listen(addr);
    tracing::info!(%addr, data_dir = %config.data_dir.display(), "serving");
    http::server::serve(
        listener,
        http::router(app.clone()),
        config.http.read_timeout,
        shutdown,
    )
    .await;

    tracing::info!("shutting down: requests finished, stopping actors");
    retry_worker.abort();
    if let Some(reloader) = reloader {
        reloader.abort();
    }
    app.claims.shutdown().await;
    app.deliveries.shutdown().await;
    sweeper.abort();
    store.commit().await?;
    tracing::info!("store flushed; bye");
    Ok(())
}

/// Keys read once at start; a reload that changes them is applied only after a restart.
fn restart_only(a: &Config, b: &Config) -> Vec<&'static str> {
    let (ai, bi, ad, bd) = (&a.idempotency, &b.idempotency, &a.delivery, &b.delivery);
    [
        ("listen", a.listen != b.listen),
        ("data_dir", a.data_dir != b.data_dir),
        (
            "http.read_timeout",
            a.http.read_timeout != b.http.read_timeout,
        ),
        ("idempotency.key_ttl", ai.key_ttl != bi.key_ttl),
        (
            "idempotency.in_flight_timeout",
            ai.in_flight_timeout != bi.in_flight_timeout,
        ),
        ("idempotency.key_secret", ai.key_secret != bi.key_secret),
        (
            "idempotency.idle_actor_timeout",
            ai.idle_actor_timeout != bi.idle_actor_timeout,
        ),
        (
            "idempotency.sweep_interval",
            ai.sweep_interval != bi.sweep_interval,
        ),
        (
            "idempotency.max_live_actors",
            ai.max_live_actors != bi.max_live_actors,
        ),
        (
            "delivery.inline_timeout",
            ad.inline_timeout != bd.inline_timeout,
        ),
        (
            "delivery.retry_interval",
            ad.retry_interval != bd.retry_interval,
        ),
        ("delivery.max_retries", ad.max_retries != bd.max_retries),
    ]
    .into_iter()
    .filter_map(|(key, changed)| changed.then_some(key))
    .collect()
}

/// Reloads the configuration from `path` on every SIGHUP.
async fn reload_on_sighup(path: PathBuf, live: Arc<ArcSwap<Live>>, started: Config) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hangups) = signal(SignalKind::hangup()) else {
        tracing::warn!("cannot listen for SIGHUP; reload by restarting");
        return;
    };
    while hangups.recv().await.is_some() {
        match Config::load(&path) {
            Err(e) => {
                tracing::error!(error = %e, "reload refused; the running configuration stays")
            }
            Ok(new) => {
                let later = restart_only(&started, &new);
                if !later.is_empty() {
                    tracing::warn!(keys = ?later, "these keys take effect only after a restart");
                }
                let tenants = new.tenants.len();
                live.store(Arc::new(Live::new(new)));
                tracing::info!(tenants, "configuration reloaded");
            }
        }
    }
}
