//! The `Idempotency-Key` header: 1 to 255 visible ASCII characters, sent bare
//! (`Idempotency-Key: 8e03…`) or as the IETF draft's structured-field string
//! (`Idempotency-Key: "8e03…"`); both forms name the same key.

use axum::http::HeaderMap;

/// The longest key accepted.
pub const MAX_KEY_LEN: usize = 255;

/// Why the header was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyError {
    /// The header was sent more than once.
    #[error("send one Idempotency-Key header, not {0}")]
    Repeated(usize),
    /// The key is empty.
    #[error("Idempotency-Key is empty; send 1 to 255 visible ASCII characters")]
    Empty,
    /// The key is longer than 255 characters.
    #[error("Idempotency-Key is {0} characters long; the limit is 255")]
    TooLong(usize),
    /// The key has a character outside 0x21–0x7E.
    #[error("Idempotency-Key may only contain visible ASCII characters (0x21 to 0x7E)")]
    BadCharacter,
    /// A quoted key is not a valid structured-field string.
    #[error("Idempotency-Key starts with a quote but is not a valid quoted string")]
    BadQuoting,
}

/// The request's key, if it sent one.
pub fn parse(headers: &HeaderMap) -> Result<Option<String>, KeyError> {
    let mut values = headers.get_all("idempotency-key").iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    let extra = values.count();
    if extra > 0 {
        return Err(KeyError::Repeated(extra + 1));
    }
    parse_value(first.as_bytes()).map(Some)
}

/// Parses one header value.
pub fn parse_value(raw: &[u8]) -> Result<String, KeyError> {
    let key = match raw {
        [b'"', inner @ .., b'"'] if raw.len() >= 2 => unquote(inner)?,
        [b'"', ..] => return Err(KeyError::BadQuoting),
        bare => bare.to_vec(),
    };
    if key.is_empty() {
        return Err(KeyError::Empty);
    }
    if key.len() > MAX_KEY_LEN {
        return Err(KeyError::TooLong(key.len()));
    }
    if !key.iter().all(|b| (0x21..=0x7e).contains(b)) {
        return Err(KeyError::BadCharacter);
    }
    String::from_utf8(key).map_err(|_| KeyError::BadCharacter)
}

/// The content of an RFC 8941 string: `\"` and `\\` are the only escapes.
fn unquote(inner: &[u8]) -> Result<Vec<u8>, KeyError> {
    let mut out = Vec::with_capacity(inner.len());
    let mut bytes = inner.iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'\\' => match bytes.next() {
                Some(&e @ (b'"' | b'\\')) => out.push(e),
                _ => return Err(KeyError::BadQuoting),
            },
            b'"' => return Err(KeyError::BadQuoting),
            other => out.push(other),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_and_quoted_forms_are_the_same_key() {
        assert_eq!(
            parse_value(b"8e03978e-40d5").as_deref(),
            Ok("8e03978e-40d5")
        );
        assert_eq!(
            parse_value(b"\"8e03978e-40d5\"").as_deref(),
            Ok("8e03978e-40d5")
        );
        assert_eq!(parse_value(br#""a\"b\\c""#).as_deref(), Ok(r#"a"b\c"#));
    }

    #[test]
    fn refuses_malformed_keys() {
        assert_eq!(parse_value(b""), Err(KeyError::Empty));
        assert_eq!(parse_value(b"\"\""), Err(KeyError::Empty));
        assert_eq!(parse_value(b"has space"), Err(KeyError::BadCharacter));
        assert_eq!(parse_value("clé".as_bytes()), Err(KeyError::BadCharacter));
        assert_eq!(parse_value(b"tab\there"), Err(KeyError::BadCharacter));
        assert_eq!(parse_value(b"\"open"), Err(KeyError::BadQuoting));
        assert_eq!(parse_value(br#""bad\escape""#), Err(KeyError::BadQuoting));
        assert_eq!(parse_value(&[b'k'; 256]), Err(KeyError::TooLong(256)));
        assert!(parse_value(&[b'k'; 255]).is_ok());
    }

    #[test]
    fn refuses_two_headers() {
        let mut h = HeaderMap::new();
        h.append("idempotency-key", "a".parse().expect("value"));
        assert_eq!(parse(&h), Ok(Some("a".into())));
        h.append("idempotency-key", "b".parse().expect("value"));
        assert_eq!(parse(&h), Err(KeyError::Repeated(2)));
        assert_eq!(parse(&HeaderMap::new()), Ok(None));
    }
}
