//! The model checker can fail: the claim protocol as it runs holds every property in every
//! scenario within small bounds (and reaches the cases each is for), the lease protocol and the
//! bulk redelivery too, and each sabotage, the real code with one rule switched off, is caught
//! with a counterexample: a sequence of steps that ends where the property breaks.

use idem_actors::store::rule::Fencing;
use model::bulk::{BulkBounds, BulkModel, BulkSabotage};
use model::claims::{Bounds, ClaimModel, ClaimScenario, Sabotage};
use model::delivery::{DeliveryAction, DeliveryBounds, DeliveryModel};
use stateright::{Checker, Expectation, HasDiscoveries, Model};

/// Bounds small enough for a test build: no crash but where the scenario needs one.
fn small(scenario: ClaimScenario) -> Bounds {
    let bounds = Bounds {
        nodes: 2,
        keys: 1,
        copies: 2,
        crashes: 0,
        stalls: 1,
    };
    match scenario {
        ClaimScenario::Inline | ClaimScenario::Waiting => bounds,
        // Its one write leaves nothing in flight: a crash is what it is about.
        ClaimScenario::Queued | ClaimScenario::Subject | ClaimScenario::Expiring => {
            Bounds::default_for(scenario)
        }
    }
}

/// Checks all of `scenario`'s space.
fn check(scenario: ClaimScenario) -> impl Checker<ClaimModel> {
    ClaimModel::new(scenario, small(scenario), None)
        .checker()
        .spawn_bfs()
        .join()
}

/// Every property of `scenario` holds, and every case it is for is reached.
fn holds(scenario: ClaimScenario) {
    let checker = check(scenario);
    assert!(
        checker.unique_state_count() > 10_000,
        "{scenario:?}: the bounds reach past a few states"
    );
    every_property_holds(&checker, &format!("{scenario:?}"));
}

/// Every property of `checker`'s model (`what`) holds, and every case it is for is reached.
fn every_property_holds<M>(checker: &impl Checker<M>, what: &str)
where
    M: Model,
    M::State: Clone + std::fmt::Debug + PartialEq,
    M::Action: Clone + std::fmt::Debug + PartialEq,
{
    for property in checker.model().properties() {
        let found = checker.discovery(property.name);
        match property.expectation {
            Expectation::Sometimes => {
                assert!(found.is_some(), "{what}: {} is reached", property.name)
            }
            _ => assert!(
                found.is_none(),
                "{what}: {} holds: {found:?}",
                property.name
            ),
        }
    }
}

/// The index of the first of `steps` that mentions `what` (failing with the steps if none does).
fn step_at(steps: &[String], what: &str) -> usize {
    steps
        .iter()
        .position(|s| s.contains(what))
        .unwrap_or_else(|| panic!("{what}: {steps:#?}"))
}

#[test]
fn inline_callbacks_hold_and_reach_take_overs_and_fencing() {
    holds(ClaimScenario::Inline);
}

#[test]
fn waiters_hold_and_are_answered_with_the_first_requests_bytes() {
    holds(ClaimScenario::Waiting);
}

#[test]
fn a_subject_decides_once_and_answers_every_key_with_its_decision() {
    holds(ClaimScenario::Subject);
}

#[test]
fn queued_callbacks_come_only_from_a_durable_claim() {
    holds(ClaimScenario::Queued);
}

#[test]
fn a_key_expiring_while_its_decision_runs_stays_held_until_it_completes() {
    holds(ClaimScenario::Expiring);
}

/// The counterexample to `property` in `scenario` under `sabotage`, as described steps. The
/// search ends at the first one: a broken rule can make the space far larger, and one
/// counterexample is all there is to show.
fn counterexample(
    scenario: ClaimScenario,
    sabotage: Sabotage,
    property: &'static str,
) -> Vec<String> {
    let checker = ClaimModel::new(scenario, small(scenario), Some(sabotage))
        .checker()
        .finish_when(HasDiscoveries::AnyOf([property].into()))
        .spawn_bfs()
        .join();
    steps(&checker, property, |before, action| before.describe(action))
}

/// The path `checker` found that breaks `property`, each step described by `describe` from the
/// state it was taken in.
fn steps<M>(
    checker: &impl Checker<M>,
    property: &'static str,
    describe: impl Fn(&M::State, &M::Action) -> String,
) -> Vec<String>
where
    M: Model,
    M::State: Clone + std::fmt::Debug + PartialEq,
    M::Action: Clone + std::fmt::Debug + PartialEq,
{
    let path = checker
        .discovery(property)
        .unwrap_or_else(|| panic!("the sabotage breaks {property:?}"));
    let states = path.clone().into_states();
    path.into_actions()
        .iter()
        .zip(&states)
        .map(|(action, before)| describe(before, action))
        .collect()
}

#[test]
fn without_fencing_a_stale_write_is_caught() {
    let steps = counterexample(
        ClaimScenario::Inline,
        Sabotage::NoFencing,
        "no write of a fenced-out holder is visible",
    );
    assert!(
        steps
            .iter()
            .filter(|s| s.contains("append the recovery point"))
            .count()
            >= 2,
        "two recovery points both written: {steps:#?}"
    );
}

#[test]
fn an_answer_before_its_recovery_point_is_caught() {
    let steps = counterexample(
        ClaimScenario::Inline,
        Sabotage::AnswerBeforeRecoveryPoint,
        "one decision per key, every answer its recorded bytes",
    );
    let answered = steps
        .iter()
        .position(|s| s.contains("actions for claim 0 ran"))
        .unwrap_or_else(|| panic!("the answer leaves as the actions end: {steps:#?}"));
    assert!(
        !steps[..answered]
            .iter()
            .any(|s| s.contains("append the recovery point")),
        "before any recovery point reached the store: {steps:#?}"
    );
}

#[test]
fn replacing_an_expired_claim_that_still_runs_is_caught() {
    let steps = counterexample(
        ClaimScenario::Expiring,
        Sabotage::ReplaceOnExpiry,
        "an expired claim still running keeps its key: nothing fails before in_flight_timeout",
    );
    assert!(
        steps.iter().filter(|s| s.contains("start gen")).count() >= 2,
        "a second generation started over the first: {steps:#?}"
    );
    assert!(
        !steps.iter().any(|s| s.contains("in_flight_timeout passes")),
        "before in_flight_timeout passed: {steps:#?}"
    );
}

fn deliveries(fencing: Fencing) -> impl Checker<DeliveryModel> {
    let bounds = match fencing {
        Fencing::On => DeliveryModel::LEASING,
        // Without fencing the runs go on longer: smaller bounds catch it as surely.
        Fencing::Off => DeliveryBounds {
            nodes: 2,
            expiries: 1,
            crashes: 0,
            redeliveries: 0,
            holds: 0,
        },
    };
    DeliveryModel {
        bounds,
        fencing,
        unbounded_holds: false,
    }
    .checker()
    .spawn_bfs()
    .join()
}

/// The delivery held back by an open endpoint, on two nodes (`unbounded_holds`: no `max_hold`).
fn held_back(unbounded_holds: bool) -> impl Checker<DeliveryModel> {
    DeliveryModel {
        bounds: DeliveryModel::HOLDING,
        fencing: Fencing::On,
        unbounded_holds,
    }
    .checker()
    .spawn_bfs()
    .join()
}

#[test]
fn the_lease_protocol_holds_and_fences_an_expired_lease() {
    let checker = deliveries(Fencing::On);
    assert!(checker.unique_state_count() > 10_000);
    every_property_holds(&checker, "leases");
}

#[test]
fn an_endpoint_that_stays_open_holds_a_delivery_for_max_hold_then_it_is_dead() {
    let checker = held_back(false);
    assert!(checker.unique_state_count() > 1_000);
    every_property_holds(&checker, "holds");
}

#[test]
fn holds_without_max_hold_are_caught() {
    let checker = held_back(true);
    let path = checker
        .discovery(
            "an endpoint that stays open holds a delivery for max_hold at most, with one record",
        )
        .expect("a counterexample");
    let actions = path.into_actions();
    let held = actions
        .iter()
        .filter(|a| matches!(a, DeliveryAction::Hold(_)))
        .count();
    assert!(held >= 3, "held again past max_hold: {actions:?}");
}

#[test]
fn without_lease_fencing_a_stale_attempt_is_caught() {
    let checker = deliveries(Fencing::Off);
    let path = checker
        .discovery("no record of a fenced-out lease is visible")
        .expect("a counterexample");
    let actions = path.into_actions();
    assert!(
        actions.contains(&DeliveryAction::Expire),
        "a lease expired under its worker: {actions:?}"
    );
}

/// The bulk redelivery within `bounds`, with `sabotage`; stopped at the first counterexample to
/// `property` when one is given.
fn bulk(
    bounds: BulkBounds,
    sabotage: Option<BulkSabotage>,
    property: Option<&'static str>,
) -> impl Checker<BulkModel> {
    let checker = BulkModel::new(bounds, sabotage).checker();
    match property {
        Some(property) => checker.finish_when(HasDiscoveries::AnyOf([property].into())),
        None => checker,
    }
    .spawn_bfs()
    .join()
}

/// The counterexample to `property` of the bulk redelivery under `sabotage`, as described steps.
fn bulk_counterexample(sabotage: BulkSabotage, property: &'static str) -> Vec<String> {
    let checker = bulk(BulkBounds::CRASHING, Some(sabotage), Some(property));
    steps(&checker, property, |before, action| {
        checker.model().describe(before, action)
    })
}

#[test]
fn a_bulk_redelivery_taken_over_after_a_crash_redelivers_what_its_claim_matched_each_once() {
    let checker = bulk(BulkBounds::CRASHING, None, None);
    assert!(checker.unique_state_count() > 10_000);
    every_property_holds(&checker, "bulk, crashing");
}

#[test]
fn a_bulk_redelivery_taken_over_from_a_stalled_holder_redelivers_each_once_between_them() {
    let checker = bulk(BulkBounds::STALLING, None, None);
    assert!(checker.unique_state_count() > 1_000);
    every_property_holds(&checker, "bulk, stalling");
}

#[test]
fn a_bulk_take_over_that_scans_again_is_caught() {
    let steps = bulk_counterexample(
        BulkSabotage::RescanOnTakeOver,
        "the request redelivers only what its claim matched, never one failed after it",
    );
    let at = |what: &str| step_at(&steps, what);
    assert!(
        at("claims the request") < at("msg_c's series of attempts ends failed")
            && at("msg_c's series of attempts ends failed") < at("takes the claim over")
            && at("takes the claim over") < at("redelivers msg_c"),
        "a delivery failed after the claim, redelivered by the take-over: {steps:#?}"
    );
}

#[test]
fn a_bulk_take_over_that_skips_nothing_is_caught() {
    let steps = bulk_counterexample(
        BulkSabotage::NoSkip,
        "each delivery the claim matched is redelivered at most once by the request",
    );
    let twice = ["msg_a", "msg_b"].into_iter().find(|id| {
        let redelivered = format!("redelivers {id}");
        steps.iter().filter(|s| s.ends_with(&redelivered)).count() == 2
    });
    assert!(
        twice.is_some() && steps.iter().any(|s| s.contains("crashes part-way")),
        "redelivered by the holder that crashed and again by the one that took over: {steps:#?}"
    );
}

#[test]
fn a_decision_evaluated_again_when_a_claim_is_taken_over_is_caught() {
    let steps = counterexample(
        ClaimScenario::Inline,
        Sabotage::DecideAgainOnRecovery,
        "every answer names the rule of the decision it names, as stored with its claim",
    );
    let at = |what: &str| step_at(&steps, what);
    // "store gets node N's write …": the node that wrote the step.
    let node = |what: &str| steps[at(what)].split("'s write").next().map(str::to_string);
    assert!(
        at("start gen") < at("take over") && node("start gen") != node("take over"),
        "a claim stored, then taken over by another node that decided it again: {steps:#?}"
    );
}
