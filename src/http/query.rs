//! The query parameters of the listing endpoints, read one way everywhere: a parameter the
//! endpoint does not know is refused (a misspelt filter would otherwise list everything), and a
//! page size must be within its bounds. Each refusal is `400 invalid-query` saying what to send.

use std::collections::HashMap;

use crate::http::problem::{ApiError, Kind};

/// The query of a listing request.
pub type Query = HashMap<String, String>;

/// A `400 invalid-query` saying `detail`.
pub fn invalid(detail: impl Into<String>) -> ApiError {
    ApiError::new(Kind::InvalidQuery, detail)
}

/// Refuses a parameter not among `known`.
pub fn only(query: &Query, known: &[&str]) -> Result<(), ApiError> {
    match query.keys().find(|k| !known.contains(&k.as_str())) {
        Some(unknown) => Err(invalid(format!(
            "unknown parameter {unknown:?}; use {}",
            known.join(", ")
        ))),
        None => Ok(()),
    }
}

/// The page size asked for: `default` without `limit`, otherwise 1 to `max`.
pub fn limit(query: &Query, default: usize, max: usize) -> Result<usize, ApiError> {
    match query.get("limit") {
        None => Ok(default),
        Some(l) => l
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=max).contains(n))
            .ok_or_else(|| invalid(format!("limit must be 1 to {max}"))),
    }
}
