//! Poll streams (RFC 8936), over loopback against a real idem on either store: a receiver
//! creates a poll stream, polls its SETs (verified with the test's own JOSE code), gets an
//! unacknowledged SET again with the same bytes, after a SIGKILL too, acknowledges it (then it
//! is delivered and never handed out again), reports one in `setErrs` (failed with its `err`),
//! waits in a long poll for a SET that comes meanwhile, is handed at most `maxEvents`, and on
//! disabling the stream finds its SETs dropped and only the stream-updated SET left.

use std::time::Duration;

use devtools::jose;
use serde_json::{json, Value};

use crate::support::*;
use crate::transmitter::{
    acme_delivery, call, set_delivery, sim_swap_signal, start, token, ENTRA_SECRET, OKTA_SECRET,
    POLL, PUBLIC_URL, REVOKED,
};

/// A poll stream of `token`'s receiver requesting session-revoked; its id.
async fn poll_stream(client: &Client, token: &str) -> String {
    let body = json!({"delivery": {"method": POLL}, "events_requested": [REVOKED]});
    let r = call(client, "POST", "streams", token, body).await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let made = r.json();
    let id = made["stream_id"].as_str().expect("id").to_string();
    assert_eq!(
        made["delivery"],
        json!({"method": POLL, "endpoint_url": format!("{PUBLIC_URL}/ssf/acme/streams/{id}/poll")})
    );
    id
}

/// Polls stream `id` with `body`: the answer's `sets` (jti → token) and `moreAvailable`.
async fn poll(
    client: &Client,
    token: &str,
    id: &str,
    body: Value,
) -> (Vec<(String, String)>, bool) {
    let r = call(client, "POST", &format!("streams/{id}/poll"), token, body).await;
    assert_eq!(r.status, 200, "{}", text(&r));
    let answer = r.json();
    let sets = answer["sets"]
        .as_object()
        .unwrap_or_else(|| panic!("no sets: {answer}"))
        .iter()
        .map(|(jti, token)| (jti.clone(), token.as_str().expect("a token").to_string()))
        .collect();
    (sets, answer["moreAvailable"] == true)
}

/// A token's verified claims, under the tenant's published keys.
async fn claims_of(client: &Client, token: &str) -> Value {
    let jwks = client
        .send("GET", "/ssf/acme/jwks", Req::new(""))
        .await
        .json();
    let (_, claims) =
        jose::verify(token, &jwks).unwrap_or_else(|e| panic!("the SET does not verify: {e}"));
    claims
}

const NOW: fn() -> Value = || json!({"returnImmediately": true});

#[tokio::test]
async fn a_polled_set_is_handed_out_until_acknowledged_then_never_again() {
    let (_dir, _receiver, idem, client) = start().await;
    let okta = token(&client, "acme", "okta", OKTA_SECRET).await;
    let id = poll_stream(&client, &okta).await;
    assert_eq!(poll(&client, &okta, &id, NOW()).await, (vec![], false));

    let r = sim_swap_signal(&client, "+15550004444", "polled-1").await;
    assert_eq!(r.status, 201, "{}", text(&r));
    assert_eq!(r.json()["actions"][1]["stream_id"], id.as_str());
    assert_eq!(r.json()["actions"][1]["status"], "queued");
    let jti = set_delivery(&r);
    let (sets, more) = poll(&client, &okta, &id, NOW()).await;
    assert_eq!(sets.len(), 1, "{sets:?}");
    assert!(!more);
    assert_eq!(sets[0].0, jti);
    let claims = claims_of(&client, &sets[0].1).await;
    assert_eq!(claims["jti"], jti.as_str());
    assert_eq!(claims["aud"], "https://okta.example.test");
    assert_eq!(
        claims["sub_id"],
        json!({"format": "phone_number", "phone_number": "+15550004444"})
    );
    // Not acknowledged: handed out again, the same bytes, after a SIGKILL too.
    assert_eq!(poll(&client, &okta, &id, NOW()).await.0, sets);
    let config_path = idem.kill();
    let idem = Idem::start_with(config_path, &[]);
    let client = Client::new(&idem.base);
    let okta = token(&client, "acme", "okta", OKTA_SECRET).await;
    assert_eq!(poll(&client, &okta, &id, NOW()).await.0, sets);
    let d = acme_delivery(&client, &jti).await;
    assert_eq!(d["status"], "queued", "{d}");

    // Another receiver cannot poll it, nor a push stream be polled.
    let entra = token(&client, "acme", "entra", ENTRA_SECRET).await;
    let r = call(
        &client,
        "POST",
        &format!("streams/{id}/poll"),
        &entra,
        NOW(),
    )
    .await;
    assert_problem(&r, 404, "not-found", "another receiver's stream");
    let r = call(
        &client,
        "POST",
        &format!("streams/{id}/poll"),
        &okta,
        json!({"ack": 7}),
    )
    .await;
    assert_problem(&r, 400, "invalid-stream", "ack not a list");

    // Acknowledged: delivered, erased, and never handed out again.
    let ack = json!({"ack": [jti], "returnImmediately": true});
    assert_eq!(poll(&client, &okta, &id, ack).await, (vec![], false));
    let d = acme_delivery(&client, &jti).await;
    assert_eq!(d["status"], "delivered", "{d}");
    assert_eq!(poll(&client, &okta, &id, NOW()).await, (vec![], false));
    let req = Req::new("").header("authorization", crate::transmitter::ACME_KEY);
    let path = format!("/v1/deliveries/{jti}/redeliver");
    let r = client.send("POST", &path, req).await;
    assert_problem(&r, 409, "not-redeliverable", "an acknowledged SET");
}

#[tokio::test]
async fn a_poll_reports_errors_waits_for_a_set_and_hands_out_at_most_max_events() {
    let (_dir, _receiver, _idem, client) = start().await;
    let okta = token(&client, "acme", "okta", OKTA_SECRET).await;
    let id = poll_stream(&client, &okta).await;

    // Reported in setErrs: failed with its err.
    let jti = set_delivery(&sim_swap_signal(&client, "+15550005555", "refused-poll").await);
    let errs = json!({"setErrs": {jti.clone(): {"err": "invalid_audience", "description": "not ours"}},
                      "returnImmediately": true});
    assert_eq!(poll(&client, &okta, &id, errs).await, (vec![], false));
    let d = acme_delivery(&client, &jti).await;
    assert_eq!(d["status"], "failed", "{d}");
    assert_eq!(d["attempts"][0]["error"], "invalid_audience: not ours");

    // A long poll answers as soon as a SET comes.
    let waiting = {
        let (client, okta, id) = (client.clone(), okta.clone(), id.clone());
        tokio::spawn(async move { poll(&client, &okta, &id, json!({})).await })
    };
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!waiting.is_finished(), "an empty long poll waits");
    let jti = set_delivery(&sim_swap_signal(&client, "+15550006666", "long-poll").await);
    let (sets, _) = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the long poll answers once the SET comes")
        .expect("the poll task");
    assert_eq!(sets.iter().map(|s| &s.0).collect::<Vec<_>>(), [&jti]);

    // Three waiting, one asked for: the oldest, and more available.
    let second = set_delivery(&sim_swap_signal(&client, "+15550006667", "more-1").await);
    set_delivery(&sim_swap_signal(&client, "+15550006668", "more-2").await);
    let one = json!({"maxEvents": 1, "returnImmediately": true});
    let (sets, more) = poll(&client, &okta, &id, one).await;
    assert_eq!(sets.iter().map(|s| &s.0).collect::<Vec<_>>(), [&jti]);
    assert!(more);
    let ack = json!({"ack": [jti], "maxEvents": 1, "returnImmediately": true});
    let (sets, more) = poll(&client, &okta, &id, ack).await;
    assert_eq!(sets.iter().map(|s| &s.0).collect::<Vec<_>>(), [&second]);
    assert!(more);
}

#[tokio::test]
async fn disabling_a_poll_stream_drops_its_waiting_sets_and_hands_out_nothing() {
    let (_dir, _receiver, _idem, client) = start().await;
    let okta = token(&client, "acme", "okta", OKTA_SECRET).await;
    let id = poll_stream(&client, &okta).await;
    let jti = set_delivery(&sim_swap_signal(&client, "+15550007878", "dropped-poll").await);
    let body = json!({"stream_id": id, "status": "disabled"});
    let r = call(&client, "POST", "streams/status", &okta, body).await;
    assert_eq!(r.status, 200, "{}", text(&r));
    let d = acme_delivery(&client, &jti).await;
    assert_eq!(d["status"], "dropped", "at once: {d}");
    // The change is answered, not announced: nothing is left to poll.
    let (sets, _) = poll(&client, &okta, &id, NOW()).await;
    assert!(sets.is_empty(), "{sets:?}");
}
