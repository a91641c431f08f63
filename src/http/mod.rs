//! The HTTP front: a thin axum router. It checks what can be checked without state (syntax,
//! authentication, signature, playbook), then hands each request to the engine and writes back
//! what it answers. It decides nothing about a key and makes nothing durable itself.

pub mod auth;
pub mod console;
pub mod decisions;
pub mod deliveries;
pub mod endpoints;
pub mod ingest;
pub mod known_series;
pub mod metrics;
pub mod openapi;
pub mod playbooks;
pub mod problem;
pub mod query;
pub mod ratelimit;
pub mod refusals;
pub mod server;
pub mod sources;
pub mod stats;
pub mod store_state;
pub mod submit;
pub mod traces;
pub mod transmitter;
pub mod unique_members;

use std::sync::Arc;

use arc_swap::ArcSwap;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use idem_actors::Engine;

use crate::config::Config;
use problem::{ApiError, Kind};

/// The configuration in force and what is derived from it, swapped whole on reload (SIGHUP).
pub struct Live {
    /// The configuration.
    pub config: Config,
    /// Tenants by API key.
    pub api_keys: auth::ApiKeys,
    /// Each transmitter tenant's transmitter as its SETs are made with it (see
    /// [`transmitter::of`]), made once it is first needed.
    pub transmitters:
        std::sync::OnceLock<std::collections::HashMap<String, Arc<idem_actors::set::SetIssuer>>>,
}

impl Live {
    /// Derives what handlers need from `config`.
    pub fn new(config: Config) -> Self {
        Live {
            api_keys: auth::ApiKeys::new(&config),
            config,
            transmitters: std::sync::OnceLock::new(),
        }
    }
}

/// What every handler shares.
pub struct App {
    /// The configuration in force.
    pub live: Arc<ArcSwap<Live>>,
    /// Per-tenant rate limits.
    pub limiter: ratelimit::RateLimiter,
    /// Per-tenant limits of redelivery requests.
    pub redeliveries: ratelimit::RateLimiter,
    /// Claims, deliveries and the store behind them.
    pub engine: Engine,
    /// Each tenant's signals and decisions, as this node counted them.
    pub stats: stats::Tally,
    /// Each source's keys and status on this node.
    pub sources: crate::source::runtime::Sources,
    /// The address this node listens on.
    pub listening: std::net::SocketAddr,
    /// The keys the transmitters derive from `key_secret`.
    pub ssf: crate::transmitter::TransmitterSecrets,
    /// Failed token requests, by receiver and by address.
    pub token_failures: transmitter::token_limit::TokenLimiter,
}

impl App {
    /// How others reach this idem: `public_url`, or `http://` and the address it listens on.
    pub fn base_url(&self, live: &Live) -> String {
        match &live.config.public_url {
            Some(url) => url.clone(),
            None => format!("http://{}", self.listening),
        }
    }
}

/// The router of the whole service; each request traced when tracing is on.
pub fn router(app: Arc<App>) -> Router {
    let routes = routes(app.clone());
    match app.live.load().config.telemetry.traces_url {
        Some(_) => routes.layer(axum::middleware::from_fn(traces::requests)),
        None => routes,
    }
}

fn routes(app: Arc<App>) -> Router {
    Router::new()
        .route("/v1/signals", post(ingest::ingest))
        .route("/v1/decisions", get(decisions::list))
        .route("/v1/decisions/{id}", get(decisions::show))
        .route("/v1/playbooks/{type}/evaluate", post(playbooks::evaluate))
        .route("/v1/deliveries", get(deliveries::list))
        .route("/v1/deliveries/{id}", get(deliveries::show))
        .route("/v1/deliveries/{id}/redeliver", post(deliveries::redeliver))
        .route(
            "/v1/deliveries/redeliver",
            post(deliveries::redeliver_matching),
        )
        .route("/v1/endpoints", get(endpoints::list))
        .route("/v1/stats", get(stats::show))
        .route(
            "/v1/sources/{tenant}/{source}",
            post(sources::receive).get(sources::verify_hook),
        )
        .route("/v1/sources", get(sources::list))
        .route("/v1/sources/{tenant}/{source}/status", get(sources::status))
        .route(
            "/v1/sources/{tenant}/{source}/subscription",
            post(sources::manage::set_status).delete(sources::manage::delete),
        )
        .route(
            "/v1/sources/{tenant}/{source}/subjects",
            post(sources::manage::subjects),
        )
        .route(
            "/.well-known/ssf-configuration/ssf/{tenant}",
            get(transmitter::discovery::metadata),
        )
        .route("/ssf/{tenant}/jwks", get(transmitter::discovery::jwks))
        .route("/ssf/{tenant}/token", post(transmitter::token::issue))
        .route(
            "/ssf/{tenant}/streams",
            get(transmitter::streams::read)
                .post(transmitter::streams::create)
                .patch(transmitter::streams::update)
                .put(transmitter::streams::replace)
                .delete(transmitter::streams::delete),
        )
        .route(
            "/ssf/{tenant}/streams/status",
            get(transmitter::streams::status).post(transmitter::streams::set_status),
        )
        .route(
            "/ssf/{tenant}/streams/subjects:add",
            post(transmitter::streams::add_subject),
        )
        .route(
            "/ssf/{tenant}/streams/subjects:remove",
            post(transmitter::streams::remove_subject),
        )
        .route(
            "/ssf/{tenant}/streams/verify",
            post(transmitter::streams::verify),
        )
        .route(
            "/ssf/{tenant}/streams/{stream_id}/poll",
            post(transmitter::poll::poll),
        )
        .route("/console", get(console::page))
        .route("/console/{asset}", get(console::asset))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics::render))
        .route(
            "/openapi.json",
            get(|| async { axum::Json(openapi::document()) }),
        )
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                Kind::MethodNotAllowed,
                "this path does not take that method",
            )
        })
        .fallback(|| async { ApiError::new(Kind::NotFound, "no such path; see /openapi.json") })
        .layer(axum::middleware::from_fn(metrics::time_requests))
        .with_state(app)
}

/// `/healthz`: 200 once the store has made a probe durable (a write to the disk, or to the
/// database), 503 with the reason when it cannot, so that a load balancer or supervisor acts.
async fn healthz(State(app): State<Arc<App>>) -> Response {
    match app.engine.node().health().await {
        Ok(()) => "ok\n".into_response(),
        Err(e) => {
            ApiError::new(Kind::Unavailable, format!("the store cannot write: {e}")).into_response()
        }
    }
}
