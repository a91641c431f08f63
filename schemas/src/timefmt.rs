//! Time as idem writes it: unix milliseconds inside, RFC 3339 with millisecond resolution in
//! every JSON document (`2026-11-29T17:54:32.123Z`).

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// How far the store's clock is ahead of this machine's, in milliseconds (behind if negative).
/// Zero unless a store shared by several nodes says otherwise (see [`follow_store_clock`]).
static STORE_CLOCK_AHEAD_MS: AtomicI64 = AtomicI64::new(0);

/// Milliseconds since the unix epoch, now, by the store's clock: the one clock every time idem
/// keeps (a claim's and its expiry, a due time, a hold, a record) is taken from, so that nodes
/// sharing a store agree on them whatever their own clocks say.
pub fn now_ms() -> u64 {
    local_now_ms().saturating_add_signed(STORE_CLOCK_AHEAD_MS.load(Ordering::Relaxed))
}

/// Milliseconds since the unix epoch, now, by this machine's clock.
pub fn local_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Makes [`now_ms`] follow a store whose clock is `ahead_ms` ahead of this machine's (a
/// PostgreSQL server's, measured at each heartbeat). Process-wide: one process serves one store.
pub fn follow_store_clock(ahead_ms: i64) {
    STORE_CLOCK_AHEAD_MS.store(ahead_ms, Ordering::Relaxed);
}

/// Formats unix milliseconds as RFC 3339 UTC with exactly three fractional digits.
pub fn rfc3339_millis(ms: u64) -> String {
    let nanos = i128::from(ms) * 1_000_000;
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    // Written digit by digit: every response and callback formats a few of these, and
    // `format!`'s padded integers cost several times as much.
    let mut out = String::with_capacity(24);
    let fields = [
        (t.year().clamp(0, 9999) as u32, 4, '-'),
        (u32::from(u8::from(t.month())), 2, '-'),
        (u32::from(t.day()), 2, 'T'),
        (u32::from(t.hour()), 2, ':'),
        (u32::from(t.minute()), 2, ':'),
        (u32::from(t.second()), 2, '.'),
        (u32::from(t.millisecond()), 3, 'Z'),
    ];
    for (value, width, then) in fields {
        for place in (0..width).rev() {
            let digit = (value / 10u32.pow(place)) % 10;
            out.push(char::from(b'0' + digit as u8));
        }
        out.push(then);
    }
    out
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
        assert_eq!(
            rfc3339_millis(1_000_000_000_007),
            "2001-09-09T01:46:40.007Z"
        );
        assert_eq!(
            rfc3339_millis(253_402_300_799_999),
            "9999-12-31T23:59:59.999Z"
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
