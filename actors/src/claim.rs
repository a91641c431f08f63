//! The claim actor: one per (tenant, key digest), the only thing that decides what a request
//! carrying that key gets. Its state is the fold of the claim's event log; every request for
//! the key passes through its mailbox, so concurrent duplicates are serialised without a lock.
//!
//! A first request claims the key (its decision made then, fixed and on disk), then the
//! callbacks run in a task of their own while the actor keeps answering duplicates (409 while in
//! flight, 422 for another payload). The task reports back; the actor records the `dispatched`
//! recovery point (the outcomes and the response built from them), then `completed`, and answers
//! the first request. A decision without actions writes all three records at once. The actor
//! never waits for the disk in a handler: the group commit tells it when its records are durable
//! (`Committed`), and until the first request is answered, every other request for the key gets
//! 409. An actor idle for a while stops; the next request rebuilds it from the log.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem_schemas::timefmt::now_ms;
use idem_schemas::{ActionOutcome, Claim, ClaimEvent, Decision, StoredResponse};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use crate::delivery::DeliveryContext;
use crate::dispatch::Dispatcher;
use crate::failpoint;
use crate::idle::IdleTimer;
use crate::store::{ClaimId, LogHead, Store, StoreError};

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
    /// This process's epoch: claims made by another epoch have no live holder.
    pub holder: u64,
}

/// What claim actors share.
pub struct ClaimContext {
    /// The event log.
    pub store: Arc<Store>,
    /// Makes the callback attempts.
    pub dispatcher: Arc<Dispatcher>,
    /// Where the callbacks' delivery logs are created.
    pub deliveries: Arc<DeliveryContext>,
    /// Time windows.
    pub settings: ClaimSettings,
}

/// Makes the decision a request fixes if it wins its claim, given the claim's time.
pub type Decide = Box<dyn FnOnce(u64) -> Result<Decision, String> + Send>;

/// One request for a key.
pub struct Submission {
    /// Keyed digest of the request's canonical body.
    pub fingerprint: [u8; 32],
    /// Makes the decision, called only if this request wins the claim: a duplicate, a replay or
    /// a refused payload never pays for one (in a storm of a thousand copies, a decision's ids,
    /// envelopes and digest were a tenth of the server's time).
    decide: Mutex<Option<Decide>>,
    /// Set when the actor starts handling the submission, so a caller whose call ends without a
    /// reply knows whether it may safely send it again (never handled) or not.
    accepted: AtomicBool,
}

impl Submission {
    /// A submission for a body with `fingerprint`, which `decide`s if it wins the claim.
    pub fn new(
        fingerprint: [u8; 32],
        decide: impl FnOnce(u64) -> Result<Decision, String> + Send + 'static,
    ) -> Self {
        Submission {
            fingerprint,
            decide: Mutex::new(Some(Box::new(decide))),
            accepted: AtomicBool::new(false),
        }
    }

    /// The decision of this request, made at `now_ms` (once: a submission wins at most once).
    fn decide(&self, now_ms: u64) -> Result<Decision, String> {
        let decide = self
            .decide
            .lock()
            .map_err(|_| "a decision panicked".to_string())?
            .take()
            .ok_or_else(|| "the submission has decided already".to_string())?;
        decide(now_ms)
    }

    /// True once an actor has started handling this submission.
    pub fn was_accepted(&self) -> bool {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// The actor's answer to a submission.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// This request made the decision: the response it must send (already durable).
    First(StoredResponse),
    /// The key completed earlier: the stored response, to send with `Idempotent-Replayed`.
    Replayed(StoredResponse),
    /// Another request holds the key right now.
    InFlight,
    /// The key was used with another payload.
    Mismatch,
    /// The store failed; nothing was answered for the key.
    Failed(String),
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
    },
    /// A group commit the actor asked for (for generation `generation`) is done. What comes next
    /// follows from the phase the commit made durable: actions to run after `in_flight`, the
    /// first request to answer after `dispatched` or `completed`.
    Committed {
        /// The claim generation whose records were committed.
        generation: u64,
        /// Whether they are durable.
        outcome: Result<(), StoreError>,
    },
    /// Time to check whether the actor has been idle long enough to stop (its own timer).
    IdleCheck,
}

/// Where a claim stands: the fold of its log.
#[derive(Debug, Clone, PartialEq)]
pub enum Phase {
    /// Never claimed (or swept).
    Free,
    /// Claimed; the actions may be running.
    InFlight(Claim),
    /// The actions ran; their outcomes and the response are recorded.
    Dispatched(Claim, Vec<ActionOutcome>, StoredResponse),
    /// The response was handed out.
    Completed(Claim, StoredResponse),
}

/// A log whose events do not follow `in_flight → dispatched → completed`.
#[derive(Debug, thiserror::Error)]
#[error("claim log out of order: {event} after {phase}")]
pub struct InvalidTransition {
    phase: &'static str,
    event: &'static str,
}

impl Phase {
    /// The one transition function of the claim state machine.
    pub fn apply(self, event: ClaimEvent) -> Result<Phase, InvalidTransition> {
        match (self, event) {
            (Phase::Free, ClaimEvent::Claimed(claim)) => Ok(Phase::InFlight(claim)),
            // A new generation after expiry starts the machine again.
            (
                Phase::Completed(..) | Phase::InFlight(_) | Phase::Dispatched(..),
                ClaimEvent::Claimed(claim),
            ) => Ok(Phase::InFlight(claim)),
            (Phase::InFlight(claim), ClaimEvent::Dispatched { outcomes, response }) => {
                Ok(Phase::Dispatched(claim, outcomes, response))
            }
            (Phase::Dispatched(claim, _, response), ClaimEvent::Completed) => {
                Ok(Phase::Completed(claim, response))
            }
            (phase, event) => Err(InvalidTransition {
                phase: phase.name(),
                event: event.name(),
            }),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Phase::Free => "free",
            Phase::InFlight(_) => "in_flight",
            Phase::Dispatched(..) => "dispatched",
            Phase::Completed(..) => "completed",
        }
    }

    fn claim(&self) -> Option<&Claim> {
        match self {
            Phase::Free => None,
            Phase::InFlight(c) | Phase::Dispatched(c, ..) | Phase::Completed(c, _) => Some(c),
        }
    }
}

/// What a submission leads to, given the phase.
enum Step {
    /// Answer at once.
    Answer(Reply),
    /// Claim the key (free, or its claim expired).
    Claim,
    /// Run the stored decision's actions again: the claim's holder is gone.
    TakeOver,
    /// Finish from the recovery point.
    Finish,
}

/// The response to a decision's first processing, given its actions' outcomes.
fn first_response(
    decision: &Decision,
    outcomes: &[ActionOutcome],
) -> Result<StoredResponse, StoreError> {
    let body = serde_json::to_vec(&decision.response(outcomes))
        .map_err(|e| StoreError::Commit(format!("cannot serialise the response: {e}")))?;
    Ok(StoredResponse { status: 201, body })
}

/// The claim actor.
pub struct ClaimActor;

/// The actor's state.
pub struct ClaimState {
    id: ClaimId,
    ctx: Arc<ClaimContext>,
    generation: u64,
    /// The log as last read or written: what the next append extends.
    head: Option<LogHead>,
    phase: Phase,
    /// The first request of the current generation, from its claim (or take-over) until it is
    /// answered: while it waits, what the phase holds may not be durable yet.
    waiter: Option<RpcReplyPort<Reply>>,
    idle: IdleTimer<ClaimMsg>,
}

impl ClaimState {
    fn step(&self, sub: &Submission, now: u64) -> Step {
        let Some(claim) = self.phase.claim() else {
            return Step::Claim;
        };
        let same_payload = claim.fingerprint == sub.fingerprint;
        // While the first request waits for its answer, nothing here is a durable result to
        // replay or a claim to take over: the key is in flight.
        if self.waiter.is_some() {
            return Step::Answer(match same_payload {
                true => Reply::InFlight,
                false => Reply::Mismatch,
            });
        }
        if now >= claim.expires_at_ms {
            return Step::Claim;
        }
        if !same_payload {
            return Step::Answer(Reply::Mismatch);
        }
        match &self.phase {
            Phase::Completed(_, response) => Step::Answer(Reply::Replayed(response.clone())),
            Phase::Dispatched(..) => Step::Finish,
            Phase::InFlight(claim) => {
                let settings = &self.ctx.settings;
                let holder_gone = claim.holder != settings.holder
                    || now.saturating_sub(claim.claimed_at_ms)
                        >= settings.in_flight_timeout.as_millis() as u64;
                match holder_gone {
                    true => Step::TakeOver,
                    false => Step::Answer(Reply::InFlight),
                }
            }
            Phase::Free => Step::Claim,
        }
    }

    /// Appends `events` to the log in one write and folds them into the phase. The records are
    /// durable with the next commit; the mailbox waits for nothing here.
    fn stage(&mut self, events: Vec<ClaimEvent>) -> Result<(), StoreError> {
        let store = &self.ctx.store;
        self.head = Some(match (events.as_slice(), &self.head) {
            ([ClaimEvent::Claimed(_), ..], _) => {
                store.start_claim(&self.id, self.generation, &events)?
            }
            ([ClaimEvent::Completed], Some(head)) => {
                store.complete_claim(&self.id, head)?;
                head.clone()
            }
            (_, Some(head)) => store.extend_claim(head, &events)?,
            (_, None) => return Err(StoreError::LogMismatch),
        });
        for event in events {
            crate::metrics::CLAIM_TRANSITIONS
                .with_label_values(&[event.name()])
                .inc();
            let phase = std::mem::replace(&mut self.phase, Phase::Free);
            self.phase = phase
                .apply(event)
                .map_err(|e| StoreError::Commit(format!("invalid transition after append: {e}")))?;
        }
        Ok(())
    }

    /// Appends `events` to the log and asks for them to be made durable; the actor hears back
    /// with [`ClaimMsg::Committed`]. It does not wait for the disk in its handler: the mailbox
    /// stays open, so the duplicates of a storm are answered (409) while the first request's
    /// records are being synced, not after.
    fn stage_and_commit(
        &mut self,
        myself: &ActorRef<ClaimMsg>,
        events: Vec<ClaimEvent>,
    ) -> Result<(), StoreError> {
        self.stage(events)?;
        let (me, generation) = (myself.clone(), self.generation);
        self.ctx.store.commit_then(move |outcome| {
            // An actor gone meanwhile (it failed) leaves the records to the next one, which
            // reads them from disk.
            let _ = me.cast(ClaimMsg::Committed {
                generation,
                outcome,
            });
        });
        Ok(())
    }

    /// Answers the waiting first request with the store failure `e` and hands `e` on, for the
    /// actor to stop.
    fn fail(&mut self, e: StoreError) -> Result<(), StoreError> {
        if let Some(waiter) = self.waiter.take() {
            let _ = waiter.send(Reply::Failed(e.to_string()));
        }
        Err(e)
    }

    /// Marks the recorded response as handed out and returns it.
    fn complete(&mut self) -> Result<StoredResponse, StoreError> {
        let Phase::Dispatched(_, _, response) = &self.phase else {
            return Err(StoreError::Commit(
                "complete before the recovery point".into(),
            ));
        };
        let response = response.clone();
        failpoint::hit("complete.before_persist");
        // `completed` need not be durable before the response leaves: the response's bytes are
        // on disk already, in the recovery point, so a crash that loses this record leaves
        // `dispatched`, from which every retry answers the same bytes.
        self.stage(vec![ClaimEvent::Completed])?;
        Ok(response)
    }
}

impl ClaimActor {
    /// Runs the claim's actions in a task of their own, which reports back with
    /// [`ClaimMsg::Dispatched`]; the first request stays waiting.
    fn start_dispatch(myself: &ActorRef<ClaimMsg>, state: &mut ClaimState, taken_over: bool) {
        let Some(claim) = state.phase.claim() else {
            let _ = state.fail(StoreError::Commit("dispatch without a claim".into()));
            return;
        };
        let decision = claim.decision.clone();
        let dispatcher = state.ctx.dispatcher.clone();
        let generation = state.generation;
        let me = myself.clone();
        tokio::spawn(async move {
            let outcomes = dispatcher.dispatch(&decision).await;
            // If the actor is gone (it failed), the claim stays in flight on disk and is taken
            // over after `in_flight_timeout`.
            let _ = me.cast(ClaimMsg::Dispatched {
                generation,
                outcomes,
                taken_over,
            });
        });
    }

    fn submit(
        myself: &ActorRef<ClaimMsg>,
        state: &mut ClaimState,
        sub: Arc<Submission>,
        reply: RpcReplyPort<Reply>,
    ) -> Result<(), StoreError> {
        sub.accepted.store(true, Ordering::SeqCst);
        let now = now_ms();
        match state.step(&sub, now) {
            Step::Answer(answer) => {
                let _ = reply.send(answer);
            }
            Step::Claim => {
                // A generation is the claim time, strictly increasing per key.
                let generation = now.max(state.generation + 1);
                let decision = match sub.decide(generation) {
                    Ok(decision) => decision,
                    // Nothing is claimed: the key stays free, and the actor is as it was.
                    Err(e) => {
                        let _ = reply.send(Reply::Failed(e));
                        return Ok(());
                    }
                };
                state.generation = generation;
                state.waiter = Some(reply);
                let claim = Claim {
                    fingerprint: sub.fingerprint,
                    holder: state.ctx.settings.holder,
                    claimed_at_ms: state.generation,
                    expires_at_ms: state.generation + state.ctx.settings.key_ttl.as_millis() as u64,
                    decision,
                };
                let staged = if claim.decision.deliveries.is_empty() {
                    // Nothing runs between this decision's claim, recovery point and completion,
                    // so there is no side effect to guard: the three records are one durable
                    // write (one commit instead of two), answered once it is on disk.
                    first_response(&claim.decision, &[]).and_then(|response| {
                        let events = vec![
                            ClaimEvent::Claimed(claim),
                            ClaimEvent::Dispatched {
                                outcomes: Vec::new(),
                                response,
                            },
                            ClaimEvent::Completed,
                        ];
                        state.stage_and_commit(myself, events)
                    })
                } else {
                    // The claim, with its decision and every callback body, is durable before
                    // any action runs (they start once it is): a crash from here on resumes this
                    // decision, never a new one.
                    let events = vec![ClaimEvent::Claimed(claim)];
                    state.stage_and_commit(myself, events)
                };
                if let Err(e) = staged {
                    return state.fail(e);
                }
            }
            Step::TakeOver => {
                tracing::info!(tenant = %state.id.tenant, "taking over a claim whose holder is gone");
                crate::metrics::CLAIM_TRANSITIONS
                    .with_label_values(&["taken_over"])
                    .inc();
                state.waiter = Some(reply);
                Self::start_dispatch(myself, state, true);
            }
            Step::Finish => {
                let (decision, outcomes) = match &state.phase {
                    Phase::Dispatched(claim, outcomes, _) => {
                        (claim.decision.clone(), outcomes.clone())
                    }
                    _ => return Ok(()),
                };
                // The delivery logs were written with the recovery point; make sure anyway
                // (existing ones are left alone), then complete with the recorded response. It
                // was stored before this request came: the answer is a replay.
                let finished = state
                    .ctx
                    .deliveries
                    .stage_new(&decision, &outcomes, true)
                    .and_then(|()| state.complete());
                match finished {
                    Ok(response) => {
                        let _ = reply.send(Reply::Replayed(response));
                    }
                    Err(e) => {
                        let _ = reply.send(Reply::Failed(e.to_string()));
                        return Err(e);
                    }
                }
            }
        }
        Ok(())
    }

    fn dispatched(
        myself: &ActorRef<ClaimMsg>,
        state: &mut ClaimState,
        generation: u64,
        outcomes: Vec<ActionOutcome>,
        taken_over: bool,
    ) -> Result<(), StoreError> {
        let running = generation == state.generation
            && matches!(state.phase, Phase::InFlight(_))
            && state.waiter.is_some();
        if !running {
            return Ok(());
        }
        failpoint::hit("dispatch.before_recovery_point");
        // The recovery point: once the outcomes and the response built from them are durable, a
        // retry answers that response and never runs the actions again; the first request is
        // answered only then. The delivery logs (queued ones enter the retry queue) are written
        // first, so they are durable no later.
        let staged = match state.phase.claim() {
            Some(claim) => first_response(&claim.decision, &outcomes).and_then(|response| {
                state
                    .ctx
                    .deliveries
                    .stage_new(&claim.decision, &outcomes, taken_over)?;
                Ok(response)
            }),
            None => Err(StoreError::Commit("dispatched without a claim".into())),
        }
        .and_then(|response| {
            let events = vec![ClaimEvent::Dispatched { outcomes, response }];
            state.stage_and_commit(myself, events)
        });
        staged.or_else(|e| state.fail(e))
    }

    fn committed(
        myself: &ActorRef<ClaimMsg>,
        state: &mut ClaimState,
        generation: u64,
        outcome: Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        if generation != state.generation || state.waiter.is_none() {
            return Ok(());
        }
        if let Err(e) = outcome {
            return state.fail(e);
        }
        let answered = match &state.phase {
            // The claim is durable: the actions may run.
            Phase::InFlight(_) => {
                failpoint::hit("claim.after_persist");
                Self::start_dispatch(myself, state, false);
                return Ok(());
            }
            // The recovery point is durable.
            Phase::Dispatched(..) => {
                failpoint::hit("dispatch.after_recovery_point");
                state.complete()
            }
            // A decision without actions: all three records are durable.
            Phase::Completed(_, response) => {
                failpoint::hit("claim.after_persist");
                Ok(response.clone())
            }
            Phase::Free => Err(StoreError::Commit("committed without a claim".into())),
        };
        match answered {
            // The response is durable (in the recovery point) before it leaves: a replay can
            // never differ.
            Ok(response) => {
                if let Some(waiter) = state.waiter.take() {
                    let _ = waiter.send(Reply::First(response));
                }
                Ok(())
            }
            Err(e) => state.fail(e),
        }
    }
}

/// What a claim actor starts from.
pub struct ClaimArgs {
    /// The key it owns.
    pub id: ClaimId,
    /// What it shares with the others.
    pub ctx: Arc<ClaimContext>,
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
        let log = args.ctx.store.load_claim(&args.id)?;
        // Sabotage (failpoints builds only): the claim on disk is ignored, as if claims lived
        // only in memory.
        #[cfg(feature = "failpoints")]
        let log = log.filter(|_| !crate::failpoint::switched_on("sabotage"));
        let (generation, events, head) = log.map_or((0, Vec::new(), None), |l| {
            (l.generation, l.events, Some(l.head))
        });
        let mut phase = Phase::Free;
        for event in events {
            phase = phase.apply(event)?;
        }
        Ok(ClaimState {
            id: args.id,
            generation,
            head,
            phase,
            waiter: None,
            idle: IdleTimer::start(&myself, args.ctx.settings.idle_timeout, || {
                ClaimMsg::IdleCheck
            }),
            ctx: args.ctx,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<ClaimMsg>,
        message: ClaimMsg,
        state: &mut ClaimState,
    ) -> Result<(), ActorProcessingErr> {
        let outcome = match message {
            ClaimMsg::IdleCheck => {
                let busy = state.waiter.is_some();
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
            } => Self::dispatched(&myself, state, generation, outcomes, taken_over),
            ClaimMsg::Committed {
                generation,
                outcome,
            } => Self::committed(&myself, state, generation, outcome),
        };
        state.idle.touch(&myself);
        if let Err(e) = outcome {
            // What is in memory may now differ from the log: stop, and let the next request
            // rebuild the actor from disk.
            tracing::error!(tenant = %state.id.tenant, error = %e, "claim actor stops after a store failure");
            myself.stop(Some(e.to_string()));
        }
        Ok(())
    }
}
