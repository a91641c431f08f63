//! `window`: `--window-keys` keys of a playbook without actions fill the key window (paced by
//! `--rate` if given); once the fill's claim actors have stopped, the server's RSS, disk per key
//! and replay latency with the window full; then, once every key has expired and been swept, the
//! data dir's size.

use std::time::{Duration, Instant};

use serde_json::json;

use super::ScenarioContext;
use crate::load::drive;
use crate::report::{ms, ScenarioRow};
use crate::signals::signal;

/// The scenario: fill the key window, measure what it costs, then let it expire and sweep.
pub async fn run(
    ctx: &ScenarioContext<'_>,
    extra: &mut serde_json::Map<String, serde_json::Value>,
) -> Result<ScenarioRow, String> {
    let (args, http) = (ctx.args, &ctx.http);
    let keys = args.window_keys;
    // Long enough to fill the window at a pessimistic 2,000 keys/s (or the pace asked for, if
    // slower), so no key expires early.
    let pace = args.rate.map_or(2000, |r| (r as u64).clamp(1, 2000));
    let ttl = Duration::from_secs((keys / pace).max(30) + 30);
    let idem = ctx.start_idem(&format!("{}s", ttl.as_secs()))?;
    let url = idem.signals_url();
    let started = Instant::now();
    let (h, u) = (http.clone(), url.clone());
    let fill = drive(
        args.concurrency,
        Duration::from_secs(24 * 3600),
        Some(keys),
        args.rate,
        move |n| {
            let (http, url) = (h.clone(), u.clone());
            async move {
                signal(&http, &url, "noop", n, Some(&format!("w-{n}")))
                    .await
                    .0
            }
        },
    )
    .await;
    // What holding the window costs: measured once the fill's claim actors have stopped on
    // their idle timers (the live-actor gauge at 0), so the figure is the million keys and not
    // the last idle timeout's worth of actors the fill left behind; the peak during the fill is
    // reported beside it.
    let settle = passivated(http, &idem.base, Duration::from_secs(30)).await;
    let rss_full = idem.rss();
    let full_disk = idem.disk_bytes();
    let (h, u) = (http.clone(), url.clone());
    let replay = drive(1, Duration::from_secs(60), Some(2000), None, move |n| {
        let (http, url) = (h.clone(), u.clone());
        let k = (n * 7919) % keys;
        async move {
            signal(&http, &url, "noop", k, Some(&format!("w-{k}")))
                .await
                .0
        }
    })
    .await;
    println!(
        "window: {keys} keys in {:.1} s ({:.0}/s); actors stopped {}; RSS {} MB (peak {} MB); {} bytes/key on disk; replay p50 {:.2} ms p99 {:.2} ms",
        fill.elapsed.as_secs_f64(),
        fill.rate(),
        settle.map_or("(not within 30 s)".to_string(), |d| format!("{:.1} s after the fill", d.as_secs_f64())),
        rss_full >> 20,
        idem.peak_rss() >> 20,
        full_disk / keys,
        ms(replay.percentile(50.0)),
        ms(replay.percentile(99.0)),
    );
    // Wait until every key has expired and a sweep has passed.
    let wait = (started + ttl + Duration::from_secs(5)).saturating_duration_since(Instant::now());
    println!(
        "window: waiting {:.0} s for the keys to expire and be swept",
        wait.as_secs_f64()
    );
    tokio::time::sleep(wait).await;
    let mut after = idem.disk_bytes();
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = idem.disk_bytes();
        if now >= after {
            break;
        }
        after = now;
    }
    println!(
        "window: data dir {} MB full, {} MB after the sweep",
        full_disk >> 20,
        after >> 20
    );
    extra.insert("keys".into(), json!(keys));
    extra.insert("fill_per_s".into(), json!(fill.rate()));
    extra.insert("rss_full_bytes".into(), json!(rss_full));
    extra.insert("peak_rss_bytes".into(), json!(idem.peak_rss()));
    extra.insert("disk_bytes_full".into(), json!(full_disk));
    extra.insert("disk_bytes_per_key".into(), json!(full_disk / keys));
    extra.insert("disk_bytes_after_sweep".into(), json!(after));
    extra.insert("replay_p50_ms".into(), json!(ms(replay.percentile(50.0))));
    extra.insert("replay_p99_ms".into(), json!(ms(replay.percentile(99.0))));
    Ok(ScenarioRow {
        name: "window".into(),
        rss: idem.peak_rss(),
        disk: full_disk,
        stats: replay,
        note: format!("{keys} keys filled at {:.0}/s; latencies are replays with the window full; {} B/key; {} MB after sweep", fill.rate(), full_disk / keys, after >> 20),
        floor_p99: None,
    })
}

/// Waits until idem at `base` reports no live claim actor (or `limit` passes); how long it took.
async fn passivated(http: &reqwest::Client, base: &str, limit: Duration) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < limit {
        let page = match http.get(format!("{base}/metrics")).send().await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        if devtools::metric_value(&page, r#"idem_live_actors{family="claim"}"#) == Some(0.0) {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}
