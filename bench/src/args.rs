//! The bench's command line (clap): which scenarios, for how long, at what concurrency and
//! pace, how many times, and the `--callgrind` mode.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::RangedU64ValueParser;
use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};

use crate::server::StoreKind;

/// A scenario (`--scenario`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// No key: the floor of HTTP, auth, signature, playbook, one callback, its durable
    /// delivery log (one group commit)
    Keyless,
    /// Every request a new key: claim, dispatch, complete (two group commits)
    Unique,
    /// Every request a new key of a playbook without actions: claim, recovery point and
    /// completion in one durable write (the job `redis` does)
    Claim,
    /// Every request a new key of a playbook with three rules (one counting the subject's
    /// decisions) that match none of them: `unique` with its rules evaluated and the subject's
    /// history read; its ratio to `unique`'s in the same run
    Rules,
    /// Every request a completed key (1000 keys)
    Replay,
    /// Every request a new key of a playbook whose one action is a Security Event Token (ES256)
    /// to one push stream: `unique` with a SET in place of its callback; its ratio to `unique`'s
    /// in the same run
    Set,
    /// Every request a new Security Event Token (pre-signed RS256) pushed to an `ssf` source:
    /// signature verification on top of a new claim; its ratio to `unique`'s in the same run
    Ssf,
    /// --storm-keys keys x --storm-copies simultaneous copies, after one unmeasured burst;
    /// latencies are the losers'; the same bursts then go to the trivial server and to idem's
    /// 404 (the floors)
    Storm,
    /// --window-keys keys of a playbook without actions: RSS, disk per key and replay latency
    /// with the window full, then the size after expiry
    Window,
    /// The seed design's three durable writes on the local PostgreSQL (the baseline)
    Pg,
    /// `SET key v NX` on a throw-away redis-server with appendonly and appendfsync always,
    /// from as many connections (the anchor of `claim`)
    Redis,
    /// A `claim`'s four sled entries straight into sled, durable by a group commit, from as many
    /// workers: the store's own ceiling for `claim`
    Sled,
    /// The load generator against a trivial in-process server: its own limit
    Ceiling,
}

impl Scenario {
    /// Its name, as on the command line and in the report.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Keyless => "keyless",
            Scenario::Unique => "unique",
            Scenario::Claim => "claim",
            Scenario::Rules => "rules",
            Scenario::Replay => "replay",
            Scenario::Ssf => "ssf",
            Scenario::Set => "set",
            Scenario::Storm => "storm",
            Scenario::Window => "window",
            Scenario::Pg => "pg",
            Scenario::Redis => "redis",
            Scenario::Sled => "sled",
            Scenario::Ceiling => "ceiling",
        }
    }

    /// Whether `--callgrind` measures it (it sends requests through idem's signal path).
    pub fn has_callgrind(self) -> bool {
        matches!(
            self,
            Scenario::Keyless
                | Scenario::Unique
                | Scenario::Claim
                | Scenario::Rules
                | Scenario::Replay
                | Scenario::Ssf
                | Scenario::Set
                | Scenario::Storm
        )
    }
}

/// The scenarios run when `--scenario` is not given.
const DEFAULT_SCENARIOS: [Scenario; 6] = [
    Scenario::Keyless,
    Scenario::Unique,
    Scenario::Replay,
    Scenario::Storm,
    Scenario::Pg,
    Scenario::Ceiling,
];

/// The scenarios `--callgrind` measures when `--scenario` is not given.
const DEFAULT_CALLGRIND_SCENARIOS: [Scenario; 4] = [
    Scenario::Keyless,
    Scenario::Unique,
    Scenario::Replay,
    Scenario::Storm,
];

/// Load benchmark of idem: what exactly-once costs, scenarios side by side with a keyless floor
/// and a PostgreSQL baseline.
///
/// Starts a real `idem serve` (release, durable) on a temp data dir per scenario and drives
/// requests (keyed ones signed) over loopback; prints requests/s, latency percentiles, statuses,
/// the server's peak RSS and data-dir bytes, and each scenario's ratio to `keyless` in the same
/// run. With `--callgrind`, counts the server's instructions per request instead.
#[derive(Debug, Parser)]
#[command(name = "bench")]
pub struct Args {
    /// Scenarios to run, comma-separated, in this order [default:
    /// keyless,unique,replay,storm,pg,ceiling; with --callgrind: keyless,unique,replay,storm]
    #[arg(long = "scenario", value_name = "LIST", value_delimiter = ',')]
    scenario: Option<Vec<Scenario>>,

    /// How long each scenario's load runs: `10s`, `500ms`, `2m`, `1m30s`
    #[arg(long, value_name = "TIME", default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,

    /// Closed-loop workers per scenario, each sending its next request once the previous one is
    /// answered
    #[arg(long, value_name = "N", default_value_t = 32,
          value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    pub concurrency: usize,

    /// Repeat the scenario list N times and end with the median of each figure (a ratio is the
    /// median of the ratios taken within each run)
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    pub runs: usize,

    /// Pace keyless, unique, replay, pg and the window's fill at R requests/s, each latency
    /// counted from its request's due time [default: as fast as answered]
    #[arg(long, value_name = "R", value_parser = parse_rate)]
    pub rate: Option<f64>,

    /// Also write every figure to FILE as JSON
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Keys the `window` scenario fills (a playbook without actions)
    #[arg(long, value_name = "N", default_value_t = 1_000_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub window_keys: u64,

    /// Keys the `storm` sends, one burst of simultaneous copies each
    #[arg(long, value_name = "N", default_value_t = 5,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub storm_keys: u64,

    /// Simultaneous copies of each storm key, one keep-alive connection each (one wins, the rest
    /// are the losers whose latencies are reported)
    #[arg(long, value_name = "N", default_value_t = 1000,
          value_parser = RangedU64ValueParser::<usize>::new().range(2..))]
    pub storm_copies: usize,

    /// How many of a claim's four entries the sled scenario writes per request, in order: its
    /// log entry, its index entry, the decision record, its subject's listing (what a store
    /// laid out with fewer entries per claim could reach)
    #[arg(long, value_name = "N", default_value_t = 4,
          value_parser = RangedU64ValueParser::<usize>::new().range(1..=4))]
    pub sled_entries: usize,

    /// Stores idem runs on, comma-separated: `sled` (embedded) and `postgres` (a fresh database
    /// of the local server, postgres://postgres@127.0.0.1:5432, for each scenario); each
    /// scenario that runs idem runs once per store, the postgres rows named `… (postgres)`
    #[arg(
        long = "store",
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "sled"
    )]
    pub stores: Vec<StoreKind>,

    /// With the postgres store: nodes on its database (unique, replay and storm spread their
    /// requests over them; a storm's copies of each key go to every node)
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    pub nodes: usize,

    /// idem exports its traces (every request's spans) over OTLP/HTTP to the bench's receiver,
    /// which takes every export: what tracing costs when it is on
    #[arg(long)]
    pub traces: bool,

    /// The idem binary to run [default: build it, release, into target/bench]
    #[arg(long, value_name = "PATH", value_parser = existing_file)]
    pub idem: Option<PathBuf>,

    /// Count the server's instructions per request under valgrind's callgrind instead of
    /// measuring its speed: 300 warm-up requests, counters zeroed, then --callgrind-requests
    /// requests at concurrency 4 (the storm: 20 keys x 200 simultaneous copies), counters dumped.
    /// Measures keyless, unique, replay and storm. Needs valgrind (apt-get install valgrind)
    #[arg(long, conflicts_with_all = [
        "duration", "concurrency", "runs", "rate", "window_keys", "storm_keys", "storm_copies",
        "sled_entries",
    ])]
    pub callgrind: bool,

    /// With --callgrind: requests counted per scenario after the warm-up (not the storm's)
    #[arg(long, value_name = "N", default_value_t = 2000, requires = "callgrind",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub callgrind_requests: u64,

    /// With --callgrind: keep each scenario's dump as DIR/<scenario>.cg.out, for
    /// callgrind_annotate (otherwise it goes with the scenario's temp dir)
    #[arg(long, value_name = "DIR", requires = "callgrind")]
    pub callgrind_keep: Option<PathBuf>,
}

impl Args {
    /// Parses `argv` (its first item the program's name) and checks what clap's attributes
    /// cannot: that `--callgrind` is asked only for scenarios it measures.
    pub fn try_parse_args<I, T>(argv: I) -> Result<Args, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let args = Args::try_parse_from(argv)?;
        if args.nodes > 1 && !args.stores.contains(&StoreKind::Postgres) {
            return Err(Args::command().error(
                ErrorKind::ArgumentConflict,
                "--nodes above 1 needs --store postgres: nodes share a database",
            ));
        }
        if args.callgrind {
            if let Some(bad) = args.scenarios().into_iter().find(|s| !s.has_callgrind()) {
                return Err(Args::command().error(
                    ErrorKind::ValueValidation,
                    format!(
                        "--callgrind measures keyless, unique, replay and storm, not {}",
                        bad.name()
                    ),
                ));
            }
        }
        Ok(args)
    }

    /// The scenarios to run, in order.
    pub fn scenarios(&self) -> Vec<Scenario> {
        match &self.scenario {
            Some(list) => list.clone(),
            None if self.callgrind => DEFAULT_CALLGRIND_SCENARIOS.to_vec(),
            None => DEFAULT_SCENARIOS.to_vec(),
        }
    }
}

/// `10s`, `500ms`, `2m`, `1m30s`.
fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (takes e.g. 10s or 500ms)"))
}

/// A positive number of requests a second.
fn parse_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
        _ => Err("takes a positive number of requests a second".into()),
    }
}

/// A path to a file that exists.
fn existing_file(s: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(s);
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!("no such file: {}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(argv: &[&str]) -> Result<Args, clap::Error> {
        Args::try_parse_args(std::iter::once("bench").chain(argv.iter().copied()))
    }

    #[test]
    fn the_help_describes_every_flag_and_clap_accepts_the_definition() {
        Args::command().debug_assert();
        let help = Args::command().render_long_help().to_string();
        for flag in [
            "--scenario",
            "--duration",
            "--concurrency",
            "--runs",
            "--rate",
            "--json",
            "--window-keys",
            "--storm-keys",
            "--storm-copies",
            "--sled-entries",
            "--callgrind-keep",
            "--idem",
            "--callgrind",
            "--callgrind-requests",
        ] {
            assert!(help.contains(flag), "{flag} missing from --help");
        }
    }

    #[test]
    fn no_arguments_give_the_defaults() {
        let args = parse(&[]).expect("no arguments parse");
        assert_eq!(args.scenarios(), DEFAULT_SCENARIOS.to_vec());
        assert_eq!(args.duration, Duration::from_secs(10));
        assert_eq!(
            (args.concurrency, args.runs, args.rate, args.json, args.idem),
            (32, 1, None, None, None)
        );
        assert_eq!(
            (args.window_keys, args.storm_keys, args.storm_copies),
            (1_000_000, 5, 1000)
        );
        assert!(!args.callgrind);
    }

    #[test]
    fn every_flag_takes_its_value() {
        let args = parse(&[
            "--scenario",
            "storm,keyless",
            "--duration",
            "500ms",
            "--concurrency",
            "8",
            "--runs",
            "3",
            "--rate",
            "1425",
            "--json",
            "/tmp/bench.json",
            "--window-keys",
            "1000",
            "--storm-keys",
            "2",
            "--storm-copies",
            "50",
        ])
        .expect("valid arguments parse");
        assert_eq!(args.scenarios(), vec![Scenario::Storm, Scenario::Keyless]);
        assert_eq!(args.duration, Duration::from_millis(500));
        assert_eq!((args.concurrency, args.runs), (8, 3));
        assert_eq!(args.rate, Some(1425.0));
        assert_eq!(args.json, Some(PathBuf::from("/tmp/bench.json")));
        assert_eq!(
            (args.window_keys, args.storm_keys, args.storm_copies),
            (1000, 2, 50)
        );
        assert_eq!(args.sled_entries, 4);
        let args = parse(&["--scenario", "sled", "--sled-entries", "1"]).expect("parses");
        assert_eq!(
            (args.scenarios(), args.sled_entries),
            (vec![Scenario::Sled], 1)
        );
        for bad in ["0", "5"] {
            assert!(
                parse(&["--sled-entries", bad]).is_err(),
                "--sled-entries {bad}"
            );
        }
        let args = parse(&["--duration", "10s"]).expect("10s parses");
        assert_eq!(args.duration, Duration::from_secs(10));
    }

    #[test]
    fn nodes_share_a_postgres_store() {
        let err = parse(&["--nodes", "3"]).err();
        assert_eq!(err.map(|e| e.kind()), Some(ErrorKind::ArgumentConflict));
        let args = parse(&["--store", "sled,postgres", "--nodes", "3"]).expect("parses");
        assert_eq!(args.nodes, 3);
        assert_eq!(args.stores, vec![StoreKind::Sled, StoreKind::Postgres]);
        assert!(parse(&["--nodes", "0", "--store", "postgres"]).is_err());
    }

    #[test]
    fn an_unknown_scenario_is_refused() {
        let err = parse(&["--scenario", "keyless,nope"]).err();
        assert_eq!(err.map(|e| e.kind()), Some(ErrorKind::InvalidValue));
    }

    #[test]
    fn bad_values_and_unknown_flags_are_refused() {
        for argv in [
            &["--duration", "10"][..],
            &["--duration", "soon"],
            &["--concurrency", "0"],
            &["--concurrency", "many"],
            &["--runs", "0"],
            &["--rate", "0"],
            &["--storm-copies", "1"],
            &["--idem", "/nonexistent/idem"],
            &["--no-such-flag", "1"],
            &["--scenario"],
        ] {
            assert!(parse(argv).is_err(), "{argv:?} was accepted");
        }
    }

    #[test]
    fn callgrind_defaults_to_the_scenarios_it_measures_and_refuses_the_others() {
        let args = parse(&["--callgrind"]).expect("--callgrind parses");
        assert_eq!(args.scenarios(), DEFAULT_CALLGRIND_SCENARIOS.to_vec());
        assert_eq!(args.callgrind_requests, 2000);
        let args = parse(&["--callgrind", "--scenario", "unique,storm"]).expect("parses");
        assert_eq!(args.scenarios(), vec![Scenario::Unique, Scenario::Storm]);
        let args = parse(&["--callgrind", "--callgrind-requests", "500"]).expect("parses");
        assert_eq!(args.callgrind_requests, 500);
        let args = parse(&["--callgrind", "--callgrind-keep", "/tmp/dumps"]).expect("parses");
        assert_eq!(args.callgrind_keep, Some(PathBuf::from("/tmp/dumps")));
        for argv in [
            &["--callgrind", "--scenario", "keyless,pg"][..],
            &["--callgrind", "--scenario", "window"],
            &["--callgrind", "--rate", "100"],
            &["--callgrind", "--duration", "2s"],
            &["--callgrind-requests", "500"],
            &["--callgrind-keep", "/tmp/dumps"],
        ] {
            assert!(parse(argv).is_err(), "{argv:?} was accepted");
        }
    }
}
