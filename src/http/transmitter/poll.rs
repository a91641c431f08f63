//! `POST /ssf/{tenant}/streams/{stream_id}/poll`: a poll stream's receiver fetches its SETs
//! (RFC 8936). What it acknowledges (`ack`) is delivered and what it reports (`setErrs`) failed,
//! each durably, before the answer lists what still waits: up to `maxEvents`, oldest first, with
//! `moreAvailable` when more wait. A SET handed out and not acknowledged is handed out again.
//! Unless `returnImmediately`, an empty answer waits until a SET comes, up to [`LONG_POLL`].

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use idem_actors::delivery::PollAnswer;
use idem_schemas::{Stream, StreamMethod};
use serde_json::{Map, Value};
use tokio::time::Instant;

use super::streams::{json_body, unavailable, ReceiverAuth};
use crate::http::problem::{ApiError, Kind};
use crate::http::App;

/// The most SETs one answer hands out, and how many when `maxEvents` is not given.
pub const MAX_EVENTS: usize = 100;
/// How long an empty answer waits for a SET at most.
pub const LONG_POLL: Duration = Duration::from_secs(20);
/// How often a waiting answer looks again.
const LOOK_EVERY: Duration = Duration::from_millis(200);

/// What a poll request asks.
#[derive(Debug, PartialEq)]
struct Asked {
    max_events: usize,
    return_immediately: bool,
    /// The `jti`s acknowledged.
    ack: Vec<String>,
    /// The `jti`s reported, each with its `err: description`.
    errors: Vec<(String, String)>,
}

fn invalid(detail: impl Into<String>) -> ApiError {
    ApiError::new(Kind::InvalidStream, detail)
}

/// The poll request `body`, or what is wrong with it.
fn asked(body: &Value) -> Result<Asked, ApiError> {
    let object = body
        .as_object()
        .ok_or_else(|| invalid("a poll request is a JSON object"))?;
    let max_events = match object.get("maxEvents") {
        None => MAX_EVENTS,
        Some(n) => n
            .as_u64()
            .map(|n| (n as usize).min(MAX_EVENTS))
            .ok_or_else(|| invalid("maxEvents must be a non-negative integer"))?,
    };
    let return_immediately = match object.get("returnImmediately") {
        None => false,
        Some(b) => b
            .as_bool()
            .ok_or_else(|| invalid("returnImmediately must be a boolean"))?,
    };
    let jti = |v: &Value| v.as_str().filter(|j| j.len() <= 256).map(str::to_string);
    let ack = match object.get("ack") {
        None => Vec::new(),
        Some(Value::Array(ids)) if ids.len() <= MAX_EVENTS => ids
            .iter()
            .map(|v| jti(v).ok_or_else(|| invalid("ack lists jti strings")))
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(invalid(format!(
                "ack must be an array of at most {MAX_EVENTS} jti strings"
            )))
        }
    };
    let errors = match object.get("setErrs") {
        None => Vec::new(),
        Some(Value::Object(errs)) if errs.len() <= MAX_EVENTS => errs
            .iter()
            .map(|(id, e)| {
                let err = e.get("err").and_then(Value::as_str);
                let description = e.get("description").and_then(Value::as_str);
                match (jti(&Value::from(id.as_str())), err) {
                    (Some(id), Some(err)) => {
                        let text = format!("{err}: {}", description.unwrap_or_default());
                        Ok((id, text.chars().take(512).collect()))
                    }
                    _ => Err(invalid(
                        "setErrs maps each jti to {\"err\", \"description\"}",
                    )),
                }
            })
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(invalid(format!(
                "setErrs must be an object of at most {MAX_EVENTS} jtis"
            )))
        }
    };
    Ok(Asked {
        max_events,
        return_immediately,
        ack,
        errors,
    })
}

/// `POST /ssf/{tenant}/streams/{stream_id}/poll`.
pub async fn poll(
    State(app): State<Arc<App>>,
    caller: ReceiverAuth,
    Path((_, stream_id)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let asked = asked(&json_body(&body)?)?;
    let stream = caller.stream(&app, &stream_id).await?;
    if stream.method != StreamMethod::Poll {
        return Err(invalid("this stream is pushed to, not polled"));
    }
    // Each answer is durable before this one is: an acknowledged SET is never handed out
    // again, whatever happens next.
    let acked = asked.ack.iter().map(|id| (id, PollAnswer::Acknowledged));
    let refused = (asked.errors.iter()).map(|(id, e)| (id, PollAnswer::Refused(e.clone())));
    for (id, answer) in acked.chain(refused) {
        app.engine
            .streams()
            .answer(&caller.tenant, &stream.id, id, answer)
            .await
            .map_err(streams_error)?;
    }
    let deadline = Instant::now() + LONG_POLL;
    loop {
        let (sets, more) = waiting(&app, &caller.tenant, &stream, asked.max_events).await?;
        let waits = !asked.return_immediately && asked.max_events > 0;
        if !sets.is_empty() || !waits || Instant::now() >= deadline {
            let mut body = Map::new();
            let sets: Map<String, Value> = sets
                .into_iter()
                .map(|(id, token)| (id, Value::from(String::from_utf8_lossy(&token))))
                .collect();
            body.insert("sets".into(), Value::Object(sets));
            if more {
                body.insert("moreAvailable".into(), Value::Bool(true));
            }
            return Ok(Json(Value::Object(body)).into_response());
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}

async fn waiting(
    app: &App,
    tenant: &str,
    stream: &Stream,
    limit: usize,
) -> Result<(Vec<(String, Vec<u8>)>, bool), ApiError> {
    if limit == 0 {
        return Ok((Vec::new(), false));
    }
    app.engine
        .streams()
        .waiting(tenant, stream, limit)
        .await
        .map_err(streams_error)
}

fn streams_error(e: idem_actors::StreamsError) -> ApiError {
    match e {
        idem_actors::StreamsError::Store(e) => unavailable(e),
        e => {
            tracing::error!(error = %e, "a poll could not be answered");
            ApiError::new(Kind::Unavailable, "the poll could not be answered; retry")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_what_a_poll_asks_and_refuses_what_it_cannot_be() {
        let a = asked(&json!({})).expect("empty");
        assert_eq!((a.max_events, a.return_immediately), (MAX_EVENTS, false));
        let a = asked(&json!({
            "maxEvents": 5000, "returnImmediately": true, "ack": ["msg_1"],
            "setErrs": {"msg_2": {"err": "invalid_key", "description": "no such kid"}}
        }))
        .expect("full");
        assert_eq!(a.max_events, MAX_EVENTS, "capped");
        assert!(a.return_immediately);
        assert_eq!(a.ack, ["msg_1"]);
        assert_eq!(
            a.errors,
            [("msg_2".into(), "invalid_key: no such kid".into())]
        );
        for bad in [
            json!([]),
            json!({"maxEvents": -1}),
            json!({"returnImmediately": "yes"}),
            json!({"ack": "msg_1"}),
            json!({"ack": [1]}),
            json!({"setErrs": {"msg_1": {"description": "no err"}}}),
        ] {
            assert!(asked(&bad).is_err(), "{bad}");
        }
    }
}
