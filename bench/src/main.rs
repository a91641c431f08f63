//! The load benchmark: what exactly-once costs. Starts a real `idem serve` (release, durable) on
//! a temp data dir for each scenario, drives signed requests over loopback from closed-loop
//! workers, and prints a table: requests/s, latency percentiles, statuses, the server's peak RSS
//! and data-dir bytes, and each scenario's ratio to `keyless` in the same run.
//!
//! `cargo run --release -p bench -- --scenario keyless,unique,replay,storm,pg,ceiling
//! --duration 10s --concurrency 32 [--runs N] [--rate R] [--json FILE] [--window-keys 1000000]
//! [--idem PATH]` (`--rate` paces keyless/unique/replay/pg and the window's fill at R requests/s
//! instead of as fast as answered; `--runs` repeats the scenario list N times and ends with the
//! median of each figure, a ratio being the median of the ratios within each run).

mod load;
mod pg;
mod raw;
mod report;
mod server;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_schemas::signature::Secret;
use serde_json::json;

use crate::load::{drive, Stats};
use crate::report::{ms, print_header, Figures, Row};
use crate::server::Idem;

const SIGNING_SECRET: &str = "whsec_YmVuY2gtc2lnbmluZy1zZWNyZXQ=";
const CALLBACK_SECRET: &str = "whsec_YmVuY2gtY2FsbGJhY2stc2VjcmV0";

struct Args {
    scenarios: Vec<String>,
    duration: Duration,
    concurrency: usize,
    json: Option<PathBuf>,
    window_keys: u64,
    storm_keys: u64,
    storm_copies: usize,
    rate: Option<f64>,
    idem: Option<PathBuf>,
    runs: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        scenarios: vec![
            "keyless".into(),
            "unique".into(),
            "replay".into(),
            "storm".into(),
            "pg".into(),
            "ceiling".into(),
        ],
        duration: Duration::from_secs(10),
        concurrency: 32,
        json: None,
        window_keys: 1_000_000,
        storm_keys: 5,
        storm_copies: 1000,
        rate: None,
        idem: None,
        runs: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let number = |v: &str| {
            v.parse::<u64>()
                .map_err(|_| format!("{flag} takes a number"))
        };
        match flag.as_str() {
            "--scenario" => a.scenarios = value.split(',').map(str::to_string).collect(),
            "--duration" => {
                a.duration = parse_duration(&value).ok_or("--duration takes e.g. 10s or 500ms")?
            }
            "--concurrency" => a.concurrency = number(&value)?.max(1) as usize,
            "--json" => a.json = Some(PathBuf::from(value)),
            "--window-keys" => a.window_keys = number(&value)?.max(1),
            "--storm-keys" => a.storm_keys = number(&value)?.max(1),
            "--storm-copies" => a.storm_copies = number(&value)?.max(2) as usize,
            "--rate" => a.rate = Some(number(&value)?.max(1) as f64),
            "--idem" => a.idem = Some(PathBuf::from(value)),
            "--runs" => a.runs = number(&value)?.max(1) as usize,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let known = [
        "keyless", "unique", "replay", "storm", "window", "pg", "ceiling",
    ];
    if let Some(bad) = a.scenarios.iter().find(|s| !known.contains(&s.as_str())) {
        return Err(format!(
            "unknown scenario {bad}; known: {}",
            known.join(", ")
        ));
    }
    Ok(a)
}

fn parse_duration(s: &str) -> Option<Duration> {
    if let Some(ms) = s.strip_suffix("ms") {
        return ms.parse().ok().map(Duration::from_millis);
    }
    s.strip_suffix('s')?.parse().ok().map(Duration::from_secs)
}

/// A fresh idem on a temp dir, calling `receiver`; `key_ttl` for the window scenario.
fn start_idem(
    binary: &std::path::Path,
    dir: &std::path::Path,
    receiver: std::net::SocketAddr,
    key_ttl: &str,
) -> Result<Idem, String> {
    let data = dir.join("data");
    let config = format!(
        r#"
listen = "127.0.0.1:0"
data_dir = "{data}"
[idempotency]
key_secret = "bench-key-secret-0123456789abcdef"
key_ttl = "{key_ttl}"
sweep_interval = "1s"
[tenants.acme]
api_key = "sk_bench"
signing_secret = "{SIGNING_SECRET}"
callback_secret = "{CALLBACK_SECRET}"
[tenants.acme.playbooks.sim_swap]
decision = "deny"
actions = [ {{ name = "lock_account", url = "http://{receiver}/lock" }} ]
[tenants.acme.playbooks.noop]
decision = "allow"
actions = []
"#,
        data = data.display()
    );
    Idem::start(binary, dir, &data, &config).map_err(|e| e.to_string())
}

/// A signed signal `n` of `signal_type`: its body and headers.
fn signed(signal_type: &str, n: u64, key: Option<&str>) -> (String, Vec<(&'static str, String)>) {
    let body =
        format!(r#"{{"type":"{signal_type}","subject":"+4477009{n:08}","metadata":{{"n":{n}}}}}"#);
    let id = key.map_or_else(|| format!("evt-{n}"), str::to_string);
    let ts = idem_schemas::timefmt::now_ms() as i64 / 1000;
    let sig = Secret::parse(SIGNING_SECRET)
        .map(|s| s.sign(&id, ts, body.as_bytes()))
        .unwrap_or_default();
    let mut headers = vec![
        ("authorization", "Bearer sk_bench".to_string()),
        ("content-type", "application/json".to_string()),
        ("webhook-id", id),
        ("webhook-timestamp", ts.to_string()),
        ("webhook-signature", sig),
    ];
    if let Some(k) = key {
        headers.push(("idempotency-key", k.to_string()));
    }
    (body, headers)
}

/// Sends one signed signal; its status (0 when no answer).
async fn signal(
    http: &reqwest::Client,
    url: &str,
    signal_type: &str,
    n: u64,
    key: Option<&str>,
) -> (u16, bool) {
    let (body, headers) = signed(signal_type, n, key);
    let mut r = http.post(url).body(body);
    for (name, value) in headers {
        r = r.header(name, value);
    }
    match r.send().await {
        Ok(resp) => {
            let replayed = resp.headers().contains_key("idempotent-replayed");
            let status = resp.status().as_u16();
            let _ = resp.bytes().await;
            (status, replayed)
        }
        Err(_) => (0, false),
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(2048)
        .build()
        .unwrap_or_default()
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("bench: {e}");
            return ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    let binary = match &args.idem {
        Some(p) => p.clone(),
        None => devtools::build_idem(&[], "bench")?,
    };
    let receiver = server::fast_receiver().await.map_err(|e| e.to_string())?;
    let (c, d) = (args.concurrency, args.duration);
    println!(
        "idem bench: {} s per scenario, concurrency {c}, {} cores, {}",
        d.as_secs_f64(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(
                |s| s.lines().find(|l| l.starts_with("model name")).map(|l| l
                    .split(':')
                    .nth(1)
                    .unwrap_or("")
                    .trim()
                    .to_string())
            )
            .unwrap_or_default()
    );
    let mut runs: Vec<Vec<Figures>> = Vec::new();
    let mut extra = serde_json::Map::new();
    for run in 1..=args.runs {
        if args.runs > 1 {
            println!("run {run} of {}", args.runs);
        }
        let rows = run_scenarios(&args, &binary, receiver, &mut extra).await?;
        let keyless = rows
            .iter()
            .find(|r| r.name == "keyless")
            .map(|r| r.stats.rate());
        let figures: Vec<Figures> = rows.iter().map(|r| Figures::of(r, keyless)).collect();
        if args.runs > 1 {
            // Each run's notes (the storm's one-decision check among them) under its rows.
            figures.iter().for_each(Figures::print_note);
        }
        runs.push(figures);
    }
    let summary: Vec<Figures> = (0..args.scenarios.len())
        .map(|i| Figures::median(runs.iter().map(|run| &run[i])))
        .collect();
    println!();
    if args.runs > 1 {
        println!(
            "median of {} runs (a ratio is the median of each run's ratio; statuses are totals)",
            args.runs
        );
    }
    print_header();
    for figures in &summary {
        figures.print();
    }
    if args.runs == 1 {
        summary.iter().for_each(Figures::print_note);
    }
    if let Some(path) = &args.json {
        let doc = json!({
            "concurrency": c,
            "duration_s": d.as_secs_f64(),
            "runs": args.runs,
            "scenarios": summary.iter().map(Figures::json).collect::<Vec<_>>(),
            "each_run": runs.iter().map(|run| run.iter().map(Figures::json).collect::<Vec<_>>()).collect::<Vec<_>>(),
            "window": extra,
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc).unwrap_or_default())
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Runs each scenario of `args` once, in order, printing each row as it completes.
async fn run_scenarios(
    args: &Args,
    binary: &std::path::Path,
    receiver: SocketAddr,
    extra: &mut serde_json::Map<String, serde_json::Value>,
) -> Result<Vec<Row>, String> {
    let (c, d) = (args.concurrency, args.duration);
    let mut rows = Vec::new();
    for scenario in &args.scenarios {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let http = client();
        let row = match scenario.as_str() {
            "keyless" | "unique" => {
                let idem = start_idem(binary, dir.path(), receiver, "24h")?;
                let url = format!("{}/v1/signals", idem.base);
                let keyed = scenario == "unique";
                let run_id = idem_schemas::timefmt::now_ms();
                let written = idem.storage_bytes_written();
                let stats = drive(c, d, None, args.rate, move |n| {
                    let (http, url) = (http.clone(), url.clone());
                    async move {
                        let key = keyed.then(|| format!("u-{run_id}-{n}"));
                        signal(&http, &url, "sim_swap", n, key.as_deref()).await.0
                    }
                })
                .await;
                // What each request cost the disk: sled rewrites leaves and relocates pages, so
                // this is several times the records' own bytes, and it moves with the number of
                // entries a request writes more than with their size.
                let written = idem.storage_bytes_written().saturating_sub(written);
                Row {
                    name: scenario.clone(),
                    rss: idem.peak_rss(),
                    disk: idem.disk_bytes(),
                    note: format!(
                        "the server wrote {} bytes to storage per request",
                        written / stats.requests.max(1)
                    ),
                    stats,
                }
            }
            "replay" => {
                let idem = start_idem(binary, dir.path(), receiver, "24h")?;
                let url = format!("{}/v1/signals", idem.base);
                let keys = 1000u64;
                let (h, u) = (http.clone(), url.clone());
                drive(c, Duration::from_secs(600), Some(keys), None, move |n| {
                    let (http, url) = (h.clone(), u.clone());
                    async move {
                        signal(&http, &url, "sim_swap", n, Some(&format!("r-{n}")))
                            .await
                            .0
                    }
                })
                .await;
                let stats = drive(c, d, None, args.rate, move |n| {
                    let (http, url) = (http.clone(), url.clone());
                    async move {
                        let k = n % keys;
                        let (status, replayed) =
                            signal(&http, &url, "sim_swap", k, Some(&format!("r-{k}"))).await;
                        if replayed {
                            status
                        } else {
                            599
                        }
                    }
                })
                .await;
                Row {
                    name: "replay".into(),
                    rss: idem.peak_rss(),
                    disk: idem.disk_bytes(),
                    stats,
                    note: format!("{keys} completed keys, every answer a replay"),
                }
            }
            "storm" => {
                let idem = start_idem(binary, dir.path(), receiver, "24h")?;
                let (losers, firsts_ok) = storm(idem.addr, "/v1/signals", args).await?;
                // The same bursts against the trivial server: what 1000 simultaneous requests
                // cost the load generator and the loopback alone on these cores; and against a
                // path idem does not serve: its HTTP stack's own floor (hyper, the router, the
                // timing middleware, a 404), without the ingest handler or the claim.
                let (floor, _) = storm(receiver, "/ceiling", args).await?;
                let (http_floor, _) = storm(idem.addr, "/v1/nowhere", args).await?;
                Row {
                    name: "storm".into(),
                    rss: idem.peak_rss(),
                    disk: idem.disk_bytes(),
                    stats: losers,
                    note: format!(
                        "{} keys x {} copies; exactly one decision for {firsts_ok}/{} keys; latencies are the losers'; the same bursts against the trivial server: p50 {:.2} ms, p99 {:.2} ms; against idem's 404 (its HTTP floor): p50 {:.2} ms, p99 {:.2} ms",
                        args.storm_keys, args.storm_copies, args.storm_keys,
                        ms(floor.percentile(50.0)), ms(floor.percentile(99.0)),
                        ms(http_floor.percentile(50.0)), ms(http_floor.percentile(99.0)),
                    ),
                }
            }
            "window" => window(binary, dir.path(), receiver, args, &http, extra).await?,
            "pg" => {
                let stats = pg::run(c, d, args.rate).await?;
                Row {
                    name: "pg".into(),
                    rss: 0,
                    disk: 0,
                    stats,
                    note: "PostgreSQL: INSERT ON CONFLICT + 2 UPDATEs, synchronous_commit on"
                        .into(),
                }
            }
            "ceiling" => {
                let url = format!("http://{receiver}/ceiling");
                let stats = drive(c, d, None, None, move |n| {
                    let (http, url) = (http.clone(), url.clone());
                    async move { signal(&http, &url, "sim_swap", n, None).await.0 }
                })
                .await;
                Row {
                    name: "ceiling".into(),
                    rss: 0,
                    disk: 0,
                    stats,
                    note: "the load generator against a trivial in-process server".into(),
                }
            }
            _ => unreachable!("scenarios are validated"),
        };
        Figures::of(&row, None).print();
        rows.push(row);
    }
    Ok(rows)
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

/// `storm_keys` bursts of `storm_copies` simultaneous copies of one keyed signal to `path` on
/// `addr`, one connection per copy: the latencies of every answer but a key's first decision,
/// and how many keys got exactly one. One burst first opens the connections (a sender's pool is
/// warm in a real storm).
async fn storm(addr: SocketAddr, path: &str, args: &Args) -> Result<(Stats, u64), String> {
    let mut conns = raw::connect(addr, args.storm_copies)
        .await
        .map_err(|e| format!("storm: cannot connect {} times: {e}", args.storm_copies))?;
    burst(&mut conns, addr, path, 0).await;
    let mut losers = Stats::default();
    let mut firsts_ok = 0;
    let started = Instant::now();
    for k in 1..=args.storm_keys {
        let mut firsts = 0;
        for answer in burst(&mut conns, addr, path, k).await {
            if answer.status == 201 && !answer.replayed {
                firsts += 1;
            } else {
                losers.latencies.push(answer.latency);
                losers.requests += 1;
                *losers.statuses.entry(answer.status).or_default() += 1;
            }
        }
        if firsts == 1 {
            firsts_ok += 1;
        }
    }
    losers.elapsed = started.elapsed();
    losers.latencies.sort();
    Ok((losers, firsts_ok))
}

/// One copy of signal `k` under one new key on each connection, released at once. A
/// connection that fails is dropped (its answer counts with status 0).
async fn burst(
    conns: &mut Vec<tokio::net::TcpStream>,
    addr: SocketAddr,
    path: &str,
    k: u64,
) -> Vec<raw::Answer> {
    let key = format!("storm-{}-{k}", idem_schemas::timefmt::now_ms());
    let (body, headers) = signed("sim_swap", k, Some(&key));
    let request = Arc::new(raw::request(path, addr, &headers, &body));
    let barrier = Arc::new(tokio::sync::Barrier::new(conns.len()));
    let tasks: Vec<_> = conns
        .drain(..)
        .map(|mut stream| {
            let (request, barrier) = (request.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let answer = raw::exchange(&mut stream, &request).await;
                (stream, answer)
            })
        })
        .collect();
    let mut answers = Vec::with_capacity(tasks.len());
    for task in tasks {
        if let Ok((stream, answer)) = task.await {
            if answer.status != 0 {
                conns.push(stream);
            }
            answers.push(answer);
        }
    }
    answers
}

/// `window`: fill the key window, measure what it costs, then let it expire and sweep.
async fn window(
    binary: &std::path::Path,
    dir: &std::path::Path,
    receiver: std::net::SocketAddr,
    args: &Args,
    http: &reqwest::Client,
    extra: &mut serde_json::Map<String, serde_json::Value>,
) -> Result<Row, String> {
    let keys = args.window_keys;
    // Long enough to fill the window at a pessimistic 2,000 keys/s (or the pace asked for, if
    // slower), so no key expires early.
    let pace = args.rate.map_or(2000, |r| (r as u64).clamp(1, 2000));
    let ttl = Duration::from_secs((keys / pace).max(30) + 30);
    let idem = start_idem(binary, dir, receiver, &format!("{}s", ttl.as_secs()))?;
    let url = format!("{}/v1/signals", idem.base);
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
    Ok(Row {
        name: "window".into(),
        rss: idem.peak_rss(),
        disk: full_disk,
        stats: replay,
        note: format!("{keys} keys filled at {:.0}/s; latencies are replays with the window full; {} B/key; {} MB after sweep", fill.rate(), full_disk / keys, after >> 20),
    })
}
