//! What a commit came to: the records it made durable folded into the phase, and what follows
//! (the actions run, the recovery point completed, the answer given); or the key held by
//! another generation or holder, whose log answers the request; or a take-over granted; or the
//! write fenced out.

use idem_schemas::StoredResponse;

use super::{Context, Core};
use crate::claim::effect::{Effect, Effects};
use crate::claim::phase::{self, AfterCommit, Invariant, Step};
use crate::claim::{ClaimError, Reply};
use crate::metrics::Metric;
use crate::store::{ClaimLog, StoreError, Written};

impl<P> Core<P> {
    /// What a unit committed for `generation` came to, heard at `now_ms`.
    pub fn committed(
        &mut self,
        cx: &Context,
        generation: u64,
        outcome: Result<Written, StoreError>,
        now_ms: u64,
        out: &mut Effects<P>,
    ) {
        if generation != self.generation || !self.busy() || self.deciding.is_some() {
            return;
        }
        if let Err(e) = self.after_commit(cx, outcome, now_ms, out) {
            self.fail(std::sync::Arc::new(e), out);
        }
    }

    fn after_commit(
        &mut self,
        cx: &Context,
        outcome: Result<Written, StoreError>,
        now_ms: u64,
        out: &mut Effects<P>,
    ) -> Result<(), ClaimError> {
        match outcome? {
            Written::Claimed(head, events) | Written::Appended(head, events) => {
                self.head = Some(head);
                for event in events {
                    self.fold(event, out)?;
                }
            }
            // Another generation holds the key, or the holder of this one lives (the store has
            // the last word): this request is answered from what the store holds.
            Written::Held(log) => return self.held(cx, log, now_ms, out),
            // The stored decision's callbacks run again, with the same ids and bytes, under the
            // generation the store granted: the old holder's writes are fenced.
            Written::TakenOver(head) => {
                out.push(Effect::TookOver);
                out.push(Effect::Count(Metric::Transition("taken_over")));
                self.generation = head.generation;
                self.head = Some(head);
                return self.start_dispatch(true, out);
            }
            Written::Fenced => {
                out.push(Effect::Count(Metric::Fenced("claim")));
                return Err(ClaimError::Fenced);
            }
            Written::Nothing => return Err(Invariant::NoClaim("commit").into()),
        }
        // With the answer, the unit just durable holds the claim's one write: its queued
        // callbacks' logs (if any) are in it.
        let (response, in_this_unit) = match self.phase.after_commit()? {
            AfterCommit::RunActions => {
                out.push(Effect::Failpoint("claim.after_persist"));
                return self.start_dispatch(self.may_have_run, out);
            }
            AfterCommit::Complete => {
                out.push(Effect::Failpoint("dispatch.after_recovery_point"));
                (self.complete(out)?, false)
            }
            AfterCommit::Answer(response) => {
                out.push(Effect::Failpoint("claim.after_persist"));
                (response, true)
            }
        };
        self.answer_first(response, in_this_unit, out);
        Ok(())
    }

    /// Answers the first request and the waiters with `response`, now durable (in the
    /// recovery point) before it leaves: a replay can never differ. `in_this_unit`: the unit
    /// just durable was the claim's one write, with its queued callbacks' logs.
    fn answer_first(&mut self, response: StoredResponse, in_this_unit: bool, out: &mut Effects<P>) {
        let answer = self.answer_of(response);
        self.release_waiters(&answer, out);
        match self.deduplicated {
            true => self.answer(Reply::Deduplicated(answer), out),
            false => self.answer(Reply::First(answer), out),
        }
        // Queued callbacks are due now: their first attempts start once the answer is out.
        let has_callbacks = self
            .phase
            .claim()
            .is_some_and(|c| !c.decision.deliveries.is_empty());
        if !self.queued || !has_callbacks {
            return;
        }
        // Their logs as this unit wrote them, new, are what the store holds: their actors start
        // from them. Otherwise (logs that may have existed before the unit, which left them as
        // they were, or written by the subject's claim) the retry worker reads the queue.
        match in_this_unit && !self.may_have_run {
            true => out.push(Effect::StartQueued),
            false => out.push(Effect::WakeRetries),
        }
    }

    /// The store refused the unit: `log` holds the key. The first request gets what the log
    /// gives it, and the waiters, who carry its payload, the same.
    fn held(
        &mut self,
        cx: &Context,
        log: ClaimLog,
        now_ms: u64,
        out: &mut Effects<P>,
    ) -> Result<(), ClaimError> {
        self.adopt(log)?;
        self.awaiting_subject = false;
        let Some(first) = self.first.take() else {
            return Ok(());
        };
        match phase::step(&self.phase, None, &first.fingerprint, now_ms, cx.holder()) {
            Step::Replay(response) => {
                let answer = self.answer_of(response);
                self.release_waiters(&answer, out);
                out.push(Effect::Reply(first.port, Reply::Replayed(answer)));
            }
            // Recorded by another holder: its response is durable.
            Step::Finish => {
                let response = self.phase.response().cloned();
                let answer = self.answer_of(response.ok_or(Invariant::NoClaim("finish"))?);
                self.release_waiters(&answer, out);
                out.push(Effect::Reply(first.port, Reply::Replayed(answer)));
            }
            Step::Mismatch => {
                self.waiters.answer_all(Reply::Mismatch, out);
                out.push(Effect::Reply(first.port, Reply::Mismatch));
            }
            // What holds the key will not answer this payload: no one waits for it.
            Step::Expiring => {
                self.waiters.answer_all(Reply::InFlight, out);
                out.push(Effect::Reply(first.port, Reply::InFlight));
            }
            // In flight (a take-over the store refused: the holder lives), or in a state the
            // next request will resolve. A request that may wait does.
            Step::Claim | Step::TakeOver | Step::InFlight => {
                self.wait_or_refuse(cx, first.port, first.wait, first.capped, out)
            }
        }
        Ok(())
    }
}
