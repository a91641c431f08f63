//! The rules by which a store decides a key's claim, in one place. The sled store applies them
//! with compare-and-swap on its index and log keys (`sled/claims.rs`), the PostgreSQL store
//! states them in the `WHERE` clauses of its statements (`postgres/batch.rs`), and the model
//! checker (`model/`) runs these functions as its store, so that the protocol it checks decides
//! as the stores do. Which parts of a unit are written once its claim write is decided
//! ([`writes_with`]) is decided here too, and the same goes for a delivery's lease and records.
//! Fencing can be switched off ([`Fencing::Off`]): a sabotaged run, which a checker must catch.

use idem_schemas::ClaimEvent;

use crate::store::{LogHead, Written};

/// Whether a store refuses stale writers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fencing {
    /// It does: every rule below holds.
    On,
    /// It grants every start, append, take-over and record (a sabotaged run only).
    Off,
}

impl Fencing {
    /// This process's fencing: on, unless the `sabotage` switch of a failpoints build is.
    pub fn in_force() -> Fencing {
        match crate::failpoint::switched_on("sabotage") {
            true => Fencing::Off,
            false => Fencing::On,
        }
    }

    /// `rule`'s answer under this fencing.
    fn grants(self, rule: bool) -> bool {
        rule || self == Fencing::Off
    }
}

/// What a store holds of a key's current generation, as the rules read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Current {
    /// The generation (its fencing token).
    pub generation: u64,
    /// When it expires (unix milliseconds).
    pub expires_at_ms: u64,
    /// How many writes its log holds.
    pub writes: u32,
    /// Whether its log ends `completed`.
    pub completed: bool,
    /// When it was claimed (unix milliseconds).
    pub claimed_at_ms: u64,
}

/// Whether the generation `current` is replaceable at `now_ms`: it has expired, and it is
/// completed or has been in flight for `in_flight_timeout_ms`. An expired claim whose decision
/// is still running (a key or a subject's window shorter than its callbacks) holds the key until
/// then, so the next request cannot fence its records.
pub fn replaceable(current: &Current, now_ms: u64, in_flight_timeout_ms: u64) -> bool {
    current.expires_at_ms <= now_ms
        && (current.completed
            || current.claimed_at_ms.saturating_add(in_flight_timeout_ms) <= now_ms)
}

/// Whether a generation whose first write is `events` is completed from the start: a decision
/// with nothing to run (or with queued callbacks) is claimed, recorded and completed at once.
pub fn completed_from_the_start(events: &[ClaimEvent]) -> bool {
    events.last() == Some(&ClaimEvent::Completed)
}

/// Whether a new generation claimed at `claimed_at_ms` may start: no generation holds the key,
/// or the one that did is [`replaceable`] by then. Otherwise the start is answered with what
/// holds it.
pub fn may_start(
    current: Option<&Current>,
    claimed_at_ms: u64,
    in_flight_timeout_ms: u64,
    fencing: Fencing,
) -> bool {
    fencing.grants(current.is_none_or(|c| replaceable(c, claimed_at_ms, in_flight_timeout_ms)))
}

/// Whether the writer that last wrote at `head` may append: its generation is still the key's
/// current one, and the log ends where it last wrote. Otherwise it is fenced out, and nothing of
/// its unit is written.
pub fn may_append(current: Option<&Current>, head: &LogHead, fencing: Fencing) -> bool {
    fencing
        .grants(current.is_some_and(|c| c.generation == head.generation && c.writes == head.next))
}

/// Whether the generation at `head` may be taken over: as for an append, and its holder is gone
/// (`holder_gone`: its node's heartbeat has expired, or the claim has been in flight for
/// `in_flight_timeout`, both by the store's clock). A take-over grants a new generation, which
/// fences every later write of the old holder.
pub fn may_take_over(
    current: Option<&Current>,
    head: &LogHead,
    holder_gone: bool,
    fencing: Fencing,
) -> bool {
    fencing.grants(holder_gone && may_append(current, head, Fencing::On))
}

/// Whether a unit's other writes (the delivery logs and decisions it carries) are made, once its
/// claim write came to `claim`: with a claim write that was made, or with none; never with a
/// start that lost to another generation or an append that was fenced, so a refused claim
/// leaves nothing of its unit behind. A store that writes the delivery logs before the claim
/// record asks this of what it found before writing either.
pub fn writes_with(claim: &Written) -> bool {
    !matches!(claim, Written::Held(_) | Written::Fenced)
}

/// Whether a due delivery may be leased: no lease on it is live. A lease grants a new token.
pub fn may_lease(due: bool, lease_live: bool) -> bool {
    due && !lease_live
}

/// Whether records from `first_seq`, written under `lease` (the token its writer was granted,
/// none for a write no lease guards: a new delivery, a redelivery), may be appended to a
/// delivery log of `records` records whose current lease token is `token`: the log ends where
/// the writer read it, and a leased writer still holds the current lease. Otherwise the write is
/// fenced, and nothing of it is written.
pub fn may_record(
    records: u32,
    token: u64,
    first_seq: u32,
    lease: Option<u64>,
    fencing: Fencing,
) -> bool {
    fencing.grants(records == first_seq && lease.is_none_or(|l| l == token))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::ClaimId;

    fn head(generation: u64, next: u32) -> LogHead {
        LogHead {
            id: ClaimId {
                tenant: "acme".into(),
                digest: [1; 32],
            },
            generation,
            expires_at_ms: 500,
            next,
        }
    }

    const IFT: u64 = 1_000;

    #[test]
    fn a_start_waits_for_expiry_and_an_append_for_its_generation_and_place() {
        let current = Current {
            generation: 100,
            expires_at_ms: 500,
            writes: 1,
            completed: true,
            claimed_at_ms: 100,
        };
        let on = Fencing::On;
        assert!(may_start(None, 200, IFT, on));
        assert!(!may_start(Some(&current), 499, IFT, on));
        assert!(may_start(Some(&current), 500, IFT, on));
        assert!(may_append(Some(&current), &head(100, 1), on));
        assert!(
            !may_append(Some(&current), &head(99, 1), on),
            "an older generation"
        );
        assert!(
            !may_append(Some(&current), &head(100, 2), on),
            "past the log's end"
        );
        assert!(
            !may_append(Some(&current), &head(100, 0), on),
            "behind the log's end"
        );
        assert!(!may_append(None, &head(100, 1), on));
        assert!(may_take_over(Some(&current), &head(100, 1), true, on));
        assert!(
            !may_take_over(Some(&current), &head(100, 1), false, on),
            "a live holder"
        );
        // Without fencing, everything is granted.
        let off = Fencing::Off;
        assert!(may_start(Some(&current), 499, IFT, off));
        assert!(may_append(Some(&current), &head(99, 1), off));
        assert!(may_take_over(Some(&current), &head(99, 1), false, off));
    }

    #[test]
    fn an_expired_claim_is_replaceable_once_completed_or_in_flight_too_long() {
        let in_flight = Current {
            generation: 100,
            expires_at_ms: 500,
            writes: 1,
            completed: false,
            claimed_at_ms: 100,
        };
        let on = Fencing::On;
        assert!(!may_start(Some(&in_flight), 499, IFT, on), "not expired");
        assert!(
            !may_start(Some(&in_flight), 500, IFT, on),
            "expired, its decision still running"
        );
        assert!(!may_start(Some(&in_flight), 1_099, IFT, on));
        assert!(
            may_start(Some(&in_flight), 1_100, IFT, on),
            "in flight for in_flight_timeout"
        );
        let completed = Current {
            completed: true,
            ..in_flight
        };
        assert!(may_start(Some(&completed), 500, IFT, on));
        assert!(!may_start(Some(&completed), 499, IFT, on));
        // A window longer than in_flight_timeout: expiry is the only condition left.
        let long = Current {
            expires_at_ms: 100 + 2 * IFT,
            ..in_flight
        };
        assert!(may_start(Some(&long), 100 + 2 * IFT, IFT, on));
        assert!(may_start(Some(&in_flight), 600, IFT, Fencing::Off));
    }

    #[test]
    fn a_refused_claim_write_leaves_the_rest_of_its_unit_unwritten() {
        let log = crate::store::ClaimLog {
            events: Vec::new(),
            head: head(100, 1),
        };
        assert!(writes_with(&Written::Nothing));
        assert!(writes_with(&Written::Claimed(head(100, 1), Vec::new())));
        assert!(writes_with(&Written::Appended(head(100, 2), Vec::new())));
        assert!(writes_with(&Written::TakenOver(head(101, 1))));
        assert!(!writes_with(&Written::Held(log)));
        assert!(!writes_with(&Written::Fenced));
    }

    #[test]
    fn a_delivery_record_needs_its_place_and_the_current_lease() {
        let on = Fencing::On;
        assert!(may_lease(true, false));
        assert!(!may_lease(true, true), "a live lease");
        assert!(!may_lease(false, false), "not due");
        assert!(may_record(3, 7, 3, Some(7), on));
        assert!(may_record(3, 7, 3, None, on), "no lease guards it");
        assert!(
            !may_record(3, 8, 3, Some(7), on),
            "the lease was granted again"
        );
        assert!(
            !may_record(4, 7, 3, Some(7), on),
            "another writer went first"
        );
        assert!(may_record(4, 8, 3, Some(7), Fencing::Off));
    }
}
