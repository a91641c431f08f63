//! Every recovery point under fire (built with `--features failpoints`): the process is killed
//! on the spot at each named point, or the actor running the step panics, and the retry that
//! follows recovers as the durability order promises (docs/ARCHITECTURE.md): the claim taken
//! over at once, one decision, one set of side effects, the actions re-run with the same ids and
//! bytes before the recovery point and nothing re-run after it, an unrecorded retry attempt made
//! again. A group commit whose sync fails halts the store: the process exits by itself, and its
//! restart replays every answered key. With every group commit slowed, a source event's queued
//! callback still waits until its claim is durable, and one killed part-way through its write
//! sends no callback of a decision never made. A bulk redelivery killed part-way and taken
//! over redelivers what it matched when it was claimed, each delivery once. A decision made by a
//! rule and killed before its actions runs as it was stored, even once the rules changed. A
//! subscribed source killed after its stream was made at the transmitter and before it was
//! recorded uses that stream once started again.

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use crate::support::*;

const DELIVERY: &str = "inline_timeout = \"1s\"\nretry_interval = \"300ms\"";

struct Crash {
    _dir: tempfile::TempDir,
    receiver: Receiver,
    body: String,
    key: String,
    /// The callbacks made before the crash.
    before: Vec<Received>,
    /// idem, restarted without failpoints.
    idem: Idem,
}

/// Sends one keyed signal to an idem whose `point` kills it, checks that it died of SIGKILL,
/// and restarts it on the same data directory.
async fn crash_at(point: &str) -> Crash {
    crash_with(point, sim_swap("+447700900123")).await
}

/// [`crash_at`], sending `body`.
async fn crash_with(point: &str, body: String) -> Crash {
    let (dir, receiver, idem, client) = Harness::new()
        .delivery(DELIVERY)
        .failpoints(&format!("{point}=return"))
        .start()
        .await;
    let key = unique("fp");
    let r = client
        .try_send(
            "POST",
            "/v1/signals",
            Req::new(&body).key(&key).acme_signed(&key),
        )
        .await;
    assert!(r.is_err(), "{point}: the process dies before answering");
    let (status, config) = idem.wait_exit().await;
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "{point}: killed on the spot"
    );
    let before = receiver.seen();
    let idem = Idem::start_with(config, &[]);
    Crash {
        _dir: dir,
        receiver,
        body,
        key,
        before,
        idem,
    }
}

impl Crash {
    /// The retry, once the crashed holder's claim can be taken over.
    async fn retry(&self) -> Resp {
        let client = Client::new(&self.idem.base);
        retry_after_crash(|| {
            client.signal(Req::new(&self.body).key(&self.key).acme_signed(&self.key))
        })
        .await
    }

    /// After the retry: exactly `expect` callbacks in all, every webhook-id with one body.
    async fn assert_callbacks(&self, expect: usize, decision: &serde_json::Value) {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let seen = self.receiver.seen();
        assert_eq!(seen.len(), expect);
        for cb in &seen {
            let env: serde_json::Value = serde_json::from_slice(&cb.body).expect("json");
            assert_eq!(
                &env["data"]["decision_id"], decision,
                "one decision per key"
            );
            let twin = seen
                .iter()
                .filter(|o| o.header("webhook-id") == cb.header("webhook-id"));
            assert!(
                twin.into_iter().all(|o| o.body == cb.body),
                "one body per webhook-id"
            );
        }
    }
}

#[tokio::test]
async fn killed_after_the_claim_persisted_the_retry_takes_over_at_once() {
    let c = crash_at("claim.after_persist").await;
    assert!(c.before.is_empty(), "no action ran before the crash");
    let r = c.retry().await;
    assert_eq!(
        r.status, 201,
        "the dead holder's claim is taken over at once"
    );
    assert!(!r.replayed());
    c.assert_callbacks(2, &r.json()["decision_id"]).await;
}

#[tokio::test]
async fn a_decision_without_actions_is_complete_once_its_claim_is_on_disk() {
    // `port_out` has no actions: nothing to guard, so the claim, the recovery point and the
    // completion are one durable write, and the retry replays the answer the crash swallowed.
    let body = r#"{"type":"port_out","subject":"+447700900123"}"#.to_string();
    let c = crash_with("claim.after_persist", body).await;
    let r = c.retry().await;
    assert_eq!(r.status, 201);
    assert!(r.replayed(), "the answer was on disk with the claim");
    assert_eq!(r.json()["decision"], "review");
    assert_eq!(r.json()["actions"], serde_json::json!([]));
    let again = c.retry().await;
    assert!(again.replayed());
    assert_eq!(again.body, r.body);
    assert!(c.receiver.seen().is_empty());
}

#[tokio::test]
async fn killed_before_the_recovery_point_the_actions_run_again_with_the_same_ids_and_bytes() {
    let c = crash_at("dispatch.before_recovery_point").await;
    assert_eq!(c.before.len(), 2, "both actions ran before the crash");
    let r = c.retry().await;
    assert_eq!(r.status, 201);
    c.assert_callbacks(4, &r.json()["decision_id"]).await;
    let after = &c.receiver.seen()[2..];
    for cb in after {
        assert!(c
            .before
            .iter()
            .any(|b| b.header("webhook-id") == cb.header("webhook-id") && b.body == cb.body));
    }
}

#[tokio::test]
async fn killed_after_the_recovery_point_the_retry_completes_without_running_anything() {
    for point in ["dispatch.after_recovery_point", "complete.before_persist"] {
        let c = crash_at(point).await;
        assert_eq!(c.before.len(), 2, "{point}");
        let r = c.retry().await;
        assert_eq!(r.status, 201, "{point}");
        assert!(
            r.replayed(),
            "{point}: the response was stored with the recovery point"
        );
        assert!(r.json()["actions"]
            .as_array()
            .expect("actions")
            .iter()
            .all(|a| a["status"] == "delivered"));
        c.assert_callbacks(2, &r.json()["decision_id"]).await;
        let replay = c.retry().await;
        assert!(replay.replayed());
        assert_eq!(replay.body, r.body);
    }
}

#[tokio::test]
async fn killed_after_a_retry_attempt_the_attempt_is_made_again_then_recorded() {
    let (_dir, receiver, idem, client) = Harness::new()
        .delivery(DELIVERY)
        .answer("/notify", status(503))
        .failpoints("delivery.after_attempt=return")
        .start()
        .await;
    let r = client
        .signal(Req::new(&sim_swap("+1555")).key(&unique("d")).beta())
        .await;
    assert_eq!(r.status, 201);
    let id = r.json()["actions"][0]["delivery_id"]
        .as_str()
        .expect("id")
        .to_string();
    let (status, config) = idem.wait_exit().await;
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    assert_eq!(
        receiver.seen().len(),
        2,
        "the inline attempt and the first retry"
    );

    receiver.answer("/notify", 200, Duration::ZERO);
    let idem = Idem::start_with(config, &[]);
    let client = Client::new(&idem.base);
    let view = eventually(
        Duration::from_secs(10),
        || async { client.beta_delivery(&id).await.json() },
        |view| view["status"] == "delivered",
    )
    .await;
    assert_eq!(view["status"], "delivered");
    let attempts = view["attempts"].as_array().expect("attempts");
    assert_eq!(
        attempts.len(),
        2,
        "the unrecorded attempt is not counted: {view}"
    );
    assert_eq!(attempts[1]["status_code"], 200);
    let seen = receiver.seen();
    assert_eq!(seen.len(), 3);
    assert!(seen
        .iter()
        .all(|cb| cb.header("webhook-id") == id && cb.body == seen[0].body));
}

#[tokio::test]
async fn a_panicking_actor_fails_its_request_and_the_key_recovers() {
    for point in [
        "claim.after_persist",
        "dispatch.before_recovery_point",
        "complete.before_persist",
    ] {
        let (_dir, receiver, idem, client) = Harness::new()
            .idempotency("in_flight_timeout = \"1s\"")
            .delivery(DELIVERY)
            .failpoints(&format!("{point}=1*panic"))
            .start()
            .await;
        let key = unique("panic");
        let body = sim_swap("+1555");
        let failed = client.signal(Req::new(&body).key(&key).beta()).await;
        assert_eq!(failed.status, 500, "{point}: a 5xx problem, not a hang");
        assert_eq!(failed.problem_type(), "urn:idem:problem:internal");

        // Other keys never notice.
        let other = client
            .signal(Req::new(&body).key(&unique("other")).beta())
            .await;
        assert_eq!(other.status, 201, "{point}");

        // The key is not stuck: in flight until in_flight_timeout, then taken over (or, if the
        // panic came after the recovery point, completed from it).
        let mut last = None;
        for _ in 0..60 {
            let r = client.signal(Req::new(&body).key(&key).beta()).await;
            if r.status == 201 {
                last = Some(r);
                break;
            }
            assert_eq!(r.status, 409, "{point}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let done = last.unwrap_or_else(|| panic!("{point}: key stuck in flight"));
        // After the recovery point the response was already stored: the retry replays it.
        assert_eq!(
            done.replayed(),
            point == "complete.before_persist",
            "{point}"
        );
        let decision = done.json()["decision_id"].clone();
        for cb in receiver.seen() {
            let env: serde_json::Value = serde_json::from_slice(&cb.body).expect("json");
            if env["data"]["decision_id"] != other.json()["decision_id"] {
                assert_eq!(
                    env["data"]["decision_id"], decision,
                    "{point}: one decision per key"
                );
            }
        }
        assert!(
            idem.stderr().contains("actor failed"),
            "{point}: the supervisor saw it"
        );
    }
}

#[tokio::test]
async fn a_failed_sync_halts_the_store_and_a_restart_replays_every_answered_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let receiver = Receiver::start().await;
    // sled's group commit (on PostgreSQL the database keeps its own disk: tests/it/postgres.rs).
    let cfg = config_on("", &dir.path().join("data"), &receiver, "", DELIVERY);
    // The group commit's 40th sync returns an I/O error, as a failing disk's fdatasync would.
    let mut idem = Idem::start_env(
        dir.path(),
        &cfg,
        &[("FAILPOINTS", "store.sync=40*off->return")],
    );
    let health = Client::new(&idem.base)
        .send("GET", "/healthz", Req::new(""))
        .await;
    assert_eq!(health.status, 200, "a store that writes is healthy");
    let (answered, refused) = send_until_refused(&idem.base, 500).await;
    let (failed, answer) = refused.expect("the failed sync fails a request");
    assert!(!answered.is_empty(), "syncs before the failure succeeded");
    if let Some(r) = answer {
        assert_eq!(r.status, 500, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
    }
    let status = idem.exited().await;
    assert_eq!(
        status.code(),
        Some(1),
        "the process exits by itself, non-zero: {status:?}"
    );
    assert!(
        idem.stderr().contains("failed for good"),
        "it says why: {}",
        idem.stderr()
    );
    let idem = Idem::start_with(idem.config_path.clone(), &[]);
    assert_replays(&idem.base, &answered).await;
    let client = Client::new(&idem.base);
    let r = retry_after_crash(|| client.signal(failed.request())).await;
    assert_eq!(r.status, 201, "the failed request's retry is decided");
    let again = client.signal(failed.request()).await;
    assert!(again.replayed() && again.body == r.body, "and decided once");
}

/// A source's event, whose callback is queued in its claim's one write: with every group commit
/// slowed (`store.sync=sleep`), the retry worker sees the queued delivery in sled's memory long
/// before it is durable, and must still not make the callback before the write is on disk.
#[tokio::test]
async fn a_queued_callback_waits_for_its_claim_to_be_durable() {
    let (_dir, receiver, idem, client) = Harness::new()
        .delivery("inline_timeout = \"1s\"\nschedule = [\"40ms\"]")
        .tenants(|receiver| with_okta_hook(&test_tenants(receiver)))
        .failpoints("store.sync=sleep(400)")
        .start()
        .await;
    let sent = std::time::Instant::now();
    let r = client
        .send(
            "POST",
            "/v1/sources/beta/hook",
            okta_hook_delivery("evt-slow", "slow@example.com"),
        )
        .await;
    assert_eq!(r.status, 200, "{}", text(&r));
    let seen = receiver.wait_for(1).await;
    assert_eq!(seen[0].path, "/notify");
    // On sled, durable only once the group commit's 400 ms sleep is over (PostgreSQL has no
    // such sleep, and shows a row only once it is committed): the callback may then race the
    // answer to the provider, but never come before the claim could be durable.
    if postgres_url(&idem.config_path).is_none() {
        let after = seen[0].at.duration_since(sent);
        assert!(
            after >= Duration::from_millis(300),
            "a callback left {after:?} after the event, before its claim was durable"
        );
    }
}

/// sled's store killed part-way through a source event's one write (`store.start_part_way`):
/// its queued callback in sled's files, its claim record not. The restarted store undoes that
/// callback, so the provider's retry makes the one decision, whose one callback goes out. This
/// is sled's own write order, so it runs on sled whatever `IDEM_TEST_STORE` says.
#[tokio::test]
async fn a_start_killed_between_its_queued_callback_and_its_claim_sends_one_callback() {
    let dir = tempfile::tempdir().expect("tempdir");
    let receiver = Receiver::start().await;
    let delivery = "inline_timeout = \"1s\"\nschedule = [\"40ms\"]";
    let config = settings("", &dir.path().join("data"), "", delivery)
        + &with_okta_hook(&test_tenants(&receiver));
    let failpoint = [("FAILPOINTS", "store.start_part_way=return")];
    let idem = Idem::start_env(dir.path(), &config, &failpoint);
    let event = || okta_hook_delivery("evt-cut", "cut@example.com");
    let client = Client::new(&idem.base);
    let r = client
        .try_send("POST", "/v1/sources/beta/hook", event())
        .await;
    assert!(r.is_err(), "the process dies before answering");
    let (status, config) = idem.wait_exit().await;
    assert_eq!(status.signal(), Some(libc::SIGKILL), "killed on the spot");
    let idem = Idem::start_with(config, &[]);
    let client = Client::new(&idem.base);
    let r = client.send("POST", "/v1/sources/beta/hook", event()).await;
    assert_eq!(r.status, 200, "{}", text(&r));
    // Once nothing is queued, every delivery the store holds has gone: one, sent once.
    let listed = eventually(
        Duration::from_secs(10),
        || async {
            let page = client
                .send("GET", "/v1/deliveries", Req::new("").beta())
                .await;
            page.json()["data"].as_array().cloned().unwrap_or_default()
        },
        |data| !data.is_empty() && data.iter().all(|d| d["status"] != "queued"),
    )
    .await;
    let stored: Vec<&str> = listed.iter().filter_map(|d| d["id"].as_str()).collect();
    let sent: Vec<String> = (receiver.seen().iter())
        .map(|c| c.header("webhook-id").to_string())
        .collect();
    assert_eq!(stored.len(), 1, "one decision's one delivery: {stored:?}");
    assert_eq!(sent, stored, "sent once");
}

/// A keyless signal of beta (one callback, `/notify`): its delivery id once it is dead.
async fn dead_notify(client: &Client) -> String {
    let r = client.signal(Req::new(&sim_swap("+1555")).beta()).await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let id = first_delivery_id(&r);
    until_status(client, &id, "dead").await;
    id
}

#[tokio::test]
async fn a_bulk_redelivery_taken_over_after_a_crash_redelivers_what_it_matched_each_once() {
    let (_dir, _receiver, idem, client) = Harness::new()
        .delivery("inline_timeout = \"1s\"\nschedule = [\"100ms\"]\nbreaker_threshold = 100")
        .answer("/notify", status(503))
        .failpoints("bulk.part_way=return")
        .start()
        .await;
    let mut matched = Vec::new();
    for _ in 0..3 {
        matched.push(dead_notify(&client).await);
    }
    // The bulk request dies once its first redelivery is durable.
    let key = unique("bulk");
    let bulk = || Req::new(r#"{"status":"dead"}"#).beta().key(&key);
    let r = client
        .try_send("POST", "/v1/deliveries/redeliver", bulk())
        .await;
    assert!(r.is_err(), "the process dies part-way");
    let (status, config) = idem.wait_exit().await;
    assert_eq!(status.signal(), Some(libc::SIGKILL));

    let idem = Idem::start_with(config, &[]);
    let client = Client::new(&idem.base);
    // What it redelivered before the crash dies again (the receiver still answers 503), and a
    // fourth delivery dies after the request was claimed: neither is redelivered by its retry.
    for id in &matched {
        until_status(&client, id, "dead").await;
    }
    let after = dead_notify(&client).await;
    // (On PostgreSQL the claim is taken over once the dead node's heartbeat has expired: 409
    // until then, and the redelivery endpoint's own limit may answer 429 meanwhile.)
    let r = eventually(
        Duration::from_secs(20),
        || client.send("POST", "/v1/deliveries/redeliver", bulk()),
        |r| r.status != 409 && r.status != 429,
    )
    .await;
    assert_eq!(r.status, 202, "{}", text(&r));
    assert_eq!(r.json(), serde_json::json!({"redelivered": 3}));
    // Each of the three redelivered once in all: two series of two attempts.
    for id in &matched {
        let d = eventually(
            Duration::from_secs(10),
            || delivery(&client, id),
            |d| d["status"] == "dead" && d["attempts_total"] == 4,
        )
        .await;
        assert_eq!(d["attempts_total"], 4, "{d}");
    }
    let most = || async {
        let mut most = 0;
        for id in &matched {
            most = most.max(
                delivery(&client, id).await["attempts_total"]
                    .as_u64()
                    .unwrap_or(0),
            );
        }
        most
    };
    assert_eq!(
        eventually(LATE, most, |n| *n > 4).await,
        4,
        "no third series"
    );
    assert_eq!(delivery(&client, &after).await["attempts_total"], 2);
}

#[tokio::test]
async fn killed_between_a_rules_decision_and_its_actions_the_stored_decision_runs() {
    let (_dir, receiver, idem, client) = Harness::new()
        .delivery(DELIVERY)
        .tenants(|r| crate::rules::tenants(r, "deny"))
        .failpoints("claim.after_persist=return")
        .start()
        .await;
    let key = unique("fp-rules");
    let body = serde_json::json!({
        "type": "sim_swap", "subject": "+447700900123", "metadata": {"risk": 95}
    })
    .to_string();
    let req = || {
        Req::new(&body)
            .key(&key)
            .header("authorization", "Bearer sk_acme_test_key")
    };
    let r = client.try_send("POST", "/v1/signals", req()).await;
    assert!(r.is_err(), "the process dies before answering");
    let (status, config) = idem.wait_exit().await;
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    assert!(receiver.seen().is_empty(), "no action ran before the crash");

    // The rule now allows; the claim holds the decision made before the crash.
    let written = std::fs::read_to_string(&config).expect("read config");
    let changed = written.replace(r#""deny""#, r#""allow""#);
    assert_ne!(changed, written);
    std::fs::write(&config, changed).expect("write config");
    let idem = Idem::start_with(config, &[]);
    let client = Client::new(&idem.base);
    let r = retry_after_crash(|| client.signal(req())).await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let decided = r.json();
    assert_eq!(
        decided["decision"], "deny",
        "the stored decision, not a new one"
    );
    assert_eq!(decided["rule"], "high-risk");
    let callback = receiver.wait_for(1).await.pop().expect("the stored action");
    assert_eq!(callback.path, "/lock");
    let envelope: serde_json::Value = serde_json::from_slice(&callback.body).expect("json");
    assert_eq!(envelope["type"], "decision.deny");
    assert_eq!(envelope["data"]["rule"], "high-risk");
    assert_eq!(envelope["data"]["decision_id"], decided["decision_id"]);

    // A new key is decided by the rules as they are now.
    let fresh = client
        .signal(
            Req::new(&body.replace("+447700900123", "+447700900124"))
                .header("authorization", "Bearer sk_acme_test_key"),
        )
        .await;
    assert_eq!(fresh.json()["decision"], "allow", "{}", text(&fresh));
}

/// Killed after its stream was made at the transmitter and before the stream was recorded, idem
/// started again finds the stream it made among the transmitter's streams and uses it: one
/// stream, its push credential given anew (the old one died with the process), verified.
#[tokio::test]
async fn killed_between_making_its_stream_and_recording_it_the_restart_uses_that_stream() {
    use crate::ssf_receiver_plan::{acme, config_on_port, subscribed, subscription_when};
    use devtools::jose::{self, JwsKey};
    use devtools::transmitter::LoopbackTransmitter;

    let rsa = JwsKey::rsa("rsa-1");
    let transmitter = LoopbackTransmitter::start(jose::jwk_set(&[&rsa])).await;
    transmitter.sign_with(JwsKey::rsa("rsa-1"));
    let receiver = Receiver::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let port = devtools::free_port().expect("a free port");
    let tenants = acme(&receiver, &subscribed(&transmitter, "push"));
    let config = config_on_port(dir.path(), port, &tenants);
    let failpoint = [("FAILPOINTS", "subscribe.after_create=return")];
    let idem = Idem::start_env(dir.path(), &config, &failpoint);
    let (status, config) = idem.wait_exit().await;
    assert_eq!(status.signal(), Some(libc::SIGKILL), "killed on the spot");
    assert_eq!(transmitter.streams_made(), 1, "{:?}", transmitter.calls());

    let idem = Idem::start_with(config, &[]);
    let client = Client::new(&idem.base);
    let s = subscription_when(&client, |s| !s["verified_at"].is_null()).await;
    assert!(s["verified_at"].is_string(), "verified: {s}");
    assert_eq!(s["stream_id"], "stream-1", "{s}");
    assert_eq!(transmitter.streams_made(), 1, "{:?}", transmitter.calls());
    assert_eq!(
        transmitter.streams().len(),
        1,
        "{:?}",
        transmitter.streams()
    );
    assert!(
        transmitter.calls().contains(&"PUT /streams".to_string()),
        "the credential is given anew: {:?}",
        transmitter.calls()
    );
}

/// Killed part-way through sending what a paused push stream held (once the fourth held SET's
/// answer is recorded), idem started again takes the walk up where the queue says it stopped:
/// the receiver gets each of the twelve SETs once, in the order they were decided, long before
/// their next look (`breaker_cooldown`).
#[tokio::test]
async fn killed_part_way_through_sending_held_sets_the_restart_sends_the_rest_in_order() {
    use crate::ssf_transmitter_plan::{config_with, events, paused_with_held, set_status, REVOKE};

    let dir = tempfile::tempdir().expect("tempdir");
    let receiver = Receiver::start().await;
    let delivery = "inline_timeout = \"2s\"\nschedule = [\"300ms\", \"300ms\"]\nbreaker_cooldown = \"600s\"\nmax_in_flight_per_endpoint = 16";
    let config = config_with(dir.path(), REVOKE, delivery);
    let failpoint = [("FAILPOINTS", "held.after_send=3*off->return")];
    let idem = Idem::start_env(dir.path(), &config, &failpoint);
    let client = Client::new(&idem.base);
    let url = receiver.url("/held");
    let (okta, id, decided) = paused_with_held(&client, &url, 12, "+155500042").await;
    set_status(&client, &okta, &id, "enabled").await;
    let (status, config) = idem.wait_exit().await;
    assert_eq!(status.signal(), Some(libc::SIGKILL), "killed on the spot");
    let before = receiver.seen_on("/held").len();
    assert_eq!(before, 4, "four sent before the kill");

    let idem = Idem::start_with(config, &[]);
    let client = Client::new(&idem.base);
    let sent = exactly(&receiver, "/held", 12).await;
    let told: Vec<String> = events(&client, &sent)
        .await
        .into_iter()
        .map(|(_, jti)| jti)
        .collect();
    assert_eq!(told, decided, "each once, in the order decided");
}
