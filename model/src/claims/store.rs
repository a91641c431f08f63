//! The store the claim model simulates: a unit is granted or refused by `store::rule`, as sled
//! and PostgreSQL decide it, and answered with a real `Written`; a granted one writes its
//! claim's row (its current generation, holder and events) and the deliveries it carries. A
//! sabotage switches fencing off, or lets an expired claim be replaced while its decision runs.
//! Also how the store sees a holder (gone or not) and what a row has recorded.

use idem_actors::claim::phase::Phase;
use idem_actors::store::rule::{self, Current, Fencing};
use idem_actors::store::{ClaimLog, ClaimWrite, LogHead, Unit, Written};
use idem_schemas::{ClaimEvent, DeliveryEvent, DeliveryStatus, StoredResponse};

use super::scenario::{Sabotage, IN_FLIGHT_TIMEOUT};
use super::state::{ClaimRow, State, StoredDelivery};
use super::ClaimModel;
use crate::head_of;

impl State {
    /// Whether the store sees the holder of `row` as gone: timed out, or its node's heartbeat
    /// expired (crashed: another epoch; or stalled).
    fn holder_gone(&self, row: &ClaimRow) -> bool {
        row.timed_out
            || !self
                .nodes
                .iter()
                .any(|n| n.epoch == row.holder && !n.stalled)
    }

    /// The recorded response of claim `claim`, if its row folds to one.
    pub(super) fn recorded(&self, claim: usize) -> Option<StoredResponse> {
        fold(&self.rows[claim].as_ref()?.events)?
            .response()
            .cloned()
    }
}

pub(super) fn fold(events: &[ClaimEvent]) -> Option<Phase> {
    events
        .iter()
        .cloned()
        .try_fold(Phase::Free, |phase, event| phase.apply(event))
        .ok()
}

impl ClaimModel {
    fn fencing(&self) -> Fencing {
        match self.sabotage {
            Some(Sabotage::NoFencing) => Fencing::Off,
            _ => Fencing::On,
        }
    }

    /// A unit reaches the store, which decides it by `store::rule`; what it came to.
    pub(super) fn store(&self, s: &mut State, epoch: u64, claim: usize, unit: &Unit) -> Written {
        let fencing = self.fencing();
        let current = s.rows[claim].as_ref().map(|r| r.current);
        let id = &self.claims[claim];
        let held = |s: &State| match &s.rows[claim] {
            Some(row) => Written::Held(ClaimLog {
                events: row.events.clone(),
                head: head_of(id, &row.current),
            }),
            None => Written::Fenced,
        };
        let written = match unit.claim_write() {
            None => Written::Nothing,
            Some(ClaimWrite::Start(_, events)) => {
                let Some(ClaimEvent::Claimed(c)) = events.first() else {
                    return Written::Fenced;
                };
                let in_flight_timeout_ms = match self.sabotage {
                    Some(Sabotage::ReplaceOnExpiry) => 0,
                    _ => IN_FLIGHT_TIMEOUT.as_millis() as u64,
                };
                match rule::may_start(
                    current.as_ref(),
                    c.claimed_at_ms,
                    in_flight_timeout_ms,
                    fencing,
                ) {
                    true => {
                        let row = ClaimRow {
                            current: Current {
                                generation: c.claimed_at_ms,
                                expires_at_ms: c.expires_at_ms,
                                writes: 1,
                                completed: false,
                                claimed_at_ms: c.claimed_at_ms,
                            },
                            holder: c.holder,
                            timed_out: false,
                            events: events.clone(),
                        };
                        let head = head_of(id, &row.current);
                        s.rows[claim] = Some(row);
                        Written::Claimed(head, events.clone())
                    }
                    false => held(s),
                }
            }
            Some(ClaimWrite::Append(head, events)) => {
                let granted = rule::may_append(current.as_ref(), head, fencing);
                match s.rows[claim].as_mut() {
                    Some(row) if granted => {
                        row.events.extend(events.iter().cloned());
                        row.current.writes += 1;
                        let next = LogHead {
                            next: head.next + 1,
                            ..head.clone()
                        };
                        Written::Appended(next, events.clone())
                    }
                    _ => Written::Fenced,
                }
            }
            Some(ClaimWrite::TakeOver(head)) => {
                let gone = s.rows[claim].as_ref().is_some_and(|row| s.holder_gone(row));
                let granted = rule::may_take_over(current.as_ref(), head, gone, fencing);
                match s.rows[claim].as_mut() {
                    Some(row) if granted => {
                        row.current.generation += 1;
                        row.holder = epoch;
                        row.timed_out = false;
                        Written::TakenOver(LogHead {
                            generation: row.current.generation,
                            ..head.clone()
                        })
                    }
                    _ => held(s),
                }
            }
        };
        if !rule::writes_with(&written) && !unit.delivery_writes().is_empty() {
            s.refused_deliveries = true;
        }
        if rule::writes_with(&written) {
            for write in unit.delivery_writes() {
                // A new delivery that exists is left as it is (a take-over meeting an earlier
                // holder's), as both stores do.
                if write.first_seq != 0 || s.deliveries.iter().any(|d| d.id == write.id) {
                    continue;
                }
                if let Some(DeliveryEvent::Created(record)) = write.events.first() {
                    s.deliveries.push(StoredDelivery {
                        id: record.id.clone(),
                        decision: record.decision_id.clone(),
                        body: record.body.clone(),
                        due: write.to.status == DeliveryStatus::Queued,
                    });
                }
            }
        }
        written
    }
}
