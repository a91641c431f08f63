//! What a decision writes, with no I/O: given how far a decision (or a bulk redelivery) has come,
//! the one unit that makes it durable (with the response it records) and what to count. Every
//! place that writes a decision calls [`writes`]: the claim core (a claim, a claim recorded and
//! completed in the same write, a recovery point, one through the subject's claim), the keyless
//! path, a bulk redelivery, and so the model checker, which drives the core and the bulk rule.
//!
//! The rules it keeps: a decision's delivery logs, its kept record and its SETs' keys are
//! written in the same unit as the claim record that makes the decision durable, never without
//! it; a decision whose actions ran inline records their outcomes and the response built from
//! them (the recovery point) in one unit, after which a retry only answers that response.

use idem_schemas::stored::stream_of;
use idem_schemas::{
    ActionOutcome, Claim, ClaimEvent, Decision, DecisionRecord, Redelivered, StoredResponse,
};

use crate::delivery::new_logs;
use crate::metrics::Metric;
use crate::settings::Settings;
use crate::store::{ClaimId, ClaimWrite, LogHead, Unit};

/// How far a decision has come: what is to be written. Made to be handed to [`writes`] at
/// once, never kept: a claim moves through it unboxed.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Decided<'a> {
    /// A keyless signal's decision, whose inline attempts gave `outcomes`: its deliveries and
    /// its record, under no claim.
    Keyless {
        /// The decision.
        decision: &'a Decision,
        /// Its inline attempts' outcomes.
        outcomes: &'a [ActionOutcome],
    },
    /// A new claim of `id`, its decision fixed and durable before any action runs. With
    /// `at_once`, nothing runs between its claim and its answer (it has no callbacks, or they
    /// are queued): the claim, its recovery point and its completion are one write, with its
    /// queued deliveries and its record.
    Claimed {
        /// The key's claim.
        id: ClaimId,
        /// The claim, with its decision.
        claim: Claim,
        /// Recorded and completed in the same write.
        at_once: bool,
        /// Its decision may have run before (offered again after a take-over): delivery logs
        /// of it that exist are left as they are.
        may_have_run: bool,
    },
    /// The recovery point of the claim at `head`: its decision's inline attempts gave
    /// `outcomes`, and the response built from them is what every retry answers from now on.
    RecoveryPoint {
        /// The claim's log.
        head: LogHead,
        /// Its decision.
        decision: &'a Decision,
        /// Its inline attempts' outcomes.
        outcomes: Vec<ActionOutcome>,
        /// The run took over a claim whose holder is gone (delivery logs of it may exist).
        taken_over: bool,
    },
    /// The recovery point of the claim at `head` through its subject's claim: the `response`
    /// that claim answered, and no delivery of its own. With `another`, it is another
    /// decision's: this one's SETs will never be sent.
    Subject {
        /// The claim's log.
        head: LogHead,
        /// Its decision.
        decision: &'a Decision,
        /// The subject's claim's response.
        response: StoredResponse,
        /// The response is another decision's.
        another: bool,
    },
    /// A bulk redelivery's answer (see [`redelivered`]), recorded and completed in its claim at
    /// `head`.
    Redelivered {
        /// The bulk claim's log.
        head: LogHead,
        /// Its answer.
        response: StoredResponse,
    },
}

/// What a decision writes.
#[derive(Debug)]
pub struct Writes {
    /// The unit that makes it durable.
    pub unit: Unit,
    /// What to count for its deliveries.
    pub counts: Vec<Metric>,
}

impl Writes {
    /// The response the unit records in its claim, if it records one.
    pub fn response(&self) -> Option<&StoredResponse> {
        let (ClaimWrite::Start(_, events) | ClaimWrite::Append(_, events)) =
            self.unit.claim_write()?
        else {
            return None;
        };
        events.iter().find_map(|event| match event {
            ClaimEvent::Dispatched { response, .. } => Some(response),
            _ => None,
        })
    }
}

/// The writes of `decided`, under `settings`.
pub fn writes(decided: Decided<'_>, settings: &Settings) -> Result<Writes, serde_json::Error> {
    let kept =
        |decision: &Decision| DecisionRecord::kept_for(decision, settings.decisions.retention);
    Ok(match decided {
        Decided::Keyless { decision, outcomes } => {
            // Queued callbacks are durable in the retry queue before the response says so.
            let logs = new_logs(decision, outcomes, settings);
            let unit = Unit::new()
                .keep_set_keys(crate::set::keys(decision))
                .write_deliveries(logs.writes)
                .record_decision(kept(decision));
            Writes {
                unit,
                counts: logs.counts,
            }
        }
        Decided::Claimed {
            id,
            claim,
            at_once: false,
            ..
        } => {
            // The claim, with its decision and every callback body, is durable before any
            // action runs (they start once it is): a crash from here on resumes this decision,
            // never a new one. The keys of its SETs are kept beside it, durable with it.
            let keys = crate::set::keys(&claim.decision);
            let unit = Unit::new()
                .start_claim(id, vec![ClaimEvent::Claimed(claim)])
                .keep_set_keys(keys);
            Writes {
                unit,
                counts: Vec::new(),
            }
        }
        Decided::Claimed {
            id,
            claim,
            at_once: true,
            may_have_run,
        } => {
            // Nothing runs between this decision's claim, recovery point and completion, so
            // there is no side effect to guard: the three records are one durable write,
            // answered once it is durable. Queued deliveries are in the same unit, which the
            // store writes as one, so they are durable with the claim, never without it: after
            // a crash the retry queue resumes them.
            let decision = &claim.decision;
            let response = response(decision, &[])?;
            let logs = new_logs(decision, &[], settings);
            let (record, keys) = (kept(decision), crate::set::keys(decision));
            let events = vec![
                ClaimEvent::Claimed(claim),
                ClaimEvent::Dispatched {
                    outcomes: Vec::new(),
                    response,
                },
                ClaimEvent::Completed,
            ];
            let unit = Unit::new()
                .write_deliveries(logs.writes)
                .start_claim(id, events)
                .record_decision(record)
                .keep_set_keys(keys);
            Writes {
                unit: if may_have_run {
                    unit.skipping_existing()
                } else {
                    unit
                },
                counts: logs.counts,
            }
        }
        Decided::RecoveryPoint {
            head,
            decision,
            outcomes,
            taken_over,
        } => {
            // Once the outcomes and the response built from them are durable, a retry answers
            // that response and never runs the actions again. The delivery logs (queued ones
            // enter the retry queue) are in the same unit, written first, so they are durable
            // no later.
            let response = response(decision, &outcomes)?;
            let logs = new_logs(decision, &outcomes, settings);
            let dispatched = ClaimEvent::Dispatched { outcomes, response };
            let unit = Unit::new()
                .write_deliveries(logs.writes)
                .record_decision(kept(decision))
                .append_claim(head, vec![dispatched]);
            Writes {
                unit: if taken_over {
                    unit.skipping_existing()
                } else {
                    unit
                },
                counts: logs.counts,
            }
        }
        Decided::Subject {
            head,
            decision,
            response,
            another,
        } => {
            let dispatched = ClaimEvent::Dispatched {
                outcomes: Vec::new(),
                response,
            };
            let mut unit = Unit::new().append_claim(head, vec![dispatched]);
            // Another decision's actions ran instead: this one's SETs will never be sent.
            if another {
                let sets = decision.deliveries.iter();
                let sets = sets.filter(|d| stream_of(&d.url).is_some());
                unit = unit.erase_set_keys(sets.map(|d| d.id.clone()).collect());
            }
            Writes {
                unit,
                counts: Vec::new(),
            }
        }
        Decided::Redelivered { head, response } => {
            // Once durable, a retry answers these bytes and redelivers nothing.
            let events = vec![
                ClaimEvent::Dispatched {
                    outcomes: Vec::new(),
                    response,
                },
                ClaimEvent::Completed,
            ];
            Writes {
                unit: Unit::new().append_claim(head, events),
                counts: Vec::new(),
            }
        }
    })
}

/// The `201` of a decision's first processing, given its actions' outcomes.
pub fn response(
    decision: &Decision,
    outcomes: &[ActionOutcome],
) -> Result<StoredResponse, serde_json::Error> {
    Ok(StoredResponse {
        status: 201,
        body: serde_json::to_vec(&decision.response(outcomes))?,
        trace: decision.trace,
    })
}

/// The `202` of a bulk redelivery that redelivered `count` deliveries.
pub fn redelivered(count: u64) -> Result<StoredResponse, serde_json::Error> {
    Ok(StoredResponse {
        status: 202,
        body: serde_json::to_vec(&Redelivered { redelivered: count })?,
        trace: None,
    })
}
