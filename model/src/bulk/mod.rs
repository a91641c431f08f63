//! The bulk redelivery's snapshot, checked the same way: a tenant's deliveries (two failed when
//! the request comes, one whose series is still running and fails later, one of another action
//! the filter leaves out) and a bulk request with an idempotency key, sent and retried to either
//! of two nodes. A copy is answered from the claim that holds its key (`bulk::answer`), or scans
//! with the real filter (`RedeliverFilter::matches`) and claims, the claim fixing what it
//! matched (`bulk::claim`); its holder redelivers what `bulk::plan` says, one delivery a step,
//! each as `DeliveryState::redelivery` says (asked and written in one step, as the delivery's
//! actor does under the fencing of its log), then records its answer (`bulk::response`,
//! `bulk::recorded`). A node may crash part-way, losing its memory, or its holder stall past
//! `in_flight_timeout` and run on: a later copy takes the request over once the store sees its
//! holder gone. The store decides starts, take-overs and appends by `store::rule`, and delivery
//! logs fold with `DeliveryState`. A sabotage is a `BulkSabotage`: the take-over scans again
//! (`RescanOnTakeOver`), or nothing redelivered since the claim is skipped (`NoSkip`).
//!
//! This module makes the model and its steps' choices; `steps` is what a copy does at each
//! step, `state` what the system is, and `properties` what must hold.

mod properties;
mod state;
mod steps;

use std::time::Duration;

use idem_actors::claim::phase::Holder;
pub use idem_actors::signals::bulk::BulkSabotage;
use idem_actors::signals::bulk::{self, BulkReply, RedeliverFilter};
use idem_actors::store::ClaimId;
use idem_actors::Settings;
use idem_schemas::{DeliveryEvent, DeliveryRecord, DeliveryStatus, NextStep};
use stateright::{Model, Property};

pub use state::{BulkAction, BulkAnswer, BulkRow, BulkState, HandledCopy, Stage};

use state::{attempt, fold};

/// The store's clock at the start (unix milliseconds); it moves with each claim and redelivery.
pub(super) const T0: u64 = 1_000_000;
/// `key_ttl`: longer than any run of the model.
pub(super) const KEY_TTL: Duration = Duration::from_secs(86_400);
/// `in_flight_timeout`: it passes only when a holder stalls ([`BulkAction::Stall`]).
pub(super) const IN_FLIGHT_TIMEOUT: Duration = Duration::from_secs(30);
pub(super) const TENANT: &str = "acme";
/// The deliveries: id, playbook action, and whether a series of attempts is still running.
/// `msg_b` was redelivered once before the request, and failed again.
pub(super) const DELIVERIES: [(&str, &str, bool); 4] = [
    ("msg_a", "lock_account", false),
    ("msg_b", "lock_account", false),
    ("msg_c", "lock_account", true),
    ("msg_d", "notify", false),
];

/// How far the checker goes.
#[derive(Debug, Clone, Copy)]
pub struct BulkBounds {
    /// idem nodes on the one store.
    pub nodes: usize,
    /// Copies of the request the client sends (one more after each error, as a retry).
    pub copies: u8,
    /// Node crashes.
    pub crashes: u8,
    /// Times a holder stalls past `in_flight_timeout` (still running, its claim taken over).
    pub stalls: u8,
}

impl BulkBounds {
    /// Two nodes, two copies, a crash: a copy meets the claim held, and one takes it over.
    pub const CRASHING: BulkBounds = BulkBounds {
        nodes: 2,
        copies: 2,
        crashes: 1,
        stalls: 0,
    };
    /// Two nodes, two copies, a holder that stalls: the claim is taken over while its first
    /// holder still runs, and both redeliver.
    pub const STALLING: BulkBounds = BulkBounds {
        nodes: 2,
        copies: 2,
        crashes: 0,
        stalls: 1,
    };
}

/// The model: its bounds, and the rule switched off, if one is.
#[derive(Debug, Clone)]
pub struct BulkModel {
    pub bounds: BulkBounds,
    pub sabotage: Option<BulkSabotage>,
    settings: Settings,
    filter: RedeliverFilter,
    /// The request body's fingerprint (every copy has the same body).
    fingerprint: [u8; 32],
    /// The request's claim.
    id: ClaimId,
}

impl BulkModel {
    pub fn new(bounds: BulkBounds, sabotage: Option<BulkSabotage>) -> Self {
        let mut settings = Settings::default();
        settings.idempotency.key_ttl = KEY_TTL;
        settings.idempotency.in_flight_timeout = IN_FLIGHT_TIMEOUT;
        let digester = idem_actors::digest::Digester::new(b"the model's key secret");
        let body = serde_json::json!({"status": "failed", "action": "lock_account"});
        BulkModel {
            bounds,
            sabotage,
            settings,
            filter: RedeliverFilter {
                status: DeliveryStatus::Failed,
                since_ms: None,
                until_ms: None,
                action: Some("lock_account".into()),
            },
            fingerprint: digester.fingerprint(TENANT, &body),
            id: ClaimId {
                tenant: TENANT.into(),
                digest: digester.bulk_key(TENANT, "bulk_1"),
            },
        }
    }

    /// The deliveries the filter matches now, as the engine lists them (by status, then id).
    fn matching(&self, s: &BulkState) -> Vec<String> {
        let mut ids: Vec<String> = (0..s.deliveries.len())
            .filter_map(|n| fold(&s.deliveries[n]))
            .filter(|d| d.placement.status == self.filter.status)
            .filter(|d| self.filter.matches(TENANT, &d.record))
            .map(|d| d.record.id)
            .collect();
        ids.sort();
        ids
    }

    fn holder(&self, epoch: u64) -> Holder {
        Holder::of(epoch, &self.settings.idempotency)
    }

    /// What the copy at `run` gets from the claim as the store holds it now, by `bulk::answer`;
    /// `None` when it may take the claim over (or there is none).
    fn answer(&self, s: &BulkState, run: usize) -> Option<BulkReply> {
        let row = s.row.as_ref()?;
        let holder = self.holder(s.runs[run].epoch);
        bulk::answer(&row.events, &self.fingerprint, s.now, holder)
            .expect("the bulk claim's log folds")
    }

    /// The delivery logs at the start.
    fn deliveries() -> Vec<Vec<DeliveryEvent>> {
        let created = T0 - 1_000;
        DELIVERIES
            .iter()
            .map(|(id, action, running)| {
                let record = DeliveryRecord {
                    id: id.to_string(),
                    tenant: TENANT.into(),
                    decision_id: "dec_1".into(),
                    action: action.to_string(),
                    url: format!("http://receiver/{action}"),
                    body: format!("dec_1 {action}").into_bytes(),
                    created_at_ms: created,
                    expires_at_ms: T0 + KEY_TTL.as_millis() as u64,
                    trace: None,
                };
                let mut log = vec![DeliveryEvent::Created(record)];
                let failed = DeliveryEvent::Answered {
                    attempt: attempt(created, 410),
                    next: NextStep::Failed,
                };
                if *running {
                    log.push(DeliveryEvent::Answered {
                        attempt: attempt(created, 503),
                        next: NextStep::RetryAt(T0),
                    });
                } else {
                    log.push(failed.clone());
                }
                // Redelivered before the request, and failed again.
                if *id == "msg_b" {
                    log.push(DeliveryEvent::Redelivered { at_ms: T0 - 500 });
                    log.push(failed);
                }
                log
            })
            .collect()
    }
}

impl Model for BulkModel {
    type State = BulkState;
    type Action = BulkAction;

    fn init_states(&self) -> Vec<BulkState> {
        let b = self.bounds;
        vec![BulkState {
            deliveries: Self::deliveries(),
            row: None,
            epochs: (1..=b.nodes as u64).collect(),
            runs: Vec::new(),
            answers: Vec::new(),
            copies_left: b.copies,
            crashes_left: b.crashes,
            stalls_left: b.stalls,
            now: T0,
            redelivered: vec![0; DELIVERIES.len()],
            crashed_part_way: false,
            taken_from_running: false,
        }]
    }

    fn actions(&self, s: &BulkState, actions: &mut Vec<BulkAction>) {
        if s.copies_left > 0 {
            actions.extend((0..self.bounds.nodes).map(BulkAction::Send));
        }
        for (n, run) in s.runs.iter().enumerate() {
            match &run.stage {
                Stage::Arrived => actions.push(BulkAction::Claim(n)),
                Stage::TakingOver(_) => actions.push(BulkAction::TakeOver(n)),
                // Its redeliveries run at once, in any order.
                Stage::Holding { left, .. } if left.is_empty() => {
                    actions.push(BulkAction::Record(n))
                }
                Stage::Holding { left, .. } => {
                    actions.extend(left.iter().map(|delivery| BulkAction::Redeliver {
                        run: n,
                        delivery: delivery.clone(),
                    }))
                }
            }
        }
        for n in 0..s.deliveries.len() {
            if s.status(n) == Some(DeliveryStatus::Queued) {
                actions.push(BulkAction::Fail(n));
            }
        }
        let holding = s
            .runs
            .iter()
            .any(|r| matches!(r.stage, Stage::Holding { .. }));
        if s.stalls_left > 0 && holding {
            actions.push(BulkAction::Stall);
        }
        if s.crashes_left > 0 {
            for node in 0..self.bounds.nodes {
                if s.runs.iter().any(|r| r.node == node) {
                    actions.push(BulkAction::Crash(node));
                }
            }
        }
    }

    fn next_state(&self, last: &BulkState, action: BulkAction) -> Option<BulkState> {
        let mut s = last.clone();
        self.apply(&mut s, &action);
        s.normalize();
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties::of(self)
    }
}
