//! The model checker can fail: the claim and lease protocols as they run hold every property
//! within small bounds (and reach the cases the bounds are for), and each sabotage is caught
//! with a counterexample, a sequence of steps that ends where the property breaks.

use model::delivery::{DeliveryAction, DeliveryBounds, DeliveryModel};
use model::{Bounds, ClaimModel, Sabotage};
use stateright::{Checker, Expectation, Model};

const SMALL: Bounds = Bounds {
    nodes: 2,
    keys: 1,
    copies: 2,
    crashes: 0,
    stalls: 1,
};

fn check(sabotage: Sabotage) -> impl Checker<ClaimModel> {
    ClaimModel {
        bounds: SMALL,
        sabotage,
    }
    .checker()
    .spawn_bfs()
    .join()
}

#[test]
fn the_protocol_holds_and_reaches_take_overs_and_fencing() {
    let checker = check(Sabotage::None);
    assert!(
        checker.unique_state_count() > 10_000,
        "the bounds reach past a few states"
    );
    for property in checker.model().properties() {
        let found = checker.discovery(property.name);
        match property.expectation {
            Expectation::Sometimes => assert!(found.is_some(), "{} is reached", property.name),
            _ => assert!(found.is_none(), "{} holds: {found:?}", property.name),
        }
    }
}

/// The counterexample to `property`, as described steps.
fn counterexample(checker: &impl Checker<ClaimModel>, property: &'static str) -> Vec<String> {
    let path = checker
        .discovery(property)
        .unwrap_or_else(|| panic!("the sabotage breaks {property:?}"));
    let states = path.clone().into_states();
    path.into_actions()
        .iter()
        .zip(&states)
        .map(|(action, before)| before.describe(action))
        .collect()
}

#[test]
fn without_fencing_a_stale_write_is_caught() {
    let checker = check(Sabotage::NoFencing);
    let steps = counterexample(&checker, "no write of a fenced-out holder is visible");
    assert!(
        steps.iter().filter(|s| s.contains("start gen")).count() >= 2,
        "two starts both written: {steps:#?}"
    );
}

#[test]
fn an_answer_before_its_recovery_point_is_caught() {
    let checker = check(Sabotage::AnswerBeforeRecoveryPoint);
    let steps = counterexample(&checker, "one decision per key, every answer its bytes");
    let answered = steps
        .iter()
        .position(|s| s.contains("actions for key 0 ran"))
        .unwrap_or_else(|| panic!("the answer leaves as the actions end: {steps:#?}"));
    assert!(
        !steps[..answered]
            .iter()
            .any(|s| s.contains("append the recovery point")),
        "before any recovery point reached the store: {steps:#?}"
    );
}

fn deliveries(fencing: bool) -> impl Checker<DeliveryModel> {
    let bounds = match fencing {
        true => DeliveryBounds {
            nodes: 2,
            expiries: 2,
            crashes: 1,
            redeliveries: 1,
        },
        // Without fencing the runs go on longer: smaller bounds catch it as surely.
        false => DeliveryBounds {
            nodes: 2,
            expiries: 1,
            crashes: 0,
            redeliveries: 0,
        },
    };
    DeliveryModel { bounds, fencing }
        .checker()
        .spawn_bfs()
        .join()
}

#[test]
fn the_lease_protocol_holds_and_fences_an_expired_lease() {
    let checker = deliveries(true);
    assert!(checker.unique_state_count() > 10_000);
    for property in checker.model().properties() {
        let found = checker.discovery(property.name);
        match property.expectation {
            Expectation::Sometimes => assert!(found.is_some(), "{} is reached", property.name),
            _ => assert!(found.is_none(), "{} holds: {found:?}", property.name),
        }
    }
}

#[test]
fn without_lease_fencing_a_stale_attempt_is_caught() {
    let checker = deliveries(false);
    let path = checker
        .discovery("no record of a fenced-out lease is visible")
        .expect("a counterexample");
    let actions = path.into_actions();
    assert!(
        actions.contains(&DeliveryAction::Expire),
        "a lease expired under its worker: {actions:?}"
    );
}
