//! An `ssf` source's Security Event Tokens, pushed (RFC 8935) or polled (RFC 8936). [`take`]
//! checks a SET (`source::set`, its key from the source's cached JWK Set) before anything of it
//! is stored, records SSF's own events (verification, stream updated; for a subscribed source
//! in its subscription too) instead of deciding them, refuses the whole SET if one of its events
//! cannot be taken, and claims it once under (source, `iss`, `jti`), whatever events it holds:
//! a SET pushed again, or both pushed and polled, or its `jti` sent again with another event, is
//! a duplicate. [`push`] answers a push: 202 once every claim is durable, RFC 8935's
//! `{"err","description"}` for a refused SET, 503 when the store or the JWK Set failed.

use axum::http::header::{CONTENT_LANGUAGE, CONTENT_TYPE};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use idem_schemas::timefmt::now_ms;
use idem_schemas::SetError;
use serde_json::Value;

use super::subscribe;
use super::take::{self, Fate, Ready};
use crate::config::Tenant;
use crate::http::ingest::read_body;
use crate::http::metrics::{SOURCE_DELIVERIES, SOURCE_EVENTS};
use crate::http::problem::{ApiError, Kind};
use crate::http::refusals;
use crate::http::{App, Live};
use crate::source::events;
use crate::source::jwks::Missing;
use crate::source::runtime::SourceState;
use crate::source::set::{self, Err, Expect, SetRefusal};
use crate::source::verify::{self, Received};
use crate::source::{Delivery, Source};

/// SSF's verification event.
pub const VERIFICATION: &str = "https://schemas.openid.net/secevent/ssf/event-type/verification";
/// SSF's stream-updated event.
pub const STREAM_UPDATED: &str =
    "https://schemas.openid.net/secevent/ssf/event-type/stream-updated";

/// The longest status or reason recorded of a stream-updated SET.
const MAX_STATUS_TEXT: usize = 256;

/// The media type of a pushed SET.
pub const SECEVENT_JWT: &str = "application/secevent+jwt";

/// Why a SET was not taken.
#[derive(Debug)]
pub enum NotTaken {
    /// It is refused, for good: RFC 8935's code and why.
    Refused(SetRefusal),
    /// It could not be taken now (the store, the JWK Set): the transmitter sends it again.
    Later(ApiError),
}

impl From<SetRefusal> for NotTaken {
    fn from(refusal: SetRefusal) -> Self {
        NotTaken::Refused(refusal)
    }
}

/// Checks and claims the SET `token` of `tenant`'s `source`; once it returns `Ok`, every event
/// of it is claimed durably (or was before).
pub async fn take(
    app: &App,
    tenant: &Tenant,
    source: &Source,
    state: &SourceState,
    token: &str,
) -> Result<Vec<Fate>, NotTaken> {
    let (Some(ssf), Some(keys)) = (&source.ssf, &state.keys) else {
        return Err(NotTaken::Later(ApiError::new(
            Kind::Internal,
            "the source is not an ssf source",
        )));
    };
    let live = app.live.load();
    let skew = live.config.signatures.tolerance;
    let claim_life = live
        .config
        .engine
        .idempotency
        .key_ttl
        .max(idem_actors::signals::EVENT_CLAIM_MIN);
    let discovered;
    let audience: &[String] = match &ssf.audience {
        Some(written) => std::slice::from_ref(written),
        None => {
            discovered = match state.audience() {
                Some(aud) => aud,
                None => stream_audience(app, tenant, source, state).await?,
            };
            &discovered
        }
    };
    let expect = Expect {
        issuer: &ssf.issuer,
        audience,
        algorithms: &ssf.algorithms,
        now_secs: (now_ms() / 1000) as i64,
        max_age: ssf.max_age(claim_life, skew),
        skew,
    };
    let header = set::header(token, &expect)?;
    let kid = header.kid.as_deref().unwrap_or_default();
    let key = keys.key(kid).await.map_err(|missing| match missing {
        Missing::Unknown => NotTaken::Refused(SetRefusal::new(
            Err::InvalidKey,
            "no key of the transmitter's JWK Set has this kid",
        )),
        Missing::Fetch(e) => {
            tracing::warn!(tenant = %tenant.name, source = %source.name, error = %e, "a JWK Set fetch failed");
            NotTaken::Later(ApiError::new(
                Kind::Unavailable,
                "the transmitter's JWK Set could not be fetched; send the SET again",
            ))
        }
    })?;
    let set = match set::verify(token, &header, &key, &expect) {
        // The stream's `aud` may have changed (a new stream): read again, at most once per
        // `jwks_refetch`, as an unknown key is.
        Err(refusal)
            if refusal.err == Err::InvalidAudience
                && ssf.audience.is_none()
                && state.audience_older_than(ssf.jwks_refetch) =>
        {
            let again = stream_audience(app, tenant, source, state).await?;
            let expect = Expect {
                audience: &again,
                ..expect.clone()
            };
            set::verify(token, &header, &key, &expect)?
        }
        other => other?,
    };
    let events = events::of_set(&set);
    let mut ready = Vec::with_capacity(events.len());
    let mut own = 0;
    for event in &events {
        let uri = event.event_type.as_deref().unwrap_or_default();
        let payload = set.claims.get("events").and_then(|e| e.get(uri));
        let text = |name: &str| payload.and_then(|p| p.get(name)).and_then(Value::as_str);
        match uri {
            VERIFICATION => {
                if ssf.transmitter.is_some() {
                    verified(app, tenant, source, &set.claims, text("state")).await?;
                }
                state.verified(text("state"));
                own += 1;
            }
            STREAM_UPDATED => {
                if ssf.transmitter.is_some() {
                    updated(
                        app,
                        tenant,
                        source,
                        &set.claims,
                        text("status"),
                        text("reason"),
                    )
                    .await?;
                }
                state.stream_updated(text("status"), text("reason"));
                own += 1;
            }
            _ => match take::prepare(source, event) {
                Ready::Refused(why) => return Err(SetRefusal::new(Err::InvalidRequest, why).into()),
                other => ready.push(other),
            },
        }
    }
    // Every event can be taken: now they are claimed, all at once (within the tenant's rate).
    let mut taken = vec![Fate::Ignored; own];
    let mut to_claim = Vec::new();
    for r in ready {
        match r {
            // A SET is one claim, by its `iss` and `jti`, whatever it holds: its first event the
            // map routes is its signal, and the others it holds are taken as part of it.
            Ready::Claim(prepared) if to_claim.is_empty() => to_claim.push(prepared),
            Ready::Claim(_) => taken.push(Fate::REPEATED),
            _ => taken.push(Fate::Ignored),
        }
    }
    let claimed = take::claim_all(app, tenant, source, to_claim).await;
    let mut failed = None;
    for outcome in claimed.outcomes.into_iter().flatten() {
        match outcome {
            Ok(t) => taken.push(t),
            Err(problem) => {
                failed.get_or_insert(problem);
            }
        }
    }
    if let (None, Some(limited)) = (&failed, claimed.limited) {
        // Not all of it is claimed, so it is not acknowledged: the transmitter sends it again.
        return Err(NotTaken::Later(limited));
    }
    if let Some(problem) = failed {
        SOURCE_EVENTS.with_label_values(&["ssf", "failed"]).inc();
        // Not durable: a 503, so the transmitter sends the SET again (a duplicate then for the
        // events already claimed).
        return Err(NotTaken::Later(ApiError::new(
            Kind::Unavailable,
            problem.detail().to_string(),
        )));
    }
    for t in &taken {
        SOURCE_EVENTS.with_label_values(&["ssf", t.label()]).inc();
        state.count(*t);
    }
    Ok(taken)
}

/// A verification SET of a subscribed source: with the `state` idem asked for, for its stream,
/// it verifies the stream (durably); with another `state` or for another stream it is refused;
/// without `state` (unsolicited) it is acknowledged and verifies nothing.
async fn verified(
    app: &App,
    tenant: &Tenant,
    source: &Source,
    claims: &Value,
    state: Option<&str>,
) -> Result<(), NotTaken> {
    let Some(state) = state else {
        return Ok(());
    };
    let unavailable = store_failed;
    let streams = app.engine.streams();
    let record = streams
        .subscription(&tenant.name, &source.name)
        .await
        .map_err(unavailable)?
        .unwrap_or_default();
    let stream = stream_of(claims);
    let ours = record.stream_id.is_some() && stream == record.stream_id.as_deref();
    if !ours || record.verify_state.as_deref() != Some(state) {
        return Err(NotTaken::Refused(SetRefusal::new(
            Err::InvalidState,
            "a verification with a state idem did not ask for, or for another stream",
        )));
    }
    let mut now = record.clone();
    now.verify_state = None;
    now.verified_at_ms = Some(now_ms());
    now.last_error = None;
    now.version += 1;
    // Lost to a concurrent write: the transmitter sends it again (or the next verification).
    if !streams
        .put_subscription(&tenant.name, &source.name, &now)
        .await
        .map_err(unavailable)?
    {
        return Err(NotTaken::Later(ApiError::new(
            Kind::Unavailable,
            "the subscription changed meanwhile; send the SET again",
        )));
    }
    Ok(())
}

/// The `aud` of the stream recorded for a subscribed source with no `audience` written, read
/// from the transmitter now and kept; none recorded yet, or the transmitter failing: the SET
/// is sent again later.
async fn stream_audience(
    app: &App,
    tenant: &Tenant,
    source: &Source,
    state: &SourceState,
) -> Result<std::sync::Arc<[String]>, NotTaken> {
    let later = |why: String| {
        tracing::warn!(tenant = %tenant.name, source = %source.name, why, "the stream's aud could not be read");
        NotTaken::Later(ApiError::new(
            Kind::Unavailable,
            "the stream's audience could not be read from the transmitter; send the SET again",
        ))
    };
    let Some(access) = &state.access else {
        return Err(later("the source is not subscribed".into()));
    };
    let record = app
        .engine
        .streams()
        .subscription(&tenant.name, &source.name)
        .await
        .map_err(store_failed)?
        .unwrap_or_default();
    let Some(id) = record
        .stream_id
        .filter(|_| record.transmitter == access.issuer())
    else {
        return Err(later("no stream is recorded yet".into()));
    };
    let metadata = subscribe::metadata(access)
        .await
        .map_err(|e| later(e.to_string()))?;
    let stream = subscribe::read_stream(access, &metadata, &id)
        .await
        .map_err(|e| later(e.to_string()))?
        .ok_or_else(|| later("the transmitter has no such stream".into()))?;
    let aud: std::sync::Arc<[String]> = match &stream["aud"] {
        Value::String(one) => vec![one.clone()].into(),
        Value::Array(many) => many
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect(),
        _ => return Err(later("the stream has no aud".into())),
    };
    if aud.is_empty() {
        return Err(later("the stream's aud is empty".into()));
    }
    state.set_audience(aud.clone());
    Ok(aud)
}

/// The stream a SET of SSF's own names in its `sub_id` (SSF §8.1.4.1: `opaque`, the id).
fn stream_of(claims: &Value) -> Option<&str> {
    claims
        .pointer("/sub_id/id")
        .or_else(|| claims.pointer("/sub_id/stream_id"))
        .and_then(Value::as_str)
}

/// The answer when the store failed on a subscription: the transmitter sends the SET again.
fn store_failed(e: idem_actors::StoreError) -> NotTaken {
    tracing::error!(error = %e, "the store failed on a subscription");
    NotTaken::Later(ApiError::new(
        Kind::Unavailable,
        "the store cannot be reached; send the SET again",
    ))
}

/// A stream-updated SET of a subscribed source: for its recorded stream, the `status` (and
/// `reason`) it announces becomes the subscription's (durably); for another stream, or without
/// a status, it changes nothing.
async fn updated(
    app: &App,
    tenant: &Tenant,
    source: &Source,
    claims: &Value,
    status: Option<&str>,
    reason: Option<&str>,
) -> Result<(), NotTaken> {
    let Some(status) = status else {
        return Ok(());
    };
    let streams = app.engine.streams();
    let Some(record) = streams
        .subscription(&tenant.name, &source.name)
        .await
        .map_err(store_failed)?
    else {
        return Ok(());
    };
    if record.stream_id.is_none() || stream_of(claims) != record.stream_id.as_deref() {
        return Ok(());
    }
    let cut = |t: &str| t.chars().take(MAX_STATUS_TEXT).collect::<String>();
    let mut now = record.clone();
    now.status = Some(cut(status));
    now.reason = reason.map(cut);
    if now == record {
        return Ok(());
    }
    now.version += 1;
    // Lost to a concurrent write: the transmitter sends it again.
    if !streams
        .put_subscription(&tenant.name, &source.name, &now)
        .await
        .map_err(store_failed)?
    {
        return Err(NotTaken::Later(ApiError::new(
            Kind::Unavailable,
            "the subscription changed meanwhile; send the SET again",
        )));
    }
    tracing::info!(tenant = %tenant.name, source = %source.name, status = %now.status.as_deref().unwrap_or_default(), "the transmitter announced the stream's status");
    Ok(())
}

/// RFC 8935 §2.3's answer to a refused SET.
pub fn refused(refusal: &SetRefusal) -> Response {
    let body = SetError {
        err: refusal.err.as_str().to_string(),
        description: refusal.description.clone(),
    };
    let mut response = (StatusCode::BAD_REQUEST, axum::Json(body)).into_response();
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(CONTENT_LANGUAGE, HeaderValue::from_static("en"));
    response
}

/// A pushed SET (RFC 8935).
pub async fn push(
    app: &App,
    live: &Live,
    tenant: &Tenant,
    source: &Source,
    state: &SourceState,
    parts: &axum::http::request::Parts,
    body: axum::body::Body,
) -> Response {
    let set_push = super::is_set_push(&parts.headers);
    let mut why = None;
    let outcome = async {
        let headers = &parts.headers;
        let limit = super::body_limit(set_push);
        let bytes = read_body(headers, body, live.config.http.read_timeout, limit)
            .await
            .map_err(NotTaken::Later)?;
        // Authenticated first, as every source is: the form of what came is looked at after.
        verify::check(
            source,
            &Received {
                headers,
                uri: &parts.uri,
                body: &bytes,
                now_secs: (now_ms() / 1000) as i64,
                tolerance_secs: 0,
                base_url: &super::base_url(app, live, source),
            },
        )
        .map_err(|refused| {
            why = Some(refused);
            match set_push {
                true => NotTaken::Refused(SetRefusal::new(
                    Err::AuthenticationFailed,
                    super::UNAUTHENTICATED,
                )),
                false => NotTaken::Later(ApiError::new(
                    Kind::SourceUnauthenticated,
                    super::UNAUTHENTICATED,
                )),
            }
        })?;
        let subscribed = source.ssf.as_ref().and_then(|s| s.transmitter.as_ref());
        if subscribed.is_some_and(|s| s.delivery == Delivery::Push) && source.secrets.is_empty() {
            // Pushed by the stream idem made: with the authorization_header idem gave it.
            let given = headers
                .get(axum::http::header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok());
            let known = subscribe::push_authorization(app, &tenant.name, &source.name, given)
                .await
                .map_err(|e| {
                    tracing::error!(error = %e, "the store failed on a subscription");
                    NotTaken::Later(ApiError::new(
                        Kind::Unavailable,
                        "the store cannot be reached; send the SET again",
                    ))
                })?;
            if !known {
                why = Some(verify::Refused::Mismatch("Authorization"));
                return Err(match set_push {
                    true => NotTaken::Refused(SetRefusal::new(
                        Err::AuthenticationFailed,
                        super::UNAUTHENTICATED,
                    )),
                    false => NotTaken::Later(ApiError::new(
                        Kind::SourceUnauthenticated,
                        super::UNAUTHENTICATED,
                    )),
                });
            }
        }
        if !set_push {
            return Err(NotTaken::Refused(SetRefusal::new(
                Err::InvalidRequest,
                format!("a SET is pushed as {SECEVENT_JWT}"),
            )));
        }
        let token = std::str::from_utf8(&bytes)
            .map_err(|_| SetRefusal::new(Err::InvalidRequest, "a SET is ASCII"))?
            .trim();
        take(app, tenant, source, state, token).await
    }
    .await;
    let label = match &outcome {
        Ok(_) => "ok",
        Err(NotTaken::Refused(r)) => r.err.as_str(),
        Err(NotTaken::Later(problem)) => problem.slug(),
    };
    SOURCE_DELIVERIES.with_label_values(&["ssf", label]).inc();
    match outcome {
        // Every event of the SET is claimed durably, now or before: only then the 202.
        Ok(_) => StatusCode::ACCEPTED.into_response(),
        Err(NotTaken::Refused(refusal)) => {
            state.count(Fate::Refused);
            SOURCE_EVENTS.with_label_values(&["ssf", "refused"]).inc();
            if refusals::note(refusals::SSF, refusal.err.as_str()) {
                let description = why.map_or(refusal.description.clone(), |w| w.to_string());
                tracing::info!(tenant = %tenant.name, source = %source.name, err = refusal.err.as_str(), description, "a SET was refused");
            }
            refused(&refusal)
        }
        Err(NotTaken::Later(problem)) => {
            if problem.problem().status < 500 && refusals::note(refusals::SSF, problem.slug()) {
                let detail = why.map_or(problem.detail().to_string(), |w| w.to_string());
                tracing::info!(tenant = %tenant.name, source = %source.name, reason = problem.slug(), detail, "a SET push was refused");
            }
            problem.into_response()
        }
    }
}
