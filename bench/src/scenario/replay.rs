//! `replay`: every request a completed key. 1000 keys are completed first (unmeasured), then
//! signals under them are sent round-robin, as fast as answered (or paced by `--rate`); an answer
//! that is not a replay counts as status 599.

use std::time::Duration;

use super::ScenarioContext;
use crate::callgrind::{self, Counters, Measured};
use crate::load::drive;
use crate::report::ScenarioRow;
use crate::server::IdemUnderLoad;
use crate::signals::signal;

/// The keys completed first and replayed.
const KEYS: u64 = 1000;

/// The scenario.
pub async fn run(ctx: &ScenarioContext<'_>) -> Result<ScenarioRow, String> {
    let nodes = ctx.start_nodes("24h")?;
    let idem = &nodes[0];
    complete_keys(idem, &ctx.http, ctx.args.concurrency).await;
    let http = ctx.http.clone();
    let urls: Vec<String> = nodes.iter().map(IdemUnderLoad::signals_url).collect();
    let stats = drive(
        ctx.args.concurrency,
        ctx.args.duration,
        None,
        ctx.args.rate,
        move |n| replay(http.clone(), urls[n as usize % urls.len()].clone(), n),
    )
    .await;
    Ok(ScenarioRow {
        name: "replay".into(),
        rss: idem.peak_rss(),
        disk: idem.disk_bytes(),
        stats,
        note: format!("{KEYS} completed keys, every answer a replay"),
        floor_p99: None,
    })
}

/// `--callgrind`: the keys completed before the warm-up, then the same replays.
pub async fn instructions(
    idem: &IdemUnderLoad,
    http: reqwest::Client,
    counters: &Counters,
    requests: u64,
) -> Result<Measured, String> {
    complete_keys(idem, &http, callgrind::CONCURRENCY).await;
    let url = idem.signals_url();
    let stats = callgrind::after_warm_up(counters, requests, move |n| {
        replay(http.clone(), url.clone(), n)
    })
    .await?;
    let mut measured = Measured::from(stats);
    measured.note = format!("{KEYS} completed keys, every answer a replay");
    Ok(measured)
}

/// Sends signal `k` under key `r-<k>` for each of the `KEYS` keys, completing them.
async fn complete_keys(idem: &IdemUnderLoad, http: &reqwest::Client, concurrency: usize) {
    let (http, url) = (http.clone(), idem.signals_url());
    drive(
        concurrency,
        Duration::from_secs(600),
        Some(KEYS),
        None,
        move |n| {
            let (http, url) = (http.clone(), url.clone());
            async move {
                signal(&http, &url, "sim_swap", n, Some(&format!("r-{n}")))
                    .await
                    .0
            }
        },
    )
    .await;
}

/// Signal `n % KEYS` again under its completed key: its status, or 599 if the answer was not a
/// replay.
async fn replay(http: reqwest::Client, url: String, n: u64) -> u16 {
    let k = n % KEYS;
    let (status, replayed) = signal(&http, &url, "sim_swap", k, Some(&format!("r-{k}"))).await;
    if replayed {
        status
    } else {
        599
    }
}
