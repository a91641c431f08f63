//! `POST /v1/signals`. Checks run in the documented order, each refusal before the claim
//! leaving nothing stored: (1) key syntax, content type, size, JSON shape; (2) API key, then
//! signature and timestamp; then the engine's: (3) a playbook for the type; (4) the claim, then
//! the playbook runs. This handler maps what the engine answers (first processing, replay,
//! 409 or 422) to the response.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use idem_actors::{By, Outcome, RegistryError, SignalError};
use idem_schemas::canonical;
use idem_schemas::timefmt::{is_rfc3339, now_ms};
use idem_schemas::{SignalRequest, StoredResponse};
use serde::Deserialize;
use serde_json::Value;
use tracing::Instrument;

use crate::http::auth::verify_signature;
use crate::http::metrics::SIGNALS;
use crate::http::problem::{ApiError, Kind};
use crate::http::submit::submit;
use crate::http::App;
use crate::key;

/// The largest body accepted.
pub const MAX_BODY: usize = 64 * 1024;

/// An oversized body up to this many bytes is drained before the 413 is sent.
const DRAIN_LIMIT: u64 = 2 * 1024 * 1024;

/// The handler. It takes the request whole: axum's `HeaderMap` extractor would clone every
/// header (a copy and a free per request, for nothing).
pub async fn ingest(State(app): State<Arc<App>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let (outcome, response) = match handle(&app, &parts.headers, body).await {
        Ok((outcome, response)) => (outcome, response),
        Err(problem) => (problem.slug(), problem.into_response()),
    };
    SIGNALS.with_label_values(&[outcome]).inc();
    response
}

/// The response, and the outcome it is counted under.
type Handled = (&'static str, Response);

async fn handle(app: &App, headers: &HeaderMap, body: Body) -> Result<Handled, ApiError> {
    // The configuration in force for the whole request, even if a reload lands meanwhile.
    let live = app.live.load_full();
    // 1. Syntax: nothing about the sender is known yet, nothing is stored.
    let key = key::parse(headers)
        .map_err(|e| ApiError::new(Kind::InvalidIdempotencyKey, e.to_string()))?;
    // Two credentials: the one a gateway in front checked may not be the one idem would use.
    if headers
        .get_all(header::AUTHORIZATION)
        .iter()
        .nth(1)
        .is_some()
    {
        return Err(ApiError::new(
            Kind::RepeatedHeader,
            "send one Authorization header, not two",
        ));
    }
    require_json(headers)?;
    let bytes = read_body(headers, body, live.config.http.read_timeout, MAX_BODY).await?;
    let (value, signal) = parse_signal(&bytes)?;

    // 2. Authentication: an unauthenticated request never occupies a key.
    let config = &live.config;
    let tenant = live.api_keys.authenticate(headers)?;
    let tenant = &*tenant;
    let now = now_ms();
    let signed_id = verify_signature(
        tenant,
        headers,
        &bytes,
        (now / 1000) as i64,
        config.signatures.tolerance.as_secs(),
    )?;
    if let Some(rate) = tenant.rate_limit {
        app.limiter.take(&tenant.name, rate).map_err(|wait| {
            ApiError::new(
                Kind::RateLimited,
                format!(
                    "tenant {} may post {rate} signals per second; retry after {wait} s",
                    tenant.name
                ),
            )
            .retry_after(wait)
        })?;
    }
    if let (Some(id), Some(key)) = (signed_id, key.as_deref()) {
        if id != key {
            return Err(ApiError::new(
                Kind::WebhookIdMismatch,
                "on a signed request, webhook-id must equal Idempotency-Key so the signature covers the key",
            ));
        }
    }
    // A signed request is claimed under its webhook-id: a sender keeps it across its retries, so
    // a retry, and a captured request sent again, is a replay rather than a new decision.
    let key = key.as_deref().or(signed_id);

    // 3. The playbook, 4. the claim, then the playbook runs: the engine's. Per-request spans
    // and events are at debug level: at info, a span's fields are formatted for every request,
    // duplicates included, for events that are rare.
    let span = tracing::debug_span!("signal", tenant = %tenant.name, keyed = key.is_some());
    let wait = crate::prefer::wait(headers)
        .and_then(|seconds| crate::prefer::applied(seconds, config.engine.idempotency.max_wait));
    let by = By::Request {
        key,
        body: &value,
        wait,
    };
    let outcome = submit(app, &live, tenant, signal, by)
        .instrument(span)
        .await
        .map_err(|e| refused(&tenant.name, e))?;
    Ok((outcome.label(), answer(outcome, wait)?))
}

/// The answer to what the engine made of a signal. `wait` is how long it could wait for an
/// in-flight first request, as applied.
fn answer(outcome: Outcome, wait: Option<std::time::Duration>) -> Result<Response, ApiError> {
    let waited = |mut r: Response| {
        if let Some(value) = wait
            .map(crate::prefer::applied_header)
            .and_then(|v| HeaderValue::from_str(&v).ok())
        {
            r.headers_mut().insert("preference-applied", value);
        }
        r
    };
    Ok(match outcome {
        Outcome::Decided { response, .. } => stored(&response, false),
        Outcome::Deduplicated { response, waited: w } => {
            let mut r = stored(&response, true);
            r.headers_mut()
                .insert("idem-deduplicated", HeaderValue::from_static("subject"));
            if w {
                waited(r)
            } else {
                r
            }
        }
        Outcome::Replayed {
            response,
            waited: false,
        } => stored(&response, true),
        Outcome::Replayed {
            response,
            waited: true,
        } => waited(stored(&response, true)),
        Outcome::InFlight => {
            return Err(ApiError::new(
                Kind::KeyInFlight,
                "a request with this Idempotency-Key is still being processed; retry after a moment",
            ))
        }
        Outcome::Mismatch => {
            return Err(ApiError::new(
                Kind::KeyReused,
                "this Idempotency-Key was used with a different payload; use a new key for a new signal",
            ))
        }
    })
}

/// The refusal of `tenant`'s signal that the engine could not answer, as the problem named by
/// the error's label.
pub(crate) fn refused(tenant: &str, e: SignalError) -> ApiError {
    let problem = match &e {
        SignalError::NoPlaybook(signal_type) => ApiError::new(
            Kind::UnknownSignalType,
            format!("tenant {tenant} has no playbook for signal type {signal_type:?}"),
        ),
        SignalError::Decide(_) | SignalError::Response(_) => {
            ApiError::new(Kind::Internal, e.to_string())
        }
        SignalError::Streams(why) => {
            tracing::error!(%tenant, error = %why, "the streams could not be read");
            ApiError::new(
                Kind::Unavailable,
                "the tenant's Shared Signals streams could not be read; retry with the same key",
            )
        }
        SignalError::History(why) => {
            tracing::error!(%tenant, error = %why, "the subject's history could not be read");
            ApiError::new(
                Kind::Unavailable,
                "the subject's history could not be read; retry with the same key",
            )
        }
        SignalError::Store(_) | SignalError::Claim(_) => {
            tracing::error!(%tenant, error = %e, "claim failed");
            ApiError::new(
                Kind::Internal,
                "the claim could not be stored; retry with the same key",
            )
        }
        SignalError::Actors(RegistryError::Unavailable) => ApiError::new(
            Kind::Unavailable,
            "the key's actor is restarting; retry with the same key",
        ),
        SignalError::Actors(RegistryError::Overloaded) => ApiError::new(
            Kind::Unavailable,
            "too many keys are in use right now (idempotency.max_live_actors); retry with the same key",
        ),
        SignalError::Actors(_) => {
            tracing::error!(%tenant, error = %e, "claim actor failed");
            ApiError::new(
                Kind::Internal,
                "processing failed; retry with the same key",
            )
        }
    };
    problem
}

/// A response from stored status and bytes.
pub(crate) fn stored(response: &StoredResponse, replayed: bool) -> Response {
    let status = StatusCode::from_u16(response.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let content_type = if status.is_success() {
        "application/json"
    } else {
        "application/problem+json"
    };
    let mut r = (status, response.body.clone()).into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if replayed {
        r.headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    // The trace the decision was made in (W3C Trace Context Level 2's `traceresponse`): a
    // replay names the first request's, so a client finds the original. Beside the stored
    // bytes, never in them.
    if let Some(value) = response
        .trace
        .and_then(|t| HeaderValue::from_str(&t.traceparent()).ok())
    {
        r.headers_mut().insert("traceresponse", value);
    }
    r
}

pub(crate) fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let ok = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"));
    if ok {
        Ok(())
    } else {
        Err(ApiError::new(
            Kind::UnsupportedMediaType,
            "send the signal as JSON with Content-Type: application/json",
        ))
    }
}

/// The body, at most `limit` bytes, read within `deadline`.
pub(crate) async fn read_body(
    headers: &HeaderMap,
    mut body: Body,
    deadline: std::time::Duration,
    limit: usize,
) -> Result<bytes::Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            Kind::PayloadTooLarge,
            format!("the body is larger than {limit} bytes"),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(n) = declared.filter(|&n| n > limit as u64) {
        // A body up to DRAIN_LIMIT is read and dropped before the refusal, so a client still
        // writing it reads the 413 instead of a broken pipe; a bigger one is cut off at once.
        if n <= DRAIN_LIMIT {
            let drain = async { while let Some(Ok(_)) = body.frame().await {} };
            let _ = tokio::time::timeout(deadline, drain).await;
        }
        return Err(too_large());
    }
    let read = tokio::time::timeout(deadline, axum::body::to_bytes(body, limit)).await;
    let read = read.map_err(|_| {
        ApiError::new(
            Kind::RequestTimeout,
            format!("the body did not arrive within {} s", deadline.as_secs()),
        )
    })?;
    read.map_err(|e| {
        let length_limit = std::error::Error::source(&e)
            .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
        if length_limit {
            too_large()
        } else {
            ApiError::new(
                Kind::MalformedJson,
                format!("the body could not be read: {e}"),
            )
        }
    })
}

/// Parses and validates a signal body: the JSON value (for the fingerprint) and the signal.
pub fn parse_signal(bytes: &[u8]) -> Result<(Value, SignalRequest), ApiError> {
    // A member named twice is refused: a gateway that reads the first would see another signal
    // than the one idem decides on.
    let value = canonical::parse(bytes).map_err(|e| match e {
        canonical::ParseError::Duplicate(_) => ApiError::new(Kind::InvalidSignal, e.to_string()),
        canonical::ParseError::Syntax(_) => ApiError::new(Kind::MalformedJson, e.to_string()),
    })?;
    if !value.is_object() {
        return Err(ApiError::new(
            Kind::InvalidSignal,
            "the body must be a JSON object like {\"type\": \"sim_swap\", \"subject\": \"...\"}",
        ));
    }
    let signal = SignalRequest::deserialize(&value)
        .map_err(|e| ApiError::new(Kind::InvalidSignal, format!("the signal is not valid: {e}")))?;
    let invalid = |detail: &str| Err(ApiError::new(Kind::InvalidSignal, detail));
    if signal.signal_type.is_empty() || signal.signal_type.len() > 128 {
        return invalid("type must be 1 to 128 characters");
    }
    if signal.subject.is_empty() {
        return invalid("subject must not be empty");
    }
    if signal
        .occurred_at
        .as_deref()
        .is_some_and(|t| !is_rfc3339(t))
    {
        return invalid("occurred_at must be an RFC 3339 date-time like 2026-11-29T17:54:32Z");
    }
    Ok((value, signal))
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_actors::playbook::DecideError;
    use idem_actors::StoreError;

    /// What spans and metrics name a failure by is the slug of the problem it is answered with.
    #[test]
    fn a_failure_is_answered_with_the_problem_its_label_names() {
        let json = serde_json::from_str::<Value>("{").expect_err("not JSON");
        let claim = idem_actors::claim::ClaimError::Fenced;
        let failures = [
            SignalError::NoPlaybook("sim_swap".into()),
            SignalError::Decide(DecideError::NoTransmitter),
            SignalError::Streams("down".into()),
            SignalError::Store(StoreError::Stopped),
            SignalError::Response(json),
            SignalError::Claim(std::sync::Arc::new(claim)),
            SignalError::Actors(RegistryError::ActorFailed),
            SignalError::Actors(RegistryError::Unavailable),
            SignalError::Actors(RegistryError::Overloaded),
        ];
        for failure in failures {
            let label = failure.label();
            assert_eq!(refused("acme", failure).slug(), label);
        }
    }
}
