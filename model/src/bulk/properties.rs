//! What the bulk model checks: each delivery the claim matched is redelivered at most once by
//! the request, and only those; once the answer is recorded, each was redelivered since the
//! claim; every answer counts what the claim matched, and the client is answered in the end;
//! and the cases it is for are reached (a replay, a delivery failing after the claim, a
//! take-over after a part-way crash or from a holder that still runs, completed).

use stateright::Property;

use super::state::{count, fold, BulkAnswer, BulkRow, BulkState};
use super::{BulkModel, DELIVERIES};

/// The properties `model` is checked for, with those its bounds' take-overs must reach.
pub(super) fn of(model: &BulkModel) -> Vec<Property<BulkModel>> {
    let mut properties =
        vec![
        Property::always(
            "each delivery the claim matched is redelivered at most once by the request",
            |_, s: &BulkState| s.redelivered.iter().all(|&n| n <= 1),
        ),
        Property::always(
            "the request redelivers only what its claim matched, never one failed after it",
            |_, s: &BulkState| {
                let fixed = s.row.as_ref().map(BulkRow::fixed).unwrap_or_default();
                (0..s.redelivered.len())
                    .all(|n| s.redelivered[n] == 0 || fixed.iter().any(|id| id == DELIVERIES[n].0))
            },
        ),
        Property::always(
            "once the answer is recorded, each delivery the claim matched was redelivered since",
            |_, s: &BulkState| {
                let Some(row) = s.row.as_ref().filter(|r| r.current.completed) else {
                    return true;
                };
                let since = row.current.claimed_at_ms;
                row.fixed().iter().all(|id| {
                    BulkState::index(id).is_some_and(|n| {
                        fold(&s.deliveries[n]).is_some_and(|d| d.redelivered_at_ms >= Some(since))
                    })
                })
            },
        ),
        Property::always(
            "every answer counts what the claim matched",
            |_, s: &BulkState| {
                let Some(row) = s.row.as_ref() else {
                    return s.answers.iter().all(|a| a.count().is_none());
                };
                let matched = Some(row.fixed().len() as u64);
                row.response().is_none_or(|body| count(body) == matched)
                    && s.answers
                        .iter()
                        .filter(|a| matches!(a, BulkAnswer::First(_) | BulkAnswer::Replayed(_)))
                        .all(|a| a.count() == matched)
            },
        ),
        Property::eventually(
            "the client is answered with the count",
            |_, s: &BulkState| s.answers.iter().any(|a| a.count().is_some()),
        ),
        Property::sometimes(
            "a retry is answered with the recorded count",
            |_, s: &BulkState| s.answers.iter().any(|a| matches!(a, BulkAnswer::Replayed(_))),
        ),
        Property::sometimes(
            "a delivery fails after the claim while the request runs",
            |m: &BulkModel, s: &BulkState| {
                s.row.as_ref().is_some_and(|row| {
                    let fixed = row.fixed();
                    !row.current.completed && m.matching(s).iter().any(|id| !fixed.contains(id))
                })
            },
        ),
    ];
    // What each kind of take-over its bounds allow must reach.
    if model.bounds.crashes > 0 {
        properties.push(Property::sometimes(
            "a take-over after a part-way crash completes",
            |_, s: &BulkState| {
                s.crashed_part_way
                    && s.row
                        .as_ref()
                        .is_some_and(|r| r.taken_over() && r.current.completed)
            },
        ));
    }
    if model.bounds.stalls > 0 {
        properties.push(Property::sometimes(
            "a claim taken over from a holder that still runs is completed",
            |_, s: &BulkState| {
                s.taken_from_running && s.row.as_ref().is_some_and(|r| r.current.completed)
            },
        ));
    }
    properties
}
