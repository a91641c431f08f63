//! Sources (docs/REFERENCE.md, "Sources") against a real `idem serve` and a real receiver, on
//! either store: each of the six kinds takes a delivery signed by its provider's own scheme; the
//! same delivery sent again, re-serialised and signed anew, and a batch overlapping an earlier one
//! are deduplicated by the provider's event id (no second decision, no second callback); a wrong
//! signature, a stale timestamp and a missing header are refused with nothing claimed; unmapped and
//! subject-less events are counted and acknowledged; Okta's one-time verification answers its
//! challenge; no event body or subject reaches the store or the callbacks; and a SIGKILL after the
//! answer, while the callbacks are being made, is followed by a restart that still delivers each
//! callback, under its one webhook-id.

use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use devtools::metric_value;
use hmac::{Hmac, Mac};
use idem_schemas::lower_hex;
use idem_schemas::signature::Secret;
use idem_schemas::timefmt::now_ms;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::support::*;

const API_KEY: &str = "Bearer sk_idp_test_key_0001";
const OKTA_AUTH: &str = "Basic b2t0YS1ob29rOnNlY3JldA==";
const AUTH0_TOKEN: &str = "auth0-log-stream-token";
const TWILIO_TOKEN: &str = "twilio-auth-token-0123";
const STRIPE_SECRET: &str = "whsec_stripe_test_secret";
const GITHUB_SECRET: &str = "github webhook secret";
const STANDARD_SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";

/// Tenant `idp`: three playbooks with one callback each, and one source of every kind.
fn idp(receiver: &Receiver) -> String {
    format!(
        r#"
[tenants.idp]
api_key = "sk_idp_test_key_0001"
callback_secret = "{CALLBACK_SECRET}"

[tenants.idp.playbooks.mfa_reset]
decision = "step_up"
actions = [ {{ name = "reset", url = "{mfa}" }} ]

[tenants.idp.playbooks.login]
decision = "allow"
actions = [ {{ name = "note", url = "{login}" }} ]

[tenants.idp.playbooks.takeover]
decision = "deny"
once_per_subject = "1h"
actions = [ {{ name = "lock", url = "{lock}" }} ]

[tenants.idp.sources.okta_prod]
kind = "okta"
secret = ["an-old-value-0123456789", "{OKTA_AUTH}"]
[[tenants.idp.sources.okta_prod.map]]
event = "user.mfa.factor.deactivate"
type = "mfa_reset"
subject = "/target/0/alternateId"
[[tenants.idp.sources.okta_prod.map]]
event = "user.session.*"
type = "login"
subject = "/actor/alternateId"

[tenants.idp.sources.auth0]
kind = "auth0"
secret = "{AUTH0_TOKEN}"
[[tenants.idp.sources.auth0.map]]
event = "s"
type = "login"
subject = "/data/user_id"

[tenants.idp.sources.twilio]
kind = "twilio"
secret = "{TWILIO_TOKEN}"
[[tenants.idp.sources.twilio.map]]
event = "com.twilio.messaging.*"
type = "mfa_reset"
subject = "/data/to"

[tenants.idp.sources.stripe]
kind = "stripe"
secret = "{STRIPE_SECRET}"
[[tenants.idp.sources.stripe.map]]
event = "customer.*"
type = "takeover"
subject = "/data/object/id"

[tenants.idp.sources.github]
kind = "github"
secret = "{GITHUB_SECRET}"
[[tenants.idp.sources.github.map]]
event = "member"
type = "login"
subject = "/member/login"
[[tenants.idp.sources.github.map]]
event = "membership"
type = "takeover"
subject = "/member/login"

[tenants.idp.sources.standard]
kind = "standard"
secret = "{STANDARD_SECRET}"
[[tenants.idp.sources.standard.map]]
event = "user.*"
type = "mfa_reset"
subject = "/data/user"
"#,
        mfa = receiver.url("/mfa"),
        login = receiver.url("/login"),
        lock = receiver.url("/lock"),
    )
}

/// A short schedule, so a failed attempt is retried within the test.
const DELIVERY: &str = "inline_timeout = \"2s\"\nschedule = [\"200ms\", \"200ms\", \"200ms\"]";

/// The harness of these tests: tenant `idp` and its sources, the short schedule.
fn harness() -> Harness {
    Harness::new().delivery(DELIVERY).tenants(idp)
}

fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("hmac");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().to_vec()
}

fn now_secs() -> i64 {
    (now_ms() / 1000) as i64
}

/// A delivery as each provider sends it: its path (with query), headers and body.
struct Delivery {
    path: String,
    req: Req,
}

impl Delivery {
    async fn send(self, client: &Client) -> Resp {
        client.send("POST", &self.path, self.req).await
    }
}

fn okta(events: &[Value]) -> Delivery {
    let body = json!({
        "eventType": "com.okta.event_hook", "eventTypeVersion": "1.0",
        "cloudEventsVersion": "0.1", "eventId": "envelope-1",
        "data": {"events": events}
    });
    Delivery {
        path: "/v1/sources/idp/okta_prod".into(),
        req: Req::new(&body.to_string()).header("authorization", OKTA_AUTH),
    }
}

fn okta_event(uuid: &str, event_type: &str, who: &str) -> Value {
    json!({
        "uuid": uuid, "eventType": event_type, "published": "2026-11-30T10:00:00.000Z",
        "displayMessage": "Reset factor", "actor": {"alternateId": who, "displayName": "Alice Example"},
        "target": [{"alternateId": who, "type": "User"}]
    })
}

fn auth0(entries: &[(&str, &str, &str)]) -> Delivery {
    let body: Vec<Value> = entries
        .iter()
        .map(|(id, t, user)| {
            json!({"log_id": id, "data": {"log_id": id, "type": t, "user_id": user,
                "user_name": "alice@example.com", "ip": "203.0.113.9"}})
        })
        .collect();
    Delivery {
        path: "/v1/sources/idp/auth0".into(),
        req: Req::new(&Value::from(body).to_string())
            .header("authorization", &format!("Bearer {AUTH0_TOKEN}")),
    }
}

/// A Twilio Event Streams delivery to `base`'s sink URL, signed over that URL as Twilio does.
fn twilio(base: &str, events: &[(&str, &str)]) -> Delivery {
    let body: Vec<Value> = events
        .iter()
        .map(|(id, to)| {
            json!({"specversion": "1.0", "type": "com.twilio.messaging.message.delivered",
                "source": "/2010-04-01/Accounts/AC1/Messages/SM1.json", "id": id,
                "datacontenttype": "application/json", "time": "2026-11-30T10:00:00.000Z",
                "data": {"to": to, "from": "+15550000000", "messageStatus": "DELIVERED"}})
        })
        .collect();
    let body = Value::from(body).to_string();
    let path = format!(
        "/v1/sources/idp/twilio?bodySHA256={}",
        lower_hex(&Sha256::digest(body.as_bytes()))
    );
    let mut mac = Hmac::<sha1::Sha1>::new_from_slice(TWILIO_TOKEN.as_bytes()).expect("hmac");
    mac.update(format!("{base}{path}").as_bytes());
    let signature = STANDARD.encode(mac.finalize().into_bytes());
    Delivery {
        path,
        req: Req::new(&body).header("x-twilio-signature", &signature),
    }
}

fn stripe_at(body: &str, t: i64) -> Delivery {
    let sig = lower_hex(&hmac_sha256(
        STRIPE_SECRET.as_bytes(),
        &[t.to_string().as_bytes(), b".", body.as_bytes()],
    ));
    Delivery {
        path: "/v1/sources/idp/stripe".into(),
        req: Req::new(body).header("stripe-signature", &format!("t={t},v1={sig}")),
    }
}

fn stripe_event(id: &str, customer: &str) -> String {
    json!({"id": id, "object": "event", "type": "customer.updated",
        "data": {"object": {"id": customer, "email": "alice@example.com"}}})
    .to_string()
}

fn github(delivery: &str, login: &str) -> Delivery {
    github_as(delivery, "member", login)
}

/// A GitHub delivery whose unsigned headers name `delivery` and `event`.
fn github_as(delivery: &str, event: &str, login: &str) -> Delivery {
    let body =
        json!({"action": "added", "member": {"login": login}, "sender": {"login": "octocat"}})
            .to_string();
    let sig = lower_hex(&hmac_sha256(GITHUB_SECRET.as_bytes(), &[body.as_bytes()]));
    Delivery {
        path: "/v1/sources/idp/github".into(),
        req: Req::new(&body)
            .header("x-github-event", event)
            .header("x-github-delivery", delivery)
            .header("x-hub-signature-256", &format!("sha256={sig}")),
    }
}

fn standard_at(id: &str, user: &str, ts: i64) -> Delivery {
    let body =
        json!({"type": "user.locked", "timestamp": "2026-11-30T10:00:00Z", "data": {"user": user}})
            .to_string();
    let sig = Secret::parse(STANDARD_SECRET)
        .expect("secret")
        .sign(id, ts, body.as_bytes());
    Delivery {
        path: "/v1/sources/idp/standard".into(),
        req: Req::new(&body)
            .header("webhook-id", id)
            .header("webhook-timestamp", &ts.to_string())
            .header("webhook-signature", &sig),
    }
}

/// The decisions about `subject` of signal type `signal_type`, newest first.
async fn decisions(client: &Client, subject: &str, signal_type: &str) -> Vec<Value> {
    let r = client
        .send(
            "GET",
            &format!("/v1/decisions?subject={}&type={signal_type}", enc(subject)),
            Req::new("").header("authorization", API_KEY),
        )
        .await;
    assert_eq!(r.status, 200, "{}", text(&r));
    r.json()["data"].as_array().cloned().unwrap_or_default()
}

fn metadata(callback: &Received) -> Value {
    let body: Value = serde_json::from_slice(&callback.body).expect("callback JSON");
    body["data"]["metadata"].clone()
}

#[tokio::test]
async fn every_kind_is_taken_once_per_event_id() {
    let (_dir, receiver, idem, client) = harness().start().await;

    // Okta: a batch, then a batch overlapping it.
    let first = okta(&[
        okta_event("okta-1", "user.mfa.factor.deactivate", "alice@example.com"),
        okta_event("okta-2", "user.session.start", "bob@example.com"),
    ]);
    assert_eq!(receipt(&first.send(&client).await), (2, 0, 0, 0));
    let overlap = okta(&[
        okta_event("okta-2", "user.session.start", "bob@example.com"),
        okta_event("okta-3", "user.session.start", "carol@example.com"),
    ]);
    assert_eq!(receipt(&overlap.send(&client).await), (1, 1, 0, 0));

    // Auth0: a log batch sent twice.
    let entries = [("a0-1", "s", "auth0|dave"), ("a0-2", "s", "auth0|erin")];
    assert_eq!(receipt(&auth0(&entries).send(&client).await), (2, 0, 0, 0));
    assert_eq!(receipt(&auth0(&entries).send(&client).await), (0, 2, 0, 0));

    // Twilio: a batch of CloudEvents, then one of them again.
    let sms = [("EZ-1", "+15551110001"), ("EZ-2", "+15551110002")];
    assert_eq!(
        receipt(&twilio(&idem.base, &sms).send(&client).await),
        (2, 0, 0, 0)
    );
    assert_eq!(
        receipt(&twilio(&idem.base, &sms[1..]).send(&client).await),
        (0, 1, 0, 0)
    );

    // Stripe: a retry carries a new timestamp and signature, and may be serialised otherwise.
    let event = stripe_event("evt_1", "cus_alice");
    assert_eq!(
        receipt(&stripe_at(&event, now_secs()).send(&client).await),
        (1, 0, 0, 0)
    );
    let reserialised =
        serde_json::to_string_pretty(&serde_json::from_str::<Value>(&event).expect("json"))
            .expect("pretty");
    assert_eq!(
        receipt(&stripe_at(&reserialised, now_secs() + 1).send(&client).await),
        (0, 1, 0, 0)
    );

    // GitHub: a redelivery keeps X-GitHub-Delivery.
    assert_eq!(
        receipt(&github("gh-1", "frank").send(&client).await),
        (1, 0, 0, 0)
    );
    assert_eq!(
        receipt(&github("gh-1", "frank").send(&client).await),
        (0, 1, 0, 0)
    );
    // Its signature covers the body only: the captured body under a fresh delivery id, or
    // naming another (mapped) event, is the same event, not a second decision.
    assert_eq!(
        receipt(&github("gh-forged", "frank").send(&client).await),
        (0, 1, 0, 0),
        "a fresh X-GitHub-Delivery"
    );
    assert_eq!(
        receipt(
            &github_as("gh-forged-2", "membership", "frank")
                .send(&client)
                .await
        ),
        (0, 1, 0, 0),
        "another X-GitHub-Event"
    );

    // Standard Webhooks: a retry keeps webhook-id, signed at another time.
    assert_eq!(
        receipt(
            &standard_at("msg_1", "grace", now_secs())
                .send(&client)
                .await
        ),
        (1, 0, 0, 0)
    );
    assert_eq!(
        receipt(
            &standard_at("msg_1", "grace", now_secs() - 5)
                .send(&client)
                .await
        ),
        (0, 1, 0, 0)
    );

    // One callback per accepted event: mfa_reset from okta-1, EZ-1, EZ-2 and msg_1; login from
    // okta-2, okta-3, a0-1, a0-2 and gh-1; takeover from evt_1.
    let mfa = exactly(&receiver, "/mfa", 4).await;
    let login = exactly(&receiver, "/login", 5).await;
    let lock = exactly(&receiver, "/lock", 1).await;
    for callback in mfa.iter().chain(&login).chain(&lock) {
        assert!(callback.signed_with(CALLBACK_SECRET), "{callback:?}");
    }
    // A source signal's metadata names the event and nothing of its body.
    let mut names: Vec<(String, String)> = mfa
        .iter()
        .chain(&login)
        .chain(&lock)
        .map(|c| {
            let m = metadata(c);
            assert_eq!(m.as_object().map(|o| o.len()), Some(3), "{m}");
            (
                m["source"].as_str().unwrap_or("").to_string(),
                m["event_id"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    names.sort();
    let expected: Vec<(String, String)> = [
        ("auth0", "a0-1"),
        ("auth0", "a0-2"),
        ("github", "gh-1"),
        ("okta_prod", "okta-1"),
        ("okta_prod", "okta-2"),
        ("okta_prod", "okta-3"),
        ("standard", "msg_1"),
        ("stripe", "evt_1"),
        ("twilio", "EZ-1"),
        ("twilio", "EZ-2"),
    ]
    .iter()
    .map(|(s, e)| (s.to_string(), e.to_string()))
    .collect();
    assert_eq!(names, expected);
    let okta_one = mfa
        .iter()
        .map(metadata)
        .find(|m| m["event_id"] == "okta-1")
        .expect("okta-1's callback");
    assert_eq!(okta_one["event_type"], "user.mfa.factor.deactivate");

    // The decisions API sees them: one decision per subject, not two, naming its source.
    let alice = decisions(&client, "alice@example.com", "mfa_reset").await;
    assert_eq!(alice.len(), 1);
    assert_eq!(alice[0]["source"], "okta_prod", "{alice:?}");
    assert_eq!(
        decisions(&client, "bob@example.com", "login").await.len(),
        1
    );
    assert_eq!(
        decisions(&client, "+15551110002", "mfa_reset").await.len(),
        1
    );
    assert_eq!(decisions(&client, "cus_alice", "takeover").await.len(), 1);

    let metrics = client.send("GET", "/metrics", Req::new("")).await;
    let metrics = String::from_utf8_lossy(&metrics.body).to_string();
    let events = |kind: &str, outcome: &str| {
        metric_value(
            &metrics,
            &format!("idem_source_events_total{{kind=\"{kind}\",outcome=\"{outcome}\"}}"),
        )
    };
    assert_eq!(events("okta", "first"), Some(3.0), "{metrics}");
    assert_eq!(events("okta", "replayed"), Some(1.0));
    assert_eq!(events("auth0", "replayed"), Some(2.0));
    assert_eq!(events("stripe", "first"), Some(1.0));
}

#[tokio::test]
async fn an_unauthenticated_delivery_claims_nothing() {
    let (_dir, receiver, idem, client) = harness().start().await;
    let problem = |r: &Resp, status: u16, slug: &str| {
        assert_eq!(r.status, status, "{}", text(r));
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
        assert_eq!(
            r.problem_type(),
            format!("urn:idem:problem:{slug}"),
            "{}",
            text(r)
        );
    };
    let unauthenticated = "source-unauthenticated";

    // Wrong secrets, a missing header, a stale timestamp (either way), a body changed after
    // signing: each kind refuses.
    let okta_wrong = okta(&[okta_event("o-1", "user.session.start", "a@x")]);
    let okta_wrong = Delivery {
        req: okta_wrong
            .req
            .without("authorization")
            .header("authorization", "Basic bm9wZQ=="),
        ..okta_wrong
    };
    problem(&okta_wrong.send(&client).await, 401, unauthenticated);
    let okta_none = okta(&[okta_event("o-1", "user.session.start", "a@x")]);
    let okta_none = Delivery {
        req: okta_none.req.without("authorization"),
        ..okta_none
    };
    problem(&okta_none.send(&client).await, 401, unauthenticated);
    // Its own credential and another: which one would a proxy in front have checked?
    let okta_two = okta(&[okta_event("o-1", "user.session.start", "a@x")]);
    let okta_two = Delivery {
        req: okta_two.req.header("authorization", "Basic bm9wZQ=="),
        ..okta_two
    };
    problem(&okta_two.send(&client).await, 400, "repeated-header");

    let auth0_raw = auth0(&[("a-1", "s", "auth0|x")]);
    let auth0_raw = Delivery {
        req: auth0_raw
            .req
            .without("authorization")
            .header("authorization", AUTH0_TOKEN),
        ..auth0_raw
    };
    problem(&auth0_raw.send(&client).await, 401, unauthenticated);

    let tw = twilio(&idem.base, &[("EZ-9", "+1555")]);
    let tampered = Delivery {
        req: Req {
            body: tw
                .req
                .body
                .iter()
                .map(|&b| if b == b'9' { b'8' } else { b })
                .collect(),
            headers: tw.req.headers.clone(),
        },
        path: tw.path.clone(),
    };
    problem(&tampered.send(&client).await, 401, unauthenticated);
    let unsigned = Delivery {
        req: tw.req.without("x-twilio-signature"),
        path: tw.path,
    };
    problem(&unsigned.send(&client).await, 401, unauthenticated);

    let event = stripe_event("evt_9", "cus_9");
    problem(
        &stripe_at(&event, now_secs() - 301).send(&client).await,
        401,
        "stale-timestamp",
    );
    problem(
        &stripe_at(&event, now_secs() + 301).send(&client).await,
        401,
        "stale-timestamp",
    );
    let wrong_key = stripe_at(&event, now_secs());
    let forged = lower_hex(&hmac_sha256(b"whsec_other", &[b"1.", event.as_bytes()]));
    let wrong_key = Delivery {
        req: wrong_key
            .req
            .without("stripe-signature")
            .header("stripe-signature", &format!("t={},v1={forged}", now_secs())),
        ..wrong_key
    };
    problem(&wrong_key.send(&client).await, 401, unauthenticated);

    let gh = github("gh-9", "x");
    let gh = Delivery {
        req: gh
            .req
            .without("x-hub-signature-256")
            .header("x-hub-signature-256", "sha256=00"),
        ..gh
    };
    problem(&gh.send(&client).await, 401, unauthenticated);

    problem(
        &standard_at("msg_9", "x", now_secs() - 400)
            .send(&client)
            .await,
        401,
        "stale-timestamp",
    );

    // Nothing was claimed: the same events, signed right, are accepted now, once each.
    assert_eq!(
        receipt(
            &okta(&[okta_event("o-1", "user.session.start", "a@x")])
                .send(&client)
                .await
        ),
        (1, 0, 0, 0)
    );
    assert_eq!(
        receipt(&auth0(&[("a-1", "s", "auth0|x")]).send(&client).await),
        (1, 0, 0, 0)
    );
    assert_eq!(
        receipt(&twilio(&idem.base, &[("EZ-9", "+1555")]).send(&client).await),
        (1, 0, 0, 0)
    );
    assert_eq!(
        receipt(&stripe_at(&event, now_secs()).send(&client).await),
        (1, 0, 0, 0)
    );
    assert_eq!(
        receipt(&github("gh-9", "x").send(&client).await),
        (1, 0, 0, 0)
    );
    assert_eq!(
        receipt(&standard_at("msg_9", "x", now_secs()).send(&client).await),
        (1, 0, 0, 0)
    );
    exactly(&receiver, "/login", 3).await;
    exactly(&receiver, "/mfa", 2).await;

    // No such tenant or source (answered as a caller without credentials is); a body that is
    // not the provider's shape.
    let r = client
        .send("POST", "/v1/sources/nobody/okta_prod", Req::new("{}"))
        .await;
    problem(&r, 401, "source-unauthenticated");
    let r = client
        .send("POST", "/v1/sources/idp/nothing", Req::new("{}"))
        .await;
    problem(&r, 401, "source-unauthenticated");
    let r = client
        .send(
            "POST",
            "/v1/sources/idp/okta_prod",
            Req::new(r#"{"data":{}}"#).header("authorization", OKTA_AUTH),
        )
        .await;
    problem(&r, 400, "invalid-events");
    let r = client
        .send(
            "POST",
            "/v1/sources/idp/okta_prod",
            Req::new("{not json").header("authorization", OKTA_AUTH),
        )
        .await;
    problem(&r, 400, "malformed-json");
    // Authentication comes before parsing: unauthenticated, the same body is a 401.
    let r = client
        .send(
            "POST",
            "/v1/sources/idp/okta_prod",
            Req::new("{not json").header("authorization", "Basic bm9wZQ=="),
        )
        .await;
    problem(&r, 401, "source-unauthenticated");
    let big = format!(
        r#"{{"data":{{"events":[]}},"pad":"{}"}}"#,
        "x".repeat(1024 * 1024)
    );
    let r = client
        .send(
            "POST",
            "/v1/sources/idp/okta_prod",
            Req::new(&big).header("authorization", OKTA_AUTH),
        )
        .await;
    problem(&r, 413, "payload-too-large");
}

#[tokio::test]
async fn unmapped_and_subjectless_events_are_counted_and_acknowledged() {
    let (_dir, receiver, idem, client) = harness().start().await;
    let mut no_target = okta_event("okta-n2", "user.mfa.factor.deactivate", "x");
    no_target["target"] = Value::Null;
    let mut no_id = okta_event("", "user.session.start", "y");
    no_id.as_object_mut().map(|o| o.remove("uuid"));
    let batch = || {
        okta(&[
            okta_event("okta-n1", "group.user_membership.add", "z@example.com"),
            no_target.clone(),
            no_id.clone(),
            okta_event("okta-n4", "user.session.end", "w@example.com"),
        ])
    };
    assert_eq!(receipt(&batch().send(&client).await), (1, 0, 1, 2));
    // Neither ignored nor refused events are claimed: sent again, the same.
    assert_eq!(receipt(&batch().send(&client).await), (0, 1, 1, 2));
    exactly(&receiver, "/login", 1).await;
    assert!(receiver.seen_on("/mfa").is_empty());
    // A delivery's refusals are one log line, however many: a sender cannot flood the log.
    let many = vec![no_target.clone(); 300];
    assert_eq!(receipt(&okta(&many).send(&client).await), (0, 0, 0, 300));
    let lines = |log: &str| log.lines().filter(|l| l.contains("events refused")).count();
    let log = eventually(
        Duration::from_secs(5),
        || async { idem.stderr() },
        |log| lines(log) >= 3,
    )
    .await;
    assert_eq!(lines(&log), 3, "one line per delivery with refusals: {log}");

    let metrics = client.send("GET", "/metrics", Req::new("")).await;
    let metrics = String::from_utf8_lossy(&metrics.body).to_string();
    let okta = |outcome: &str| {
        metric_value(
            &metrics,
            &format!("idem_source_events_total{{kind=\"okta\",outcome=\"{outcome}\"}}"),
        )
    };
    assert_eq!(okta("ignored"), Some(2.0), "{metrics}");
    assert_eq!(okta("refused"), Some(304.0));
    assert_eq!(okta("first"), Some(1.0));
    assert_eq!(
        metric_value(
            &metrics,
            "idem_source_deliveries_total{kind=\"okta\",outcome=\"ok\"}"
        ),
        Some(3.0)
    );
}

#[tokio::test]
async fn okta_verifies_its_event_hook_with_the_configured_authorization() {
    let (_dir, _receiver, _idem, client) = harness().start().await;
    let challenge = "X3ZvbGR5LWNoYWxsZW5nZQ";
    let r = client
        .send(
            "GET",
            "/v1/sources/idp/okta_prod",
            Req::new("")
                .header("authorization", OKTA_AUTH)
                .header("x-okta-verification-challenge", challenge),
        )
        .await;
    assert_eq!(r.status, 200, "{}", text(&r));
    assert_eq!(r.json(), json!({"verification": challenge}));
    let r = client
        .send(
            "GET",
            "/v1/sources/idp/okta_prod",
            Req::new("").header("authorization", OKTA_AUTH),
        )
        .await;
    assert_eq!(r.status, 400, "no challenge: {}", text(&r));
    let r = client
        .send(
            "GET",
            "/v1/sources/idp/okta_prod",
            Req::new("")
                .header("authorization", "Basic d3Jvbmc=")
                .header("x-okta-verification-challenge", challenge),
        )
        .await;
    assert_eq!(r.status, 401, "{}", text(&r));
    let r = client
        .send("GET", "/v1/sources/idp/stripe", Req::new(""))
        .await;
    // A source of another kind answers GET as no source does.
    assert_eq!(r.status, 401, "{}", text(&r));
}

#[tokio::test]
async fn no_event_body_or_subject_is_stored_or_sent_on() {
    let (dir, receiver, idem, client) = harness().start().await;
    let secret_subject = "alice.private@example.com";
    let delivery = okta(&[okta_event(
        "okta-p1",
        "user.mfa.factor.deactivate",
        secret_subject,
    )]);
    assert_eq!(receipt(&delivery.send(&client).await), (1, 0, 0, 0));
    let seen = exactly(&receiver, "/mfa", 1).await;
    let config_path = idem.kill();
    for needle in [secret_subject.as_bytes(), b"Alice Example", b"Reset factor"] {
        assert!(
            !contains(&seen[0].body, needle),
            "the callback carries {needle:?}"
        );
        for (place, bytes) in stored(&config_path, &dir.path().join("data")) {
            assert!(
                !contains(&bytes, needle),
                "{place} holds {:?}",
                String::from_utf8_lossy(needle)
            );
        }
    }
}

#[tokio::test]
async fn a_sigkill_after_the_answer_still_delivers_each_callback_once() {
    let (dir, receiver, idem, client) = harness().start().await;
    // The first attempt hangs past the attempt deadline, so the process dies while it is
    // being made; the answer does not wait for it (it would take the deadline if it did).
    receiver.script("/mfa", &[hang(Duration::from_secs(5)), status(200)]);
    let sms = [("EZ-k1", "+15552220001")];
    let sent = std::time::Instant::now();
    assert_eq!(
        receipt(&twilio(&idem.base, &sms).send(&client).await),
        (1, 0, 0, 0)
    );
    assert!(
        sent.elapsed() < Duration::from_secs(2),
        "the answer waited for the callback"
    );
    eventually(
        Duration::from_secs(5),
        || async { receiver.seen_on("/mfa") },
        |s| !s.is_empty(),
    )
    .await;
    let config_path = idem.kill();
    let idem = Idem::start_with(config_path, &[]);
    let client = Client::new(&idem.base);
    // The provider's retry after the restart is a duplicate.
    assert_eq!(
        receipt(&twilio(&idem.base, &sms).send(&client).await),
        (0, 1, 0, 0)
    );
    // The callback is made again after the restart, under the same webhook-id and bytes.
    let seen = eventually(
        Duration::from_secs(20),
        || async { receiver.seen_on("/mfa") },
        |s| s.len() >= 2,
    )
    .await;
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0].header("webhook-id"), seen[1].header("webhook-id"));
    assert_eq!(seen[0].body, seen[1].body);
    let found = decisions(&client, "+15552220001", "mfa_reset").await;
    assert_eq!(found.len(), 1, "{found:?}");
    let delivery_id = found[0]["actions"][0]["delivery_id"]
        .as_str()
        .expect("delivery id")
        .to_string();
    let delivered = eventually(
        Duration::from_secs(10),
        || async {
            client
                .send(
                    "GET",
                    &format!("/v1/deliveries/{delivery_id}"),
                    Req::new("").header("authorization", API_KEY),
                )
                .await
                .json()
        },
        |d| d["status"] == "delivered",
    )
    .await;
    assert_eq!(delivered["status"], "delivered", "{delivered}");
    let later = eventually(
        LATE,
        || async { receiver.seen_on("/mfa").len() },
        |n| *n > 2,
    )
    .await;
    assert_eq!(later, 2, "no third attempt once delivered");
    drop(dir);
}

#[tokio::test]
async fn a_map_type_without_a_playbook_is_a_config_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let receiver = Receiver::start().await;
    let cfg = harness()
        .config(&dir.path().join("data"), &receiver)
        .replace(
            "type = \"mfa_reset\"\nsubject = \"/data/to\"",
            "type = \"nope\"\nsubject = \"/data/to\"",
        );
    let path = dir.path().join("idem.toml");
    std::fs::write(&path, cfg).expect("write config");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["serve", "--config"])
        .arg(&path)
        .output()
        .expect("run idem");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("tenants.idp.sources.twilio.map[0].type"),
        "{stderr}"
    );
}

#[tokio::test]
async fn an_event_twice_in_a_batch_and_two_events_of_one_subject_make_one_decision() {
    let (_dir, receiver, _idem, client) = harness().start().await;
    let batch = okta(&[
        okta_event("okta-t1", "user.session.start", "twice@example.com"),
        okta_event("okta-t1", "user.session.start", "twice@example.com"),
    ]);
    assert_eq!(receipt(&batch.send(&client).await), (1, 1, 0, 0));
    exactly(&receiver, "/login", 1).await;
    // One event a hundred times in one batch (more than max_waiters copies): claimed once.
    let copies = vec![okta_event("okta-t2", "user.session.start", "many@example.com"); 100];
    assert_eq!(receipt(&okta(&copies).send(&client).await), (1, 99, 0, 0));
    exactly(&receiver, "/login", 2).await;
    // takeover is decided once per subject: a second event about the same customer is
    // accepted (it is a new event) and answered by the first decision, with no callback.
    assert_eq!(
        receipt(
            &stripe_at(&stripe_event("evt_s1", "cus_same"), now_secs())
                .send(&client)
                .await
        ),
        (1, 0, 0, 0)
    );
    assert_eq!(
        receipt(
            &stripe_at(&stripe_event("evt_s2", "cus_same"), now_secs())
                .send(&client)
                .await
        ),
        (1, 0, 0, 0)
    );
    exactly(&receiver, "/lock", 1).await;
    assert_eq!(decisions(&client, "cus_same", "takeover").await.len(), 1);
}

#[tokio::test]
async fn a_batch_past_the_tenants_rate_limit_is_taken_a_rate_at_a_time_and_each_event_once() {
    let (_dir, receiver, _idem, client) = Harness::new()
        .delivery(DELIVERY)
        .tenants(|r| idp(r).replace("[tenants.idp]\n", "[tenants.idp]\nrate_limit = 5\n"))
        .start()
        .await;
    let events: Vec<Value> = (0..12)
        .map(|n| okta_event(&format!("rl-{n}"), "user.session.start", &format!("u{n}@x")))
        .collect();
    // Five decisions a second: the batch is taken five new events at a time, each answer a 429
    // until the last, and an event taken before is a duplicate that takes nothing.
    let mut tries = 0;
    let last = loop {
        tries += 1;
        let r = okta(&events).send(&client).await;
        if r.status != 429 {
            break r;
        }
        assert_eq!(
            r.problem_type(),
            "urn:idem:problem:rate-limited",
            "{}",
            text(&r)
        );
        let wait: u64 = r
            .header("retry-after")
            .and_then(|s| s.parse().ok())
            .expect("a Retry-After");
        assert!(tries < 6, "no progress after {tries} tries");
        tokio::time::sleep(Duration::from_secs(wait)).await;
    };
    assert!(
        tries >= 2,
        "12 new events at 5 a second are not taken at once"
    );
    let (accepted, duplicates, ignored, refused) = receipt(&last);
    assert_eq!((ignored, refused), (0, 0));
    assert_eq!(accepted + duplicates, 12, "each event counted once");
    assert!(
        accepted >= 1 && duplicates >= 5,
        "{accepted} new, {duplicates} taken before"
    );
    exactly(&receiver, "/login", 12).await;
}
