//! A delivery's events, where each kind of provider puts them: its id (the claim's key), its
//! type (the route) and the JSON the subject pointer reads. Okta batches in `data.events`, Auth0
//! and Twilio send a JSON array (or one object); Stripe, GitHub and Standard Webhooks send one
//! event, GitHub and Standard Webhooks with its id in a header. Nothing here keeps any of the
//! event.

use axum::http::HeaderMap;
use serde_json::Value;

use super::SourceKind;

/// One event of a delivery.
#[derive(Debug)]
pub struct Event<'v> {
    /// The provider's event id, if the event has one.
    pub id: Option<String>,
    /// The provider's event type, if the event has one.
    pub event_type: Option<String>,
    /// What the subject pointer reads.
    pub body: &'v Value,
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
            body,
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
                    body: e,
                })
                .collect())
        }
        SourceKind::Auth0 => Ok(batch(body, "log entries")?
            .iter()
            .map(|e| Event {
                id: text(e.get("log_id")),
                event_type: text(e.pointer("/data/type")),
                body: e,
            })
            .collect()),
        SourceKind::Twilio => Ok(batch(body, "CloudEvents")?
            .iter()
            .map(|e| Event {
                id: text(e.get("id")),
                event_type: text(e.get("type")),
                body: e,
            })
            .collect()),
        SourceKind::Stripe => one(text(body.get("id"))),
        SourceKind::Standard => one(header(headers, "webhook-id")),
        SourceKind::Github => {
            if !body.is_object() {
                return Err(ShapeError("the body must be a JSON object".into()));
            }
            Ok(vec![Event {
                id: header(headers, "x-github-delivery"),
                event_type: header(headers, "x-github-event"),
                body,
            }])
        }
    }
}

/// The subject `pointer` finds in `event`: a non-empty string, or a number as written.
pub fn subject(event: &Value, pointer: &str) -> Option<String> {
    match event.pointer(pointer)? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
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
            subject(events[0].body, "/target/0/alternateId").as_deref(),
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
        assert_eq!(subject(events[0].body, "/sender/id").as_deref(), Some("7"));
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
}
