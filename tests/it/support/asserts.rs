//! Assertions on idem's answers and on what its store holds, each saying in its message what
//! was expected and showing the whole response: a first processing, a replay of a first
//! answer, a problem of a given type, a subject never held in clear, a source's receipt, exactly
//! so many callbacks.

use std::time::Duration;

use crate::support::client::Resp;
use crate::support::receiver::{Received, Receiver};
use crate::support::wait::eventually;

/// A response's status, headers and body, for assertion messages.
pub fn text(r: &Resp) -> String {
    format!(
        "status {} headers {:?} body {}",
        r.status,
        r.headers,
        String::from_utf8_lossy(&r.body)
    )
}

/// The `decision_id` of a decision's body.
pub fn decision_id(r: &Resp) -> String {
    r.json()["decision_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no decision_id: {}", text(r)))
        .to_string()
}

/// Whether `r` answers with another signal's decision for the subject (`once_per_subject`).
pub fn deduplicated(r: &Resp) -> bool {
    r.header("idem-deduplicated") == Some("subject")
}

/// Asserts that `r` is a new decision's first processing.
pub fn assert_first(r: &Resp, what: &str) {
    assert_eq!(r.status, 201, "{what}: {}", text(r));
    assert!(!r.replayed(), "{what}: a first processing: {}", text(r));
    assert!(!deduplicated(r), "{what}: not deduplicated: {}", text(r));
}

/// Asserts that `r` replays `first`'s bytes (a retry of a key).
pub fn assert_replay_of(r: &Resp, first: &Resp, what: &str) {
    assert_eq!(r.status, 201, "{what}: {}", text(r));
    assert!(r.replayed(), "{what}: Idempotent-Replayed: {}", text(r));
    assert_eq!(
        String::from_utf8_lossy(&r.body),
        String::from_utf8_lossy(&first.body),
        "{what}: the same bytes"
    );
}

/// Asserts that `r` is a problem of `status` whose type ends in `slug`.
pub fn assert_problem(r: &Resp, status: u16, slug: &str, what: &str) {
    assert_eq!(r.status, status, "{what}: {}", text(r));
    assert_eq!(
        r.problem_type(),
        format!("urn:idem:problem:{slug}"),
        "{what}: {}",
        text(r)
    );
}

/// Asserts that none of what the store holds (see [`stored`]) carries `subject` in clear, with
/// or without its leading `+`.
pub fn assert_subject_not_held(held: &[(String, Vec<u8>)], subject: &str) {
    assert!(
        held.iter().map(|(_, b)| b.len()).sum::<usize>() > 0,
        "the store wrote something"
    );
    for (place, bytes) in held {
        assert!(
            !contains(bytes, subject.as_bytes()),
            "raw subject found in {place}"
        );
        assert!(
            !contains(bytes, subject.trim_start_matches('+').as_bytes()),
            "the subject's digits found in {place}"
        );
    }
}

/// True when `needle` occurs in `haystack`.
pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The receipt of an answered delivery: (accepted, duplicates, ignored, refused).
pub fn receipt(r: &Resp) -> (u64, u64, u64, u64) {
    assert_eq!(r.status, 200, "{}", text(r));
    let b = r.json();
    let n = |k: &str| b[k].as_u64().unwrap_or_else(|| panic!("no {k}: {b}"));
    (n("accepted"), n("duplicates"), n("ignored"), n("refused"))
}

/// How long a negative check watches for a callback that must not come: several retry steps.
/// It polls, so it fails as soon as one comes.
pub const LATE: Duration = Duration::from_millis(600);

/// Waits until `path` has seen `n` callbacks, then watches [`LATE`] for more: exactly `n`.
pub async fn exactly(receiver: &Receiver, path: &str, n: usize) -> Vec<Received> {
    let seen = eventually(
        Duration::from_secs(15),
        || async { receiver.seen_on(path) },
        |s| s.len() >= n,
    )
    .await;
    assert_eq!(seen.len(), n, "{path}: {seen:?}");
    let seen = eventually(LATE, || async { receiver.seen_on(path) }, |s| s.len() > n).await;
    assert_eq!(seen.len(), n, "{path}: more callbacks than events");
    seen
}
