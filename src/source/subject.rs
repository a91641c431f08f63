//! A subject as a claim and the decisions API know it: one string, digested. A string or a
//! number is taken as it is written. A subject identifier object (RFC 9493: `email`,
//! `phone_number`, `iss_sub`, `opaque`, `account`, `uri`, `did`, `aliases`, and SSF's `complex`)
//! becomes its canonical JSON (RFC 8785) with emails lower-cased, so one subject named the same
//! way in two SETs, or by two sources, is one subject; `GET /v1/decisions?subject_id=` finds its
//! decisions by the same form.

use idem_schemas::canonical;
use serde_json::{Map, Value};

/// The members of SSF's `complex` format that are themselves subject identifiers.
const COMPLEX_MEMBERS: [&str; 7] = [
    "user",
    "device",
    "session",
    "application",
    "tenant",
    "org_unit",
    "group",
];

/// The subject `value` names: a non-empty string or a number as written, or an identifier
/// object in its canonical form; nothing else.
pub fn of(value: &Value) -> Option<String> {
    match value {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Object(_) => identifier(value).map(|id| canonical::canonical(&id)),
        _ => None,
    }
}

/// `value` as a subject identifier object with its emails lower-cased, or none if it is not
/// one (an object with a string `format`; `aliases` a list of them; `complex` members among
/// SSF's, each one).
fn identifier(value: &Value) -> Option<Value> {
    let object = value.as_object()?;
    let format = object.get("format")?.as_str()?;
    let mut out: Map<String, Value> = object.clone();
    match format {
        "email" => {
            let email = object.get("email")?.as_str()?;
            out.insert("email".into(), Value::from(email.to_lowercase()));
        }
        "aliases" => {
            let ids = object.get("identifiers")?.as_array()?;
            let ids = ids.iter().map(identifier).collect::<Option<Vec<_>>>()?;
            if ids.is_empty() {
                return None;
            }
            out.insert("identifiers".into(), Value::Array(ids));
        }
        "complex" => {
            let mut any = false;
            for member in COMPLEX_MEMBERS {
                if let Some(inner) = object.get(member) {
                    out.insert(member.into(), identifier(inner)?);
                    any = true;
                }
            }
            if !any {
                return None;
            }
        }
        _ => {}
    }
    Some(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(text: &str) -> Value {
        serde_json::from_str(text).expect("json")
    }

    #[test]
    fn one_identifier_written_two_ways_is_one_subject() {
        let a = of(&json(r#"{"format":"email","email":"Alice@Example.COM"}"#));
        let b = of(&json(
            r#"{ "email": "alice@example.com", "format": "email" }"#,
        ));
        assert_eq!(a, b);
        assert_eq!(
            a.as_deref(),
            Some(r#"{"email":"alice@example.com","format":"email"}"#)
        );
        let phone = of(&json(
            r#"{"format":"phone_number","phone_number":"+12065550100"}"#,
        ));
        assert_ne!(
            phone,
            of(&json(
                r#"{"format":"phone_number","phone_number":"+12065550101"}"#
            ))
        );
        // A complex subject's members are identifiers too.
        let c1 = of(&json(
            r#"{"format":"complex","user":{"format":"email","email":"B@x.io"},"session":{"format":"opaque","id":"s1"}}"#,
        ));
        let c2 = of(&json(
            r#"{"session":{"id":"s1","format":"opaque"},"user":{"email":"b@x.io","format":"email"},"format":"complex"}"#,
        ));
        assert!(c1.is_some());
        assert_eq!(c1, c2);
    }

    #[test]
    fn strings_are_as_they_are_and_other_shapes_are_refused() {
        assert_eq!(
            of(&json(r#""Alice@Example.com""#)).as_deref(),
            Some("Alice@Example.com")
        );
        assert_eq!(of(&json("42")).as_deref(), Some("42"));
        assert_eq!(of(&json(r#""""#)), None);
        assert_eq!(of(&json("null")), None);
        assert_eq!(of(&json(r#"{"email":"a@b"}"#)), None);
        assert_eq!(of(&json(r#"{"format":"email"}"#)), None);
        assert_eq!(of(&json(r#"{"format":"complex"}"#)), None);
        assert_eq!(of(&json(r#"{"format":"complex","user":"x"}"#)), None);
        assert_eq!(of(&json(r#"{"format":"aliases","identifiers":[]}"#)), None);
    }
}
