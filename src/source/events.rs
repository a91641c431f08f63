//! A delivery's events, where each kind of sender puts them: its id (the claim's key), its
//! type (the route) and the JSON the subject pointer reads. Okta batches in `data.events`, Auth0
//! and Twilio send a JSON array (or one object); Stripe, GitHub and Standard Webhooks send one
//! event, GitHub and Standard Webhooks with its id in a header. CloudEvents come structured (one
//! event), batched (an array) or binary (the attributes in `ce-*` headers, the body as `data`),
//! each unique by its `source` and `id`; a SET's events are each of its `events`, one claim by
//! the SET's `iss` and `jti`. Nothing here keeps any of the event.

use std::borrow::Cow;

use axum::http::header::CONTENT_TYPE;
use axum::http::HeaderMap;
use serde_json::{Map, Value};

use super::set::Set;
use super::SourceKind;

/// One event of a delivery.
#[derive(Debug)]
pub struct Event<'v> {
    /// The sender's event id, if the event has one.
    pub id: Option<String>,
    /// The sender's event type, if the event has one.
    pub event_type: Option<String>,
    /// What the subject pointer reads.
    pub body: Cow<'v, Value>,
    /// What the event is claimed under when its id alone is not unique at the source (a
    /// CloudEvent's `source` and `id`, a SET's `iss` and `jti`); else its id.
    pub claim: Option<String>,
}

impl Event<'_> {
    /// What the event is claimed under, if it has an id.
    pub fn claim_key(&self) -> Option<&str> {
        self.claim.as_deref().or(self.id.as_deref())
    }
}

/// The claim key of a body whose signature covers nothing else: the SHA-256 of its RFC 8785
/// form (the signed bytes parse to it, and no other signed body does).
fn signed_body_claim(body: &Value) -> String {
    let digest = idem_schemas::hash::sha256(idem_schemas::canonical::canonical(body).as_bytes());
    format!("sha256:{}", idem_schemas::lower_hex(&digest))
}

/// Two strings as one claim key, unambiguously (the first one's length first).
fn pair(a: &str, b: &str) -> String {
    format!("{}:{a}{b}", a.len())
}

/// The events of a verified SET, each claimed under the SET's `iss` and `jti`, whatever the
/// event: a SET is one claim (RFC 8417 makes the events of a SET one logical event, and its
/// `jti` unique at its issuer), so the same `jti` sent again holding another event is a
/// duplicate. Claims made under a SET's `jti` and event type, as earlier versions did, stay in
/// the store until they end.
pub fn of_set(set: &Set) -> Vec<Event<'_>> {
    set.events()
        .map(|(uri, _)| Event {
            id: Some(set.jti.clone()),
            event_type: Some(uri.clone()),
            body: Cow::Borrowed(&set.claims),
            claim: Some(pair(&set.iss, &set.jti)),
        })
        .collect()
}

/// A subject pointer into a SET's claims as written in the config, for its event `uri`: the
/// event's own member may be named by its URI as it is (`/events/<uri>/subject`), which a JSON
/// pointer must escape (`/` as `~1`).
pub fn set_pointer<'p>(pointer: &'p str, uri: &str) -> Cow<'p, str> {
    match pointer
        .strip_prefix("/events/")
        .and_then(|rest| rest.strip_prefix(uri))
    {
        Some(after) if after.is_empty() || after.starts_with('/') => Cow::Owned(format!(
            "/events/{}{after}",
            uri.replace('~', "~0").replace('/', "~1")
        )),
        _ => Cow::Borrowed(pointer),
    }
}

/// The media types of the CloudEvents HTTP binding's modes.
pub const CLOUDEVENTS_STRUCTURED: &str = "application/cloudevents+json";
/// A batch of CloudEvents.
pub const CLOUDEVENTS_BATCH: &str = "application/cloudevents-batch+json";

/// The most events a batch of CloudEvents may hold. The senders CloudEvents sources serve send
/// one event per request (CAMARA's notifications, Knative's deliveries); a sender that batches
/// fits in this many, and one request's claims stay as few as a provider's own batch.
pub const MAX_CLOUDEVENTS_BATCH: usize = 100;

/// How many members the JSON array `bytes` holds, counted without building any of them (so a
/// batch over [`MAX_CLOUDEVENTS_BATCH`] is refused before it takes memory); `None` if `bytes`
/// is not one JSON array.
pub fn array_len(bytes: &[u8]) -> Option<usize> {
    use serde::de::{Deserializer as _, IgnoredAny, SeqAccess, Visitor};
    struct Count;
    impl<'de> Visitor<'de> for Count {
        type Value = usize;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON array")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<usize, A::Error> {
            let mut n = 0;
            while seq.next_element::<IgnoredAny>()?.is_some() {
                n += 1;
            }
            Ok(n)
        }
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let n = (&mut de).deserialize_seq(Count).ok()?;
    de.end().ok().map(|()| n)
}

/// A CloudEvent's required context attributes as the CloudEvents 1.0 specification defines
/// them: `specversion` "1.0", and `id`, `source` (a URI-reference) and `type` non-empty strings.
/// An event without them is not a CloudEvent, and a delivery holding one is refused whole.
fn required_attributes(event: &Value) -> Result<(), String> {
    if event.get("specversion").and_then(Value::as_str) != Some("1.0") {
        return Err("specversion must be \"1.0\"".into());
    }
    for name in ["id", "source", "type"] {
        match event.get(name).and_then(Value::as_str) {
            Some(value) if !value.is_empty() => {}
            _ => return Err(format!("{name} must be a non-empty string")),
        }
    }
    Ok(())
}

/// A CloudEvent's own attributes as an event (read once [`required_attributes`] holds).
fn cloudevent(event: &Value) -> Event<'_> {
    let id = text(event.get("id"));
    let source = text(event.get("source"));
    let claim = match (&id, &source) {
        (Some(id), Some(source)) => Some(pair(source, id)),
        _ => None,
    };
    Event {
        id: id.filter(|_| claim.is_some()),
        event_type: text(event.get("type")),
        body: Cow::Borrowed(event),
        claim,
    }
}

/// Whether the media type of `headers`' `Content-Type`, without parameters, is `expected`
/// (written in lower case), in any case: [`media_type`] compared, with nothing allocated.
pub fn has_media_type(headers: &HeaderMap, expected: &str) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| {
            let essence = value.split(';').next().unwrap_or_default().trim();
            essence.eq_ignore_ascii_case(expected)
        })
}

/// The media type of `headers`' `Content-Type`, lower-cased, without parameters.
pub fn media_type(headers: &HeaderMap) -> Option<String> {
    let value = headers.get("content-type")?.to_str().ok()?;
    Some(
        value
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase(),
    )
}

/// A binary-mode CloudEvent: its attributes from the `ce-*` headers, `data` the body.
fn binary(headers: &HeaderMap, data: &Value) -> Result<Value, ShapeError> {
    let mut event = Map::new();
    for (name, value) in headers {
        if let Some(attribute) = name.as_str().strip_prefix("ce-") {
            let value = value.to_str().map_err(|_| {
                ShapeError(format!("the ce-{attribute} header is not visible ASCII"))
            })?;
            // Which of two values would the sender mean? Neither is taken.
            if event
                .insert(attribute.to_string(), Value::from(value))
                .is_some()
            {
                return Err(ShapeError(format!(
                    "the ce-{attribute} header is sent twice"
                )));
            }
        }
    }
    if !event.contains_key("specversion") {
        return Err(ShapeError(
            "a CloudEvent: application/cloudevents+json, application/cloudevents-batch+json, or ce-* headers (binary mode)"
                .into(),
        ));
    }
    event.insert("data".into(), data.clone());
    Ok(Value::Object(event))
}

/// Why a delivery has no events to read.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ShapeError(pub String);

fn text(value: Option<&Value>) -> Option<String> {
    value.and_then(Value::as_str).map(str::to_owned)
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// A batch: a JSON array, or one object on its own (Auth0's JSONOBJECT format).
fn batch<'v>(body: &'v Value, what: &str) -> Result<&'v [Value], ShapeError> {
    match body {
        Value::Array(items) => Ok(items),
        Value::Object(_) => Ok(std::slice::from_ref(body)),
        _ => Err(ShapeError(format!(
            "the body must be a JSON array of {what}"
        ))),
    }
}

/// The events of a `kind` delivery with `headers` and the parsed `body`.
pub fn read<'v>(
    kind: SourceKind,
    headers: &HeaderMap,
    body: &'v Value,
) -> Result<Vec<Event<'v>>, ShapeError> {
    let one = |id: Option<String>| {
        if !body.is_object() {
            return Err(ShapeError("the body must be a JSON object".into()));
        }
        Ok(vec![Event {
            id,
            event_type: text(body.get("type")),
            body: Cow::Borrowed(body),
            claim: None,
        }])
    };
    match kind {
        SourceKind::Okta => {
            let events = body
                .pointer("/data/events")
                .and_then(Value::as_array)
                .ok_or_else(|| ShapeError("an Okta event hook carries data.events".into()))?;
            Ok(events
                .iter()
                .map(|e| Event {
                    id: text(e.get("uuid")),
                    event_type: text(e.get("eventType")),
                    body: Cow::Borrowed(e),
                    claim: None,
                })
                .collect())
        }
        SourceKind::Auth0 => Ok(batch(body, "log entries")?
            .iter()
            .map(|e| Event {
                id: text(e.get("log_id")),
                event_type: text(e.pointer("/data/type")),
                body: Cow::Borrowed(e),
                claim: None,
            })
            .collect()),
        SourceKind::Twilio => Ok(batch(body, "CloudEvents")?
            .iter()
            .map(|e| Event {
                id: text(e.get("id")),
                event_type: text(e.get("type")),
                body: Cow::Borrowed(e),
                claim: None,
            })
            .collect()),
        SourceKind::Stripe => one(text(body.get("id"))),
        SourceKind::Standard => one(header(headers, "webhook-id")),
        SourceKind::Github => {
            if !body.is_object() {
                return Err(ShapeError("the body must be a JSON object".into()));
            }
            // GitHub's signature covers the body only, not `X-GitHub-Delivery` nor
            // `X-GitHub-Event`: a captured body posted again under a fresh delivery id or
            // another event name must not be another decision, so the event is claimed under
            // the digest of what was signed (GitHub's own redelivery sends the same body).
            let id = header(headers, "x-github-delivery");
            let claim = id.as_ref().map(|_| signed_body_claim(body));
            Ok(vec![Event {
                id,
                event_type: header(headers, "x-github-event"),
                body: Cow::Borrowed(body),
                claim,
            }])
        }
        SourceKind::Cloudevents => match media_type(headers).as_deref() {
            Some(CLOUDEVENTS_STRUCTURED) => {
                if !body.is_object() {
                    return Err(ShapeError(
                        "a structured CloudEvent is a JSON object".into(),
                    ));
                }
                required_attributes(body).map_err(ShapeError)?;
                Ok(vec![cloudevent(body)])
            }
            Some(CLOUDEVENTS_BATCH) => match body {
                Value::Array(events) if events.iter().all(Value::is_object) => {
                    for (n, event) in events.iter().enumerate() {
                        required_attributes(event)
                            .map_err(|why| ShapeError(format!("event {n} of the batch: {why}")))?;
                    }
                    Ok(events.iter().map(cloudevent).collect())
                }
                _ => Err(ShapeError(
                    "a batch of CloudEvents is a JSON array of objects".into(),
                )),
            },
            _ => {
                let event = binary(headers, body)?;
                required_attributes(&event)
                    .map_err(|why| ShapeError(format!("the ce-* headers: {why}")))?;
                let mut read = cloudevent(&event);
                Ok(vec![Event {
                    id: read.id.take(),
                    event_type: read.event_type.take(),
                    claim: read.claim.take(),
                    body: Cow::Owned(event),
                }])
            }
        },
        SourceKind::Ssf => Err(ShapeError(
            "an ssf source takes a Security Event Token (application/secevent+jwt)".into(),
        )),
    }
}

/// The subject `pointer` finds in `event`: a non-empty string or a number as written, or a
/// subject identifier object in its canonical form (see `source::subject`).
pub fn subject(event: &Value, pointer: &str) -> Option<String> {
    super::subject::of(event.pointer(pointer)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(text: &str) -> Value {
        match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => panic!("{text}: {e}"),
        }
    }

    #[test]
    fn a_media_type_is_compared_in_any_case_without_its_parameters() {
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert("content-type", value.parse().expect("a header value"));
            headers
        };
        let set = "application/secevent+jwt";
        for value in [
            set,
            "Application/SecEvent+JWT",
            " application/secevent+jwt ; x=1",
        ] {
            assert!(has_media_type(&with(value), set), "{value}");
            assert_eq!(media_type(&with(value)).as_deref(), Some(set), "{value}");
        }
        for value in ["application/secevent+jwtx", "application/jwt", ""] {
            assert!(!has_media_type(&with(value), set), "{value}");
        }
        assert!(!has_media_type(&HeaderMap::new(), set));
    }

    #[test]
    fn an_okta_batch_is_read_from_data_events() {
        let body = json(
            r#"{"eventType":"com.okta.event_hook","data":{"events":[
                {"uuid":"u1","eventType":"user.session.start","target":[{"alternateId":"a@x"}]},
                {"eventType":"user.session.end"}]}}"#,
        );
        let events = read(SourceKind::Okta, &HeaderMap::new(), &body).expect("events");
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].id.as_deref(), Some("u1"));
        assert_eq!(events[0].event_type.as_deref(), Some("user.session.start"));
        assert_eq!(
            subject(&events[0].body, "/target/0/alternateId").as_deref(),
            Some("a@x")
        );
        assert_eq!(events[1].id, None);
        assert!(read(SourceKind::Okta, &HeaderMap::new(), &json("[]")).is_err());
    }

    #[test]
    fn github_takes_its_id_and_type_from_headers() {
        let mut headers = HeaderMap::new();
        headers.insert("x-github-delivery", "d-1".parse().expect("value"));
        headers.insert("x-github-event", "push".parse().expect("value"));
        let body = json(r#"{"type":"ignored","sender":{"id":7}}"#);
        let events = read(SourceKind::Github, &headers, &body).expect("events");
        assert_eq!(events[0].id.as_deref(), Some("d-1"));
        assert_eq!(events[0].event_type.as_deref(), Some("push"));
        assert_eq!(subject(&events[0].body, "/sender/id").as_deref(), Some("7"));
        // Claimed under the signed body, whatever the unsigned headers say.
        let claim = events[0].claim_key().map(str::to_string);
        assert!(claim.as_deref().is_some_and(|c| c.starts_with("sha256:")));
        headers.insert("x-github-delivery", "d-2".parse().expect("value"));
        headers.insert("x-github-event", "issues".parse().expect("value"));
        let replayed = read(SourceKind::Github, &headers, &body).expect("events");
        assert_eq!(replayed[0].claim_key(), claim.as_deref());
        let other = json(r#"{"type":"ignored","sender":{"id":8}}"#);
        let other = read(SourceKind::Github, &headers, &other).expect("events");
        assert_ne!(other[0].claim_key(), claim.as_deref());
    }

    #[test]
    fn a_subject_is_a_non_empty_string_or_a_number() {
        let e = json(r#"{"a":"","b":null,"c":{"d":1},"e":"x"}"#);
        assert_eq!(subject(&e, "/a"), None);
        assert_eq!(subject(&e, "/b"), None);
        assert_eq!(subject(&e, "/c"), None);
        assert_eq!(subject(&e, "/missing"), None);
        assert_eq!(subject(&e, "/c/d").as_deref(), Some("1"));
        assert_eq!(subject(&e, "/e").as_deref(), Some("x"));
    }

    #[test]
    fn a_set_pointer_may_name_its_event_by_its_uri_as_it_is() {
        let uri = "https://schemas.openid.net/secevent/caep/event-type/session-revoked";
        let claims = json(&format!(
            r#"{{"events":{{"{uri}":{{"subject":{{"format":"opaque","id":"s1"}}}}}}}}"#
        ));
        let written = format!("/events/{uri}/subject");
        let pointer = set_pointer(&written, uri);
        assert_eq!(
            pointer,
            "/events/https:~1~1schemas.openid.net~1secevent~1caep~1event-type~1session-revoked/subject"
        );
        assert!(subject(&claims, &pointer).is_some());
        assert_eq!(set_pointer("/sub_id", uri), "/sub_id");
        assert_eq!(
            set_pointer(&pointer, uri),
            pointer,
            "an escaped pointer stays"
        );
        assert_eq!(
            set_pointer(&format!("/events/{uri}x/subject"), uri),
            format!("/events/{uri}x/subject")
        );
    }

    #[test]
    fn a_sets_events_are_one_claim_by_its_iss_and_jti() {
        let set = |iss: &str, jti: &str, events: Value| Set {
            jti: jti.into(),
            iss: iss.into(),
            claims: json(&format!(r#"{{"events":{events}}}"#)),
        };
        let keys = |s: &Set| -> Vec<Option<String>> {
            of_set(s)
                .iter()
                .map(|e| e.claim_key().map(str::to_string))
                .collect()
        };
        let one = set("https://tx", "j1", json(r#"{"a":{}}"#));
        let other_type = set("https://tx", "j1", json(r#"{"b":{}}"#));
        let both = set("https://tx", "j1", json(r#"{"a":{},"b":{}}"#));
        assert_eq!(
            keys(&one),
            keys(&other_type),
            "another event type, one claim"
        );
        assert!(
            keys(&both).iter().all(|k| *k == keys(&one)[0]),
            "{:?}",
            keys(&both)
        );
        assert_ne!(
            keys(&one),
            keys(&set("https://tx", "j2", json(r#"{"a":{}}"#)))
        );
        assert_ne!(
            keys(&set("ab", "c", json(r#"{"a":{}}"#))),
            keys(&set("a", "bc", json(r#"{"a":{}}"#))),
            "iss and jti are not run together"
        );
        assert_eq!(of_set(&both)[1].event_type.as_deref(), Some("b"));
    }

    #[test]
    fn a_batch_is_counted_without_being_built() {
        assert_eq!(array_len(b"[]"), Some(0));
        assert_eq!(array_len(br#" [{}, {"a": [1, 2]}, 3] "#), Some(3));
        assert_eq!(array_len(b"{}"), None);
        assert_eq!(array_len(b"[1, 2"), None);
        assert_eq!(array_len(b"[1] [2]"), None);
    }

    #[test]
    fn cloudevents_come_structured_batched_or_binary_and_are_unique_by_source_and_id() {
        let with = |pairs: &[(&'static str, &str)]| {
            let mut h = HeaderMap::new();
            for (n, v) in pairs {
                h.insert(*n, v.parse().expect("value"));
            }
            h
        };
        let event = r#"{"specversion":"1.0","id":"e1","source":"//op/a","type":"t.swapped","data":{"phoneNumber":"+3460"}}"#;
        let one = json(event);
        let structured = with(&[(
            "content-type",
            "application/cloudevents+json; charset=utf-8",
        )]);
        let read1 = read(SourceKind::Cloudevents, &structured, &one).expect("structured");
        assert_eq!(read1.len(), 1);
        assert_eq!(read1[0].id.as_deref(), Some("e1"));
        assert_eq!(read1[0].claim_key(), Some("6://op/ae1"));
        assert_eq!(
            subject(&read1[0].body, "/data/phoneNumber").as_deref(),
            Some("+3460")
        );

        let batch = json(&format!("[{event},{}]", event.replace("//op/a", "//op/b")));
        let batched = with(&[("content-type", "application/cloudevents-batch+json")]);
        let read2 = read(SourceKind::Cloudevents, &batched, &batch).expect("batch");
        assert_eq!(read2.len(), 2);
        assert_ne!(
            read2[0].claim_key(),
            read2[1].claim_key(),
            "same id, other source"
        );

        let binary = with(&[
            ("content-type", "application/json"),
            ("ce-specversion", "1.0"),
            ("ce-id", "e1"),
            ("ce-source", "//op/a"),
            ("ce-type", "t.swapped"),
        ]);
        let data = json(r#"{"phoneNumber":"+3460"}"#);
        let read3 = read(SourceKind::Cloudevents, &binary, &data).expect("binary");
        assert_eq!(
            read3[0].claim_key(),
            read1[0].claim_key(),
            "one event in two modes"
        );
        assert_eq!(read3[0].event_type.as_deref(), Some("t.swapped"));
        assert_eq!(
            subject(&read3[0].body, "/data/phoneNumber").as_deref(),
            Some("+3460")
        );

        let plain = with(&[("content-type", "application/json")]);
        assert!(read(SourceKind::Cloudevents, &plain, &data).is_err());
        // Not a CloudEvent: a required attribute missing, empty, or of another version.
        for bad in [
            r#"{"specversion":"1.0","id":"e1","type":"t"}"#,
            r#"{"specversion":"1.0","id":"e1","source":"","type":"t"}"#,
            r#"{"specversion":"1.0","id":"","source":"//op/a","type":"t"}"#,
            r#"{"specversion":"1.0","id":"e1","source":"//op/a","type":""}"#,
            r#"{"specversion":"0.3","id":"e1","source":"//op/a","type":"t"}"#,
            r#"{"specversion":1.0,"id":"e1","source":"//op/a","type":"t"}"#,
        ] {
            let bad = json(bad);
            assert!(
                read(SourceKind::Cloudevents, &structured, &bad).is_err(),
                "{bad}"
            );
            let in_batch = Value::Array(vec![one.clone(), bad.clone()]);
            assert!(
                read(SourceKind::Cloudevents, &batched, &in_batch).is_err(),
                "{bad}"
            );
        }
        // A required attribute's header twice.
        let mut twice = binary.clone();
        twice.append("ce-id", "e2".parse().expect("value"));
        let err = read(SourceKind::Cloudevents, &twice, &data).expect_err("ce-id twice");
        assert!(err.0.contains("ce-id"), "{err}");
        let mut empty = binary.clone();
        empty.insert("ce-source", "".parse().expect("value"));
        assert!(read(SourceKind::Cloudevents, &empty, &data).is_err());
    }
}
