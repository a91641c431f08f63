//! A stream's management (SSF §8.1), with no I/O: what a receiver's request asks for, checked
//! and applied to the stored [`Stream`], and the stream's configuration as the receiver reads
//! it. Receiver-supplied properties (`delivery`, `events_requested`, `description`) are taken;
//! transmitter-supplied ones in a request are ignored, as §8.1.1 says; `events_supported` is
//! what the tenant's playbooks can send, and `events_delivered` what was requested among them.

use std::time::Duration;

use idem_actors::action::Target;
use idem_actors::playbook::Playbooks;
use idem_actors::set::event_type;
use idem_actors::stream_event::status_name;
use idem_schemas::{
    Stream, StreamConfig, StreamDelivery, StreamMethod, StreamState, StreamStatusBody,
};
use serde_json::{Map, Value};

/// RFC 8935: push.
pub const PUSH: &str = "urn:ietf:rfc:8935";
/// RFC 8936: poll.
pub const POLL: &str = "urn:ietf:rfc:8936";

/// The most event types a stream may request.
const MAX_EVENTS: usize = 64;
/// The longest description, in bytes.
const MAX_DESCRIPTION: usize = 1024;
/// The longest URL or `authorization_header`, in bytes.
const MAX_TEXT: usize = 2048;
/// The most subjects a stream may have removed.
pub const MAX_REMOVED: usize = 10_000;

/// A request that cannot be applied: its reason, for the 400.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidStream(pub String);

fn refused(reason: impl Into<String>) -> InvalidStream {
    InvalidStream(reason.into())
}

/// How a request asks for a stream's SETs to be delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryAsked {
    /// Push or poll.
    pub method: StreamMethod,
    /// A push stream's receiver URL.
    pub endpoint_url: Option<String>,
    /// A push stream's `authorization_header`, in clear (sealed before it is stored).
    pub authorization_header: Option<String>,
}

/// What a create, update or replace request asks for; `None` where it says nothing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Asked {
    /// `delivery`.
    pub delivery: Option<DeliveryAsked>,
    /// `events_requested`.
    pub events_requested: Option<Vec<String>>,
    /// `description` (`Some(None)` for an explicit `null`).
    pub description: Option<Option<String>>,
}

fn text<'a>(object: &'a Map<String, Value>, name: &str) -> Result<Option<&'a str>, InvalidStream> {
    match object.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(refused(format!("{name} must be a string"))),
    }
}

/// Whether `url` is an absolute http(s) URL with a host.
fn http_url(url: &str) -> bool {
    reqwest::Url::parse(url)
        .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
}

/// What the JSON object `body` asks for.
pub fn asked(body: &Value) -> Result<Asked, InvalidStream> {
    let object = body
        .as_object()
        .ok_or_else(|| refused("the body must be a JSON object"))?;
    let delivery = match object.get("delivery") {
        None | Some(Value::Null) => None,
        Some(Value::Object(d)) => {
            let method = match text(d, "method")? {
                Some(PUSH) => StreamMethod::Push,
                Some(POLL) => StreamMethod::Poll,
                Some(other) => {
                    return Err(refused(format!(
                        "delivery.method {other:?} is neither push, {PUSH}, nor poll, {POLL}"
                    )))
                }
                None => return Err(refused("delivery.method is required")),
            };
            let (endpoint_url, authorization_header) = match method {
                StreamMethod::Push => {
                    let url = text(d, "endpoint_url")?
                        .ok_or_else(|| refused("a push stream needs delivery.endpoint_url"))?;
                    if url.len() > MAX_TEXT || !http_url(url) {
                        return Err(refused(
                            "delivery.endpoint_url must be an http(s) URL of at most 2048 bytes",
                        ));
                    }
                    let auth = text(d, "authorization_header")?;
                    if let Some(auth) = auth {
                        let visible = auth.bytes().all(|b| b == b' ' || b.is_ascii_graphic());
                        if auth.len() > MAX_TEXT || auth.is_empty() || !visible {
                            return Err(refused(
                                "delivery.authorization_header must be 1 to 2048 visible ASCII characters",
                            ));
                        }
                    }
                    (Some(url.to_string()), auth.map(str::to_string))
                }
                // A poll stream's URL is the transmitter's to give.
                StreamMethod::Poll => (None, None),
            };
            Some(DeliveryAsked {
                method,
                endpoint_url,
                authorization_header,
            })
        }
        Some(_) => return Err(refused("delivery must be an object")),
    };
    let events_requested = match object.get("events_requested") {
        None | Some(Value::Null) => None,
        Some(Value::Array(events)) => {
            if events.len() > MAX_EVENTS {
                return Err(refused(format!(
                    "events_requested has more than {MAX_EVENTS} event types"
                )));
            }
            let mut out: Vec<String> = Vec::with_capacity(events.len());
            for event in events {
                let event = event
                    .as_str()
                    .filter(|e| !e.is_empty() && e.len() <= MAX_TEXT)
                    .ok_or_else(|| refused("events_requested must be event-type URIs"))?;
                if !out.iter().any(|e| e == event) {
                    out.push(event.to_string());
                }
            }
            Some(out)
        }
        Some(_) => return Err(refused("events_requested must be an array")),
    };
    let description = match object.get("description") {
        None => None,
        Some(Value::Null) => Some(None),
        Some(Value::String(s)) if s.len() <= MAX_DESCRIPTION => Some(Some(s.clone())),
        Some(_) => {
            return Err(refused(format!(
                "description must be a string of at most {MAX_DESCRIPTION} bytes"
            )))
        }
    };
    Ok(Asked {
        delivery,
        events_requested,
        description,
    })
}

/// The delivery of a stream whose request names none: poll (SSF §8.1.1.1).
fn poll() -> DeliveryAsked {
    DeliveryAsked {
        method: StreamMethod::Poll,
        endpoint_url: None,
        authorization_header: None,
    }
}

/// A new stream `id` of `receiver`, made at `now_ms` as `asked` (a poll stream when it names
/// no delivery); `seal` seals its authorization header.
pub fn create(
    id: String,
    receiver: &str,
    now_ms: u64,
    asked: Asked,
    seal: impl FnOnce(&str) -> Result<Vec<u8>, InvalidStream>,
) -> Result<Stream, InvalidStream> {
    let delivery = asked.delivery.unwrap_or_else(poll);
    let authorization = delivery
        .authorization_header
        .as_deref()
        .map(seal)
        .transpose()?;
    Ok(Stream {
        id,
        receiver: receiver.to_string(),
        version: 1,
        created_at_ms: now_ms,
        method: delivery.method,
        endpoint_url: delivery.endpoint_url,
        authorization,
        events_requested: asked.events_requested.unwrap_or_default(),
        description: asked.description.flatten(),
        state: StreamState::Enabled,
        reason: None,
        removed_subjects: Vec::new(),
        verified_at_ms: None,
    })
}

/// `stream` changed as `asked`: what a PATCH names (`whole` false) or, for a PUT (`whole`
/// true), every receiver-supplied property, reset where the request leaves it out (a delivery
/// left out: poll, as for a new stream).
pub fn change(
    stream: &Stream,
    asked: Asked,
    whole: bool,
    seal: impl FnOnce(&str) -> Result<Vec<u8>, InvalidStream>,
) -> Result<Stream, InvalidStream> {
    let mut next = stream.clone();
    next.version += 1;
    let delivery = match asked.delivery {
        None if whole => Some(poll()),
        delivery => delivery,
    };
    if let Some(delivery) = delivery {
        next.authorization = delivery
            .authorization_header
            .as_deref()
            .map(seal)
            .transpose()?;
        next.method = delivery.method;
        next.endpoint_url = delivery.endpoint_url;
    }
    match asked.events_requested {
        Some(events) => next.events_requested = events,
        None if whole => next.events_requested = Vec::new(),
        None => {}
    }
    match asked.description {
        Some(description) => next.description = description,
        None if whole => next.description = None,
        None => {}
    }
    Ok(next)
}

/// The status a request names (§8.1.2).
pub fn state(name: &str) -> Result<StreamState, InvalidStream> {
    match name {
        "enabled" => Ok(StreamState::Enabled),
        "paused" => Ok(StreamState::Paused),
        "disabled" => Ok(StreamState::Disabled),
        other => Err(refused(format!(
            "status {other:?} is not enabled, paused or disabled"
        ))),
    }
}

/// `stream` with its status set.
pub fn with_state(stream: &Stream, state: StreamState, reason: Option<String>) -> Stream {
    let mut next = stream.clone();
    next.version += 1;
    next.state = state;
    next.reason = reason;
    next
}

/// `stream` verified at `now_ms`, or, sooner than `interval` after its last verification, the
/// whole seconds until it may be.
pub fn verified(stream: &Stream, now_ms: u64, interval: Duration) -> Result<Stream, u64> {
    if let Some(at) = stream.verified_at_ms {
        let allowed = at.saturating_add(interval.as_millis() as u64);
        if now_ms < allowed {
            return Err((allowed - now_ms).div_ceil(1000));
        }
    }
    let mut next = stream.clone();
    next.version += 1;
    next.verified_at_ms = Some(now_ms);
    Ok(next)
}

/// `stream` with the subject whose digest is `subject` removed (`remove`) or included again;
/// none if that changes nothing.
pub fn with_subject(
    stream: &Stream,
    subject: [u8; 32],
    remove: bool,
) -> Result<Option<Stream>, InvalidStream> {
    let at = stream.removed_subjects.binary_search(&subject);
    let mut next = stream.clone();
    match (remove, at) {
        (true, Err(at)) => {
            if stream.removed_subjects.len() >= MAX_REMOVED {
                return Err(refused(format!(
                    "a stream may have at most {MAX_REMOVED} subjects removed"
                )));
            }
            next.removed_subjects.insert(at, subject);
        }
        (false, Ok(at)) => {
            next.removed_subjects.remove(at);
        }
        _ => return Ok(None),
    }
    next.version += 1;
    Ok(Some(next))
}

/// What the transmitter says of a stream besides what is stored.
pub struct StreamContext<'a> {
    /// The tenant's issuer.
    pub issuer: &'a str,
    /// The receiver's audience.
    pub audience: &'a str,
    /// Where a poll stream is polled (the stream's id appended).
    pub poll_base: &'a str,
    /// How soon after one verification another may be asked for.
    pub min_verification_interval: Duration,
    /// The event types the tenant's playbooks can send.
    pub events_supported: &'a [String],
}

/// The event types `playbooks`' `set` actions send, sorted, each once.
pub fn events_supported(playbooks: &Playbooks) -> Vec<String> {
    let mut events: Vec<String> = playbooks
        .values()
        .flat_map(|p| p.actions.iter())
        .filter_map(|a| match &a.target {
            Target::Set(set) if event_type(&set.event).is_some() => Some(set.event.clone()),
            _ => None,
        })
        .collect();
    events.sort();
    events.dedup();
    events
}

/// The stream's configuration as the receiver reads it (§8.1.1). The authorization header is
/// the receiver's secret: it is not read back.
pub fn view(stream: &Stream, context: &StreamContext<'_>) -> StreamConfig {
    let (method, endpoint_url) = match stream.method {
        StreamMethod::Push => (PUSH, stream.endpoint_url.clone()),
        StreamMethod::Poll => (
            POLL,
            Some(format!("{}/{}/poll", context.poll_base, stream.id)),
        ),
    };
    StreamConfig {
        stream_id: stream.id.clone(),
        iss: context.issuer.to_string(),
        aud: context.audience.to_string(),
        events_supported: context.events_supported.to_vec(),
        events_requested: stream.events_requested.clone(),
        events_delivered: stream
            .events_requested
            .iter()
            .filter(|e| context.events_supported.contains(e))
            .cloned()
            .collect(),
        delivery: StreamDelivery {
            method: method.to_string(),
            endpoint_url,
        },
        description: stream.description.clone(),
        min_verification_interval: context.min_verification_interval.as_secs(),
    }
}

/// The stream's status as `GET` and `POST .../status` answer it (§8.1.2).
pub fn status_view(stream: &Stream) -> StreamStatusBody {
    StreamStatusBody {
        stream_id: stream.id.clone(),
        status: status_name(stream.state).to_string(),
        reason: stream.reason.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_actors::set::{events_delivered, includes};
    use serde_json::json;

    const REVOKED: &str = "https://schemas.openid.net/secevent/caep/event-type/session-revoked";

    fn no_seal(_: &str) -> Result<Vec<u8>, InvalidStream> {
        Ok(b"sealed".to_vec())
    }

    fn push(body: Value) -> Stream {
        create(
            "st_1".into(),
            "okta",
            5,
            asked(&body).expect("asked"),
            no_seal,
        )
        .expect("create")
    }

    #[test]
    fn creates_a_push_stream_with_what_was_asked_and_ignores_transmitter_properties() {
        let stream = push(json!({
            "iss": "https://evil.example", "aud": "x", "stream_id": "st_mine",
            "events_delivered": ["urn:other"],
            "delivery": {"method": PUSH, "endpoint_url": "https://rx.example/events",
                         "authorization_header": "Bearer rx"},
            "events_requested": [REVOKED, "urn:example:unknown", REVOKED],
            "description": "okta's stream",
        }));
        assert_eq!(stream.id, "st_1");
        assert_eq!(stream.version, 1);
        assert_eq!(stream.authorization.as_deref(), Some(&b"sealed"[..]));
        assert_eq!(stream.events_requested, [REVOKED, "urn:example:unknown"]);
        assert_eq!(events_delivered(&stream).collect::<Vec<_>>(), [REVOKED]);
        let context = StreamContext {
            issuer: "https://idem.example/ssf/acme",
            audience: "https://okta.example",
            poll_base: "https://idem.example/ssf/acme/streams",
            min_verification_interval: Duration::from_secs(15),
            events_supported: &[REVOKED.to_string()],
        };
        let view = serde_json::to_value(view(&stream, &context)).expect("json");
        assert_eq!(view["iss"], "https://idem.example/ssf/acme");
        assert_eq!(view["aud"], "https://okta.example");
        assert_eq!(view["events_delivered"], json!([REVOKED]));
        assert_eq!(
            view["delivery"]["endpoint_url"],
            "https://rx.example/events"
        );
        assert!(view["delivery"].get("authorization_header").is_none());
        assert_eq!(view["description"], "okta's stream");
    }

    #[test]
    fn refuses_what_is_not_a_stream() {
        for body in [
            json!([]),
            json!({"delivery": {"method": "urn:example:smoke-signals"}}),
            json!({"delivery": {"method": PUSH}}),
            json!({"delivery": {"method": PUSH, "endpoint_url": "ftp://rx.example/x"}}),
            json!({"delivery": {"method": PUSH, "endpoint_url": "https://rx.example",
                                "authorization_header": "Bearer a\r\nX-Evil: 1"}}),
            json!({"delivery": {"method": PUSH, "endpoint_url": "https://rx.example/b"}, "events_requested": "all"}),
            json!({"delivery": {"method": PUSH, "endpoint_url": "https://rx.example/b"}, "events_requested": [1]}),
            json!({"delivery": {"method": PUSH, "endpoint_url": "https://rx.example/b"}, "description": 7}),
        ] {
            let made = asked(&body).and_then(|a| create("st".into(), "r", 0, a, no_seal));
            assert!(made.is_err(), "{body}");
        }
    }

    #[test]
    fn a_patch_changes_what_it_names_and_a_put_resets_what_it_leaves_out() {
        let stream = push(json!({
            "delivery": {"method": PUSH, "endpoint_url": "https://rx.example/a"},
            "events_requested": [REVOKED], "description": "first",
        }));
        let patched = change(
            &stream,
            asked(&json!({"description": "second"})).expect("asked"),
            false,
            no_seal,
        )
        .expect("patch");
        assert_eq!(patched.version, 2);
        assert_eq!(patched.description.as_deref(), Some("second"));
        assert_eq!(patched.events_requested, [REVOKED]);
        assert_eq!(
            patched.endpoint_url.as_deref(),
            Some("https://rx.example/a")
        );
        let put = change(
            &patched,
            asked(&json!({"delivery": {"method": PUSH, "endpoint_url": "https://rx.example/b"}}))
                .expect("asked"),
            true,
            no_seal,
        )
        .expect("put");
        assert_eq!(put.version, 3);
        assert_eq!(put.endpoint_url.as_deref(), Some("https://rx.example/b"));
        assert!(put.events_requested.is_empty());
        assert_eq!(put.description, None);
        // A PUT without a delivery resets it to poll.
        let polled = change(&put, Asked::default(), true, no_seal).expect("put");
        assert_eq!(
            (polled.method, polled.endpoint_url, polled.authorization),
            (StreamMethod::Poll, None, None)
        );
    }

    #[test]
    fn a_removed_subject_is_left_out_until_added_again() {
        let stream =
            push(json!({"delivery": {"method": PUSH, "endpoint_url": "https://rx.example/b"}}));
        let subject = [9; 32];
        assert!(includes(&stream, &subject));
        let removed = with_subject(&stream, subject, true)
            .expect("remove")
            .expect("changed");
        assert!(!includes(&removed, &subject));
        assert!(includes(&removed, &[8; 32]));
        assert_eq!(with_subject(&removed, subject, true), Ok(None));
        let added = with_subject(&removed, subject, false)
            .expect("add")
            .expect("changed");
        assert!(includes(&added, &subject));
        assert_eq!(added.version, 3);
    }

    #[test]
    fn a_stream_asked_for_without_a_delivery_is_a_poll_stream() {
        let stream = create(
            "st_1".into(),
            "okta",
            5,
            asked(&json!({"events_requested": [REVOKED]})).expect("asked"),
            no_seal,
        )
        .expect("create");
        assert_eq!(stream.method, StreamMethod::Poll);
        assert_eq!((stream.endpoint_url, stream.authorization), (None, None));
        assert_eq!(stream.events_requested, [REVOKED]);
    }
}
