//! Deliveries: one callback of a decision, from its inline attempt until it is delivered, failed
//! or dead. Each has an event log (created with its envelope bytes, then each attempt answered
//! with what follows, and any redelivery), folded by `DeliveryState::apply`. The inline attempt
//! is recorded when the claim records its recovery point; after that a supervised delivery actor
//! per callback owns the retries: the retry worker wakes it when the due index says it is due, it
//! makes one signed attempt with the stored bytes, records the answer durably, and stops when the
//! delivery is final or it has been idle.

use std::sync::Arc;
use std::time::Duration;

use idem_schemas::timefmt::{now_ms, rfc3339_millis};
use idem_schemas::{
    ActionOutcome, ActionStatus, AttemptRecord, AttemptView, Decision, DeliveryEvent,
    DeliveryRecord, DeliveryStatus, DeliveryView, NextStep, PlannedDelivery,
};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use crate::dispatch::Dispatcher;
use crate::failpoint;
use crate::idle::IdleTimer;
use crate::registry::{Family, RegistryError};
use crate::store::{Placement, Store, StoreError};

/// How often a message may find its actor stopping under it before giving up.
const MAX_ROUNDS: usize = 64;

/// The retry policy.
#[derive(Debug, Clone)]
pub struct DeliverySettings {
    /// Attempts after the first of a series.
    pub max_retries: u32,
    /// Time between attempts.
    pub retry_interval: Duration,
    /// Deadline of each attempt.
    pub attempt_timeout: Duration,
    /// A delivery actor with nothing to do for this long stops.
    pub idle_timeout: Duration,
    /// How long after its creation a final delivery is kept (the claims' `key_ttl`).
    pub retention: Duration,
}

impl DeliverySettings {
    /// What follows an attempt classified `status`, the `series_attempts`-th of its series.
    pub fn next_step(
        &self,
        status: ActionStatus,
        series_attempts: u32,
        attempt: &AttemptRecord,
        now: u64,
    ) -> NextStep {
        match status {
            ActionStatus::Delivered => NextStep::Delivered,
            ActionStatus::Failed => NextStep::Failed,
            ActionStatus::Queued if series_attempts > self.max_retries => NextStep::Dead,
            ActionStatus::Queued => {
                let wait = (self.retry_interval.as_millis() as u64)
                    .max(attempt.retry_after_ms.unwrap_or(0));
                NextStep::RetryAt(now + wait)
            }
        }
    }
}

fn outcome_label(next: NextStep) -> &'static str {
    match next {
        NextStep::RetryAt(_) => "retry",
        NextStep::Delivered => "delivered",
        NextStep::Failed => "failed",
        NextStep::Dead => "dead",
    }
}

fn placement(next: NextStep) -> Placement {
    Placement {
        status: next.status(),
        due_ms: next.due_ms(),
    }
}

/// A delivery log that does not start with `Created`.
#[derive(Debug, thiserror::Error)]
#[error("delivery log is malformed: {0}")]
pub struct InvalidDeliveryLog(&'static str);

/// The fold of a delivery's log.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryState {
    /// What it sends, where.
    pub record: DeliveryRecord,
    /// Status and due time.
    pub placement: Placement,
    /// Every attempt so far.
    pub attempts: Vec<AttemptRecord>,
    /// Attempts in the current series (the first series starts with the inline attempt).
    pub series_attempts: u32,
    /// The next record's sequence number.
    pub next_seq: u32,
}

impl DeliveryState {
    /// Folds a whole log.
    pub fn fold(events: Vec<DeliveryEvent>) -> Result<Self, InvalidDeliveryLog> {
        let mut events = events.into_iter();
        let Some(DeliveryEvent::Created(record)) = events.next() else {
            return Err(InvalidDeliveryLog("the first event is not Created"));
        };
        let mut state = DeliveryState {
            placement: Placement {
                status: DeliveryStatus::Queued,
                due_ms: Some(record.created_at_ms),
            },
            record,
            attempts: Vec::new(),
            series_attempts: 0,
            next_seq: 1,
        };
        for event in events {
            state.apply(event)?;
        }
        Ok(state)
    }

    /// The one transition function of the delivery state machine.
    pub fn apply(&mut self, event: DeliveryEvent) -> Result<(), InvalidDeliveryLog> {
        match event {
            DeliveryEvent::Created(_) => return Err(InvalidDeliveryLog("Created twice")),
            DeliveryEvent::Answered { attempt, next } => {
                self.attempts.push(attempt);
                self.series_attempts += 1;
                self.placement = placement(next);
            }
            DeliveryEvent::Redelivered { at_ms } => {
                self.series_attempts = 0;
                self.placement = Placement {
                    status: DeliveryStatus::Queued,
                    due_ms: Some(at_ms),
                };
            }
        }
        self.next_seq += 1;
        Ok(())
    }

    /// As the tenant API shows it.
    pub fn view(&self) -> DeliveryView {
        DeliveryView {
            id: self.record.id.clone(),
            decision_id: self.record.decision_id.clone(),
            action: self.record.action.clone(),
            url: self.record.url.clone(),
            status: self.placement.status,
            next_attempt_at: self.placement.due_ms.map(rfc3339_millis),
            created_at: rfc3339_millis(self.record.created_at_ms),
            attempts: self
                .attempts
                .iter()
                .enumerate()
                .map(|(n, a)| AttemptView {
                    attempt: n as u32 + 1,
                    at: rfc3339_millis(a.at_ms),
                    status_code: a.code,
                    error: a.error.clone(),
                    latency_ms: a.latency_ms,
                })
                .collect(),
        }
    }
}

/// What delivery actors share.
pub struct DeliveryContext {
    /// The event log.
    pub store: Arc<Store>,
    /// Makes the attempts.
    pub dispatcher: Arc<Dispatcher>,
    /// Retry policy.
    pub settings: DeliverySettings,
}

impl DeliveryContext {
    /// Writes the log of every callback of `decision` whose inline attempt gave `outcomes`:
    /// created, then answered with what follows (queued ones enter the due index). With
    /// `may_exist` (finishing or taking over a claim after a crash, when an earlier process may
    /// have written some of them) deliveries that already exist are left alone; a decision made
    /// in this request has ids no log can have yet, so its logs are written without a lookup.
    /// Not durable until the next commit.
    pub fn stage_new(
        &self,
        decision: &Decision,
        outcomes: &[ActionOutcome],
        may_exist: bool,
    ) -> Result<(), StoreError> {
        for planned in &decision.deliveries {
            let Some(outcome) = outcomes.iter().find(|o| o.delivery_id == planned.id) else {
                continue;
            };
            if may_exist && self.store.delivery_exists(&planned.id)? {
                continue;
            }
            let next = self.settings.next_step(
                outcome.status,
                1,
                &outcome.attempt,
                outcome.attempt.at_ms + outcome.attempt.latency_ms,
            );
            let record = DeliveryRecord {
                id: planned.id.clone(),
                tenant: decision.tenant.clone(),
                decision_id: decision.id.clone(),
                action: planned.action.clone(),
                url: planned.url.clone(),
                body: planned.body.clone(),
                created_at_ms: decision.created_at_ms,
                expires_at_ms: decision.created_at_ms + self.settings.retention.as_millis() as u64,
            };
            crate::metrics::DELIVERY_ATTEMPTS
                .with_label_values(&["1", outcome_label(next)])
                .inc();
            let events = [
                DeliveryEvent::Created(record),
                DeliveryEvent::Answered {
                    attempt: outcome.attempt.clone(),
                    next,
                },
            ];
            self.store.stage_delivery(
                &decision.tenant,
                &planned.id,
                0,
                &events,
                None,
                placement(next),
            )?;
        }
        Ok(())
    }
}

impl DeliveryContext {
    /// A delivery as stored, if it exists.
    pub fn load(&self, id: &str) -> Result<Option<DeliveryState>, StoreError> {
        match self.store.load_delivery(id)? {
            None => Ok(None),
            Some(events) => DeliveryState::fold(events)
                .map(Some)
                .map_err(|e| StoreError::Commit(e.to_string())),
        }
    }

    /// Forgets up to `limit` final deliveries whose retention ended before `now_ms`; one still
    /// queued is looked at again a retry interval later. Returns how many were forgotten.
    pub fn sweep(&self, now_ms: u64, limit: usize) -> Result<usize, StoreError> {
        let mut forgotten = 0;
        for (expired, id) in self.store.expired_deliveries(now_ms, limit)? {
            match self.load(&id)? {
                Some(d) if d.placement.due_ms.is_some() => {
                    let later = now_ms + self.settings.retry_interval.as_millis() as u64;
                    self.store.postpone_forgetting(expired, later, &id)?;
                }
                Some(d) => {
                    self.store.forget_delivery(
                        expired,
                        &d.record.tenant,
                        &id,
                        d.placement.status,
                    )?;
                    forgotten += 1;
                }
                None => self
                    .store
                    .forget_delivery(expired, "", &id, DeliveryStatus::Dead)?,
            }
        }
        Ok(forgotten)
    }
}

/// Messages of a delivery actor.
pub enum DeliveryMsg {
    /// The due index says an attempt is due at `due_ms`.
    Attempt {
        /// The due time of the index entry that woke the actor.
        due_ms: u64,
    },
    /// Start a new series of attempts (failed or dead deliveries only).
    Redeliver(RpcReplyPort<Result<DeliveryView, DeliveryStatus>>),
    /// Time to check whether the actor has been idle long enough to stop.
    IdleCheck,
}

/// The delivery actor.
pub struct DeliveryActor;

/// The delivery actor's state.
pub struct DeliveryActorState {
    ctx: Arc<DeliveryContext>,
    delivery: DeliveryState,
    idle: IdleTimer<DeliveryMsg>,
}

impl DeliveryActorState {
    async fn record(
        &mut self,
        event: DeliveryEvent,
        to: Placement,
    ) -> Result<(), ActorProcessingErr> {
        let d = &self.delivery;
        let store = &self.ctx.store;
        store.stage_delivery(
            &d.record.tenant,
            &d.record.id,
            d.next_seq,
            std::slice::from_ref(&event),
            Some(d.placement),
            to,
        )?;
        store.commit().await?;
        self.delivery.apply(event)?;
        Ok(())
    }

    async fn attempt(&mut self, due_ms: u64) -> Result<(), ActorProcessingErr> {
        let now = now_ms();
        match self.delivery.placement.due_ms {
            Some(due) if due == due_ms && due <= now => {}
            Some(due) if due == due_ms => return Ok(()),
            // The index entry is stale (the delivery moved on): drop it.
            _ => {
                self.ctx.store.drop_due(due_ms, &self.delivery.record.id)?;
                return Ok(());
            }
        }
        let record = &self.delivery.record;
        let planned = PlannedDelivery {
            id: record.id.clone(),
            action: record.action.clone(),
            url: record.url.clone(),
            body: record.body.clone(),
        };
        let (status, attempt) = self
            .ctx
            .dispatcher
            .attempt(
                &record.tenant,
                &record.decision_id,
                &planned,
                self.ctx.settings.attempt_timeout,
            )
            .await;
        let next = self.ctx.settings.next_step(
            status,
            self.delivery.series_attempts + 1,
            &attempt,
            now_ms(),
        );
        tracing::info!(delivery = %record.id, attempt = self.delivery.attempts.len() + 1, code = ?attempt.code, error = ?attempt.error, next = ?next, "retry attempt");
        failpoint::hit("delivery.after_attempt");
        let number = self.delivery.attempts.len() + 1;
        crate::metrics::DELIVERY_ATTEMPTS
            .with_label_values(&[crate::metrics::attempt_label(number), outcome_label(next)])
            .inc();
        // Until this record is durable the attempt is not counted: a crash here makes it again,
        // with the same webhook-id and bytes.
        self.record(DeliveryEvent::Answered { attempt, next }, placement(next))
            .await
    }
}

/// What a delivery actor starts from.
pub struct DeliveryArgs {
    /// The delivery it owns.
    pub id: String,
    /// Shared context.
    pub ctx: Arc<DeliveryContext>,
}

impl Actor for DeliveryActor {
    type Msg = DeliveryMsg;
    type State = DeliveryActorState;
    type Arguments = DeliveryArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<DeliveryMsg>,
        args: DeliveryArgs,
    ) -> Result<DeliveryActorState, ActorProcessingErr> {
        let events = args
            .ctx
            .store
            .load_delivery(&args.id)?
            .ok_or_else(|| format!("no delivery {}", args.id))?;
        let delivery = DeliveryState::fold(events)?;
        Ok(DeliveryActorState {
            delivery,
            idle: IdleTimer::start(&myself, args.ctx.settings.idle_timeout, || {
                DeliveryMsg::IdleCheck
            }),
            ctx: args.ctx,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<DeliveryMsg>,
        message: DeliveryMsg,
        state: &mut DeliveryActorState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            DeliveryMsg::IdleCheck => {
                if state.idle.expired(&myself, false) {
                    myself.stop(Some("idle".into()));
                }
                return Ok(());
            }
            DeliveryMsg::Attempt { due_ms } => state.attempt(due_ms).await?,
            DeliveryMsg::Redeliver(reply) => {
                let status = state.delivery.placement.status;
                if matches!(status, DeliveryStatus::Failed | DeliveryStatus::Dead) {
                    let at_ms = now_ms();
                    let to = Placement {
                        status: DeliveryStatus::Queued,
                        due_ms: Some(at_ms),
                    };
                    state
                        .record(DeliveryEvent::Redelivered { at_ms }, to)
                        .await?;
                    let _ = reply.send(Ok(state.delivery.view()));
                    let _ = myself.cast(DeliveryMsg::Attempt { due_ms: at_ms });
                } else {
                    let _ = reply.send(Err(status));
                }
            }
        }
        state.idle.touch(&myself);
        if state.delivery.placement.due_ms.is_none() {
            // Final: nothing more for this actor to do.
            myself.stop(Some("final".into()));
        }
        Ok(())
    }
}

/// Why a redelivery was refused.
#[derive(Debug, thiserror::Error)]
pub enum RedeliverError {
    /// No such delivery.
    #[error("no such delivery")]
    NotFound,
    /// Only failed or dead deliveries may be redelivered.
    #[error("the delivery is {}", .0.as_str())]
    NotFinal(DeliveryStatus),
    /// The actor could not take the request.
    #[error(transparent)]
    Actor(#[from] RegistryError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The way to delivery actors.
pub struct Deliveries {
    family: Family,
    ctx: Arc<DeliveryContext>,
}

impl Deliveries {
    /// Starts the delivery supervisor.
    pub async fn start(instance: &str, ctx: Arc<DeliveryContext>) -> Result<Self, RegistryError> {
        Ok(Deliveries {
            family: Family::start(instance, "delivery", usize::MAX).await?,
            ctx,
        })
    }

    /// The shared context.
    pub fn context(&self) -> &Arc<DeliveryContext> {
        &self.ctx
    }

    /// The delivery actors' family (liveness, failures).
    pub fn family(&self) -> &Family {
        &self.family
    }

    async fn actor(&self, id: &str) -> Result<ActorRef<DeliveryMsg>, RegistryError> {
        let name = self.family.name(id);
        for _ in 0..MAX_ROUNDS {
            let args = DeliveryArgs {
                id: id.to_string(),
                ctx: self.ctx.clone(),
            };
            if let Some(actor) = self
                .family
                .find_or_spawn(&name, DeliveryActor, args)
                .await?
            {
                return Ok(actor);
            }
        }
        Err(RegistryError::Unavailable)
    }

    /// Wakes the actor of a delivery whose index entry is due at `due_ms`.
    pub async fn wake(&self, id: &str, due_ms: u64) -> Result<(), RegistryError> {
        for _ in 0..MAX_ROUNDS {
            let actor = self.actor(id).await?;
            // A cast to an actor that stopped in between fails: look it up again.
            if actor.cast(DeliveryMsg::Attempt { due_ms }).is_ok() {
                return Ok(());
            }
            tokio::task::yield_now().await;
        }
        Err(RegistryError::Unavailable)
    }

    /// A delivery as stored, if it exists.
    pub fn load(&self, id: &str) -> Result<Option<DeliveryState>, StoreError> {
        self.ctx.load(id)
    }

    /// Starts a new series of attempts for a failed or dead delivery.
    pub async fn redeliver(&self, id: &str) -> Result<DeliveryView, RedeliverError> {
        if !self.ctx.store.delivery_exists(id)? {
            return Err(RedeliverError::NotFound);
        }
        for _ in 0..MAX_ROUNDS {
            let actor = self.actor(id).await?;
            match actor.call(DeliveryMsg::Redeliver, None).await {
                Ok(ractor::rpc::CallResult::Success(Ok(view))) => return Ok(view),
                Ok(ractor::rpc::CallResult::Success(Err(status))) => {
                    return Err(RedeliverError::NotFinal(status))
                }
                // Stopped before handling it (a redelivery is idempotent on a queued delivery).
                _ => tokio::task::yield_now().await,
            }
        }
        Err(RegistryError::Unavailable.into())
    }

    /// Stops every delivery actor and the supervisor.
    pub async fn shutdown(&self) {
        self.family.shutdown().await;
    }
}
