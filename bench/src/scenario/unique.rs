//! `unique`: signed `sim_swap` signals, each under a new idempotency key, as fast as answered (or
//! paced by `--rate`): claim, dispatch, complete (two group commits) on top of `keyless`' work.

use super::{with_storage_written, Context};
use crate::callgrind::{self, Counters, Measured};
use crate::report::Row;
use crate::server::Idem;
use crate::signals::signal;

/// The scenario.
pub async fn run(ctx: &Context<'_>) -> Result<Row, String> {
    let nodes = ctx.start_nodes("24h")?;
    let http = ctx.http.clone();
    let urls: Vec<String> = nodes.iter().map(Idem::signals_url).collect();
    let run_id = idem_schemas::timefmt::now_ms();
    Ok(with_storage_written(ctx, &nodes[0], "unique", move |n| {
        let url = urls[n as usize % urls.len()].clone();
        request(http.clone(), url, run_id, n)
    })
    .await)
}

/// `--callgrind`: the same requests, every one under a new key.
pub async fn instructions(
    idem: &Idem,
    http: reqwest::Client,
    counters: &Counters,
    requests: u64,
) -> Result<Measured, String> {
    let url = idem.signals_url();
    let run_id = idem_schemas::timefmt::now_ms();
    let stats = callgrind::after_warm_up(counters, requests, move |n| {
        request(http.clone(), url.clone(), run_id, n)
    })
    .await?;
    Ok(stats.into())
}

/// Signal `n` under its own key, `u-<run_id>-<n>`; its status.
async fn request(http: reqwest::Client, url: String, run_id: u64, n: u64) -> u16 {
    let key = format!("u-{run_id}-{n}");
    signal(&http, &url, "sim_swap", n, Some(&key)).await.0
}
