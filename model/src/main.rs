//! `cargo run --release -p model -- [--scenario inline|waiting|subject|queued|expiring|bulk]
//! [--nodes 2] [--keys 1] [--copies 2] [--crashes 1] [--stalls 1]
//! [--sabotage no-fencing|answer-first|replace-on-expiry|decide-again|rescan-on-takeover|
//! no-skip|no-lease-fencing|no-max-hold]`: checks every interleaving of the claim protocol in each
//! scenario and of a bulk redelivery (`bulk`), or of the one named, then of the delivery lease
//! protocol, within the bounds (each scenario's own, unless given); prints the states visited
//! and each property's result, and exits 0 only when every safety and liveness property holds
//! and every `sometimes` property was reached (so the bounds did reach the cases they are for).
//! A counterexample is printed as its sequence of steps.

use std::fmt::Debug;
use std::hash::Hash;
use std::process::ExitCode;

use idem_actors::store::rule::Fencing;
use model::bulk::{BulkBounds, BulkModel, BulkSabotage};
use model::claims::{Bounds, ClaimModel, ClaimScenario, Sabotage};
use model::delivery::{DeliveryBounds, DeliveryModel};
use stateright::{Checker, Expectation, HasDiscoveries, Model};

/// What the command line asks for.
struct CommandLine {
    scenarios: Vec<ClaimScenario>,
    /// Whether the bulk redelivery is checked.
    bulk: bool,
    /// Bounds given on the command line, over each scenario's own.
    nodes: Option<usize>,
    keys: Option<usize>,
    copies: Option<u8>,
    crashes: Option<u8>,
    stalls: Option<u8>,
    sabotage: Option<Sabotage>,
    bulk_sabotage: Option<BulkSabotage>,
    lease_fencing: Fencing,
    unbounded_holds: bool,
}

fn parse() -> Result<CommandLine, String> {
    let mut parsed = CommandLine {
        scenarios: ClaimScenario::ALL.to_vec(),
        bulk: true,
        nodes: None,
        keys: None,
        copies: None,
        crashes: None,
        stalls: None,
        sabotage: None,
        bulk_sabotage: None,
        lease_fencing: Fencing::On,
        unbounded_holds: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_default();
        let number = || {
            value
                .parse::<u8>()
                .map_err(|_| format!("{flag} takes a number"))
        };
        match flag.as_str() {
            "--scenario" => {
                let scenario = match value.as_str() {
                    "inline" => Some(ClaimScenario::Inline),
                    "waiting" => Some(ClaimScenario::Waiting),
                    "subject" => Some(ClaimScenario::Subject),
                    "queued" => Some(ClaimScenario::Queued),
                    "expiring" => Some(ClaimScenario::Expiring),
                    "bulk" => None,
                    other => {
                        return Err(format!(
                            "--scenario {other}: inline, waiting, subject, queued, expiring or \
                             bulk"
                        ))
                    }
                };
                parsed.scenarios = scenario.into_iter().collect();
                parsed.bulk = scenario.is_none();
            }
            "--nodes" => parsed.nodes = Some(number()?.max(1) as usize),
            "--keys" => parsed.keys = Some(number()?.max(1) as usize),
            "--copies" => parsed.copies = Some(number()?),
            "--crashes" => parsed.crashes = Some(number()?),
            "--stalls" => parsed.stalls = Some(number()?),
            "--sabotage" => match value.as_str() {
                "no-fencing" => parsed.sabotage = Some(Sabotage::NoFencing),
                "answer-first" => parsed.sabotage = Some(Sabotage::AnswerBeforeRecoveryPoint),
                "replace-on-expiry" => parsed.sabotage = Some(Sabotage::ReplaceOnExpiry),
                "decide-again" => parsed.sabotage = Some(Sabotage::DecideAgainOnRecovery),
                "rescan-on-takeover" => parsed.bulk_sabotage = Some(BulkSabotage::RescanOnTakeOver),
                "no-skip" => parsed.bulk_sabotage = Some(BulkSabotage::NoSkip),
                "no-lease-fencing" => parsed.lease_fencing = Fencing::Off,
                "no-max-hold" => parsed.unbounded_holds = true,
                other => {
                    return Err(format!(
                        "--sabotage {other}: no-fencing, answer-first, replace-on-expiry, \
                         decide-again, rescan-on-takeover, no-skip, no-lease-fencing or \
                         no-max-hold"
                    ))
                }
            },
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(parsed)
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("model: {e}");
            return ExitCode::from(2);
        }
    };
    let mut held = true;
    for scenario in &args.scenarios {
        let d = Bounds::default_for(*scenario);
        let bounds = Bounds {
            nodes: args.nodes.unwrap_or(d.nodes),
            keys: args.keys.unwrap_or(d.keys),
            copies: args.copies.unwrap_or(d.copies),
            crashes: args.crashes.unwrap_or(d.crashes),
            stalls: args.stalls.unwrap_or(d.stalls),
        };
        println!(
            "claims, {scenario:?}: {bounds:?}, sabotage {:?}",
            args.sabotage
        );
        let model = ClaimModel::new(*scenario, bounds, args.sabotage);
        held &= check(model, |state, action| state.describe(action));
    }
    // The bulk redelivery: a holder that crashes, then one that stalls.
    if args.bulk {
        for d in [BulkBounds::CRASHING, BulkBounds::STALLING] {
            let bounds = BulkBounds {
                nodes: args.nodes.unwrap_or(d.nodes),
                copies: args.copies.unwrap_or(d.copies),
                crashes: args.crashes.unwrap_or(d.crashes),
                stalls: args.stalls.unwrap_or(d.stalls),
            };
            println!("bulk: {bounds:?}, sabotage {:?}", args.bulk_sabotage);
            let model = BulkModel::new(bounds, args.bulk_sabotage);
            let words = model.clone();
            held &= check(model, move |state, action| words.describe(state, action));
        }
    }

    // The lease protocol, then an endpoint that stays open.
    let leasing = DeliveryBounds {
        nodes: args.nodes.unwrap_or(DeliveryModel::LEASING.nodes),
        crashes: args.crashes.unwrap_or(DeliveryModel::LEASING.crashes),
        ..DeliveryModel::LEASING
    };
    for bounds in [leasing, DeliveryModel::HOLDING] {
        println!(
            "deliveries: {bounds:?}, lease fencing {:?}, max_hold {}",
            args.lease_fencing,
            if args.unbounded_holds { "off" } else { "on" }
        );
        let deliveries = DeliveryModel {
            bounds,
            fencing: args.lease_fencing,
            unbounded_holds: args.unbounded_holds,
        };
        held &= check(deliveries, |_, action| format!("{action:?}"));
    }
    match held {
        true => ExitCode::SUCCESS,
        false => ExitCode::FAILURE,
    }
}

/// Checks `model` exhaustively and reports; whether every property held.
fn check<M>(model: M, describe: impl Fn(&M::State, &M::Action) -> String) -> bool
where
    M: Model + Send + Sync + 'static,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let started = std::time::Instant::now();
    let properties = model.properties();
    // A counterexample ends the run: the rest of the space would take long to say no more.
    let checker = model
        .checker()
        .threads(2)
        .finish_when(HasDiscoveries::AnyFailures)
        .spawn_bfs()
        .join();
    println!(
        "  states: {} unique, {} generated, depth {}, {:.1} s",
        checker.unique_state_count(),
        checker.state_count(),
        checker.max_depth(),
        started.elapsed().as_secs_f64()
    );
    let mut held = true;
    for property in properties {
        let discovery = checker.discovery(property.name);
        let holds = match property.expectation {
            Expectation::Sometimes => discovery.is_some(),
            _ => discovery.is_none(),
        };
        println!(
            "  {} {:?} {}",
            if holds { "ok  " } else { "FAIL" },
            property.expectation,
            property.name
        );
        if let (false, Some(path)) = (holds, discovery) {
            let states = path.clone().into_states();
            for (n, (action, before)) in path.into_actions().iter().zip(&states).enumerate() {
                println!("    {:>3}. {}", n + 1, describe(before, action));
            }
        }
        held &= holds;
    }
    held
}
