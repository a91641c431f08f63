//! The rules by which a store decides a key's claim, in one place. The sled store applies them
//! with compare-and-swap on its index and log keys (`sled/claims.rs`), the PostgreSQL store
//! states them in the `WHERE` clauses of its statements (`postgres/batch.rs`), and the model
//! checker (`model/`) runs these functions as its store, so that the protocol it checks decides
//! as the stores do. The same goes for a delivery's lease and records.

use crate::store::LogHead;

/// What a store holds of a key's current generation, as the rules read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Current {
    /// The generation (its fencing token).
    pub generation: u64,
    /// When it expires (unix milliseconds).
    pub expires_at_ms: u64,
    /// How many writes its log holds.
    pub writes: u32,
}

/// Whether a new generation claimed at `claimed_at_ms` may start: no generation holds the key,
/// or the one that did has expired by then. Otherwise the start is answered with what holds it.
pub fn may_start(current: Option<&Current>, claimed_at_ms: u64) -> bool {
    current.is_none_or(|c| c.expires_at_ms <= claimed_at_ms)
}

/// Whether the writer that last wrote at `head` may append: its generation is still the key's
/// current one, and the log ends where it last wrote. Otherwise it is fenced out, and nothing of
/// its unit is written.
pub fn may_append(current: Option<&Current>, head: &LogHead) -> bool {
    current.is_some_and(|c| c.generation == head.generation && c.writes == head.next)
}

/// Whether the generation at `head` may be taken over: as for an append, and its holder is gone
/// (`holder_gone`: its node's heartbeat has expired, or the claim has been in flight for
/// `in_flight_timeout`, both by the store's clock). A take-over grants a new generation, which
/// fences every later write of the old holder.
pub fn may_take_over(current: Option<&Current>, head: &LogHead, holder_gone: bool) -> bool {
    holder_gone && may_append(current, head)
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
pub fn may_record(records: u32, token: u64, first_seq: u32, lease: Option<u64>) -> bool {
    records == first_seq && lease.is_none_or(|l| l == token)
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

    #[test]
    fn a_start_waits_for_expiry_and_an_append_for_its_generation_and_place() {
        let current = Current {
            generation: 100,
            expires_at_ms: 500,
            writes: 1,
        };
        assert!(may_start(None, 200));
        assert!(!may_start(Some(&current), 499));
        assert!(may_start(Some(&current), 500));
        assert!(may_append(Some(&current), &head(100, 1)));
        assert!(
            !may_append(Some(&current), &head(99, 1)),
            "an older generation"
        );
        assert!(
            !may_append(Some(&current), &head(100, 2)),
            "past the log's end"
        );
        assert!(
            !may_append(Some(&current), &head(100, 0)),
            "behind the log's end"
        );
        assert!(!may_append(None, &head(100, 1)));
        assert!(may_take_over(Some(&current), &head(100, 1), true));
        assert!(
            !may_take_over(Some(&current), &head(100, 1), false),
            "a live holder"
        );
    }

    #[test]
    fn a_delivery_record_needs_its_place_and_the_current_lease() {
        assert!(may_lease(true, false));
        assert!(!may_lease(true, true), "a live lease");
        assert!(!may_lease(false, false), "not due");
        assert!(may_record(3, 7, 3, Some(7)));
        assert!(may_record(3, 7, 3, None), "no lease guards it");
        assert!(!may_record(3, 8, 3, Some(7)), "the lease was granted again");
        assert!(!may_record(4, 7, 3, Some(7)), "another writer went first");
    }
}
