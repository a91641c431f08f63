//! Logs and traces. Logs go to stderr as text or JSON lines, filtered by `RUST_LOG`. When
//! `[telemetry]` names an endpoint, the spans of decisions' traces (target
//! `idem_actors::trace::SPANS`, and nothing else) also go to an OpenTelemetry collector over
//! OTLP/HTTP (protobuf). Export never holds up an answer: a span ends into a bounded queue
//! (one full drops it, counted in `idem_trace_spans_dropped_total`), and one thread of its own
//! sends the spans in batches, each at most 200 ms after its first span ended, so what a
//! process did before it is killed has most likely left already. A collector that is down costs the
//! spans, never the service. With tracing off, no exporter layer exists and the spans are
//! never made.

use std::io::Read;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::Context;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SdkTracerProvider, Span, SpanData, SpanExporter, SpanProcessor};
use opentelemetry_sdk::Resource;
use prometheus::{register_int_counter, IntCounter};
use tracing_log::AsLog;
use tracing_subscriber::filter::{EnvFilter, LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::Layer;

use crate::config::Telemetry;

/// Spans that waited for export at most; more are dropped.
const QUEUE: usize = 4096;

/// The most spans one export request carries.
const BATCH: usize = 512;

/// How long the spans that end after a first one are gathered into its export request: an
/// export costs far more than a span, so spans go in batches, at this much delay.
const GATHER: Duration = Duration::from_millis(200);

/// How long one export request may take (a collector that does not answer).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// Spans dropped because the export queue was full (a slow or unreachable collector).
static DROPPED: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "idem_trace_spans_dropped_total",
        "Spans dropped because the export queue was full"
    )
    .expect("metric registers once")
});

/// Export requests that failed (their spans are lost).
static FAILED: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "idem_trace_exports_failed_total",
        "OTLP export requests that failed; their spans are lost"
    )
    .expect("metric registers once")
});

/// Makes the trace metrics show from the start, at zero (with tracing off too).
pub fn export_metrics() {
    LazyLock::force(&DROPPED);
    LazyLock::force(&FAILED);
}

/// How log lines are written (`idem serve --log-format`).
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum LogFormat {
    /// Text, coloured on a terminal.
    Text,
    /// One JSON object per line.
    Json,
}

/// What was installed: the exporter, if traces are on, to be flushed at exit.
pub struct Installed {
    provider: Option<SdkTracerProvider>,
}

impl Installed {
    /// Sends what is still queued, and stops the exporter.
    pub fn shutdown(self) {
        if let Some(provider) = self.provider {
            let _ = provider.shutdown_with_timeout(EXPORT_TIMEOUT);
        }
    }
}

/// Installs logging in `format`, and the trace exporter `telemetry` asks for (an error: why it
/// cannot be built).
pub fn install(format: LogFormat, telemetry: &Telemetry) -> Result<Installed, String> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let Some(url) = &telemetry.traces_url else {
        // No exporter: the plain subscriber, whose filter turns the trace spans (debug level)
        // away at their call sites.
        let builder = tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_env_filter(filter);
        match format {
            LogFormat::Json => builder.json().with_current_span(true).init(),
            LogFormat::Text => builder
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .init(),
        }
        return Ok(Installed { provider: None });
    };
    let provider = provider(url, &telemetry.service_name)?;
    let otel = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("idem"))
        .with_location(false)
        .with_threads(false)
        .with_tracked_inactivity(false)
        .with_filter(Targets::new().with_target(idem_actors::trace::SPANS, LevelFilter::TRACE));
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let fmt = match format {
        LogFormat::Json => fmt.json().with_current_span(true).boxed(),
        LogFormat::Text => fmt
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .boxed(),
    };
    // `log` records (sled's, hyper's) are for the logs alone: the level they are made at is the
    // logs' filter's, not the exporter's (whose spans are at debug), or every debug record of
    // the store would be made and turned away.
    let logs = filter
        .max_level_hint()
        .unwrap_or(LevelFilter::TRACE)
        .as_log();
    let subscriber = tracing_subscriber::registry()
        .with(fmt.with_filter(filter))
        .with(otel);
    tracing::subscriber::set_global_default(subscriber)
        .map_err(|e| format!("telemetry: cannot install the subscriber: {e}"))?;
    tracing_log::LogTracer::builder()
        .with_max_level(logs)
        .init()
        .map_err(|e| format!("telemetry: cannot forward log records: {e}"))?;
    LazyLock::force(&DROPPED);
    LazyLock::force(&FAILED);
    tracing::info!(url = %url, service = %telemetry.service_name, "exporting traces over OTLP/HTTP");
    Ok(Installed {
        provider: Some(provider),
    })
}

/// The tracer provider that exports to `url` as `service`.
fn provider(url: &str, service: &str) -> Result<SdkTracerProvider, String> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(url)
        .with_timeout(EXPORT_TIMEOUT)
        .with_http_client(Blocking::new())
        // A failed export loses its spans rather than hold the queue behind retries.
        .with_retry_policy(opentelemetry_otlp::RetryPolicy::disabled())
        .build()
        .map_err(|e| format!("telemetry: cannot export traces to {url}: {e}"))?;
    Ok(SdkTracerProvider::builder()
        .with_span_processor(Queue::start(exporter, QUEUE))
        .with_resource(
            Resource::builder()
                .with_service_name(service.to_string())
                .build(),
        )
        .build())
}

/// What the export thread is told.
enum Work {
    Span(Box<SpanData>),
    Resource(Resource),
    /// Send what is queued, then say so.
    Flush(SyncSender<()>),
}

/// The span processor: ended spans into a bounded queue, sent by a thread of their own.
#[derive(Debug)]
struct Queue {
    queue: SyncSender<Work>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Queue {
    /// A processor whose thread sends to `exporter`, at most `capacity` spans waiting.
    fn start<E: SpanExporter + 'static>(exporter: E, capacity: usize) -> Self {
        let (queue, work) = sync_channel(capacity);
        let thread = std::thread::Builder::new()
            .name("idem-traces".into())
            .spawn(move || export(exporter, work))
            .ok();
        Queue {
            queue,
            thread: Mutex::new(thread),
        }
    }

    /// Tells the thread `work` that must not be dropped, waiting for room up to a deadline.
    fn tell(&self, mut work: Work) -> OTelSdkResult {
        for _ in 0..500 {
            match self.queue.try_send(work) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Disconnected(_)) => return Err(OTelSdkError::AlreadyShutdown),
                Err(TrySendError::Full(back)) => {
                    work = back;
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
        Err(OTelSdkError::Timeout(EXPORT_TIMEOUT))
    }

    fn flush(&self) -> OTelSdkResult {
        let (done, flushed) = sync_channel(1);
        self.tell(Work::Flush(done))?;
        flushed
            .recv_timeout(2 * EXPORT_TIMEOUT)
            .map_err(|_| OTelSdkError::Timeout(2 * EXPORT_TIMEOUT))
    }
}

impl SpanProcessor for Queue {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        // Never waits: a full queue (a collector slower than the spans) drops the span.
        if self.queue.try_send(Work::Span(Box::new(span))).is_err() {
            DROPPED.inc();
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.flush()
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        self.flush()?;
        // The queue's sender stays; the thread ends with the process.
        let _ = self.thread.lock().map(|mut t| t.take());
        Ok(())
    }

    fn set_resource(&mut self, resource: &Resource) {
        let _ = self.tell(Work::Resource(resource.clone()));
    }
}

/// The export thread: waits for a span, then sends it with every other span that ends within
/// [`GATHER`] of it (up to a batch, or until a flush asks), one request at a time.
fn export<E: SpanExporter>(mut exporter: E, work: Receiver<Work>) {
    // Nothing this thread does is traced itself.
    let _quiet = Context::enter_telemetry_suppressed_scope();
    let mut batch = Vec::with_capacity(BATCH);
    while let Ok(first) = work.recv() {
        let until = Instant::now() + GATHER;
        let mut flushed = None;
        let mut next = Some(first);
        while let Some(item) = next.take() {
            match item {
                Work::Span(span) => batch.push(*span),
                Work::Resource(resource) => exporter.set_resource(&resource),
                Work::Flush(done) => flushed = Some(done),
            }
            if batch.len() < BATCH && flushed.is_none() {
                let left = until.saturating_duration_since(Instant::now());
                next = work.recv_timeout(left).ok();
            }
        }
        if !batch.is_empty() {
            let spans = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
            if futures::executor::block_on(exporter.export(spans)).is_err() {
                FAILED.inc();
            }
        }
        if let Some(done) = flushed {
            let _ = done.send(());
        }
    }
}

/// The exporter's HTTP client: reqwest's blocking client (the workspace's reqwest, on rustls),
/// used only on the export thread, with no redirects and a deadline per request.
#[derive(Debug, Clone)]
struct Blocking(Option<reqwest::blocking::Client>);

impl Blocking {
    fn new() -> Self {
        // Built on a thread of its own: reqwest's blocking client must not be made inside an
        // async runtime, and `install` may be called from one (in tests).
        let client = std::thread::spawn(|| {
            reqwest::blocking::Client::builder()
                .timeout(EXPORT_TIMEOUT)
                .connect_timeout(EXPORT_TIMEOUT)
                .redirect(reqwest::redirect::Policy::none())
                .user_agent(concat!("idem/", env!("CARGO_PKG_VERSION")))
                .build()
                .ok()
        })
        .join()
        .ok()
        .flatten();
        Blocking(client)
    }
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for Blocking {
    async fn send_bytes(
        &self,
        request: opentelemetry_http::Request<opentelemetry_http::Bytes>,
    ) -> Result<
        opentelemetry_http::Response<opentelemetry_http::Bytes>,
        opentelemetry_http::HttpError,
    > {
        let client = self.0.as_ref().ok_or("no HTTP client")?;
        let response = client.execute(request.try_into()?)?;
        let (status, headers) = (response.status(), response.headers().clone());
        // A collector's answer is small; read no more than a bound of it.
        let mut body = Vec::new();
        response.take(64 * 1024).read_to_end(&mut body)?;
        let mut answer = opentelemetry_http::Response::builder()
            .status(status)
            .body(opentelemetry_http::Bytes::from(body))?;
        *answer.headers_mut() = headers;
        Ok(answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{Span as _, Tracer as _};

    /// An exporter whose every export waits until the test lets it go: a collector that does
    /// not answer.
    #[derive(Debug)]
    struct Stuck(Mutex<Receiver<()>>);

    impl SpanExporter for Stuck {
        async fn export(&self, _batch: Vec<SpanData>) -> OTelSdkResult {
            let _ = self.0.lock().map(|let_go| let_go.recv());
            Ok(())
        }
    }

    #[test]
    fn spans_past_a_full_queue_are_dropped_and_counted_without_waiting() {
        let (let_go, stuck) = sync_channel::<()>(0);
        let provider = SdkTracerProvider::builder()
            .with_span_processor(Queue::start(Stuck(Mutex::new(stuck)), 4))
            .build();
        let tracer = provider.tracer("test");
        let before = DROPPED.get();
        // The thread holds at most one batch in its stuck export, and four wait: the rest of
        // these are dropped, each at once (a span that waited would hang this test).
        let ended = BATCH + 100;
        for _ in 0..ended {
            tracer.start("s").end();
        }
        let dropped = DROPPED.get() - before;
        assert!(
            dropped >= (ended - BATCH - 4) as u64,
            "{dropped} of {ended} dropped"
        );
        drop(let_go);
        provider
            .shutdown()
            .expect("the queue empties once the export returns");
    }
}
