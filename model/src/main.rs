//! `cargo run --release -p model -- [--nodes 2] [--keys 1] [--copies 2] [--crashes 1]
//! [--stalls 1] [--sabotage no-fencing|answer-first|no-lease-fencing]`: checks every
//! interleaving of the claim protocol, then of the delivery lease protocol, within the bounds;
//! prints the states visited and each property's result, and exits 0 only when every safety and
//! liveness property holds and every `sometimes` property was reached (so the bounds did reach
//! the cases they are for). A counterexample is printed as its sequence of steps.

use std::fmt::Debug;
use std::hash::Hash;
use std::process::ExitCode;

use model::delivery::{DeliveryBounds, DeliveryModel};
use model::{Bounds, ClaimModel, Sabotage};
use stateright::{Checker, Expectation, Model};

fn main() -> ExitCode {
    let mut bounds = Bounds {
        nodes: 2,
        keys: 1,
        copies: 2,
        crashes: 1,
        stalls: 1,
    };
    let mut sabotage = Sabotage::None;
    let mut lease_fencing = true;
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
                "no-fencing" => Ok((Sabotage::NoFencing, true)),
                "answer-first" => Ok((Sabotage::AnswerBeforeRecoveryPoint, true)),
                "no-lease-fencing" => Ok((Sabotage::None, false)),
                other => Err(format!(
                    "--sabotage {other}: no-fencing, answer-first or no-lease-fencing"
                )),
            }
            .map(|(claims, leases)| (sabotage, lease_fencing) = (claims, leases)),
            other => Err(format!("unknown argument {other}")),
        };
        if let Err(e) = parsed {
            eprintln!("model: {e}");
            return ExitCode::from(2);
        }
    }

    println!("claims: {bounds:?}, sabotage {sabotage:?}");
    let claims = ClaimModel { bounds, sabotage };
    let mut held = check(claims, |state, action| state.describe(action));

    let bounds = DeliveryBounds {
        nodes: bounds.nodes,
        expiries: 2,
        crashes: bounds.crashes,
        redeliveries: 1,
    };
    println!("deliveries: {bounds:?}, lease fencing {lease_fencing}");
    let deliveries = DeliveryModel {
        bounds,
        fencing: lease_fencing,
    };
    held &= check(deliveries, |_, action| format!("{action:?}"));
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
    let properties = model.properties();
    let checker = model.checker().threads(2).spawn_bfs().join();
    println!(
        "  states: {} unique, {} generated, depth {}",
        checker.unique_state_count(),
        checker.state_count(),
        checker.max_depth()
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
