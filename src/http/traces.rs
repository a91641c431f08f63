//! Each HTTP request as the root of its part of a trace, when tracing is on: a server span
//! named by its method and route, whose parent is the W3C `traceparent` (and `tracestate`) the
//! request came with, if it has a valid one (an invalid one is ignored, as the W3C says).
//! Probes (`/healthz`, `/metrics`) and the console's files are not traced. With tracing off
//! this layer is not installed.

use axum::extract::{MatchedPath, Request};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;
use idem_actors::trace::{self, TraceContext};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The middleware.
pub async fn requests(request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str)
        .to_string();
    if matches!(route.as_str(), "/healthz" | "/metrics") || route.starts_with("/console") {
        return next.run(request).await;
    }
    let method = request.method().as_str().to_string();
    let span = idem_actors::trace_span!(
        "request",
        otel.name = format!("{method} {route}"),
        otel.kind = "server",
        http.request.method = method,
        http.route = route,
        http.response.status_code = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    if let Some(parent) = parent(request.headers()) {
        let state = request
            .headers()
            .get("tracestate")
            .and_then(|v| v.to_str().ok());
        let _ = span.set_parent(trace::remote(parent, state));
    }
    let response = next.run(request).instrument(span.clone()).await;
    let status = response.status();
    span.record("http.response.status_code", status.as_u16());
    if status.is_server_error() {
        span.record("otel.status_code", "ERROR");
    }
    response
}

/// The context a request's one `traceparent` names (two are not one: ignored).
fn parent(headers: &HeaderMap) -> Option<TraceContext> {
    let mut all = headers.get_all("traceparent").iter();
    match (all.next(), all.next()) {
        (Some(one), None) => TraceContext::parse(one.to_str().ok()?),
        _ => None,
    }
}
