//! Reading one value of the file: a duration or a number within its bounds, or a secret (or a
//! list of them; each written as is, or read from a file or the environment), each refused with the dotted key it was written under and the reason, on one
//! line. Every section reads its values through these, so a bound is said once, where the key
//! is read.

use std::ops::{Bound, RangeBounds};
use std::path::PathBuf;
use std::time::Duration;

use idem_schemas::signature::Secret;
use serde::Deserialize;

use super::ConfigError;

/// The longest duration any key may have: times are added to unix milliseconds and stored as
/// 64-bit integers.
pub const MAX_DURATION: Duration = Duration::from_secs(3650 * 24 * 3600);

/// The refusal of `key`'s value, for `reason`.
pub fn invalid(key: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        reason: reason.into(),
    }
}

/// `key`'s duration as written in `raw` (like "5s" or "24h"), `default` when it is not:
/// longer than zero and at most [`MAX_DURATION`].
pub fn duration(key: &str, raw: Option<&str>, default: Duration) -> Result<Duration, ConfigError> {
    let Some(text) = raw else {
        return Ok(default);
    };
    let d = humantime::parse_duration(text)
        .map_err(|e| invalid(key, format!("{text:?} is not a duration like \"5s\" ({e})")))?;
    if d.is_zero() {
        return Err(invalid(key, "must be longer than zero"));
    }
    if d > MAX_DURATION {
        return Err(invalid(key, "must be at most 3650 days"));
    }
    Ok(d)
}

/// `key`'s number as written in `raw`, `default` when it is not, within `bounds` (`1..=100`,
/// or `1..` for no upper bound); `unit` names what it counts in the refusal ("connections",
/// say), or is empty.
pub fn number<T>(
    key: &str,
    raw: Option<i64>,
    default: T,
    bounds: impl RangeBounds<T>,
    unit: &str,
) -> Result<T, ConfigError>
where
    T: TryFrom<i64> + PartialOrd + Copy + std::fmt::Display,
{
    let Some(raw) = raw else {
        return Ok(default);
    };
    let refused = || {
        let unit = match unit.is_empty() {
            true => String::new(),
            false => format!(" {unit}"),
        };
        let reason = match (bounds.start_bound(), bounds.end_bound()) {
            (Bound::Included(low), Bound::Included(high)) => {
                format!("must be between {low} and {high}{unit}")
            }
            (Bound::Included(low), _) => format!("must be at least {low}{unit}"),
            _ => format!("is out of bounds{unit}"),
        };
        invalid(key, reason)
    };
    let n = T::try_from(raw).map_err(|_| refused())?;
    match bounds.contains(&n) {
        true => Ok(n),
        false => Err(refused()),
    }
}

/// A secret as written: the value itself, `{ file = PATH }` (the file's content, one trailing
/// newline dropped: a mounted secret) or `{ env = NAME }` (an environment variable). Read when
/// the configuration is, so a reload reads files again; neither the value nor the file's
/// content ever appears in an error.
#[derive(Deserialize, Clone)]
#[serde(
    untagged,
    expecting = "a secret: a string, { file = \"PATH\" } or { env = \"NAME\" }"
)]
pub enum SecretText {
    /// The value itself.
    Literal(String),
    /// A file holding it.
    File(FromFile),
    /// An environment variable holding it.
    Env(FromEnv),
}

/// `{ file = PATH }`.
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct FromFile {
    file: PathBuf,
}

/// `{ env = NAME }`.
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct FromEnv {
    env: String,
}

impl SecretText {
    /// The secret, read from where it is, for `key`.
    pub fn resolve(self, key: &str) -> Result<String, ConfigError> {
        match self {
            SecretText::Literal(value) => Ok(value),
            SecretText::File(FromFile { file }) => {
                let text = std::fs::read_to_string(&file).map_err(|e| {
                    invalid(key, format!("cannot read the file {}: {e}", file.display()))
                })?;
                let text = text.strip_suffix('\n').unwrap_or(&text);
                Ok(text.strip_suffix('\r').unwrap_or(text).to_string())
            }
            SecretText::Env(FromEnv { env }) => std::env::var(&env).map_err(|_| {
                invalid(
                    key,
                    format!("the environment variable {env} is not set (or not UTF-8)"),
                )
            }),
        }
    }
}

/// A secret (see [`SecretText`]), or a list of them (for rotation).
#[derive(Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    /// One.
    One(SecretText),
    /// Several.
    Many(Vec<SecretText>),
}

impl OneOrMany {
    /// The secrets, in order, read from where they are, for `key`.
    pub fn resolve(self, key: &str) -> Result<Vec<String>, ConfigError> {
        match self {
            OneOrMany::One(s) => Ok(vec![s.resolve(key)?]),
            OneOrMany::Many(v) => v.into_iter().map(|s| s.resolve(key)).collect(),
        }
    }
}

/// `key`'s Standard Webhooks secrets (`whsec_…`), none when it is not written.
pub fn secrets(key: &str, raw: Option<OneOrMany>) -> Result<Vec<Secret>, ConfigError> {
    let Some(raw) = raw else {
        return Ok(Vec::new());
    };
    let list = raw.resolve(key)?;
    if list.is_empty() {
        return Err(invalid(key, "an empty list; omit the key instead"));
    }
    list.iter()
        .map(|s| Secret::parse(s).map_err(|e| invalid(key, format!("a secret {e}"))))
        .collect()
}

/// Whether `name` may name a tenant or a source: 1 to 64 of `[A-Za-z0-9_-]`.
pub fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_within_its_bounds_is_read_and_one_outside_is_refused_by_its_key() {
        assert_eq!(number("k", None, 8usize, 1..=10, ""), Ok(8));
        assert_eq!(number("k", Some(10), 8usize, 1..=10, ""), Ok(10));
        let e = number("a.k", Some(0), 8usize, 1..=10, "").expect_err("below");
        assert_eq!(e.to_string(), "config: a.k: must be between 1 and 10");
        let e = number("a.k", Some(-1), 8u32, 1..=10, "connections").expect_err("negative");
        assert_eq!(
            e.to_string(),
            "config: a.k: must be between 1 and 10 connections"
        );
        assert!(number("a.k", Some(i64::MAX), 8u32, 1.., "").is_err());
        let e = number("a.k", Some(0), 8u32, 1.., "per second").expect_err("zero");
        assert_eq!(e.to_string(), "config: a.k: must be at least 1 per second");
        let e = duration("a.d", Some("0s"), Duration::from_secs(1)).expect_err("zero");
        assert!(e.to_string().contains("a.d"), "{e}");
        assert!(duration("a.d", Some("3651d"), Duration::from_secs(1)).is_err());
        assert_eq!(
            duration("a.d", None, Duration::from_secs(7)),
            Ok(Duration::from_secs(7))
        );
    }
}
