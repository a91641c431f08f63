//! The claim actor: one key's claim core in a ractor actor. It hands the core each message and
//! carries out the effects the core answers with, in order: commits through the store's group
//! commit (whose outcome comes back as a message), actions and offers to a subject's claim in
//! tasks of their own (their results come back as messages), answers on the requests' reply
//! ports, timers, news to other nodes, counts. It decides nothing itself: it never waits for the
//! disk in a handler, so the mailbox stays open and the duplicates of a storm are answered while
//! the first request's records are being synced.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use idem_schemas::timefmt::now_ms;
use idem_schemas::{ActionOutcome, ClaimEvent, Decision};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tracing::Span;

use super::core::{Core, Heard};
use super::effect::{Effect, Effects, Offer};
use super::phase::Invariant;
use super::{submit, ClaimContext, ClaimError, Decide, Reply, Submission};
use crate::delivery::new_logs;
use crate::failpoint;
use crate::idle::IdleTimer;
use crate::playbook::{DecideError, Decider};
use crate::rules::Counts;
use crate::store::{ClaimId, ClaimLog, ClaimWrite, StoreError, Unit, Written};
use crate::supervise::Family;
use crate::trace;

/// Where a claim actor's answers go.
type Port = RpcReplyPort<Reply>;

/// Messages of a claim actor: a request, or the result of an effect it carried out.
pub(super) enum ClaimMsg {
    /// A request for the key.
    Submit(Arc<Submission>, Port),
    /// The decision of the request that won generation `generation`'s claim, made in a task
    /// of its own (it read the tenant's streams).
    Decided {
        /// The claim generation it was made for.
        generation: u64,
        /// The decision, or why it could not be made.
        decision: Result<Decision, ClaimError>,
    },
    /// The actions of generation `generation` ran.
    Dispatched {
        /// The claim generation they ran for.
        generation: u64,
        /// Each action's outcome.
        outcomes: Vec<ActionOutcome>,
        /// The run took over a claim whose holder is gone.
        taken_over: bool,
    },
    /// The subject's claim answered generation `generation`'s offer (or why it could not).
    Offered {
        /// The claim generation that offered.
        generation: u64,
        /// Its answer.
        answer: Result<Reply, String>,
    },
    /// A unit committed for generation `generation` is durable, or failed.
    Committed {
        /// The claim generation the unit was written for.
        generation: u64,
        /// What the unit came to.
        outcome: Result<Written, StoreError>,
    },
    /// Time to check whether the actor has been idle long enough to stop (its own timer).
    IdleCheck,
    /// Waiter `id`'s wait is over.
    WaitOver(u64),
    /// News from another node about this claim.
    Heard(Heard),
    /// The claim as read from the store once another node answered it.
    Reread(ClaimLog),
}

/// The claim actor.
pub(super) struct ClaimActor;

/// What a claim actor starts from.
pub(super) struct ClaimArgs {
    /// The key it owns.
    pub id: ClaimId,
    /// What it shares with the others.
    pub ctx: Arc<ClaimContext>,
    /// Its family: a keyed claim of a decision made once per subject offers it to the
    /// subject's actor.
    pub family: Arc<Family>,
}

/// The actor's state.
pub(super) struct ClaimState {
    core: Core<Port>,
    ctx: Arc<ClaimContext>,
    family: Arc<Family>,
    idle: IdleTimer<ClaimMsg>,
    /// The effects of the message being handled (kept, so handling allocates no list).
    effects: Effects<Port>,
    /// The request being handled, whose decision the core may ask for.
    submitted: Option<Arc<Submission>>,
    /// The retry worker's count of queue reads before the last claim start went to the store
    /// (handed over with the queued deliveries it wrote).
    reads_before_start: u64,
}

/// A result the core takes at once, within the message that led to it.
enum Feedback {
    /// An effect failed.
    Failed(StoreError),
    /// The decision the core asked for.
    Decided(u64, Result<Decision, ClaimError>),
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
        let log = log.filter(|_| !failpoint::switched_on("sabotage"));
        let idle_timeout = args.ctx.core.settings.idempotency.idle_actor_timeout;
        Ok(ClaimState {
            core: Core::new(args.id, log)?,
            ctx: args.ctx,
            family: args.family,
            idle: IdleTimer::start(&myself, idle_timeout, || ClaimMsg::IdleCheck),
            effects: Vec::new(),
            submitted: None,
            reads_before_start: 1,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<ClaimMsg>,
        message: ClaimMsg,
        state: &mut ClaimState,
    ) -> Result<(), ActorProcessingErr> {
        let mut out = std::mem::take(&mut state.effects);
        // A waiter's deadline is no work of the actor's own.
        let work = !matches!(message, ClaimMsg::WaitOver(_));
        let cx = &state.ctx.core;
        match message {
            ClaimMsg::WaitOver(waiter) => state.core.wait_over(waiter, &mut out),
            ClaimMsg::IdleCheck => {
                if state.idle.expired(&myself, !state.core.idle()) {
                    myself.stop(Some("idle".into()));
                }
                state.effects = out;
                return Ok(());
            }
            ClaimMsg::Submit(sub, port) => {
                sub.accepted.store(true, Ordering::SeqCst);
                state
                    .core
                    .submit(cx, &sub.request, port, now_ms(), &mut out);
                state.submitted = Some(sub);
            }
            ClaimMsg::Decided {
                generation,
                decision,
            } => state.core.decided(cx, generation, decision, &mut out),
            ClaimMsg::Dispatched {
                generation,
                outcomes,
                taken_over,
            } => state
                .core
                .dispatched(cx, generation, outcomes, taken_over, &mut out),
            ClaimMsg::Offered { generation, answer } => {
                state.core.offered(cx, generation, answer, &mut out)
            }
            ClaimMsg::Committed {
                generation,
                outcome,
            } => state
                .core
                .committed(cx, generation, outcome, now_ms(), &mut out),
            ClaimMsg::Heard(heard) => state.core.hear(heard, &mut out),
            ClaimMsg::Reread(log) => state.core.reread(log, &mut out),
        }
        if work {
            state.idle.touch(&myself);
        }
        state.carry_out(&myself, &mut out);
        state.submitted = None;
        state.effects = out;
        Ok(())
    }
}

impl ClaimState {
    /// Carries out `out`, in order, leaving it empty. What an effect gives at once (its
    /// failure, a decision made without I/O) is told to the core, whose effects then follow.
    fn carry_out(&mut self, myself: &ActorRef<ClaimMsg>, out: &mut Effects<Port>) {
        loop {
            let mut feedback = None;
            for effect in out.drain(..) {
                match self.run(myself, effect) {
                    Ok(None) => {}
                    Ok(Some(decided)) => feedback = feedback.or(Some(decided)),
                    Err(e) => feedback = feedback.or(Some(Feedback::Failed(e))),
                }
            }
            let cx = &self.ctx.core;
            match feedback {
                Some(Feedback::Failed(e)) => self.core.failed(e, out),
                Some(Feedback::Decided(generation, decision)) => {
                    self.core.decided(cx, generation, decision, out)
                }
                None => return,
            }
        }
    }

    /// The decision of the request being handled, which won generation `generation`: made here
    /// when it needs no I/O, or in a task that reads the tenant's streams first and sends it
    /// back ([`ClaimMsg::Decided`]).
    fn decide(&mut self, myself: &ActorRef<ClaimMsg>, generation: u64) -> Option<Feedback> {
        let taken = self.submitted.take().and_then(|sub| sub.take_decide());
        let decider = match taken {
            Some(Decide::Fixed(decision)) => {
                return Some(Feedback::Decided(generation, Ok(*decision)))
            }
            Some(Decide::Playbook(decider)) => decider,
            None => {
                let twice = ClaimError::from(Invariant::DecidedTwice);
                return Some(Feedback::Decided(generation, Err(twice)));
            }
        };
        let ctx = self.ctx.clone();
        if !decider.reads_streams() && !decider.reads_history() {
            let counts = Counts::new();
            let decision = decider.decide(&ctx.digester, &ctx.sealer, &[], &counts, now_ms());
            return Some(Feedback::Decided(generation, decision.map_err(Into::into)));
        }
        // The streams and the subject's history as they are when the claim is won: a stream
        // made after gets nothing of this decision. Read in a task, so the mailbox stays open.
        let me = myself.clone();
        tokio::spawn(async move {
            let decision = read_and_decide(&ctx, *decider).await;
            let decision = decision.map_err(ClaimError::from);
            let _ = me.cast(ClaimMsg::Decided {
                generation,
                decision,
            });
        });
        None
    }

    /// Carries out one effect; what it gives the core at once, if anything.
    fn run(
        &mut self,
        myself: &ActorRef<ClaimMsg>,
        effect: Effect<Port>,
    ) -> Result<Option<Feedback>, StoreError> {
        let ctx = &self.ctx;
        match effect {
            Effect::Decide { generation } => return Ok(self.decide(myself, generation)),
            Effect::Commit { generation, unit } => {
                if let Some(ClaimWrite::Start(..)) = unit.claim_write() {
                    self.reads_before_start = ctx.retries.reads();
                }
                let me = myself.clone();
                let span = self.commit_span(&unit);
                ctx.store.commit_then(
                    unit,
                    Box::new(move |outcome| {
                        if outcome.is_err() {
                            span.record("otel.status_code", "ERROR");
                        }
                        drop(span);
                        // An actor gone meanwhile (it failed) leaves the records to the next
                        // one, which reads them from the store.
                        let _ = me.cast(ClaimMsg::Committed {
                            generation,
                            outcome,
                        });
                    }),
                );
            }
            Effect::Complete(head) => ctx.store.complete_claim(&head)?,
            Effect::RunActions {
                generation,
                decision,
                taken_over,
            } => {
                let (me, attempts) = (myself.clone(), ctx.attempts.clone());
                tokio::spawn(async move {
                    let outcomes = attempts.inline(&decision).await;
                    // If the actor is gone (it failed), the claim stays in flight in the store
                    // and is taken over after `in_flight_timeout`.
                    let _ = me.cast(ClaimMsg::Dispatched {
                        generation,
                        outcomes,
                        taken_over,
                    });
                });
            }
            Effect::Offer { generation, offer } => {
                let (me, family, ctx) = (myself.clone(), self.family.clone(), ctx.clone());
                tokio::spawn(async move {
                    let answer = offer_to_subject(&family, &ctx, *offer).await;
                    let _ = me.cast(ClaimMsg::Offered { generation, answer });
                });
            }
            Effect::Reply(port, reply) => {
                let _ = port.send(reply);
            }
            Effect::StartTimer { waiter, wait } => {
                myself.send_after(wait, move || ClaimMsg::WaitOver(waiter));
            }
            Effect::AskHolder(holder) => ctx.store.ask_holder(self.core.id(), holder),
            Effect::AnnounceAnswer => ctx.store.announce_answer(self.core.id()),
            Effect::Reread => {
                let (me, store, id) = (myself.clone(), ctx.store.clone(), self.core.id().clone());
                // In a task of its own, so the mailbox stays open.
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
            Effect::WakeRetries => ctx.retries.wake(),
            Effect::StartQueued => match self.core.phase().claim() {
                // A store that leases due deliveries has the retry worker take the lease first,
                // by reading the queue.
                Some(claim) if !ctx.store.leases_due() => {
                    let logs = new_logs(&claim.decision, &[], &ctx.core.settings);
                    ctx.retries.hand_over(logs.writes, self.reads_before_start);
                }
                _ => ctx.retries.wake(),
            },
            Effect::Count(metric) => metric.count(),
            Effect::TookOver => {
                tracing::info!(tenant = %self.core.id().tenant, "took over a claim whose holder is gone")
            }
            Effect::Failpoint(name) => failpoint::hit(name),
            Effect::Stop(e) => {
                // What is in memory may now differ from the store: stop, and let the next
                // request rebuild the actor from it.
                tracing::error!(tenant = %self.core.id().tenant, error = %e, "claim actor stops after a failure");
                myself.stop(Some(e.to_string()));
            }
        }
        Ok(None)
    }
}

impl ClaimState {
    /// A span of the wait until `unit` is durable (the group commit, as this claim sees it), in
    /// the trace of the decision it writes; none for a decision made with tracing off.
    fn commit_span(&self, unit: &Unit) -> Span {
        let starts = match unit.claim_write() {
            Some(ClaimWrite::Start(_, events)) => match events.first() {
                Some(ClaimEvent::Claimed(claim)) => Some(claim),
                _ => None,
            },
            _ => None,
        };
        let Some(trace) = starts
            .or(self.core.phase().claim())
            .and_then(|claim| claim.decision.trace)
        else {
            return Span::none();
        };
        let span = crate::trace_span!(
            "commit",
            idem.records = unit.claim_write().map_or(0, ClaimWrite::records),
            otel.status_code = tracing::field::Empty,
        );
        trace::parent(&span, Some(trace));
        span
    }
}

/// Submits `offer` to the subject's claim and waits for its answer.
async fn offer_to_subject(
    family: &Arc<Family>,
    ctx: &Arc<ClaimContext>,
    offer: Offer,
) -> Result<Reply, String> {
    let Offer {
        to,
        request,
        decision,
    } = offer;
    let sub = Submission::of(request, Decide::Fixed(Box::new(decision)));
    submit(family, ctx, &to, sub)
        .await
        .map_err(|e| e.to_string())
}

/// What `decider` reads (its tenant's streams, its subject's history), then its decision.
pub(crate) async fn read_and_decide(
    ctx: &ClaimContext,
    decider: Decider,
) -> Result<idem_schemas::Decision, DecideError> {
    let streams = match decider.reads_streams() {
        true => ctx
            .store
            .streams(&decider.tenant)
            .await
            .map_err(|e| DecideError::Streams(e.to_string()))?,
        false => Vec::new(),
    };
    let now = now_ms();
    let counts = match decider.reads_history() {
        true => {
            let subject_hash = decider.subject_hash(&ctx.digester);
            let calls = decider.playbook.history();
            crate::history::read(&*ctx.store, &decider.tenant, &subject_hash, calls, now)
                .await
                .map_err(|e| DecideError::History(e.to_string()))?
        }
        false => Counts::new(),
    };
    decider.decide(&ctx.digester, &ctx.sealer, &streams, &counts, now)
}
