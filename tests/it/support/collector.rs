//! A real OTLP/HTTP collector standing in for the operator's: it takes `POST /v1/traces`
//! bodies (protobuf `ExportTraceServiceRequest`), decodes them with the `opentelemetry-proto`
//! crate and keeps every span, flattened for assertions: ids in hex, attributes as text.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use idem_schemas::lower_hex;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use prost::Message;

/// One exported span.
#[derive(Debug, Clone)]
pub struct Exported {
    /// The `service.name` of the process that exported it.
    pub service: String,
    pub name: String,
    /// OTLP's span kind (2: server, 3: client).
    pub kind: i32,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent: String,
    pub attributes: BTreeMap<String, String>,
    /// Each link as (trace id, span id).
    pub links: Vec<(String, String)>,
    /// OTLP's status code (2: error).
    pub status: i32,
}

impl Exported {
    /// Attribute `key`, or "" when it has none.
    pub fn attr(&self, key: &str) -> &str {
        self.attributes.get(key).map_or("", String::as_str)
    }
}

/// The collector, listening on loopback.
pub struct Collector {
    pub addr: SocketAddr,
    spans: Arc<Mutex<Vec<Exported>>>,
    server: tokio::task::JoinHandle<()>,
}

impl Collector {
    /// Starts a collector that answers every export 200.
    pub async fn start() -> Collector {
        let spans = Arc::new(Mutex::new(Vec::new()));
        let app = axum::Router::new()
            .route("/v1/traces", axum::routing::post(export))
            .with_state(spans.clone());
        let (addr, server) = super::receiver::serve_on_loopback(app).await;
        Collector {
            addr,
            spans,
            server,
        }
    }

    /// The `[telemetry]` section that sends idem's traces here.
    pub fn section(&self) -> String {
        format!("\n[telemetry]\notlp_endpoint = \"http://{}\"\n", self.addr)
    }

    /// Every span exported so far.
    pub fn spans(&self) -> Vec<Exported> {
        self.spans.lock().expect("lock").clone()
    }

    /// The spans of trace `trace_id` (hex).
    pub fn trace(&self, trace_id: &str) -> Vec<Exported> {
        let all = self.spans();
        all.into_iter().filter(|s| s.trace_id == trace_id).collect()
    }

    /// Waits (up to 20 s) until the spans of trace `trace_id` satisfy `done`; those spans.
    pub async fn wait_for_trace(
        &self,
        trace_id: &str,
        done: impl Fn(&[Exported]) -> bool,
    ) -> Vec<Exported> {
        crate::support::eventually(
            Duration::from_secs(20),
            || async { self.trace(trace_id) },
            |spans| done(spans),
        )
        .await
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn export(State(spans): State<Arc<Mutex<Vec<Exported>>>>, body: Bytes) -> impl IntoResponse {
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return (StatusCode::BAD_REQUEST, Vec::new());
    };
    let mut kept = spans.lock().expect("lock");
    for resource in request.resource_spans {
        let service = resource
            .resource
            .iter()
            .flat_map(|r| r.attributes.iter())
            .find(|kv| kv.key == "service.name")
            .map(|kv| text(kv.value.as_ref().and_then(|v| v.value.as_ref())))
            .unwrap_or_default();
        for scope in resource.scope_spans {
            for span in scope.spans {
                kept.push(Exported {
                    service: service.clone(),
                    name: span.name,
                    kind: span.kind,
                    trace_id: lower_hex(&span.trace_id),
                    span_id: lower_hex(&span.span_id),
                    parent: lower_hex(&span.parent_span_id),
                    attributes: span
                        .attributes
                        .iter()
                        .map(|kv| {
                            let value = kv.value.as_ref().and_then(|v| v.value.as_ref());
                            (kv.key.clone(), text(value))
                        })
                        .collect(),
                    links: span
                        .links
                        .iter()
                        .map(|l| (lower_hex(&l.trace_id), lower_hex(&l.span_id)))
                        .collect(),
                    status: span.status.map_or(0, |s| s.code),
                });
            }
        }
    }
    // An empty ExportTraceServiceResponse: everything accepted.
    (StatusCode::OK, Vec::new())
}

fn text(value: Option<&Value>) -> String {
    match value {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(n)) => n.to_string(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}
