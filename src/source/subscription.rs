//! What idem asks of a transmitter for a subscribed `ssf` source, decided with no I/O: the
//! transmitter's metadata (SSF §7.1) as idem reads it, the delivery a stream is to have, and
//! how a stream the transmitter has differs from what the configuration wants (SSF §8.1.1):
//! nothing, its event types (a PATCH), or its delivery (a PUT of the whole configuration).

use serde::Deserialize;
use serde_json::{json, Value};

use super::Delivery;

/// RFC 8935's delivery method URN.
pub const PUSH_URN: &str = "urn:ietf:rfc:8935";
/// RFC 8936's delivery method URN.
pub const POLL_URN: &str = "urn:ietf:rfc:8936";

/// A transmitter's metadata, the members idem uses.
#[derive(Debug, Clone, Deserialize)]
pub struct Metadata {
    /// Its issuer: must be the configured `transmitter`.
    pub issuer: String,
    /// Where streams are made, read, changed and deleted.
    pub configuration_endpoint: Option<String>,
    /// Where a stream's status is read and set.
    pub status_endpoint: Option<String>,
    /// Where a subject is added.
    pub add_subject_endpoint: Option<String>,
    /// Where a subject is removed.
    pub remove_subject_endpoint: Option<String>,
    /// Where a verification is asked for.
    pub verification_endpoint: Option<String>,
}

/// The delivery a stream is to have: its method, and for push where and with what.
pub fn delivery(how: Delivery, endpoint_url: &str, authorization: &str) -> Value {
    match how {
        Delivery::Push => json!({
            "method": PUSH_URN,
            "endpoint_url": endpoint_url,
            "authorization_header": authorization,
        }),
        Delivery::Poll => json!({"method": POLL_URN}),
    }
}

/// What a stream at the transmitter needs to match the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// It matches.
    Keep,
    /// Its `events_requested` differ: PATCH them.
    Events,
    /// Its delivery differs: PUT the whole configuration.
    Replace,
}

/// How `stream` (as the transmitter answers it) differs from `delivery` and `events`. A push
/// stream's `authorization_header` is not compared: a transmitter need not show it.
pub fn change(stream: &Value, delivery: &Value, events: &[String]) -> Change {
    let had = &stream["delivery"];
    let same_delivery = had["method"] == delivery["method"]
        && (delivery["method"] != PUSH_URN || had["endpoint_url"] == delivery["endpoint_url"]);
    if !same_delivery {
        return Change::Replace;
    }
    let mut requested: Vec<String> = stream["events_requested"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e.as_str().map(str::to_string))
        .collect();
    requested.sort();
    requested.dedup();
    let mut wanted = events.to_vec();
    wanted.sort();
    wanted.dedup();
    if requested == wanted {
        Change::Keep
    } else {
        Change::Events
    }
}

/// The event types a stream says it delivers.
pub fn events_delivered(stream: &Value) -> Vec<String> {
    stream["events_delivered"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e.as_str().map(str::to_string))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_delivery_replaces_new_events_patch() {
        let events = vec!["b".to_string(), "a".to_string()];
        let push = delivery(Delivery::Push, "https://idem/v1/sources/t/s", "Bearer x");
        let stream = json!({"delivery": {"method": PUSH_URN, "endpoint_url": "https://idem/v1/sources/t/s"},
            "events_requested": ["a", "b"]});
        assert_eq!(change(&stream, &push, &events), Change::Keep);
        assert_eq!(change(&stream, &push, &["a".into()]), Change::Events);
        let poll = delivery(Delivery::Poll, "", "");
        assert_eq!(change(&stream, &poll, &events), Change::Replace);
        let moved = delivery(
            Delivery::Push,
            "https://elsewhere/v1/sources/t/s",
            "Bearer x",
        );
        assert_eq!(change(&stream, &moved, &events), Change::Replace);
    }
}
