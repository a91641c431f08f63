//! Seeded chaos against the real system. Many clients send keyed signals (each key several
//! times, some all at once) and keyless ones to a real `idem serve` (a failpoints build) whose
//! callbacks go to a fault-injecting receiver, while the process is SIGKILLed at random times
//! and restarted with random failpoints (`return` crashes it at a recovery point, `panic` kills
//! the actor running that step). Then the checker verifies the exactly-once invariants:
//!
//! `cargo run --release -p simulations -- --seed N [--keys 60] [--keyless 10] [--clients 12]
//! [--crashes 4] [--seconds 8] [--sabotage] [--idem PATH]` spreads the load over about
//! `--seconds`, SIGKILLs the process `--crashes` times within it, prints what it injected and ends with
//! `invariants: <checked> checked, <violated> violated`; it exits 0 only with none violated.
//! `--sabotage` turns on idem's `sabotage` switch (every request gets a fresh claim actor that
//! ignores the claim on disk: no serialisation, no durable claim): the checker must then find
//! violations.

mod check;
mod clients;
mod process;
mod receiver;
mod rng;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idem_schemas::signature::Secret;

use crate::process::IdemProcess;
use crate::rng::Rng;

/// The callback secret of the simulated tenant.
pub const CALLBACK_SECRET: &str = "whsec_c2ltdWxhdGlvbi1jYWxsYmFjay1zZWNyZXQ=";
/// The inbound signing secret of the simulated tenant.
pub const SIGNING_SECRET: &str = "whsec_c2ltdWxhdGlvbi1zaWduaW5nLXNlY3JldA==";
/// Attempts after the inline one (the config's `max_retries`).
pub const MAX_RETRIES: usize = 3;

const POINTS: [&str; 5] = [
    "claim.after_persist",
    "dispatch.before_recovery_point",
    "dispatch.after_recovery_point",
    "complete.before_persist",
    "delivery.after_attempt",
];

/// The run's parameters.
#[derive(Debug, Clone)]
pub struct Args {
    pub seed: u64,
    pub keys: usize,
    pub keyless: usize,
    pub clients: usize,
    pub crashes: usize,
    pub seconds: u64,
    pub sabotage: bool,
    pub idem: Option<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        seed: 1,
        keys: 60,
        keyless: 10,
        clients: 12,
        crashes: 4,
        seconds: 8,
        sabotage: false,
        idem: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        let number = |v: String, name: &str| {
            v.parse::<u64>()
                .map_err(|_| format!("{name} takes a number"))
        };
        match flag.as_str() {
            "--seed" => args.seed = number(value("--seed")?, "--seed")?,
            "--keys" => args.keys = number(value("--keys")?, "--keys")? as usize,
            "--keyless" => args.keyless = number(value("--keyless")?, "--keyless")? as usize,
            "--clients" => args.clients = number(value("--clients")?, "--clients")?.max(1) as usize,
            "--crashes" => args.crashes = number(value("--crashes")?, "--crashes")? as usize,
            "--seconds" => args.seconds = number(value("--seconds")?, "--seconds")?.max(1),
            "--sabotage" => args.sabotage = true,
            "--idem" => args.idem = Some(PathBuf::from(value("--idem")?)),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(args)
}

/// One or two random failpoints for an incarnation (plus the sabotage switch).
fn failpoints(rng: &mut Rng, sabotage: bool) -> String {
    let mut points = Vec::new();
    for _ in 0..rng.range(1, 3) {
        let point = POINTS[rng.range(0, POINTS.len() as u64) as usize];
        let action = if rng.chance(50) {
            format!("{}%return", rng.range(5, 20))
        } else {
            format!("{}%panic", rng.range(10, 30))
        };
        if !points.iter().any(|p: &String| p.starts_with(point)) {
            points.push(format!("{point}={action}"));
        }
    }
    if sabotage {
        points.push("sabotage=return".into());
    }
    points.join(";")
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("simulations: {e}");
            return ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(0) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("simulations: {e}");
            ExitCode::from(2)
        }
    }
}

async fn run(args: Args) -> Result<usize, String> {
    let binary = match &args.idem {
        Some(path) => path.clone(),
        None => devtools::build_idem(&["failpoints"], "failpoints")?,
    };
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let port = free_port().map_err(|e| e.to_string())?;
    let secret = Secret::parse(CALLBACK_SECRET).map_err(|e| e.to_string())?;
    let receiver = receiver::Receiver::start(args.seed, secret, Duration::from_millis(600))
        .await
        .map_err(|e| e.to_string())?;
    let config = dir.path().join("idem.toml");
    let recv = format!("http://{}", receiver.addr);
    std::fs::write(
        &config,
        format!(
            r#"
listen = "127.0.0.1:{port}"
data_dir = "{data}"
[idempotency]
key_secret = "simulation-key-secret-0123456789"
in_flight_timeout = "1s"
idle_actor_timeout = "300ms"
[delivery]
inline_timeout = "300ms"
retry_interval = "200ms"
max_retries = {MAX_RETRIES}
[tenants.sim]
api_key = "sk_sim"
signing_secret = "{SIGNING_SECRET}"
callback_secret = "{CALLBACK_SECRET}"
[tenants.sim.playbooks.sim_swap]
decision = "deny"
actions = [ {{ name = "lock_account", url = "{recv}/lock" }}, {{ name = "open_case", url = "{recv}/case" }} ]
[tenants.sim.playbooks.port_out]
decision = "review"
actions = [ {{ name = "notify", url = "{recv}/notify" }} ]
"#,
            data = dir.path().join("data").display(),
        ),
    )
    .map_err(|e| e.to_string())?;

    println!(
        "seed {}: {} keys, {} keyless signals, {} clients, {} SIGKILLs over ~{} s{}",
        args.seed,
        args.keys,
        args.keyless,
        args.clients,
        args.crashes,
        args.seconds,
        if args.sabotage {
            ", SABOTAGE: claims neither serialised nor durable"
        } else {
            ""
        }
    );
    let mut rng = Rng::new(args.seed);
    let process = Arc::new(Mutex::new(IdemProcess::new(&binary, &config, dir.path())));
    process
        .lock()
        .map_err(|_| "poisoned")?
        .start(&failpoints(&mut rng, args.sabotage))
        .map_err(|e| e.to_string())?;

    // Chaos: SIGKILL at random times; restart whatever died, with new random failpoints.
    let stop = Arc::new(AtomicBool::new(false));
    let kills = Arc::new(AtomicUsize::new(0));
    let failpoint_deaths = Arc::new(AtomicUsize::new(0));
    let chaos = {
        let (process, stop, kills, deaths) = (
            process.clone(),
            stop.clone(),
            kills.clone(),
            failpoint_deaths.clone(),
        );
        let (crashes, sabotage) = (args.crashes, args.sabotage);
        // Kills spread over the run: one per slot, at a random point of its slot.
        let slot = args.seconds * 1000 / (args.crashes as u64 + 1);
        let mut rng = Rng::new(args.seed.wrapping_mul(31).wrapping_add(7));
        std::thread::spawn(move || {
            let mut next_kill =
                Instant::now() + Duration::from_millis(rng.range(slot / 2, slot + 1));
            while !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(20));
                let Ok(mut p) = process.lock() else { return };
                if !p.alive() {
                    deaths.fetch_add(1, Ordering::SeqCst);
                    // After a few, incarnations run clean so the run always makes progress.
                    let fps = if p.starts < 3 * crashes + 6 {
                        failpoints(&mut rng, sabotage)
                    } else {
                        String::new()
                    };
                    let _ = p.start(&fps);
                } else if kills.load(Ordering::SeqCst) < crashes && Instant::now() >= next_kill {
                    p.kill();
                    kills.fetch_add(1, Ordering::SeqCst);
                    let _ = p.start(&failpoints(&mut rng, sabotage));
                    next_kill = Instant::now()
                        + Duration::from_millis(rng.range(slot / 2, slot * 3 / 2 + 1));
                }
            }
        })
    };

    let base = format!("http://127.0.0.1:{port}");
    let plan = clients::plan(&args, &mut rng);
    // Think time between a client's jobs, so the load spans about `--seconds`.
    let think =
        Duration::from_millis(args.seconds * 1000 * args.clients as u64 / plan.len().max(1) as u64);
    let outcome = clients::run(&base, plan, args.clients, args.seed, think).await;

    stop.store(true, Ordering::SeqCst);
    let _ = chaos.join();
    // Settle: a clean incarnation and a receiver without faults; deliveries run to their end.
    receiver.faulty.store(false, Ordering::SeqCst);
    {
        let mut p = process.lock().map_err(|_| "poisoned")?;
        p.kill();
        p.start("").map_err(|e| e.to_string())?;
    }
    let report = check::check(&base, &outcome, &receiver).await;

    let p = process.lock().map_err(|_| "poisoned")?;
    let faults = receiver.faults.lock().map_err(|_| "poisoned")?.clone();
    let count = |f: receiver::Fault| faults.iter().filter(|x| **x == f).count();
    println!(
        "injected: {} SIGKILLs, {} deaths at failpoints, {} actor panics, {} incarnations",
        kills.load(Ordering::SeqCst),
        failpoint_deaths.load(Ordering::SeqCst),
        p.count_in_logs("actor failed"),
        p.starts
    );
    println!(
        "receiver: {} callbacks; faults: {} 503, {} 429, {} hangs, {} resets, {} slow bodies",
        faults.len(),
        count(receiver::Fault::Busy),
        count(receiver::Fault::Limited),
        count(receiver::Fault::Hang),
        count(receiver::Fault::Reset),
        count(receiver::Fault::SlowBody)
    );
    println!(
        "clients: {} requests, {} first processings, {} replays, {} 409s, {} errors",
        outcome.requests, outcome.firsts, outcome.replays, outcome.conflicts, outcome.errors
    );
    for v in report.violations.iter().take(20) {
        println!("VIOLATION {v}");
    }
    println!(
        "invariants: {} checked, {} violated",
        report.checked,
        report.violations.len()
    );
    Ok(report.violations.len())
}
