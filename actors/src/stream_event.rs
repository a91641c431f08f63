//! SSF's own events about a stream, with no I/O: a verification event (SSF §8.1.4.2), sent when
//! the receiver asks for one, and a stream-updated event (§8.1.5). A receiver's own change of
//! status is answered, not announced, so idem makes no stream-updated event for it; an older
//! idem did, and its deliveries are still known by their action. Each is a SET whose subject is
//! the stream itself (`{"format": "opaque", "id": <stream_id>}`), delivered by the delivery
//! machinery like a decision's SETs; a paused or disabled stream holds them until it is enabled
//! and never drops them. Their deliveries belong to no decision.

use idem_schemas::stored::STREAM_SCHEME;
use idem_schemas::{PlannedDelivery, StreamState};
use serde_json::{json, Map, Value};

use crate::seal::Sealer;
use crate::set::{sealed, Events, MakeSetError, SetClaims, SetIssuer};

/// The verification event's type.
pub const VERIFICATION: &str = "https://schemas.openid.net/secevent/ssf/event-type/verification";
/// The stream-updated event's type.
pub const STREAM_UPDATED: &str =
    "https://schemas.openid.net/secevent/ssf/event-type/stream-updated";

/// The action name a verification's delivery carries.
pub const VERIFICATION_ACTION: &str = "ssf.verification";
/// The action name a stream-updated event's delivery carries.
pub const STREAM_UPDATED_ACTION: &str = "ssf.stream_updated";

/// What a stream is told about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    /// The receiver asked to verify the stream, with this `state` to echo.
    Verification {
        /// The receiver's opaque `state`, if it gave one.
        state: Option<String>,
    },
    /// The stream's status is becoming `status`, for `reason`.
    Updated {
        /// The new status.
        status: StreamState,
        /// Why, if the receiver said.
        reason: Option<String>,
    },
}

impl StreamEvent {
    /// Its event type and the event's members.
    fn event(&self) -> (&'static str, Map<String, Value>) {
        let mut event = Map::new();
        match self {
            StreamEvent::Verification { state } => {
                if let Some(state) = state {
                    event.insert("state".into(), Value::from(state.as_str()));
                }
                (VERIFICATION, event)
            }
            StreamEvent::Updated { status, reason } => {
                event.insert("status".into(), Value::from(status_name(*status)));
                if let Some(reason) = reason {
                    event.insert("reason".into(), Value::from(reason.as_str()));
                }
                (STREAM_UPDATED, event)
            }
        }
    }

    /// The action name its delivery carries.
    pub fn action(&self) -> &'static str {
        match self {
            StreamEvent::Verification { .. } => VERIFICATION_ACTION,
            StreamEvent::Updated { .. } => STREAM_UPDATED_ACTION,
        }
    }
}

/// Whether a delivery of action `action` is a stream's event about itself, which a disabled
/// stream holds rather than drops.
pub fn about_the_stream(action: &str) -> bool {
    action == VERIFICATION_ACTION || action == STREAM_UPDATED_ACTION
}

/// A status as SSF names it.
pub fn status_name(status: StreamState) -> &'static str {
    match status {
        StreamState::Enabled => "enabled",
        StreamState::Paused => "paused",
        StreamState::Disabled => "disabled",
    }
}

/// The SET telling stream `stream_id` (whose receiver's audience is `audience`) of `event` at
/// `now_ms`, as the delivery `id`: signed and sealed, ready to be queued.
pub fn set(
    transmitter: &SetIssuer,
    sealer: &Sealer,
    audience: &str,
    stream_id: &str,
    event: &StreamEvent,
    id: String,
    now_ms: u64,
) -> Result<PlannedDelivery, MakeSetError> {
    let (event_type, members) = event.event();
    let sub_id = json!({"format": "opaque", "id": stream_id});
    let claims = SetClaims {
        aud: audience,
        events: Events(event_type, &members),
        iat: now_ms / 1000,
        iss: &transmitter.issuer,
        jti: &id,
        sub_id: &sub_id,
        txn: None,
    };
    let token = claims.signed(&*transmitter.signer)?;
    let url = format!("{STREAM_SCHEME}{stream_id}");
    sealed(sealer, id, event.action(), url, &token)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::Arc;

    /// Signs by writing the claims out, so the test reads what would be signed.
    struct Plain;

    impl crate::set::SetSigner for Plain {
        fn sign(&self, claims: &[u8]) -> Result<String, String> {
            Ok(String::from_utf8_lossy(claims).into_owned())
        }
    }

    fn opened(sealer: &Sealer, planned: &PlannedDelivery) -> Value {
        let key = planned.key.as_ref().expect("a key rides with it");
        let token = crate::set::open(sealer, &planned.id, key, &planned.body).expect("it opens");
        serde_json::from_slice(&token).expect("claims")
    }

    #[test]
    fn a_stream_is_told_of_itself_as_its_own_opaque_subject() {
        let transmitter = SetIssuer {
            issuer: "https://idem.example/ssf/acme".into(),
            signer: Arc::new(Plain),
            audiences: HashMap::new(),
        };
        let sealer = Sealer::new([3; 32]);
        let verify = StreamEvent::Verification {
            state: Some("abc".into()),
        };
        let planned = set(
            &transmitter,
            &sealer,
            "https://okta.example",
            "st_1",
            &verify,
            "msg_1".into(),
            1_700_000_000_123,
        )
        .expect("made");
        assert_eq!(planned.url, "ssf:st_1");
        assert_eq!(planned.action, VERIFICATION_ACTION);
        assert!(about_the_stream(&planned.action));
        let claims = opened(&sealer, &planned);
        assert_eq!(claims["aud"], "https://okta.example");
        assert_eq!(claims["iat"], 1_700_000_000);
        assert_eq!(claims["jti"], "msg_1");
        assert_eq!(claims["sub_id"], json!({"format": "opaque", "id": "st_1"}));
        assert_eq!(claims["events"][VERIFICATION], json!({"state": "abc"}));
        assert!(claims.get("txn").is_none(), "no decision: {claims}");

        let paused = StreamEvent::Updated {
            status: StreamState::Paused,
            reason: None,
        };
        let planned = set(
            &transmitter,
            &sealer,
            "aud",
            "st_1",
            &paused,
            "msg_2".into(),
            0,
        )
        .expect("made");
        assert_eq!(planned.action, STREAM_UPDATED_ACTION);
        let claims = opened(&sealer, &planned);
        assert_eq!(
            claims["events"][STREAM_UPDATED],
            json!({"status": "paused"})
        );
        assert!(!about_the_stream("revoke"));
    }
}
