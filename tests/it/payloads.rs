//! What makes two requests the same signal, end to end. A signed request without an
//! Idempotency-Key is claimed under its webhook-id, so the identical request sent again is a
//! replay (one decision, one set of callbacks), a new webhook-id is a new decision, and the same
//! webhook-id with another body is refused as key reuse. A body is compared by its RFC 8785
//! canonical form: `1`, `1.0` and `1e0`, another member order, other whitespace and other
//! escapes are one payload, and so are integers beyond 2^53 that round to the same double; a
//! different value is not. A body naming a member twice (at any depth, escaped or not) is
//! refused as an invalid signal, and two `Authorization` headers are refused before
//! authentication; neither refusal stores anything.

use std::time::Duration;

use crate::support::*;

/// Long enough that every callback is delivered inline.
const DELIVERY: &str = "inline_timeout = \"5s\"";

/// A moment for a late (wrong) callback to arrive before the receiver's count is read.
const LATE: Duration = Duration::from_millis(300);

fn paths(receiver: &Receiver) -> Vec<String> {
    let mut paths: Vec<String> = receiver.seen().into_iter().map(|c| c.path).collect();
    paths.sort();
    paths
}

#[tokio::test]
async fn a_signed_request_without_a_key_is_claimed_under_its_webhook_id() {
    let (_dir, receiver, _idem, client) = Harness::new().delivery(DELIVERY).start().await;
    let id = unique("msg");
    let body = sim_swap("+447700900123");
    let ts = idem_schemas::timefmt::now_ms() as i64 / 1000;
    // The identical request (same webhook-id, timestamp, signature and body) three times.
    let identical = || Req::new(&body).acme_signed_at(&id, ts);

    let first = client.signal(identical()).await;
    assert_first(&first, "the signed request");
    assert_eq!(first.json()["actions"].as_array().map(Vec::len), Some(2));
    for n in 2..=3 {
        let again = client.signal(identical()).await;
        assert_replay_of(&again, &first, &format!("copy {n} of the signed request"));
    }
    let _ = receiver.wait_for(2).await;
    tokio::time::sleep(LATE).await;
    assert_eq!(paths(&receiver), ["/case", "/lock"], "one set of callbacks");

    // The same request signed anew (a sender's retry) is the same claim, and so is the request
    // naming the webhook-id as its Idempotency-Key.
    let resigned = client.signal(Req::new(&body).acme_signed(&id)).await;
    assert_replay_of(&resigned, &first, "the same webhook-id, signed anew");
    let keyed = client
        .signal(Req::new(&body).key(&id).acme_signed(&id))
        .await;
    assert_replay_of(&keyed, &first, "the webhook-id as Idempotency-Key");

    // The same body under a new webhook-id is a new decision.
    let id2 = unique("msg");
    let second = client.signal(Req::new(&body).acme_signed(&id2)).await;
    assert_first(&second, "the same body under a new webhook-id");
    assert_ne!(decision_id(&second), decision_id(&first));
    let _ = receiver.wait_for(4).await;

    // The same webhook-id with another body, signed: that id's payload is another one.
    let changed = client
        .signal(Req::new(&sim_swap("+447700900124")).acme_signed(&id))
        .await;
    assert_problem(
        &changed,
        422,
        "key-reused",
        "the webhook-id with another body",
    );

    tokio::time::sleep(LATE).await;
    assert_eq!(
        paths(&receiver),
        ["/case", "/case", "/lock", "/lock"],
        "one set of callbacks per decision"
    );
}

#[tokio::test]
async fn bodies_are_compared_by_their_rfc_8785_canonical_form() {
    let (_dir, _receiver, _idem, client) = Harness::new().delivery(DELIVERY).start().await;
    let with_n = |n: &str| {
        format!(r#"{{"type":"sim_swap","subject":"+447700900123","metadata":{{"n":{n}}}}}"#)
    };
    let key = unique("jcs");
    let send = |body: String| client.signal(Req::new(&body).key(&key).beta());

    let first = send(with_n("1")).await;
    assert_first(&first, "n = 1");
    for spelling in ["1.0", "1e0", "1E0", "10e-1", "0.1e1"] {
        let r = send(with_n(spelling)).await;
        assert_replay_of(&r, &first, &format!("n = {spelling}"));
    }
    let reordered = "{ \"metadata\" : { \"n\" : 1 },\n\t\"subject\": \"+447700900123\",   \"type\":\"sim_swap\" }\n";
    let r = send(reordered.to_string()).await;
    assert_replay_of(&r, &first, "reordered members and whitespace");
    let escaped =
        r#"{"\u0074ype":"sim_swap","subject":"\u002B447700900123","metadata":{"\u006e":1}}"#;
    let r = send(escaped.to_string()).await;
    assert_replay_of(&r, &first, "escaped names and string");
    let r = send(with_n("1.5")).await;
    assert_problem(&r, 422, "key-reused", "n = 1.5");
    let r = send(with_n("\"1\"")).await;
    assert_problem(&r, 422, "key-reused", "n = \"1\"");
    // The refusals stored nothing over the key's answer.
    let r = send(with_n("1")).await;
    assert_replay_of(&r, &first, "n = 1 again");

    // 2^53 + 1 is no double: it reads as 2^53, the same payload. 2^53 + 2 is another double.
    let key = unique("jcs-big");
    let send = |body: String| client.signal(Req::new(&body).key(&key).beta());
    let big = send(with_n("9007199254740993")).await;
    assert_first(&big, "n = 2^53 + 1");
    let r = send(with_n("9007199254740992")).await;
    assert_replay_of(&r, &big, "n = 2^53");
    let r = send(with_n("9007199254740992.0")).await;
    assert_replay_of(&r, &big, "n = 2^53 as a decimal");
    let r = send(with_n("9007199254740994")).await;
    assert_problem(&r, 422, "key-reused", "n = 2^53 + 2");
}

#[tokio::test]
async fn a_member_named_twice_is_refused_and_stores_nothing() {
    let (_dir, receiver, _idem, client) = Harness::new().delivery(DELIVERY).start().await;
    let key = unique("dup");
    let duplicates = [
        (
            r#"{"type":"sim_swap","type":"port_out","subject":"x"}"#,
            "a top-level member twice",
        ),
        (
            r#"{"type":"sim_swap","subject":"x","metadata":{"a":1,"a":2}}"#,
            "a nested member twice",
        ),
        (
            r#"{"type":"sim_swap","subject":"x","metadata":{"a":1,"a":1}}"#,
            "a nested member twice with one value",
        ),
        (
            r#"{"type":"sim_swap","\u0074ype":"port_out","subject":"x"}"#,
            "a member twice, once escaped",
        ),
        (
            r#"{"type":"sim_swap","subject":"x","metadata":{"l":[{"b":1,"b":2}]}}"#,
            "a member twice inside an array",
        ),
    ];
    for (body, what) in duplicates {
        let r = client.signal(Req::new(body).key(&key).beta()).await;
        assert_problem(&r, 400, "invalid-signal", what);
    }
    // Nothing was stored under the key: a valid body makes a first processing.
    let body = r#"{"type":"sim_swap","subject":"x"}"#;
    let first = client.signal(Req::new(body).key(&key).beta()).await;
    assert_first(&first, "the key after the refusals");
    let again = client.signal(Req::new(body).key(&key).beta()).await;
    assert_replay_of(&again, &first, "its retry");
    let _ = receiver.wait_for(1).await;
    tokio::time::sleep(LATE).await;
    assert_eq!(paths(&receiver), ["/notify"], "no refusal ran an action");
}

#[tokio::test]
async fn two_authorization_headers_are_refused_before_authentication() {
    let (_dir, receiver, _idem, client) = Harness::new().delivery(DELIVERY).start().await;
    let key = unique("twoauth");
    let body = sim_swap("+447700900123");
    let valid = "Bearer sk_beta_test_key";
    let invalid = "Bearer sk_nope";
    for (a, b) in [
        (valid, valid),
        (valid, invalid),
        (invalid, valid),
        (invalid, invalid),
    ] {
        let r = client
            .signal(
                Req::new(&body)
                    .key(&key)
                    .header("authorization", a)
                    .header("authorization", b),
            )
            .await;
        assert_problem(
            &r,
            400,
            "repeated-header",
            &format!("Authorization: {a:?} and {b:?}"),
        );
    }
    // On a signed request too.
    let signed = Req::new(&body)
        .key(&key)
        .acme_signed(&key)
        .header("authorization", "Bearer sk_acme_test_key");
    let r = client.signal(signed).await;
    assert_problem(&r, 400, "repeated-header", "a signed request with two");

    assert!(receiver.seen().is_empty(), "no refusal ran an action");
    // Nothing was stored under the key: with one header, a first processing.
    let first = client.signal(Req::new(&body).key(&key).beta()).await;
    assert_first(&first, "the key after the refusals");
    let first = client
        .signal(Req::new(&body).key(&key).acme_signed(&key))
        .await;
    assert_first(&first, "acme's key after the refusal");
}
