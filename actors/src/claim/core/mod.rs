//! The claim protocol's decisions for one key, with no actor, store, clock or task in it: an
//! input goes in (a request, the decision it asked for, what a commit came to, the actions'
//! outcomes, the subject's claim's answer, a waiter's deadline, news from another node) and the
//! effects come out, in the order they are to be carried out (decide, commit this unit, run these
//! actions, offer the decision to the subject's claim, answer this port, start a waiter's timer,
//! ask the holder, count this). The claim actor carries the effects out and feeds their results
//! back; the model checker (`model/`) does the same with a simulated store and network. Nothing
//! else decides what a request for a key gets, when a unit is written, or when a waiter is
//! released. Each input has a file: `submit` (a request, and the decision it wins), `commit`
//! (what a commit came to), `dispatch` (the actions or the subject's claim, then the recovery
//! point) and `news` (waiters' deadlines and other nodes); `tests` holds a table per input.
//!
//! The order the effects keep is the durability order: a claim is committed before its actions
//! run (they start only once the store says it is durable), and a response is answered only once
//! the recovery point that holds its bytes is durable, so a retry can never be answered
//! differently. A decision without actions (or with queued callbacks) is claimed, recorded and
//! completed in one unit, with its queued deliveries: nothing runs between those records, so
//! there is no side effect to guard, and the store writes the unit as one transaction. What each
//! unit holds is [`crate::record::writes`]'s answer.

mod commit;
mod dispatch;
mod news;
mod submit;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use idem_schemas::{ClaimEvent, StoredResponse};

use super::effect::{Effect, Effects};
use super::phase::{Holder, Invariant, Phase};
use super::waiters::Waiters;
use super::{Answer, ClaimError, Reply, Request};
use crate::metrics::Metric;
use crate::settings::Settings;
use crate::store::{ClaimId, ClaimLog, LogHead};

pub use news::Heard;

/// What every claim of this process shares: the settings, this process's epoch (the holder of
/// the claims it makes), and, for the checkers only, a rule broken on purpose.
#[derive(Debug, Clone)]
pub struct Context {
    /// The engine's settings.
    pub settings: Arc<Settings>,
    /// This process's epoch: claims made by another epoch have no live holder.
    pub holder: u64,
    /// A protocol rule switched off, to show that a checker catches it; none in a real run.
    pub sabotage: Option<ClaimSabotage>,
}

/// A rule of the claim protocol broken on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClaimSabotage {
    /// The first request is answered as soon as its actions have run, before the recovery
    /// point that holds the response is durable.
    AnswerBeforeRecoveryPoint,
    /// An expired claim is replaced whether or not its decision still runs.
    ReplaceOnExpiry,
}

impl Context {
    fn holder(&self) -> Holder {
        let holder = Holder::of(self.holder, &self.settings.idempotency);
        match self.sabotage {
            Some(ClaimSabotage::ReplaceOnExpiry) => Holder {
                expired_kept_ms: 0,
                ..holder
            },
            _ => holder,
        }
    }
}

/// The key's first request, waiting for its answer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct First<P> {
    port: P,
    fingerprint: [u8; 32],
    /// How long it may wait should the key turn out to be in flight after all.
    wait: Option<Duration>,
    /// Whether it would count against `max_waiters` (a client's request does).
    capped: bool,
}

impl<P> First<P> {
    fn of(request: &Request, port: P) -> Self {
        First {
            port,
            fingerprint: request.fingerprint,
            wait: request.wait,
            capped: !request.from_a_claim,
        }
    }
}

/// A claim the first request won, waiting for its decision: the generation it will be, and
/// what of the request the claim keeps.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Deciding {
    generation: u64,
    request: Request,
}

/// The current generation's offer to its subject's claim.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Offered {
    taken_over: bool,
    /// The subject's claim was found in flight, and the first request answered for now.
    waited: bool,
}

/// The claim of one key: the fold of its log, and who waits on it. `P` is what an answer is
/// sent to (a reply port in the actor, a request's number in the model).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Core<P> {
    id: ClaimId,
    generation: u64,
    /// The log as last read or written: what the next append extends.
    head: Option<LogHead>,
    phase: Phase,
    /// The first request of the current generation, from its claim (or take-over) until it is
    /// answered: while it waits, what the phase holds may not be durable yet.
    first: Option<First<P>>,
    /// The first request won the key and waits for its decision.
    deciding: Option<Deciding>,
    /// Requests with the first request's payload waiting for its answer.
    waiters: Waiters<P>,
    /// The current generation waits for its subject's claim, its first request answered 409.
    awaiting_subject: bool,
    /// The current generation's response is another decision's, by its subject's claim.
    deduplicated: bool,
    /// The current generation's decision may have run before it was claimed: its dispatch
    /// leaves existing delivery logs alone.
    may_have_run: bool,
    /// The current generation's callbacks are queued, not attempted inline.
    queued: bool,
    /// The current generation's offer to its subject's claim, while one is out.
    offered: Option<Offered>,
}

impl<P> Core<P> {
    /// The claim of `id` as the store holds it (`log`, if the key has a generation).
    pub fn new(id: ClaimId, log: Option<ClaimLog>) -> Result<Self, ClaimError> {
        let mut core = Core {
            id,
            generation: 0,
            head: None,
            phase: Phase::Free,
            first: None,
            deciding: None,
            waiters: Waiters::default(),
            awaiting_subject: false,
            deduplicated: false,
            may_have_run: false,
            queued: false,
            offered: None,
        };
        if let Some(log) = log {
            core.adopt(log)?;
        }
        Ok(core)
    }

    /// The key.
    pub fn id(&self) -> &ClaimId {
        &self.id
    }

    /// The fold of the claim's log, as this core knows it.
    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    /// Whether the current generation is still working towards its answer.
    pub fn busy(&self) -> bool {
        self.first.is_some() || self.awaiting_subject
    }

    /// Whether nothing waits here: the claim may be dropped from memory.
    pub fn idle(&self) -> bool {
        !self.busy() && self.waiters.is_empty()
    }

    /// Where the requests waiting here are to be answered: the first request's, then the
    /// waiters'.
    pub fn waiting(&self) -> impl Iterator<Item = &P> {
        let first = self.first.as_ref().map(|f| &f.port);
        first.into_iter().chain(self.waiters.ports())
    }

    /// An effect could not be carried out (`completed` could not be written): the core stops.
    pub fn failed(&mut self, error: crate::store::StoreError, out: &mut Effects<P>) {
        self.fail(Arc::new(error.into()), out);
    }

    /// The key's durable `response`, as an answer naming the decision it holds.
    fn answer_of(&self, response: StoredResponse) -> Answer {
        let decision_id = self
            .phase
            .claim()
            .map(|c| c.decision.id.clone())
            .unwrap_or_default();
        Answer {
            response,
            decision_id,
        }
    }

    /// Folds a durable event into the phase.
    fn fold(&mut self, event: ClaimEvent, out: &mut Effects<P>) -> Result<(), ClaimError> {
        out.push(Effect::Count(Metric::Transition(event.name())));
        let phase = std::mem::replace(&mut self.phase, Phase::Free);
        self.phase = phase.apply(event)?;
        Ok(())
    }

    /// Adopts a log read from the store: the generation that holds the key.
    fn adopt(&mut self, log: ClaimLog) -> Result<(), ClaimError> {
        let mut phase = Phase::Free;
        for event in log.events {
            phase = phase.apply(event)?;
        }
        self.generation = log.head.generation;
        self.head = Some(log.head);
        self.phase = phase;
        Ok(())
    }

    /// Marks the recorded response as handed out and returns it.
    fn complete(&mut self, out: &mut Effects<P>) -> Result<StoredResponse, ClaimError> {
        let (Phase::Dispatched(_, _, response), Some(head)) = (&self.phase, &self.head) else {
            return Err(Invariant::CompleteBeforeRecoveryPoint.into());
        };
        let response = response.clone();
        out.push(Effect::Failpoint("complete.before_persist"));
        // `completed` need not be durable before the response leaves: the response's bytes are
        // in the store already, in the recovery point, so losing this record leaves
        // `dispatched`, from which every retry answers the same bytes.
        out.push(Effect::Complete(head.clone()));
        self.fold(ClaimEvent::Completed, out)?;
        Ok(response)
    }

    /// Answers the first request with `reply`.
    fn answer(&mut self, reply: Reply, out: &mut Effects<P>) {
        self.awaiting_subject = false;
        if let Some(first) = self.first.take() {
            out.push(Effect::Reply(first.port, reply));
        }
    }

    /// Answers every waiter with the key's durable answer, at once, and the nodes waiting for
    /// it.
    fn release_waiters(&mut self, answer: &Answer, out: &mut Effects<P>) {
        if self.waiters.release(answer, out) {
            out.push(Effect::AnnounceAnswer);
        }
    }

    /// Keeps `port` waiting for the key's answer for up to `wait` (a client's request only
    /// while fewer than `max_waiters` wait, when `capped`), or answers it 409 at once: without a
    /// wait, or when the waiters are full.
    fn wait_or_refuse(
        &mut self,
        cx: &Context,
        port: P,
        wait: Option<Duration>,
        capped: bool,
        out: &mut Effects<P>,
    ) {
        let max = match capped {
            true => cx.settings.idempotency.max_waiters,
            false => usize::MAX,
        };
        match wait {
            Some(wait) => self.waiters.keep(port, wait, max, out),
            None => out.push(Effect::Reply(port, Reply::InFlight)),
        }
        self.ask_holder(cx, out);
    }

    /// With requests waiting for a claim another node holds (several share the store), asks
    /// that node, once, to say when the claim is answered.
    fn ask_holder(&mut self, cx: &Context, out: &mut Effects<P>) {
        let Some(holder) = self.phase.claim().map(|c| c.holder) else {
            return;
        };
        if self.waiters.is_empty() || holder == cx.holder {
            return;
        }
        if !std::mem::replace(&mut self.waiters.asked_holder, true) {
            out.push(Effect::AskHolder(holder));
        }
    }

    /// Answers the waiting first request with the failure `e`, and the waiters that the key is
    /// still in flight, and stops.
    fn fail(&mut self, e: Arc<ClaimError>, out: &mut Effects<P>) {
        self.deciding = None;
        self.answer(Reply::Failed(e.clone()), out);
        self.waiters.answer_all(Reply::InFlight, out);
        out.push(Effect::Stop(e));
    }
}
