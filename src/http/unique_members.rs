//! Whether a JSON text names any member twice in one object, at any depth. RFC 8259 leaves the
//! meaning of such an object to the reader and most readers keep the last value, so two parts
//! of a system can read one request two ways; a request that does this is refused instead.
//! A plain check over the text, with no I/O, run before the body is read for its meaning.

use std::collections::HashSet;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};

/// The first member named twice in one object of `json` (a valid JSON text), as its path from
/// the top (`delivery.method`, `events[2].id`); `None` when every object's members are unique.
pub fn duplicated(json: &[u8]) -> Option<String> {
    let mut reader = serde_json::Deserializer::from_slice(json);
    match (Unique {
        path: String::new(),
    })
    .deserialize(&mut reader)
    {
        Ok(()) => None,
        Err(e) => {
            let message = e.to_string();
            message
                .strip_prefix(MARK)
                .and_then(|rest| rest.split_once(MARK))
                .map(|(path, _)| path.to_string())
        }
    }
}

/// Brackets the duplicated member's path in the error that stops the walk.
const MARK: &str = "\u{1}";

/// The walk over one value, at `path`.
struct Unique {
    path: String,
}

impl Unique {
    fn at(&self, member: &str) -> Unique {
        let path = if self.path.is_empty() {
            member.to_string()
        } else {
            format!("{}.{member}", self.path)
        };
        Unique { path }
    }
}

impl<'de> DeserializeSeed<'de> for Unique {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Unique {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(member) = map.next_key::<String>()? {
            let inner = self.at(&member);
            if !seen.insert(member) {
                return Err(A::Error::custom(format!("{MARK}{}{MARK}", inner.path)));
            }
            map.next_value_seed(inner)?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        loop {
            let inner = Unique {
                path: format!("{}[{i}]", self.path),
            };
            if seq.next_element_seed(inner)?.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_named_twice_is_found_at_any_depth() {
        assert_eq!(duplicated(br#"{"a": 1, "b": {"c": [1, {"d": 2}]}}"#), None);
        assert_eq!(duplicated(br#"{"a": 1, "a": 2}"#), Some("a".into()));
        assert_eq!(
            duplicated(br#"{"delivery": {"method": "x", "method": "y"}}"#),
            Some("delivery.method".into())
        );
        assert_eq!(
            duplicated(br#"{"s": [{"id": 1}, {"id": 1, "id": 2}]}"#),
            Some("s[1].id".into())
        );
        assert_eq!(
            duplicated(br#"{"a": 1, "\u0061": 2}"#),
            Some("a".into()),
            "an escaped name is the name it spells"
        );
        assert_eq!(
            duplicated(br#"[{"a": 1}, {"a": 2}]"#),
            None,
            "one name in two objects"
        );
    }
}
