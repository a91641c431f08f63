//! Seeded chaos against the real system. Many clients send keyed signals (each key several
//! times, some all at once) and keyless ones to a real `idem serve` (a failpoints build) whose
//! callbacks go to a fault-injecting receiver, while the process is SIGKILLed at random times
//! and restarted with random failpoints (`return` crashes it at a recovery point, `panic` kills
//! the actor running that step). Then the checker verifies the exactly-once invariants:
//!
//! `cargo run --release -p simulations -- --seed N [--keys 60] [--keyless 10] [--events 30]
//! [--sets 16] [--cloudevents 16] [--clients 12]
//! [--crashes 4] [--seconds 8] [--nodes 1] [--store sled|postgres] [--disk-faults]
//! [--db-restarts] [--partitions] [--skew] [--sabotage]
//! [--idem PATH]`
//! spreads the load over about `--seconds`, injects `--crashes` faults within it, prints what it
//! injected and ends with `invariants: <checked> checked, <violated> violated`; it exits 0 only
//! with none violated. On sled a fault is a SIGKILL of the process. With `--store postgres`
//! (a fresh database on the local server) and `--nodes N`, every request goes to a node at
//! random, so each key's copies spread over them, and a fault is one of: a SIGKILL of a node, a
//! SIGSTOP of a node past its heartbeat and leases then SIGCONT (its late writes must change
//! nothing), or the database connections of every node killed (`pg_terminate_backend`); the
//! checker then also reads the database (`stored`): no write of a fenced-out holder is visible.
//! With `--db-restarts` (PostgreSQL), half the faults crash the database server itself
//! (`pg_ctlcluster … stop -m immediate`) and start it again a moment later: the nodes answer 503
//! meanwhile and go on by themselves; no node may exit by itself on PostgreSQL, and every
//! answered key's row must be in the database afterwards. With `--partitions` (PostgreSQL),
//! each node reaches the database through a fault proxy of the run's own (`proxy`), and half
//! the faults black-hole one node's route past its heartbeat and leases, then heal it: what it
//! sent meanwhile arrives late, and must be fenced. With `--skew` (PostgreSQL), every node but
//! the first runs under Debian's `faketime` with its clock one to five minutes ahead or behind
//! (alternately): no outcome may change. With `--disk-faults` (sled), half
//! the faults restart the node with a group commit whose sync fails after a few
//! (`store.sync`): the node must halt its store and exit by itself, and is started again.
//! `--sabotage` turns on idem's `sabotage` switch (every request gets a fresh claim actor that
//! ignores the stored claim, and the store's fencing is off): the checker must then find
//! violations. The receiver's faults open endpoints (`breaker_threshold = 2`, a short
//! cooldown): their deliveries wait and drain after a probe, and still every one must end
//! delivered or dead; a run in which no endpoint opened is a violation too. Beside the clients,
//! a provider (`sources`) delivers `--events` events to an Okta source in overlapping batches,
//! at least once: each mapped event must make exactly one decision, whatever was killed when.
//! A Shared Signals transmitter (`ssf`) sends `--sets` SETs, pushed, polled or both, re-sent,
//! rotating its key mid-run: one decision per (iss, jti), every polled SET acknowledged. A
//! mobile operator (`cloudevents`) sends `--cloudevents` CAMARA SIM swap events in every mode,
//! re-sent: one decision per (source, id). The tenant is a Shared Signals transmitter too
//! (`streams`): each `sim_swap` decision also goes as a SET to a push stream, a poll stream
//! polled through every node, and a stream paused for a while (a disabled one must get none):
//! one `jti` and one body per (decision, stream), nothing acknowledged handed out again, and
//! what the pause held sent once it is enabled.

mod check;
mod clients;
mod cloudevents;
mod database;
mod process;
mod proxy;
mod receiver;
mod report;
mod rng;
mod sources;
mod ssf;
mod stored;
mod streams;

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
/// Attempts after the inline one (the steps of the config's `schedule`).
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
    pub events: usize,
    pub sets: usize,
    pub cloudevents: usize,
    pub clients: usize,
    pub crashes: usize,
    pub seconds: u64,
    pub sabotage: bool,
    pub idem: Option<PathBuf>,
    pub nodes: usize,
    pub postgres: bool,
    pub disk_faults: bool,
    pub db_restarts: bool,
    pub partitions: bool,
    pub skew: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        seed: 1,
        keys: 60,
        keyless: 10,
        events: 30,
        sets: 16,
        cloudevents: 16,
        clients: 12,
        crashes: 4,
        seconds: 8,
        sabotage: false,
        idem: None,
        nodes: 1,
        postgres: false,
        disk_faults: false,
        db_restarts: false,
        partitions: false,
        skew: false,
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
            "--events" => args.events = number(value("--events")?, "--events")? as usize,
            "--sets" => args.sets = number(value("--sets")?, "--sets")? as usize,
            "--cloudevents" => {
                args.cloudevents = number(value("--cloudevents")?, "--cloudevents")? as usize
            }
            "--clients" => args.clients = number(value("--clients")?, "--clients")?.max(1) as usize,
            "--crashes" => args.crashes = number(value("--crashes")?, "--crashes")? as usize,
            "--seconds" => args.seconds = number(value("--seconds")?, "--seconds")?.max(1),
            "--sabotage" => args.sabotage = true,
            "--disk-faults" => args.disk_faults = true,
            "--db-restarts" => args.db_restarts = true,
            "--partitions" => args.partitions = true,
            "--skew" => args.skew = true,
            "--idem" => args.idem = Some(PathBuf::from(value("--idem")?)),
            "--nodes" => args.nodes = number(value("--nodes")?, "--nodes")?.max(1) as usize,
            "--store" => {
                args.postgres = match value("--store")?.as_str() {
                    "sled" => false,
                    "postgres" => true,
                    other => return Err(format!("--store {other}: use sled or postgres")),
                }
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if args.nodes > 1 && !args.postgres {
        return Err("--nodes above 1 needs --store postgres (sled is one process's)".into());
    }
    if (args.db_restarts || args.partitions || args.skew) && !args.postgres {
        return Err("--db-restarts, --partitions and --skew need --store postgres".into());
    }
    if args.skew && !std::path::Path::new(process::LIBFAKETIME).exists() {
        return Err(format!(
            "--skew needs {} (scripts/install-faketime installs it)",
            process::LIBFAKETIME
        ));
    }
    if args.disk_faults && args.postgres {
        return Err("--disk-faults is sled's (the database keeps its own disk)".into());
    }
    Ok(args)
}

/// The clock offset of node `n` (not the first) under `--skew`: one to five minutes, ahead for
/// odd nodes and behind for even ones, the same for a seed.
fn clock_offset(seed: u64, n: usize) -> String {
    let seconds = Rng::new(seed.wrapping_mul(31).wrapping_add(n as u64)).range(60, 301);
    match n % 2 {
        1 => format!("+{seconds}s"),
        _ => format!("-{seconds}s"),
    }
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

/// Kills every database connection of idem's nodes (not the caller's own).
async fn terminate_backends(url: &str) -> Result<u64, String> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    let rows = client
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
            &[],
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok(rows.len() as u64)
}

/// A fault the chaos injects.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    /// SIGKILL of a node, restarted at once with new failpoints.
    Kill,
    /// SIGSTOP of a node past its heartbeat and leases, then SIGCONT.
    Stall,
    /// Every node's database connections killed.
    Disconnect,
    /// A node restarted with a group commit whose sync fails after a few (`store.sync`), as a
    /// failing disk's would: the node must halt and exit by itself, and is restarted.
    Disk,
    /// The database server crashed (an immediate stop) and started again a moment later, while
    /// the nodes serve: they answer 503 meanwhile and go on by themselves, never exiting.
    DbRestart,
    /// A node's route to the database black-holed past its heartbeat and leases, then healed:
    /// the others take over, and what it sent meanwhile arrives late and must be fenced.
    Partition,
}

async fn run(args: Args) -> Result<usize, String> {
    let binary = match &args.idem {
        Some(path) => path.clone(),
        None => devtools::build_idem(&["failpoints"], "failpoints")?,
    };
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let secret = Secret::parse(CALLBACK_SECRET).map_err(|e| e.to_string())?;
    let receiver = receiver::Receiver::start(args.seed, secret, Duration::from_millis(600))
        .await
        .map_err(|e| e.to_string())?;
    let recv = format!("http://{}", receiver.addr);
    let transmitter =
        devtools::transmitter::Transmitter::try_start(serde_json::json!({"keys": []}))
            .await
            .map_err(|e| e.to_string())?;
    let database = match args.postgres {
        // `idem_sim_…`, which `scripts/test` drops.
        true => Some(devtools::postgres::fresh_database(
            devtools::postgres::LOCAL,
            &format!("idem_sim_{}", args.seed),
        )?),
        false => None,
    };
    // The database server itself, crashed and started again (`--db-restarts`).
    let server = match args.db_restarts {
        true => Some(Arc::new(Mutex::new(database::Server::serving(5432)?))),
        false => None,
    };
    let transmitter_config = streams::config(dir.path())?;
    let mut bases = Vec::new();
    let mut nodes = Vec::new();
    // Each node's own route to the database, which a partition cuts (`--partitions`).
    let mut proxies = Vec::new();
    // Under `--skew`, keys live a little longer than the run and its checks, and less than the
    // clocks are apart: a node that kept its own clock would find keys of another node expired
    // (or its own expired to the others) and decide them twice.
    let key_ttl = match args.skew {
        true => format!("key_ttl = \"{}s\"\n", 2 * args.seconds + 60),
        false => String::new(),
    };
    for n in 0..args.nodes {
        let url = match (&database, args.partitions) {
            (Some(url), true) => {
                let proxy = proxy::Proxy::start("127.0.0.1:5432".into())
                    .await
                    .map_err(|e| e.to_string())?;
                let routed = url.replace(":5432/", &format!(":{}/", proxy.port));
                proxies.push(Arc::new(proxy));
                Some(routed)
            }
            (url, _) => url.clone(),
        };
        let store = match &url {
            Some(url) => {
                format!("[store]\nbackend = \"postgres\"\nurl = \"{url}\"\npool_size = 4\n")
            }
            None => String::new(),
        };
        let port = devtools::free_port().map_err(|e| e.to_string())?;
        let node_dir = dir.path().join(format!("node{n}"));
        std::fs::create_dir_all(&node_dir).map_err(|e| e.to_string())?;
        let config = node_dir.join("idem.toml");
        std::fs::write(
            &config,
            format!(
                r#"
listen = "127.0.0.1:{port}"
public_url = "{public_url}"
data_dir = "{data}"
{store}
[idempotency]
key_secret = "simulation-key-secret-0123456789"
in_flight_timeout = "1s"
{key_ttl}idle_actor_timeout = "300ms"
[delivery]
inline_timeout = "300ms"
schedule = ["200ms", "200ms", "200ms"]
breaker_threshold = 2
breaker_cooldown = "300ms"
max_in_flight_per_endpoint = 4
max_hold = "5s"
[tenants.sim]
api_key = "sk_simulation_key"
signing_secret = "{SIGNING_SECRET}"
callback_secret = "{CALLBACK_SECRET}"
[tenants.sim.playbooks.sim_swap]
decision = "deny"
actions = [ {{ name = "lock_account", url = "{recv}/lock" }}, {{ name = "open_case", url = "{recv}/case" }}, {revoke} ]
[tenants.sim.playbooks.port_out]
decision = "review"
actions = [ {{ name = "notify", url = "{recv}/notify" }} ]
[tenants.sim.sources.okta_sim]
kind = "okta"
secret = "{okta}"
[[tenants.sim.sources.okta_sim.map]]
event = "user.mfa.*"
type = "port_out"
subject = "/target/0/alternateId"
[tenants.sim.sources.ssf_push]
kind = "ssf"
issuer = "{ssf_issuer}"
audience = "{ssf_audience}"
jwks = "{tx}/jwks"
jwks_refetch = "1s"
[[tenants.sim.sources.ssf_push.map]]
event = "{ssf_event}"
type = "port_out"
[tenants.sim.sources.ssf_poll]
kind = "ssf"
issuer = "{ssf_issuer}"
audience = "{ssf_audience}"
jwks = "{tx}/jwks"
jwks_refetch = "1s"
poll = {{ url = "{tx}/poll", token = "{poll_token}" }}
[[tenants.sim.sources.ssf_poll.map]]
event = "{ssf_event}"
type = "port_out"
[tenants.sim.sources.camara]
kind = "cloudevents"
secret = "{camara}"
[[tenants.sim.sources.camara.map]]
event = "{swapped}"
type = "sim_swap"
subject = "/data/phoneNumber"
{transmitter_config}"#,
                okta = sources::OKTA_AUTH,
                tx = transmitter.base,
                ssf_issuer = ssf::ISSUER,
                ssf_audience = ssf::AUDIENCE,
                ssf_event = ssf::EVENT,
                poll_token = ssf::POLL_TOKEN,
                camara = cloudevents::SECRET,
                swapped = cloudevents::SWAPPED,
                data = node_dir.join("data").display(),
                key_ttl = key_ttl,
                public_url = streams::PUBLIC_URL,
                revoke = streams::action(),
            ),
        )
        .map_err(|e| e.to_string())?;
        bases.push(format!("http://127.0.0.1:{port}"));
        let node = IdemProcess::new(&binary, &config, &node_dir);
        nodes.push(match args.skew && n > 0 {
            true => node.skewed(clock_offset(args.seed, n)),
            false => node,
        });
    }

    println!(
        "seed {}: {} keys, {} keyless signals, {} clients, {} {} over ~{} s{}{}",
        args.seed,
        args.keys,
        args.keyless,
        args.clients,
        args.crashes,
        if args.postgres || args.disk_faults {
            "faults"
        } else {
            "SIGKILLs"
        },
        args.seconds,
        match args.postgres {
            true => format!(", {} nodes on PostgreSQL", args.nodes),
            false => String::new(),
        },
        if args.sabotage {
            ", SABOTAGE: claims neither serialised nor fenced".to_string()
        } else if args.disk_faults {
            ", half of them disk faults".to_string()
        } else {
            let extras: Vec<&str> = [
                (args.db_restarts, "database crashes"),
                (args.partitions, "partitions"),
                (args.skew, "skewed clocks"),
            ]
            .into_iter()
            .filter_map(|(on, what)| on.then_some(what))
            .collect();
            match extras.is_empty() {
                true => String::new(),
                false => format!(", with {}", extras.join(", ")),
            }
        }
    );
    if args.skew {
        for n in 1..args.nodes {
            println!("  node {n}'s clock: {}", clock_offset(args.seed, n));
        }
    }
    let mut rng = Rng::new(args.seed);
    for node in &mut nodes {
        node.start(&failpoints(&mut rng, args.sabotage))
            .map_err(|e| e.to_string())?;
    }
    let nodes = Arc::new(Mutex::new(nodes));
    let streams = streams::create(&bases[0], &recv, args.seed).await?;

    // Chaos: faults at random times on random nodes; restart whatever died, with new random
    // failpoints.
    let stop = Arc::new(AtomicBool::new(false));
    let injected = Arc::new(Mutex::new(Vec::new()));
    let failpoint_deaths = Arc::new(AtomicUsize::new(0));
    let chaos = {
        let (nodes, stop, injected, deaths) = (
            nodes.clone(),
            stop.clone(),
            injected.clone(),
            failpoint_deaths.clone(),
        );
        let (crashes, sabotage, database) = (args.crashes, args.sabotage, database.clone());
        let disk_faults = args.disk_faults;
        let server = server.clone();
        let proxies = proxies.clone();
        let runtime = tokio::runtime::Handle::current();
        // Faults spread over the run: one per slot, at a random point of its slot.
        let slot = args.seconds * 1000 / (args.crashes as u64 + 1);
        let mut rng = Rng::new(args.seed.wrapping_mul(31).wrapping_add(7));
        std::thread::spawn(move || {
            let mut next_fault =
                Instant::now() + Duration::from_millis(rng.range(slot / 2, slot + 1));
            let done = |injected: &Mutex<Vec<Fault>>| injected.lock().map_or(0, |f| f.len());
            // Stalled nodes, and when each is to go on; when the crashed database starts again.
            let mut stalled: Vec<(usize, Instant)> = Vec::new();
            let mut db_back: Option<Instant> = None;
            let mut partitioned: Vec<(usize, Instant)> = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(20));
                if db_back.is_some_and(|at| Instant::now() >= at) {
                    if let Some(server) = &server {
                        if let Err(e) = server
                            .lock()
                            .map_err(|_| "poisoned".to_string())
                            .and_then(|mut s| s.start())
                        {
                            eprintln!("simulations: {e}");
                        }
                    }
                    db_back = None;
                }
                let Ok(mut nodes) = nodes.lock() else { return };
                let count = nodes.len();
                partitioned.retain(|&(n, until)| {
                    let due = Instant::now() >= until;
                    if due {
                        proxies[n].heal();
                    }
                    !due
                });
                stalled.retain(|&(n, until)| {
                    let due = Instant::now() >= until;
                    if due {
                        nodes[n].resume();
                    }
                    !due
                });
                // A node answers its start only once its store is open: one whose route is cut
                // would wait for a heal that only this thread makes, so its partition ends there.
                let mut heal = |n: usize| {
                    if let Some(at) = partitioned.iter().position(|&(p, _)| p == n) {
                        partitioned.swap_remove(at);
                        proxies[n].heal();
                    }
                };
                for (n, node) in nodes.iter_mut().enumerate() {
                    if !node.alive() {
                        heal(n);
                        deaths.fetch_add(1, Ordering::SeqCst);
                        // After a few, incarnations run clean so the run always makes progress.
                        let fps = if node.starts < 3 * crashes + 6 {
                            failpoints(&mut rng, sabotage)
                        } else {
                            String::new()
                        };
                        let _ = node.start(&fps);
                    }
                }
                if done(&injected) >= crashes || Instant::now() < next_fault {
                    continue;
                }
                let fault = match &database {
                    None if disk_faults && rng.chance(50) => Fault::Disk,
                    None => Fault::Kill,
                    Some(_) if server.is_some() && db_back.is_none() && rng.chance(50) => {
                        Fault::DbRestart
                    }
                    Some(_) if !proxies.is_empty() && rng.chance(50) => Fault::Partition,
                    Some(_) => {
                        [Fault::Kill, Fault::Stall, Fault::Disconnect][rng.range(0, 3) as usize]
                    }
                };
                let picked = rng.range(0, count as u64) as usize;
                let node = &mut nodes[picked];
                match (fault, &database) {
                    (Fault::Kill, _) => {
                        node.kill();
                        heal(picked);
                        let _ = node.start(&failpoints(&mut rng, sabotage));
                    }
                    (Fault::Stall, _) => {
                        // Past its heartbeat (a quarter of in_flight_timeout), its in-flight
                        // claims (in_flight_timeout) and its leases (two attempt deadlines and
                        // a second): others take over, and what it writes on waking is fenced.
                        node.pause();
                        stalled.push((picked, Instant::now() + Duration::from_millis(2_000)));
                    }
                    (Fault::Disk, _) => {
                        node.kill();
                        let fails_after = rng.range(0, 12);
                        let _ = node.start(&format!("store.sync={fails_after}*off->return"));
                    }
                    (Fault::Disconnect, Some(url)) => {
                        let _ = runtime.block_on(terminate_backends(url));
                    }
                    (Fault::Disconnect, None) => {}
                    (Fault::Partition, _) => {
                        // Past its heartbeat, its in-flight claims and its leases, as a stall,
                        // but the node runs on meanwhile and its writes wait in the network.
                        if let Some(proxy) = proxies.get(picked) {
                            proxy.cut();
                            partitioned
                                .push((picked, Instant::now() + Duration::from_millis(2_500)));
                        }
                    }
                    (Fault::DbRestart, _) => {
                        if let Some(server) = &server {
                            match server
                                .lock()
                                .map_err(|_| "poisoned".to_string())
                                .and_then(|mut s| s.crash())
                            {
                                Ok(()) => {
                                    let down = Duration::from_millis(rng.range(300, 1_500));
                                    db_back = Some(Instant::now() + down);
                                }
                                Err(e) => eprintln!("simulations: {e}"),
                            }
                        }
                    }
                }
                if let Ok(mut f) = injected.lock() {
                    f.push(fault);
                }
                next_fault =
                    Instant::now() + Duration::from_millis(rng.range(slot / 2, slot * 3 / 2 + 1));
            }
            if let Ok(mut nodes) = nodes.lock() {
                for (n, _) in stalled {
                    nodes[n].resume();
                }
            }
            for (n, _) in partitioned {
                proxies[n].heal();
            }
        })
    };

    let plan = clients::plan(&args, &mut rng);
    // Think time between a client's jobs, so the load spans about `--seconds`.
    let think =
        Duration::from_millis(args.seconds * 1000 * args.clients as u64 / plan.len().max(1) as u64);
    let (events, batches) = sources::plan(args.seed, args.events, &mut rng);
    let source_think = Duration::from_millis(args.seconds * 1000 / batches.len().max(1) as u64);
    let sets = ssf::plan(args.seed, args.sets, &mut rng);
    let operator_events = cloudevents::plan(args.seed, args.cloudevents);
    let poller = streams::Poller::start(&streams, &bases, args.seed);
    let (outcome, source, mut sets, operator, pause) = tokio::join!(
        clients::run(&bases, plan, args.clients, args.seed, think),
        sources::run(&bases, events, batches, args.seed, source_think),
        ssf::run(&transmitter, &bases, sets, args.seed, args.seconds),
        cloudevents::run(&bases, operator_events, args.seed, args.seconds),
        streams::pause(&streams, &bases, args.seed, args.seconds)
    );

    stop.store(true, Ordering::SeqCst);
    let _ = chaos.join();
    if let Some(server) = &server {
        server
            .lock()
            .map_err(|_| "poisoned")?
            .ensure_up()
            .map_err(|e| e.to_string())?;
    }
    // Settle: clean incarnations and a receiver without faults; deliveries run to their end.
    receiver.faulty.store(false, Ordering::SeqCst);
    {
        let mut nodes = nodes.lock().map_err(|_| "poisoned")?;
        for node in nodes.iter_mut() {
            node.kill();
            node.start("").map_err(|e| e.to_string())?;
        }
    }
    ssf::settle(&transmitter, &mut sets).await;
    let mut report = check::check(
        &bases[0],
        &outcome,
        &check::Sources {
            okta: &source,
            ssf: &sets,
            cloudevents: &operator,
        },
        streams::Run {
            streams,
            pause,
            poller,
        },
        &receiver,
    )
    .await;
    if let Some(url) = &database {
        stored::check(url, &outcome, &mut report).await;
    }

    let nodes = nodes.lock().map_err(|_| "poisoned")?;
    let faults = receiver.faults.lock().map_err(|_| "poisoned")?.clone();
    let count = |f: receiver::Fault| faults.iter().filter(|x| **x == f).count();
    let injected = injected.lock().map_err(|_| "poisoned")?.clone();
    let of = |f: Fault| injected.iter().filter(|x| **x == f).count();
    println!(
        "injected: {} SIGKILLs, {} stalls, {} disconnects, {} database crashes, {} partitions, \
         {} disk faults ({} store halts), {} deaths at failpoints, {} actor panics, {} \
         incarnations",
        of(Fault::Kill),
        of(Fault::Stall),
        of(Fault::Disconnect),
        of(Fault::DbRestart),
        of(Fault::Partition),
        of(Fault::Disk),
        nodes
            .iter()
            .map(|n| n.incarnations_logging("exiting so that a restart recovers"))
            .sum::<usize>(),
        failpoint_deaths.load(Ordering::SeqCst),
        nodes
            .iter()
            .map(|n| n.count_in_logs("actor failed"))
            .sum::<usize>(),
        nodes.iter().map(|n| n.starts).sum::<usize>()
    );
    let opened: usize = nodes
        .iter()
        .map(|n| n.count_in_logs("endpoint open, was"))
        .sum();
    println!("endpoints opened {opened} times (breaker_threshold 2)");
    // On PostgreSQL nothing makes a node exit by itself: a database that fails or restarts is
    // waited for (503 meanwhile), never a reason to stop.
    if args.postgres {
        // What stalled or cut-off nodes tried to write once they were fenced out, refused.
        let logged = |needle: &str| nodes.iter().map(|n| n.count_in_logs(needle)).sum::<usize>();
        println!(
            "fenced writes refused: {} of claims, {} of deliveries",
            logged("the claim was fenced out"),
            logged("the delivery was written by another holder")
        );
        let exits: usize = nodes.iter().map(|n| n.exits).sum();
        report.expect(exits == 0, || {
            format!("nodes exited by themselves {exits} times")
        });
    }
    // The flapping receiver must have put the breaker in play, or the run proved nothing of it.
    report.expect(opened > 0, || {
        "no endpoint ever opened: the breaker was not in play".to_string()
    });
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
    println!(
        "source: {} events in batches, {} deliveries, {} answered 200, {} errors",
        source.events.len(),
        source.requests,
        source.answered,
        source.errors
    );
    println!(
        "ssf: {} SETs ({} pushes, {} answered 202, {} errors), {} refused by polls, {} never acked",
        sets.sets.len(),
        sets.pushes,
        sets.accepted,
        sets.errors,
        sets.set_errs,
        sets.unacked.len()
    );
    println!(
        "cloudevents: {} events, {} requests, {} answered 200, {} errors",
        operator.events.len(),
        operator.requests,
        operator.answered,
        operator.errors
    );
    for v in report.violations.iter().take(20) {
        println!("VIOLATION {v}");
    }
    if !report.violations.is_empty() && !args.sabotage {
        // What a violation is traced with: each node's data directory and incarnations' logs.
        println!("kept for inspection: {}", dir.keep().display());
    }
    println!(
        "invariants: {} checked, {} violated",
        report.checked,
        report.violations.len()
    );
    Ok(report.violations.len())
}
