//! The scenarios, one module each, and running a list of them: under load, each gets a fresh
//! temp dir (and, if it runs idem, a fresh idem on it) and a fresh HTTP client, and prints its
//! row as it ends; with `--callgrind`, each gets a fresh idem under valgrind and prints its
//! instructions per request.

mod ceiling;
mod keyless;
mod pg;
mod redis;
mod replay;
mod set;
mod sled;
mod ssf;

mod storm;
mod unique;
mod window;

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Instant;

use devtools::postgres::{drop_databases, fresh_database, LOCAL};
use serde_json::json;

use crate::args::{Args, Scenario};
use crate::callgrind::{self, Counters, Measured, CONCURRENCY, WARM_UP};
use crate::load::{drive, Stats};
use crate::report::{Figures, ScenarioRow};
use crate::server::{start_idem, IdemUnderLoad, StoreKind};
use crate::signals::client;

/// What a scenario runs with.
pub struct ScenarioContext<'a> {
    /// The command line.
    pub args: &'a Args,
    /// The idem binary.
    pub binary: &'a Path,
    /// The in-process receiver idem's callbacks go to (also the trivial server).
    pub receiver: SocketAddr,
    /// The scenario's own temp dir.
    pub dir: &'a Path,
    /// The scenario's own HTTP client.
    pub http: reqwest::Client,
    /// The `[store]` section of its idem's config (empty: sled).
    pub store: String,
    /// How many idem nodes share that store (1 on sled).
    pub nodes: usize,
}

impl ScenarioContext<'_> {
    /// A fresh idem on the scenario's dir, its keys kept for `key_ttl`.
    pub fn start_idem(&self, key_ttl: &str) -> Result<IdemUnderLoad, String> {
        start_idem(
            self.binary,
            self.dir,
            &self.store,
            (self.receiver, self.args.traces),
            key_ttl,
            &[],
        )
    }

    /// `send(n)` from the bench's closed-loop workers for the bench's duration (paced by
    /// `--rate` if given).
    pub async fn drive<F, Fut>(&self, send: F) -> Stats
    where
        F: Fn(u64) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = u16> + Send,
    {
        drive(
            self.args.concurrency,
            self.args.duration,
            None,
            self.args.rate,
            send,
        )
        .await
    }

    /// [`ScenarioContext::start_idem`] on each of the scenario's nodes (one config, one store).
    pub fn start_nodes(&self, key_ttl: &str) -> Result<Vec<IdemUnderLoad>, String> {
        (0..self.nodes)
            .map(|n| {
                let dir = self.dir.join(format!("node{n}"));
                std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
                let receiver = (self.receiver, self.args.traces);
                start_idem(self.binary, &dir, &self.store, receiver, key_ttl, &[])
            })
            .collect()
    }
}

/// Runs each scenario of `args` once, in order, printing each row as it completes; the window
/// scenario's own figures go into `extra`.
pub async fn run_scenarios(
    args: &Args,
    binary: &Path,
    receiver: SocketAddr,
    extra: &mut serde_json::Map<String, serde_json::Value>,
) -> Result<Vec<ScenarioRow>, String> {
    let mut rows = Vec::new();
    for scenario in args.scenarios() {
        // The baselines and the ceiling run no idem: once, whatever the stores.
        let stores = match scenario {
            Scenario::Pg | Scenario::Redis | Scenario::Sled | Scenario::Ceiling => {
                &[StoreKind::Sled][..]
            }
            _ => &args.stores[..],
        };
        for &store in stores {
            let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
            let section = match store {
                StoreKind::Sled => String::new(),
                StoreKind::Postgres => {
                    // `idem_bench_…`, those of earlier runs dropped first.
                    drop_databases(LOCAL, "idem_bench")?;
                    format!(
                        "[store]\nbackend = \"postgres\"\nurl = \"{}\"\n",
                        fresh_database(LOCAL, "idem_bench")?
                    )
                }
            };
            let nodes = match store {
                StoreKind::Sled => 1,
                StoreKind::Postgres => args.nodes,
            };
            let ctx = ScenarioContext {
                args,
                binary,
                receiver,
                dir: dir.path(),
                http: client(),
                store: section,
                nodes,
            };
            let mut row = match scenario {
                Scenario::Keyless => keyless::run(&ctx).await?,
                Scenario::Unique => unique::run(&ctx, Scenario::Unique).await?,
                Scenario::Claim => unique::run(&ctx, Scenario::Claim).await?,
                Scenario::Rules => unique::run(&ctx, Scenario::Rules).await?,
                Scenario::Replay => replay::run(&ctx).await?,
                Scenario::Ssf => ssf::run(&ctx).await?,
                Scenario::Set => set::run(&ctx).await?,
                Scenario::Storm => storm::run(&ctx).await?,
                Scenario::Window => window::run(&ctx, extra).await?,
                Scenario::Pg => pg::run(&ctx).await?,
                Scenario::Redis => redis::run(&ctx).await?,
                Scenario::Sled => sled::run(&ctx).await?,
                Scenario::Ceiling => ceiling::run(&ctx).await?,
            };
            let spread = matches!(
                scenario,
                Scenario::Unique
                    | Scenario::Claim
                    | Scenario::Rules
                    | Scenario::Replay
                    | Scenario::Storm
            );
            match store {
                StoreKind::Postgres if nodes > 1 && spread => {
                    row.name = format!("{} (postgres, {nodes} nodes)", row.name)
                }
                StoreKind::Postgres => row.name = format!("{} (postgres)", row.name),
                StoreKind::Sled => {}
            }
            Figures::of(&row, None).print();
            rows.push(row);
        }
    }
    Ok(rows)
}

/// `--callgrind`: sends `scenario`'s warm-up to `idem`, zeroes `counters`, sends its measured
/// requests (`requests` of them, but for the storm's fixed bursts).
pub async fn instructions(
    scenario: Scenario,
    idem: &IdemUnderLoad,
    receiver: SocketAddr,
    counters: &Counters,
    requests: u64,
) -> Result<Measured, String> {
    let http = client();
    match scenario {
        Scenario::Keyless => keyless::instructions(idem, http, counters, requests).await,
        Scenario::Unique | Scenario::Claim | Scenario::Rules => {
            unique::instructions(scenario, idem, http, counters, requests).await
        }
        Scenario::Replay => replay::instructions(idem, http, counters, requests).await,
        Scenario::Ssf => ssf::instructions(idem, http, counters, requests).await,
        Scenario::Set => set::instructions(idem, receiver, http, counters, requests).await,
        Scenario::Storm => storm::instructions(idem, counters).await,
        Scenario::Window | Scenario::Pg | Scenario::Redis | Scenario::Sled | Scenario::Ceiling => {
            Err(format!("--callgrind does not measure {}", scenario.name()))
        }
    }
}

/// `keyless` and `unique`: `send(n)` from the bench's closed-loop workers against `idem` for the
/// bench's duration (paced by `--rate` if given), and what the server wrote to storage per
/// request.
async fn with_storage_written<F, Fut>(
    ctx: &ScenarioContext<'_>,
    idem: &IdemUnderLoad,
    name: &str,
    send: F,
) -> ScenarioRow
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = u16> + Send,
{
    let written = idem.storage_bytes_written();
    let stats = ctx.drive(send).await;
    // What each request cost the disk: sled rewrites leaves and relocates pages, so this is
    // several times the records' own bytes, and it moves with the number of entries a request
    // writes more than with their size.
    let written = idem.storage_bytes_written().saturating_sub(written);
    ScenarioRow {
        name: name.into(),
        rss: idem.peak_rss(),
        disk: idem.disk_bytes(),
        note: format!(
            "the server wrote {} bytes to storage per request",
            written / stats.requests.max(1)
        ),
        stats,
        floor_p99: None,
    }
}

/// Measures each scenario of `args` (validated to be ones `--callgrind` measures; valgrind
/// checked by `check_installed`).
pub async fn measure_instructions(
    args: &Args,
    binary: &Path,
    receiver: SocketAddr,
) -> Result<(), String> {
    println!(
        "idem bench --callgrind: instructions per request in the server (valgrind callgrind), counted after {WARM_UP} warm-up requests, concurrency {CONCURRENCY}"
    );
    let mut figures = Vec::new();
    for scenario in args.scenarios() {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let (idem, counters) = callgrind::start(binary, dir.path(), (receiver, args.traces))?;
        let started = Instant::now();
        let measured = instructions(
            scenario,
            &idem,
            receiver,
            &counters,
            args.callgrind_requests,
        )
        .await?;
        let (instructions, files) = counters.dump().await?;
        if let Some(keep) = &args.callgrind_keep {
            callgrind::keep_dumps(&files, keep, scenario.name())?;
        }
        // SIGTERM and wait: the server writes its final profile, which nobody reads.
        drop(idem);
        let per_request = instructions as f64 / measured.requests.max(1) as f64;
        let statuses: Vec<String> = measured
            .statuses
            .iter()
            .map(|(k, v)| format!("{k}:{v}"))
            .collect();
        println!(
            "{:<8} {:>10} instructions per request ({} requests, {} instructions; statuses {}; {:.0} s under valgrind){}",
            scenario.name(),
            callgrind::thousands(per_request.round() as u64),
            measured.requests,
            callgrind::thousands(instructions),
            statuses.join(" "),
            started.elapsed().as_secs_f64(),
            if measured.note.is_empty() {
                String::new()
            } else {
                format!("; {}", measured.note)
            },
        );
        figures.push(json!({
            "name": scenario.name(),
            "requests": measured.requests,
            "instructions": instructions,
            "instructions_per_request": per_request,
            "statuses": measured.statuses.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
            "note": measured.note,
        }));
    }
    if let Some(path) = &args.json {
        let doc = json!({
            "callgrind": true,
            "warm_up_requests": WARM_UP,
            "concurrency": CONCURRENCY,
            "scenarios": figures,
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc).unwrap_or_default())
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}
