//! Claim logs in sled. A key's current generation is named by its index entry in `claims`; its
//! log is a few entries of `claim_logs`, one per write, keyed so that logs are stored in the
//! order they expire, which is the order they are made: the leaves a request writes are the few
//! newest ones, which stay in sled's cache, a lookup by key descends only the small index, and
//! an append writes only its own records. A log's last record, `completed`, is a flag on its
//! index entry rather than an entry of its own: rewriting a small value that exists costs sled
//! far less than one more entry in leaves it consolidates and splits.
//!
//! The index decides who holds a key: a new generation is written only while no unexpired one
//! is named there (a compare-and-swap against nothing, or against the expired entry that swap
//! found), and an append only while the index
//! still names the appender's generation and its log ends where the appender last wrote. Within
//! one process a key has one writer (its claim actor), and sled's lock on the data directory
//! keeps other processes out, so these checks refuse stale writers rather than settle races.
//! The sweeper walks `claim_logs` from its oldest entry and removes what expired; an expired
//! generation reads as no claim at all.

use idem_schemas::ClaimEvent;

use super::keys::{claim_key, log_key, log_prefix, split_log_key, Index};
use super::SledStore;
use crate::codec;
use crate::store::rule::{self, Fencing};
use crate::store::{ClaimId, ClaimLog, ClaimStore, LogHead, Read, StoreError, Written};

impl ClaimStore for SledStore {
    fn load_claim<'a>(&'a self, id: &'a ClaimId, now_ms: u64) -> Read<'a, Option<ClaimLog>> {
        // Halted, sled's cache may hold records that never reached the disk: none is answered.
        let read = self
            .commits
            .usable()
            .and_then(|()| self.read_claim(id, now_ms));
        Box::pin(std::future::ready(read))
    }

    fn complete_claim(&self, head: &LogHead) -> Result<(), StoreError> {
        self.commits.usable()?;
        let current = Index::of(head);
        // Completion only tells when an expired generation may be replaced. One replaceable at
        // its expiry without it (its window no shorter than `in_flight_timeout`) is left
        // reading `dispatched`, from which every retry answers the same stored bytes, rather
        // than have its index entry rewritten for nothing.
        let in_flight = current.current();
        if rule::replaceable(&in_flight, head.expires_at_ms, self.in_flight_timeout_ms) {
            return Ok(());
        }
        let completed = Index {
            completed: true,
            ..current
        };
        // Only while the index still names this log: a newer generation is left alone.
        let _ = self.claims.compare_and_swap(
            claim_key(&head.id),
            Some(current.value()),
            Some(completed.value()),
        )?;
        Ok(())
    }

    fn sweep_claims(&self, now_ms: u64, limit: usize) -> Result<usize, StoreError> {
        let mut swept = 0;
        // Up to `in_flight_timeout` before now: a log that expired by then is replaceable,
        // completed or not (it was claimed before it expired). One that expired since may still
        // hold its key (`rule::replaceable`) and is left to a later sweep.
        let before = now_ms.saturating_sub(self.in_flight_timeout_ms);
        for key in self
            .claim_logs
            .range(..before.to_be_bytes().to_vec())
            .keys()
            .take(limit)
        {
            let key = key?;
            let (expires_at_ms, claim, generation, seq) = split_log_key(&key)?;
            if seq == 0 {
                // The index first: a crash that loses the log's removal leaves it to the next
                // sweep, never an index entry nothing will come back for. It goes only if it
                // still names this log (completed or not).
                let this = Index {
                    expires_at_ms,
                    generation,
                    completed: false,
                };
                if let Some(found) = self.claims.get(claim)? {
                    if Index::parse(&found)?.same_log(&this) {
                        let _ = self.claims.compare_and_swap(
                            claim,
                            Some(found),
                            None as Option<&[u8]>,
                        )?;
                    }
                }
            }
            self.claim_logs.remove(&key)?;
            swept += 1;
        }
        Ok(swept)
    }
}

impl SledStore {
    /// The key's current generation, if it has one that has not expired at `now_ms`.
    pub(super) fn read_claim(
        &self,
        id: &ClaimId,
        now_ms: u64,
    ) -> Result<Option<ClaimLog>, StoreError> {
        let Some(index) = self.claims.get(claim_key(id))? else {
            return Ok(None);
        };
        let index = Index::parse(&index)?;
        // A replaceable claim is no claim (the key is free again), whatever the sweeper has or
        // has not removed of it yet.
        if rule::replaceable(&index.current(), now_ms, self.in_flight_timeout_ms) {
            return Ok(None);
        }
        let mut head = LogHead {
            id: id.clone(),
            generation: index.generation,
            expires_at_ms: index.expires_at_ms,
            next: 0,
        };
        let prefix = log_prefix(&head);
        let mut events = Vec::new();
        for item in self.claim_logs.scan_prefix(&prefix) {
            let (key, value) = item?;
            if key.get(prefix.len()..) != Some(&head.next.to_be_bytes()[..]) {
                return Err(StoreError::Malformed("claim_logs"));
            }
            events.extend(
                codec::decode_entry(&value).map_err(|_| StoreError::Malformed("claim_logs"))?,
            );
            head.next += 1;
        }
        // An index naming a log that is not there, before its expiry, is damage, not a free key.
        if head.next == 0 {
            return Err(StoreError::Malformed("claims"));
        }
        // A log written without actions carries `completed` in its one entry.
        if index.completed && events.last() != Some(&ClaimEvent::Completed) {
            events.push(ClaimEvent::Completed);
        }
        Ok(Some(ClaimLog { events, head }))
    }

    /// Starts a generation of `id` with `events`, unless an unexpired one holds the key.
    pub(super) fn start_claim(
        &self,
        id: ClaimId,
        events: Vec<ClaimEvent>,
    ) -> Result<Written, StoreError> {
        let head = first_head(id, &events)?;
        let now_ms = head.generation;
        let key = claim_key(&head.id);
        // The log first, only where nothing is (a writer of the same generation would be there
        // already); the index last: a crash between the two leaves a log nothing names, swept
        // in time, never an index naming no log. A start that loses removes its log again.
        let first = log_key(&log_prefix(&head), 0);
        let written = self.claim_logs.compare_and_swap(
            &first,
            None as Option<&[u8]>,
            Some(codec::encode_entry(&events)?),
        )?;
        if written.is_err() && fencing() {
            return self.held(&head.id, now_ms);
        }
        // Most starts are of a key never claimed (its actor found nothing a moment ago), so the
        // index is written where nothing is, in one descent, without reading it first. Only
        // when something is there does it count: a generation that expired is replaced, if it
        // is still what was found; one that holds the key wins.
        let index = Index::started(&head, &events).value();
        let named =
            match self
                .claims
                .compare_and_swap(&key, None as Option<&[u8]>, Some(index.clone()))?
            {
                Err(found) => match self.held_at(found.current.as_deref(), now_ms) {
                    Ok(false) => self
                        .claims
                        .compare_and_swap(&key, found.current, Some(index))?,
                    Ok(true) => Err(found),
                    Err(damaged) => {
                        self.claim_logs.remove(&first)?;
                        return Err(damaged);
                    }
                },
                named => named,
            };
        if named.is_err() && fencing() {
            self.claim_logs.remove(&first)?;
            return self.held(&head.id, now_ms);
        }
        Ok(Written::Claimed(head, events))
    }

    /// What a start of `id` with `events` would lose to, if anything holds the key: asked
    /// before the start's delivery logs are written, which must precede its claim record on
    /// disk. The key's one actor is its only writer in this process, so the answer holds until
    /// the start is applied.
    pub(super) fn refuses_start(
        &self,
        id: &ClaimId,
        events: &[ClaimEvent],
    ) -> Result<Option<Written>, StoreError> {
        let Some(ClaimEvent::Claimed(claim)) = events.first() else {
            return Err(StoreError::NotAClaim);
        };
        let current = self.claims.get(claim_key(id))?;
        match self.held_at(current.as_deref(), claim.claimed_at_ms)? {
            true => Ok(Some(self.held(id, claim.claimed_at_ms)?)),
            false => Ok(None),
        }
    }

    /// Appends `events` to the generation at `head`, which the caller found current
    /// ([`SledStore::is_current`]); fenced if its log has moved past `head`.
    pub(super) fn append_claim(
        &self,
        head: LogHead,
        events: Vec<ClaimEvent>,
    ) -> Result<Written, StoreError> {
        // Written only where nothing is: one descent that checks and writes.
        let appended = self.claim_logs.compare_and_swap(
            log_key(&log_prefix(&head), head.next),
            None as Option<&[u8]>,
            Some(codec::encode_entry(&events)?),
        )?;
        if appended.is_err() {
            return Ok(Written::Fenced);
        }
        let next = head.next + 1;
        Ok(Written::Appended(LogHead { next, ..head }, events))
    }

    /// Whether the key's index still names the generation at `head` (sabotage aside).
    pub(super) fn is_current(&self, head: &LogHead) -> Result<bool, StoreError> {
        let found = match self.claims.get(claim_key(&head.id))? {
            Some(found) => Index::parse(&found)?,
            None => return Ok(!fencing()),
        };
        Ok(found.same_log(&Index::of(head)) || !fencing())
    }

    /// Whether an append at `head` may be written ([`rule::may_append`]): the key's index still
    /// names its generation, and its log ends where its writer last wrote. Asked before the
    /// delivery logs an append carries are written, which must precede its record on disk.
    pub(super) fn may_append(&self, head: &LogHead) -> Result<bool, StoreError> {
        let next = log_key(&log_prefix(head), head.next);
        let ends_there = !self.claim_logs.contains_key(next)?;
        Ok(self.is_current(head)? && (ends_there || !fencing()))
    }

    /// Whether the key's index entry `current` names a generation that holds the key at
    /// `now_ms`, so a new start loses (sabotage aside).
    fn held_at(&self, current: Option<&[u8]>, now_ms: u64) -> Result<bool, StoreError> {
        let Some(found) = current else {
            return Ok(false);
        };
        let held = Index::parse(found)?.current();
        Ok(!rule::may_start(
            Some(&held),
            now_ms,
            self.in_flight_timeout_ms,
            Fencing::in_force(),
        ))
    }

    /// What holds the key, for a start that lost to it.
    fn held(&self, id: &ClaimId, now_ms: u64) -> Result<Written, StoreError> {
        Ok(match self.read_claim(id, now_ms)? {
            Some(log) => Written::Held(log),
            // What won has expired or been swept meanwhile: the start lost all the same.
            None => Written::Fenced,
        })
    }
}

/// Whether the store refuses stale writers: always, except in a sabotaged run (failpoints
/// builds only), which switches fencing off to show that the simulation's checker catches it.
fn fencing() -> bool {
    Fencing::in_force() == Fencing::On
}

/// The head of a new generation of `id` whose log starts with `events` (its claim first).
pub(super) fn first_head(id: ClaimId, events: &[ClaimEvent]) -> Result<LogHead, StoreError> {
    let Some(ClaimEvent::Claimed(claim)) = events.first() else {
        return Err(StoreError::NotAClaim);
    };
    Ok(LogHead {
        id,
        generation: claim.claimed_at_ms,
        expires_at_ms: claim.expires_at_ms,
        next: 1,
    })
}
