//! `cargo run --release -p model -- [--nodes 2] [--keys 1] [--copies 2] [--crashes 1]
//! [--stalls 1] [--sabotage no-fencing|answer-first]`: checks every interleaving within the
//! bounds, prints the states visited and each property's result, and exits 0 only when every
//! safety and liveness property holds and every `sometimes` property was reached (so the bounds
//! did reach the cases they are for). A counterexample is printed as its sequence of steps.

use std::process::ExitCode;

use model::{Bounds, ClaimModel, Sabotage};
use stateright::{Checker, Model};

fn main() -> ExitCode {
    let mut bounds = Bounds {
        nodes: 2,
        keys: 1,
        copies: 2,
        crashes: 1,
        stalls: 1,
    };
    let mut sabotage = Sabotage::None;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_default();
        let number = || {
            value
                .parse::<u8>()
                .map_err(|_| format!("{flag} takes a number"))
        };
        let parsed = match flag.as_str() {
            "--nodes" => number().map(|n| bounds.nodes = n.max(1) as usize),
            "--keys" => number().map(|n| bounds.keys = n.max(1) as usize),
            "--copies" => number().map(|n| bounds.copies = n),
            "--crashes" => number().map(|n| bounds.crashes = n),
            "--stalls" => number().map(|n| bounds.stalls = n),
            "--sabotage" => match value.as_str() {
                "no-fencing" => Ok(sabotage = Sabotage::NoFencing),
                "answer-first" => Ok(sabotage = Sabotage::AnswerBeforeRecoveryPoint),
                other => Err(format!("--sabotage {other}: no-fencing or answer-first")),
            },
            other => Err(format!("unknown argument {other}")),
        };
        if let Err(e) = parsed {
            eprintln!("model: {e}");
            return ExitCode::from(2);
        }
    }
    let model = ClaimModel { bounds, sabotage };
    let properties = model.properties();
    println!("checking {bounds:?}, sabotage {sabotage:?}");
    let checker = model.checker().threads(2).spawn_bfs().join();
    println!(
        "states: {} unique, {} generated, depth {}",
        checker.unique_state_count(),
        checker.state_count(),
        checker.max_depth()
    );
    let mut failed = false;
    for property in properties {
        let discovery = checker.discovery(property.name);
        let holds = match property.expectation {
            stateright::Expectation::Sometimes => discovery.is_some(),
            _ => discovery.is_none(),
        };
        println!(
            "{} {:?} {}",
            if holds { "ok  " } else { "FAIL" },
            property.expectation,
            property.name
        );
        if let (false, Some(path)) = (holds, discovery) {
            let states = path.clone().into_states();
            for (n, (action, before)) in path.into_actions().iter().zip(&states).enumerate() {
                println!("  {:>3}. {}", n + 1, before.describe(action));
            }
            if let Some(last) = states.last() {
                println!("  then: {}", last.summary());
            }
        }
        failed |= !holds;
    }
    match failed {
        true => ExitCode::FAILURE,
        false => ExitCode::SUCCESS,
    }
}
