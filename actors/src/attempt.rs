//! Making delivery attempts. A decision's deliveries are attempted concurrently, each bounded by
//! a deadline. A callback is signed with the tenant's current callback secrets (Standard Webhooks
//! headers): the body is the stored envelope, byte for byte; the `webhook-id` is the delivery's
//! id; only `webhook-timestamp` and the signature belong to the attempt. A SET goes to its
//! stream as it is read just before the attempt (RFC 8935: its endpoint, its
//! `authorization_header`), once per attempt, its stored bytes unsealed; a receiver's 400 `err` is kept in the attempt. Redirects are never followed.
//! Every attempt's end is told to its endpoint's breaker (a stream's is its own); an inline
//! attempt is made only if its endpoint admits it (see [`crate::endpoint`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::Instrument;

use idem_schemas::signature::{sign_all, Secret};
use idem_schemas::stored::stream_of;
use idem_schemas::timefmt::now_ms;
use idem_schemas::{
    ActionOutcome, ActionStatus, AttemptRecord, Decision, PlannedDelivery, Stream, StreamMethod,
    StreamState,
};

use crate::destination;
use crate::endpoint::{Admission, EndpointEvent, Endpoints, Permit};
use crate::seal::Sealer;
use crate::store::Store;
use crate::stream_event::about_the_stream;
use crate::trace::{self, TraceContext};

/// The most of a receiver's error answer read for its `err`.
const MAX_ERROR_BODY: usize = 4096;

/// Where the attempts finds a tenant's callback secrets (read at every attempt, so a config
/// reload that rotates them takes effect at once).
pub trait Keyring: Send + Sync + 'static {
    /// The secrets to sign `tenant`'s callbacks with; every one signs.
    fn callback_secrets(&self, tenant: &str) -> Arc<[Secret]>;

    /// Whether `tenant`'s receiver `receiver` names `host` (as a URL's `host_str`) among its
    /// `endpoints`: only then may its streams push inside idem's own network.
    fn names_host(&self, tenant: &str, receiver: &str, host: &str) -> bool;

    /// The tenants that are Shared Signals transmitters: at start, what their push streams
    /// still hold is sent before the retry worker looks at it.
    fn transmitters(&self) -> Vec<String>;
}

/// One attempt of a delivery: whose, of which decision, in which trace, and which attempt of
/// the delivery it is (the inline one is the first).
pub struct Attempting<'a> {
    /// The tenant.
    pub tenant: &'a str,
    /// The decision it belongs to (empty: to none, a stream's own SET).
    pub decision_id: &'a str,
    /// What it sends, where.
    pub delivery: &'a PlannedDelivery,
    /// The trace of its decision, if it has one.
    pub trace: Option<TraceContext>,
    /// Its number among the delivery's attempts, from 1.
    pub number: u32,
}

/// Sends callback attempts.
pub struct Attempts {
    client: reqwest::Client,
    /// Pushes to a host the receiver's `endpoints` do not name: connects only outside idem's
    /// own network.
    outside: reqwest::Client,
    keyring: Arc<dyn Keyring>,
    inline_timeout: Duration,
    endpoints: Arc<Endpoints>,
    /// Where a SET's stream is read.
    store: Arc<dyn Store>,
    /// Unseals SETs and push credentials.
    sealer: Arc<Sealer>,
    /// The URLs attempted, parsed once (a destination is attempted again and again).
    urls: Mutex<HashMap<String, reqwest::Url>>,
}

/// The most parsed URLs kept; beyond, the cache starts again.
const URLS_KEPT: usize = 4096;

/// Whether a delivery is attempted now.
// Made and taken apart once per attempt, never kept: boxing the stream would cost an
// allocation per attempt to save bytes on the stack.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Readiness {
    /// Attempted; a SET with its stream as read (none: to be read by the attempt).
    Go(Option<Stream>),
    /// A SET whose push stream is paused: looked at again a cooldown later.
    Paused,
    /// A SET whose stream is polled: it waits for the receiver's acknowledgement.
    Polled,
}

/// Could not build the HTTP client.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the callback HTTP client: {0}")]
pub struct ClientError(#[from] reqwest::Error);

/// What an answer means for a delivery.
pub fn classify(code: u16) -> ActionStatus {
    match code {
        200..=299 => ActionStatus::Delivered,
        429 | 500..=599 => ActionStatus::Queued,
        _ => ActionStatus::Failed,
    }
}

impl Attempts {
    /// A attempts whose inline attempts have `inline_timeout` as deadline, admitted by and
    /// told to `endpoints`; SETs' streams are read from `store`, their bytes unsealed by
    /// `sealer`.
    pub fn new(
        keyring: Arc<dyn Keyring>,
        inline_timeout: Duration,
        endpoints: Arc<Endpoints>,
        store: Arc<dyn Store>,
        sealer: Arc<Sealer>,
    ) -> Result<Self, ClientError> {
        let builder = || {
            reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .user_agent(concat!("idem/", env!("CARGO_PKG_VERSION")))
        };
        let client = builder().build()?;
        let outside = builder()
            .dns_resolver(Arc::new(destination::Outside))
            .build()?;
        Ok(Attempts {
            client,
            outside,
            keyring,
            inline_timeout,
            endpoints,
            store,
            sealer,
            urls: Mutex::new(HashMap::new()),
        })
    }

    /// A POST to `url`, parsed once per destination; a URL that does not parse is left to
    /// reqwest to refuse, as the attempt's error.
    fn post(&self, client: &reqwest::Client, url: &str) -> reqwest::RequestBuilder {
        let mut urls = self.urls.lock().unwrap_or_else(|p| p.into_inner());
        let parsed = match urls.get(url) {
            Some(parsed) => parsed.clone(),
            None => match reqwest::Url::parse(url) {
                Ok(parsed) => {
                    if urls.len() >= URLS_KEPT {
                        urls.clear();
                    }
                    urls.insert(url.to_string(), parsed.clone());
                    parsed
                }
                Err(_) => return client.post(url),
            },
        };
        drop(urls);
        client.post(parsed)
    }

    /// The endpoints' breakers and limits.
    pub fn endpoints(&self) -> &Endpoints {
        &self.endpoints
    }

    /// The inline attempt of every callback of `decision`, concurrently, in playbook order,
    /// each within one deadline of `inline_timeout`: the wait for a place among its endpoint's
    /// attempts takes at most half of it, and the attempt has what is left. A callback whose
    /// endpoint is open, or has no place within that half, is held back: it has no outcome,
    /// and is queued without an attempt.
    pub async fn inline(&self, decision: &Decision) -> Vec<ActionOutcome> {
        let started = Instant::now();
        let attempts = decision.deliveries.iter().map(|delivery| async move {
            // A SET to a paused stream is held back, as one to an open endpoint is; one to a
            // poll stream waits to be polled.
            let Readiness::Go(stream) = self.readiness(&decision.tenant, delivery).await else {
                return None;
            };
            let admission = self
                .endpoints
                .admit(&decision.tenant, &delivery.url, self.inline_timeout / 2)
                .await;
            let Admission::Go(permit) = admission else {
                return None;
            };
            let left = self.inline_timeout.saturating_sub(started.elapsed());
            // Too little left for a fair attempt (the probe's own note took it): held back,
            // rather than a failure of the endpoint's that is only the deadline's.
            if left < self.inline_timeout / 4 {
                return None;
            }
            let of = Attempting {
                tenant: &decision.tenant,
                decision_id: &decision.id,
                delivery,
                trace: decision.trace,
                number: 1,
            };
            let (status, attempt) = self.attempt(&of, stream, left, &permit).await;
            Some(ActionOutcome {
                delivery_id: delivery.id.clone(),
                status,
                attempt,
            })
        });
        futures::future::join_all(attempts)
            .await
            .into_iter()
            .flatten()
            .collect()
    }

    /// One signed attempt `of` a delivery, bounded by `deadline`, in a span of its own in its
    /// decision's trace (tenant, decision and delivery ids, attempt number, host, status and
    /// latency), which the request names in its `traceparent`; its endpoint admitted it with
    /// `permit`, and is told how it ended.
    pub async fn attempt(
        &self,
        of: &Attempting<'_>,
        stream: Option<Stream>,
        deadline: Duration,
        permit: &Permit,
    ) -> (ActionStatus, AttemptRecord) {
        let (tenant, delivery) = (of.tenant, of.delivery);
        let span = crate::trace_span!(
            "attempt",
            otel.kind = "client",
            idem.tenant = tenant,
            idem.decision_id = of.decision_id,
            idem.delivery_id = %delivery.id,
            idem.attempt = of.number,
            idem.stream_id = tracing::field::Empty,
            server.address = tracing::field::Empty,
            http.response.status_code = tracing::field::Empty,
            idem.status = tracing::field::Empty,
            idem.latency_ms = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        trace::parent(&span, of.trace);
        let own = trace::context_of(&span);
        if own.is_some() {
            let url = match (stream_of(&delivery.url), &stream) {
                (None, _) => Some(delivery.url.as_str()),
                (Some(id), read) => {
                    span.record("idem.stream_id", id);
                    read.as_ref().and_then(|s| s.endpoint_url.as_deref())
                }
            };
            if let Some(host) = url.and_then(|u| reqwest::Url::parse(u).ok()) {
                span.record("server.address", host.host_str().unwrap_or_default());
            }
        }
        let (status, attempt) = self
            .attempt_once(tenant, delivery, stream, deadline, own)
            .instrument(span.clone())
            .await;
        if own.is_some() {
            if let Some(code) = attempt.code {
                span.record("http.response.status_code", code);
            }
            span.record("idem.status", status.as_str());
            span.record("idem.latency_ms", attempt.latency_ms);
            if status != ActionStatus::Delivered {
                span.record("otel.status_code", "ERROR");
            }
        }
        let at_ms = attempt.at_ms;
        let event = match status {
            ActionStatus::Delivered => Some(EndpointEvent::Succeeded { at_ms }),
            ActionStatus::Failed => Some(EndpointEvent::Refused { at_ms }),
            ActionStatus::Queued => Some(EndpointEvent::Failed { at_ms }),
            // Not sent: nothing to tell of the endpoint.
            ActionStatus::Dropped => None,
        };
        if let Some(event) = event {
            self.endpoints.answered(permit, event).await;
        }
        (status, attempt)
    }

    async fn attempt_once(
        &self,
        tenant: &str,
        delivery: &PlannedDelivery,
        read: Option<Stream>,
        deadline: Duration,
        trace: Option<TraceContext>,
    ) -> (ActionStatus, AttemptRecord) {
        let at_ms = now_ms();
        let stream = stream_of(&delivery.url);
        let mut request = match stream {
            None => self.callback(tenant, delivery, at_ms),
            Some(stream) => match self.set(tenant, stream, read, delivery).await {
                Ok(request) => request,
                Err((status, error)) => {
                    tracing::debug!(delivery = %delivery.id, %error, "SET not sent");
                    let attempt = AttemptRecord {
                        at_ms,
                        code: None,
                        error: Some(error),
                        latency_ms: 0,
                        retry_after_ms: None,
                    };
                    return (status, attempt);
                }
            },
        };
        // W3C Trace Context: the receiver's work is a child of this attempt.
        if let Some(trace) = trace {
            request = request.header("traceparent", trace.traceparent());
        }
        let started = Instant::now();
        let answer = request.timeout(deadline).send().await;
        let latency_ms = started.elapsed().as_millis() as u64;
        match answer {
            Ok(mut response) => {
                let code = response.status().as_u16();
                let status = classify(code);
                let retry_after_ms = match code {
                    429 | 503 => response
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(parse_retry_after),
                    _ => None,
                };
                // RFC 8935 §2.3: a refused SET is a 400 naming its `err`.
                let error = match (stream, code) {
                    (Some(_), 400) => set_error(&mut response).await,
                    _ => None,
                };
                tracing::debug!(delivery = %delivery.id, code, latency_ms, "delivery answered");
                (
                    status,
                    AttemptRecord {
                        at_ms,
                        code: Some(code),
                        error,
                        latency_ms,
                        retry_after_ms,
                    },
                )
            }
            Err(e) if destination::refused_inside(&e).is_some() => {
                let error = destination::refused_inside(&e).unwrap_or_default();
                tracing::debug!(delivery = %delivery.id, %error, "delivery refused");
                (
                    ActionStatus::Failed,
                    AttemptRecord {
                        at_ms,
                        code: None,
                        error: Some(error),
                        latency_ms,
                        retry_after_ms: None,
                    },
                )
            }
            Err(e) => {
                let error = if e.is_timeout() {
                    format!("no answer within {} ms", deadline.as_millis())
                } else {
                    network_error(e)
                };
                tracing::debug!(delivery = %delivery.id, %error, latency_ms, "delivery failed");
                (
                    ActionStatus::Queued,
                    AttemptRecord {
                        at_ms,
                        code: None,
                        error: Some(error),
                        latency_ms,
                        retry_after_ms: None,
                    },
                )
            }
        }
    }
}

impl Attempts {
    /// Whether `delivery` is to be attempted now: a callback is; a SET to a stream of
    /// `tenant` waits while its stream is a poll stream (not disabled), where it waits to be
    /// polled, or is paused, which holds its decisions' SETs (not the stream's events about
    /// itself), using up no attempt. A SET to be attempted carries its stream as read here, so
    /// that the attempt reads it no second time; one whose stream cannot be read carries none
    /// (its attempt finds out).
    pub async fn readiness(&self, tenant: &str, delivery: &PlannedDelivery) -> Readiness {
        let Some(stream) = stream_of(&delivery.url) else {
            return Readiness::Go(None);
        };
        match self.store.stream(tenant, stream).await {
            Ok(Some(stream)) => readiness_of(stream, &delivery.action),
            _ => Readiness::Go(None),
        }
    }

    /// A callback's request, signed at `at_ms`.
    fn callback(
        &self,
        tenant: &str,
        delivery: &PlannedDelivery,
        at_ms: u64,
    ) -> reqwest::RequestBuilder {
        let timestamp = (at_ms / 1000) as i64;
        let secrets = self.keyring.callback_secrets(tenant);
        let mut request = self
            .post(&self.client, &delivery.url)
            .header("content-type", "application/json")
            .header("webhook-id", &delivery.id)
            .header("webhook-timestamp", timestamp.to_string())
            .body(delivery.body.clone());
        if !secrets.is_empty() {
            let signature = sign_all(&secrets, &delivery.id, timestamp, &delivery.body);
            request = request.header("webhook-signature", signature);
        }
        request
    }

    /// A SET's request to stream `stream_id` as `read` by readiness (none: readiness could not
    /// read it, so it is read here and judged as readiness would have), or why none is made:
    /// dropped when the stream is disabled; failed for good when it is gone or has no endpoint,
    /// or the SET is erased or does not open; queued for another look when the stream or the
    /// SET's key cannot be read, or the stream is paused or polled.
    async fn set(
        &self,
        tenant: &str,
        stream_id: &str,
        read: Option<Stream>,
        delivery: &PlannedDelivery,
    ) -> Result<reqwest::RequestBuilder, (ActionStatus, String)> {
        let failed = |why: &str| (ActionStatus::Failed, why.to_string());
        let stream = match read {
            Some(stream) => stream,
            // Read only now (readiness could not): what readiness would have said of it holds,
            // so a SET to a poll stream waits to be polled and one to a paused stream is held,
            // never sent or failed.
            None => match self.store.stream(tenant, stream_id).await {
                Ok(Some(stream)) => match readiness_of(stream, &delivery.action) {
                    Readiness::Go(Some(stream)) => stream,
                    Readiness::Polled => {
                        return Err((ActionStatus::Queued, "the stream is polled".into()))
                    }
                    _ => return Err((ActionStatus::Queued, "the stream is paused".into())),
                },
                Ok(None) => return Err(failed("the stream was deleted")),
                Err(e) => {
                    return Err((
                        ActionStatus::Queued,
                        format!("the stream cannot be read: {e}"),
                    ))
                }
            },
        };
        if stream.state == StreamState::Disabled && !about_the_stream(&delivery.action) {
            return Err((ActionStatus::Dropped, "the stream is disabled".into()));
        }
        let (StreamMethod::Push, Some(url)) = (stream.method, &stream.endpoint_url) else {
            return Err(failed("the stream has no endpoint to push to"));
        };
        // A SET being made rides in clear to its first attempt; every later one opens it.
        let token = match &delivery.token {
            Some(token) => token.as_bytes().to_vec(),
            None => {
                self.open(&delivery.id, delivery.key.as_deref(), &delivery.body)
                    .await?
            }
        };
        let client = self.push_client(tenant, &stream.receiver, url)?;
        let mut request = self
            .post(client, url)
            .header("content-type", "application/secevent+jwt")
            .header("accept", "application/json")
            .body(token);
        if let Some(sealed) = &stream.authorization {
            let header = self
                .sealer
                .open(&crate::set::stream_owner(tenant, &stream.id), sealed)
                .map_err(|_| failed("the stream's authorization_header does not open"))?;
            request = request.header("authorization", header);
        }
        Ok(request)
    }

    /// The client to push to `url` with for `tenant`'s receiver `receiver`: any where its
    /// `endpoints` name the host; elsewhere, one that connects only outside idem's own
    /// network, and none (a failed attempt) to an address inside or `localhost`.
    fn push_client(
        &self,
        tenant: &str,
        receiver: &str,
        url: &str,
    ) -> Result<&reqwest::Client, (ActionStatus, String)> {
        let host = reqwest::Url::parse(url)
            .ok()
            .and_then(|u| u.host_str().map(str::to_string))
            .unwrap_or_default();
        if self.keyring.names_host(tenant, receiver, &host) {
            return Ok(&self.client);
        }
        if destination::host_inside(&host) {
            return Err((
                ActionStatus::Failed,
                format!(
                    "{host} is inside idem's own network (loopback, private or link-local) and \
                     the receiver's endpoints do not name it: not sent"
                ),
            ));
        }
        Ok(&self.outside)
    }

    /// The SET `id`, sealed in `body`, opened under its key (`key` while it rides with a
    /// decision being made, else the one kept in the store).
    async fn open(
        &self,
        id: &str,
        key: Option<&[u8]>,
        body: &[u8],
    ) -> Result<Vec<u8>, (ActionStatus, String)> {
        let failed = |why: &str| (ActionStatus::Failed, why.to_string());
        let kept = match key {
            Some(key) => Ok(Some(key.to_vec())),
            None => self.store.set_key(id).await,
        };
        let key = match kept {
            Ok(Some(key)) => key,
            Ok(None) => return Err(failed("the SET is erased: its delivery ended")),
            Err(e) => {
                return Err((
                    ActionStatus::Queued,
                    format!("the SET's key cannot be read: {e}"),
                ))
            }
        };
        crate::set::open(&self.sealer, id, &key, body)
            .map_err(|_| failed("the SET does not open under this key_secret"))
    }
}

/// What `stream` means for a SET of `action` to it: attempted (a disabled stream's decisions'
/// SETs too, which the attempt drops), held while the stream is paused, or left to be polled.
/// Nothing reaches a paused or disabled stream: its own events (a verification) are held until
/// it is enabled, as its decisions' SETs are while it is paused.
fn readiness_of(stream: Stream, action: &str) -> Readiness {
    let own = about_the_stream(action);
    match (stream.method, stream.state) {
        (_, StreamState::Disabled) if !own => Readiness::Go(Some(stream)),
        (StreamMethod::Poll, _) => Readiness::Polled,
        (StreamMethod::Push, StreamState::Paused | StreamState::Disabled) => Readiness::Paused,
        (StreamMethod::Push, StreamState::Enabled) => Readiness::Go(Some(stream)),
    }
}

/// A receiver's refusal of a SET (RFC 8935 §2.3): `err: description`, from at most
/// [`MAX_ERROR_BODY`] bytes of its answer.
async fn set_error(response: &mut reqwest::Response) -> Option<String> {
    let mut body = Vec::new();
    while body.len() < MAX_ERROR_BODY {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            _ => break,
        }
    }
    let refusal: serde_json::Value = serde_json::from_slice(&body).ok()?;
    let err = refusal.get("err")?.as_str()?;
    let description = refusal
        .get("description")
        .and_then(|d| d.as_str())
        .unwrap_or_default();
    let text = format!("{err}: {description}");
    Some(text.chars().take(512).collect())
}

/// `Retry-After` as milliseconds from now: delay-seconds or an HTTP date.
pub fn parse_retry_after(value: &str) -> Option<u64> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(secs.saturating_mul(1000));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    let wait = at
        .duration_since(std::time::SystemTime::now())
        .unwrap_or_default();
    Some(wait.as_millis() as u64)
}

/// What went wrong on the network, as the attempt log shows it: reqwest's own message says only
/// "error sending request"; the cause at the end of its chain says what (connection refused, a
/// name that does not resolve, a certificate refused). The URL is left out: a tenant's endpoint
/// may carry a token in its query.
fn network_error(e: reqwest::Error) -> String {
    let mut root = None;
    let mut cause = std::error::Error::source(&e);
    while let Some(next) = cause {
        root = Some(next.to_string());
        cause = next.source();
    }
    match root {
        Some(root) if e.is_connect() => format!("cannot connect: {root}"),
        Some(root) => format!("{}: {root}", e.without_url()),
        None => e.without_url().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::Settings;
    use crate::store::sled::SledStore;

    struct NoSecrets;

    impl Keyring for NoSecrets {
        fn callback_secrets(&self, _: &str) -> Arc<[Secret]> {
            Arc::new([])
        }

        fn names_host(&self, _: &str, _: &str, _: &str) -> bool {
            false
        }

        fn transmitters(&self) -> Vec<String> {
            Vec::new()
        }
    }

    fn stream(id: &str, method: StreamMethod, state: StreamState) -> Stream {
        Stream {
            id: id.into(),
            receiver: "rx".into(),
            version: 1,
            created_at_ms: now_ms(),
            method,
            endpoint_url: (method == StreamMethod::Push).then(|| "http://127.0.0.1:9/ssf".into()),
            authorization: None,
            events_requested: Vec::new(),
            description: None,
            state,
            reason: None,
            removed_subjects: Vec::new(),
            verified_at_ms: None,
        }
    }

    /// When readiness could not read a SET's stream (a store error), the attempt reads it and
    /// must judge it as readiness would have: a SET to a poll stream or a paused one is queued
    /// for another look (which holds it), never failed for good or sent.
    #[tokio::test]
    async fn a_stream_read_only_by_the_attempt_is_judged_as_readiness_would() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store: Arc<dyn Store> =
            SledStore::open(dir.path(), Duration::from_secs(30)).expect("open");
        let settings = Arc::new(Settings::default());
        let endpoints = Arc::new(Endpoints::new(store.clone(), settings));
        let attempts = Attempts::new(
            Arc::new(NoSecrets),
            Duration::from_secs(1),
            endpoints,
            store.clone(),
            Arc::new(Sealer::new([7; 32])),
        )
        .expect("attempts");
        let streams = [
            ("st_poll", StreamMethod::Poll, StreamState::Enabled),
            ("st_paused", StreamMethod::Push, StreamState::Paused),
            ("st_off", StreamMethod::Push, StreamState::Disabled),
        ];
        for (id, method, state) in streams {
            let written = store.put_stream("acme", &stream(id, method, state)).await;
            assert!(written.expect("put"), "{id} written");
        }
        let set_to = |id: &str| PlannedDelivery {
            id: "msg_00".into(),
            action: "revoke".into(),
            url: format!("ssf:{id}"),
            body: b"sealed".to_vec(),
            key: None,
            token: None,
        };
        let late = |id: &'static str| {
            let (attempts, delivery) = (&attempts, set_to(id));
            async move {
                match attempts.set("acme", id, None, &delivery).await {
                    Ok(_) => panic!("{id}: a request was made"),
                    Err((status, why)) => (status, why),
                }
            }
        };
        assert!(matches!(
            attempts.readiness("acme", &set_to("st_poll")).await,
            Readiness::Polled
        ));
        let (status, why) = late("st_poll").await;
        assert_eq!(
            (status, why.as_str()),
            (ActionStatus::Queued, "the stream is polled")
        );
        let (status, why) = late("st_paused").await;
        assert_eq!(
            (status, why.as_str()),
            (ActionStatus::Queued, "the stream is paused")
        );
        let (status, _) = late("st_off").await;
        assert_eq!(status, ActionStatus::Dropped);
        // A stream's own event (a verification) reaches neither a paused nor a disabled stream:
        // it is held until the stream is enabled.
        for id in ["st_paused", "st_off"] {
            let verification = PlannedDelivery {
                action: crate::stream_event::VERIFICATION_ACTION.into(),
                ..set_to(id)
            };
            assert!(matches!(
                attempts.readiness("acme", &verification).await,
                Readiness::Paused
            ));
            let (status, why) = attempts
                .set("acme", id, None, &verification)
                .await
                .expect_err("no request");
            assert_eq!(
                (status, why.as_str()),
                (ActionStatus::Queued, "the stream is paused"),
                "{id}"
            );
        }
        let (status, why) = late("st_gone").await;
        assert_eq!(
            (status, why.as_str()),
            (ActionStatus::Failed, "the stream was deleted")
        );
    }

    #[test]
    fn parses_retry_after() {
        assert_eq!(parse_retry_after("3"), Some(3000));
        assert_eq!(parse_retry_after(" 0 "), Some(0));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), Some(0));
        let later = std::time::SystemTime::now() + Duration::from_secs(120);
        let ms = parse_retry_after(&httpdate::fmt_http_date(later)).expect("date");
        assert!((110_000..=120_000).contains(&ms), "{ms}");
        assert_eq!(parse_retry_after("soon"), None);
    }

    #[test]
    fn classifies_answers() {
        assert_eq!(classify(200), ActionStatus::Delivered);
        assert_eq!(classify(204), ActionStatus::Delivered);
        assert_eq!(classify(429), ActionStatus::Queued);
        assert_eq!(classify(500), ActionStatus::Queued);
        assert_eq!(classify(503), ActionStatus::Queued);
        assert_eq!(classify(400), ActionStatus::Failed);
        assert_eq!(classify(404), ActionStatus::Failed);
        assert_eq!(classify(302), ActionStatus::Failed);
    }
}
