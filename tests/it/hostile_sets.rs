//! What a hostile Shared Signals transmitter still gets (docs/SHARED-SIGNALS.md, "What a
//! transmitter cannot make idem do"), against a real `idem serve` and the loopback transmitter,
//! on either store: a JOSE header asking for an extension (`crit`, `b64`) is refused; a SET
//! whose `iat` is outside the source's window is refused, so one sent again after its claim has
//! ended is not decided again; a SET is one claim by its `iss` and `jti` whatever events it
//! holds; a poll answer is taken at most `maxEvents` SETs at a time, each judged on its own; and
//! neither a poll flood nor SETs of thousands of events grow idem's memory past a bound. Each
//! refusal stores nothing.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::*;
use devtools::jose::{self, JwsKey};

const API_KEY: &str = "Bearer sk_hostile_sets_key_01";
const ISSUER: &str = "https://sts.hostile.test/ssf";
const AUDIENCE: &str = "https://idem.hostile.test/acme";
const RISC_COMPROMISE: &str =
    "https://schemas.openid.net/secevent/risc/event-type/credential-compromise";
const RISC_DISABLED: &str = "https://schemas.openid.net/secevent/risc/event-type/account-disabled";

/// Tenant `acme`: a push source `entra` with `entra_lines` added (e.g. `max_age`), a source
/// `polled` that polls the transmitter, both mapping two RISC event types to two playbooks, and
/// `signatures` lines (e.g. its `tolerance`).
fn acme(
    receiver: &Receiver,
    transmitter: &LoopbackTransmitter,
    entra_lines: &str,
    signatures: &str,
) -> String {
    let map = |source: &str| {
        format!(
            r#"
[[tenants.acme.sources.{source}.map]]
event = "{RISC_COMPROMISE}"
type = "breach"
[[tenants.acme.sources.{source}.map]]
event = "{RISC_DISABLED}"
type = "disabled"
"#
        )
    };
    format!(
        r#"
[signatures]
{signatures}

[tenants.acme]
api_key = "sk_hostile_sets_key_01"
callback_secret = "{CALLBACK_SECRET}"

[tenants.acme.playbooks.breach]
decision = "deny"
actions = [ {{ name = "lock", url = "{lock}" }} ]

[tenants.acme.playbooks.disabled]
decision = "review"
actions = [ {{ name = "case", url = "{case}" }} ]

[tenants.acme.sources.entra]
kind = "ssf"
issuer = "{ISSUER}"
audience = "{AUDIENCE}"
jwks = "{jwks}"
{entra_lines}
{entra_map}

[tenants.acme.sources.polled]
kind = "ssf"
issuer = "{ISSUER}"
audience = "{AUDIENCE}"
jwks = "{jwks}"
poll = {{ url = "{poll}", token = "{POLL_TOKEN}" }}
{polled_map}
"#,
        lock = receiver.url("/lock"),
        case = receiver.url("/case"),
        jwks = transmitter.url("/jwks"),
        poll = transmitter.url("/poll"),
        entra_map = map("entra"),
        polled_map = map("polled"),
    )
}

/// idem with tenant `acme` (see [`acme`]), the transmitter serving `key`.
async fn start(
    key: &JwsKey,
    entra_lines: &str,
    signatures: &str,
) -> (
    tempfile::TempDir,
    Receiver,
    Idem,
    Client,
    LoopbackTransmitter,
) {
    let transmitter = LoopbackTransmitter::start(jose::jwk_set(&[key])).await;
    let t = transmitter.clone();
    let (entra_lines, signatures) = (entra_lines.to_string(), signatures.to_string());
    let (dir, receiver, idem, client) = Harness::new()
        .delivery("inline_timeout = \"2s\"\nschedule = [\"200ms\", \"200ms\"]")
        .tenants(move |r| acme(r, &t, &entra_lines, &signatures))
        .start()
        .await;
    (dir, receiver, idem, client, transmitter)
}

fn now_secs() -> i64 {
    (idem_schemas::timefmt::now_ms() / 1000) as i64
}

/// A SET of `event` about `subject`, issued at `iat`.
fn set_at(jti: &str, event: &str, subject: &str, iat: Value) -> Value {
    json!({
        "iss": ISSUER, "aud": AUDIENCE, "jti": jti, "iat": iat,
        "sub_id": {"format": "email", "email": subject},
        "events": {event: {"reason_admin": {"en": "a test"}}}
    })
}

/// A RISC credential-compromise SET about `subject`, issued now.
fn compromise(jti: &str, subject: &str) -> Value {
    set_at(jti, RISC_COMPROMISE, subject, json!(now_secs()))
}

async fn push(client: &Client, token: &str) -> Resp {
    let req = Req::new(token)
        .without("content-type")
        .header("content-type", "application/secevent+jwt");
    client.send("POST", "/v1/sources/acme/entra", req).await
}

fn assert_accepted(r: &Resp, what: &str) {
    assert_eq!(r.status, 202, "{what}: {}", text(r));
}

/// Asserts RFC 8935's `invalid_request` whose description names `why`.
fn assert_invalid(r: &Resp, why: &str, what: &str) {
    assert_eq!(r.status, 400, "{what}: {}", text(r));
    assert_eq!(r.header("content-type"), Some("application/json"), "{what}");
    let body = r.json();
    assert_eq!(body["err"], "invalid_request", "{what}: {body}");
    let description = body["description"].as_str().unwrap_or_default();
    assert!(description.contains(why), "{what}: {description}");
}

async fn status(client: &Client, source: &str) -> Value {
    let r = client
        .send(
            "GET",
            &format!("/v1/sources/acme/{source}/status"),
            Req::new("").header("authorization", API_KEY),
        )
        .await;
    assert_eq!(r.status, 200, "{}", text(&r));
    r.json()
}

/// How many decisions tenant `acme` holds.
async fn decisions(client: &Client) -> usize {
    let r = client
        .send(
            "GET",
            "/v1/decisions?limit=100",
            Req::new("").header("authorization", API_KEY),
        )
        .await;
    assert_eq!(r.status, 200, "{}", text(&r));
    r.json()["data"].as_array().map_or(0, Vec::len)
}

#[tokio::test]
async fn a_jose_header_asking_for_an_extension_is_refused_pushed_or_polled() {
    let key = JwsKey::rsa("rsa-1");
    let (_dir, receiver, _idem, client, transmitter) = start(&key, "", "").await;
    let claims = compromise("crit-1", "crit@example.com");
    let with = |extra: Value| {
        let mut header = json!({"alg": "RS256", "kid": "rsa-1", "typ": "secevent+jwt"});
        for (name, value) in extra.as_object().into_iter().flatten() {
            header[name] = value.clone();
        }
        key.sign_with_header(&header, &claims)
    };
    let cases = [
        (
            "an extension named in crit",
            json!({"crit": ["exp"], "exp": 1}),
            "crit",
        ),
        (
            "an unencoded payload",
            json!({"crit": ["b64"], "b64": false}),
            "crit",
        ),
        ("crit empty", json!({"crit": []}), "crit"),
        ("crit a string", json!({"crit": "b64"}), "crit"),
        ("b64 false without crit", json!({"b64": false}), "b64"),
    ];
    for (what, extra, why) in &cases {
        assert_invalid(&push(&client, &with(extra.clone())).await, why, what);
    }
    // Polled, each is reported in setErrs under its jti, and nothing is acknowledged.
    transmitter.queue("polled-crit", &with(json!({"crit": ["b64"], "b64": false})));
    let errs = eventually(
        Duration::from_secs(20),
        || async { transmitter.set_errs() },
        |e| !e.is_empty(),
    )
    .await;
    assert_eq!(errs["polled-crit"]["err"], "invalid_request", "{errs:?}");
    assert!(
        errs["polled-crit"]["description"]
            .as_str()
            .is_some_and(|d| d.contains("crit")),
        "{errs:?}"
    );
    assert!(transmitter.acked().is_empty());
    // Nothing was claimed: no decision, no callback, and the same claims in a plain header are
    // a first SET afterwards.
    assert_eq!(decisions(&client).await, 0);
    assert!(receiver.seen_on("/lock").is_empty());
    let s = status(&client, "entra").await;
    assert_eq!(s["refused"], cases.len() as u64, "{s}");
    assert_eq!(s["accepted"], 0, "{s}");
    assert_accepted(&push(&client, &key.sign(&claims)).await, "the plain SET");
    exactly(&receiver, "/lock", 1).await;
}

#[tokio::test]
async fn a_set_issued_outside_the_window_is_refused_and_claims_nothing() {
    let key = JwsKey::rsa("rsa-1");
    // A SET may be 60 s old and 30 s ahead.
    let (_dir, receiver, _idem, client, _transmitter) =
        start(&key, "max_age = \"60s\"", "tolerance = \"30s\"").await;
    let now = now_secs();
    let ten_years = 10 * 365 * 86_400;
    let cases = [
        ("iat 0", json!(0), "in the past"),
        ("ten years back", json!(now - ten_years), "in the past"),
        ("past max_age", json!(now - 120), "in the past"),
        ("ten years ahead", json!(now + ten_years), "in the future"),
        ("past the skew", json!(now + 120), "in the future"),
    ];
    for (what, iat, why) in &cases {
        let token = key.sign(&set_at(
            "old-1",
            RISC_COMPROMISE,
            "old@example.com",
            iat.clone(),
        ));
        assert_invalid(&push(&client, &token).await, why, what);
    }
    assert_eq!(decisions(&client).await, 0);
    let s = status(&client, "entra").await;
    assert_eq!(s["refused"], cases.len() as u64, "{s}");
    assert_eq!(s["accepted"], 0, "{s}");
    // Within the window, behind and ahead, the same jti is a first SET.
    let within = key.sign(&set_at(
        "old-1",
        RISC_COMPROMISE,
        "old@example.com",
        json!(now - 57),
    ));
    assert_accepted(&push(&client, &within).await, "57 s old");
    let ahead = key.sign(&set_at(
        "ahead-1",
        RISC_COMPROMISE,
        "ahead@example.com",
        json!(now + 20),
    ));
    assert_accepted(&push(&client, &ahead).await, "20 s ahead");
    exactly(&receiver, "/lock", 2).await;
    // The accepted SET once it is older than max_age: refused, not taken as new nor as a
    // duplicate (with max_age within the claim's life, it could outlive its claim otherwise).
    let aged = eventually(
        Duration::from_secs(10),
        || async { push(&client, &within).await },
        |r| r.status != 202,
    )
    .await;
    assert_invalid(&aged, "in the past", "the same SET past max_age");
    assert_eq!(decisions(&client).await, 2);
}

#[tokio::test]
async fn a_set_is_one_claim_by_its_iss_and_jti_whatever_it_holds() {
    let key = JwsKey::rsa("rsa-1");
    let (_dir, receiver, _idem, client, transmitter) = start(&key, "", "").await;
    let now = json!(now_secs());
    let first = key.sign(&set_at(
        "one-1",
        RISC_COMPROMISE,
        "one@example.com",
        now.clone(),
    ));
    assert_accepted(&push(&client, &first).await, "a first SET");
    exactly(&receiver, "/lock", 1).await;
    // The same iss and jti holding another mapped event (another playbook), or both events, or
    // another subject: a duplicate, accepted and not decided again.
    let other_type = key.sign(&set_at(
        "one-1",
        RISC_DISABLED,
        "one@example.com",
        now.clone(),
    ));
    let mut both = set_at("one-1", RISC_DISABLED, "other@example.com", now.clone());
    both["events"][RISC_COMPROMISE] = json!({});
    let both = key.sign(&both);
    for (what, token) in [("another event type", &other_type), ("both events", &both)] {
        assert_accepted(&push(&client, token).await, what);
    }
    // Polled to the same source's transmitter under the other source: its own claim there (a
    // source is its own namespace), and the same jti again there is a duplicate too.
    transmitter.queue("one-1", &other_type);
    let acked = eventually(
        Duration::from_secs(20),
        || async { transmitter.acked() },
        |a| !a.is_empty(),
    )
    .await;
    assert_eq!(acked, vec!["one-1".to_string()]);
    transmitter.queue("one-1-again", &first);
    eventually(
        Duration::from_secs(20),
        || async { transmitter.acked() },
        |a| a.len() >= 2,
    )
    .await;
    exactly(&receiver, "/case", 1).await;
    exactly(&receiver, "/lock", 1).await;
    assert_eq!(decisions(&client).await, 2, "one per source");
    let s = status(&client, "entra").await;
    assert_eq!(s["accepted"], 1, "{s}");
    assert_eq!(
        s["duplicates"], 3,
        "the SET again, and the second event of both: {s}"
    );
    let s = status(&client, "polled").await;
    assert_eq!(s["accepted"], 1, "{s}");
    assert_eq!(s["duplicates"], 1, "{s}");
}

#[tokio::test]
async fn a_poll_answer_is_taken_at_most_max_events_at_a_time() {
    let key = JwsKey::ec("ec-1");
    let (_dir, receiver, _idem, client, transmitter) = start(&key, "", "").await;
    // The transmitter gives every pending SET, more than the 64 idem asks for.
    transmitter.ignore_max_events(true);
    for n in 0..100 {
        let jti = format!("flood-{n:03}");
        let token = key.sign(&compromise(&jti, &format!("u{n}@example.com")));
        transmitter.queue(&jti, &token);
    }
    let acked = eventually(
        Duration::from_secs(30),
        || async { transmitter.acked() },
        |a| a.len() >= 100,
    )
    .await;
    assert_eq!(acked.len(), 100, "every SET is taken in the end");
    let requests = transmitter.requests();
    let most = requests.iter().map(|(acks, _)| *acks).max().unwrap_or(0);
    assert_eq!(
        most, 64,
        "at most maxEvents acks in one request: {requests:?}"
    );
    assert!(requests.iter().all(|(_, errs)| *errs <= 64), "{requests:?}");
    exactly(&receiver, "/lock", 100).await;
    let s = status(&client, "polled").await;
    assert_eq!(s["accepted"], 100, "{s}");
    assert_eq!(s["duplicates"], 0, "none of them taken twice: {s}");
}

#[tokio::test]
async fn a_poll_answer_member_that_is_no_set_is_reported_beside_the_sets_taken() {
    let key = JwsKey::rsa("rsa-1");
    let (_dir, receiver, _idem, client, transmitter) = start(&key, "", "").await;
    let good = key.sign(&compromise("good-1", "good@example.com"));
    let bad_signature = {
        let mut t = key.sign(&compromise("bad-1", "bad@example.com"));
        t.push_str("AAAA");
        t
    };
    transmitter.answer_next(
        json!({"sets": {
            "a-number": 5, "good-1": good, "c-null": null, "d-object": {"jws": "x"},
            "e-list": ["x"], "bad-1": bad_signature,
        }})
        .to_string(),
    );
    let errs = eventually(
        Duration::from_secs(20),
        || async { transmitter.set_errs() },
        |e| e.len() >= 5,
    )
    .await;
    for jti in ["a-number", "c-null", "d-object", "e-list"] {
        assert_eq!(errs[jti]["err"], "invalid_request", "{jti}: {errs:?}");
        assert!(
            errs[jti]["description"]
                .as_str()
                .is_some_and(|d| d.contains("not a SET")),
            "{jti}: {errs:?}"
        );
    }
    assert_eq!(errs["bad-1"]["err"], "invalid_key", "{errs:?}");
    assert_eq!(errs.len(), 5, "{errs:?}");
    let acked = eventually(
        Duration::from_secs(20),
        || async { transmitter.acked() },
        |a| !a.is_empty(),
    )
    .await;
    assert_eq!(acked, vec!["good-1".to_string()]);
    exactly(&receiver, "/lock", 1).await;
    let s = status(&client, "polled").await;
    assert_eq!(s["accepted"], 1, "{s}");
    assert_eq!(s["refused"], 5, "{s}");
    assert!(s["poll"]["last_error"].is_null(), "{s}");
}

/// A SET of `n` events, each mapped to no playbook but the first.
fn many_events(jti: &str, n: usize) -> Value {
    let mut claims = compromise(jti, "many@example.com");
    for i in 0..n {
        claims["events"][format!("e{i}")] = json!({});
    }
    claims
}

#[tokio::test]
async fn a_set_of_thousands_of_events_is_refused_whole() {
    let key = JwsKey::ec("ec-1");
    let (_dir, receiver, _idem, client, transmitter) = start(&key, "", "").await;
    let token = key.sign(&many_events("many-1", 4_000));
    assert!(token.len() < 64 * 1024, "within the size a SET may have");
    assert_invalid(&push(&client, &token).await, "events", "4,000 events");
    transmitter.queue("many-1", &token);
    let errs = eventually(
        Duration::from_secs(20),
        || async { transmitter.set_errs() },
        |e| !e.is_empty(),
    )
    .await;
    assert_eq!(errs["many-1"]["err"], "invalid_request", "{errs:?}");
    // Nothing of it was claimed: the first of its events, sent alone, is a first SET.
    assert_eq!(decisions(&client).await, 0);
    let few = key.sign(&many_events("many-1", 15));
    assert_accepted(&push(&client, &few).await, "16 events");
    exactly(&receiver, "/lock", 1).await;
}

/// What a poll flood and SETs of thousands of events grow idem's memory by at most, in KiB.
/// idem reads a poll answer only up to 65 SETs of 64 KiB (about 4 MiB) and fails the poll past
/// that, and reads a pushed SET only up to 64 KiB; so whatever it is sent, it holds one bounded
/// answer buffer (grown by doubling: under 8 MiB) and its parse, plus what the allocator keeps
/// for reuse. 64 MiB is well above that and far below the flood itself: 100,000 SETs of some
/// 500 bytes each, read whole, are 50 MB of body before a byte of it is parsed, and several
/// times that once parsed.
const MEMORY_BOUND_KIB: u64 = 64 * 1024;

#[tokio::test]
async fn neither_a_poll_flood_nor_sets_of_thousands_of_events_grow_memory_past_a_bound() {
    let key = JwsKey::ec("ec-1");
    let (_dir, receiver, idem, client, transmitter) = start(&key, "", "").await;
    // Warm: a SET pushed and one polled, so that what idem keeps once (keys, pools) is there.
    assert_accepted(
        &push(
            &client,
            &key.sign(&compromise("warm-1", "warm@example.com")),
        )
        .await,
        "a first SET",
    );
    transmitter.queue(
        "warm-2",
        &key.sign(&compromise("warm-2", "warm2@example.com")),
    );
    eventually(
        Duration::from_secs(20),
        || async { transmitter.acked() },
        |a| !a.is_empty(),
    )
    .await;
    exactly(&receiver, "/lock", 2).await;
    let (before, _) = idem.memory();

    // A transmitter answering 100,000 SETs when asked for 64, three polls running, then a
    // plain answer (given once idem is done with the floods).
    let one = key.sign(&compromise("flood", "flood@example.com"));
    let mut flood = String::with_capacity(100_000 * (one.len() + 24));
    flood.push_str(r#"{"sets":{"#);
    for n in 0..100_000 {
        if n > 0 {
            flood.push(',');
        }
        flood.push_str(&format!(r#""flood-{n:06}":"{one}""#));
    }
    flood.push_str("}}");
    let flood = axum::body::Bytes::from(flood);
    for _ in 0..3 {
        transmitter.answer_next(flood.clone());
    }
    transmitter.answer_next(r#"{"sets":{}}"#);
    let left = eventually(
        Duration::from_secs(60),
        || async { transmitter.answers_left() },
        |left| *left == 0,
    )
    .await;
    assert_eq!(left, 0, "idem polled through the floods");

    // Pushes of a SET of 4,000 events, each refused.
    let many = key.sign(&many_events("many", 4_000));
    for n in 0..50 {
        assert_invalid(&push(&client, &many).await, "events", &format!("push {n}"));
    }

    let (after, peak) = idem.memory();
    assert!(
        peak.saturating_sub(before) < MEMORY_BOUND_KIB,
        "idem's peak memory grew from {before} KiB to {peak} KiB"
    );
    assert!(
        after.saturating_sub(before) < MEMORY_BOUND_KIB,
        "idem's memory grew from {before} KiB to {after} KiB"
    );
    // The floods were refused, not taken: nothing of them was decided or acknowledged.
    let s = status(&client, "polled").await;
    assert_eq!(s["accepted"], 1, "{s}");
    assert!(
        !transmitter.acked().iter().any(|j| j.starts_with("flood")),
        "a flood's SET was acknowledged"
    );
    eprintln!("idem's memory: {before} KiB before, {after} KiB after, {peak} KiB at its peak");
}
