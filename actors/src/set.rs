//! `set` actions: a decision's action that becomes one Security Event Token (RFC 8417) per stream
//! of the tenant's transmitter that delivers its event type and includes the subject, with no
//! I/O. Each SET's `jti` is its delivery id, derived from the decision and the (action, stream)
//! pair as a callback's `webhook-id` is, so it is the same however often it is computed; its
//! bytes are signed once, when the decision is made, and sealed under a key of its own: every
//! attempt, after any crash, on any node, sends those bytes, until its delivery ends and the key
//! is erased. Its destination is the stream (`ssf:{stream_id}`), whose
//! endpoint and credential are read when each attempt is made.

use std::collections::HashMap;
use std::sync::Arc;

use idem_schemas::canonical::canonical;
use idem_schemas::stored::STREAM_SCHEME;
use idem_schemas::{Decision, PlannedDelivery, Stream, StreamState};
use serde_json::{json, Map, Value};

use crate::digest::Digester;
use crate::seal::Sealer;
use crate::store::SetKey;

/// What an event's member must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberKind {
    /// A non-empty string.
    Text,
    /// One of these strings.
    OneOf(&'static [&'static str]),
    /// A JSON object with at least one member.
    Object,
    /// An array of strings.
    TextList,
}

/// A member an event type's events carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    /// Its name.
    pub name: &'static str,
    /// What it must be.
    pub kind: MemberKind,
}

/// An event type idem sends, the members its events must carry beyond the subject (and, for
/// CAEP, `event_timestamp` and `initiating_entity`, which idem gives), and those its
/// specification defines as optional, checked when given: a `set` action gives them in its
/// `event`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventType {
    /// Its URI.
    pub uri: &'static str,
    /// Its required members.
    pub required: &'static [Member],
    /// Its optional members whose form its specification fixes.
    pub optional: &'static [Member],
}

const fn text(name: &'static str) -> Member {
    Member {
        name,
        kind: MemberKind::Text,
    }
}

const fn one_of(name: &'static str, values: &'static [&'static str]) -> Member {
    Member {
        name,
        kind: MemberKind::OneOf(values),
    }
}

const fn event(uri: &'static str, required: &'static [Member]) -> EventType {
    event_with(uri, required, &[])
}

const fn event_with(
    uri: &'static str,
    required: &'static [Member],
    optional: &'static [Member],
) -> EventType {
    EventType {
        uri,
        required,
        optional,
    }
}

const COMPLIANCE: &[&str] = &["compliant", "not-compliant"];
const RISK_LEVELS: &[&str] = &["LOW", "MEDIUM", "HIGH"];

/// Every CAEP 1.0 and RISC 1.0 event type, with the members its events require (CAEP 1.0's
/// "REQUIRED" event-specific claims, RISC 1.0's "REQUIRED" attributes) and the optional ones
/// whose form the specification fixes.
pub const EVENT_TYPES: &[EventType] = &[
    event(
        "https://schemas.openid.net/secevent/caep/event-type/session-revoked",
        &[],
    ),
    event(
        "https://schemas.openid.net/secevent/caep/event-type/token-claims-change",
        &[Member {
            name: "claims",
            kind: MemberKind::Object,
        }],
    ),
    event_with(
        "https://schemas.openid.net/secevent/caep/event-type/credential-change",
        &[
            text("credential_type"),
            one_of("change_type", &["create", "revoke", "update", "delete"]),
        ],
        &[
            text("friendly_name"),
            text("x509_issuer"),
            text("x509_serial"),
            text("fido2_aaguid"),
        ],
    ),
    event_with(
        "https://schemas.openid.net/secevent/caep/event-type/assurance-level-change",
        &[text("namespace"), text("current_level")],
        &[
            text("previous_level"),
            one_of("change_direction", &["increase", "decrease"]),
        ],
    ),
    event(
        "https://schemas.openid.net/secevent/caep/event-type/device-compliance-change",
        &[
            one_of("previous_status", COMPLIANCE),
            one_of("current_status", COMPLIANCE),
        ],
    ),
    event_with(
        "https://schemas.openid.net/secevent/caep/event-type/session-established",
        &[],
        &[
            text("fp_ua"),
            text("acr"),
            Member {
                name: "amr",
                kind: MemberKind::TextList,
            },
            text("ext_id"),
        ],
    ),
    event_with(
        "https://schemas.openid.net/secevent/caep/event-type/session-presented",
        &[],
        &[text("fp_ua"), text("ext_id")],
    ),
    // `principal` is one of USER, DEVICE, SESSION, TENANT, ORG_UNIT, GROUP "or any other
    // entity"; `risk_reason` is recommended, not required.
    event_with(
        "https://schemas.openid.net/secevent/caep/event-type/risk-level-change",
        &[text("principal"), one_of("current_level", RISK_LEVELS)],
        &[text("risk_reason"), one_of("previous_level", RISK_LEVELS)],
    ),
    event(
        "https://schemas.openid.net/secevent/risc/event-type/account-credential-change-required",
        &[],
    ),
    event(
        "https://schemas.openid.net/secevent/risc/event-type/account-purged",
        &[],
    ),
    event_with(
        "https://schemas.openid.net/secevent/risc/event-type/account-disabled",
        &[],
        &[one_of("reason", &["hijacking", "bulk-account"])],
    ),
    event(
        "https://schemas.openid.net/secevent/risc/event-type/account-enabled",
        &[],
    ),
    event_with(
        "https://schemas.openid.net/secevent/risc/event-type/identifier-changed",
        &[],
        &[text("new-value")],
    ),
    event(
        "https://schemas.openid.net/secevent/risc/event-type/identifier-recycled",
        &[],
    ),
    event(
        "https://schemas.openid.net/secevent/risc/event-type/credential-compromise",
        &[text("credential_type")],
    ),
    event(
        "https://schemas.openid.net/secevent/risc/event-type/opt-in",
        &[],
    ),
    event(
        "https://schemas.openid.net/secevent/risc/event-type/opt-out-initiated",
        &[],
    ),
    event(
        "https://schemas.openid.net/secevent/risc/event-type/opt-out-cancelled",
        &[],
    ),
    event(
        "https://schemas.openid.net/secevent/risc/event-type/opt-out-effective",
        &[],
    ),
    event(
        "https://schemas.openid.net/secevent/risc/event-type/recovery-activated",
        &[],
    ),
    event(
        "https://schemas.openid.net/secevent/risc/event-type/recovery-information-changed",
        &[],
    ),
    event(
        "https://schemas.openid.net/secevent/risc/event-type/sessions-revoked",
        &[],
    ),
];

/// The event type `uri` names, if idem sends it.
pub fn event_type(uri: &str) -> Option<&'static EventType> {
    EVENT_TYPES.iter().find(|e| e.uri == uri)
}

/// Why an event's members do not fit its type: the member, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{member} {reason}")]
pub struct InvalidMembers {
    /// The member.
    pub member: String,
    /// What is wrong with it.
    pub reason: String,
}

/// Whether `members` fit the event type `uri` (one idem sends): each required member there, of
/// its kind; `reason_admin` and `reason_user` objects of language tags to strings; CAEP's
/// `initiating_entity` one of its four; and no `event_timestamp`, which idem gives (the time
/// the decision is made).
pub fn check_members(uri: &str, members: &Map<String, Value>) -> Result<(), InvalidMembers> {
    let invalid = |member: &str, reason: String| InvalidMembers {
        member: member.to_string(),
        reason,
    };
    let Some(event) = event_type(uri) else {
        return Err(invalid(
            "set",
            format!("{uri:?} is not an event type idem sends"),
        ));
    };
    for required in event.required {
        let value = members
            .get(required.name)
            .ok_or_else(|| invalid(required.name, format!("is required by {uri}")))?;
        check_member(required, value).map_err(|reason| invalid(required.name, reason))?;
    }
    for optional in event.optional {
        if let Some(value) = members.get(optional.name) {
            check_member(optional, value).map_err(|reason| invalid(optional.name, reason))?;
        }
    }
    for reason in ["reason_admin", "reason_user"] {
        match members.get(reason) {
            None => {}
            Some(Value::Object(texts))
                if !texts.is_empty() && texts.values().all(Value::is_string) => {}
            Some(_) => {
                return Err(invalid(
                    reason,
                    "must be a table of language tags to texts, e.g. { en = \"...\" }".into(),
                ))
            }
        }
    }
    if members.contains_key("event_timestamp") {
        return Err(invalid(
            "event_timestamp",
            "is given by idem: the time the decision is made".into(),
        ));
    }
    if let Some(entity) = members.get("initiating_entity") {
        const ENTITIES: &[&str] = &["admin", "user", "policy", "system"];
        if !entity.as_str().is_some_and(|e| ENTITIES.contains(&e)) || !uri.starts_with(CAEP) {
            return Err(invalid(
                "initiating_entity",
                format!("is CAEP's, one of {}", ENTITIES.join(", ")),
            ));
        }
    }
    Ok(())
}

/// Whether `value` is of `member`'s kind; what it must be if not.
fn check_member(member: &Member, value: &Value) -> Result<(), String> {
    match (member.kind, value) {
        (MemberKind::Text, Value::String(s)) if !s.is_empty() => Ok(()),
        (MemberKind::OneOf(values), Value::String(s)) if values.contains(&s.as_str()) => Ok(()),
        (MemberKind::Object, Value::Object(o)) if !o.is_empty() => Ok(()),
        (MemberKind::TextList, Value::Array(a)) if a.iter().all(Value::is_string) => Ok(()),
        (MemberKind::Text, _) => Err("must be a non-empty string".into()),
        (MemberKind::OneOf(values), _) => Err(format!("must be one of {}", values.join(", "))),
        (MemberKind::Object, _) => {
            Err("must be a table (a JSON object) of one member or more".into())
        }
        (MemberKind::TextList, _) => Err("must be a list of strings".into()),
    }
}

/// CAEP's event types, whose events carry `event_timestamp` and `initiating_entity`.
const CAEP: &str = "https://schemas.openid.net/secevent/caep/event-type/";

/// How a `set` action names the signal's subject in its SETs (RFC 9493), when the signal did
/// not come with a subject identifier of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubjectFormat {
    /// `{"format": "email", "email": …}`.
    Email,
    /// `{"format": "phone_number", "phone_number": …}`.
    PhoneNumber,
    /// `{"format": "opaque", "id": …}`.
    Opaque,
}

impl SubjectFormat {
    /// The format `name` names.
    pub fn parse(name: &str) -> Option<SubjectFormat> {
        match name {
            "email" => Some(SubjectFormat::Email),
            "phone_number" => Some(SubjectFormat::PhoneNumber),
            "opaque" => Some(SubjectFormat::Opaque),
            _ => None,
        }
    }
}

/// A `set` action of a playbook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetAction {
    /// The event type its SETs carry.
    pub event: String,
    /// How they name the subject.
    pub subject_format: SubjectFormat,
    /// The event's own members (checked by [`check_members`]).
    pub members: Map<String, Value>,
}

/// Signs a SET's claims with the transmitter's signing key: a compact JWS, `typ`
/// `secevent+jwt`, with the key's `kid`.
pub trait SetSigner: Send + Sync {
    /// The signed token of the claims, serialised as JSON.
    fn sign(&self, claims: &[u8]) -> Result<String, String>;
}

/// A SET's claims, in the order their names sort (as a JSON object of them would be written).
#[derive(serde::Serialize)]
pub(crate) struct SetClaims<'a> {
    pub aud: &'a str,
    pub events: Events<'a>,
    pub iat: u64,
    pub iss: &'a str,
    pub jti: &'a str,
    pub sub_id: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub txn: Option<&'a str>,
}

/// A SET's one event: its type and its members.
pub(crate) struct Events<'a>(pub &'a str, pub &'a Map<String, Value>);

impl serde::Serialize for Events<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(1))?;
        map.serialize_entry(self.0, self.1)?;
        map.end()
    }
}

impl SetClaims<'_> {
    /// Signed by `signer`.
    pub fn signed(&self, signer: &dyn SetSigner) -> Result<String, MakeSetError> {
        let claims = serde_json::to_vec(self).map_err(|e| MakeSetError(e.to_string()))?;
        signer.sign(&claims).map_err(MakeSetError)
    }
}

/// A tenant's transmitter as a decision sees it.
#[derive(Clone)]
pub struct SetIssuer {
    /// Every SET's `iss`.
    pub issuer: String,
    /// The signing key.
    pub signer: Arc<dyn SetSigner>,
    /// Each receiver's audience, by `client_id`: its streams' `aud`.
    pub audiences: HashMap<String, String>,
}

/// What a decision's `set` actions need: the transmitter, its streams as they were when the
/// decision was made, and the key that seals each SET.
pub struct SetContext<'a> {
    /// The transmitter.
    pub transmitter: &'a SetIssuer,
    /// The tenant's streams.
    pub streams: &'a [Stream],
    /// Seals each SET at rest.
    pub sealer: &'a Sealer,
}

/// Why a SET could not be made.
#[derive(Debug, thiserror::Error)]
#[error("cannot make a Security Event Token: {0}")]
pub struct MakeSetError(pub String);

/// The event types of `stream` that this transmitter sends.
pub fn events_delivered(stream: &Stream) -> impl Iterator<Item = &str> {
    stream
        .events_requested
        .iter()
        .map(String::as_str)
        .filter(|e| event_type(e).is_some())
}

/// Whether `stream` gets a SET of `event` about the subject known by the digests `subject`
/// (as the signal named it, and as the SET names it): it delivers the event, includes the
/// subject under either digest, and is not disabled.
pub fn gets(stream: &Stream, event: &str, subject: &[[u8; 32]]) -> bool {
    stream.state != StreamState::Disabled
        && events_delivered(stream).any(|e| e == event)
        && subject.iter().all(|digest| includes(stream, digest))
}

/// Whether `stream` includes the subject whose digest is `subject`: every one not removed.
pub fn includes(stream: &Stream, subject: &[u8; 32]) -> bool {
    stream.removed_subjects.binary_search(subject).is_err()
}

/// The subject identifier a SET names the subject by: the signal's own, when its subject is
/// an identifier object in its canonical JSON (a signal that came as a SET), else `subject` in
/// `format`.
pub fn sub_id(subject: &str, format: SubjectFormat) -> Value {
    if let Ok(Value::Object(id)) = serde_json::from_str::<Value>(subject) {
        if id.get("format").is_some_and(Value::is_string) {
            return Value::Object(id);
        }
    }
    match format {
        SubjectFormat::Email => json!({"format": "email", "email": subject}),
        SubjectFormat::PhoneNumber => {
            json!({"format": "phone_number", "phone_number": subject})
        }
        SubjectFormat::Opaque => json!({"format": "opaque", "id": subject}),
    }
}

/// The owner a SET's sealed bytes are bound to: its delivery.
pub fn owner(delivery_id: &str) -> &[u8] {
    delivery_id.as_bytes()
}

/// The SET of the delivery `delivery_id`, from its sealed `body` and the `wrapped` key it is
/// sealed under.
pub fn open(
    sealer: &Sealer,
    delivery_id: &str,
    wrapped: &[u8],
    body: &[u8],
) -> Result<Vec<u8>, crate::seal::Unsealable> {
    let key = sealer.open(owner(delivery_id), wrapped)?;
    let key: [u8; 32] = key.try_into().map_err(|_| crate::seal::Unsealable)?;
    sealer.open_under(&key, owner(delivery_id), body)
}

/// The keys of `decision`'s SETs, as they ride with it while it is made (none once it was read
/// back from the claim's log: they were kept when it was first claimed).
pub fn keys(decision: &Decision) -> Vec<SetKey> {
    decision.deliveries.iter().filter_map(key_of).collect()
}

/// The key of the SET `planned`, as it rides with it while it is made.
pub fn key_of(planned: &PlannedDelivery) -> Option<SetKey> {
    Some(SetKey {
        delivery: planned.id.clone(),
        wrapped: planned.key.clone()?,
    })
}

/// The owner a push stream's sealed `authorization_header` is bound to: the stream.
pub fn stream_owner(tenant: &str, stream_id: &str) -> Vec<u8> {
    format!("{tenant}/{stream_id}").into_bytes()
}

/// The decision a SET is of.
pub struct Of<'a> {
    /// Its tenant.
    pub tenant: &'a str,
    /// Its id, each SET's `txn`.
    pub decision_id: &'a str,
    /// The subject, as the signal names it.
    pub subject: &'a str,
    /// The keyed digests of subjects, which streams remove subjects by.
    pub digester: &'a Digester,
    /// When it was made, unix milliseconds.
    pub now_ms: u64,
}

/// The digests a stream may have removed the subject of a SET under: the subject as the signal
/// named it, and the identifier the SET names it by, in the canonical form a receiver's
/// identifier is digested in (RFC 8785, emails lower-cased).
fn subject_digests(of: &Of<'_>, sub_id: &Value) -> [[u8; 32]; 2] {
    let mut id = sub_id.clone();
    if let Some(email) = id.get_mut("email") {
        if let Some(lower) = email.as_str().map(str::to_lowercase) {
            *email = Value::from(lower);
        }
    }
    [
        of.digester.subject_bytes(of.tenant, of.subject),
        of.digester.subject_bytes(of.tenant, &canonical(&id)),
    ]
}

/// The SETs of `action` (named `name`) of the decision `of`: one per stream that gets it and
/// whose receiver is configured, in stream order. `delivery_id` derives a delivery's id from
/// what names it in the decision (for a SET, the action and the stream).
pub fn plan(
    context: &SetContext<'_>,
    of: &Of<'_>,
    name: &str,
    action: &SetAction,
    delivery_id: impl Fn(&str) -> String,
) -> Result<Vec<PlannedDelivery>, MakeSetError> {
    let now_s = of.now_ms / 1000;
    let sub_id = sub_id(of.subject, action.subject_format);
    let mut event = action.members.clone();
    if action.event.starts_with(CAEP) {
        event.insert("event_timestamp".into(), Value::from(now_s));
        event
            .entry("initiating_entity")
            .or_insert_with(|| Value::from("policy"));
    }
    // The subject's digests are worked out only when a stream removed some subject.
    let delivering = context
        .streams
        .iter()
        .filter(|s| gets(s, &action.event, &[]));
    let digests = match delivering.clone().any(|s| !s.removed_subjects.is_empty()) {
        true => subject_digests(of, &sub_id).to_vec(),
        false => Vec::new(),
    };
    // A stream whose receiver is no longer configured gets nothing: no one can read it.
    let mut streams: Vec<(&Stream, &String)> = delivering
        .filter(|s| digests.iter().all(|digest| includes(s, digest)))
        .filter_map(|s| Some((s, context.transmitter.audiences.get(&s.receiver)?)))
        .collect();
    streams.sort_by(|a, b| a.0.id.cmp(&b.0.id));
    streams
        .into_iter()
        .map(|(stream, audience)| {
            let id = delivery_id(&format!("{name}\u{0}{}", stream.id));
            let claims = SetClaims {
                aud: audience,
                events: Events(&action.event, &event),
                iat: now_s,
                iss: &context.transmitter.issuer,
                jti: &id,
                sub_id: &sub_id,
                txn: Some(of.decision_id),
            };
            let token = claims.signed(&*context.transmitter.signer)?;
            let url = format!("{STREAM_SCHEME}{}", stream.id);
            sealed(context.sealer, id, name, url, &token)
        })
        .collect()
}

/// The delivery of the SET `token` under `id`, for action `name`, to `url`: sealed under a
/// fresh key, which rides with it wrapped.
pub fn sealed(
    sealer: &Sealer,
    id: String,
    name: &str,
    url: String,
    token: &str,
) -> Result<PlannedDelivery, MakeSetError> {
    let sealing = |e: crate::seal::Unsealable| MakeSetError(e.to_string());
    let key = sealer.fresh_key().map_err(sealing)?;
    let body = sealer
        .seal_under(&key, owner(&id), token.as_bytes())
        .map_err(sealing)?;
    let key = sealer.seal(owner(&id), &key).map_err(sealing)?;
    Ok(PlannedDelivery {
        id,
        action: name.to_string(),
        url,
        body,
        key: Some(key),
        token: Some(token.into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_schemas::StreamMethod;

    const REVOKED: &str = "https://schemas.openid.net/secevent/caep/event-type/session-revoked";

    fn stream(id: &str) -> Stream {
        Stream {
            id: id.into(),
            receiver: "okta".into(),
            version: 1,
            created_at_ms: 0,
            method: StreamMethod::Push,
            endpoint_url: Some("https://rx.example/ssf".into()),
            authorization: None,
            events_requested: vec![REVOKED.into()],
            description: None,
            state: StreamState::Enabled,
            reason: None,
            removed_subjects: vec![[7; 32]],
            verified_at_ms: None,
        }
    }

    #[test]
    fn a_subject_is_named_in_the_format_asked_unless_it_is_an_identifier_already() {
        assert_eq!(
            sub_id("+15550001", SubjectFormat::PhoneNumber),
            json!({"format": "phone_number", "phone_number": "+15550001"})
        );
        assert_eq!(
            sub_id("ann@example.com", SubjectFormat::Email),
            json!({"format": "email", "email": "ann@example.com"})
        );
        assert_eq!(
            sub_id("42", SubjectFormat::Opaque),
            json!({"format": "opaque", "id": "42"})
        );
        // A signal that came as a SET: its subject is its identifier's canonical JSON.
        let own = r#"{"email":"ann@example.com","format":"email"}"#;
        assert_eq!(
            sub_id(own, SubjectFormat::PhoneNumber),
            json!({"format": "email", "email": "ann@example.com"})
        );
        assert_eq!(
            sub_id(r#"{"no":"format"}"#, SubjectFormat::Opaque),
            json!({"format": "opaque", "id": r#"{"no":"format"}"#})
        );
    }

    #[test]
    fn a_stream_gets_what_it_asked_for_about_the_subjects_it_includes_while_not_disabled() {
        let s = stream("st_1");
        assert!(gets(&s, REVOKED, &[[1; 32], [2; 32]]));
        assert!(
            !gets(&s, REVOKED, &[[7; 32], [2; 32]]),
            "removed as the signal names it"
        );
        assert!(
            !gets(&s, REVOKED, &[[1; 32], [7; 32]]),
            "removed as the SET names it"
        );
        let other = "https://schemas.openid.net/secevent/risc/event-type/account-disabled";
        assert!(!gets(&s, other, &[[1; 32]]), "an event not asked for");
        let paused = Stream {
            state: StreamState::Paused,
            ..stream("st_2")
        };
        assert!(
            gets(&paused, REVOKED, &[[1; 32]]),
            "a paused stream holds its SETs"
        );
        let disabled = Stream {
            state: StreamState::Disabled,
            ..stream("st_3")
        };
        assert!(!gets(&disabled, REVOKED, &[[1; 32]]));
        let polled = Stream {
            method: StreamMethod::Poll,
            ..stream("st_4")
        };
        assert!(gets(&polled, REVOKED, &[[1; 32]]), "a poll stream too");
        let unknown = Stream {
            events_requested: vec!["urn:example:not-ours".into()],
            ..stream("st_5")
        };
        assert!(!gets(&unknown, "urn:example:not-ours", &[[1; 32]]));
    }

    #[test]
    fn every_caep_and_risc_event_type_is_known_with_its_required_members() {
        let caep = EVENT_TYPES
            .iter()
            .filter(|e| e.uri.starts_with(CAEP))
            .count();
        assert_eq!(caep, 8, "CAEP 1.0's eight event types");
        assert_eq!(EVENT_TYPES.len(), 8 + 14, "and RISC 1.0's fourteen");
        let mut uris: Vec<&str> = EVENT_TYPES.iter().map(|e| e.uri).collect();
        uris.sort();
        uris.dedup();
        assert_eq!(uris.len(), EVENT_TYPES.len(), "each once");
        let changed = "https://schemas.openid.net/secevent/caep/event-type/credential-change";
        let members = |v: Value| v.as_object().cloned().expect("object");
        assert_eq!(
            check_members(changed, &members(json!({"credential_type": "password"}))),
            Err(InvalidMembers {
                member: "change_type".into(),
                reason: format!("is required by {changed}")
            })
        );
        let ok = json!({"credential_type": "fido2-roaming", "change_type": "create",
                        "friendly_name": "key", "reason_admin": {"en": "x"}});
        assert_eq!(check_members(changed, &members(ok)), Ok(()));
        for (bad, member) in [
            (
                json!({"credential_type": "password", "change_type": "rotate"}),
                "change_type",
            ),
            (
                json!({"credential_type": 7, "change_type": "create"}),
                "credential_type",
            ),
            (
                json!({"credential_type": "pin", "change_type": "create", "reason_user": {}}),
                "reason_user",
            ),
            (
                json!({"credential_type": "pin", "change_type": "create", "initiating_entity": "robot"}),
                "initiating_entity",
            ),
            (
                json!({"credential_type": "pin", "change_type": "create", "event_timestamp": 1}),
                "event_timestamp",
            ),
        ] {
            let e = check_members(changed, &members(bad.clone())).expect_err("refused");
            assert_eq!(e.member, member, "{bad}");
        }
        let claims = "https://schemas.openid.net/secevent/caep/event-type/token-claims-change";
        assert!(check_members(claims, &members(json!({"claims": "x"}))).is_err());
        assert!(check_members(
            claims,
            &members(json!({"claims": {"trusted_network": false}}))
        )
        .is_ok());
        assert!(
            check_members(claims, &members(json!({"claims": {}}))).is_err(),
            "one claim or more"
        );
        // Any credential type the two ends agree on.
        let passkey = json!({"credential_type": "passkey", "change_type": "create"});
        assert_eq!(check_members(changed, &members(passkey)), Ok(()));
        // risk_reason is recommended, not required; optional members are checked when given.
        let risk = "https://schemas.openid.net/secevent/caep/event-type/risk-level-change";
        let ok = json!({"principal": "APPLICATION", "current_level": "HIGH"});
        assert_eq!(check_members(risk, &members(ok)), Ok(()));
        let assurance =
            "https://schemas.openid.net/secevent/caep/event-type/assurance-level-change";
        let established = "https://schemas.openid.net/secevent/caep/event-type/session-established";
        for (uri, bad, member) in [
            (
                risk,
                json!({"principal": "USER", "current_level": "HIGH", "previous_level": "EXTREME"}),
                "previous_level",
            ),
            (
                risk,
                json!({"principal": "USER", "current_level": "high"}),
                "current_level",
            ),
            (
                assurance,
                json!({"namespace": "NIST-AAL", "current_level": "nist-aal2", "change_direction": "up"}),
                "change_direction",
            ),
            (established, json!({"amr": "pwd"}), "amr"),
        ] {
            let e = check_members(uri, &members(bad.clone())).expect_err("refused");
            assert_eq!(e.member, member, "{bad}");
        }
        // RISC has no initiating_entity.
        let compromise =
            "https://schemas.openid.net/secevent/risc/event-type/credential-compromise";
        let risc = json!({"credential_type": "password", "initiating_entity": "admin"});
        assert!(check_members(compromise, &members(risc)).is_err());
        assert!(check_members("urn:example:made-up", &Map::new()).is_err());
    }
}
