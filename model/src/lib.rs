//! An exhaustive check of the claim protocol across nodes, with stateright: every interleaving,
//! up to a bound, of clients sending copies of a keyed signal to any node; the messages between
//! the nodes, the store and the receiver delivered in any order; a callback that succeeds or
//! fails; a node crashing (losing its memory, keeping the store) or stalling past its heartbeat
//! and waking to finish what it was doing; and `in_flight_timeout` expiring. Nodes step each
//! request and commit through the functions the claim actor runs (`phase::step`, `Phase::apply`,
//! `Phase::after_commit`, `first_response`), and the store decides through `store::rule`, as
//! sled and PostgreSQL do. What is written here is the actor's plumbing (which message carries
//! what) and the store's bookkeeping, not the protocol's decisions. `delivery` checks the
//! delivery lease protocol the same way.

pub mod delivery;

use idem_actors::claim::first_response;
use idem_actors::claim::phase::{self, AfterCommit, Holder, Phase, Step};
use idem_actors::store::rule::{self, Current};
use idem_actors::store::{ClaimId, LogHead};
use idem_schemas::{
    ActionOutcome, ActionStatus, AttemptRecord, Claim, ClaimEvent, Decision, PlannedDelivery,
    StoredResponse, Verdict,
};
use std::hash::{Hash, Hasher};

use stateright::{Model, Property};

/// The clock's start (unix milliseconds); the model's time moves only when claims are made and
/// when `in_flight_timeout` expires.
const T0: u64 = 1_000_000;
/// `in_flight_timeout`.
const IN_FLIGHT_TIMEOUT_MS: u64 = 30_000;
/// `key_ttl`: longer than any run of the model (expiry is outside it).
const KEY_TTL_MS: u64 = 86_400_000;
/// Final retries per key (see [`State::final_retries`]).
const FINAL_RETRIES: u8 = 2;
/// Every copy of a key carries the same body.
const FINGERPRINT: [u8; 32] = [7; 32];

/// How far the checker goes.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// idem nodes on the one store.
    pub nodes: usize,
    /// Keys, each sent by its client.
    pub keys: usize,
    /// Copies of each key the client sends (more after an error, as a retry).
    pub copies: u8,
    /// Node crashes in a run.
    pub crashes: u8,
    /// Node stalls in a run.
    pub stalls: u8,
}

/// A deliberately broken protocol, which the checker must catch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Sabotage {
    /// The protocol as it runs.
    None,
    /// The store grants every start, append and take-over.
    NoFencing,
    /// The first answer leaves before its recovery point is durable.
    AnswerBeforeRecoveryPoint,
}

/// The model: bounds, and the protocol checked.
#[derive(Debug, Clone)]
pub struct ClaimModel {
    pub bounds: Bounds,
    pub sabotage: Sabotage,
}

/// One node's claim actor for a key: its memory, lost in a crash.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Actor {
    phase: Phase,
    head: Option<LogHead>,
    generation: u64,
    /// The key's first request waits for its answer here.
    first: bool,
}

/// An idem node.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Node {
    /// This incarnation's epoch (the holder of the claims it makes).
    epoch: u64,
    /// Stopped (SIGSTOP): its heartbeat has expired, and nothing it holds moves.
    stalled: bool,
    /// Its claim actors, by key.
    actors: Vec<Option<Actor>>,
}

/// A key's row in the store: its current generation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Row {
    current: Current,
    holder: u64,
    /// Its holder has held it for `in_flight_timeout`, by the store's clock.
    timed_out: bool,
    events: Vec<ClaimEvent>,
    completed: bool,
}

/// A write a node asks of the store.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Write {
    Start(Vec<ClaimEvent>),
    Append(LogHead, Vec<ClaimEvent>),
    TakeOver(LogHead),
    Complete(LogHead),
}

/// What a write came to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Written {
    Claimed(LogHead, Vec<ClaimEvent>),
    Appended(LogHead, Vec<ClaimEvent>),
    Held(Vec<ClaimEvent>, LogHead),
    TakenOver(LogHead),
    Fenced,
}

/// A message on its way.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Msg {
    /// A client's copy of a key, to a node.
    Request { key: usize, node: usize },
    /// A node's write, to the store (for the actor's generation when it wrote).
    Unit {
        node: usize,
        epoch: u64,
        key: usize,
        generation: u64,
        write: Write,
    },
    /// The store's answer, to the node (for the actor's generation when it wrote).
    Reply {
        node: usize,
        epoch: u64,
        key: usize,
        generation: u64,
        written: Written,
    },
    /// A callback, to the receiver.
    Callback {
        key: usize,
        delivery: String,
        body: Vec<u8>,
    },
    /// A node's actions for a generation have run.
    ActionsDone {
        node: usize,
        epoch: u64,
        key: usize,
        generation: u64,
    },
}

/// What a client was answered.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Answer {
    First(Vec<u8>),
    Replay(Vec<u8>),
    /// 409: in flight.
    Conflict,
    /// 500: retry with the same key.
    Error,
}

/// The whole system.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    pub nodes: Vec<Node>,
    /// The store, by key.
    pub rows: Vec<Option<Row>>,
    pub net: Vec<Msg>,
    /// By key.
    pub answers: Vec<Vec<Answer>>,
    /// What the receiver saw: key, delivery id, body.
    pub callbacks: Vec<(usize, String, Vec<u8>)>,
    pub copies_left: Vec<u8>,
    /// Retries a client makes once all its copies were answered without the key's bytes (a
    /// 409, say) and nothing of the key is left to happen: the retry that real clients make.
    pub final_retries: Vec<u8>,
    pub crashes_left: u8,
    pub stalls_left: u8,
    /// How many times `in_flight_timeout` has passed for the claims in flight then: the nodes'
    /// clocks moved past it, and so did the store's for those claims.
    pub timeouts: u8,
    /// Claims made so far: each at its own time.
    pub claims_made: u64,
}

/// A step of the model.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Action {
    /// The key's client sends a copy to the node.
    Send {
        key: usize,
        node: usize,
    },
    /// The message at this place arrives (for actions, `ok` is whether the callback succeeded).
    Deliver {
        msg: usize,
        ok: bool,
    },
    Crash(usize),
    Stall(usize),
    Wake(usize),
    /// `in_flight_timeout` expires.
    TimeOut,
}

impl State {
    fn now(&self) -> u64 {
        T0 + self.claims_made + self.timeouts as u64 * IN_FLIGHT_TIMEOUT_MS
    }

    /// Whether the store sees the holder of `row` as gone: timed out, or its node's heartbeat
    /// expired (crashed: another epoch; or stalled).
    fn holder_gone(&self, row: &Row) -> bool {
        row.timed_out
            || !self
                .nodes
                .iter()
                .any(|n| n.epoch == row.holder && !n.stalled)
    }

    /// One form for states that differ only in order: messages in flight are a multiset, and
    /// what clients and the receiver saw are sets (which copy saw it does not matter).
    fn normalize(&mut self) {
        self.net.sort_by_cached_key(hash_of);
        for answers in &mut self.answers {
            answers.sort_by_cached_key(hash_of);
            answers.dedup();
        }
        self.callbacks.sort();
        self.callbacks.dedup();
    }

    /// `action`, taken from this state, in a few words.
    pub fn describe(&self, action: &Action) -> String {
        let head = |h: &LogHead| format!("gen {} at {}", h.generation, h.next);
        match action {
            Action::Send { key, node } => format!("client sends key {key} to node {node}"),
            Action::Deliver { msg, ok } => match self.net.get(*msg) {
                Some(Msg::Request { key, node }) => {
                    format!("node {node} takes key {key}'s request")
                }
                Some(Msg::Unit {
                    node, key, write, ..
                }) => {
                    let write = match write {
                        Write::Start(events) => match events.first() {
                            Some(ClaimEvent::Claimed(c)) => {
                                format!("start gen {}", c.claimed_at_ms)
                            }
                            _ => "start".into(),
                        },
                        Write::Append(h, _) => format!("append the recovery point to {}", head(h)),
                        Write::TakeOver(h) => format!("take over {}", head(h)),
                        Write::Complete(h) => format!("complete {}", head(h)),
                    };
                    format!("store gets node {node}'s write for key {key}: {write}")
                }
                Some(Msg::Reply {
                    node, key, written, ..
                }) => {
                    let written = match written {
                        Written::Claimed(h, _) => format!("claimed {}", head(h)),
                        Written::Appended(h, _) => format!("appended, now {}", head(h)),
                        Written::Held(_, h) => format!("held by {}", head(h)),
                        Written::TakenOver(h) => format!("taken over as {}", head(h)),
                        Written::Fenced => "fenced".into(),
                    };
                    format!("node {node} hears for key {key}: {written}")
                }
                Some(Msg::Callback { delivery, .. }) => format!("receiver gets {delivery}"),
                Some(Msg::ActionsDone { node, key, .. }) => format!(
                    "node {node}'s actions for key {key} ran ({})",
                    if *ok {
                        "delivered"
                    } else {
                        "receiver down: queued"
                    }
                ),
                None => "nothing".into(),
            },
            Action::Crash(n) => format!("node {n} crashes"),
            Action::Stall(n) => format!("node {n} stalls past its heartbeat"),
            Action::Wake(n) => format!("node {n} wakes"),
            Action::TimeOut => "in_flight_timeout passes".into(),
        }
    }

    /// Whether `key`'s client retries once more: it has no answer with the key's bytes, and no
    /// copy of it is on its way or waiting at a node.
    fn wants_final_retry(&self, key: usize) -> bool {
        let answered = self.answers[key]
            .iter()
            .any(|a| matches!(a, Answer::First(_) | Answer::Replay(_)));
        let on_its_way = self
            .net
            .iter()
            .any(|m| matches!(m, Msg::Request { key: k, .. } if *k == key));
        let waiting = self
            .nodes
            .iter()
            .any(|n| n.actors[key].as_ref().is_some_and(|a| a.first));
        self.final_retries[key] > 0 && !answered && !on_its_way && !waiting
    }

    fn answer(&mut self, key: usize, answer: Answer) {
        if answer == Answer::Error {
            // The client retries an error.
            self.copies_left[key] += 1;
        }
        self.answers[key].push(answer);
    }
}

/// A fixed order for values without one (the hasher's keys are fixed).
fn hash_of<T: Hash>(value: &T) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

fn claim_id(key: usize) -> ClaimId {
    ClaimId {
        tenant: "acme".into(),
        digest: [key as u8; 32],
    }
}

/// The decision a claim of `key` at `generation` fixes: its id and its callback's id and bytes.
fn decision(key: usize, generation: u64) -> Decision {
    let id = format!("dec_{key}_{generation}");
    Decision {
        id: id.clone(),
        tenant: "acme".into(),
        signal_type: "sim_swap".into(),
        source: None,
        verdict: Verdict::Deny,
        subject_hash: String::new(),
        created_at_ms: generation,
        deliveries: vec![PlannedDelivery {
            id: format!("msg_{key}_{generation}"),
            action: "lock_account".into(),
            url: "http://receiver/lock".into(),
            body: id.into_bytes(),
        }],
    }
}

/// The actor of a node that had none for the key: what the store holds, adopted.
fn load(row: Option<&Row>, key: usize) -> Option<Actor> {
    let Some(row) = row else {
        return Some(Actor {
            phase: Phase::Free,
            head: None,
            generation: 0,
            first: false,
        });
    };
    let phase = fold(&row.events)?;
    Some(Actor {
        phase,
        head: Some(head_of(row, key)),
        generation: row.current.generation,
        first: false,
    })
}

fn fold(events: &[ClaimEvent]) -> Option<Phase> {
    events
        .iter()
        .cloned()
        .try_fold(Phase::Free, |phase, event| phase.apply(event))
        .ok()
}

fn head_of(row: &Row, key: usize) -> LogHead {
    LogHead {
        id: claim_id(key),
        generation: row.current.generation,
        expires_at_ms: row.current.expires_at_ms,
        next: row.current.writes,
    }
}

impl ClaimModel {
    /// The protocol as it runs, within `bounds`.
    pub fn new(bounds: Bounds) -> Self {
        ClaimModel {
            bounds,
            sabotage: Sabotage::None,
        }
    }

    fn fencing(&self) -> bool {
        self.sabotage != Sabotage::NoFencing
    }

    /// A request for `key` reaches `node`: the claim actor's `submit`.
    fn request(&self, s: &mut State, node: usize, key: usize) {
        let now = s.now();
        let epoch = s.nodes[node].epoch;
        let holder = Holder {
            epoch,
            in_flight_timeout_ms: IN_FLIGHT_TIMEOUT_MS,
        };
        if s.nodes[node].actors[key].is_none() {
            s.nodes[node].actors[key] = load(s.rows[key].as_ref(), key);
        }
        let Some(actor) = s.nodes[node].actors[key].as_mut() else {
            // A log that does not fold: the actor cannot start.
            return s.answer(key, Answer::Error);
        };
        let waiting = actor.first.then_some(&FINGERPRINT);
        match phase::step(&actor.phase, waiting, &FINGERPRINT, now, holder) {
            Step::Replay(response) => s.answer(key, Answer::Replay(response.body)),
            Step::InFlight => s.answer(key, Answer::Conflict),
            Step::Mismatch => unreachable!("every copy carries the same body"),
            Step::Claim => {
                let generation = now.max(actor.generation + 1);
                actor.generation = generation;
                actor.first = true;
                let claim = Claim {
                    fingerprint: FINGERPRINT,
                    holder: epoch,
                    claimed_at_ms: generation,
                    expires_at_ms: generation + KEY_TTL_MS,
                    decision: decision(key, generation),
                    subject: None,
                };
                s.claims_made += 1;
                let write = Write::Start(vec![ClaimEvent::Claimed(claim)]);
                s.net.push(Msg::Unit {
                    node,
                    epoch,
                    key,
                    generation,
                    write,
                });
            }
            Step::TakeOver => {
                let Some(head) = actor.head.clone() else {
                    return s.answer(key, Answer::Error);
                };
                actor.first = true;
                let (generation, write) = (actor.generation, Write::TakeOver(head));
                s.net.push(Msg::Unit {
                    node,
                    epoch,
                    key,
                    generation,
                    write,
                });
            }
            Step::Finish => match complete(s, node, key) {
                Some(response) => s.answer(key, Answer::Replay(response.body)),
                None => fail(s, node, key),
            },
        }
    }

    /// A write reaches the store, which decides it by `store::rule`.
    fn store(&self, s: &mut State, unit: Msg) {
        let Msg::Unit {
            node,
            epoch,
            key,
            generation,
            write,
        } = unit
        else {
            return;
        };
        let current = s.rows[key].as_ref().map(|r| r.current);
        let held = |s: &State| match &s.rows[key] {
            Some(row) => Written::Held(row.events.clone(), head_of(row, key)),
            None => Written::Fenced,
        };
        let written = match write {
            Write::Start(events) => {
                let Some(ClaimEvent::Claimed(claim)) = events.first() else {
                    return;
                };
                let claimed_at = claim.claimed_at_ms;
                if rule::may_start(current.as_ref(), claimed_at) || !self.fencing() {
                    let current = Current {
                        generation: claimed_at,
                        expires_at_ms: claim.expires_at_ms,
                        writes: 1,
                    };
                    let row = Row {
                        current,
                        holder: claim.holder,
                        timed_out: false,
                        events: events.clone(),
                        completed: false,
                    };
                    let head = head_of(&row, key);
                    s.rows[key] = Some(row);
                    Written::Claimed(head, events)
                } else {
                    held(s)
                }
            }
            Write::Append(head, events) => {
                let granted = rule::may_append(current.as_ref(), &head) || !self.fencing();
                match s.rows[key].as_mut() {
                    Some(row) if granted => {
                        row.events.extend(events.iter().cloned());
                        row.current.writes += 1;
                        let next = LogHead {
                            next: head.next + 1,
                            ..head
                        };
                        Written::Appended(next, events)
                    }
                    _ => Written::Fenced,
                }
            }
            Write::TakeOver(head) => {
                let gone = s.rows[key].as_ref().is_some_and(|row| s.holder_gone(row));
                let granted = rule::may_take_over(current.as_ref(), &head, gone) || !self.fencing();
                match s.rows[key].as_mut() {
                    Some(row) if granted => {
                        row.current.generation += 1;
                        row.holder = epoch;
                        row.timed_out = false;
                        Written::TakenOver(LogHead {
                            generation: row.current.generation,
                            ..head
                        })
                    }
                    _ => held(s),
                }
            }
            Write::Complete(head) => {
                if let Some(row) = s.rows[key].as_mut() {
                    if row.current.generation == head.generation {
                        row.completed = true;
                    }
                }
                return;
            }
        };
        s.net.push(Msg::Reply {
            node,
            epoch,
            key,
            generation,
            written,
        });
    }

    /// The store's answer reaches the actor: the claim actor's `committed`.
    fn committed(&self, s: &mut State, node: usize, key: usize, generation: u64, written: Written) {
        let Some(actor) = s.nodes[node].actors[key].as_mut() else {
            return;
        };
        if generation != actor.generation || !actor.first {
            return;
        }
        match written {
            Written::Claimed(head, events) | Written::Appended(head, events) => {
                actor.head = Some(head);
                for event in events {
                    let Ok(next) = actor.phase.clone().apply(event) else {
                        return fail(s, node, key);
                    };
                    actor.phase = next;
                }
                match actor.phase.after_commit() {
                    Ok(AfterCommit::RunActions) => dispatch(s, node, key),
                    Ok(AfterCommit::Complete) => match complete(s, node, key) {
                        Some(response) => s.answer(key, Answer::First(response.body)),
                        None => fail(s, node, key),
                    },
                    Ok(AfterCommit::Answer(response)) => {
                        actor.first = false;
                        s.answer(key, Answer::First(response.body));
                    }
                    Err(_) => fail(s, node, key),
                }
            }
            Written::Held(events, head) => {
                let Some(phase) = fold(&events) else {
                    return fail(s, node, key);
                };
                actor.phase = phase;
                actor.generation = head.generation;
                actor.head = Some(head);
                actor.first = false;
                let now = s.now();
                let holder = Holder {
                    epoch: s.nodes[node].epoch,
                    in_flight_timeout_ms: IN_FLIGHT_TIMEOUT_MS,
                };
                let Some(actor) = s.nodes[node].actors[key].as_ref() else {
                    return;
                };
                let answer = match phase::step(&actor.phase, None, &FINGERPRINT, now, holder) {
                    Step::Replay(response) => Answer::Replay(response.body),
                    _ => Answer::Conflict,
                };
                s.answer(key, answer);
            }
            Written::TakenOver(head) => {
                actor.generation = head.generation;
                actor.head = Some(head);
                dispatch(s, node, key);
            }
            Written::Fenced => fail(s, node, key),
        }
    }

    /// A node's actions have run: the claim actor's `dispatched`, with the recovery point.
    fn dispatched(&self, s: &mut State, node: usize, key: usize, generation: u64, ok: bool) {
        let epoch = s.nodes[node].epoch;
        let Some(actor) = s.nodes[node].actors[key].as_mut() else {
            return;
        };
        let running = generation == actor.generation
            && matches!(actor.phase, Phase::InFlight(_))
            && actor.first;
        let (true, Some(claim), Some(head)) = (running, actor.phase.claim(), actor.head.clone())
        else {
            return;
        };
        let outcomes: Vec<ActionOutcome> = claim
            .decision
            .deliveries
            .iter()
            .map(|d| ActionOutcome {
                delivery_id: d.id.clone(),
                status: if ok {
                    ActionStatus::Delivered
                } else {
                    ActionStatus::Queued
                },
                attempt: AttemptRecord {
                    at_ms: generation,
                    code: ok.then_some(200),
                    error: (!ok).then(|| "connection refused".into()),
                    latency_ms: 1,
                    retry_after_ms: None,
                },
            })
            .collect();
        let Ok(response) = first_response(&claim.decision, &outcomes) else {
            return fail(s, node, key);
        };
        if self.sabotage == Sabotage::AnswerBeforeRecoveryPoint {
            actor.first = false;
            s.answer(key, Answer::First(response.body.clone()));
        }
        let write = Write::Append(head, vec![ClaimEvent::Dispatched { outcomes, response }]);
        s.net.push(Msg::Unit {
            node,
            epoch,
            key,
            generation,
            write,
        });
    }
}

/// The actor's callbacks run: each planned delivery goes out with its id and bytes.
fn dispatch(s: &mut State, node: usize, key: usize) {
    let epoch = s.nodes[node].epoch;
    let Some(actor) = s.nodes[node].actors[key].as_ref() else {
        return;
    };
    let Some(claim) = actor.phase.claim() else {
        return fail(s, node, key);
    };
    let generation = actor.generation;
    for d in &claim.decision.deliveries {
        s.net.push(Msg::Callback {
            key,
            delivery: d.id.clone(),
            body: d.body.clone(),
        });
    }
    s.net.push(Msg::ActionsDone {
        node,
        epoch,
        key,
        generation,
    });
}

/// The actor's `complete`: the recorded response, with `completed` queued for the store.
fn complete(s: &mut State, node: usize, key: usize) -> Option<StoredResponse> {
    let epoch = s.nodes[node].epoch;
    let actor = s.nodes[node].actors[key].as_mut()?;
    let (Phase::Dispatched(_, _, response), Some(head)) = (&actor.phase, &actor.head) else {
        return None;
    };
    let (response, head, generation) = (response.clone(), head.clone(), actor.generation);
    actor.phase = actor.phase.clone().apply(ClaimEvent::Completed).ok()?;
    actor.first = false;
    s.net.push(Msg::Unit {
        node,
        epoch,
        key,
        generation,
        write: Write::Complete(head),
    });
    Some(response)
}

/// The actor fails: its waiting request gets a 500, and its memory goes.
fn fail(s: &mut State, node: usize, key: usize) {
    if let Some(actor) = s.nodes[node].actors[key].take() {
        if actor.first {
            s.answer(key, Answer::Error);
        }
    }
}

/// The decision id in a response's bytes.
fn decision_of(body: &[u8]) -> Option<&[u8]> {
    let at = body.windows(4).position(|w| w == b"dec_")?;
    let end = body[at..].iter().position(|&b| b == b'"')?;
    Some(&body[at..at + end])
}

impl Model for ClaimModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let b = self.bounds;
        vec![State {
            nodes: (0..b.nodes)
                .map(|n| Node {
                    epoch: n as u64 + 1,
                    stalled: false,
                    actors: vec![None; b.keys],
                })
                .collect(),
            rows: vec![None; b.keys],
            net: Vec::new(),
            answers: vec![Vec::new(); b.keys],
            callbacks: Vec::new(),
            copies_left: vec![b.copies; b.keys],
            final_retries: vec![FINAL_RETRIES; b.keys],
            crashes_left: b.crashes,
            stalls_left: b.stalls,
            timeouts: 0,
            claims_made: 0,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        for key in 0..self.bounds.keys {
            if s.copies_left[key] > 0 || s.wants_final_retry(key) {
                for node in 0..self.bounds.nodes {
                    actions.push(Action::Send { key, node });
                }
            }
        }
        for (n, msg) in s.net.iter().enumerate() {
            let stalled = |node: usize| s.nodes[node].stalled;
            match msg {
                Msg::Request { node, .. } | Msg::Reply { node, .. } if stalled(*node) => {}
                Msg::ActionsDone { node, .. } if stalled(*node) => {}
                Msg::ActionsDone { .. } => {
                    actions.push(Action::Deliver { msg: n, ok: true });
                    actions.push(Action::Deliver { msg: n, ok: false });
                }
                _ => actions.push(Action::Deliver { msg: n, ok: true }),
            }
        }
        for (n, node) in s.nodes.iter().enumerate() {
            if s.crashes_left > 0 {
                actions.push(Action::Crash(n));
            }
            if node.stalled {
                actions.push(Action::Wake(n));
            } else if s.stalls_left > 0 {
                actions.push(Action::Stall(n));
            }
        }
        // Time passes: once at any moment (a slow holder outlived by its timeout), and again
        // whenever nothing else can happen while a claim is stuck in flight (fairness: time
        // always moves on).
        let stuck = s.net.is_empty()
            && !s
                .nodes
                .iter()
                .flat_map(|n| n.actors.iter().flatten())
                .any(|a| a.first)
            && s.rows
                .iter()
                .flatten()
                .any(|r| !r.timed_out && matches!(fold(&r.events), Some(Phase::InFlight(_))));
        if s.timeouts == 0 || stuck {
            actions.push(Action::TimeOut);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Send { key, node } => {
                match s.copies_left[key] {
                    0 => s.final_retries[key] -= 1,
                    _ => s.copies_left[key] -= 1,
                }
                s.net.push(Msg::Request { key, node });
            }
            Action::Deliver { msg, ok } => match s.net.remove(msg) {
                Msg::Request { key, node } => self.request(&mut s, node, key),
                unit @ Msg::Unit { .. } => self.store(&mut s, unit),
                Msg::Reply {
                    node,
                    epoch,
                    key,
                    generation,
                    written,
                } if s.nodes[node].epoch == epoch => {
                    self.committed(&mut s, node, key, generation, written)
                }
                Msg::ActionsDone {
                    node,
                    epoch,
                    key,
                    generation,
                } if s.nodes[node].epoch == epoch => {
                    self.dispatched(&mut s, node, key, generation, ok)
                }
                // For an incarnation that is gone.
                Msg::Reply { .. } | Msg::ActionsDone { .. } => {}
                Msg::Callback {
                    key,
                    delivery,
                    body,
                } => s.callbacks.push((key, delivery, body)),
            },
            Action::Crash(n) => {
                s.crashes_left -= 1;
                let node = &mut s.nodes[n];
                node.epoch += 100;
                node.stalled = false;
                let waiting: Vec<usize> = (0..node.actors.len())
                    .filter(|&k| node.actors[k].as_ref().is_some_and(|a| a.first))
                    .collect();
                node.actors = vec![None; node.actors.len()];
                for key in waiting {
                    s.answer(key, Answer::Error);
                }
            }
            Action::Stall(n) => {
                s.stalls_left -= 1;
                s.nodes[n].stalled = true;
            }
            Action::Wake(n) => s.nodes[n].stalled = false,
            Action::TimeOut => {
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
        vec![
            Property::always(
                "one decision per key, every answer its bytes",
                |_, s: &State| {
                    (0..s.answers.len()).all(|key| {
                        let mut bodies = s.answers[key].iter().filter_map(|a| match a {
                            Answer::First(b) | Answer::Replay(b) => Some(b),
                            _ => None,
                        });
                        let Some(first) = bodies.next() else {
                            return true;
                        };
                        // An answer's bytes are the recovery point's, durable before it left.
                        let stored = s.rows[key].as_ref().and_then(|row| fold(&row.events));
                        let recorded = match &stored {
                            Some(Phase::Dispatched(_, _, r) | Phase::Completed(_, r)) => &r.body,
                            _ => return false,
                        };
                        first == recorded && bodies.all(|b| b == first)
                    })
                },
            ),
            Property::always(
                "no write of a fenced-out holder is visible",
                |_, s: &State| {
                    s.rows.iter().flatten().all(|row| {
                        let claims = row
                            .events
                            .iter()
                            .filter(|e| matches!(e, ClaimEvent::Claimed(_)))
                            .count();
                        claims == 1 && fold(&row.events).is_some()
                    })
                },
            ),
            Property::always(
                "every callback carries its key's one decision",
                |_, s: &State| {
                    s.callbacks.iter().all(|(key, delivery, body)| {
                        let Some(
                            Phase::InFlight(c) | Phase::Dispatched(c, ..) | Phase::Completed(c, _),
                        ) = s.rows[*key].as_ref().and_then(|row| fold(&row.events))
                        else {
                            return false;
                        };
                        c.decision
                            .deliveries
                            .iter()
                            .any(|d| &d.id == delivery && &d.body == body)
                            && s.answers[*key].iter().all(|a| match a {
                                Answer::First(b) | Answer::Replay(b) => {
                                    decision_of(&b[..]) == Some(c.decision.id.as_bytes())
                                }
                                _ => true,
                            })
                    })
                },
            ),
            // Once nothing is left to happen, every key's response is recorded, so the client's
            // next retry is answered with it (a 409 or a 500 before then is retried).
            Property::eventually(
                "every key is decided and its response recorded",
                |_, s: &State| {
                    s.rows.iter().all(|row| {
                        row.as_ref().is_some_and(|row| {
                            matches!(
                                fold(&row.events),
                                Some(Phase::Dispatched(..) | Phase::Completed(..))
                            )
                        })
                    })
                },
            ),
            Property::sometimes("a claim is taken over", |_, s: &State| {
                s.rows.iter().flatten().any(|row| {
                    matches!(row.events.first(), Some(ClaimEvent::Claimed(c)) if c.claimed_at_ms != row.current.generation)
                })
            }),
            Property::sometimes("a stale holder is fenced out", |_, s: &State| {
                s.answers.iter().flatten().any(|a| *a == Answer::Error)
                    && s.rows.iter().flatten().any(|row| row.completed)
            }),
        ]
    }
}
