//! `GET /metrics` in the Prometheus text format, and what the HTTP front counts: signals by
//! outcome and request latency by route. Gauges that describe the system as it is (live actors,
//! queue depth, the oldest queued delivery) are read at scrape time, not kept up to date.

use std::sync::{Arc, LazyLock};
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus::{
    register_histogram_vec, register_int_counter_vec, register_int_gauge, register_int_gauge_vec,
    HistogramVec, IntCounterVec, IntGauge, IntGaugeVec,
};

use crate::http::App;

/// Signals by outcome: `first`, `replayed`, `awaited`, `deduplicated`, `keyless`, or the problem
/// slug of a refusal (`key-in-flight`, `key-reused`, `unauthorized`, …).
pub static SIGNALS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!("idem_signals_total", "Signals by outcome", &["outcome"])
        .expect("metric registers once")
});

/// Source events by source kind and outcome: `accepted`, `duplicate`, `ignored`, `refused`, or
/// `failed` (not durable: the delivery was answered 5xx).
pub static SOURCE_EVENTS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "idem_source_events_total",
        "Events of sources' deliveries, by source kind and outcome",
        &["kind", "outcome"]
    )
    .expect("metric registers once")
});

/// Sources' deliveries by source kind and outcome: `ok`, or the problem slug of a refusal.
pub static SOURCE_DELIVERIES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "idem_source_deliveries_total",
        "Deliveries to sources, by source kind and outcome",
        &["kind", "outcome"]
    )
    .expect("metric registers once")
});

/// Decisions made, by verdict: one per keyless signal and one per claimed key; a replay, a
/// duplicate in flight or a refused payload makes none.
pub static DECISIONS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "idem_decisions_total",
        "Decisions made, by verdict",
        &["decision"]
    )
    .expect("metric registers once")
});

/// Request latency by route pattern and method.
pub static REQUEST_SECONDS: LazyLock<HistogramVec> = LazyLock::new(|| {
    register_histogram_vec!(
        "idem_http_request_duration_seconds",
        "HTTP request latency by route",
        &["route", "method"],
        vec![0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0, 5.0]
    )
    .expect("metric registers once")
});

static LIVE_ACTORS: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    register_int_gauge_vec!(
        "idem_live_actors",
        "Actors alive now, by family",
        &["family"]
    )
    .expect("metric registers once")
});

static QUEUE_DEPTH: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "idem_delivery_queue_depth",
        "Deliveries waiting for a retry"
    )
    .expect("metric registers once")
});

static OLDEST_QUEUED: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "idem_delivery_oldest_queued_age_seconds",
        "Age of the longest-waiting queued delivery (0 when none)"
    )
    .expect("metric registers once")
});

static ENDPOINTS: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    register_int_gauge_vec!(
        "idem_endpoints",
        "Endpoints (action URLs of a tenant) by breaker state",
        &["state"]
    )
    .expect("metric registers once")
});

/// Middleware: times every request under its route pattern (never its concrete path), and
/// marks every answer `nosniff` and, unless it says otherwise (the console's files revalidate),
/// `no-store`: answers carry a tenant's decisions and deliveries, never to be kept by a cache.
pub async fn time_requests(request: Request, next: Next) -> Response {
    let route = request.extensions().get::<MatchedPath>().cloned();
    let method = request.method().clone();
    let started = Instant::now();
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    let route = route.as_ref().map_or("unmatched", MatchedPath::as_str);
    REQUEST_SECONDS
        .with_label_values(&[route, method.as_str()])
        .observe(started.elapsed().as_secs_f64());
    response
}

/// Sets the endpoint gauges: every tenant's configured URLs, closed unless known otherwise, by
/// state as last read from the store.
fn count_endpoints(app: &App) {
    let live = app.live.load_full();
    let mut states: std::collections::HashMap<(String, String), &'static str> = live
        .config
        .tenants
        .values()
        .flat_map(|t| {
            crate::http::endpoints::configured(t)
                .map(|url| ((t.name.clone(), url.to_string()), "closed"))
        })
        .collect();
    // Of the endpoints this node knows, those the tenants' playbooks still name.
    for (id, health) in app.engine.deliveries().known_endpoints() {
        if let Some(state) = states.get_mut(&(id.tenant, id.url)) {
            *state = health.circuit.name();
        }
    }
    for state in ["closed", "open", "half_open"] {
        let n = states.values().filter(|s| **s == state).count();
        ENDPOINTS.with_label_values(&[state]).set(n as i64);
    }
}

/// `GET /metrics`.
pub async fn render(State(app): State<Arc<App>>) -> Response {
    let gauges = app.engine.node().gauges().await;
    LIVE_ACTORS
        .with_label_values(&["claim"])
        .set(gauges.live_claims as i64);
    LIVE_ACTORS
        .with_label_values(&["delivery"])
        .set(gauges.live_deliveries as i64);
    QUEUE_DEPTH.set(gauges.queued as i64);
    OLDEST_QUEUED.set(gauges.oldest_queued_age_s() as i64);
    count_endpoints(&app);
    crate::http::store_state::probe(&app.engine).await;
    LazyLock::force(&SIGNALS);
    LazyLock::force(&idem_actors::metrics::CLAIM_TRANSITIONS);
    LazyLock::force(&idem_actors::metrics::DELIVERY_ATTEMPTS);
    LazyLock::force(&idem_actors::metrics::ENDPOINT_TRANSITIONS);
    LazyLock::force(&idem_actors::metrics::ENDPOINT_SHARE);
    LazyLock::force(&idem_actors::metrics::ACTOR_FAILURES);
    LazyLock::force(&idem_actors::metrics::FLUSH_SECONDS);
    match prometheus::TextEncoder::new().encode_to_string(&prometheus::gather()) {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(e) => crate::http::problem::ApiError::new(
            crate::http::problem::Kind::Internal,
            format!("cannot render metrics: {e}"),
        )
        .into_response(),
    }
}
