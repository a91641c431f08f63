//! `set`: `unique`'s signals, each under a new key, to a playbook whose one action is a Security
//! Event Token to one push stream in place of `unique`'s one callback: the SET signed (ES256,
//! the bench transmitter's key) and sealed on top of a new claim, then pushed to the bench's
//! receiver. Its ratio to `unique` in the same run is what a decision sent as a SET costs over
//! one sent as a callback.

use std::net::SocketAddr;

use serde_json::json;

use super::unique::request;
use super::{with_storage_written, ScenarioContext};
use crate::callgrind::{self, Counters, Measured};
use crate::report::ScenarioRow;
use crate::server::IdemUnderLoad;
use crate::signals::{SESSION_REVOKED, SET_RECEIVER, SET_RECEIVER_SECRET, SET_TYPE};

/// The bench receiver's push stream at `idem`, to `receiver`.
async fn subscribe(
    http: &reqwest::Client,
    idem: &IdemUnderLoad,
    receiver: SocketAddr,
) -> Result<(), String> {
    let token: serde_json::Value = http
        .post(format!("{}/ssf/acme/token", idem.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!(
            "grant_type=client_credentials&client_id={SET_RECEIVER}&client_secret={SET_RECEIVER_SECRET}"
        ))
        .send()
        .await
        .map_err(|e| format!("the token: {e}"))?
        .bytes()
        .await
        .map_err(|e| format!("the token: {e}"))
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| format!("the token: {e}")))?;
    let token = token["access_token"]
        .as_str()
        .ok_or_else(|| format!("no access token: {token}"))?;
    let made = http
        .post(format!("{}/ssf/acme/streams", idem.base))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(
            json!({
                "delivery": {"method": "urn:ietf:rfc:8935",
                             "endpoint_url": format!("http://{receiver}/ssf")},
                "events_requested": [SESSION_REVOKED],
            })
            .to_string(),
        )
        .send()
        .await
        .map_err(|e| format!("the stream: {e}"))?;
    match made.status().as_u16() {
        201 => Ok(()),
        status => Err(format!("the stream: {status}")),
    }
}

/// The scenario.
pub async fn run(ctx: &ScenarioContext<'_>) -> Result<ScenarioRow, String> {
    let idem = ctx.start_idem("24h")?;
    subscribe(&ctx.http, &idem, ctx.receiver).await?;
    let http = ctx.http.clone();
    let url = idem.signals_url();
    let run_id = idem_schemas::timefmt::now_ms();
    Ok(with_storage_written(ctx, &idem, "set", move |n| {
        request(http.clone(), url.clone(), SET_TYPE, run_id, n)
    })
    .await)
}

/// `--callgrind`: the same requests, every one under a new key.
pub async fn instructions(
    idem: &IdemUnderLoad,
    receiver: SocketAddr,
    http: reqwest::Client,
    counters: &Counters,
    requests: u64,
) -> Result<Measured, String> {
    subscribe(&http, idem, receiver).await?;
    let url = idem.signals_url();
    let run_id = idem_schemas::timefmt::now_ms();
    let stats = callgrind::after_warm_up(counters, requests, move |n| {
        request(http.clone(), url.clone(), SET_TYPE, run_id, n)
    })
    .await?;
    Ok(stats.into())
}
