//! The claim protocol's decisions for one key, with no actor, store, clock or task in it: an
//! input goes in (a request, what a commit came to, the actions' outcomes, the subject's claim's
//! answer, a waiter's deadline, news from another node) and the effects come out, in the order
//! they are to be carried out (commit this unit, run these actions, offer the decision to the
//! subject's claim, answer this port, start a waiter's timer, ask the holder, count this). The
//! claim actor carries the effects out and feeds their results back; the model checker (`model/`)
//! does the same with a simulated store and network. Nothing else decides what a request for a
//! key gets, when a unit is written, or when a waiter is released.
//!
//! The order the effects keep is the durability order: a claim is committed before its actions
//! run (they start only once the store says it is durable), and a response is answered only once
//! the recovery point that holds its bytes is durable, so a retry can never be answered
//! differently. A decision without actions (or with queued callbacks) is claimed, recorded and
//! completed in one unit, with its queued deliveries: nothing runs between those records, so
//! there is no side effect to guard, and the store writes the unit as one transaction.

use std::sync::Arc;
use std::time::Duration;

use idem_schemas::stored::stream_of;
use idem_schemas::{
    ActionOutcome, Claim, ClaimEvent, Decision, DecisionRecord, StoredResponse, SubjectLink,
};

use super::effect::{Effect, Effects, Offer};
use super::phase::{self, AfterCommit, Holder, Invariant, Phase, Step};
use super::waiters::Waiters;
use super::{ClaimError, DecideError, Reply, Request, ANY_PAYLOAD};
use crate::delivery::new_logs;
use crate::metrics::Metric;
use crate::settings::Settings;
use crate::store::{ClaimId, ClaimLog, ClaimNews, LogHead, StoreError, Unit, Written};

/// News from another node sharing the store, as the node it concerns hears it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Heard {
    /// Another node has requests waiting for a claim this node holds.
    Asked,
    /// A claim held on another node has a durable answer.
    Answered,
}

impl Heard {
    /// `news` as the node of `epoch` hears it: the claim it is about and what it says, or
    /// nothing (a question for the node of another epoch).
    pub fn of(news: ClaimNews, epoch: u64) -> Option<(ClaimId, Heard)> {
        match news {
            ClaimNews::Asked { id, holder } if holder == epoch => Some((id, Heard::Asked)),
            ClaimNews::Asked { .. } => None,
            ClaimNews::Answered { id } => Some((id, Heard::Answered)),
        }
    }

    /// What the news leads to on a node where no actor of its claim runs: nothing of the claim
    /// is in flight there, so a question is answered at once (the answer is in the store), and
    /// an answer has no one to tell.
    pub fn without_actor<P>(self) -> Option<Effect<P>> {
        match self {
            Heard::Asked => Some(Effect::AnnounceAnswer),
            Heard::Answered => None,
        }
    }
}

/// What every claim of this process shares: the settings, this process's epoch (the holder of
/// the claims it makes), and, for the checkers only, a rule broken on purpose.
#[derive(Debug, Clone)]
pub struct Context {
    /// The engine's settings.
    pub settings: Arc<Settings>,
    /// This process's epoch: claims made by another epoch have no live holder.
    pub holder: u64,
    /// A protocol rule switched off, to show that a checker catches it; none in a real run.
    pub sabotage: Option<Sabotage>,
}

/// A rule of the claim protocol broken on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Sabotage {
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
            Some(Sabotage::ReplaceOnExpiry) => Holder {
                expired_kept_ms: 0,
                ..holder
            },
            _ => holder,
        }
    }

    /// `decision` as kept for lookup, for the decision retention.
    fn record(&self, decision: &Decision) -> DecisionRecord {
        DecisionRecord::kept_for(decision, self.settings.decisions.retention)
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

    /// A request for the key, made at `now_ms`, answered on `port`; `decide` makes its decision
    /// if it wins the claim (a duplicate, a replay or a refused payload never pays for one).
    pub fn submit(
        &mut self,
        cx: &Context,
        request: &Request,
        port: P,
        now_ms: u64,
        decide: impl FnOnce(u64) -> Result<Decision, DecideError>,
        out: &mut Effects<P>,
    ) {
        let waiting = self.first.as_ref().map(|f| &f.fingerprint);
        let step = phase::step(
            &self.phase,
            waiting,
            &request.fingerprint,
            now_ms,
            cx.holder(),
        );
        let done = match step {
            Step::Replay(response) => {
                out.push(Effect::Reply(port, Reply::Replayed(response)));
                Ok(())
            }
            Step::InFlight => {
                self.wait_or_refuse(cx, port, request.wait, !request.from_a_claim, out);
                Ok(())
            }
            Step::Mismatch => {
                out.push(Effect::Reply(port, Reply::Mismatch));
                Ok(())
            }
            Step::Expiring => {
                out.push(Effect::Reply(port, Reply::InFlight));
                Ok(())
            }
            Step::Claim => self.claim(cx, request, port, now_ms, decide, out),
            // The holder looks gone from here; the store has the last word (on a shared store,
            // the holder may be another node that lives).
            Step::TakeOver => match self.head.clone() {
                Some(head) => {
                    self.queued = request.queued;
                    self.first = Some(First::of(request, port));
                    out.push(Effect::Commit {
                        generation: self.generation,
                        unit: Unit::new().take_over_claim(head),
                    });
                    Ok(())
                }
                None => {
                    let e = Arc::new(ClaimError::from(Invariant::NoClaim("take over")));
                    out.push(Effect::Reply(port, Reply::Failed(e.clone())));
                    Err(e)
                }
            },
            // The recovery point is durable, and with it the delivery logs (written before it,
            // in the same unit): complete with the recorded response. It was stored before this
            // request came: the answer is a replay.
            Step::Finish => match self.complete(out) {
                Ok(response) => {
                    self.release_waiters(&response, out);
                    out.push(Effect::Reply(port, Reply::Replayed(response)));
                    Ok(())
                }
                Err(e) => {
                    let e = Arc::new(e);
                    out.push(Effect::Reply(port, Reply::Failed(e.clone())));
                    Err(e)
                }
            },
        };
        if let Err(e) = done {
            self.fail(e, out);
        }
    }

    /// Claims the key for `request`: a new generation with its decision.
    fn claim(
        &mut self,
        cx: &Context,
        request: &Request,
        port: P,
        now_ms: u64,
        decide: impl FnOnce(u64) -> Result<Decision, DecideError>,
        out: &mut Effects<P>,
    ) -> Result<(), Arc<ClaimError>> {
        // A generation is the claim time, strictly increasing per key.
        let generation = now_ms.max(self.generation + 1);
        let decision = match decide(generation) {
            Ok(decision) => decision,
            // Nothing is claimed: the key stays free, and the claim is as it was.
            Err(e) => {
                out.push(Effect::Reply(port, Reply::Failed(Arc::new(e.into()))));
                return Ok(());
            }
        };
        self.generation = generation;
        self.deduplicated = false;
        self.may_have_run = request.may_have_run;
        self.queued = request.queued;
        self.offered = None;
        self.first = Some(First::of(request, port));
        let lasts = request.lasts.unwrap_or(cx.settings.idempotency.key_ttl);
        let claim = Claim {
            fingerprint: request.fingerprint,
            holder: cx.holder,
            claimed_at_ms: generation,
            expires_at_ms: generation + lasts.as_millis() as u64,
            decision,
            subject: request.subject,
        };
        // The keys of its SETs are kept beside the claim, durable with it (see `SetKey`).
        let keys = crate::set::keys(&claim.decision);
        let inline = !claim.decision.deliveries.is_empty() && !request.queued;
        let unit = if !inline && claim.subject.is_none() {
            // Nothing runs between this decision's claim, recovery point and completion (it has
            // no callbacks, or they are queued), so there is no side effect to guard: the three
            // records are one durable write, answered once it is durable, and the decision is
            // kept with them. Queued deliveries are in the same unit, which the store writes as
            // one transaction, so they are durable with the claim, never without it: after a
            // crash the retry queue resumes them.
            let response = super::first_response(&claim.decision, &[])?;
            let record = cx.record(&claim.decision);
            let logs = new_logs(&claim.decision, &[], &cx.settings);
            out.extend(logs.counts.into_iter().map(Effect::Count));
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
                .start_claim(self.id.clone(), events)
                .record_decision(record)
                .keep_set_keys(keys);
            match request.may_have_run {
                true => unit.skipping_existing(),
                false => unit,
            }
        } else {
            // The claim, with its decision and every callback body, is durable before any
            // action runs (they start once it is): a crash from here on resumes this decision,
            // never a new one.
            Unit::new()
                .start_claim(self.id.clone(), vec![ClaimEvent::Claimed(claim)])
                .keep_set_keys(keys)
        };
        out.push(Effect::Commit { generation, unit });
        Ok(())
    }

    /// What a unit committed for `generation` came to, heard at `now_ms`.
    pub fn committed(
        &mut self,
        cx: &Context,
        generation: u64,
        outcome: Result<Written, StoreError>,
        now_ms: u64,
        out: &mut Effects<P>,
    ) {
        if generation != self.generation || !self.busy() {
            return;
        }
        if let Err(e) = self.after_commit(cx, outcome, now_ms, out) {
            self.fail(Arc::new(e), out);
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
        let response = match self.phase.after_commit()? {
            AfterCommit::RunActions => {
                out.push(Effect::Failpoint("claim.after_persist"));
                return self.start_dispatch(self.may_have_run, out);
            }
            AfterCommit::Complete => {
                out.push(Effect::Failpoint("dispatch.after_recovery_point"));
                self.complete(out)?
            }
            AfterCommit::Answer(response) => {
                out.push(Effect::Failpoint("claim.after_persist"));
                response
            }
        };
        // The response is durable (in the recovery point) before it leaves: a replay can never
        // differ. The waiters get it the same moment.
        self.release_waiters(&response, out);
        match self.deduplicated {
            true => self.answer(Reply::Deduplicated(response), out),
            false => self.answer(Reply::First(response), out),
        }
        // Queued callbacks are due now: the retry worker makes them once the answer is out.
        let has_callbacks = self
            .phase
            .claim()
            .is_some_and(|c| !c.decision.deliveries.is_empty());
        if self.queued && has_callbacks {
            out.push(Effect::WakeRetries);
        }
        Ok(())
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
                self.release_waiters(&response, out);
                out.push(Effect::Reply(first.port, Reply::Replayed(response)));
            }
            // Recorded by another holder: its response is durable.
            Step::Finish => {
                let response = self.phase.response().cloned();
                let response = response.ok_or(Invariant::NoClaim("finish"))?;
                self.release_waiters(&response, out);
                out.push(Effect::Reply(first.port, Reply::Replayed(response)));
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

    /// Runs the claim's actions, or offers its decision to the subject's claim; the first
    /// request stays waiting.
    fn start_dispatch(&mut self, taken_over: bool, out: &mut Effects<P>) -> Result<(), ClaimError> {
        let claim = self.phase.claim().ok_or(Invariant::NoClaim("dispatch"))?;
        let decision = claim.decision.clone();
        match claim.subject {
            Some(link) => {
                self.offered = Some(Offered {
                    taken_over,
                    waited: false,
                });
                let offer = self.offer(link, decision, taken_over, None);
                out.push(Effect::Offer {
                    generation: self.generation,
                    offer: Box::new(offer),
                });
            }
            None => out.push(Effect::RunActions {
                generation: self.generation,
                decision: Box::new(decision),
                taken_over,
            }),
        }
        Ok(())
    }

    /// The offer of `decision` to the subject's claim `link`, which waits up to `wait` if that
    /// claim is in flight.
    fn offer(
        &self,
        link: SubjectLink,
        decision: Decision,
        taken_over: bool,
        wait: Option<Duration>,
    ) -> Offer {
        Offer {
            to: ClaimId {
                tenant: decision.tenant.clone(),
                digest: link.digest,
            },
            request: Request {
                fingerprint: ANY_PAYLOAD,
                wait,
                lasts: Some(Duration::from_millis(link.window_ms)),
                subject: None,
                from_a_claim: true,
                may_have_run: taken_over,
                queued: self.queued,
            },
            decision,
        }
    }

    /// The actions of `generation` ran and gave `outcomes`: the recovery point.
    pub fn dispatched(
        &mut self,
        cx: &Context,
        generation: u64,
        outcomes: Vec<ActionOutcome>,
        taken_over: bool,
        out: &mut Effects<P>,
    ) {
        if let Err(e) = self.record_recovery_point(cx, generation, outcomes, taken_over, None, out)
        {
            self.fail(Arc::new(e), out);
        }
    }

    /// What the subject's claim answered `generation`'s offer (or why it could not).
    pub fn offered(
        &mut self,
        cx: &Context,
        generation: u64,
        answer: Result<Reply, String>,
        out: &mut Effects<P>,
    ) {
        let running = generation == self.generation
            && matches!(self.phase, Phase::InFlight(_))
            && self.busy();
        let (true, Some(offered), Some(claim)) =
            (running, self.offered.clone(), self.phase.claim())
        else {
            return;
        };
        let error = match answer {
            // Another decision's response, or this one's (made before a crash, or just now):
            // either is this key's recovery point.
            Ok(Reply::First(response) | Reply::Replayed(response) | Reply::Awaited(response)) => {
                let deduplicated = decision_id(&response).is_some_and(|id| id != claim.decision.id);
                let subject = Some((response, deduplicated));
                let taken_over = offered.taken_over;
                match self.record_recovery_point(
                    cx,
                    generation,
                    Vec::new(),
                    taken_over,
                    subject,
                    out,
                ) {
                    Ok(()) => return,
                    Err(e) => e,
                }
            }
            // Another request holds the subject's claim: the first request is answered as a
            // duplicate of an in-flight key (or waits, if it asked to), and the offer is made
            // again, waiting up to `in_flight_timeout` at a time (a subject's claim in flight
            // is answered within an attempt's deadline, or taken over after that).
            Ok(Reply::InFlight) => {
                let (Some(link), decision) = (claim.subject, claim.decision.clone()) else {
                    return;
                };
                if !offered.waited {
                    if let Some(first) = self.first.take() {
                        self.awaiting_subject = true;
                        self.wait_or_refuse(cx, first.port, first.wait, first.capped, out);
                    }
                }
                self.offered = Some(Offered {
                    waited: true,
                    ..offered
                });
                let wait = Some(cx.settings.idempotency.in_flight_timeout);
                let offer = self.offer(link, decision, offered.taken_over, wait);
                out.push(Effect::Offer {
                    generation,
                    offer: Box::new(offer),
                });
                return;
            }
            // The key's first request fails, and its claim stays in flight for a take-over.
            Ok(other) => ClaimError::Subject(format!("{other:?}")),
            Err(e) => ClaimError::Subject(e),
        };
        self.fail(Arc::new(error), out);
    }

    /// Records the recovery point of `generation`: its actions' outcomes and the response built
    /// from them (or, through its subject's claim, the response that claim answered).
    fn record_recovery_point(
        &mut self,
        cx: &Context,
        generation: u64,
        outcomes: Vec<ActionOutcome>,
        taken_over: bool,
        subject: Option<(StoredResponse, bool)>,
        out: &mut Effects<P>,
    ) -> Result<(), ClaimError> {
        let running = generation == self.generation
            && matches!(self.phase, Phase::InFlight(_))
            && self.busy();
        if !running {
            return Ok(());
        }
        out.push(Effect::Failpoint("dispatch.before_recovery_point"));
        let (Some(claim), Some(head)) = (self.phase.claim(), &self.head) else {
            return Err(Invariant::NoClaim("record the recovery point").into());
        };
        self.offered = None;
        // Through the subject's claim, the actions ran there (or another decision's did): this
        // key records the subject's response, and no delivery of its own.
        if let Some((response, deduplicated)) = subject {
            self.deduplicated = deduplicated;
            let mut unit = Unit::new().append_claim(
                head.clone(),
                vec![ClaimEvent::Dispatched { outcomes, response }],
            );
            // Another decision's actions ran instead: this one's SETs will never be sent.
            if deduplicated {
                let sets = claim.decision.deliveries.iter();
                let sets = sets.filter(|d| stream_of(&d.url).is_some());
                unit = unit.erase_set_keys(sets.map(|d| d.id.clone()).collect());
            }
            out.push(Effect::Commit { generation, unit });
            return Ok(());
        }
        // The recovery point: once the outcomes and the response built from them are durable, a
        // retry answers that response and never runs the actions again; the first request is
        // answered only then. The delivery logs (queued ones enter the retry queue) are in the
        // same unit, written first, so they are durable no later.
        let response = super::first_response(&claim.decision, &outcomes)?;
        let logs = new_logs(&claim.decision, &outcomes, &cx.settings);
        out.extend(logs.counts.into_iter().map(Effect::Count));
        let record = cx.record(&claim.decision);
        let head = head.clone();
        if cx.sabotage == Some(Sabotage::AnswerBeforeRecoveryPoint) {
            self.answer(Reply::First(response.clone()), out);
        }
        let mut unit = Unit::new()
            .write_deliveries(logs.writes)
            .record_decision(record)
            .append_claim(head, vec![ClaimEvent::Dispatched { outcomes, response }]);
        if taken_over {
            unit = unit.skipping_existing();
        }
        out.push(Effect::Commit { generation, unit });
        Ok(())
    }

    /// Waiter `waiter`'s wait is over: 409, if it still waits.
    pub fn wait_over(&mut self, waiter: u64, out: &mut Effects<P>) {
        self.waiters.over(waiter, out);
    }

    /// News from another node about this claim.
    pub fn hear(&mut self, heard: Heard, out: &mut Effects<P>) {
        match heard {
            Heard::Asked => self.asked(out),
            Heard::Answered => self.answered(out),
        }
    }

    /// Another node has requests waiting for this claim, which this node holds.
    fn asked(&mut self, out: &mut Effects<P>) {
        // Still working: tell the asking node once the answer is durable. Answered already (or
        // never held here): it may read what is stored now.
        match self.busy() {
            true => self.waiters.remote = true,
            false => out.push(Effect::AnnounceAnswer),
        }
    }

    /// The claim, held on another node, has a durable answer: the waiters here may have it once
    /// it is read from the store.
    fn answered(&mut self, out: &mut Effects<P>) {
        if !self.waiters.is_empty() && !self.busy() {
            out.push(Effect::Reread);
        }
    }

    /// The claim as read from the store after another node answered it: the waiters get its
    /// response, if it has one.
    pub fn reread(&mut self, log: ClaimLog, out: &mut Effects<P>) {
        if self.waiters.is_empty() || self.busy() {
            return;
        }
        if let Err(e) = self.adopt(log) {
            return self.fail(Arc::new(e), out);
        }
        if let Some(response) = self.phase.response().cloned() {
            self.release_waiters(&response, out);
        }
    }

    /// An effect could not be carried out (`completed` could not be written): the core stops.
    pub fn failed(&mut self, error: StoreError, out: &mut Effects<P>) {
        self.fail(Arc::new(error.into()), out);
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

    /// Answers every waiter with the key's durable `response`, at once, and the nodes waiting
    /// for it.
    fn release_waiters(&mut self, response: &StoredResponse, out: &mut Effects<P>) {
        if self.waiters.release(response, out) {
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
        self.answer(Reply::Failed(e.clone()), out);
        self.waiters.answer_all(Reply::InFlight, out);
        out.push(Effect::Stop(e));
    }
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

/// The decision id a stored `201` response names.
fn decision_id(response: &StoredResponse) -> Option<String> {
    let body: serde_json::Value = serde_json::from_slice(&response.body).ok()?;
    Some(body.get("decision_id")?.as_str()?.to_owned())
}
