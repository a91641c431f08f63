//! `ceiling`: the load generator against the trivial in-process server (the receiver, answering
//! everything at once): its own limit on these cores, with idem out of the picture.

use super::ScenarioContext;
use crate::load::drive;
use crate::report::ScenarioRow;
use crate::signals::signal;

/// The scenario.
pub async fn run(ctx: &ScenarioContext<'_>) -> Result<ScenarioRow, String> {
    let url = format!("http://{}/ceiling", ctx.receiver);
    let http = ctx.http.clone();
    let stats = drive(
        ctx.args.concurrency,
        ctx.args.duration,
        None,
        None,
        move |n| {
            let (http, url) = (http.clone(), url.clone());
            async move { signal(&http, &url, "sim_swap", n, None).await.0 }
        },
    )
    .await;
    Ok(ScenarioRow {
        name: "ceiling".into(),
        rss: 0,
        disk: 0,
        stats,
        note: "the load generator against a trivial in-process server".into(),
        floor_p99: None,
    })
}
