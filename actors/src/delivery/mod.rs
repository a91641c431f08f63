//! Deliveries: one callback of a decision, from its inline attempt until it is delivered, failed
//! or dead. The inline attempt is recorded with the claim's recovery point (or, for a keyless
//! signal, before its answer); after that a supervised delivery actor per callback owns the
//! retries: the retry worker wakes it when the retry queue says it is due, it makes one signed
//! attempt with the stored bytes, records the answer durably, and stops when the delivery is
//! final or it has been idle. An attempt goes only if its endpoint admits it: while the endpoint
//! is open the delivery waits (a `Held` record moves its due time, using up no attempt), and
//! while the endpoint has as many attempts running as it may, it waits for a place.
//! `DeliveryActors` is the way to these actors.

pub mod state;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use idem_schemas::stored::stream_of;
use idem_schemas::timefmt::now_ms;
use idem_schemas::{DeliveryEvent, DeliveryStatus, DeliveryView, PlannedDelivery};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use crate::attempt::{Attempting, Attempts, Readiness};
use crate::endpoint::Admission;
use crate::failpoint;
use crate::idle::IdleTimer;
use crate::metrics::Metric;
use crate::settings::Settings;
use crate::store::{DeliveryWrite, Placement, Store, StoreError, Timed, Unit, Written};
use crate::supervise::{Family, RegistryError};
pub use state::{
    new_logs, queued_log, record_of, DeliveryState, Hold, InvalidDeliveryLog, NewLogs, PollAnswer,
};
use state::{outcome_label, placement, Redelivery};

/// What delivery actors share.
pub struct DeliveryContext {
    /// The delivery logs.
    pub store: Arc<dyn Store>,
    /// Makes the attempts.
    pub attempts: Arc<Attempts>,
    /// The engine's settings (the retry policy is `delivery`'s).
    pub settings: Arc<Settings>,
    /// Deliveries woken on this node whose attempt has not ended yet, since when: the retry
    /// worker does not wake them again meanwhile.
    pending: Mutex<HashMap<String, Instant>>,
    /// The walks through what push streams held running on this node.
    pub walks: Walks,
}

/// The walks through what enabled push streams held (see `crate::streams::HeldWalk::run`) running on this
/// node, by (tenant, stream destination): a SET to the stream made before its walk began, not
/// sent yet, is the walk's to send, and the retry worker leaves it to the walk.
#[derive(Default)]
pub struct Walks(Mutex<HashMap<(String, String), Walk>>);

#[derive(Debug, Clone, Copy)]
struct Walk {
    since_ms: u64,
    again: bool,
}

impl Walks {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Walk>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Begins a walk of `tenant`'s stream at `url` covering what was made up to `now_ms`:
    /// true if the caller is to run it, false if one runs already (it goes round once more and
    /// covers up to `now_ms`).
    pub fn begin(&self, tenant: &str, url: &str, now_ms: u64) -> bool {
        let mut walks = self.lock();
        let key = (tenant.to_string(), url.to_string());
        if let Some(walk) = walks.get_mut(&key) {
            walk.since_ms = walk.since_ms.max(now_ms);
            walk.again = true;
            return false;
        }
        walks.insert(
            key,
            Walk {
                since_ms: now_ms,
                again: false,
            },
        );
        true
    }

    /// The walk's round is over: whether it was asked to go round once more meanwhile (it
    /// forgets the asking).
    pub fn again(&self, tenant: &str, url: &str) -> bool {
        let key = (tenant.to_string(), url.to_string());
        self.lock()
            .get_mut(&key)
            .is_some_and(|w| std::mem::take(&mut w.again))
    }

    /// Ends the walk of `tenant`'s stream at `url`.
    pub fn end(&self, tenant: &str, url: &str) {
        self.lock().remove(&(tenant.to_string(), url.to_string()));
    }

    /// Whether a SET of `tenant`'s to `url` made at `created_ms` is a running walk's to send.
    pub fn covers(&self, tenant: &str, url: &str, created_ms: u64) -> bool {
        let walks = self.lock();
        if walks.is_empty() {
            return false;
        }
        walks
            .get(&(tenant.to_string(), url.to_string()))
            .is_some_and(|w| created_ms <= w.since_ms)
    }
}

/// Why a delivery could not be read or moved on.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The delivery's log does not fold.
    #[error(transparent)]
    Log(#[from] InvalidDeliveryLog),
    /// No such delivery.
    #[error("no delivery {0}")]
    Missing(String),
    /// The delivery moved on under this writer (another node recorded, or its lease ended).
    #[error("the delivery was written by another holder; it is read again")]
    Fenced,
}

impl DeliveryContext {
    /// The context of delivery actors on `store`, attempting through `attempts`.
    pub fn new(store: Arc<dyn Store>, attempts: Arc<Attempts>, settings: Arc<Settings>) -> Self {
        DeliveryContext {
            store,
            attempts,
            settings,
            pending: Mutex::new(HashMap::new()),
            walks: Walks::default(),
        }
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks `id` woken; false if it was woken already and its attempt may still be running
    /// (past three attempt deadlines, a mark is stale: its actor may have failed).
    fn mark_pending(&self, id: &str) -> bool {
        let now = Instant::now();
        let stale = self.settings.delivery.inline_timeout * 3;
        let mut pending = self.pending();
        match pending.get(id) {
            Some(since) if now.duration_since(*since) < stale => false,
            _ => {
                pending.insert(id.to_string(), now);
                true
            }
        }
    }

    /// A delivery as stored, if it exists.
    pub async fn load(&self, id: &str) -> Result<Option<DeliveryState>, DeliveryError> {
        match self.store.load_delivery(id).await? {
            None => Ok(None),
            Some(events) => match DeliveryState::fold(events) {
                Ok(state) => Ok(Some(state)),
                Err(e) => {
                    tracing::error!(delivery = id, error = %e, "a delivery's log does not fold: it is left as it is, and not attempted");
                    Err(e.into())
                }
            },
        }
    }
}

/// Messages of a delivery actor.
pub enum DeliveryMsg {
    /// The retry queue says an attempt is due at `due_ms`.
    Attempt {
        /// The due time of the queue entry that woke the actor.
        due_ms: u64,
        /// The lease this node holds on the attempt, where the store leases them.
        lease: Option<u64>,
    },
    /// Start a new series of attempts (failed or dead deliveries only), unless it was
    /// redelivered since `since_ms` (by the bulk claim made then: see
    /// [`DeliveryState::redelivery`]).
    Redeliver {
        since_ms: Option<u64>,
        reply: RpcReplyPort<Result<DeliveryView, RedeliverError>>,
    },
    /// `answer` to this SET, waiting in the poll stream whose destination is `url`: whether
    /// that answered it.
    Polled {
        url: String,
        answer: PollAnswer,
        reply: RpcReplyPort<bool>,
    },
    /// Its stream was disabled: if it is held, due at `at_ms` instead of at its next look;
    /// whether that moved it.
    Release {
        at_ms: u64,
        reply: RpcReplyPort<bool>,
    },
    /// Its push stream was enabled, and the SETs held before this one have had their
    /// attempts: if it still waits for its first, its attempt now (see [`Sent`]).
    SendHeld { reply: RpcReplyPort<Sent> },
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
    /// Records `event`, moving the delivery to `to`, under `lease` if one guards the write,
    /// and returns once it is durable.
    async fn record(
        &mut self,
        event: DeliveryEvent,
        to: Placement,
        lease: Option<u64>,
    ) -> Result<(), DeliveryError> {
        let d = &self.delivery;
        let write = DeliveryWrite {
            tenant: d.record.tenant.clone(),
            id: d.record.id.clone(),
            url: d.record.url.clone(),
            lease,
            first_seq: d.next_seq,
            events: vec![event.clone()],
            from: Some(d.placement),
            to,
        };
        let from = d.placement.status;
        let written = self
            .ctx
            .store
            .commit(Unit::new().write_deliveries(vec![write]))
            .await?;
        if written == Written::Fenced {
            Metric::Fenced("delivery").count();
            return Err(DeliveryError::Fenced);
        }
        crate::metrics::delivery_moved(Some(from), Some(to.status));
        self.delivery.apply(event)?;
        Ok(())
    }

    /// Reads the delivery again: other nodes may have written since this actor read it.
    async fn reread(&mut self) -> Result<(), DeliveryError> {
        let id = &self.delivery.record.id;
        self.delivery = self
            .ctx
            .load(id)
            .await?
            .ok_or_else(|| DeliveryError::Missing(id.clone()))?;
        Ok(())
    }

    async fn attempt(&mut self, due_ms: u64, lease: Option<u64>) -> Result<(), DeliveryError> {
        if lease.is_some() {
            self.reread().await?;
        }
        let now = now_ms();
        let entry = Timed {
            at_ms: due_ms,
            id: self.delivery.record.id.clone(),
            lease,
        };
        if !self.delivery.queued_at(due_ms) {
            // The queue entry is stale (the delivery moved on): drop it.
            self.ctx.store.drop_due(&entry).await?;
            return Ok(());
        }
        if due_ms > now {
            return Ok(());
        }
        // The entry that woke it is its place in the queue now (a hold may have moved it past
        // the time its log says): what it records next moves it from there.
        self.delivery.placement.due_ms = Some(due_ms);
        // Not sent yet, and a walk on this node sends what its stream held oldest first: left
        // to the walk (looked at again a tick later, once the walk may have ended).
        let record = &self.delivery.record;
        if self.delivery.unsent()
            && (self.ctx.walks).covers(&record.tenant, &record.url, record.created_at_ms)
        {
            let tick = self.ctx.settings.delivery.retry_tick().as_millis() as u64;
            return self.move_to(&entry, now + tick).await;
        }
        self.go(Some(&entry), lease).await.map(drop)
    }

    /// Moves its place in the retry queue from `entry` to `to_ms`, with no record in its log.
    async fn move_to(&mut self, entry: &Timed, to_ms: u64) -> Result<(), DeliveryError> {
        self.ctx.store.move_due(entry, to_ms).await?;
        self.delivery.placement.due_ms = Some(to_ms);
        Ok(())
    }

    /// Sends this SET, held while its push stream was paused, now that the stream is enabled:
    /// whether its attempt was made (and its answer recorded), or it is no longer held, or it
    /// still waits (see [`Sent`]).
    async fn send_held(&mut self) -> Result<Sent, DeliveryError> {
        if self.ctx.store.leases_due() {
            self.reread().await?;
        }
        let record = &self.delivery.record;
        let walks = &self.ctx.walks;
        if !self.delivery.unsent()
            || !walks.covers(&record.tenant, &record.url, record.created_at_ms)
        {
            return Ok(Sent::NotHeld);
        }
        // Its recovery point is its record as held: a crash before the answer is recorded
        // sends it again, with the same bytes, by the next walk or at its next look.
        Ok(match self.go(None, None).await? {
            true => Sent::Sent,
            false => Sent::Waits,
        })
    }

    /// Makes the attempt if its endpoint (and its stream, for a SET) admits it, and records
    /// the answer; otherwise it waits: woken by `entry`, its place in the retry queue moves,
    /// and with none (a held SET sent in its stream's walk) it stays as it is. Whether the
    /// attempt was made.
    async fn go(
        &mut self,
        entry: Option<&Timed>,
        lease: Option<u64>,
    ) -> Result<bool, DeliveryError> {
        let record = &self.delivery.record;
        // Under a lease, the wait for a place leaves the lease room for the attempt and its
        // record (a lease lasts two attempt deadlines and a second).
        let wait = match lease {
            Some(_) => self.ctx.settings.delivery.inline_timeout / 2,
            None => self.ctx.settings.delivery.inline_timeout,
        };
        let attempts = &self.ctx.attempts;
        let planned = PlannedDelivery {
            id: record.id.clone(),
            action: record.action.clone(),
            url: record.url.clone(),
            body: record.body.clone(),
            key: None,
            token: None,
        };
        let mut stream = None;
        let admission = match attempts.readiness(&record.tenant, &planned).await {
            // A SET to a paused stream: held, and looked at again a cooldown later.
            Readiness::Paused => {
                let cooldown = self.ctx.settings.delivery.breaker_cooldown;
                Admission::Held(now_ms() + cooldown.as_millis() as u64)
            }
            // A SET to a poll stream: held until the receiver acknowledges it, or dead after
            // `max_hold` (one record, not a look every cooldown).
            Readiness::Polled => Admission::Held(u64::MAX),
            Readiness::Go(read) => {
                stream = read;
                let endpoints = attempts.endpoints();
                endpoints.admit(&record.tenant, &record.url, wait).await
            }
        };
        let permit = match admission {
            Admission::Go(permit) => permit,
            // Its endpoint is open (or its stream paused): it waits until a probe may go, using
            // up no attempt, and for no longer than `max_hold` since its first hold.
            Admission::Held(until_ms) => {
                let max_hold = self.ctx.settings.delivery.max_hold();
                match self.delivery.hold(until_ms, now_ms(), max_hold) {
                    Hold::Record(event, to) => self.record(event, to, lease).await?,
                    Hold::Move(to_ms) => {
                        if let Some(entry) = entry {
                            self.move_to(entry, to_ms).await?;
                        }
                    }
                    Hold::GiveUp(event, to) => {
                        tracing::warn!(delivery = %record.id, ?max_hold, "delivery dead: its endpoint stayed open (or its stream paused) longer than max_hold");
                        self.record(event, to, lease).await?
                    }
                };
                return Ok(false);
            }
            // No place among its endpoint's attempts at once: still due, woken again.
            Admission::Busy => return Ok(false),
        };
        let of = Attempting {
            tenant: &record.tenant,
            decision_id: &record.decision_id,
            delivery: &planned,
            trace: record.trace,
            number: self.delivery.attempts_total + 1,
        };
        let deadline = self.ctx.settings.delivery.inline_timeout;
        let (status, attempt) = attempts.attempt(&of, stream, deadline, &permit).await;
        drop(permit);
        let next = self.ctx.settings.delivery.next_step(
            &record.id,
            status,
            self.delivery.series_attempts + 1,
            &attempt,
            now_ms(),
        );
        let number = self.delivery.attempts_total as usize + 1;
        tracing::info!(delivery = %record.id, attempt = number, code = ?attempt.code, error = ?attempt.error, next = ?next, "retry attempt");
        failpoint::hit("delivery.after_attempt");
        Metric::Attempt {
            number,
            outcome: outcome_label(next),
        }
        .count();
        // Until this record is durable the attempt is not counted: a crash here makes it again,
        // with the same webhook-id and bytes.
        self.record(
            DeliveryEvent::Answered { attempt, next },
            placement(next),
            lease,
        )
        .await?;
        Ok(true)
    }
}

/// What sending a held SET came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// Its attempt was made and its answer recorded.
    Sent,
    /// It is not waiting for its first attempt (sent or ended meanwhile), or it was made after
    /// its stream's walk began: nothing to do.
    NotHeld,
    /// It still waits (its endpoint admits no attempt now, or its stream is not enabled): it
    /// goes at its next look.
    Waits,
}

/// What a delivery actor starts from.
pub struct DeliveryArgs {
    /// The delivery it owns.
    pub id: String,
    /// Shared context.
    pub ctx: Arc<DeliveryContext>,
    /// Its log as a unit just made durable wrote it, new: the actor starts from it instead of
    /// reading the log. (Boxed: it is moved several times on its way to the actor.)
    pub written: Option<Box<DeliveryState>>,
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
        let delivery = match args.written {
            Some(written) => *written,
            None => args
                .ctx
                .load(&args.id)
                .await?
                .ok_or(DeliveryError::Missing(args.id))?,
        };
        Ok(DeliveryActorState {
            delivery,
            idle: IdleTimer::start(
                &myself,
                args.ctx.settings.idempotency.idle_actor_timeout,
                || DeliveryMsg::IdleCheck,
            ),
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
            DeliveryMsg::Attempt { due_ms, lease } => {
                // On the heap: an attempt's future (the request's) is large, and the runtime
                // moves this handler's future, whatever message it handles, several times.
                let attempted = Box::pin(state.attempt(due_ms, lease)).await;
                state.ctx.pending().remove(&state.delivery.record.id);
                attempted?
            }
            DeliveryMsg::Redeliver { since_ms, reply } => {
                if state.ctx.store.leases_due() {
                    state.reread().await?;
                }
                // Asked of the log as this actor read it, whose next record is written at its
                // sequence number: whatever another node wrote since fences this write, and the
                // caller asks a fresh actor again.
                match state.delivery.redelivery(since_ms, now_ms()) {
                    Redelivery::Done => {
                        let _ = reply.send(Ok(state.delivery.view()));
                    }
                    // Due at once: the next tick of a retry worker (of any node, under a lease)
                    // makes the attempt.
                    Redelivery::Record(event, to) => {
                        state.record(event, to, None).await?;
                        let _ = reply.send(Ok(state.delivery.view()));
                    }
                    Redelivery::NotFinal(status) => {
                        let _ = reply.send(Err(RedeliverError::NotFinal(status)));
                    }
                    Redelivery::Erased => {
                        let _ = reply.send(Err(RedeliverError::Erased));
                    }
                }
            }
            DeliveryMsg::Release { at_ms, reply } => {
                if state.ctx.store.leases_due() {
                    state.reread().await?;
                }
                // As a redelivery: written at the log's end as this actor read it.
                match state.delivery.released(at_ms) {
                    Some((event, to)) => {
                        state.record(event, to, None).await?;
                        let _ = reply.send(true);
                    }
                    None => {
                        let _ = reply.send(false);
                    }
                }
            }
            DeliveryMsg::SendHeld { reply } => {
                let sent = Box::pin(state.send_held()).await?;
                let _ = reply.send(sent);
            }
            DeliveryMsg::Polled { url, answer, reply } => {
                if state.ctx.store.leases_due() {
                    state.reread().await?;
                }
                // As a redelivery: written at the log's end as this actor read it, fenced if
                // another node wrote since (the caller asks a fresh actor again).
                match state.delivery.polled(&url, answer, now_ms()) {
                    Some((event, to)) => {
                        state.record(event, to, None).await?;
                        let _ = reply.send(true);
                    }
                    None => {
                        let _ = reply.send(false);
                    }
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
    /// A SET's delivery ended and its bytes were erased.
    #[error("the SET's delivery ended and its bytes were erased")]
    Erased,
    /// The actor could not take the request.
    #[error(transparent)]
    Actor(#[from] RegistryError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// How often a message may find its actor stopping under it before giving up.
const MAX_ROUNDS: usize = 64;

/// The way to delivery actors: finds or starts a delivery's actor and hands it a message.
pub struct DeliveryActors {
    family: Family,
    ctx: Arc<DeliveryContext>,
}

impl DeliveryActors {
    /// Starts the delivery supervisor. `instance` makes actor names unique when several
    /// servers share a process (ractor's registry is process-wide).
    pub async fn start(instance: &str, ctx: Arc<DeliveryContext>) -> Result<Self, RegistryError> {
        Ok(DeliveryActors {
            family: Family::start(instance, "delivery", usize::MAX).await?,
            ctx,
        })
    }

    async fn actor(&self, id: &str) -> Result<ActorRef<DeliveryMsg>, RegistryError> {
        self.actor_from(id, None).await
    }

    /// The actor of delivery `id`: the running one, or a new one started from `written` (its
    /// log as just written) if given, or else from the log it reads.
    async fn actor_from(
        &self,
        id: &str,
        written: Option<Box<DeliveryState>>,
    ) -> Result<ActorRef<DeliveryMsg>, RegistryError> {
        // Handed to the first actor started (another, started after a registry race, reads
        // the log).
        let written = Mutex::new(written);
        let args = || DeliveryArgs {
            id: id.to_string(),
            ctx: self.ctx.clone(),
            written: written.lock().ok().and_then(|mut w| w.take()),
        };
        self.family
            .actor(&self.family.name(id), || DeliveryActor, args)
            .await
    }

    /// Wakes the actor of a delivery whose queue entry `due` is due, unless it was woken
    /// already and has not finished that attempt.
    pub async fn wake(&self, due: &Timed) -> Result<(), RegistryError> {
        self.wake_from(due, None).await
    }

    /// [`DeliveryActors::wake`], its actor started from `written` if it is not running.
    async fn wake_from(
        &self,
        due: &Timed,
        written: Option<Box<DeliveryState>>,
    ) -> Result<(), RegistryError> {
        if !self.ctx.mark_pending(&due.id) {
            return Ok(());
        }
        let woken = self.cast_attempt(due, written).await;
        if woken.is_err() {
            self.ctx.pending().remove(&due.id);
        }
        woken
    }

    /// Starts the first attempt of each delivery of `written`: new logs, queued and due, that a
    /// unit just made durable wrote (a decision's callbacks queued with its claim), without
    /// reading the retry queue. With `unread` (no read of the queue could have shown them
    /// since), a callback's actor starts from its log as written, since no attempt can have
    /// been made; a SET's log may have been answered by its poll stream's receiver meanwhile,
    /// and is read, as is any log without `unread`. One being woken already (by the retry
    /// worker) is left to that wake. For a store that does not lease due deliveries (a lease
    /// is taken by reading the queue).
    pub async fn start_written(
        &self,
        written: Vec<DeliveryWrite>,
        unread: bool,
    ) -> Result<(), RegistryError> {
        let mut result = Ok(());
        for write in written {
            let Some(due_ms) = write.to.due_ms else {
                continue;
            };
            let as_written = unread && stream_of(&write.url).is_none();
            let state = match as_written {
                true => DeliveryState::fold(write.events).ok().map(Box::new),
                false => None,
            };
            let due = Timed {
                at_ms: due_ms,
                id: write.id,
                lease: None,
            };
            if let Err(e) = self.wake_from(&due, state).await {
                result = Err(e);
            }
        }
        result
    }

    /// How many deliveries are woken and not done.
    pub fn pending(&self) -> usize {
        self.ctx.pending().len()
    }

    /// Casts the attempt `due` to its delivery's actor, started from `written` if it is not
    /// running (and `written` is given).
    async fn cast_attempt(
        &self,
        due: &Timed,
        mut written: Option<Box<DeliveryState>>,
    ) -> Result<(), RegistryError> {
        for _ in 0..MAX_ROUNDS {
            let actor = self.actor_from(&due.id, written.take()).await?;
            let attempt = DeliveryMsg::Attempt {
                due_ms: due.at_ms,
                lease: due.lease,
            };
            // A cast to an actor that stopped in between fails: look it up again.
            if actor.cast(attempt).is_ok() {
                return Ok(());
            }
            tokio::task::yield_now().await;
        }
        Err(RegistryError::Unavailable)
    }

    /// A delivery as stored, if it exists.
    pub async fn load(&self, id: &str) -> Result<Option<DeliveryState>, DeliveryError> {
        self.ctx.load(id).await
    }

    /// Starts a new series of attempts for a failed or dead delivery, which the caller found
    /// in the store (the engine, checking it is the tenant's); with `since_ms`, the time of the
    /// bulk claim redelivering it, only if it was not redelivered since.
    pub async fn redeliver(
        &self,
        id: &str,
        since_ms: Option<u64>,
    ) -> Result<DeliveryView, RedeliverError> {
        for _ in 0..MAX_ROUNDS {
            let actor = self.actor(id).await?;
            let redeliver = |reply| DeliveryMsg::Redeliver { since_ms, reply };
            match actor.call(redeliver, None).await {
                Ok(ractor::rpc::CallResult::Success(Ok(view))) => return Ok(view),
                Ok(ractor::rpc::CallResult::Success(Err(refused))) => return Err(refused),
                // Stopped before handling it (a redelivery is idempotent on a queued delivery).
                _ => tokio::task::yield_now().await,
            }
        }
        Err(RegistryError::Unavailable.into())
    }

    /// Gives `answer` to the SET `id`, waiting in the poll stream whose destination is `url`
    /// (see [`DeliveryState::polled`]): whether that answered it, durably.
    pub async fn polled(
        &self,
        id: &str,
        url: &str,
        answer: PollAnswer,
    ) -> Result<bool, RedeliverError> {
        for _ in 0..MAX_ROUNDS {
            let actor = self.actor(id).await?;
            let polled = |reply| DeliveryMsg::Polled {
                url: url.to_string(),
                answer: answer.clone(),
                reply,
            };
            match actor.call(polled, None).await {
                Ok(ractor::rpc::CallResult::Success(answered)) => return Ok(answered),
                // Stopped before handling it (an answer is idempotent: a second one is none).
                _ => tokio::task::yield_now().await,
            }
        }
        Err(RegistryError::Unavailable.into())
    }

    /// Makes the delivery `id`, if it is held, due at `at_ms` (see
    /// [`DeliveryState::released`]): whether that moved it, durably.
    pub async fn release(&self, id: &str, at_ms: u64) -> Result<bool, RegistryError> {
        for _ in 0..MAX_ROUNDS {
            let actor = self.actor(id).await?;
            let release = |reply| DeliveryMsg::Release { at_ms, reply };
            match actor.call(release, None).await {
                Ok(ractor::rpc::CallResult::Success(released)) => return Ok(released),
                // Stopped before handling it (a second release moves nothing).
                _ => tokio::task::yield_now().await,
            }
        }
        Err(RegistryError::Unavailable)
    }

    /// Sends the SET `id`, held while its push stream was paused, now that it is enabled
    /// (see [`Sent`]); returns once its answer is recorded.
    pub async fn send_held(&self, id: &str) -> Result<Sent, RegistryError> {
        for _ in 0..MAX_ROUNDS {
            let actor = self.actor(id).await?;
            match actor
                .call(|reply| DeliveryMsg::SendHeld { reply }, None)
                .await
            {
                Ok(ractor::rpc::CallResult::Success(sent)) => return Ok(sent),
                // Stopped before handling it (one sent meanwhile is no longer held).
                _ => tokio::task::yield_now().await,
            }
        }
        Err(RegistryError::Unavailable)
    }

    /// The walks through what push streams held running on this node.
    pub fn walks(&self) -> &Walks {
        &self.ctx.walks
    }

    /// The delivery actors' family (liveness, failures).
    pub fn family(&self) -> &Family {
        &self.family
    }

    /// Stops every delivery actor and the supervisor.
    pub async fn shutdown(&self) {
        self.family.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use super::Walks;

    #[test]
    fn a_walk_covers_what_its_stream_held_before_it_began_and_ends_when_told() {
        let walks = Walks::default();
        assert!(
            !walks.covers("t", "stream:a", 10),
            "no walk, nothing covered"
        );
        assert!(walks.begin("t", "stream:a", 100), "the first begins it");
        assert!(walks.covers("t", "stream:a", 100));
        assert!(
            !walks.covers("t", "stream:a", 101),
            "made since: not the walk's"
        );
        assert!(!walks.covers("t", "stream:b", 50), "another stream's");
        assert!(!walks.covers("u", "stream:a", 50), "another tenant's");
        assert!(!walks.again("t", "stream:a"), "not asked again");

        assert!(!walks.begin("t", "stream:a", 200), "one runs: asked again");
        assert!(
            walks.covers("t", "stream:a", 150),
            "it covers up to the second asking"
        );
        assert!(walks.again("t", "stream:a"), "one more round");
        assert!(!walks.again("t", "stream:a"), "the asking is forgotten");

        walks.end("t", "stream:a");
        assert!(!walks.covers("t", "stream:a", 50), "ended");
        assert!(walks.begin("t", "stream:a", 300), "a new one begins");
    }
}
