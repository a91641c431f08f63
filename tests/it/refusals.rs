//! Every refusal of POST /v1/signals, in the contract's order of checks, as problem details with
//! distinct types, and nothing stored for any of them: after each refusal the same key still
//! makes a first processing. Every answer is marked `nosniff` and, but for the console's files, `no-store`.

use crate::support::*;

#[tokio::test]
async fn refusals_come_in_order_with_distinct_types_and_store_nothing() {
    let (_dir, receiver, _idem, client) = Harness::new().start().await;
    let key = unique("order");
    let body = sim_swap("+447700900123");
    let mut types = Vec::new();
    let mut expect = |r: Resp, status: u16, kind: &str| {
        assert_eq!(
            r.status,
            status,
            "{kind}: {}",
            String::from_utf8_lossy(&r.body)
        );
        let t = r.problem_type();
        assert_eq!(t, format!("urn:idem:problem:{kind}"));
        types.push(t);
        r
    };

    // 1. Syntax comes before authentication: these carry no credentials at all.
    expect(
        client.signal(Req::new(&body).key("has space")).await,
        400,
        "invalid-idempotency-key",
    );
    expect(
        client.signal(Req::new(&body).key(&"k".repeat(256))).await,
        400,
        "invalid-idempotency-key",
    );
    expect(
        client
            .signal(Req::new(&body).key("a").key("b").beta())
            .await,
        400,
        "invalid-idempotency-key",
    );
    expect(
        client
            .signal(
                Req::new(&body)
                    .without("content-type")
                    .header("content-type", "text/plain")
                    .key(&key),
            )
            .await,
        415,
        "unsupported-media-type",
    );
    let big = format!(
        r#"{{"type":"sim_swap","subject":"x","metadata":{{"pad":"{}"}}}}"#,
        "x".repeat(70_000)
    );
    expect(
        client.signal(Req::new(&big).key(&key)).await,
        413,
        "payload-too-large",
    );
    expect(
        client.signal(Req::new("{\"type\":").key(&key)).await,
        400,
        "malformed-json",
    );
    expect(
        client.signal(Req::new("[1,2]").key(&key)).await,
        400,
        "invalid-signal",
    );
    let missing = expect(
        client
            .signal(Req::new(r#"{"type":"sim_swap"}"#).key(&key))
            .await,
        400,
        "invalid-signal",
    );
    assert!(missing.json()["detail"]
        .as_str()
        .unwrap_or("")
        .contains("subject"));
    expect(
        client
            .signal(Req::new(r#"{"type":"sim_swap","subject":"x","extra":1}"#).key(&key))
            .await,
        400,
        "invalid-signal",
    );
    expect(
        client
            .signal(
                Req::new(r#"{"type":"sim_swap","subject":"x","occurred_at":"yesterday"}"#)
                    .key(&key),
            )
            .await,
        400,
        "invalid-signal",
    );

    // 2. Authentication, then signature and timestamp.
    let r = expect(
        client.signal(Req::new(&body).key(&key)).await,
        401,
        "unauthorized",
    );
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    expect(
        client
            .signal(
                Req::new(&body)
                    .key(&key)
                    .header("authorization", "Bearer sk_nope"),
            )
            .await,
        401,
        "unauthorized",
    );
    expect(
        client
            .signal(
                Req::new(&body)
                    .key(&key)
                    .header("authorization", "Bearer sk_acme_test_key"),
            )
            .await,
        401,
        "signature-required",
    );
    let mut tampered = Req::new(&body).key(&key).acme_signed(&key);
    tampered.body = sim_swap("+447700900124").into_bytes();
    expect(client.signal(tampered).await, 401, "invalid-signature");
    let wrong_secret = Req::new(&body)
        .key(&key)
        .header("authorization", "Bearer sk_acme_test_key")
        .header("webhook-id", &key)
        .header(
            "webhook-timestamp",
            &(idem_schemas::timefmt::now_ms() / 1000).to_string(),
        )
        .header("webhook-signature", "v1,bm90IGEgc2lnbmF0dXJl");
    expect(client.signal(wrong_secret).await, 401, "invalid-signature");
    let an_hour_ago = idem_schemas::timefmt::now_ms() as i64 / 1000 - 3600;
    expect(
        client
            .signal(Req::new(&body).key(&key).acme_signed_at(&key, an_hour_ago))
            .await,
        401,
        "stale-timestamp",
    );
    let in_an_hour = an_hour_ago + 7200;
    expect(
        client
            .signal(Req::new(&body).key(&key).acme_signed_at(&key, in_an_hour))
            .await,
        401,
        "stale-timestamp",
    );
    expect(
        client
            .signal(Req::new(&body).key(&key).acme_signed("another-id"))
            .await,
        400,
        "webhook-id-mismatch",
    );

    // 3. The playbook.
    expect(
        client
            .signal(
                Req::new(r#"{"type":"unheard_of","subject":"x"}"#)
                    .key(&key)
                    .acme_signed(&key),
            )
            .await,
        400,
        "unknown-signal-type",
    );

    types.sort();
    types.dedup();
    assert_eq!(
        types.len(),
        11,
        "each kind of refusal has its own type: {types:?}"
    );
    assert!(receiver.seen().is_empty(), "no refusal ran an action");

    // Nothing above occupied the key: the same key now makes a first processing.
    let first = client
        .signal(Req::new(&body).key(&key).acme_signed(&key))
        .await;
    assert_eq!(first.status, 201);
    assert!(!first.replayed());
}

#[tokio::test]
async fn unknown_paths_and_methods_are_problems_and_health_is_ok() {
    let (_dir, _receiver, _idem, client) = Harness::new().start().await;
    let r = client.send("GET", "/nope", Req::new("")).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.problem_type(), "urn:idem:problem:not-found");
    let r = client.send("GET", "/v1/signals", Req::new("")).await;
    assert_eq!(r.status, 405);
    assert_eq!(r.problem_type(), "urn:idem:problem:method-not-allowed");
    let r = client.send("GET", "/healthz", Req::new("")).await;
    assert_eq!(r.status, 200);

    // No answer is sniffed or kept by a cache: problems, the console's 404s, the JSON API (a
    // first processing and a list); the console's own files revalidate instead.
    let first = client
        .signal(
            Req::new(&sim_swap("+447700900999"))
                .key(&unique("hdr"))
                .beta(),
        )
        .await;
    assert_first(&first, "a signal");
    let answers = [
        ("a signal's 201", first),
        ("a 404", client.send("GET", "/nope", Req::new("")).await),
        (
            "the console's 404",
            client.send("GET", "/console/nope.js", Req::new("")).await,
        ),
        (
            "a list",
            client
                .send("GET", "/v1/deliveries", Req::new("").beta())
                .await,
        ),
    ];
    for (what, r) in answers {
        assert_eq!(
            r.header("x-content-type-options"),
            Some("nosniff"),
            "{what}"
        );
        assert_eq!(r.header("cache-control"), Some("no-store"), "{what}");
    }
    let page = client.send("GET", "/console", Req::new("")).await;
    assert_eq!(page.status, 200);
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(page.header("cache-control"), Some("no-cache"));
}
