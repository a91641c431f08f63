//! `idem receive`, the reference receiver, against a real idem and against replayed, tampered,
//! stale and unsigned requests, across its own restart.

use idem_schemas::signature::Secret;

use crate::support::*;

fn signed(body: &str, id: &str, ts: i64) -> Req {
    let sig = Secret::parse(CALLBACK_SECRET)
        .expect("secret")
        .sign(id, ts, body.as_bytes());
    Req::new(body)
        .header("webhook-id", id)
        .header("webhook-timestamp", &ts.to_string())
        .header("webhook-signature", &sig)
}

#[tokio::test]
async fn receive_verifies_deduplicates_and_remembers_across_restarts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("seen");
    let receiver = ReceiveProc::start("127.0.0.1:0", &state);

    // A real idem calling the receiver.
    let cfg = format!(
        r#"
listen = "127.0.0.1:0"
data_dir = "{data}"
[idempotency]
key_secret = "{KEY_SECRET}"
[tenants.beta]
api_key = "sk_beta_test_key"
callback_secret = "{CALLBACK_SECRET}"
[tenants.beta.playbooks.sim_swap]
decision = "deny"
actions = [ {{ name = "lock_account", url = "{base}/hooks/lock" }}, {{ name = "open_case", url = "{base}/hooks/case" }} ]
"#,
        data = dir.path().join("data").display(),
        base = receiver.base
    );
    let idem = Idem::start(dir.path(), &cfg);
    let r = Client::new(&idem.base)
        .signal(Req::new(&sim_swap("+1555")).key(&unique("rcv")).beta())
        .await;
    assert_eq!(r.status, 201);
    assert!(r.json()["actions"]
        .as_array()
        .expect("actions")
        .iter()
        .all(|a| a["status"] == "delivered"));
    let mut printed = vec![receiver.line(), receiver.line()];
    printed.sort();
    assert!(
        printed
            .iter()
            .all(|l| l.starts_with("new msg_") && l.contains("decision.deny")),
        "{printed:?}"
    );
    assert!(printed
        .iter()
        .any(|l| l.contains("action=lock_account") && l.contains("path=/hooks/lock")));

    let client = Client::new(&receiver.base);
    let now = idem_schemas::timefmt::now_ms() as i64 / 1000;
    let body = r#"{"type":"decision.review","timestamp":"2026-11-29T17:54:32.123Z","data":{"action":"x","decision_id":"dec_1"}}"#;
    let r = client
        .send("POST", "/hooks", signed(body, "msg_manual", now))
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        receiver.line(),
        "new msg_manual decision.review action=x decision=dec_1 path=/hooks"
    );
    let replay = client
        .send("POST", "/hooks", signed(body, "msg_manual", now))
        .await;
    assert_eq!(replay.status, 200, "a discarded duplicate still gets 2xx");
    assert_eq!(receiver.line(), "duplicate msg_manual (discarded)");

    let mut tampered = signed(body, "msg_tampered", now);
    tampered.body = body.replace("review", "allow").into_bytes();
    assert_eq!(client.send("POST", "/hooks", tampered).await.status, 401);
    assert!(receiver.line().starts_with("refused msg_tampered"));
    let stale = client
        .send("POST", "/hooks", signed(body, "msg_stale", now - 3600))
        .await;
    assert_eq!(stale.status, 401);
    assert!(receiver.line().starts_with("refused msg_stale"));
    let unsigned = client.send("POST", "/hooks", Req::new(body)).await;
    assert_eq!(unsigned.status, 401);
    assert!(receiver.line().starts_with("refused"));
    // A refused request was not remembered: signed properly, it is new.
    let fixed = client
        .send("POST", "/hooks", signed(body, "msg_tampered", now))
        .await;
    assert_eq!(fixed.status, 200);
    assert!(receiver.line().starts_with("new msg_tampered"));

    drop(receiver);
    let receiver = ReceiveProc::start("127.0.0.1:0", &state);
    let client = Client::new(&receiver.base);
    let after_restart = client
        .send("POST", "/hooks", signed(body, "msg_manual", now))
        .await;
    assert_eq!(after_restart.status, 200);
    assert_eq!(receiver.line(), "duplicate msg_manual (discarded)");
}
