//! The load benchmark: what exactly-once costs. Starts a real `idem serve` (release, durable) on
//! a temp data dir for each scenario, drives requests (keyed ones signed) over loopback from
//! closed-loop workers, and prints a table: requests/s, latency percentiles, statuses, the
//! server's peak RSS and data-dir bytes, and each scenario's ratio to `keyless` in the same run
//! (the storm's losers' p99 also as a ratio to idem's own 404 for the same bursts in the same
//! run, and `claim`, one durable write per new key, as a ratio to the `redis` anchor doing the
//! same job in the same run, as is `sled`, the store alone doing a claim's writes).
//!
//! `cargo run --release -p bench -- --scenario keyless,unique,replay,storm,pg,ceiling
//! --duration 10s --concurrency 32 [--runs N] [--rate R] [--json FILE] [--window-keys 1000000]
//! [--storm-keys 5] [--storm-copies 1000] [--idem PATH]` (`--rate` paces keyless/unique/replay/pg
//! and the window's fill at R requests/s instead of as fast as answered; `--runs` repeats the
//! scenario list N times and ends with the median of each figure, a ratio being the median of the
//! ratios within each run; `--help` describes every flag). Each scenario is a module of
//! `scenario/`.
//!
//! `--callgrind [--scenario keyless,unique,replay,storm] [--callgrind-requests 2000]` measures
//! instructions per request in the server instead, a figure that does not move with the
//! machine's speed: idem runs under `valgrind --tool=callgrind --callgrind-out-file=<tmp>/cg.out`;
//! per scenario, 300 warm-up requests, `callgrind_control -z <pid>`, 2,000 requests at
//! concurrency 4 (the storm: 20 keys x 200 copies, each key's copies sent at once on 200
//! keep-alive connections, 4,000 requests, winners included; replay: 1000 keys completed before
//! the warm-up), `callgrind_control -d <pid>`, and the `totals:` of the dump (`<out>.N`) over the
//! requests sent. Needs valgrind (`apt-get install valgrind`); the server runs tens of times
//! slower under it, so a scenario takes seconds to a minute.

mod args;
mod callgrind;
mod load;
mod raw;
mod report;
mod scenario;
mod server;
mod signals;

use std::path::Path;
use std::process::ExitCode;

use serde_json::json;

use crate::args::Args;
use crate::report::{print_header, Figures};

#[tokio::main]
async fn main() -> ExitCode {
    let args = match Args::try_parse_args(std::env::args_os()) {
        Ok(a) => a,
        // Help and usage errors alike, as clap prints them (exit status 0 for --help, 2 for an
        // error).
        Err(e) => e.exit(),
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
    if args.callgrind {
        // Before building anything: fail at once if valgrind is missing.
        callgrind::check_installed()?;
    }
    let binary = match &args.idem {
        Some(p) => p.clone(),
        None => devtools::build_idem(&[], "bench")?,
    };
    let receiver = server::fast_receiver().await.map_err(|e| e.to_string())?;
    if args.callgrind {
        return scenario::measure_instructions(&args, &binary, receiver).await;
    }
    load(&args, &binary, receiver).await
}

/// Runs the scenarios `--runs` times and prints (and writes) their figures.
async fn load(args: &Args, binary: &Path, receiver: std::net::SocketAddr) -> Result<(), String> {
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
        let rows = scenario::run_scenarios(args, binary, receiver, &mut extra).await?;
        let keyless = rows
            .iter()
            .find(|r| r.name == "keyless")
            .map(|r| r.stats.rate());
        let redis = rows
            .iter()
            .find(|r| r.name == "redis")
            .map(|r| r.stats.rate());
        let unique = rows
            .iter()
            .find(|r| r.name == "unique")
            .map(|r| r.stats.rate());
        let figures: Vec<Figures> = rows
            .iter()
            .map(|r| Figures::of(r, keyless).against_anchor(redis, unique))
            .collect();
        if args.runs > 1 {
            // Each run's notes (the storm's one-decision check among them) under its rows.
            figures.iter().for_each(Figures::print_note);
        }
        runs.push(figures);
    }
    // Every run has the same rows: one per scenario and store.
    let rows = runs.first().map_or(0, Vec::len);
    let summary: Vec<Figures> = (0..rows)
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
