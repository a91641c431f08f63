//! What a tenant asks of the stream idem made for one of its subscribed `ssf` sources, with
//! the tenant's Bearer key: `POST …/subscription {"status", "reason"}` asks the transmitter's
//! status endpoint to change the stream's status (SSF §8.1.2.2) and records the status it
//! answers; `DELETE …/subscription` deletes the stream at the transmitter (SSF §8.1.1.5) and
//! clears it from the record, so that no node uses it again and the next start (or a change of
//! the source's configuration) makes a new one; `POST …/subjects {"action", "subject",
//! "verified"}` calls the add or remove subject endpoint (SSF §§8.1.3.2–8.1.3.3) and answers its
//! status code. Each goes out with the source's token client (renewed once on a 401). Refused
//! in problem+json: no such source (404), a source without `transmitter` (409
//! `not-subscribed`), no stream recorded (409 `no-stream`), and a transmitter that fails or
//! refuses (502 `transmitter-failed`, naming what answered what).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use idem_schemas::{StreamStatusBody, SubjectChange, Subscription, SubscriptionChange};
use serde_json::{json, Value};

use super::subscribe::{self, call, endpoint, metadata, with_query, SubscribeError};
use crate::http::auth::TenantAuth;
use crate::http::problem::{ApiError, Kind};
use crate::http::App;
use crate::source::subscription::Metadata;
use crate::source::upstream::{Access, UpstreamError};
use crate::source::SourceKind;

/// The longest `reason` passed on.
const MAX_REASON: usize = 1024;

/// The stream statuses SSF knows.
const STATUSES: [&str; 3] = ["enabled", "paused", "disabled"];

/// A subscribed source's stream, found for a request.
struct Target {
    tenant: String,
    source: String,
    access: Arc<Access>,
    stream_id: String,
}

/// The stream of the source `path` names, for the caller's tenant.
async fn target(
    app: &App,
    caller: &crate::config::Tenant,
    live: &crate::http::Live,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Target, ApiError> {
    let (tenant, source) = super::find(live, path)?;
    if caller.name != tenant.name {
        return Err(ApiError::new(Kind::NotFound, "no such tenant or source"));
    }
    let subscribed = source.kind == SourceKind::Ssf
        && source.ssf.as_ref().is_some_and(|s| s.transmitter.is_some());
    let access = app.sources.of(&tenant.name, source).access.clone();
    let Some(access) = access.filter(|_| subscribed) else {
        return Err(ApiError::new(
            Kind::NotSubscribed,
            format!(
                "source {} has no transmitter: idem manages no stream for it",
                source.name
            ),
        ));
    };
    let record = app
        .engine
        .streams()
        .subscription(&tenant.name, &source.name)
        .await
        .map_err(unavailable)?
        .unwrap_or_default();
    let stream_id = record
        .stream_id
        .filter(|_| record.transmitter == access.issuer())
        .ok_or_else(|| {
            ApiError::new(
                Kind::NoStream,
                "no stream is recorded for this source at its transmitter: idem makes one at \
                 its start (see the status's subscription.last_error)",
            )
        })?;
    Ok(Target {
        tenant: tenant.name.clone(),
        source: source.name.clone(),
        access,
        stream_id,
    })
}

pub(super) fn unavailable(e: idem_actors::StoreError) -> ApiError {
    tracing::error!(error = %e, "the store failed on a subscription");
    ApiError::new(Kind::Unavailable, "the store cannot be reached; retry")
}

/// A failed call as answered: the transmitter's failures are 502, the store's 503.
fn failed(e: SubscribeError) -> ApiError {
    match e {
        SubscribeError::Store(e) => unavailable(e),
        SubscribeError::Raced => ApiError::new(
            Kind::Unavailable,
            "the subscription was changed meanwhile; retry",
        ),
        other => ApiError::new(Kind::TransmitterFailed, other.to_string()),
    }
}

/// `status`, answered by the transmitter's `what`, as an error naming it.
fn refused(what: &'static str, status: u16, body: &Value) -> ApiError {
    let error = body
        .get("error")
        .or_else(|| body.get("err"))
        .and_then(Value::as_str)
        .map(|e| e.chars().take(64).collect());
    ApiError::new(
        Kind::TransmitterFailed,
        UpstreamError::Status {
            what,
            status,
            error,
        }
        .to_string(),
    )
}

/// The JSON body of a request as `T`, refused in problem+json as a stream request is.
fn body_of<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    let value = crate::http::transmitter::streams::json_body(body)?;
    serde_json::from_value(value).map_err(|e| ApiError::new(Kind::InvalidStream, e.to_string()))
}

/// Changes the record of `target`'s source with `change` while it still names its stream,
/// over the version read (read again when another write came first).
async fn amend(
    app: &App,
    target: &Target,
    change: impl Fn(&mut Subscription),
) -> Result<(), ApiError> {
    let streams = app.engine.streams();
    for _ in 0..8 {
        let Some(mut record) = streams
            .subscription(&target.tenant, &target.source)
            .await
            .map_err(unavailable)?
        else {
            return Ok(());
        };
        if record.stream_id.as_deref() != Some(&target.stream_id) {
            // Made anew, or deleted, meanwhile: this change is not that stream's.
            return Ok(());
        }
        change(&mut record);
        record.version += 1;
        if streams
            .put_subscription(&target.tenant, &target.source, &record)
            .await
            .map_err(unavailable)?
        {
            return Ok(());
        }
    }
    Err(failed(SubscribeError::Raced))
}

/// The transmitter's metadata, for a request.
async fn metadata_of(target: &Target) -> Result<Metadata, ApiError> {
    metadata(&target.access).await.map_err(failed)
}

/// `POST /v1/sources/{tenant}/{source}/subscription {"status", "reason"}`: the stream's status
/// as the transmitter answers it, recorded.
pub async fn set_status(
    State(app): State<Arc<App>>,
    TenantAuth {
        tenant: caller,
        live,
    }: TenantAuth,
    path: Result<Path<(String, String)>, PathRejection>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let target = target(&app, &caller, &live, path).await?;
    let asked: SubscriptionChange = body_of(&body)?;
    if !STATUSES.contains(&asked.status.as_str()) {
        return Err(ApiError::new(
            Kind::InvalidStream,
            format!(
                "status is enabled, paused or disabled, not {:?}",
                asked.status
            ),
        ));
    }
    if asked.reason.as_ref().is_some_and(|r| r.len() > MAX_REASON) {
        return Err(ApiError::new(
            Kind::InvalidStream,
            format!("reason is at most {MAX_REASON} bytes"),
        ));
    }
    let metadata = metadata_of(&target).await?;
    let at = endpoint(&metadata.status_endpoint, "status_endpoint").map_err(failed)?;
    let mut request = json!({"stream_id": target.stream_id, "status": asked.status});
    if let Some(reason) = &asked.reason {
        request["reason"] = json!(reason);
    }
    let what = "the status endpoint";
    let (status, mut answer) = call(
        &target.access,
        what,
        reqwest::Method::POST,
        at,
        Some(&request),
    )
    .await
    .map_err(failed)?;
    if !(200..300).contains(&status) {
        return Err(refused(what, status, &answer));
    }
    if answer["status"].as_str().is_none() {
        // Accepted without the status in the answer (a 202, a 204): read as it stands now.
        let url = with_query(at, "stream_id", &target.stream_id);
        let (read, body) = call(&target.access, what, reqwest::Method::GET, &url, None)
            .await
            .map_err(failed)?;
        if read != 200 {
            return Err(refused(what, read, &body));
        }
        answer = body;
    }
    let Some(now) = answer["status"].as_str().map(str::to_string) else {
        return Err(ApiError::new(
            Kind::TransmitterFailed,
            "the status endpoint answered no status",
        ));
    };
    let reason = answer["reason"]
        .as_str()
        .map(|r| r.chars().take(MAX_REASON).collect::<String>());
    amend(&app, &target, |record| {
        record.status = Some(now.clone());
        record.reason = reason.clone();
    })
    .await?;
    tracing::info!(tenant = %target.tenant, source = %target.source, stream_id = %target.stream_id, asked = %asked.status, status = %now, "the stream's status was set at the transmitter");
    Ok(Json(StreamStatusBody {
        stream_id: target.stream_id,
        status: now,
        reason,
    })
    .into_response())
}

/// `DELETE /v1/sources/{tenant}/{source}/subscription`: 204 once the stream is deleted at the
/// transmitter (or was gone already) and cleared from the record.
pub async fn delete(
    State(app): State<Arc<App>>,
    TenantAuth {
        tenant: caller,
        live,
    }: TenantAuth,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, ApiError> {
    let target = target(&app, &caller, &live, path).await?;
    let metadata = metadata_of(&target).await?;
    let at =
        endpoint(&metadata.configuration_endpoint, "configuration_endpoint").map_err(failed)?;
    let url = with_query(at, "stream_id", &target.stream_id);
    let what = "the stream endpoint";
    let (status, answer) = call(&target.access, what, reqwest::Method::DELETE, &url, None)
        .await
        .map_err(failed)?;
    // Gone already (404): what was asked for holds.
    if !(200..300).contains(&status) && status != 404 {
        return Err(refused(what, status, &answer));
    }
    amend(&app, &target, subscribe::forget).await?;
    tracing::info!(tenant = %target.tenant, source = %target.source, stream_id = %target.stream_id, "the stream was deleted at the transmitter");
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /v1/sources/{tenant}/{source}/subjects {"action", "subject", "verified"}`: the
/// transmitter's status code, once it added or removed the subject.
pub async fn subjects(
    State(app): State<Arc<App>>,
    TenantAuth {
        tenant: caller,
        live,
    }: TenantAuth,
    path: Result<Path<(String, String)>, PathRejection>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let target = target(&app, &caller, &live, path).await?;
    let asked: SubjectChange = body_of(&body)?;
    let remove = match asked.action.as_str() {
        "add" => false,
        "remove" => true,
        other => {
            return Err(ApiError::new(
                Kind::InvalidStream,
                format!("action is add or remove, not {other:?}"),
            ))
        }
    };
    if !asked.subject["format"].is_string() {
        return Err(ApiError::new(
            Kind::InvalidStream,
            "subject is a subject identifier (RFC 9493): an object with its format",
        ));
    }
    if remove && asked.verified.is_some() {
        return Err(ApiError::new(
            Kind::InvalidStream,
            "verified is for add only",
        ));
    }
    let metadata = metadata_of(&target).await?;
    let (what, at) = match remove {
        false => (
            "the add subject endpoint",
            endpoint(&metadata.add_subject_endpoint, "add_subject_endpoint"),
        ),
        true => (
            "the remove subject endpoint",
            endpoint(&metadata.remove_subject_endpoint, "remove_subject_endpoint"),
        ),
    };
    let at = at.map_err(failed)?;
    let mut request = json!({"stream_id": target.stream_id, "subject": asked.subject});
    if let Some(verified) = asked.verified {
        request["verified"] = json!(verified);
    }
    let (status, answer) = call(
        &target.access,
        what,
        reqwest::Method::POST,
        at,
        Some(&request),
    )
    .await
    .map_err(failed)?;
    if !(200..300).contains(&status) {
        return Err(refused(what, status, &answer));
    }
    tracing::info!(tenant = %target.tenant, source = %target.source, stream_id = %target.stream_id, action = %asked.action, status, "a subject was changed at the transmitter");
    Ok(StatusCode::from_u16(status)
        .unwrap_or(StatusCode::OK)
        .into_response())
}
