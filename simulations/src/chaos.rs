//! The chaos of a run: faults at random times on random nodes (a SIGKILL, a stall past the
//! heartbeat and leases, every database connection killed, a failing disk, the database server
//! crashed and started again, a node's route to the database cut), one or two random failpoints
//! for every incarnation, and whatever died restarted with new ones, on a thread of its own
//! until the run stops it. It keeps the faults it injected and counts the incarnations it found
//! dead.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::args::RunArgs;
use crate::database::PostgresCluster;
use crate::process::IdemProcess;
use crate::proxy::Proxy;
use crate::rng::Rng;

const POINTS: [&str; 5] = [
    "claim.after_persist",
    "dispatch.before_recovery_point",
    "dispatch.after_recovery_point",
    "complete.before_persist",
    "delivery.after_attempt",
];

/// One or two random failpoints for an incarnation (plus the sabotage switch).
pub fn failpoints(rng: &mut Rng, sabotage: bool) -> String {
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
pub enum Fault {
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

/// What the chaos works on and reports to: the nodes (restarted as they die), the database, its
/// server and each node's route to it where the run has them, the switch that stops it, the
/// faults it injected and the incarnations it found dead.
pub struct Chaos {
    pub nodes: Arc<Mutex<Vec<IdemProcess>>>,
    pub database: Option<String>,
    pub server: Option<Arc<Mutex<PostgresCluster>>>,
    pub proxies: Vec<Arc<Proxy>>,
    pub stop: Arc<AtomicBool>,
    pub injected: Arc<Mutex<Vec<Fault>>>,
    pub deaths: Arc<AtomicUsize>,
}

impl Chaos {
    /// Injects `args.crashes` faults spread over the run, on a thread of its own, until stopped.
    pub fn spawn(self, args: &RunArgs) -> JoinHandle<()> {
        let Chaos {
            nodes,
            database,
            server,
            proxies,
            stop,
            injected,
            deaths,
        } = self;
        let (crashes, sabotage) = (args.crashes, args.sabotage);
        let disk_faults = args.disk_faults;
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
    }
}
