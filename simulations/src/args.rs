//! The run's command line: the load (keys, keyless signals, source events, SETs, CloudEvents,
//! clients), the faults (how many, over how long, on how many nodes, on which store, and which
//! kinds beside SIGKILLs), the sabotage switch and the idem binary; refused with a message when
//! a combination cannot run (several nodes on sled, PostgreSQL's faults on sled, `--skew`
//! without `faketime`, disk faults on PostgreSQL).

use std::path::PathBuf;

use crate::process;

/// The run's parameters.
#[derive(Debug, Clone)]
pub struct RunArgs {
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

pub fn parse_args() -> Result<RunArgs, String> {
    let mut args = RunArgs {
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
