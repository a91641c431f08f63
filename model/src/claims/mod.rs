//! The claim protocol across nodes, checked exhaustively: every interleaving, up to a bound, of
//! clients sending copies of a signal to any node; the messages between the nodes, the store and
//! the receiver delivered in any order; a callback that succeeds or fails; a node crashing
//! (losing its memory, keeping the store) or stalling past its heartbeat and waking to finish
//! what it was doing; a waiter's deadline; and `in_flight_timeout` expiring. This module makes
//! the model (each key's signal and claim, as the engine chooses them) and its steps; `node`
//! carries out the claim core's effects as the actor does, `store` decides writes as the stores
//! do, `properties` says what must hold, and `scenario` what is run.

mod describe;
mod node;
mod properties;
mod scenario;
mod state;
mod store;

use std::sync::Arc;

use idem_actors::action::Action as Callback;
use idem_actors::claim::phase::Phase;
use idem_actors::claim::Request;
use idem_actors::digest::Digester;
use idem_actors::playbook::Playbook;
use idem_actors::signals::{claimed, By};
use idem_actors::store::ClaimId;
use idem_actors::Settings;
use idem_schemas::{SignalRequest, Verdict};
use serde_json::json;
use stateright::{Model, Property};

pub use scenario::{Bounds, ClaimScenario, Sabotage};
pub use state::{
    At, ClaimAction, ClaimRow, IdemNode, LiveActor, Message, ReplyTo, Response, State,
    StoredDelivery,
};

use scenario::{EXPIRES_AT_ONCE, FINAL_RETRIES, IN_FLIGHT_TIMEOUT, WAIT, WINDOW};
use store::fold;

/// The model: the scenario, its bounds, and the protocol checked.
#[derive(Debug, Clone)]
pub struct ClaimModel {
    pub scenario: ClaimScenario,
    pub bounds: Bounds,
    pub sabotage: Option<Sabotage>,
    /// What every core reads.
    settings: Arc<Settings>,
    /// Each key's claim and request, as the engine chooses them.
    signals: Vec<KeySignal>,
    /// The claims: each key's, then the subject's (in [`ClaimScenario::Subject`]).
    claims: Vec<ClaimId>,
}

/// A key's signal: its claim (an index into the claims) and what the claim reads of it.
#[derive(Debug, Clone)]
struct KeySignal {
    claim: usize,
    request: Request,
}

impl ClaimModel {
    /// `scenario` as it runs, within `bounds`; `sabotage` breaks one rule.
    pub fn new(scenario: ClaimScenario, bounds: Bounds, sabotage: Option<Sabotage>) -> Self {
        let mut settings = Settings::default();
        settings.idempotency.key_ttl = match scenario {
            ClaimScenario::Expiring => EXPIRES_AT_ONCE,
            _ => WINDOW,
        };
        settings.idempotency.in_flight_timeout = IN_FLIGHT_TIMEOUT;
        let playbook = Playbook {
            decision: Verdict::Deny,
            actions: vec![Callback::callback("lock_account", "http://receiver/lock")],
            once_per_subject: (scenario == ClaimScenario::Subject).then_some(WINDOW),
            rules: Vec::new(),
        };
        let digester = Digester::new(b"the model's key secret");
        let mut claims: Vec<ClaimId> = Vec::new();
        let mut signals = Vec::new();
        for key in 0..bounds.keys {
            let signal = SignalRequest {
                signal_type: "sim_swap".into(),
                subject: "+447700900123".into(),
                occurred_at: None,
                metadata: None,
            };
            let (name, body) = (
                format!("key_{key}"),
                json!({"type": "sim_swap", "key": key}),
            );
            let by = match scenario {
                ClaimScenario::Queued => By::Event {
                    source: "okta",
                    kind: "okta",
                    event_type: "user.session.start",
                    id: &name,
                },
                ClaimScenario::Waiting => By::Request {
                    key: Some(&name),
                    body: &body,
                    wait: Some(WAIT),
                },
                ClaimScenario::Inline | ClaimScenario::Subject | ClaimScenario::Expiring => {
                    By::Request {
                        key: Some(&name),
                        body: &body,
                        wait: None,
                    }
                }
            };
            let chosen = claimed(&digester, &settings, "acme", &signal, &playbook, &by)
                .unwrap_or_else(|| unreachable!("every signal of the model is claimed"));
            claims.push(chosen.id);
            signals.push(KeySignal {
                claim: key,
                request: chosen.request,
            });
        }
        // The subject's claim, where each key's claim offers its decision.
        if let Some(link) = signals.first().and_then(|s| s.request.subject) {
            claims.push(ClaimId {
                tenant: "acme".into(),
                digest: link.digest,
            });
        }
        ClaimModel {
            scenario,
            bounds,
            sabotage,
            settings: Arc::new(settings),
            signals,
            claims,
        }
    }

    /// The key a claim's client is, if the claim is a key's.
    fn key_of(&self, claim: usize) -> Option<usize> {
        self.signals.iter().position(|signal| signal.claim == claim)
    }
}

impl Model for ClaimModel {
    type State = State;
    type Action = ClaimAction;

    fn init_states(&self) -> Vec<State> {
        let b = self.bounds;
        vec![State {
            nodes: (0..b.nodes)
                .map(|n| IdemNode {
                    epoch: n as u64 + 1,
                    stalled: false,
                    claims: vec![None; self.claims.len()],
                    lives: 0,
                })
                .collect(),
            rows: vec![None; self.claims.len()],
            deliveries: Vec::new(),
            net: Vec::new(),
            answers: vec![Vec::new(); b.keys],
            callbacks: Vec::new(),
            copies_left: vec![b.copies; b.keys],
            final_retries: vec![FINAL_RETRIES; b.keys],
            crashes_left: b.crashes,
            stalls_left: b.stalls,
            timeouts: 0,
            claims_made: 0,
            refused_deliveries: false,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<ClaimAction>) {
        for key in 0..self.bounds.keys {
            if s.copies_left[key] > 0 || s.wants_final_retry(key) {
                for node in 0..self.bounds.nodes {
                    actions.push(ClaimAction::Send { key, node });
                }
            }
        }
        for (n, msg) in s.net.iter().enumerate() {
            if msg.to_node().is_some_and(|node| s.nodes[node].stalled) {
                continue;
            }
            if matches!(msg, Message::WaitOver { after: Some(t), .. } if s.timeouts <= *t) {
                continue;
            }
            actions.push(ClaimAction::Deliver { msg: n, ok: true });
            if matches!(msg, Message::ActionsDone { .. }) {
                actions.push(ClaimAction::Deliver { msg: n, ok: false });
            }
        }
        // The retry worker attempts what is queued in the store (the delivery model checks its
        // leases; here, that it only ever sends what the store holds).
        // A queued inline attempt's retries are the delivery model's to check.
        for (n, delivery) in s.deliveries.iter().enumerate() {
            if delivery.due && self.scenario == ClaimScenario::Queued {
                actions.push(ClaimAction::Retry(n));
            }
        }
        for (n, node) in s.nodes.iter().enumerate() {
            if s.crashes_left > 0 {
                actions.push(ClaimAction::Crash(n));
            }
            if node.stalled {
                actions.push(ClaimAction::Wake(n));
            } else if s.stalls_left > 0 {
                actions.push(ClaimAction::Stall(n));
            }
        }
        // Time passes: once at any moment (a slow holder outlived by its timeout), and again
        // whenever nothing else can happen but what waits for time (a deadline of
        // `in_flight_timeout`) while a claim is stuck in flight (fairness: time always moves
        // on).
        let waits_for_time = |m: &Message| matches!(m, Message::WaitOver { after: Some(_), .. });
        let stuck = s.net.iter().all(waits_for_time)
            && s.rows
                .iter()
                .flatten()
                .any(|r| !r.timed_out && matches!(fold(&r.events), Some(Phase::InFlight(_))));
        if s.timeouts == 0 || stuck {
            actions.push(ClaimAction::TimeOut);
        }
    }

    fn next_state(&self, last: &State, action: ClaimAction) -> Option<State> {
        let mut s = last.clone();
        match action {
            ClaimAction::Send { key, node } => {
                match s.copies_left[key] {
                    0 => s.final_retries[key] -= 1,
                    _ => s.copies_left[key] -= 1,
                }
                let signal = &self.signals[key];
                s.net.push(Message::Request {
                    node,
                    claim: signal.claim,
                    port: ReplyTo::Client { key },
                    request: signal.request.clone(),
                    offered: None,
                });
            }
            ClaimAction::Deliver { msg, ok } => {
                let msg = s.net.remove(msg);
                self.deliver(&mut s, msg, ok);
            }
            ClaimAction::Retry(n) => {
                let delivery = &mut s.deliveries[n];
                delivery.due = false;
                let callback = (delivery.id.clone(), delivery.body.clone());
                s.callbacks.push(callback);
            }
            ClaimAction::Crash(n) => {
                s.crashes_left -= 1;
                let node = &mut s.nodes[n];
                node.epoch += 100;
                node.stalled = false;
                let waiting: Vec<usize> = node
                    .claims
                    .iter()
                    .flatten()
                    .flat_map(|l| l.core.waiting())
                    .filter_map(|p| match p {
                        ReplyTo::Client { key } => Some(*key),
                        ReplyTo::Offer { .. } => None,
                    })
                    .collect();
                node.claims = vec![None; node.claims.len()];
                for key in waiting {
                    s.answer(key, Response::Error);
                }
            }
            ClaimAction::Stall(n) => {
                s.stalls_left -= 1;
                s.nodes[n].stalled = true;
            }
            ClaimAction::Wake(n) => s.nodes[n].stalled = false,
            ClaimAction::TimeOut => {
                s.timeouts += 1;
                // Clients that gave up for now retry later.
                s.final_retries = vec![FINAL_RETRIES; s.final_retries.len()];
                for row in s.rows.iter_mut().flatten() {
                    row.timed_out = true;
                }
            }
        }
        s.normalize();
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties::of(self)
    }
}
