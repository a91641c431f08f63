//! `Prefer: wait=N` (RFC 7240) on POST /v1/signals, against the real server and a receiver that
//! holds the first request's callback: a request whose key is in flight waits for the first
//! request's answer and gets it as a replay, the moment that answer is durable; it gets 409
//! when the wait (capped by `idempotency.max_wait`) runs out, or at once beyond
//! `idempotency.max_waiters`; a waiter with another payload is refused at once.

use std::time::{Duration, Instant};

use crate::support::*;

/// How long the receiver holds the first request's callback.
const HOLD: Duration = Duration::from_millis(900);

/// The harness of these tests: the receiver holds each `/notify` callback for [`HOLD`], within
/// the inline attempt's timeout.
fn harness() -> Harness {
    Harness::new()
        .delivery("inline_timeout = \"5s\"")
        .answer("/notify", hang(HOLD))
}

fn beta_sim_swap(subject: &str) -> String {
    sim_swap(subject).replace("\"risk\":97", "\"risk\":12")
}

/// Sends the key's first request and returns once its callback is being held by the receiver
/// (the key is in flight), with the request's answer to come.
async fn first_in_flight(
    client: &Client,
    receiver: &Receiver,
    key: &str,
    body: &str,
) -> tokio::task::JoinHandle<(Resp, Instant)> {
    let before = receiver.seen_on("/notify").len();
    let (c, k, b) = (client.clone(), key.to_string(), body.to_string());
    let first = tokio::spawn(async move {
        let r = c.signal(Req::new(&b).beta().key(&k)).await;
        (r, Instant::now())
    });
    let seen = eventually(
        Duration::from_secs(10),
        || async { receiver.seen_on("/notify").len() },
        |n| *n > before,
    )
    .await;
    assert_eq!(
        seen,
        before + 1,
        "the first request's callback never reached the receiver"
    );
    first
}

#[tokio::test]
async fn a_waiter_gets_the_first_answer_as_a_replay_the_moment_it_is_durable() {
    let (_dir, receiver, _idem, client) = harness().start().await;
    let key = unique("wait");
    let body = beta_sim_swap("+447700900001");
    let first = first_in_flight(&client, &receiver, &key, &body).await;

    let waited = client
        .signal(Req::new(&body).beta().key(&key).header("prefer", "wait=5"))
        .await;
    let waiter_done = Instant::now();
    let (first, first_done) = first.await.expect("first");

    assert_eq!(
        first.status,
        201,
        "{}",
        String::from_utf8_lossy(&first.body)
    );
    assert!(!first.replayed());
    assert_eq!(
        waited.status,
        201,
        "{}",
        String::from_utf8_lossy(&waited.body)
    );
    assert!(waited.replayed(), "a waiter's answer is a replay");
    assert_eq!(
        waited.body, first.body,
        "the waiter gets the first answer's bytes"
    );
    assert_eq!(waited.header("preference-applied"), Some("wait=5"));
    // Answered with the first request, not by a poll some time later.
    let gap = if waiter_done > first_done {
        waiter_done - first_done
    } else {
        first_done - waiter_done
    };
    assert!(
        gap < Duration::from_millis(150),
        "the waiter came {gap:?} apart from the first"
    );
    assert_eq!(
        receiver.seen_on("/notify").len(),
        1,
        "one callback for the key"
    );

    // Without the preference, a request for a key in flight is refused at once, as before.
    let key = unique("nowait");
    let first = first_in_flight(&client, &receiver, &key, &body).await;
    let refused = client.signal(Req::new(&body).beta().key(&key)).await;
    assert_eq!(refused.status, 409);
    assert_eq!(refused.problem_type(), "urn:idem:problem:key-in-flight");
    assert_eq!(refused.header("retry-after"), Some("2"));
    assert!(refused.header("preference-applied").is_none());
    assert_eq!(first.await.expect("first").0.status, 201);
    assert_eq!(receiver.seen_on("/notify").len(), 2);
}

#[tokio::test]
async fn a_wait_is_capped_by_max_wait_and_ends_in_409() {
    let (_dir, receiver, _idem, client) =
        harness().idempotency("max_wait = \"200ms\"").start().await;
    receiver.answer("/notify", 200, Duration::from_secs(3));
    let key = unique("capped");
    let body = beta_sim_swap("+447700900002");
    let first = first_in_flight(&client, &receiver, &key, &body).await;

    let asked = Instant::now();
    let refused = client
        .signal(Req::new(&body).beta().key(&key).header("prefer", "wait=30"))
        .await;
    let waited = asked.elapsed();
    assert_eq!(
        refused.status,
        409,
        "{}",
        String::from_utf8_lossy(&refused.body)
    );
    assert_eq!(refused.problem_type(), "urn:idem:problem:key-in-flight");
    assert!(refused.header("retry-after").is_some());
    assert!(
        waited >= Duration::from_millis(200) && waited < Duration::from_secs(2),
        "waited {waited:?}: the cap is 200 ms"
    );
    // A number of seconds too large to read is held to the cap too, not ignored.
    let asked = Instant::now();
    let refused = client
        .signal(
            Req::new(&body)
                .beta()
                .key(&key)
                .header("prefer", "wait=99999999999999999999999"),
        )
        .await;
    let waited = asked.elapsed();
    assert_eq!(refused.status, 409);
    assert!(
        waited >= Duration::from_millis(200),
        "waited {waited:?}: an overflowing wait is capped at 200 ms, not ignored"
    );
    // The key's own answer is untouched by the waiter that gave up.
    let (first, _) = first.await.expect("first");
    assert_eq!(first.status, 201);
    let again = client.signal(Req::new(&body).beta().key(&key)).await;
    assert!(again.replayed());
    assert_eq!(again.body, first.body);
}

#[tokio::test]
async fn waiters_beyond_max_waiters_get_409_at_once_and_another_payload_422() {
    let (_dir, receiver, _idem, client) = harness().idempotency("max_waiters = 3").start().await;
    let key = unique("storm");
    let body = beta_sim_swap("+447700900003");
    let first = first_in_flight(&client, &receiver, &key, &body).await;

    let started = Instant::now();
    let storm = (0..10).map(|_| {
        let (c, k, b) = (client.clone(), key.clone(), body.clone());
        async move {
            let r = c
                .signal(Req::new(&b).beta().key(&k).header("prefer", "wait=10"))
                .await;
            (r, started.elapsed())
        }
    });
    let other = client.signal(
        Req::new(&beta_sim_swap("+447700900999"))
            .beta()
            .key(&key)
            .header("prefer", "wait=10"),
    );
    let (answers, other) = tokio::join!(futures::future::join_all(storm), other);
    let (first, _) = first.await.expect("first");
    assert_eq!(first.status, 201);

    assert_eq!(
        other.status, 422,
        "another payload is refused, not kept waiting"
    );
    assert_eq!(other.problem_type(), "urn:idem:problem:key-reused");
    let replays: Vec<_> = answers.iter().filter(|(r, _)| r.status == 201).collect();
    let refused: Vec<_> = answers.iter().filter(|(r, _)| r.status == 409).collect();
    assert_eq!(replays.len(), 3, "max_waiters = 3 wait");
    assert_eq!(refused.len(), 7, "the rest are refused");
    for (r, _) in &replays {
        assert!(r.replayed());
        assert_eq!(r.body, first.body);
    }
    // Refused at once: well before the held callback (and so the first answer) came back.
    for (_, at) in &refused {
        assert!(
            *at < HOLD / 2,
            "a waiter beyond the bound was refused after {at:?}"
        );
    }
    assert_eq!(receiver.seen_on("/notify").len(), 1);
}
