//! What a hostile receiver still gets from idem's Shared Signals transmitter, against a real
//! `idem serve` on either store: no more streams than its limit however many creates race, no
//! endless guessing of a client secret, no stream that pushes into idem's own network, and no
//! request body whose meaning hangs on which of two duplicated members wins.

use serde_json::json;

use crate::support::*;
use crate::transmitter::{call, start, token, OKTA_SECRET, POLL, REVOKED};

/// The ids of `okta`'s streams, as it lists them.
async fn stream_ids(client: &Client, okta: &str) -> Vec<String> {
    let r = call(client, "GET", "streams", okta, json!(null)).await;
    assert_eq!(r.status, 200, "{}", text(&r));
    let listed = r.json();
    let listed = listed.as_array().expect("a list");
    listed
        .iter()
        .map(|s| s["stream_id"].as_str().expect("id").to_string())
        .collect()
}

#[tokio::test]
async fn thirty_two_racing_creates_leave_sixteen_streams_across_a_restart() {
    let (_dir, _receiver, idem, client) = start().await;
    let okta = token(&client, "acme", "okta", OKTA_SECRET).await;
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(32));
    let creates: Vec<_> = (0..32)
        .map(|_| {
            let (client, okta, start) = (client.clone(), okta.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                call(
                    &client,
                    "POST",
                    "streams",
                    &okta,
                    json!({"delivery": {"method": POLL}, "events_requested": [REVOKED]}),
                )
                .await
            })
        })
        .collect();
    let mut made = Vec::new();
    for create in creates {
        let r = create.await.expect("the create runs");
        if r.status == 201 {
            made.push(r.json()["stream_id"].as_str().expect("id").to_string());
        } else {
            assert_problem(&r, 409, "too-many-streams", "a create past the limit");
        }
    }
    assert_eq!(made.len(), 16, "made: {made:?}");
    let mut listed = stream_ids(&client, &okta).await;
    listed.sort();
    made.sort();
    assert_eq!(listed, made, "exactly the streams answered 201 are there");

    let idem = Idem::start_with(idem.kill(), &[]);
    let client = Client::new(&idem.base);
    assert_eq!(
        stream_ids(&client, &okta).await.len(),
        16,
        "after a SIGKILL"
    );
    let poll = json!({"delivery": {"method": POLL}});
    let r = call(&client, "POST", "streams", &okta, poll).await;
    assert_problem(&r, 409, "too-many-streams", "the 17th after the restart");
}

/// `body`, as it is written, to `acme`'s stream management API with `token`.
async fn raw(client: &Client, method: &str, path: &str, token: &str, body: &str) -> Resp {
    let req = Req::new(body).header("authorization", &format!("Bearer {token}"));
    client.send(method, &format!("/ssf/acme/{path}"), req).await
}

#[tokio::test]
async fn a_member_sent_twice_is_refused_by_every_stream_call_and_changes_nothing() {
    let (_dir, _receiver, _idem, client) = start().await;
    let okta = token(&client, "acme", "okta", OKTA_SECRET).await;
    let poll = json!({"delivery": {"method": POLL}, "events_requested": [REVOKED]});
    let r = call(&client, "POST", "streams", &okta, poll).await;
    assert_eq!(r.status, 201, "{}", text(&r));
    let id = r.json()["stream_id"].as_str().expect("id").to_string();
    let before = call(
        &client,
        "GET",
        &format!("streams?stream_id={id}"),
        &okta,
        json!(null),
    )
    .await
    .json();
    let status = call(
        &client,
        "GET",
        &format!("streams/status?stream_id={id}"),
        &okta,
        json!(null),
    )
    .await
    .json();

    let cases = [
        (
            "POST",
            "streams",
            format!(r#"{{"delivery": {{"method": "{POLL}", "method": "urn:ietf:rfc:8935"}}}}"#),
            "delivery.method",
        ),
        (
            "PATCH",
            "streams",
            format!(r#"{{"stream_id": "{id}", "description": "a", "description": "b"}}"#),
            "description",
        ),
        (
            "PUT",
            "streams",
            format!(
                r#"{{"stream_id": "{id}", "stream_id": "st_other", "delivery": {{"method": "{POLL}"}}}}"#
            ),
            "stream_id",
        ),
        (
            "POST",
            "streams/status",
            format!(r#"{{"stream_id": "{id}", "status": "enabled", "status": "disabled"}}"#),
            "status",
        ),
        (
            "POST",
            "streams/subjects:remove",
            format!(
                r#"{{"stream_id": "{id}", "subject": {{"format": "email", "email": "a@example.com", "email": "b@example.com"}}}}"#
            ),
            "subject.email",
        ),
        (
            "POST",
            "streams/subjects:add",
            format!(r#"{{"stream_id": "{id}", "subject": "a", "subject": "b"}}"#),
            "subject",
        ),
        (
            "POST",
            "streams/verify",
            format!(r#"{{"stream_id": "{id}", "state": "a", "state": "b"}}"#),
            "state",
        ),
    ];
    for (method, path, body, member) in cases {
        let r = raw(&client, method, path, &okta, &body).await;
        let what = format!("{method} {path}");
        assert_problem(&r, 400, "invalid-stream", &what);
        let detail = r.json()["detail"].as_str().unwrap_or_default().to_string();
        assert!(
            detail.contains(&format!("{member} is sent twice")),
            "{what}: {detail}"
        );
    }
    let after = call(
        &client,
        "GET",
        &format!("streams?stream_id={id}"),
        &okta,
        json!(null),
    )
    .await
    .json();
    assert_eq!(before, after, "the stream is as it was");
    let now = call(
        &client,
        "GET",
        &format!("streams/status?stream_id={id}"),
        &okta,
        json!(null),
    )
    .await
    .json();
    assert_eq!(status, now, "its status too");
    assert_eq!(stream_ids(&client, &okta).await, vec![id], "no stream made");
    // The same calls, each member once, are taken.
    let r = raw(
        &client,
        "POST",
        "streams/verify",
        &okta,
        &format!(
            r#"{{"stream_id": "{}", "state": "a"}}"#,
            before["stream_id"].as_str().unwrap_or_default()
        ),
    )
    .await;
    assert_eq!(r.status, 204, "{}", text(&r));
}
