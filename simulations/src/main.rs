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
//! rotating its key mid-run: one decision per (iss, jti), every polled SET acknowledged. Another
//! transmitter (`subscription`) is one idem subscribes to by itself, with OAuth client
//! credentials: one stream made there across every node and restart, verified, and one
//! decision per (iss, jti) of the SETs it sends on it. A mobile operator (`cloudevents`) sends
//! `--cloudevents` CAMARA SIM swap events in every mode, re-sent: one decision per (source, id).
//! The tenant is a Shared Signals transmitter too (`streams`): each `sim_swap` decision also goes
//! as a SET to a push stream, a poll stream polled through every node, and a stream paused for a
//! while (a disabled one must get none): one `jti` and one body per (decision, stream), nothing
//! acknowledged handed out again, and what the pause held sent once it is enabled. Half way through, the tenant's `sim_swap` rule
//! changes its decision and every node is sent SIGHUP (`rules`): a key decided before the change
//! answers the stored decision ever after, one first sent after it gets the new rule's.

mod args;
mod chaos;
mod check;
mod clients;
mod cloudevents;
mod database;
mod nodes;
mod process;
mod proxy;
mod receiver;
mod report;
mod rng;
mod rules;
mod sources;
mod ssf;
mod stored;
mod streams;
mod subscription;

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idem_schemas::signature::Secret;

use crate::args::{parse_args, RunArgs};
use crate::chaos::{failpoints, Fault};
use crate::nodes::clock_offset;
use crate::rng::Rng;

/// The callback secret of the simulated tenant.
pub const CALLBACK_SECRET: &str = "whsec_c2ltdWxhdGlvbi1jYWxsYmFjay1zZWNyZXQ=";
/// The inbound signing secret of the simulated tenant.
pub const SIGNING_SECRET: &str = "whsec_c2ltdWxhdGlvbi1zaWduaW5nLXNlY3JldA==";
/// Attempts after the inline one (the steps of the config's `schedule`).
pub const MAX_RETRIES: usize = 3;

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

async fn run(args: RunArgs) -> Result<usize, String> {
    let binary = match &args.idem {
        Some(path) => path.clone(),
        None => devtools::build_idem(&["failpoints"], "failpoints")?,
    };
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let secret = Secret::parse(CALLBACK_SECRET).map_err(|e| e.to_string())?;
    let receiver = receiver::FaultyReceiver::start(args.seed, secret, Duration::from_millis(600))
        .await
        .map_err(|e| e.to_string())?;
    let recv = format!("http://{}", receiver.addr);
    let transmitter =
        devtools::transmitter::LoopbackTransmitter::try_start(serde_json::json!({"keys": []}))
            .await
            .map_err(|e| e.to_string())?;
    let subscribed = subscription::transmitter().await?;
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
        true => Some(Arc::new(Mutex::new(database::PostgresCluster::serving(
            5432,
        )?))),
        false => None,
    };
    let (bases, mut nodes, proxies) = nodes::configure(
        &args,
        dir.path(),
        &binary,
        &database,
        &recv,
        &transmitter.base,
        &subscription::config(&subscribed),
    )
    .await?;

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
    let configs = nodes.iter().map(|n| n.config().to_path_buf()).collect();
    let nodes = Arc::new(Mutex::new(nodes));
    let streams = streams::create(&bases[0], &recv, args.seed).await?;

    // Chaos: faults at random times on random nodes; restart whatever died, with new random
    // failpoints.
    let stop = Arc::new(AtomicBool::new(false));
    let injected = Arc::new(Mutex::new(Vec::new()));
    let failpoint_deaths = Arc::new(AtomicUsize::new(0));
    let chaos = chaos::Chaos {
        nodes: nodes.clone(),
        database: database.clone(),
        server: server.clone(),
        proxies: proxies.clone(),
        stop: stop.clone(),
        injected: injected.clone(),
        deaths: failpoint_deaths.clone(),
    }
    .spawn(&args);

    let plan = clients::plan(&args, &mut rng);
    // Think time between a client's jobs, so the load spans about `--seconds`.
    let think =
        Duration::from_millis(args.seconds * 1000 * args.clients as u64 / plan.len().max(1) as u64);
    let (events, batches) = sources::plan(args.seed, args.events, &mut rng);
    let source_think = Duration::from_millis(args.seconds * 1000 / batches.len().max(1) as u64);
    let sets = ssf::plan(args.seed, args.sets, &mut rng);
    let operator_events = cloudevents::plan(args.seed, args.cloudevents);
    let poller = streams::Poller::start(&streams, &bases, args.seed);
    let started = Instant::now();
    let (outcome, source, mut sets, operator, pause, change, on_stream) = tokio::join!(
        clients::run(&bases, plan, args.clients, args.seed, think),
        sources::run(&bases, events, batches, args.seed, source_think),
        ssf::run(&transmitter, &bases, sets, args.seed, args.seconds),
        cloudevents::run(&bases, operator_events, args.seed, args.seconds),
        streams::pause(&streams, &bases, args.seed, args.seconds),
        rules::change(
            nodes.clone(),
            configs,
            &bases,
            Duration::from_millis(args.seconds * 500)
        ),
        subscription::run(&subscribed, &bases, args.sets / 2, args.seed, args.seconds)
    );
    let (began, confirmed) = change?;

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
    subscription::settle(&subscribed, &on_stream, args.seed).await;
    let mut report = check::check(
        &bases[0],
        &outcome,
        &check::SenderOutcomes {
            okta: &source,
            ssf: &sets,
            cloudevents: &operator,
            subscribed: (&subscribed, &on_stream),
        },
        streams::Transmitted {
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
    let change = rules::Change {
        began,
        done: confirmed.await.ok().flatten(),
    };
    let counted = rules::check(&bases[0], &outcome, &change, &mut report).await;

    let nodes = nodes.lock().map_err(|_| "poisoned")?;
    let faults = receiver.faults.lock().map_err(|_| "poisoned")?.clone();
    let count = |f: receiver::CallbackFault| faults.iter().filter(|x| **x == f).count();
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
        count(receiver::CallbackFault::Busy),
        count(receiver::CallbackFault::Limited),
        count(receiver::CallbackFault::Hang),
        count(receiver::CallbackFault::Reset),
        count(receiver::CallbackFault::SlowBody)
    );
    println!(
        "rules: {} went from {} to {} at {} ms, on every node {} ms later; {} keys answered \
         before it replayed after it, {} decisions by the new rule",
        rules::RULE,
        rules::BEFORE,
        rules::AFTER,
        change.began.duration_since(started).as_millis(),
        change.done.map_or("never".into(), |d| d
            .duration_since(change.began)
            .as_millis()
            .to_string()),
        counted.replayed_after,
        counted.new_decisions
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
        "{}: {} stream made at the transmitter, {} SETs sent on it (half of them again), {} \
         changes through idem (paused, subject added and removed, enabled), {} verifications \
         asked, {} tokens given",
        subscription::SOURCE,
        subscribed.streams_made(),
        on_stream.sets.len(),
        on_stream.managed.len(),
        subscribed.verifications().len(),
        subscribed.tokens_given()
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
