//! The delivery lease protocol, checked the same way: one callback whose inline attempt failed,
//! the retry workers of several nodes leasing it, attempting it and recording the attempt under
//! their lease token, in any order; a lease that expires under a slow worker, a node that
//! crashes, and the tenant's redelivery of a final delivery. The log starts as `new_logs` makes
//! it, each attempt's outcome follows `Delivery::next_step`, every log is folded with
//! `DeliveryState`, and the store grants leases and records by `store::rule` (with fencing off,
//! the sabotage the checker must catch). A worker may also find the endpoint open and hold the
//! delivery back, as `DeliveryState::hold` says (recorded once, then moved, then dead once held
//! for `max_hold`; with no `max_hold`, the other sabotage).

use std::time::Duration;

use idem_actors::delivery::state::{attempt_after_final, new_logs, DeliveryState, Hold};
use idem_actors::store::rule::{self, Fencing};
use idem_actors::Settings;
use idem_schemas::{
    ActionOutcome, ActionStatus, AttemptRecord, Decision, DeliveryEvent, DeliveryStatus,
    PlannedDelivery, Verdict,
};
use stateright::{Model, Property};

/// How far the checker goes.
#[derive(Debug, Clone, Copy)]
pub struct DeliveryBounds {
    /// Nodes whose retry workers lease the delivery.
    pub nodes: usize,
    /// Leases that expire under their worker.
    pub expiries: u8,
    /// Node crashes.
    pub crashes: u8,
    /// The tenant's redeliveries.
    pub redeliveries: u8,
    /// Times a worker finds the endpoint open and holds the delivery back.
    pub holds: u8,
}

/// The model; fencing off is the sabotage the checker must catch.
#[derive(Debug, Clone)]
pub struct DeliveryModel {
    pub bounds: DeliveryBounds,
    pub fencing: Fencing,
    /// The sabotage of `max_hold`: holds never give up.
    pub unbounded_holds: bool,
}

/// A worker's lease on the delivery, and whether it has made its attempt.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Lease {
    token: u64,
    /// The log's length when leased: where the attempt's record goes.
    first_seq: u32,
    attempted: bool,
}

/// A record on its way to the store.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Record {
    lease: Option<u64>,
    first_seq: u32,
    event: DeliveryEvent,
}

/// The system.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DeliverySystem {
    /// The store's row: the log, the lease token last granted, and whether that lease is live.
    pub log: Vec<DeliveryEvent>,
    pub token: u64,
    pub lease_live: bool,
    /// Each node's worker.
    pub workers: Vec<Option<Lease>>,
    pub net: Vec<Record>,
    /// Callbacks the receiver got (all of this one delivery: its id and bytes are checked).
    pub received: Vec<(String, Vec<u8>)>,
    /// A record written under a lease that was not the current one.
    pub fenced_visible: bool,
    /// Records the store refused.
    pub fenced: u8,
    pub expiries_left: u8,
    pub crashes_left: u8,
    pub redeliveries_left: u8,
    pub holds_left: u8,
    /// A hold found the delivery held for `max_hold` already, and it is still queued.
    pub held_too_long: bool,
    pub now: u64,
}

/// A step.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DeliveryAction {
    /// A node's retry worker leases the due delivery.
    Lease(usize),
    /// It makes its attempt; the receiver answers 2xx or not.
    Attempt {
        node: usize,
        ok: bool,
    },
    /// A record reaches the store.
    Record(usize),
    /// The live lease expires.
    Expire,
    Crash(usize),
    /// The tenant redelivers a final delivery.
    Redeliver,
    /// A node's worker finds the endpoint open (a cooldown after the last hold) and holds the
    /// delivery back instead of attempting it.
    Hold(usize),
}

impl DeliverySystem {
    /// Whether a worker holds the current lease and has yet to record its attempt.
    fn holder_alive(&self) -> bool {
        self.workers
            .iter()
            .flatten()
            .any(|w| w.token == self.token && !w.attempted)
            || self.net.iter().any(|r| r.lease == Some(self.token))
    }
}

/// The breaker's cooldown: how far each hold moves the delivery.
const COOLDOWN_MS: u64 = 10;

fn settings() -> Settings {
    let mut settings = Settings::default();
    settings.delivery.breaker_cooldown = Duration::from_millis(COOLDOWN_MS);
    settings.delivery.max_hold = Some(Duration::from_millis(25));
    settings.delivery.schedule = vec![Duration::from_millis(10); 2];
    settings.delivery.inline_timeout = Duration::from_millis(5);
    settings.idempotency.key_ttl = Duration::from_secs(3600);
    settings.decisions.retention = Duration::from_secs(3600);
    settings
}

fn fold(log: &[DeliveryEvent]) -> Option<DeliveryState> {
    DeliveryState::fold(log.to_vec()).ok()
}

fn attempt(at_ms: u64, ok: bool) -> AttemptRecord {
    AttemptRecord {
        at_ms,
        code: ok.then_some(200),
        error: (!ok).then(|| "connection refused".into()),
        latency_ms: 1,
        retry_after_ms: None,
    }
}

impl DeliveryModel {
    /// The bounds of the lease protocol: leases expiring, a crash, a redelivery, no hold.
    pub const LEASING: DeliveryBounds = DeliveryBounds {
        nodes: 2,
        expiries: 2,
        crashes: 1,
        redeliveries: 1,
        holds: 0,
    };

    /// The bounds of an endpoint that stays open: enough holds to pass `max_hold`, on two
    /// nodes, and a redelivery of the dead delivery.
    pub const HOLDING: DeliveryBounds = DeliveryBounds {
        nodes: 2,
        expiries: 0,
        crashes: 0,
        redeliveries: 1,
        holds: 5,
    };

    /// The delivery's log as its decision's inline attempt leaves it: created, then queued.
    fn created() -> Vec<DeliveryEvent> {
        let decision = Decision {
            id: "dec_1".into(),
            tenant: "acme".into(),
            signal_type: "sim_swap".into(),
            source: None,
            verdict: Verdict::Deny,
            subject_hash: String::new(),
            created_at_ms: 1_000,
            deliveries: vec![PlannedDelivery {
                id: "msg_1".into(),
                action: "lock_account".into(),
                url: "http://receiver/lock".into(),
                body: b"dec_1 lock_account".to_vec(),
                key: None,
                token: None,
            }],
            trace: None,
            rule: None,
            rule_errors: Vec::new(),
        };
        let outcomes = [ActionOutcome {
            delivery_id: "msg_1".into(),
            status: ActionStatus::Queued,
            attempt: attempt(1_000, false),
        }];
        new_logs(&decision, &outcomes, &settings())
            .writes
            .into_iter()
            .flat_map(|w| w.events)
            .collect()
    }
}

impl Model for DeliveryModel {
    type State = DeliverySystem;
    type Action = DeliveryAction;

    fn init_states(&self) -> Vec<DeliverySystem> {
        let b = self.bounds;
        vec![DeliverySystem {
            log: Self::created(),
            token: 0,
            lease_live: false,
            workers: vec![None; b.nodes],
            net: Vec::new(),
            received: Vec::new(),
            fenced_visible: false,
            fenced: 0,
            expiries_left: b.expiries,
            crashes_left: b.crashes,
            redeliveries_left: b.redeliveries,
            holds_left: b.holds,
            held_too_long: false,
            now: 1_000,
        }]
    }

    fn actions(&self, s: &DeliverySystem, actions: &mut Vec<DeliveryAction>) {
        let state = fold(&s.log);
        let status = state.as_ref().map(|d| d.placement.status);
        for (node, worker) in s.workers.iter().enumerate() {
            match worker {
                // Time moves to the due time: a queued delivery is due.
                None if rule::may_lease(status == Some(DeliveryStatus::Queued), s.lease_live) => {
                    actions.push(DeliveryAction::Lease(node))
                }
                Some(lease) if !lease.attempted => {
                    actions.push(DeliveryAction::Attempt { node, ok: true });
                    actions.push(DeliveryAction::Attempt { node, ok: false });
                    if s.holds_left > 0 {
                        actions.push(DeliveryAction::Hold(node));
                    }
                }
                _ => {}
            }
            if s.crashes_left > 0 && worker.is_some() {
                actions.push(DeliveryAction::Crash(node));
            }
        }
        for n in 0..s.net.len() {
            actions.push(DeliveryAction::Record(n));
        }
        // A lease expires early under a slow worker (within the bound), and always, in time,
        // once no worker holds it.
        if s.lease_live && (s.expiries_left > 0 || !s.holder_alive()) {
            actions.push(DeliveryAction::Expire);
        }
        let is_final = matches!(status, Some(DeliveryStatus::Failed | DeliveryStatus::Dead));
        if is_final && s.redeliveries_left > 0 {
            actions.push(DeliveryAction::Redeliver);
        }
    }

    fn next_state(&self, last: &DeliverySystem, action: DeliveryAction) -> Option<DeliverySystem> {
        let mut s = last.clone();
        match action {
            DeliveryAction::Lease(node) => {
                s.token += 1;
                s.lease_live = true;
                s.workers[node] = Some(Lease {
                    token: s.token,
                    first_seq: s.log.len() as u32,
                    attempted: false,
                });
            }
            DeliveryAction::Attempt { node, ok } => {
                let lease = s.workers[node].as_mut()?;
                lease.attempted = true;
                // The worker's delivery actor reads the log it leased (as the real one reloads
                // it when leased) and attempts it.
                let state = fold(&s.log[..lease.first_seq as usize])?;
                s.received
                    .push((state.record.id.clone(), state.record.body.clone()));
                s.now += 10;
                let attempt = attempt(s.now, ok);
                let status = if ok {
                    ActionStatus::Delivered
                } else {
                    ActionStatus::Queued
                };
                let next = settings().delivery.next_step(
                    &state.record.id,
                    status,
                    state.series_attempts + 1,
                    &attempt,
                    s.now,
                );
                s.net.push(Record {
                    lease: Some(lease.token),
                    first_seq: lease.first_seq,
                    event: DeliveryEvent::Answered { attempt, next },
                });
            }
            DeliveryAction::Record(n) => {
                let record = s.net.remove(n);
                let records = s.log.len() as u32;
                let (token, first, lease) = (s.token, record.first_seq, record.lease);
                if rule::may_record(records, token, first, lease, self.fencing) {
                    if record.lease.is_some_and(|l| l != s.token) {
                        s.fenced_visible = true;
                    }
                    s.log.push(record.event);
                    // The record ends the lease (PostgreSQL clears `lease_until` with it).
                    s.lease_live = false;
                } else {
                    s.fenced = s.fenced.saturating_add(1);
                }
            }
            DeliveryAction::Expire => {
                if s.holder_alive() {
                    s.expiries_left -= 1;
                }
                s.lease_live = false;
            }
            DeliveryAction::Crash(node) => {
                s.crashes_left -= 1;
                s.workers[node] = None;
            }
            DeliveryAction::Hold(node) => {
                s.holds_left -= 1;
                let lease = s.workers[node].as_mut()?;
                lease.attempted = true;
                let state = fold(&s.log[..lease.first_seq as usize])?;
                // It was due (a first hold), or a cooldown passed since the last.
                s.now = match state.held_since_ms {
                    Some(_) => s.now + COOLDOWN_MS,
                    None => s.now.max(state.placement.due_ms.unwrap_or(s.now)),
                };
                let max_hold = match self.unbounded_holds {
                    true => Duration::from_millis(u64::MAX / 2),
                    false => settings().delivery.max_hold(),
                };
                let (token, first_seq) = (lease.token, lease.first_seq);
                match state.hold(s.now + COOLDOWN_MS, s.now, max_hold) {
                    Hold::Record(event, _) | Hold::GiveUp(event, _) => s.net.push(Record {
                        lease: Some(token),
                        first_seq,
                        event,
                    }),
                    // Only its place in the retry queue moves, and the lease with it.
                    Hold::Move(_) => {
                        s.lease_live = false;
                        let since = state.held_since_ms.unwrap_or(s.now);
                        let limit = settings().delivery.max_hold().as_millis() as u64;
                        s.held_too_long |= s.now >= since + limit;
                    }
                }
            }
            DeliveryAction::Redeliver => {
                s.redeliveries_left -= 1;
                s.now += 10;
                s.net.push(Record {
                    lease: None,
                    first_seq: s.log.len() as u32,
                    event: DeliveryEvent::Redelivered { at_ms: s.now },
                });
            }
        }
        // A worker whose lease is gone and attempt recorded, or refused, forgets it.
        s.workers.iter_mut().for_each(|w| {
            if w.as_ref()
                .is_some_and(|l| l.attempted && !s.net.iter().any(|r| r.lease == Some(l.token)))
            {
                *w = None;
            }
        });
        s.received.sort();
        s.received.dedup();
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = vec![
            Property::always(
                "no record of a fenced-out lease is visible",
                |_, s: &DeliverySystem| {
                    let settled_then_answered = attempt_after_final(&s.log).is_some();
                    let within_its_retries = fold(&s.log).is_some_and(|d| {
                        d.series_attempts as usize <= settings().delivery.schedule.len() + 1
                    });
                    !s.fenced_visible && !settled_then_answered && within_its_retries
                },
            ),
            Property::always(
                "every attempt carries the delivery's id and bytes",
                |_, s: &DeliverySystem| {
                    s.received
                        .iter()
                        .all(|(id, body)| id == "msg_1" && body == b"dec_1 lock_account")
                },
            ),
            Property::eventually(
                "the delivery ends delivered, failed or dead",
                |_, s: &DeliverySystem| {
                    fold(&s.log).is_some_and(|d| d.placement.status != DeliveryStatus::Queued)
                },
            ),
            Property::always(
                "an endpoint that stays open holds a delivery for max_hold at most, with one record",
                |_, s: &DeliverySystem| {
                    let held_twice = s.log.windows(2).any(|w| {
                        matches!(w, [DeliveryEvent::Held { .. }, DeliveryEvent::Held { .. }])
                    });
                    !s.held_too_long && !held_twice
                },
            ),
            Property::sometimes(
                "a dead delivery is redelivered and delivered",
                |_, s: &DeliverySystem| {
                    s.log
                        .iter()
                        .any(|e| matches!(e, DeliveryEvent::Redelivered { .. }))
                        && fold(&s.log)
                            .is_some_and(|d| d.placement.status == DeliveryStatus::Delivered)
                },
            ),
        ];
        // What the bounds can reach: a lease expiring under its worker, a hold past max_hold.
        if self.bounds.expiries > 0 {
            properties.push(Property::sometimes(
                "a worker whose lease expired is fenced out",
                |_, s: &DeliverySystem| s.fenced > 0,
            ));
        }
        if self.bounds.holds > 0 {
            properties.push(Property::sometimes(
                "a delivery held for max_hold is dead",
                |_, s: &DeliverySystem| {
                    s.log
                        .iter()
                        .any(|e| matches!(e, DeliveryEvent::HeldTooLong { .. }))
                },
            ));
        }
        properties
    }
}
