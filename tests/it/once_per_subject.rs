//! Playbooks decided once per subject (`once_per_subject`), end to end: within the window after a
//! decision for (tenant, signal type, subject), every further signal of that type for that
//! subject — keyless, or keyed with another key, whatever its metadata — runs no action and gets
//! the first decision's stored response byte for byte, marked `Idempotent-Replayed: true` and
//! `Idem-Deduplicated: subject`; a keyed one keeps that answer under its own key (its retries
//! replay it, another body under it is 422). Another subject, type or tenant is a new decision,
//! and so is the next signal once the window has passed. The subject's callbacks run exactly once
//! per decision, under 16 concurrent copies (keyless or each with its own key) and across a
//! SIGKILL and restart; and the subject is stored only as its keyed digest.

use std::collections::HashSet;
use std::time::Duration;

use crate::support::*;

/// Long enough that a callback the receiver holds for a while is still delivered inline (a
/// queued one would be retried, and counted twice).
const DELIVERY: &str = "inline_timeout = \"5s\"";

/// A moment for a late (wrong) callback to arrive before the receiver's count is read.
const LATE: Duration = Duration::from_millis(300);

/// A third tenant with the same once-per-subject playbook as beta's `account_takeover`, so that
/// the same subject and type can be sent under another tenant (acme has no such playbook).
fn gamma(receiver: &Receiver) -> String {
    format!(
        r#"
[tenants.gamma]
api_key = "sk_gamma_test_key"
callback_secret = "{CALLBACK_SECRET}"

[tenants.gamma.playbooks.account_takeover]
decision = "deny"
once_per_subject = "1h"
actions = [ {{ name = "lock", url = "{takeover}" }} ]
"#,
        takeover = receiver.url("/takeover"),
    )
}

/// The test tenants and [`gamma`].
fn with_gamma(receiver: &Receiver) -> String {
    test_tenants(receiver) + &gamma(receiver)
}

/// The harness of these tests: the test tenants and gamma, callbacks delivered inline.
fn harness() -> Harness {
    Harness::new().delivery(DELIVERY).tenants(with_gamma)
}

/// An `account_takeover` signal for `subject` with `metadata` (a JSON object).
fn takeover(subject: &str, metadata: &str) -> String {
    format!(r#"{{"type":"account_takeover","subject":"{subject}","metadata":{metadata}}}"#)
}

/// A `breach` signal (decided once per 700 ms) for `subject`.
fn breach(subject: &str, metadata: &str) -> String {
    format!(r#"{{"type":"breach","subject":"{subject}","metadata":{metadata}}}"#)
}

/// Asserts that `r` is the deduplicated replay of `first`, byte for byte.
fn assert_deduplicated(r: &Resp, first: &Resp, what: &str) {
    assert_eq!(r.status, 201, "{what}: {}", text(r));
    assert!(r.replayed(), "{what}: Idempotent-Replayed: {}", text(r));
    assert!(
        deduplicated(r),
        "{what}: Idem-Deduplicated: subject: {}",
        text(r)
    );
    assert_eq!(
        String::from_utf8_lossy(&r.body),
        String::from_utf8_lossy(&first.body),
        "{what}: the first decision's bytes"
    );
}

/// The decision ids of the callbacks received on `path`.
fn callback_decisions(receiver: &Receiver, path: &str) -> Vec<String> {
    receiver
        .seen_on(path)
        .iter()
        .map(|cb| {
            let env: serde_json::Value = serde_json::from_slice(&cb.body).expect("envelope");
            env["data"]["decision_id"]
                .as_str()
                .expect("decision_id")
                .to_string()
        })
        .collect()
}

/// The one first processing among concurrent `responses` (every other is a replay or a refusal).
fn the_one_first(responses: &[Resp]) -> Resp {
    let firsts: Vec<&Resp> = responses
        .iter()
        .filter(|r| r.status == 201 && !r.replayed())
        .collect();
    assert_eq!(
        firsts.len(),
        1,
        "exactly one first processing: {:?}",
        responses.iter().map(text).collect::<Vec<_>>()
    );
    firsts[0].clone()
}

#[tokio::test]
async fn within_the_window_every_signal_for_the_subject_gets_the_first_decision_and_runs_nothing() {
    let (_dir, receiver, _idem, client) = harness().start().await;
    let subject = "+447700900123";

    let first = client
        .signal(Req::new(&takeover(subject, r#"{"risk":90}"#)).beta())
        .await;
    assert_first(&first, "the first signal for the subject");
    let decision = first.json();
    assert_eq!(decision["type"], "account_takeover");
    assert_eq!(decision["decision"], "deny");
    assert_eq!(decision["actions"][0]["name"], "lock");
    assert_eq!(decision["actions"][0]["status"], "delivered");
    let first_id = decision_id(&first);

    // Keyless copies, the same or with other metadata and an occurred_at.
    let copy = client
        .signal(Req::new(&takeover(subject, r#"{"risk":90}"#)).beta())
        .await;
    assert_deduplicated(&copy, &first, "a keyless copy");
    let other_metadata = format!(
        r#"{{"type":"account_takeover","subject":"{subject}","occurred_at":"2026-11-29T17:54:32Z","metadata":{{"risk":12,"source":"elsewhere"}}}}"#
    );
    let other = client.signal(Req::new(&other_metadata).beta()).await;
    assert_deduplicated(&other, &first, "a keyless signal with other metadata");
    let bare = client
        .signal(
            Req::new(&format!(
                r#"{{"type":"account_takeover","subject":"{subject}"}}"#
            ))
            .beta(),
        )
        .await;
    assert_deduplicated(&bare, &first, "a keyless signal without metadata");

    // A keyed one, under a key of its own: deduplicated, and that answer is now its key's.
    let key = unique("ato");
    let keyed_body = takeover(subject, r#"{"risk":55}"#);
    let keyed = client.signal(Req::new(&keyed_body).key(&key).beta()).await;
    assert_deduplicated(&keyed, &first, "a keyed signal under a new key");
    let retry = client.signal(Req::new(&keyed_body).key(&key).beta()).await;
    assert_replay_of(&retry, &keyed, "the keyed signal's retry");
    let reused = client
        .signal(
            Req::new(&takeover(subject, r#"{"risk":56}"#))
                .key(&key)
                .beta(),
        )
        .await;
    assert_eq!(
        reused.status,
        422,
        "another body under the key: {}",
        text(&reused)
    );
    assert_eq!(reused.problem_type(), "urn:idem:problem:key-reused");
    let retry = client.signal(Req::new(&keyed_body).key(&key).beta()).await;
    assert_replay_of(&retry, &keyed, "the keyed signal's retry after the 422");
    // Another new key with the first signal's very body.
    let key2 = unique("ato");
    let keyed2 = client
        .signal(
            Req::new(&takeover(subject, r#"{"risk":90}"#))
                .key(&key2)
                .beta(),
        )
        .await;
    assert_deduplicated(&keyed2, &first, "another key with the first body");

    tokio::time::sleep(LATE).await;
    assert_eq!(
        callback_decisions(&receiver, "/takeover"),
        std::slice::from_ref(&first_id),
        "one decision, one callback"
    );

    // Another subject, another signal type, another tenant: each a decision of its own.
    let subject2 = "+447700900124";
    let second = client
        .signal(Req::new(&takeover(subject2, r#"{"risk":90}"#)).beta())
        .await;
    assert_first(&second, "another subject");
    assert_ne!(decision_id(&second), first_id);
    assert_ne!(second.json()["subject_hash"], decision["subject_hash"]);
    let other_type = client
        .signal(Req::new(&breach(subject, r#"{"risk":90}"#)).beta())
        .await;
    assert_first(&other_type, "another once-per-subject type for the subject");
    assert_ne!(decision_id(&other_type), first_id);
    assert_eq!(other_type.json()["subject_hash"], decision["subject_hash"]);
    let plain = client.signal(Req::new(&sim_swap(subject)).beta()).await;
    assert_first(&plain, "a type not decided once per subject");
    let other_tenant = client
        .signal(
            Req::new(&takeover(subject, r#"{"risk":90}"#))
                .header("authorization", "Bearer sk_gamma_test_key"),
        )
        .await;
    assert_first(&other_tenant, "another tenant, same type and subject");
    assert_ne!(decision_id(&other_tenant), first_id);
    assert_ne!(
        other_tenant.json()["subject_hash"],
        decision["subject_hash"]
    );

    // And each of those is itself decided once for its subject.
    let again = client
        .signal(Req::new(&takeover(subject2, r#"{}"#)).beta())
        .await;
    assert_deduplicated(&again, &second, "the other subject's copy");
    let again = client
        .signal(
            Req::new(&takeover(subject, r#"{}"#))
                .header("authorization", "Bearer sk_gamma_test_key"),
        )
        .await;
    assert_deduplicated(&again, &other_tenant, "the other tenant's copy");

    let _ = receiver.wait_for(5).await;
    tokio::time::sleep(LATE).await;
    let mut seen = callback_decisions(&receiver, "/takeover");
    seen.sort();
    let mut expected = vec![first_id, decision_id(&second), decision_id(&other_tenant)];
    expected.sort();
    assert_eq!(seen, expected, "one callback per decision on /takeover");
    assert_eq!(
        callback_decisions(&receiver, "/breach"),
        [decision_id(&other_type)]
    );
    assert_eq!(receiver.seen_on("/notify").len(), 1);
}

#[tokio::test]
async fn after_the_window_the_next_signal_for_the_subject_is_a_new_decision() {
    let (_dir, receiver, _idem, client) = harness().start().await;
    let subject = "acct-4711";
    // The configured window of `breach`.
    let window = Duration::from_millis(700);

    let first = client
        .signal(Req::new(&breach(subject, r#"{"n":1}"#)).beta())
        .await;
    assert_first(&first, "the first breach signal");
    let early_key = unique("breach");
    let early_body = breach(subject, r#"{"n":2}"#);
    let early = client
        .signal(Req::new(&early_body).key(&early_key).beta())
        .await;
    assert_deduplicated(&early, &first, "a keyed signal within the window");

    // A keyless signal once the window has passed makes a new decision and runs its action.
    tokio::time::sleep(window).await;
    let second = client
        .signal(Req::new(&breach(subject, r#"{"n":3}"#)).beta())
        .await;
    assert_first(&second, "the first keyless signal after the window");
    assert_ne!(decision_id(&second), decision_id(&first));
    assert_eq!(second.json()["subject_hash"], first.json()["subject_hash"]);
    let copy = client
        .signal(Req::new(&breach(subject, r#"{"n":4}"#)).beta())
        .await;
    assert_deduplicated(&copy, &second, "a copy within the second window");

    // The early key keeps its own answer: the first decision's bytes.
    let retry = client
        .signal(Req::new(&early_body).key(&early_key).beta())
        .await;
    assert_replay_of(&retry, &early, "the early key's retry after the window");

    // After the window again, a keyed signal under a new key makes the new decision.
    tokio::time::sleep(window).await;
    let key = unique("breach");
    let body = breach(subject, r#"{"n":5}"#);
    let third = client.signal(Req::new(&body).key(&key).beta()).await;
    assert_first(&third, "the first keyed signal after the window");
    let ids: HashSet<String> = [&first, &second, &third]
        .iter()
        .map(|r| decision_id(r))
        .collect();
    assert_eq!(ids.len(), 3, "three windows, three decisions");
    let retry = client.signal(Req::new(&body).key(&key).beta()).await;
    assert_replay_of(&retry, &third, "the keyed decision's retry");
    let copy = client
        .signal(Req::new(&breach(subject, r#"{"n":6}"#)).beta())
        .await;
    assert_deduplicated(&copy, &third, "a keyless copy within the third window");

    let _ = receiver.wait_for(3).await;
    tokio::time::sleep(LATE).await;
    assert_eq!(
        callback_decisions(&receiver, "/breach"),
        [
            decision_id(&first),
            decision_id(&second),
            decision_id(&third)
        ],
        "one callback per decision, none for a deduplicated signal"
    );
}

/// A window shorter than the decision's callback: the subject's claim expires while its
/// decision still runs, and holds the subject until it completes. A signal meanwhile makes no
/// second decision (it waits for the first's answer, or is 409), and the first decision's
/// records are written, not fenced; once it has completed, the next signal decides anew.
#[tokio::test]
async fn a_window_that_ends_while_its_decision_runs_holds_the_subject_until_it_completes() {
    let callback = Duration::from_millis(1_500);
    let (_dir, receiver, _idem, client) = harness().answer("/breach", hang(callback)).start().await;
    let subject = "acct-slow-callback";
    let window = Duration::from_millis(700);
    let started = std::time::Instant::now();
    let first = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .signal(Req::new(&breach(subject, r#"{"n":1}"#)).beta())
                .await
        })
    };
    // Past the window, with the first decision's callback still held by the receiver.
    tokio::time::sleep(window + Duration::from_millis(200)).await;
    let refused = client
        .signal(Req::new(&breach(subject, r#"{"n":2}"#)).beta())
        .await;
    assert!(
        started.elapsed() < callback,
        "the callback had ended already"
    );
    assert_eq!(refused.status, 409, "{}", text(&refused));
    let waited = client
        .signal(
            Req::new(&breach(subject, r#"{"n":3}"#))
                .beta()
                .header("prefer", "wait=10"),
        )
        .await;
    let first = first.await.expect("the first request");
    assert_first(&first, "the slow first decision");
    assert_deduplicated(&waited, &first, "a signal that waited past the window");
    assert_eq!(
        receiver.seen_on("/breach").len(),
        1,
        "one decision, one callback"
    );

    // Completed and expired, the subject is free: the next signal is a new decision. The
    // completion follows the first answer in a later commit (on PostgreSQL, the next batch);
    // until it is durable, a signal still gets the first decision.
    let next = eventually(
        Duration::from_secs(5),
        || client.signal(Req::new(&breach(subject, r#"{"n":4}"#)).beta()),
        |r| !r.replayed(),
    )
    .await;
    assert_first(&next, "the next signal once the first completed");
    assert_ne!(decision_id(&next), decision_id(&first));
    assert_eq!(receiver.seen_on("/breach").len(), 2);
}

#[tokio::test]
async fn sixteen_concurrent_keyless_copies_make_one_decision_and_one_callback() {
    let (_dir, receiver, _idem, client) = harness().start().await;
    // A slow callback keeps the first request in flight while the copies arrive.
    receiver.answer("/takeover", 200, Duration::from_millis(500));
    let subject = "+15550001111";
    let body = takeover(subject, r#"{"risk":97}"#);
    let copies = (0..16).map(|_| client.signal(Req::new(&body).beta()));
    let responses: Vec<Resp> = futures::future::join_all(copies).await;

    let first = the_one_first(&responses);
    assert!(!deduplicated(&first));
    for r in &responses {
        match r.status {
            201 if r.replayed() => assert_deduplicated(r, &first, "a concurrent copy"),
            201 => {}
            409 => assert_eq!(r.problem_type(), "urn:idem:problem:key-in-flight"),
            _ => panic!("unexpected answer to a concurrent copy: {}", text(r)),
        }
    }

    tokio::time::sleep(LATE).await;
    assert_eq!(
        callback_decisions(&receiver, "/takeover"),
        [decision_id(&first)],
        "one callback for the one decision"
    );
    // With every copy answered, one more is a deduplicated replay.
    let more = client.signal(Req::new(&body).beta()).await;
    assert_deduplicated(&more, &first, "a copy after the storm");
    tokio::time::sleep(LATE).await;
    assert_eq!(receiver.seen_on("/takeover").len(), 1);
}

#[tokio::test]
async fn sixteen_concurrent_signals_each_with_its_own_key_make_one_decision() {
    // Fewer waiters per key than keys: the keys' claims waiting on the subject's claim are not
    // bounded by `max_waiters`, which bounds clients' requests.
    let (_dir, receiver, _idem, client) = harness().idempotency("max_waiters = 2").start().await;
    receiver.answer("/takeover", 200, Duration::from_millis(500));
    let subject = "+15550002222";
    let keys: Vec<(String, String)> = (0..16)
        .map(|n| {
            (
                unique("storm"),
                takeover(subject, &format!(r#"{{"copy":{n}}}"#)),
            )
        })
        .collect();
    let sends = keys
        .iter()
        .map(|(key, body)| client.signal(Req::new(body).key(key).beta()));
    let responses: Vec<Resp> = futures::future::join_all(sends).await;

    let first = the_one_first(&responses);
    for r in &responses {
        match r.status {
            201 if r.replayed() => assert_deduplicated(r, &first, "a concurrent keyed signal"),
            201 => {}
            409 => assert_eq!(r.problem_type(), "urn:idem:problem:key-in-flight"),
            _ => panic!(
                "unexpected answer to a concurrent keyed signal: {}",
                text(r)
            ),
        }
    }

    // Every key's retry replays what that key got; a key answered 409 now gets the one
    // decision's bytes.
    for ((key, body), got) in keys.iter().zip(&responses) {
        let retry = eventually(
            Duration::from_secs(10),
            || client.signal(Req::new(body).key(key).beta()),
            |r| r.status != 409,
        )
        .await;
        match got.status {
            201 => assert_replay_of(&retry, got, "a key's retry"),
            _ => assert_replay_of(&retry, &first, "the retry of a key answered 409"),
        }
    }

    tokio::time::sleep(LATE).await;
    assert_eq!(
        callback_decisions(&receiver, "/takeover"),
        [decision_id(&first)],
        "one callback for the one decision"
    );
}

#[tokio::test]
async fn a_keyed_signal_completed_before_a_sigkill_replays_after_restart_and_runs_nothing() {
    let (_dir, receiver, idem, client) = harness().start().await;
    let subject = "+447700900200";
    let key = unique("killed");
    let body = takeover(subject, r#"{"risk":80}"#);
    let first = client.signal(Req::new(&body).key(&key).beta()).await;
    assert_first(&first, "the keyed signal");
    let _ = receiver.wait_for(1).await;

    let config = idem.kill();
    let idem = Idem::start_with(config, &[]);
    let client = Client::new(&idem.base);
    let retry = retry_after_crash(|| client.signal(Req::new(&body).key(&key).beta())).await;
    assert_replay_of(&retry, &first, "the key's retry after SIGKILL and restart");
    let keyless = client
        .signal(Req::new(&takeover(subject, r#"{"risk":1}"#)).beta())
        .await;
    assert_deduplicated(&keyless, &first, "a keyless signal after the restart");
    let other_key = client
        .signal(Req::new(&body).key(&unique("after")).beta())
        .await;
    assert_deduplicated(&other_key, &first, "another key after the restart");

    tokio::time::sleep(LATE).await;
    assert_eq!(
        callback_decisions(&receiver, "/takeover"),
        [decision_id(&first)],
        "no second callback"
    );
}

#[tokio::test]
async fn a_keyed_signal_killed_mid_dispatch_resumes_the_same_decision_and_delivery() {
    // The receiver takes the callback and holds its answer: the process dies before it is back.
    let (_dir, receiver, idem, client) = harness()
        .answer("/takeover", hang(Duration::from_secs(30)))
        .start()
        .await;
    let subject = "+447700900300";
    let key = unique("midflight");
    let body = takeover(subject, r#"{"risk":80}"#);
    let req = Req::new(&body).key(&key).beta();
    let pending = tokio::spawn(async move { client.try_send("POST", "/v1/signals", req).await });
    let before = receiver.wait_for(1).await;
    let config = idem.kill();
    let _ = pending.await;

    receiver.answer("/takeover", 200, Duration::ZERO);
    let idem = Idem::start_with(config, &[]);
    let client = Client::new(&idem.base);
    let resumed = retry_after_crash(|| client.signal(Req::new(&body).key(&key).beta())).await;
    assert_eq!(resumed.status, 201, "{}", text(&resumed));
    assert!(
        !resumed.replayed() && !deduplicated(&resumed),
        "the first response ever sent for this key: {}",
        text(&resumed)
    );
    let env: serde_json::Value = serde_json::from_slice(&before[0].body).expect("envelope");
    assert_eq!(
        env["data"]["decision_id"].as_str(),
        Some(decision_id(&resumed).as_str()),
        "the decision made before the crash"
    );

    let replay = client.signal(Req::new(&body).key(&key).beta()).await;
    assert_replay_of(&replay, &resumed, "the key's retry after the resumption");
    let keyless = client
        .signal(Req::new(&takeover(subject, r#"{"risk":2}"#)).beta())
        .await;
    assert_deduplicated(&keyless, &resumed, "a keyless signal after the resumption");

    tokio::time::sleep(LATE).await;
    let seen = receiver.seen_on("/takeover");
    // The interrupted attempt may be made again (at-least-once delivery), but only as the same
    // delivery: the same webhook-id and the same bytes, never a second decision's callback.
    assert!(
        (1..=2).contains(&seen.len()),
        "the one delivery, attempted at most once more: {} attempts",
        seen.len()
    );
    for cb in &seen {
        assert_eq!(cb.header("webhook-id"), before[0].header("webhook-id"));
        assert_eq!(cb.body, before[0].body, "byte-identical envelope");
        assert!(cb.signed_with(CALLBACK_SECRET));
    }
    assert_eq!(
        resumed.json()["actions"][0]["delivery_id"].as_str(),
        Some(before[0].header("webhook-id"))
    );
}

#[tokio::test]
async fn the_subject_is_stored_only_as_its_keyed_digest() {
    let (dir, receiver, idem, client) = harness().start().await;
    let subject = "+447700900777";
    let first = client
        .signal(Req::new(&takeover(subject, r#"{"risk":3}"#)).beta())
        .await;
    assert_first(&first, "the first signal");
    for n in 0..2 {
        let keyless = client
            .signal(Req::new(&takeover(subject, &format!(r#"{{"n":{n}}}"#))).beta())
            .await;
        assert_deduplicated(&keyless, &first, "a keyless copy");
        let keyed = client
            .signal(
                Req::new(&takeover(subject, r#"{"risk":3}"#))
                    .key(&unique("pii"))
                    .beta(),
            )
            .await;
        assert_deduplicated(&keyed, &first, "a keyed copy");
    }
    let other = client
        .signal(
            Req::new(&breach(subject, r#"{}"#))
                .key(&unique("pii"))
                .beta(),
        )
        .await;
    assert_first(&other, "a breach signal");
    let logs = idem.stderr();
    let (status, config_path) = idem.terminate().await;
    assert!(status.success());

    assert_subject_not_held(&stored(&config_path, &dir.path().join("data")), subject);
    assert!(!logs.contains(subject), "logs stay clean");
    for cb in receiver.seen() {
        assert!(!contains(&cb.body, subject.as_bytes()));
    }
}

#[tokio::test]
async fn a_subjects_claim_that_cannot_answer_fails_the_keyed_request_instead_of_hanging() {
    // One claim actor at a time: the key's actor is the one, so the subject's cannot start.
    let (_dir, receiver, _idem, client) =
        harness().idempotency("max_live_actors = 1").start().await;
    let body = takeover("+15550009999", "{}");
    let answer = tokio::time::timeout(
        Duration::from_secs(10),
        client.signal(Req::new(&body).key(&unique("stuck")).beta()),
    )
    .await
    .expect("the keyed request is answered, not left hanging");
    assert_eq!(answer.status, 500, "{}", text(&answer));
    assert_eq!(answer.problem_type(), "urn:idem:problem:internal");
    tokio::time::sleep(LATE).await;
    assert!(receiver.seen_on("/takeover").is_empty(), "no action ran");
}
