//! Time as idem writes it: unix milliseconds inside, RFC 3339 with millisecond resolution in
//! every JSON document (`2026-11-29T17:54:32.123Z`).

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the unix epoch, now.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Formats unix milliseconds as RFC 3339 UTC with exactly three fractional digits.
pub fn rfc3339_millis(ms: u64) -> String {
    let nanos = i128::from(ms) * 1_000_000;
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}

/// True when `s` is an RFC 3339 date-time (any offset).
pub fn is_rfc3339(s: &str) -> bool {
    time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).is_ok()
}

/// An RFC 3339 date-time (any offset) as unix milliseconds; `None` if it is not one or is
/// before the epoch.
pub fn parse_rfc3339_ms(s: &str) -> Option<u64> {
    let t = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()?;
    u64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_millis() {
        assert_eq!(rfc3339_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339_millis(1_795_888_472_123),
            "2026-11-28T17:54:32.123Z"
        );
    }

    #[test]
    fn parses_offsets() {
        assert!(is_rfc3339("2026-11-29T17:54:32Z"));
        assert!(is_rfc3339("2026-11-29T17:54:32.5+01:00"));
        assert!(!is_rfc3339("2026-11-29 17:54"));
        assert!(!is_rfc3339("yesterday"));
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:01.5Z"), Some(1_500));
        assert_eq!(parse_rfc3339_ms("1970-01-01T01:00:00+01:00"), Some(0));
        assert_eq!(parse_rfc3339_ms("yesterday"), None);
    }
}
