//! `unique`: signed `sim_swap` signals, each under a new idempotency key, as fast as answered (or
//! paced by `--rate`): claim, dispatch, complete (two group commits) on top of `keyless`' work.
//! `claim`: the same with a playbook without actions (`noop`), so a signal is one durable write,
//! its claim, recovery point and completion at once: the job the `redis` anchor does. `rules`:
//! `unique` with a playbook (`ruled`) of the same decision and action and three rules that
//! match none of its signals, one of them counting the subject's decisions: what evaluating
//! rules and reading a subject's history add to a decision.

use super::{with_storage_written, ScenarioContext};
use crate::args::Scenario;
use crate::callgrind::{self, Counters, Measured};
use crate::report::ScenarioRow;
use crate::server::IdemUnderLoad;
use crate::signals::signal;

/// The signal type `scenario` (`unique` or `claim`) sends.
fn signal_type(scenario: Scenario) -> &'static str {
    match scenario {
        Scenario::Claim => "noop",
        Scenario::Rules => "ruled",
        _ => "sim_swap",
    }
}

/// The scenario.
pub async fn run(ctx: &ScenarioContext<'_>, scenario: Scenario) -> Result<ScenarioRow, String> {
    let nodes = ctx.start_nodes("24h")?;
    let http = ctx.http.clone();
    let urls: Vec<String> = nodes.iter().map(IdemUnderLoad::signals_url).collect();
    let run_id = idem_schemas::timefmt::now_ms();
    let kind = signal_type(scenario);
    Ok(
        with_storage_written(ctx, &nodes[0], scenario.name(), move |n| {
            let url = urls[n as usize % urls.len()].clone();
            request(http.clone(), url, kind, run_id, n)
        })
        .await,
    )
}

/// `--callgrind`: the same requests, every one under a new key.
pub async fn instructions(
    scenario: Scenario,
    idem: &IdemUnderLoad,
    http: reqwest::Client,
    counters: &Counters,
    requests: u64,
) -> Result<Measured, String> {
    let url = idem.signals_url();
    let run_id = idem_schemas::timefmt::now_ms();
    let kind = signal_type(scenario);
    let stats = callgrind::after_warm_up(counters, requests, move |n| {
        request(http.clone(), url.clone(), kind, run_id, n)
    })
    .await?;
    Ok(stats.into())
}

/// Signal `n` of `kind` under its own key, `u-<run_id>-<n>`; its status.
pub(super) async fn request(
    http: reqwest::Client,
    url: String,
    kind: &str,
    run_id: u64,
    n: u64,
) -> u16 {
    let key = format!("u-{run_id}-{n}");
    signal(&http, &url, kind, n, Some(&key)).await.0
}
