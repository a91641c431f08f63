//! The `Prefer` request header (RFC 7240), of which idem honours one preference: `wait=N`, how
//! many seconds a request whose key is in flight may wait for the first request's answer. The
//! header may be repeated and may carry other preferences (`Prefer: respond-async, wait=5`);
//! those, and a `wait` whose value is not a number of seconds, are ignored, as the RFC asks of
//! preferences a server does not understand; a number too large to read is capped like any other.

use std::time::Duration;

use axum::http::HeaderMap;

/// The `wait` preference of a request, in seconds, if it states one.
pub fn wait(headers: &HeaderMap) -> Option<u64> {
    headers
        .get_all("prefer")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .find_map(|preference| {
            // A preference is `token [= value] *(; parameter)`: only the token and value count.
            let head = preference.split(';').next()?;
            let (name, value) = head.split_once('=')?;
            if !name.trim().eq_ignore_ascii_case("wait") {
                return None;
            }
            seconds(value.trim().trim_matches('"'))
        })
}

/// A number of seconds: ASCII digits, however many (a number too large for any clock is as
/// good as the cap, which it is held to).
fn seconds(digits: &str) -> Option<u64> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(digits.parse::<u64>().unwrap_or(u64::MAX))
}

/// The wait applied to a preference of `seconds`, capped at `max`: none for no wait at all.
pub fn applied(seconds: u64, max: Duration) -> Option<Duration> {
    Some(Duration::from_secs(seconds).min(max)).filter(|wait| !wait.is_zero())
}

/// `wait` as `Preference-Applied` states it: whole seconds, rounded up, so a cap below a second
/// does not read as no wait.
pub fn applied_header(wait: Duration) -> String {
    let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    format!("wait={seconds}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append("prefer", v.parse().expect("value"));
        }
        h
    }

    #[test]
    fn finds_wait_among_other_preferences() {
        assert_eq!(wait(&headers(&["wait=5"])), Some(5));
        assert_eq!(wait(&headers(&["respond-async, wait=7"])), Some(7));
        assert_eq!(
            wait(&headers(&["return=minimal", "Wait = \"3\"; x=1"])),
            Some(3)
        );
        assert_eq!(wait(&headers(&["wait=soon"])), None);
        assert_eq!(wait(&headers(&["wait=-1"])), None);
        assert_eq!(wait(&headers(&["wait=+1"])), None);
        assert_eq!(wait(&headers(&["wait="])), None);
        // Past u64: as long as any cap.
        assert_eq!(
            wait(&headers(&["wait=99999999999999999999999"])),
            Some(u64::MAX)
        );
        assert_eq!(wait(&headers(&["respond-async"])), None);
        assert_eq!(wait(&HeaderMap::new()), None);
    }

    #[test]
    fn the_cap_applies_and_zero_is_no_wait() {
        let max = Duration::from_secs(10);
        assert_eq!(applied(30, max), Some(max));
        assert_eq!(applied(4, max), Some(Duration::from_secs(4)));
        assert_eq!(applied(0, max), None);
        assert_eq!(applied(u64::MAX, max), Some(max));
        assert_eq!(applied_header(Duration::from_secs(4)), "wait=4");
        assert_eq!(applied_header(Duration::from_millis(1500)), "wait=2");
    }
}
