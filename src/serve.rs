//! `idem serve`: builds the engine from the configuration, serves HTTP until a shutdown signal,
//! then stops taking requests, lets those in flight finish, and shuts the engine down (actors
//! stopped in order, the store made durable one last time). SIGHUP reloads the configuration.
//! A store that fails for good stops the service the same way, and `idem serve` exits non-zero.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwap;
use idem_actors::{Engine, Keyring};
use idem_schemas::signature::Secret;

use crate::config::Config;
use crate::http::{self, App, Live};

/// Why the service could not run.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The engine could not start.
    #[error(transparent)]
    Engine(#[from] idem_actors::EngineError),
    /// The store could not be made durable at shutdown.
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
    /// The store failed for good while serving; a restart recovers from what is durable.
    #[error(
        "the store failed for good ({0}); exiting so that a restart recovers from what is durable"
    )]
    Halted(idem_actors::StoreError),
}

/// Callback secrets from the configuration in force (a reload rotates them at once).
struct ConfigKeyring(Arc<ArcSwap<Live>>);

impl Keyring for ConfigKeyring {
    fn callback_secrets(&self, tenant: &str) -> Arc<[Secret]> {
        self.0
            .load()
            .config
            .tenants
            .get(tenant)
            .map(|t| t.callback_secrets.clone())
            .unwrap_or_else(|| Arc::new([]))
    }

    fn names_host(&self, tenant: &str, receiver: &str, host: &str) -> bool {
        let live = self.0.load();
        live.config
            .tenants
            .get(tenant)
            .and_then(|t| t.ssf.as_ref())
            .and_then(|ssf| ssf.receivers.get(receiver))
            .is_some_and(|r| r.names_host(host))
    }

    fn transmitters(&self) -> Vec<String> {
        let live = self.0.load();
        let tenants = live.config.tenants.iter();
        tenants
            .filter(|(_, t)| t.ssf.is_some())
            .map(|(name, _)| name.clone())
            .collect()
    }
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
    crate::http::known_series::export(&config);
    let live = Arc::new(ArcSwap::from_pointee(Live::new(config.clone())));
    let keyring = Arc::new(ConfigKeyring(live.clone()));
    tracing::info!(store = ?config.engine.store, "opening the store");
    let engine = Engine::start(config.engine.clone(), keyring).await?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| ServeError::Listen {
            addr: config.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(ServeError::Http)?;
    // SIGHUP is listened for before the address is told: a SIGHUP that came between the two
    // would end the process (its default action).
    let reloader = reload_from.and_then(|path| {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::hangup()) {
            Ok(hangups) => Some(tokio::spawn(reload_on_sighup(
                hangups,
                path,
                live.clone(),
                config.clone(),
            ))),
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGHUP; reload by restarting");
                None
            }
        }
    });
    // What sources fetch and poll with (JWK Sets, SSF poll endpoints); no redirects followed.
    let outbound = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("idem/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| ServeError::Http(std::io::Error::other(e)))?;
    let ssf = crate::transmitter::TransmitterSecrets::new(|purpose| {
        engine.digester().derived_key(purpose)
    });
    let app = Arc::new(App {
        live,
        limiter: Default::default(),
        redeliveries: Default::default(),
        engine,
        stats: crate::http::stats::Tally::new(idem_schemas::timefmt::now_ms()),
        sources: crate::source::runtime::Sources::new(outbound.clone()),
        listening: addr,
        ssf,
        token_failures: Default::default(),
    });
    let pollers = tokio::spawn(http::sources::poll::run(app.clone(), outbound));
    let subscriber = tokio::spawn(http::sources::subscribe::run(app.clone()));
    on_listen(addr);
    tracing::info!(%addr, store = ?config.engine.store, "serving");
    // A store that failed for good stops the service as a shutdown signal would: the requests
    // in flight are answered (500, retry with the same key), then the process exits non-zero.
    let mut halted = app.engine.node().halted();
    let stop = async move {
        let halt = async {
            if halted.wait_for(Option::is_some).await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            () = shutdown => {}
            () = halt => {}
        }
    };
    http::server::serve(
        listener,
        http::router(app.clone()),
        config.http.read_timeout,
        stop,
    )
    .await;
    pollers.abort();
    subscriber.abort();
    let halted = app.engine.node().halted().borrow().clone();
    if let Some(e) = halted {
        tracing::error!(error = %e, "the store failed for good: exiting");
        if let Some(reloader) = reloader {
            reloader.abort();
        }
        let _ = app.engine.shutdown().await;
        return Err(ServeError::Halted(e));
    }

    tracing::info!("shutting down: requests finished, stopping the engine");
    if let Some(reloader) = reloader {
        reloader.abort();
    }
    app.engine.shutdown().await?;
    tracing::info!("store flushed; bye");
    Ok(())
}

/// Reloads the configuration from `path` on every SIGHUP `hangups` receives.
async fn reload_on_sighup(
    mut hangups: tokio::signal::unix::Signal,
    path: PathBuf,
    live: Arc<ArcSwap<Live>>,
    started: Config,
) {
    while hangups.recv().await.is_some() {
        match Config::load(&path) {
            Err(e) => {
                tracing::error!(error = %e, "reload refused; the running configuration stays")
            }
            Ok(new) => {
                let later = started.restart_only(&new);
                if !later.is_empty() {
                    tracing::warn!(keys = ?later, "these keys take effect only after a restart");
                }
                crate::http::known_series::export(&new);
                let tenants = new.tenants.len();
                live.store(Arc::new(Live::new(new)));
                tracing::info!(tenants, "configuration reloaded");
            }
        }
    }
}
