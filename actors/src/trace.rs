//! The spans of a decision's trace, and the context that carries it across tasks, processes and
//! nodes. Spans are `tracing` spans of target [`SPANS`] at debug level, which the binary sends
//! to an OpenTelemetry exporter when tracing is on; when it is off no layer enables them, so
//! making one costs a level check and every function here returns at once. A span's context is
//! taken as a [`TraceContext`] (ids only), kept with the decision, and a span made later (a
//! retry, after a crash, on another node) is parented by it, or linked to it where another
//! trace is its parent.

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry::Context;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

pub use idem_schemas::TraceContext;

/// The target of every span of a trace: what the exporter's layer takes, and nothing else.
pub const SPANS: &str = "idem::trace";

/// A span of a trace named `$name`, at debug level (see the module's note), with `$fields`.
#[macro_export]
macro_rules! trace_span {
    ($name:expr $(, $($fields:tt)*)?) => {
        tracing::debug_span!(target: $crate::trace::SPANS, $name $(, $($fields)*)?)
    };
}

/// The context of `span`, if it is a span of an exported trace.
pub fn context_of(span: &Span) -> Option<TraceContext> {
    if span.is_disabled() {
        return None;
    }
    let cx = span.context();
    let of = cx.span().span_context().clone();
    of.is_valid().then(|| TraceContext {
        trace_id: of.trace_id().to_bytes(),
        span_id: of.span_id().to_bytes(),
        flags: of.trace_flags().to_u8(),
    })
}

/// The OpenTelemetry context whose (remote) span `parent` is, with `state` (a `tracestate`
/// header as it came, if it is a valid one).
pub fn remote(parent: TraceContext, state: Option<&str>) -> Context {
    let state = state
        .and_then(|s| s.parse::<TraceState>().ok())
        .unwrap_or_default();
    Context::new().with_remote_span_context(span_context(parent, state))
}

fn span_context(of: TraceContext, state: TraceState) -> SpanContext {
    SpanContext::new(
        TraceId::from_bytes(of.trace_id),
        SpanId::from_bytes(of.span_id),
        TraceFlags::new(of.flags),
        true,
        state,
    )
}

/// Makes `span` a child of `parent`, a span of another task, process or node: `span` belongs
/// to `parent`'s trace.
pub fn parent(span: &Span, parent: Option<TraceContext>) {
    if let (Some(parent), false) = (parent, span.is_disabled()) {
        // A span already started cannot change its trace: only a new one is given a parent.
        let _ = span.set_parent(remote(parent, None));
    }
}

/// Links `span` to `to`, a span of another trace it follows from.
pub fn link(span: &Span, to: Option<TraceContext>) {
    if let (Some(to), false) = (to, span.is_disabled()) {
        span.add_link(span_context(to, TraceState::default()));
    }
}
