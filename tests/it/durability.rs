//! What survives a restart and a SIGKILL: completed keys replay the same bytes, a claim whose
//! process died mid-dispatch is resumed with the same decision and callback bytes, shutdown on
//! SIGTERM finishes what is in flight, and no key or subject is ever written in clear.

use std::time::Duration;

use crate::support::*;

/// The harness of these tests: callbacks delivered inline.
fn harness() -> Harness {
    Harness::new().delivery("inline_timeout = \"5s\"")
}

#[tokio::test]
async fn a_completed_key_replays_the_same_bytes_after_restart_and_after_sigkill() {
    let (_dir, receiver, idem, client) = harness().start().await;
    let key = unique("durable");
    let body = sim_swap("+447700900123");
    let first = client.signal(Req::new(&body).key(&key).beta()).await;
    assert_eq!(first.status, 201);

    let (status, config) = idem.terminate().await;
    assert!(status.success(), "clean shutdown exits 0: {status:?}");
    let idem = Idem::start_with(config, &[]);
    let after_restart = Client::new(&idem.base)
        .signal(Req::new(&body).key(&key).beta())
        .await;
    assert!(after_restart.replayed());
    assert_eq!(after_restart.body, first.body);

    // A key completed just before a SIGKILL: its response was only sent once durable.
    let key2 = unique("killed");
    let second = Client::new(&idem.base)
        .signal(Req::new(&body).key(&key2).beta())
        .await;
    assert_eq!(second.status, 201);
    let config = idem.kill();
    let idem = Idem::start_with(config, &[]);
    let client = Client::new(&idem.base);
    for (k, original) in [(&key, &first), (&key2, &second)] {
        let r = client.signal(Req::new(&body).key(k).beta()).await;
        assert_eq!(r.status, 201);
        assert!(r.replayed());
        assert_eq!(&r.body, &original.body);
    }
    assert_eq!(receiver.seen().len(), 2, "no callback ran twice");
}

#[tokio::test]
async fn a_claim_whose_process_died_mid_dispatch_resumes_with_the_same_decision_and_bytes() {
    // The receiver takes the callback and holds the answer: the process dies before it is back.
    let (_dir, receiver, idem, client) = harness()
        .answer("/lock", hang(Duration::from_secs(30)))
        .answer("/case", hang(Duration::from_secs(30)))
        .start()
        .await;
    let key = unique("midflight");
    let body = sim_swap("+447700900123");
    let req = Req::new(&body).key(&key).acme_signed(&key);
    let pending = tokio::spawn(async move { client.signal(req).await });
    let before = receiver.wait_for(2).await;
    let config = idem.kill();
    let _ = pending.await;

    receiver.answer("/lock", 200, Duration::ZERO);
    receiver.answer("/case", 200, Duration::ZERO);
    let idem = Idem::start_with(config, &[]);
    let client = Client::new(&idem.base);
    // The holder's process is gone, so the claim is taken over at once (on PostgreSQL, once its
    // heartbeat has expired), not after 30 s.
    let resumed =
        retry_after_crash(|| client.signal(Req::new(&body).key(&key).acme_signed(&key))).await;
    assert_eq!(
        resumed.status,
        201,
        "{}",
        String::from_utf8_lossy(&resumed.body)
    );
    assert!(
        !resumed.replayed(),
        "the first response that was ever sent for this key"
    );
    let after = receiver.wait_for(4).await;
    let redo = &after[2..];
    for cb in redo {
        let original = before
            .iter()
            .find(|b| b.path == cb.path)
            .expect("same action as before the crash");
        assert_eq!(cb.header("webhook-id"), original.header("webhook-id"));
        assert_eq!(cb.body, original.body, "byte-identical envelope");
        assert!(cb.signed_with(CALLBACK_SECRET));
    }
    let env: serde_json::Value = serde_json::from_slice(&before[0].body).expect("json");
    assert_eq!(env["data"]["decision_id"], resumed.json()["decision_id"]);

    let replay = client
        .signal(Req::new(&body).key(&key).acme_signed(&key))
        .await;
    assert!(replay.replayed());
    assert_eq!(replay.body, resumed.body);
    assert_eq!(receiver.seen().len(), 4);
}

#[tokio::test]
async fn sigterm_finishes_requests_in_flight() {
    let (_dir, receiver, idem, client) = harness()
        .answer("/notify", hang(Duration::from_millis(800)))
        .start()
        .await;
    let key = unique("drain");
    let body = sim_swap("+1555");
    let req = Req::new(&body).key(&key).beta();
    let c = client.clone();
    let pending = tokio::spawn(async move { c.signal(req).await });
    receiver.wait_for(1).await;
    let (status, config) = idem.terminate().await;
    let response = pending.await.expect("task");
    assert_eq!(response.status, 201);
    assert!(status.success());
    let idem = Idem::start_with(config, &[]);
    let replay = Client::new(&idem.base)
        .signal(Req::new(&body).key(&key).beta())
        .await;
    assert!(replay.replayed());
    assert_eq!(replay.body, response.body);
}

#[tokio::test]
async fn neither_key_nor_subject_is_stored_or_sent_in_clear() {
    let (dir, receiver, idem, client) = harness().start().await;
    let key = format!("raw-key-{}", unique("pii"));
    let subject = "+447700900999";
    for _ in 0..3 {
        let r = client
            .signal(Req::new(&sim_swap(subject)).key(&key).acme_signed(&key))
            .await;
        assert_eq!(r.status, 201);
        assert!(!contains(&r.body, subject.as_bytes()));
    }
    let keyless = client.signal(Req::new(&sim_swap(subject)).beta()).await;
    assert_eq!(keyless.status, 201);
    let logs = idem.stderr();
    let (status, config_path) = idem.terminate().await;
    assert!(status.success());

    let files = stored(&config_path, &dir.path().join("data"));
    assert!(
        files.iter().map(|(_, b)| b.len()).sum::<usize>() > 0,
        "the store wrote something"
    );
    for (path, bytes) in &files {
        assert!(!contains(bytes, key.as_bytes()), "raw key found in {path}");
        assert!(
            !contains(bytes, subject.as_bytes()),
            "raw subject found in {path}"
        );
        assert!(!contains(bytes, subject.trim_start_matches('+').as_bytes()));
    }
    for cb in receiver.seen() {
        assert!(!contains(&cb.body, subject.as_bytes()));
        assert!(!contains(&cb.body, key.as_bytes()));
    }
    assert!(
        !logs.contains(&key) && !logs.contains(subject),
        "logs stay clean"
    );
}
