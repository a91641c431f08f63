//! What the claim model checks: in every scenario, one decision per key with every answer its
//! recorded bytes, no write of a fenced-out holder visible, every callback its claim's one
//! decision, and every key decided in the end; in each scenario, the cases it is for reached
//! (a take-over, a fenced holder, a waiter answered, a subject's decision shared, a queued
//! callback), and for expiring keys, a running decision keeping its key until
//! `in_flight_timeout`.

use idem_actors::claim::phase::Phase;
use idem_schemas::ClaimEvent;
use stateright::Property;

use super::scenario::{ClaimScenario, T0};
use super::state::{decision_of, rule_of, Response, State};
use super::store::fold;
use super::ClaimModel;

/// The properties `model` is checked for: those of every scenario, and its scenario's own.
pub(super) fn of(model: &ClaimModel) -> Vec<Property<ClaimModel>> {
    // Keys decided again once expired: the properties of one decision per key do not hold
    // there, and the scenario has its own.
    if model.scenario == ClaimScenario::Expiring {
        return expiring_properties();
    }
    let mut properties = vec![
        Property::always(
            "one decision per key, every answer its recorded bytes",
            |m: &ClaimModel, s: &State| {
                (0..s.answers.len()).all(|key| {
                    let mut bodies = s.answers[key].iter().filter_map(Response::body);
                    let Some(first) = bodies.next() else {
                        return true;
                    };
                    // An answer's bytes are the recovery point's, durable before it left.
                    let recorded = s.recorded(m.signals[key].claim);
                    recorded.is_some_and(|r| &r.body == first) && bodies.all(|b| b == first)
                })
            },
        ),
        Property::always(
            "no write of a fenced-out holder is visible",
            |_, s: &State| {
                s.rows.iter().flatten().all(|row| {
                    let claims = row
                        .events
                        .iter()
                        .filter(|e| matches!(e, ClaimEvent::Claimed(_)))
                        .count();
                    claims == 1 && fold(&row.events).is_some()
                })
            },
        ),
        Property::always(
            "every callback carries its claim's one decision, the one its key answers with",
            |m: &ClaimModel, s: &State| {
                s.callbacks.iter().all(|(delivery, body)| {
                    s.rows.iter().enumerate().any(|(claim, row)| {
                        let Some(d) = row
                            .as_ref()
                            .and_then(|row| fold(&row.events))
                            .and_then(|p| p.claim().map(|c| c.decision.clone()))
                        else {
                            return false;
                        };
                        let planned = d
                            .deliveries
                            .iter()
                            .any(|p| &p.id == delivery && &p.body == body);
                        // The subject's claim answers no client: its scenario's own
                        // property checks what the keys were answered.
                        let answered_with = m.key_of(claim).is_none_or(|key| {
                            s.answers[key]
                                .iter()
                                .filter_map(Response::body)
                                .all(|b| decision_of(b) == Some(d.id.as_bytes()))
                        });
                        planned && answered_with
                    })
                })
            },
        ),
        Property::always(
            "every answer names the rule of the decision it names, as stored with its claim",
            |_, s: &State| {
                let stored: Vec<_> = s
                    .rows
                    .iter()
                    .flatten()
                    .filter_map(|row| fold(&row.events))
                    .filter_map(|p| p.claim().map(|c| c.decision.clone()))
                    .collect();
                s.answers
                    .iter()
                    .flatten()
                    .filter_map(Response::body)
                    .all(|b| {
                        stored.iter().any(|d| {
                            decision_of(b) == Some(d.id.as_bytes()) && rule_of(b) == d.rule
                        })
                    })
            },
        ),
        // Once nothing is left to happen, every key's response is recorded, so the client's
        // next retry is answered with it (a 409 or a 500 before then is retried).
        Property::eventually(
            "every key is decided and its response recorded",
            |m: &ClaimModel, s: &State| {
                m.signals
                    .iter()
                    .all(|signal| s.recorded(signal.claim).is_some())
            },
        ),
    ];
    // A claim in flight (inline callbacks, or an offer to the subject's claim) is what a
    // crash or a stall leaves to be taken over, and its old holder to be fenced.
    if model.scenario != ClaimScenario::Queued {
        properties.extend(vec![
            Property::sometimes("a claim is taken over", |_, s: &State| {
                s.rows.iter().flatten().any(|row| match row.events.first() {
                    Some(ClaimEvent::Claimed(c)) => c.claimed_at_ms != row.current.generation,
                    _ => false,
                })
            }),
            Property::sometimes("a stale holder is fenced out", |_, s: &State| {
                s.answers.iter().flatten().any(|a| *a == Response::Error)
                    && s.rows.iter().flatten().any(|row| row.current.completed)
            }),
        ]);
    }
    properties.extend(match model.scenario {
        ClaimScenario::Inline | ClaimScenario::Expiring => vec![],
        ClaimScenario::Waiting => vec![Property::sometimes(
            "a waiter is answered with the first request's bytes",
            |_, s: &State| {
                s.answers
                    .iter()
                    .flatten()
                    .any(|a| matches!(a, Response::Awaited(_)))
            },
        )],
        ClaimScenario::Subject => vec![
            Property::always(
                "one decision per subject: every key answered with the subject's",
                |m: &ClaimModel, s: &State| {
                    let subject = m.claims.len() - 1;
                    let decision = s.rows[subject]
                        .as_ref()
                        .and_then(|row| fold(&row.events))
                        .and_then(|p| p.claim().map(|c| c.decision.id.clone()));
                    let is_it = |named: Option<&[u8]>| {
                        decision
                            .as_ref()
                            .is_some_and(|d| named == Some(d.as_bytes()))
                    };
                    s.answers
                        .iter()
                        .flatten()
                        .filter_map(Response::body)
                        .all(|b| is_it(decision_of(b)))
                        && s.callbacks.iter().all(|(_, body)| is_it(Some(body)))
                },
            ),
            Property::sometimes(
                "a key is answered with another key's decision",
                |_, s: &State| {
                    s.answers
                        .iter()
                        .flatten()
                        .any(|a| matches!(a, Response::Deduplicated(_)))
                },
            ),
        ],
        ClaimScenario::Queued => vec![
            Property::always(
                "a queued delivery is stored only with its durable decision",
                |_, s: &State| {
                    s.deliveries.iter().all(|d| {
                        s.rows.iter().flatten().any(|row| {
                            matches!(
                                fold(&row.events),
                                Some(Phase::Completed(c, _)) if c.decision.id == d.decision
                            )
                        })
                    })
                },
            ),
            Property::sometimes(
                "the retry worker makes a queued callback",
                |_, s: &State| !s.callbacks.is_empty(),
            ),
            Property::sometimes(
                "a start that loses to the claim holding its key writes none of its deliveries",
                |_, s: &State| s.refused_deliveries && s.deliveries.len() == 1,
            ),
        ],
    });
    properties
}

/// The properties of [`ClaimScenario::Expiring`], whose keys expire while their decisions run.
fn expiring_properties() -> Vec<Property<ClaimModel>> {
    vec![
        // With no crash or stall, only `in_flight_timeout` passing lets a running decision be
        // replaced, and its writes fenced: before that, no request fails.
        Property::always(
            "an expired claim still running keeps its key: nothing fails before in_flight_timeout",
            |_, s: &State| {
                s.timeouts > 0 || s.answers.iter().flatten().all(|a| *a != Response::Error)
            },
        ),
        Property::always(
            "no write of a fenced-out holder is visible",
            |_, s: &State| {
                s.rows
                    .iter()
                    .flatten()
                    .all(|row| fold(&row.events).is_some())
            },
        ),
        Property::sometimes(
            "a copy meets its key's expired claim still running, and gets 409",
            |_, s: &State| {
                s.timeouts == 0
                    && s.rows.iter().flatten().all(|row| !row.current.completed)
                    && s.answers.iter().flatten().any(|a| *a == Response::Conflict)
            },
        ),
        Property::sometimes(
            "an expired claim that completed is replaced by a new decision",
            |_, s: &State| {
                s.timeouts == 0
                    && s.rows
                        .iter()
                        .flatten()
                        .any(|row| row.current.generation > T0)
                    && s.answers
                        .iter()
                        .flatten()
                        .filter(|a| matches!(a, Response::First(_)))
                        .count()
                        == 2
            },
        ),
    ]
}
