//! The claim actor: one per (tenant, key digest), the only thing that decides what a request
//! carrying that key gets. Its state is the fold of the claim's event log (`phase`); every
//! request for the key passes through its mailbox, so concurrent duplicates are serialised
//! without a lock.
//!
//! A first request claims the key (its decision made then, fixed and on disk), then the
//! callbacks run in a task of their own while the actor keeps answering duplicates (409 while in
//! flight, 422 for another payload). The task reports back; the actor records the `dispatched`
//! recovery point (the outcomes and the response built from them, with the delivery logs), then
//! `completed`, and answers the first request. A decision without actions writes all three
//! records at once. The actor never waits for the disk in a handler: it commits a unit of work
//! and the store tells it what the unit came to once it is durable (`Committed`); until the
//! first request is answered, every other request for the key gets 409. The store has the last
//! word on who holds the key: a claim it refuses (another generation holds the key) is answered
//! from that generation. An actor idle for a while stops; the next request rebuilds it from the
//! log. `Claims` is the way to these actors.
//!
//! A request that may wait (`Prefer: wait`) is kept as a waiter instead of being answered 409,
//! and answered with the first request (`waiters`). A keyed claim of a playbook decided once per
//! subject dispatches through the subject's claim instead of running its actions (`subject`).

pub mod phase;
mod subject;
mod waiters;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem_schemas::timefmt::now_ms;
use idem_schemas::{
    ActionOutcome, Claim, ClaimEvent, Decision, DecisionRecord, StoredResponse, SubjectLink,
};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use crate::delivery::{self, DeliverySettings};
use crate::dispatch::Dispatcher;
use crate::failpoint;
use crate::idle::IdleTimer;
use crate::store::{ClaimId, ClaimLog, ClaimNews, LogHead, Store, StoreError, Unit, Written};
use crate::supervise::{Family, RegistryError};
use phase::{AfterCommit, Holder, InvalidTransition, Invariant, Phase, Step};
use waiters::Waiters;

/// The time windows of claims.
#[derive(Debug, Clone)]
pub struct ClaimSettings {
    /// How long a key and its result live after the claim.
    pub key_ttl: Duration,
    /// After this, an `in_flight` claim whose holder is gone may be taken over.
    pub in_flight_timeout: Duration,
    /// An actor with nothing to do for this long stops.
    pub idle_timeout: Duration,
    /// At most this many claim actors run at once; beyond, new keys are refused (503).
    pub max_live_actors: usize,
    /// At most this many requests wait on one key for its first request's answer; beyond, 409.
    pub max_waiters: usize,
    /// How long a decision is kept for lookup.
    pub decision_retention: Duration,
    /// This process's epoch: claims made by another epoch have no live holder.
    pub holder: u64,
}

/// What claim actors share.
pub struct ClaimContext {
    /// The claim and delivery logs.
    pub store: Arc<dyn Store>,
    /// Makes the callback attempts.
    pub dispatcher: Arc<Dispatcher>,
    /// The retry policy the new delivery logs start with.
    pub deliveries: DeliverySettings,
    /// Time windows.
    pub settings: ClaimSettings,
    /// Wakes the retry worker at once: a queued decision's callbacks are due now.
    pub wake_retries: Arc<tokio::sync::Notify>,
}

/// The fingerprint of every submission to a subject's claim: any signal for the subject is the
/// same "payload" there, so none is refused as another one. (Body fingerprints are keyed
/// digests, never this value.)
pub const ANY_PAYLOAD: [u8; 32] = [0; 32];

/// Why a decision could not be made.
#[derive(Debug, thiserror::Error)]
#[error("cannot decide: {0}")]
pub struct DecideError(#[source] pub Box<dyn std::error::Error + Send + Sync>);

/// Makes the decision a request fixes if it wins its claim, given the claim's time.
pub type Decide = Box<dyn FnOnce(u64) -> Result<Decision, DecideError> + Send>;

/// Why a claim actor could not answer a request.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// The store failed; what it holds is what counts.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The generation this actor writes to is no longer the key's current one.
    #[error("the claim was fenced out: another generation holds the key")]
    Fenced,
    /// The log on disk does not fold.
    #[error(transparent)]
    Log(#[from] InvalidTransition),
    /// The actor was asked to do what its phase does not allow.
    #[error(transparent)]
    Invariant(#[from] Invariant),
    /// The playbook could not decide.
    #[error(transparent)]
    Decide(#[from] DecideError),
    /// The response could not be serialised.
    #[error("cannot serialise the response: {0}")]
    Response(#[from] serde_json::Error),
    /// The subject's claim, which a once-per-subject decision goes through, did not answer.
    #[error("the subject's claim did not answer: {0}")]
    Subject(String),
}

/// One request for a key.
pub struct Submission {
    /// Keyed digest of the request's canonical body.
    pub fingerprint: [u8; 32],
    /// Makes the decision, called only if this request wins the claim: a duplicate, a replay or
    /// a refused payload never pays for one.
    decide: Mutex<Option<Decide>>,
    /// Set when the actor starts handling the submission, so a caller whose call ends without a
    /// reply knows whether it may safely send it again (never handled) or not.
    accepted: AtomicBool,
    /// How long the request may wait for an in-flight first request's answer (`Prefer: wait`).
    wait: Option<Duration>,
    /// How long a claim this submission wins holds (the key's `key_ttl` when `None`).
    lasts: Option<Duration>,
    /// The subject's claim the decision goes through, for a playbook decided once per subject.
    subject: Option<SubjectLink>,
    /// Sent by a key's claim to its subject's: it waits without counting against
    /// `max_waiters`, which bounds clients' requests (the claims that wait are bounded by the
    /// live actors).
    from_a_claim: bool,
    /// Its decision may have run before (a key's claim taken over submits its fixed decision
    /// again): delivery logs of it that exist are left as they are.
    may_have_run: bool,
    /// Its callbacks go to the retry queue instead of being attempted inside the request.
    queued: bool,
}

impl Submission {
    /// A submission for a body with `fingerprint`, which `decide`s if it wins the claim.
    pub fn new(
        fingerprint: [u8; 32],
        decide: impl FnOnce(u64) -> Result<Decision, DecideError> + Send + 'static,
    ) -> Self {
        Submission {
            fingerprint,
            decide: Mutex::new(Some(Box::new(decide))),
            accepted: AtomicBool::new(false),
            wait: None,
            lasts: None,
            subject: None,
            from_a_claim: false,
            may_have_run: false,
            queued: false,
        }
    }

    /// The same submission, sent by a key's claim to its subject's claim; `may_have_run` when
    /// the key's claim was taken over, so its decision may have run before.
    fn sent_by_a_claim(mut self, may_have_run: bool) -> Self {
        self.from_a_claim = true;
        self.may_have_run = may_have_run;
        self
    }

    /// The same submission, whose claim holds for `lasts` instead of `key_ttl` (a subject's
    /// claim holds for its playbook's `once_per_subject` window).
    pub fn lasting(mut self, lasts: Duration) -> Self {
        self.lasts = Some(lasts);
        self
    }

    /// The same submission, whose decision, if it wins the key, goes through the subject's
    /// claim `subject`: the subject's claim runs the actions, unless another decision holds it,
    /// whose response then becomes this key's.
    pub fn via_subject(mut self, subject: SubjectLink) -> Self {
        self.subject = Some(subject);
        self
    }

    /// The same submission, whose decision's callbacks are queued, due at once, instead of
    /// attempted before the answer: the claim, its recovery point, its completion and the
    /// queued deliveries are one durable write, answered as soon as it is on disk, and the
    /// retry worker makes the first attempts right after (through a subject's claim, that
    /// claim makes the one write). For senders that time out in seconds (a source's events).
    pub fn queued(mut self) -> Self {
        self.queued = true;
        self
    }

    /// The same submission, which waits up to `wait` for an in-flight first request's answer
    /// instead of being answered [`Reply::InFlight`] at once.
    pub fn waiting(mut self, wait: Option<Duration>) -> Self {
        self.wait = wait.filter(|w| !w.is_zero());
        self
    }

    /// The decision of this request, made at `now_ms` (once: a submission wins at most once).
    fn decide(&self, now_ms: u64) -> Result<Decision, ClaimError> {
        let decide = self
            .decide
            .lock()
            .ok()
            .and_then(|mut decide| decide.take())
            .ok_or(Invariant::DecidedTwice)?;
        Ok(decide(now_ms)?)
    }

    /// True once an actor has started handling this submission.
    pub fn was_accepted(&self) -> bool {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// The actor's answer to a submission.
#[derive(Debug, Clone)]
pub enum Reply {
    /// This request made the decision: the response it must send (already durable).
    First(StoredResponse),
    /// The key completed earlier: the stored response, to send with `Idempotent-Replayed`.
    Replayed(StoredResponse),
    /// The request waited for the key's first request, whose stored response this is (a
    /// replay too).
    Awaited(StoredResponse),
    /// This request claimed the key, and its subject had a decision already: that decision's
    /// response, now this key's too (a replay of the subject's).
    Deduplicated(StoredResponse),
    /// Another request holds the key right now.
    InFlight,
    /// The key was used with another payload.
    Mismatch,
    /// Nothing was answered for the key: why.
    Failed(Arc<ClaimError>),
}

/// Messages of a claim actor.
pub enum ClaimMsg {
    /// A request for the key.
    Submit(Arc<Submission>, RpcReplyPort<Reply>),
    /// The callback task of generation `generation` finished.
    Dispatched {
        /// The claim generation the task ran for.
        generation: u64,
        /// Each action's outcome.
        outcomes: Vec<ActionOutcome>,
        /// The run took over a claim whose holder is gone (which may have written some of the
        /// delivery logs before it died).
        taken_over: bool,
        /// For a claim that went through its subject's claim: the response the subject's claim
        /// answered, and whether it was another decision's (the actions ran there, not here).
        subject: Option<(StoredResponse, bool)>,
    },
    /// The subject's claim is held by another request still in flight, for the key's claim of
    /// generation `generation`: its first request is answered as a duplicate of an in-flight key
    /// while the claim waits.
    SubjectInFlight {
        /// The claim generation asking.
        generation: u64,
    },
    /// A unit the actor committed (for generation `generation`) is durable, or failed.
    Committed {
        /// The claim generation the unit was written for.
        generation: u64,
        /// What the unit came to.
        outcome: Result<Written, StoreError>,
    },
    /// Time to check whether the actor has been idle long enough to stop (its own timer).
    IdleCheck,
    /// Waiter `id`'s wait is over: if it is still waiting, it gets [`Reply::InFlight`].
    WaitOver(u64),
    /// Another node has requests waiting for this claim, which this node holds.
    Asked,
    /// The claim, held on another node, has a durable answer: the waiters here may have it.
    Answered,
    /// The claim as read from the store once another node answered it.
    Reread(ClaimLog),
    /// The subject's claim could not answer the key's claim of generation `generation`: the
    /// key's first request fails, and its claim stays in flight for a take-over.
    SubjectFailed {
        /// The key's claim generation.
        generation: u64,
        /// Why.
        error: String,
    },
}

/// The key's first request, waiting for its answer.
struct First {
    reply: RpcReplyPort<Reply>,
    fingerprint: [u8; 32],
    /// How long it may wait should the key turn out to be in flight after all.
    wait: Option<Duration>,
    /// Whether it would count against `max_waiters` (a client's request does).
    capped: bool,
}

/// The response to a decision's first processing, given its actions' outcomes.
pub fn first_response(
    decision: &Decision,
    outcomes: &[ActionOutcome],
) -> Result<StoredResponse, ClaimError> {
    let body = serde_json::to_vec(&decision.response(outcomes))?;
    Ok(StoredResponse { status: 201, body })
}

/// The claim actor.
pub struct ClaimActor;

/// The actor's state.
pub struct ClaimState {
    id: ClaimId,
    ctx: Arc<ClaimContext>,
    family: Arc<Family>,
    generation: u64,
    /// The log as last read or written: what the next append extends.
    head: Option<LogHead>,
    phase: Phase,
    /// The first request of the current generation, from its claim (or take-over) until it is
    /// answered: while it waits, what the phase holds may not be durable yet.
    first: Option<First>,
    /// Requests with the first request's payload waiting for its answer.
    waiters: Waiters,
    /// The current generation waits for its subject's claim, its first request answered 409.
    awaiting_subject: bool,
    /// The current generation's response is another decision's, by its subject's claim.
    deduplicated: bool,
    /// The current generation's decision may have run before it was claimed (see
    /// [`Submission`]): its dispatch leaves existing delivery logs alone.
    may_have_run: bool,
    /// The current generation's callbacks are queued, not attempted inline (see
    /// [`Submission::queued`]).
    queued: bool,
    idle: IdleTimer<ClaimMsg>,
}

impl ClaimState {
    /// `decision` as kept for lookup, for the decision retention.
    fn record(&self, decision: &Decision) -> DecisionRecord {
        DecisionRecord::kept_for(decision, self.ctx.settings.decision_retention)
    }

    /// Whether the current generation is still working towards its answer.
    fn busy(&self) -> bool {
        self.first.is_some() || self.awaiting_subject
    }

    fn holder(&self) -> Holder {
        let settings = &self.ctx.settings;
        Holder {
            epoch: settings.holder,
            in_flight_timeout_ms: settings.in_flight_timeout.as_millis() as u64,
        }
    }

    /// Folds a durable event into the phase.
    fn fold(&mut self, event: ClaimEvent) -> Result<(), ClaimError> {
        crate::metrics::CLAIM_TRANSITIONS
            .with_label_values(&[event.name()])
            .inc();
        let phase = std::mem::replace(&mut self.phase, Phase::Free);
        self.phase = phase.apply(event)?;
        Ok(())
    }

    /// Adopts a log read from the store: the generation that holds the key.
    fn adopt(&mut self, events: Vec<ClaimEvent>, head: LogHead) -> Result<(), ClaimError> {
        let mut phase = Phase::Free;
        for event in events {
            phase = phase.apply(event)?;
        }
        self.generation = head.generation;
        self.head = Some(head);
        self.phase = phase;
        Ok(())
    }

    /// Commits `unit`; the actor hears back with [`ClaimMsg::Committed`] once it is durable.
    /// It does not wait for the disk in its handler: the mailbox stays open, so the duplicates
    /// of a storm are answered (409) while the first request's records are being synced.
    fn commit(&self, myself: &ActorRef<ClaimMsg>, unit: Unit) {
        let (me, generation) = (myself.clone(), self.generation);
        self.ctx.store.commit_then(
            unit,
            Box::new(move |outcome| {
                // An actor gone meanwhile (it failed) leaves the records to the next one, which
                // reads them from the store.
                let _ = me.cast(ClaimMsg::Committed {
                    generation,
                    outcome,
                });
            }),
        );
    }

    /// Answers the first request with `reply`.
    fn answer(&mut self, reply: Reply) {
        self.awaiting_subject = false;
        if let Some(first) = self.first.take() {
            let _ = first.reply.send(reply);
        }
    }

    /// Answers every waiter with the key's durable `response`, at once, and the nodes waiting
    /// for it.
    fn release_waiters(&mut self, response: &StoredResponse) {
        if self.waiters.release(response) {
            self.ctx.store.announce_answer(&self.id);
        }
    }

    /// Keeps `reply` waiting for the key's answer for up to `wait` (a client's request only
    /// while fewer than `max_waiters` wait, when `capped`), or answers it 409 at once: without a
    /// wait, or when the waiters are full.
    fn wait_or_refuse(
        &mut self,
        myself: &ActorRef<ClaimMsg>,
        reply: RpcReplyPort<Reply>,
        wait: Option<Duration>,
        capped: bool,
    ) {
        let max = match capped {
            true => self.ctx.settings.max_waiters,
            false => usize::MAX,
        };
        let refused = match wait {
            Some(wait) => self.waiters.keep(myself, reply, wait, max),
            None => Some(reply),
        };
        if let Some(reply) = refused {
            let _ = reply.send(Reply::InFlight);
        }
        self.ask_holder();
    }

    /// With requests waiting for a claim another node holds (several share the store), asks
    /// that node, once, to say when the claim is answered.
    fn ask_holder(&mut self) {
        let Some(holder) = self.phase.claim().map(|c| c.holder) else {
            return;
        };
        if self.waiters.is_empty() || holder == self.ctx.settings.holder {
            return;
        }
        if !std::mem::replace(&mut self.waiters.asked_holder, true) {
            self.ctx.store.ask_holder(&self.id, holder);
        }
    }

    /// The claim has an answer on another node: the waiters get it once it is read from the
    /// store, in a task of its own ([`ClaimMsg::Reread`]), so the mailbox stays open.
    fn heard_answered(&self, myself: &ActorRef<ClaimMsg>) {
        if self.waiters.is_empty() || self.busy() {
            return;
        }
        let (me, store, id) = (myself.clone(), self.ctx.store.clone(), self.id.clone());
        tokio::spawn(async move {
            match store.load_claim(&id, now_ms()).await {
                Ok(Some(log)) => {
                    let _ = me.cast(ClaimMsg::Reread(log));
                }
                // The waiters wait on for their deadline.
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(tenant = %id.tenant, error = %e, "cannot read an answered claim")
                }
            }
        });
    }

    /// The claim as read from the store after another node answered it: the waiters get its
    /// response, if it has one.
    fn reread(&mut self, log: ClaimLog) -> Result<(), ClaimError> {
        if self.waiters.is_empty() || self.busy() {
            return Ok(());
        }
        self.adopt(log.events, log.head)?;
        if let Some(response) = self.phase.response().cloned() {
            self.release_waiters(&response);
        }
        Ok(())
    }

    /// Answers the waiting first request with the failure `e`, and the waiters that the key is
    /// still in flight, and hands `e` on, for the actor to stop.
    fn fail(&mut self, e: ClaimError) -> Result<(), Arc<ClaimError>> {
        let e = Arc::new(e);
        self.answer(Reply::Failed(e.clone()));
        self.waiters.answer_all(Reply::InFlight);
        Err(e)
    }

    /// Marks the recorded response as handed out and returns it.
    fn complete(&mut self) -> Result<StoredResponse, ClaimError> {
        let (Phase::Dispatched(_, _, response), Some(head)) = (&self.phase, &self.head) else {
            return Err(Invariant::CompleteBeforeRecoveryPoint.into());
        };
        let response = response.clone();
        failpoint::hit("complete.before_persist");
        // `completed` need not be durable before the response leaves: the response's bytes are
        // in the store already, in the recovery point, so losing this record leaves
        // `dispatched`, from which every retry answers the same bytes.
        self.ctx.store.complete_claim(head)?;
        self.fold(ClaimEvent::Completed)?;
        Ok(response)
    }
}

impl ClaimActor {
    /// Runs the claim's actions in a task of their own, which reports back with
    /// [`ClaimMsg::Dispatched`]; the first request stays waiting.
    fn start_dispatch(
        myself: &ActorRef<ClaimMsg>,
        state: &ClaimState,
        taken_over: bool,
    ) -> Result<(), ClaimError> {
        let claim = state.phase.claim().ok_or(Invariant::NoClaim("dispatch"))?;
        let decision = claim.decision.clone();
        let generation = state.generation;
        let me = myself.clone();
        if let Some(link) = claim.subject {
            let offer = subject::Offer {
                decision,
                link,
                taken_over,
                queued: state.queued,
            };
            tokio::spawn(subject::through_subject(
                state.ctx.clone(),
                state.family.clone(),
                me,
                generation,
                offer,
            ));
            return Ok(());
        }
        let dispatcher = state.ctx.dispatcher.clone();
        tokio::spawn(async move {
            let outcomes = dispatcher.dispatch(&decision).await;
            // If the actor is gone (it failed), the claim stays in flight in the store and is
            // taken over after `in_flight_timeout`.
            let _ = me.cast(ClaimMsg::Dispatched {
                generation,
                outcomes,
                taken_over,
                subject: None,
            });
        });
        Ok(())
    }

    /// The subject's claim is held by a request in flight: the first request is answered as a
    /// duplicate of an in-flight key (or waits, if it asked to), and the claim waits on.
    fn subject_in_flight(
        myself: &ActorRef<ClaimMsg>,
        state: &mut ClaimState,
        generation: u64,
    ) -> Result<(), ClaimError> {
        if generation != state.generation || !matches!(state.phase, Phase::InFlight(_)) {
            return Ok(());
        }
        let Some(first) = state.first.take() else {
            return Ok(());
        };
        state.awaiting_subject = true;
        state.wait_or_refuse(myself, first.reply, first.wait, first.capped);
        Ok(())
    }

    fn submit(
        myself: &ActorRef<ClaimMsg>,
        state: &mut ClaimState,
        sub: Arc<Submission>,
        reply: RpcReplyPort<Reply>,
    ) -> Result<(), ClaimError> {
        sub.accepted.store(true, Ordering::SeqCst);
        let now = now_ms();
        let waiting = state.first.as_ref().map(|f| &f.fingerprint);
        let answer = match phase::step(&state.phase, waiting, &sub.fingerprint, now, state.holder())
        {
            Step::Replay(response) => Reply::Replayed(response),
            Step::InFlight => {
                state.wait_or_refuse(myself, reply, sub.wait, !sub.from_a_claim);
                return Ok(());
            }
            Step::Mismatch => Reply::Mismatch,
            Step::Claim => return Self::claim(myself, state, &sub, reply, now),
            // The holder looks gone from here; the store has the last word (on a shared store,
            // the holder may be another node that lives).
            Step::TakeOver => {
                let head = state.head.clone().ok_or(Invariant::NoClaim("take over"))?;
                state.queued = sub.queued;
                state.first = Some(First {
                    reply,
                    fingerprint: sub.fingerprint,
                    wait: sub.wait,
                    capped: !sub.from_a_claim,
                });
                state.commit(myself, Unit::new().take_over_claim(head));
                return Ok(());
            }
            // The recovery point is durable, and with it the delivery logs (written before it,
            // in the same unit): complete with the recorded response. It was stored before this
            // request came: the answer is a replay.
            Step::Finish => {
                let response = state.complete()?;
                state.release_waiters(&response);
                Reply::Replayed(response)
            }
        };
        let _ = reply.send(answer);
        Ok(())
    }

    /// Claims the key for `sub`: a new generation with its decision.
    fn claim(
        myself: &ActorRef<ClaimMsg>,
        state: &mut ClaimState,
        sub: &Submission,
        reply: RpcReplyPort<Reply>,
        now: u64,
    ) -> Result<(), ClaimError> {
        // A generation is the claim time, strictly increasing per key.
        let generation = now.max(state.generation + 1);
        let decision = match sub.decide(generation) {
            Ok(decision) => decision,
            // Nothing is claimed: the key stays free, and the actor is as it was.
            Err(e) => {
                let _ = reply.send(Reply::Failed(Arc::new(e)));
                return Ok(());
            }
        };
        state.generation = generation;
        state.deduplicated = false;
        state.may_have_run = sub.may_have_run;
        state.queued = sub.queued;
        state.first = Some(First {
            reply,
            fingerprint: sub.fingerprint,
            wait: sub.wait,
            capped: !sub.from_a_claim,
        });
        let lasts = sub.lasts.unwrap_or(state.ctx.settings.key_ttl);
        let claim = Claim {
            fingerprint: sub.fingerprint,
            holder: state.ctx.settings.holder,
            claimed_at_ms: generation,
            expires_at_ms: generation + lasts.as_millis() as u64,
            decision,
            subject: sub.subject,
        };
        let inline = !claim.decision.deliveries.is_empty() && !sub.queued;
        let unit = if !inline && claim.subject.is_none() {
            // Nothing runs between this decision's claim, recovery point and completion (it has
            // no callbacks, or they are queued), so there is no side effect to guard: the three
            // records are one durable write, answered once it is durable, and the decision is
            // kept with them. Queued deliveries are in the same unit, which the store writes as
            // one transaction, so they are durable with the claim, never without it: after a
            // crash the retry queue resumes them.
            let response = first_response(&claim.decision, &[])?;
            let record = state.record(&claim.decision);
            let logs = delivery::new_logs(&claim.decision, &[], &state.ctx.deliveries);
            let events = vec![
                ClaimEvent::Claimed(claim),
                ClaimEvent::Dispatched {
                    outcomes: Vec::new(),
                    response,
                },
                ClaimEvent::Completed,
            ];
            let unit = Unit::new()
                .write_deliveries(logs)
                .start_claim(state.id.clone(), events)
                .record_decision(record);
            match sub.may_have_run {
                true => unit.skipping_existing(),
                false => unit,
            }
        } else {
            // The claim, with its decision and every callback body, is durable before any
            // action runs (they start once it is): a crash from here on resumes this decision,
            // never a new one.
            Unit::new().start_claim(state.id.clone(), vec![ClaimEvent::Claimed(claim)])
        };
        state.commit(myself, unit);
        Ok(())
    }

    fn dispatched(
        myself: &ActorRef<ClaimMsg>,
        state: &mut ClaimState,
        generation: u64,
        outcomes: Vec<ActionOutcome>,
        taken_over: bool,
        subject: Option<(StoredResponse, bool)>,
    ) -> Result<(), ClaimError> {
        let running = generation == state.generation
            && matches!(state.phase, Phase::InFlight(_))
            && state.busy();
        if !running {
            return Ok(());
        }
        failpoint::hit("dispatch.before_recovery_point");
        let (Some(claim), Some(head)) = (state.phase.claim(), &state.head) else {
            return Err(Invariant::NoClaim("record the recovery point").into());
        };
        // Through the subject's claim, the actions ran there (or another decision's did): this
        // key records the subject's response, and no delivery of its own.
        if let Some((response, deduplicated)) = subject {
            state.deduplicated = deduplicated;
            let unit = Unit::new().append_claim(
                head.clone(),
                vec![ClaimEvent::Dispatched { outcomes, response }],
            );
            state.commit(myself, unit);
            return Ok(());
        }
        // The recovery point: once the outcomes and the response built from them are durable, a
        // retry answers that response and never runs the actions again; the first request is
        // answered only then. The delivery logs (queued ones enter the retry queue) are in the
        // same unit, written first, so they are durable no later.
        let response = first_response(&claim.decision, &outcomes)?;
        let logs = delivery::new_logs(&claim.decision, &outcomes, &state.ctx.deliveries);
        let mut unit = Unit::new()
            .write_deliveries(logs)
            .record_decision(state.record(&claim.decision))
            .append_claim(
                head.clone(),
                vec![ClaimEvent::Dispatched { outcomes, response }],
            );
        if taken_over {
            unit = unit.skipping_existing();
        }
        state.commit(myself, unit);
        Ok(())
    }

    fn committed(
        myself: &ActorRef<ClaimMsg>,
        state: &mut ClaimState,
        generation: u64,
        outcome: Result<Written, StoreError>,
    ) -> Result<(), ClaimError> {
        if generation != state.generation || !state.busy() {
            return Ok(());
        }
        match outcome? {
            Written::Claimed(head, events) | Written::Appended(head, events) => {
                state.head = Some(head);
                for event in events {
                    state.fold(event)?;
                }
            }
            // Another generation holds the key, or the holder of this one lives (the store has
            // the last word): this request is answered from what the store holds.
            Written::Held(log) => {
                state.adopt(log.events, log.head)?;
                state.awaiting_subject = false;
                let Some(first) = state.first.take() else {
                    return Ok(());
                };
                // The waiters carry the first request's payload: they get what it gets.
                match phase::step(
                    &state.phase,
                    None,
                    &first.fingerprint,
                    now_ms(),
                    state.holder(),
                ) {
                    Step::Replay(response) => {
                        state.release_waiters(&response);
                        let _ = first.reply.send(Reply::Replayed(response));
                    }
                    // Recorded by another holder: its response is durable.
                    Step::Finish => {
                        let response = state.phase.response().cloned();
                        let response = response.ok_or(Invariant::NoClaim("finish"))?;
                        state.release_waiters(&response);
                        let _ = first.reply.send(Reply::Replayed(response));
                    }
                    Step::Mismatch => {
                        state.waiters.answer_all(Reply::Mismatch);
                        let _ = first.reply.send(Reply::Mismatch);
                    }
                    // In flight (a take-over the store refused: the holder lives), or in a
                    // state the next request will resolve. A request that may wait does.
                    _ => state.wait_or_refuse(myself, first.reply, first.wait, first.capped),
                }
                return Ok(());
            }
            // The stored decision's callbacks run again, with the same ids and bytes, under the
            // generation the store granted: the old holder's writes are fenced.
            Written::TakenOver(head) => {
                tracing::info!(tenant = %state.id.tenant, "took over a claim whose holder is gone");
                crate::metrics::CLAIM_TRANSITIONS
                    .with_label_values(&["taken_over"])
                    .inc();
                state.generation = head.generation;
                state.head = Some(head);
                return Self::start_dispatch(myself, state, true);
            }
            Written::Fenced => return Err(ClaimError::Fenced),
            Written::Nothing => return Err(Invariant::NoClaim("commit").into()),
        }
        let response = match state.phase.after_commit()? {
            AfterCommit::RunActions => {
                failpoint::hit("claim.after_persist");
                return Self::start_dispatch(myself, state, state.may_have_run);
            }
            AfterCommit::Complete => {
                failpoint::hit("dispatch.after_recovery_point");
                state.complete()?
            }
            AfterCommit::Answer(response) => {
                failpoint::hit("claim.after_persist");
                response
            }
        };
        // The response is durable (in the recovery point) before it leaves: a replay can never
        // differ. The waiters get it the same moment.
        state.release_waiters(&response);
        match state.deduplicated {
            true => state.answer(Reply::Deduplicated(response)),
            false => state.answer(Reply::First(response)),
        }
        // Queued callbacks are due now: the retry worker makes them once the answer is out.
        if state.queued
            && state
                .phase
                .claim()
                .is_some_and(|c| !c.decision.deliveries.is_empty())
        {
            state.ctx.wake_retries.notify_one();
        }
        Ok(())
    }
}

/// What a claim actor starts from.
pub struct ClaimArgs {
    /// The key it owns.
    pub id: ClaimId,
    /// What it shares with the others.
    pub ctx: Arc<ClaimContext>,
    /// Its family: a keyed claim of a decision made once per subject asks the subject's actor.
    pub family: Arc<Family>,
}

impl Actor for ClaimActor {
    type Msg = ClaimMsg;
    type State = ClaimState;
    type Arguments = ClaimArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<ClaimMsg>,
        args: ClaimArgs,
    ) -> Result<ClaimState, ActorProcessingErr> {
        let log = args.ctx.store.load_claim(&args.id, now_ms()).await?;
        // Sabotage (failpoints builds only): the claim in the store is ignored, as if claims
        // lived only in memory.
        let log = log.filter(|_| !crate::failpoint::switched_on("sabotage"));
        let mut state = ClaimState {
            id: args.id,
            family: args.family,
            generation: 0,
            head: None,
            phase: Phase::Free,
            first: None,
            waiters: Waiters::default(),
            awaiting_subject: false,
            deduplicated: false,
            may_have_run: false,
            queued: false,
            idle: IdleTimer::start(&myself, args.ctx.settings.idle_timeout, || {
                ClaimMsg::IdleCheck
            }),
            ctx: args.ctx,
        };
        if let Some(log) = log {
            state.adopt(log.events, log.head)?;
        }
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<ClaimMsg>,
        message: ClaimMsg,
        state: &mut ClaimState,
    ) -> Result<(), ActorProcessingErr> {
        let outcome = match message {
            ClaimMsg::WaitOver(id) => {
                state.waiters.over(id);
                return Ok(());
            }
            ClaimMsg::IdleCheck => {
                let busy = state.busy() || !state.waiters.is_empty();
                if state.idle.expired(&myself, busy) {
                    myself.stop(Some("idle".into()));
                }
                return Ok(());
            }
            ClaimMsg::Submit(sub, reply) => Self::submit(&myself, state, sub, reply),
            ClaimMsg::Dispatched {
                generation,
                outcomes,
                taken_over,
                subject,
            } => Self::dispatched(&myself, state, generation, outcomes, taken_over, subject),
            ClaimMsg::SubjectInFlight { generation } => {
                Self::subject_in_flight(&myself, state, generation)
            }
            ClaimMsg::Asked => {
                // Still working: tell the asking node once the answer is durable. Answered
                // already (or never held here): it may read what is stored now.
                match state.busy() {
                    true => state.waiters.remote = true,
                    false => state.ctx.store.announce_answer(&state.id),
                }
                Ok(())
            }
            ClaimMsg::Answered => {
                state.heard_answered(&myself);
                Ok(())
            }
            ClaimMsg::Reread(log) => state.reread(log),
            ClaimMsg::SubjectFailed { generation, error } => {
                match generation == state.generation && state.busy() {
                    true => Err(ClaimError::Subject(error)),
                    false => Ok(()),
                }
            }
            ClaimMsg::Committed {
                generation,
                outcome,
            } => Self::committed(&myself, state, generation, outcome),
        };
        state.idle.touch(&myself);
        if let Err(e) = outcome.or_else(|e| state.fail(e)) {
            // What is in memory may now differ from the store: stop, and let the next request
            // rebuild the actor from it.
            tracing::error!(tenant = %state.id.tenant, error = %e, "claim actor stops after a failure");
            myself.stop(Some(e.to_string()));
        }
        Ok(())
    }
}

/// How often a request may find its actor stopping under it before giving up (each round is a
/// fresh lookup or spawn; the race only happens while an idle actor is stopping).
const MAX_ROUNDS: usize = 64;

/// The registry name of the actor of `id`: `…/claim/<tenant>/<digest in hex>`.
fn actor_name(family: &Family, id: &ClaimId) -> String {
    let mut what = String::with_capacity(id.tenant.len() + 65);
    what.push_str(&id.tenant);
    what.push('/');
    what.push_str(&idem_schemas::lower_hex(&id.digest));
    family.name(&what)
}

/// The way to claim actors: finds or starts a key's actor and hands it a request.
pub struct Claims {
    family: Arc<Family>,
    ctx: Arc<ClaimContext>,
}

impl Claims {
    /// Starts the claim supervisor. `instance` makes actor names unique when several servers
    /// share a process (ractor's registry is process-wide).
    pub async fn start(instance: &str, ctx: Arc<ClaimContext>) -> Result<Self, RegistryError> {
        let family =
            Arc::new(Family::start(instance, "claim", ctx.settings.max_live_actors).await?);
        Ok(Claims { family, ctx })
    }

    /// Hands `sub` to the key's actor, starting it if needed, and waits for its answer.
    pub async fn submit(&self, id: &ClaimId, sub: Submission) -> Result<Reply, RegistryError> {
        submit(&self.family, &self.ctx, id, sub).await
    }

    /// The claim actors' family (liveness, failures).
    pub fn family(&self) -> &Family {
        &self.family
    }

    /// Hands news from another node to the claim's actor here. Asked for a claim this node
    /// holds but whose actor has stopped (nothing of it is in flight here), it says at once that
    /// the answer is in the store.
    pub fn hear(&self, news: ClaimNews) {
        let (id, message) = match news {
            ClaimNews::Asked { id, holder } if holder == self.ctx.settings.holder => {
                (id, ClaimMsg::Asked)
            }
            ClaimNews::Asked { .. } => return,
            ClaimNews::Answered { id } => (id, ClaimMsg::Answered),
        };
        let actor = ActorRef::<ClaimMsg>::where_is(actor_name(&self.family, &id));
        match (actor, message) {
            (Some(actor), message) => {
                let _ = actor.cast(message);
            }
            (None, ClaimMsg::Asked) => self.ctx.store.announce_answer(&id),
            (None, _) => {}
        }
    }

    /// Stops every claim actor and the supervisor.
    pub async fn shutdown(&self) {
        self.family.shutdown().await;
    }
}

/// Hands `sub` to the actor of `id` in `family`, starting it if needed, and waits for its
/// answer.
async fn submit(
    family: &Arc<Family>,
    ctx: &Arc<ClaimContext>,
    id: &ClaimId,
    sub: Submission,
) -> Result<Reply, RegistryError> {
    let sub = Arc::new(sub);
    let name = actor_name(family, id);
    // Sabotage (failpoints builds only): an actor per request, nothing serialised.
    let name = match crate::failpoint::switched_on("sabotage") {
        true => format!("{name}/{:p}", Arc::as_ptr(&sub)),
        false => name,
    };
    for _ in 0..MAX_ROUNDS {
        let args = || ClaimArgs {
            id: id.clone(),
            ctx: ctx.clone(),
            family: family.clone(),
        };
        let actor = family.actor(&name, || ClaimActor, args).await?;
        let outgoing = sub.clone();
        match actor
            .call(|port| ClaimMsg::Submit(outgoing, port), None)
            .await
        {
            Ok(ractor::rpc::CallResult::Success(reply)) => return Ok(reply),
            // The actor stopped before handling the request: safe to send it again.
            Ok(_) | Err(_) if !sub.was_accepted() => tokio::task::yield_now().await,
            Ok(_) | Err(_) => return Err(RegistryError::ActorFailed),
        }
    }
    Err(RegistryError::Unavailable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn actor_names_are_the_tenant_and_the_digest_in_lowercase_hex() {
        let family = Family::start("claim-name-test", "claim", 1)
            .await
            .expect("family");
        let mut digest = [0u8; 32];
        digest[0] = 0xab;
        digest[31] = 0x0f;
        let id = ClaimId {
            tenant: "acme".into(),
            digest,
        };
        assert_eq!(
            actor_name(&family, &id),
            format!("claim-name-test/claim/acme/ab{}0f", "0".repeat(60))
        );
        family.shutdown().await;
    }
}
