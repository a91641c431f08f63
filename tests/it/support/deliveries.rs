//! A delivery as tenant beta sees it through the API (`GET /v1/deliveries/{id}`; beta's
//! playbooks are the ones the delivery tests use), and waiting for its status to become one.

use std::time::Duration;

use serde_json::Value;

use crate::support::asserts::text;
use crate::support::client::Client;
use crate::support::wait::eventually;

/// The delivery's view, asserting it is found.
pub async fn delivery(client: &Client, id: &str) -> Value {
    let r = client.beta_delivery(id).await;
    assert_eq!(r.status, 200, "{}", text(&r));
    r.json()
}

/// Polls the delivery until its status is `want` (or fails after 20 s); its view then.
pub async fn until_status(client: &Client, id: &str, want: &str) -> Value {
    let d = eventually(
        Duration::from_secs(20),
        || delivery(client, id),
        |d| d["status"] == want,
    )
    .await;
    assert_eq!(d["status"], want, "delivery {id} never became {want}: {d}");
    d
}

/// The delivery id of a decision's first action, from its answer.
pub fn first_delivery_id(r: &crate::support::client::Resp) -> String {
    r.json()["actions"][0]["delivery_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no delivery id: {}", text(r)))
        .to_string()
}
