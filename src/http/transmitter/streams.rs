//! Stream management (SSF §8.1) under `/ssf/{tenant}/streams`: create, read or list, update,
//! replace and delete a stream; read and set its status (answered, not announced: nothing
//! reaches a paused or disabled stream, and enabling it sends what it held at once); add and
//! remove subjects; ask for a verification SET. Each call
//! carries a receiver's token and reaches that receiver's streams only (another's is as missing
//! as a missing one). A change is made from the stored version and written over it alone,
//! durably, before it is answered; one that lost a race with another node is made again from
//! what that node wrote.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequestParts, Query, RawPathParams, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use idem_schemas::timefmt::now_ms;
use idem_schemas::{Stream, StreamConfig, StreamMethod, StreamState};
use ring::rand::{SecureRandom, SystemRandom};
use serde_json::Value;

use super::{find, issuer, receiver};
use crate::config::Tenant;
use crate::http::problem::{ApiError, Kind};
use crate::http::query;
use crate::http::{App, Live};
use crate::transmitter::stream::{self, InvalidStream, StreamContext};
use crate::transmitter::Transmitter;
use idem_actors::set::stream_owner;
use idem_actors::store::{Created, STREAMS_PER_RECEIVER};
use idem_actors::stream_event::StreamEvent;
use idem_actors::StreamsError;

/// The most streams one receiver may have: each is a SET per decision it asks for.
pub const MAX_STREAMS: usize = STREAMS_PER_RECEIVER;
/// The largest request body, in bytes.
const MAX_BODY: usize = 64 * 1024;
/// How often a change is made again after losing a race to another writer, each time after a
/// random pause of up to twice the one before (see [`lost_race_pause`]): writers racing on one
/// stream (one per node, say) fall out of step instead of losing to each other again.
const ATTEMPTS: usize = 10;

/// A receiver of a tenant's transmitter, authenticated by the access token its
/// `Authorization: Bearer` header carries, with the scope the request needs (401 or 403
/// otherwise; 404 for a tenant that is no transmitter), with the configuration in force when the request came: the extractor of every
/// stream route.
pub struct ReceiverAuth {
    live: Arc<Live>,
    /// The tenant.
    pub tenant: String,
    /// The receiver's `client_id`.
    pub receiver: String,
}

impl FromRequestParts<Arc<App>> for ReceiverAuth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &Arc<App>) -> Result<Self, ApiError> {
        let not_found = || ApiError::new(Kind::NotFound, "no Shared Signals transmitter here");
        let params = RawPathParams::from_request_parts(parts, app)
            .await
            .map_err(|_| not_found())?;
        let tenant = params
            .iter()
            .find_map(|(name, value)| (name == "tenant").then_some(value))
            .ok_or_else(not_found)?;
        let live = app.live.load_full();
        let (t, ssf) = find(&live, tenant)?;
        let needed = super::needed(&parts.method, parts.uri.path());
        let asked = (&parts.headers, parts.uri.query());
        let receiver = receiver(app, t, ssf, asked, needed)?;
        Ok(ReceiverAuth {
            tenant: t.name.clone(),
            live: live.clone(),
            receiver,
        })
    }
}

impl ReceiverAuth {
    fn parts(&self) -> (&Tenant, &Transmitter) {
        let tenant = &self.live.config.tenants[&self.tenant];
        match &tenant.ssf {
            Some(ssf) => (tenant, ssf),
            None => unreachable!("authenticated against this tenant's transmitter"),
        }
    }

    /// The stream's configuration as this receiver reads it.
    fn view(&self, app: &App, stream: &Stream) -> StreamConfig {
        let (tenant, ssf) = self.parts();
        let issuer = issuer(app, &self.live, &self.tenant);
        let events_supported = stream::events_supported(&tenant.playbooks);
        let poll_base = format!("{}/ssf/{}/streams", app.base_url(&self.live), self.tenant);
        let audience = ssf
            .receivers
            .get(&self.receiver)
            .map(|r| r.audience.as_str())
            .unwrap_or_default();
        stream::view(
            stream,
            &StreamContext {
                issuer: &issuer,
                audience,
                poll_base: &poll_base,
                min_verification_interval: ssf.min_verification_interval,
                events_supported: &events_supported,
            },
        )
    }

    /// Tells this receiver's stream `id` of `event` by a SET, queued durably.
    async fn tell(&self, app: &App, id: &str, event: StreamEvent) -> Result<(), ApiError> {
        let (_, ssf) = self.parts();
        let transmitter = super::of(app, &self.live, &self.tenant)
            .ok_or_else(|| ApiError::new(Kind::Internal, "the transmitter has no signing key"))?;
        let audience = ssf
            .receivers
            .get(&self.receiver)
            .map(|r| r.audience.as_str())
            .unwrap_or_default();
        match app
            .engine
            .streams()
            .tell(&self.tenant, &transmitter, audience, id, &event)
            .await
        {
            Ok(_) => Ok(()),
            Err(StreamsError::Store(e)) => Err(unavailable(e)),
            Err(e) => {
                tracing::error!(error = %e, stream = id, "a stream's own SET was not made");
                Err(ApiError::new(Kind::Internal, "the SET could not be made"))
            }
        }
    }

    /// This receiver's stream `id`, or 404.
    pub(super) async fn stream(&self, app: &App, id: &str) -> Result<Stream, ApiError> {
        app.engine
            .streams()
            .get(&self.tenant, id)
            .await
            .map_err(unavailable)?
            .filter(|s| s.receiver == self.receiver)
            .ok_or_else(|| ApiError::new(Kind::NotFound, format!("no stream {id:?}")))
    }

    /// Changes this receiver's stream `id` by `change` (none: nothing to write), over the
    /// stored version; what it was changed from, and what it is then.
    async fn change(
        &self,
        app: &App,
        id: &str,
        change: impl Fn(&Stream) -> Result<Option<Stream>, ApiError>,
    ) -> Result<(Stream, Stream), ApiError> {
        for attempt in 0..ATTEMPTS {
            if attempt > 0 {
                tokio::time::sleep(lost_race_pause(attempt)).await;
            }
            let stored = self.stream(app, id).await?;
            let Some(next) = change(&stored)? else {
                return Ok((stored.clone(), stored));
            };
            if app
                .engine
                .streams()
                .put(&self.tenant, &next)
                .await
                .map_err(unavailable)?
            {
                return Ok((stored, next));
            }
        }
        Err(ApiError::new(
            Kind::Unavailable,
            "the stream is being changed by others; retry",
        ))
    }

    /// Refuses a push to where this receiver may not send.
    fn may_push(&self, asked: &stream::Asked) -> Result<(), ApiError> {
        let (_, ssf) = self.parts();
        let url = asked
            .delivery
            .as_ref()
            .and_then(|d| d.endpoint_url.as_deref());
        let allowed = ssf.receivers.get(&self.receiver);
        match (url, allowed) {
            (Some(url), Some(receiver)) if !receiver.may_push_to(url) => Err(ApiError::new(
                Kind::InvalidStream,
                "delivery.endpoint_url is not among where this receiver's streams may push \
                 (its endpoints; without them, https URLs outside idem's own network: no \
                 loopback, private or link-local address, no localhost)",
            )),
            _ => Ok(()),
        }
    }

    fn seal(&self, app: &App, id: &str, header: &str) -> Result<Vec<u8>, InvalidStream> {
        app.engine
            .streams()
            .sealer()
            .seal(&stream_owner(&self.tenant, id), header.as_bytes())
            .map_err(|e| InvalidStream(e.to_string()))
    }
}

pub(super) fn unavailable(e: idem_actors::StoreError) -> ApiError {
    tracing::error!(error = %e, "the store failed on a stream");
    ApiError::new(Kind::Unavailable, "the store cannot be reached; retry")
}

fn invalid(e: InvalidStream) -> ApiError {
    ApiError::new(Kind::InvalidStream, e.0)
}

/// The JSON object a request carries, each of its objects naming a member once.
pub(crate) fn json_body(body: &Bytes) -> Result<Value, ApiError> {
    if body.len() > MAX_BODY {
        return Err(ApiError::new(
            Kind::PayloadTooLarge,
            format!("a stream request is at most {MAX_BODY} bytes"),
        ));
    }
    let value = serde_json::from_slice(body)
        .map_err(|e| ApiError::new(Kind::MalformedJson, format!("the body is not JSON: {e}")))?;
    match crate::http::unique_members::duplicated(body) {
        None => Ok(value),
        Some(member) => Err(ApiError::new(
            Kind::InvalidStream,
            format!("{member} is sent twice: send each member once"),
        )),
    }
}

/// The `stream_id` a request body names.
fn body_stream_id(body: &Value) -> Result<String, ApiError> {
    body.get("stream_id")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| ApiError::new(Kind::InvalidStream, "stream_id is required"))
}

/// The optional string member `name` of a request body, of at most 1024 bytes.
fn short_text(body: &Value, name: &str) -> Result<Option<String>, ApiError> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.len() <= 1024 => Ok(Some(s.clone())),
        Some(_) => Err(ApiError::new(
            Kind::InvalidStream,
            format!("{name} must be a string of at most 1024 bytes"),
        )),
    }
}

/// The `stream_id` a query names (required unless `optional`).
fn query_stream_id(q: &query::Query, optional: bool) -> Result<Option<String>, ApiError> {
    query::only(q, &["stream_id"])?;
    match q.get("stream_id") {
        Some(id) => Ok(Some(id.clone())),
        None if optional => Ok(None),
        None => Err(query::invalid("stream_id is required")),
    }
}

/// A new stream id: `st_` and 128 random bits.
fn new_id() -> Result<String, ApiError> {
    let mut bytes = [0u8; 16];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| ApiError::new(Kind::Internal, "no randomness for a stream id"))?;
    Ok(format!("st_{}", idem_schemas::lower_hex(&bytes)))
}

/// `POST /ssf/{tenant}/streams`: 201 with the new stream.
pub async fn create(
    State(app): State<Arc<App>>,
    caller: ReceiverAuth,
    body: Bytes,
) -> Result<Response, ApiError> {
    let asked = stream::asked(&json_body(&body)?).map_err(invalid)?;
    caller.may_push(&asked)?;
    let id = new_id()?;
    let made = stream::create(id.clone(), &caller.receiver, now_ms(), asked, |h| {
        caller.seal(&app, &id, h)
    })
    .map_err(invalid)?;
    // The store counts the receiver's streams and writes the new one as one step, so creates
    // racing on any number of nodes stop at the limit.
    match app
        .engine
        .streams()
        .create(&caller.tenant, &made)
        .await
        .map_err(unavailable)?
    {
        Created::Made => {}
        Created::Full => {
            return Err(ApiError::new(
                Kind::TooManyStreams,
                format!("a receiver has at most {MAX_STREAMS} streams: delete one first"),
            ))
        }
        Created::Taken => return Err(ApiError::new(Kind::Internal, "a new stream id was taken")),
    }
    Ok((StatusCode::CREATED, Json(caller.view(&app, &made))).into_response())
}

/// `GET /ssf/{tenant}/streams[?stream_id=]`: one stream, or all of the receiver's.
pub async fn read(
    State(app): State<Arc<App>>,
    caller: ReceiverAuth,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    match query_stream_id(&q, true)? {
        Some(id) => {
            let stream = caller.stream(&app, &id).await?;
            Ok(Json(caller.view(&app, &stream)).into_response())
        }
        None => {
            let streams: Vec<StreamConfig> = app
                .engine
                .streams()
                .list(&caller.tenant)
                .await
                .map_err(unavailable)?
                .iter()
                .filter(|s| s.receiver == caller.receiver)
                .map(|s| caller.view(&app, s))
                .collect();
            Ok(Json(streams).into_response())
        }
    }
}

/// `PATCH` (`whole` false) or `PUT` (`whole` true) `/ssf/{tenant}/streams`.
async fn change(
    app: Arc<App>,
    caller: ReceiverAuth,
    body: Bytes,
    whole: bool,
) -> Result<Response, ApiError> {
    let body = json_body(&body)?;
    let id = body_stream_id(&body)?;
    let asked = stream::asked(&body).map_err(invalid)?;
    caller.may_push(&asked)?;
    let (_, changed) = caller
        .change(&app, &id, |stored| {
            stream::change(stored, asked.clone(), whole, |h| caller.seal(&app, &id, h))
                .map(Some)
                .map_err(invalid)
        })
        .await?;
    Ok(Json(caller.view(&app, &changed)).into_response())
}

/// `PATCH /ssf/{tenant}/streams`: changes what the body names.
pub async fn update(
    State(app): State<Arc<App>>,
    caller: ReceiverAuth,
    body: Bytes,
) -> Result<Response, ApiError> {
    change(app, caller, body, false).await
}

/// `PUT /ssf/{tenant}/streams`: replaces every receiver-supplied property.
pub async fn replace(
    State(app): State<Arc<App>>,
    caller: ReceiverAuth,
    body: Bytes,
) -> Result<Response, ApiError> {
    change(app, caller, body, true).await
}

/// `DELETE /ssf/{tenant}/streams?stream_id=`: 204.
pub async fn delete(
    State(app): State<Arc<App>>,
    caller: ReceiverAuth,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let id = query_stream_id(&q, false)?.unwrap_or_default();
    caller.stream(&app, &id).await?;
    app.engine
        .streams()
        .delete(&caller.tenant, &id)
        .await
        .map_err(unavailable)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `GET /ssf/{tenant}/streams/status?stream_id=`.
pub async fn status(
    State(app): State<Arc<App>>,
    caller: ReceiverAuth,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let id = query_stream_id(&q, false)?.unwrap_or_default();
    let stream = caller.stream(&app, &id).await?;
    Ok(Json(stream::status_view(&stream)).into_response())
}

/// `POST /ssf/{tenant}/streams/status {"stream_id", "status", "reason"}`.
pub async fn set_status(
    State(app): State<Arc<App>>,
    caller: ReceiverAuth,
    body: Bytes,
) -> Result<Response, ApiError> {
    let body = json_body(&body)?;
    let id = body_stream_id(&body)?;
    let state = body
        .get("status")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::new(Kind::InvalidStream, "status is required"))
        .and_then(|s| stream::state(s).map_err(invalid))?;
    let reason = short_text(&body, "reason")?;
    let streams = app.engine.streams();
    // Begun before the stream is enabled: from then on, what it held is the walk's to send.
    let walk = (state == StreamState::Enabled).then(|| streams.walk_held(&caller.tenant, &id));
    let (was, changed) = caller
        .change(&app, &id, |stored| {
            Ok(Some(stream::with_state(stored, state, reason.clone())))
        })
        .await?;
    // The receiver made the change: it is answered, not announced. From now on nothing
    // reaches a paused or disabled stream (readiness reads the stream before each attempt).
    if was.state != state {
        let done = match (state, was.method) {
            // A poll stream's waiting SETs of decisions are dropped now, as a push stream's
            // are at once below.
            (StreamState::Disabled, StreamMethod::Poll) => {
                streams.drop_waiting(&caller.tenant, &id).await.map(drop)
            }
            // What a push stream held goes at once, not at its next look: sent once it is
            // enabled (oldest first, one at a time, after this answer), dropped (its own
            // events held again) once it is disabled.
            (StreamState::Enabled, StreamMethod::Push) => {
                if let Some(walk) = walk {
                    walk.spawn();
                }
                Ok(())
            }
            (StreamState::Disabled, StreamMethod::Push) => {
                streams.release(&caller.tenant, &id).await.map(drop)
            }
            _ => Ok(()),
        };
        if let Err(e) = done {
            tracing::error!(error = %e, stream = %id, "a stream's held SETs go at their next look");
        }
    }
    Ok(Json(stream::status_view(&changed)).into_response())
}

/// `POST /ssf/{tenant}/streams/verify {"stream_id", "state"}`: 204 once a verification SET
/// with that `state` is queued for the stream; 429 sooner than `min_verification_interval`
/// after the last one.
pub async fn verify(
    State(app): State<Arc<App>>,
    caller: ReceiverAuth,
    body: Bytes,
) -> Result<Response, ApiError> {
    let body = json_body(&body)?;
    let id = body_stream_id(&body)?;
    let state = short_text(&body, "state")?;
    let interval = caller.parts().1.min_verification_interval;
    let now = now_ms();
    // Recorded on the stream over its version: of two nodes asked at once, one verifies.
    caller
        .change(&app, &id, |stored| {
            stream::verified(stored, now, interval)
                .map(Some)
                .map_err(|wait| {
                    ApiError::new(
                        Kind::RateLimited,
                        format!(
                            "a stream is verified at most once every {} s; retry after {wait} s",
                            interval.as_secs()
                        ),
                    )
                    .retry_after(wait)
                })
        })
        .await?;
    caller
        .tell(&app, &id, StreamEvent::Verification { state })
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /ssf/{tenant}/streams/subjects:add` (200) and `…:remove` (204): `{"stream_id",
/// "subject"}`, the subject digested as signals' subjects are.
async fn subject(
    app: Arc<App>,
    caller: ReceiverAuth,
    body: Bytes,
    remove: bool,
) -> Result<Response, ApiError> {
    let body = json_body(&body)?;
    let id = body_stream_id(&body)?;
    let subject = body
        .get("subject")
        .and_then(crate::source::subject::of)
        .ok_or_else(|| {
            ApiError::new(
                Kind::InvalidStream,
                "subject must be a subject identifier (RFC 9493) or a non-empty string",
            )
        })?;
    let digest = app
        .engine
        .streams()
        .subject_digest(&caller.tenant, &subject);
    caller
        .change(&app, &id, |stored| {
            stream::with_subject(stored, digest, remove).map_err(invalid)
        })
        .await?;
    Ok(if remove {
        StatusCode::NO_CONTENT.into_response()
    } else {
        StatusCode::OK.into_response()
    })
}

/// `POST /ssf/{tenant}/streams/subjects:add`.
pub async fn add_subject(
    State(app): State<Arc<App>>,
    caller: ReceiverAuth,
    body: Bytes,
) -> Result<Response, ApiError> {
    subject(app, caller, body, false).await
}

/// `POST /ssf/{tenant}/streams/subjects:remove`.
pub async fn remove_subject(
    State(app): State<Arc<App>>,
    caller: ReceiverAuth,
    body: Bytes,
) -> Result<Response, ApiError> {
    subject(app, caller, body, true).await
}

/// The pause before attempt `attempt` (from 1) of a change that lost a race: a random part of
/// 2^attempt milliseconds, at most 256.
fn lost_race_pause(attempt: usize) -> std::time::Duration {
    let mut byte = [0u8; 1];
    // Without randomness every pause is the longest: slower, never wrong.
    let fraction = match ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut byte)
    {
        Ok(()) => f64::from(byte[0]) / 255.0,
        Err(_) => 1.0,
    };
    let most = (1u64 << attempt.min(8)) as f64;
    std::time::Duration::from_micros((most * fraction * 1000.0) as u64)
}
