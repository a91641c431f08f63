//! `keyless`: `sim_swap` signals without an idempotency key, as fast as answered (or paced by
//! `--rate`), from a tenant that signs nothing (a signed request is claimed under its
//! `webhook-id`): the floor of HTTP, auth, playbook, one callback, its durable delivery log and
//! the decision kept for lookup (one group commit), which the other scenarios' rates are a ratio
//! to.

use super::{with_storage_written, ScenarioContext};
use crate::callgrind::{self, Counters, Measured};
use crate::report::ScenarioRow;
use crate::server::IdemUnderLoad;
use crate::signals::signal;

/// The scenario.
pub async fn run(ctx: &ScenarioContext<'_>) -> Result<ScenarioRow, String> {
    let idem = ctx.start_idem("24h")?;
    let (http, url) = (ctx.http.clone(), idem.signals_url());
    Ok(with_storage_written(ctx, &idem, "keyless", move |n| {
        request(http.clone(), url.clone(), n)
    })
    .await)
}

/// `--callgrind`: the same requests.
pub async fn instructions(
    idem: &IdemUnderLoad,
    http: reqwest::Client,
    counters: &Counters,
    requests: u64,
) -> Result<Measured, String> {
    let url = idem.signals_url();
    let stats = callgrind::after_warm_up(counters, requests, move |n| {
        request(http.clone(), url.clone(), n)
    })
    .await?;
    Ok(stats.into())
}

/// Signal `n`, without a key; its status.
async fn request(http: reqwest::Client, url: String, n: u64) -> u16 {
    signal(&http, &url, "sim_swap", n, None).await.0
}
