//! An exhaustive check of the claim protocol across nodes, with stateright: every interleaving,
//! up to a bound, of clients sending copies of a signal to any node; the messages between the
//! nodes, the store and the receiver delivered in any order; a callback that succeeds or fails;
//! a node crashing (losing its memory, keeping the store) or stalling past its heartbeat and
//! waking to finish what it was doing; a waiter's deadline; and `in_flight_timeout` expiring.
//!
//! What runs is the real code: each node's claims are the claim core (`claim::core::Core`), fed
//! every input the claim actor feeds it, its effects carried out as the actor carries them out;
//! the claim a signal is decided under is the engine's own choice (`signal::claimed`); the store
//! takes the core's real units and answers with real `Written`s, decided by `store::rule` as
//! sled and PostgreSQL decide them. This file holds only the plumbing: which message carries
//! what, and the store's bookkeeping. A sabotage is the same code with one rule switched off:
//! fencing in the store rule, or the core's answer after the recovery point.
//!
//! Each [`Scenario`] is a path of the service: signals with callbacks attempted inline; copies
//! that wait for the first request's answer (`Prefer: wait`); keys decided once per subject,
//! through the subject's claim; and source events, whose decision and queued callbacks are one
//! write, the retry worker making the callbacks. `delivery` checks the delivery lease protocol
//! the same way, and `bulk` a bulk redelivery with an idempotency key: what its claim fixes, and
//! what a holder that takes it over after a crash redelivers.

pub mod bulk;
pub mod delivery;

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use idem_actors::claim::core::{Context, Core};
use idem_actors::claim::effect::{Effect, Effects};
use idem_actors::claim::phase::Phase;
use idem_actors::claim::{self, ClaimError, Reply, Request};
use idem_actors::digest::Digester;
use idem_actors::playbook::{Action as Callback, Playbook};
use idem_actors::signals::{claimed, By};
use idem_actors::store::rule::{self, Current, Fencing};
use idem_actors::store::{ClaimId, ClaimLog, ClaimWrite, LogHead, Unit, Written};
use idem_actors::Settings;
use idem_schemas::{
    ActionOutcome, ActionStatus, AttemptRecord, ClaimEvent, Decision, DeliveryEvent,
    DeliveryStatus, PlannedDelivery, SignalRequest, StoredResponse, Verdict,
};
use serde_json::json;
use stateright::{Model, Property};

pub use idem_actors::claim::core::ClaimSabotage as CoreSabotage;
use idem_actors::claim::core::Heard;

/// The clock's start (unix milliseconds); the model's time moves only when claims are made and
/// when `in_flight_timeout` expires.
const T0: u64 = 1_000_000;
/// `in_flight_timeout`.
const IN_FLIGHT_TIMEOUT: Duration = Duration::from_secs(30);
/// `key_ttl` and the once-per-subject window: longer than any run of the model (expiry is
/// outside it).
const WINDOW: Duration = Duration::from_secs(86_400);
/// `key_ttl` in [`Scenario::Expiring`]: a claim has expired by the next one made.
const EXPIRES_AT_ONCE: Duration = Duration::from_millis(1);
/// How long a waiting copy may wait (its deadline comes whenever the checker says).
const WAIT: Duration = Duration::from_secs(10);
/// Final retries per key (see [`State::wants_final_retry`]).
const FINAL_RETRIES: u8 = 2;

/// A path of the service the checker runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scenario {
    /// Keyed signals whose callbacks are attempted inside the request.
    Inline,
    /// The same, every copy waiting for the first request's answer (`Prefer: wait`).
    Waiting,
    /// Keys of a playbook decided once per subject, all about one subject: each key's claim
    /// offers its decision to the subject's claim.
    Subject,
    /// A source's events: claim, recovery point, completion and queued deliveries in one write,
    /// the callbacks made by the retry worker from the store.
    Queued,
    /// Keyed signals whose `key_ttl` ends before their callbacks do: a key's claim expires while
    /// its decision runs, and holds the key until it completes or `in_flight_timeout` passes.
    Expiring,
}

impl Scenario {
    /// Every scenario, in the order they are checked.
    pub const ALL: [Scenario; 5] = [
        Scenario::Inline,
        Scenario::Waiting,
        Scenario::Subject,
        Scenario::Queued,
        Scenario::Expiring,
    ];
}

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

impl Bounds {
    /// The bounds `scenario` is checked within by default: two nodes, and as much else as
    /// reaches the cases the scenario is for within a few minutes.
    pub fn default_for(scenario: Scenario) -> Bounds {
        let base = Bounds {
            nodes: 2,
            keys: 1,
            copies: 2,
            crashes: 1,
            stalls: 1,
        };
        match scenario {
            Scenario::Inline | Scenario::Queued => base,
            // A crash is what leaves a holder gone; a stall adds little to waiting but states.
            Scenario::Waiting => Bounds { stalls: 0, ..base },
            // Two keys about one subject on one node, each sent once (then retried as its
            // client does): the subject's claim is always on the offering key's node, and the
            // keys' contention for it is the same on one node as on two.
            Scenario::Subject => Bounds {
                nodes: 1,
                keys: 2,
                copies: 1,
                crashes: 0,
                stalls: 0,
            },
            // With no crash or stall, only the expiry and `in_flight_timeout` end a claim: a
            // copy on the other node meets the expired claim still running.
            Scenario::Expiring => Bounds {
                crashes: 0,
                stalls: 0,
                ..base
            },
        }
    }
}

/// A deliberately broken protocol, which the checker must catch: one rule of the real code
/// switched off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Sabotage {
    /// The store grants every start, append and take-over ([`Fencing::Off`]).
    NoFencing,
    /// The core answers before its recovery point is durable.
    AnswerBeforeRecoveryPoint,
    /// The core and the store replace an expired claim whether or not its decision still runs
    /// (`rule::replaceable` with no time kept).
    ReplaceOnExpiry,
}

/// The model: the scenario, its bounds, and the protocol checked.
#[derive(Debug, Clone)]
pub struct ClaimModel {
    pub scenario: Scenario,
    pub bounds: Bounds,
    pub sabotage: Option<Sabotage>,
    /// What every core reads.
    settings: Arc<Settings>,
    /// Each key's claim and request, as the engine chooses them.
    signals: Vec<Claimed>,
    /// The claims: each key's, then the subject's (in [`Scenario::Subject`]).
    claims: Vec<ClaimId>,
}

/// A key's signal: its claim (an index into the claims) and what the claim reads of it.
#[derive(Debug, Clone)]
struct Claimed {
    claim: usize,
    request: Request,
}

/// Where an answer goes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Port {
    /// To key `key`'s client.
    Client { key: usize },
    /// To the actor `at` of claim `claim`, which offered generation `generation`'s decision to
    /// its subject's claim.
    Offer {
        at: At,
        claim: usize,
        generation: u64,
    },
}

/// One life of a claim's actor: on `node`, in the incarnation of epoch `epoch`, the `life`-th
/// actor started there. A message for an actor that stopped is lost with it, as a ractor
/// message cast to a stopped actor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct At {
    node: usize,
    epoch: u64,
    life: u32,
}

/// A claim's actor: its life and its core.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Live {
    life: u32,
    core: Core<Port>,
}

/// An answer, as it travels.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Answer {
    First(Vec<u8>),
    Replay(Vec<u8>),
    Awaited(Vec<u8>),
    Deduplicated(Vec<u8>),
    /// 409: in flight.
    Conflict,
    /// 422.
    Mismatch,
    /// 500: retry with the same key.
    Error,
}

impl Answer {
    fn of(reply: &Reply) -> Answer {
        match reply {
            Reply::First(a) => Answer::First(a.response.body.clone()),
            Reply::Replayed(a) => Answer::Replay(a.response.body.clone()),
            Reply::Awaited(a) => Answer::Awaited(a.response.body.clone()),
            Reply::Deduplicated(a) => Answer::Deduplicated(a.response.body.clone()),
            Reply::InFlight => Answer::Conflict,
            Reply::Mismatch => Answer::Mismatch,
            Reply::Failed(_) => Answer::Error,
        }
    }

    /// The reply it was (for the subject's answer, fed back to the offering claim): a subject's
    /// claim answers with the decision it holds.
    fn reply(&self) -> Reply {
        let response = |body: &Vec<u8>| claim::Answer {
            response: StoredResponse {
                status: 201,
                body: body.clone(),
                trace: None,
            },
            decision_id: decision_of(body)
                .map(|id| String::from_utf8_lossy(id).into_owned())
                .unwrap_or_default(),
        };
        match self {
            Answer::First(b) => Reply::First(response(b)),
            Answer::Replay(b) => Reply::Replayed(response(b)),
            Answer::Awaited(b) => Reply::Awaited(response(b)),
            Answer::Deduplicated(b) => Reply::Deduplicated(response(b)),
            Answer::Conflict => Reply::InFlight,
            Answer::Mismatch => Reply::Mismatch,
            Answer::Error => Reply::Failed(Arc::new(ClaimError::Subject("failed".into()))),
        }
    }

    /// The response's bytes, if it carries one.
    fn body(&self) -> Option<&Vec<u8>> {
        match self {
            Answer::First(b) | Answer::Replay(b) | Answer::Awaited(b) | Answer::Deduplicated(b) => {
                Some(b)
            }
            Answer::Conflict | Answer::Mismatch | Answer::Error => None,
        }
    }
}

/// An idem node.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Node {
    /// This incarnation's epoch (the holder of the claims it makes).
    epoch: u64,
    /// Stopped (SIGSTOP): its heartbeat has expired, and nothing it holds moves.
    stalled: bool,
    /// Its claims' actors, by claim: its memory, lost in a crash.
    claims: Vec<Option<Live>>,
    /// Actors started on it so far.
    lives: u32,
}

/// A claim's row in the store: its current generation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Row {
    current: Current,
    holder: u64,
    /// Its holder has held it for `in_flight_timeout`, by the store's clock.
    timed_out: bool,
    events: Vec<ClaimEvent>,
}

/// A delivery in the store.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Stored {
    id: String,
    decision: String,
    body: Vec<u8>,
    /// Queued for the retry worker, and not attempted by it yet.
    due: bool,
}

/// A message on its way.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Msg {
    /// A request to a node's claim: a client's copy, or a claim's offer to its subject's.
    Request {
        node: usize,
        claim: usize,
        port: Port,
        request: Request,
        /// The decision offered, for an offer (a client's request decides its own).
        offered: Option<Decision>,
    },
    /// An actor's unit, to the store (for its claim's generation then).
    Commit {
        at: At,
        claim: usize,
        generation: u64,
        unit: Unit,
    },
    /// `completed`, to the store.
    Complete { claim: usize, head: LogHead },
    /// What a unit came to, to its actor.
    Committed {
        at: At,
        claim: usize,
        generation: u64,
        written: Written,
    },
    /// A claim's actions have run.
    ActionsDone {
        at: At,
        claim: usize,
        generation: u64,
        taken_over: bool,
    },
    /// A callback, to the receiver.
    Callback { delivery: String, body: Vec<u8> },
    /// The subject's claim's answer to an offer.
    Offered {
        at: At,
        claim: usize,
        generation: u64,
        answer: Answer,
    },
    /// A waiter's deadline: it may pass at any moment, unless it is `in_flight_timeout` or
    /// more away (an offer's wait), which passes only once that much time has (`after`
    /// timeouts).
    WaitOver {
        at: At,
        claim: usize,
        waiter: u64,
        after: Option<u8>,
    },
    /// Another node waits for this claim, held here.
    Asked { node: usize, claim: usize },
    /// The claim, held elsewhere, has a durable answer.
    Answered { node: usize, claim: usize },
    /// An actor's read of the claim after it was answered elsewhere.
    Reread { at: At, claim: usize },
}

impl Msg {
    /// The node it is for, if it is for one (a stalled node takes none).
    fn to_node(&self) -> Option<usize> {
        match self {
            Msg::Request { node, .. } | Msg::Asked { node, .. } | Msg::Answered { node, .. } => {
                Some(*node)
            }
            Msg::Committed { at, .. }
            | Msg::ActionsDone { at, .. }
            | Msg::Offered { at, .. }
            | Msg::WaitOver { at, .. }
            | Msg::Reread { at, .. } => Some(at.node),
            Msg::Commit { .. } | Msg::Complete { .. } | Msg::Callback { .. } => None,
        }
    }
}

/// The whole system.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    pub nodes: Vec<Node>,
    /// The store's claims, by claim.
    pub rows: Vec<Option<Row>>,
    /// The store's deliveries.
    pub deliveries: Vec<Stored>,
    pub net: Vec<Msg>,
    /// What each key's client was answered.
    pub answers: Vec<Vec<Answer>>,
    /// What the receiver saw: delivery id and body.
    pub callbacks: Vec<(String, Vec<u8>)>,
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
    /// A unit that carried deliveries was refused (its claim write held or fenced).
    pub refused_deliveries: bool,
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
    /// The retry worker makes the callback of the queued delivery at this place.
    Retry(usize),
    Crash(usize),
    Stall(usize),
    Wake(usize),
    /// `in_flight_timeout` expires.
    TimeOut,
}

impl State {
    fn now(&self) -> u64 {
        T0 + self.claims_made + self.timeouts as u64 * IN_FLIGHT_TIMEOUT.as_millis() as u64
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

    /// Whether `key`'s client retries once more: it has no answer with the key's bytes, and no
    /// copy of it is on its way or waiting at a node.
    fn wants_final_retry(&self, key: usize) -> bool {
        let answered = self.answers[key].iter().any(|a| a.body().is_some());
        let client = Port::Client { key };
        let on_its_way = self
            .net
            .iter()
            .any(|m| matches!(m, Msg::Request { port, .. } if *port == client));
        let waiting = self
            .nodes
            .iter()
            .flat_map(|n| n.claims.iter().flatten())
            .any(|l| l.core.waiting().any(|p| *p == client));
        self.final_retries[key] > 0 && !answered && !on_its_way && !waiting
    }

    fn answer(&mut self, key: usize, answer: Answer) {
        if answer == Answer::Error {
            // The client retries an error.
            self.copies_left[key] += 1;
        }
        self.answers[key].push(answer);
    }

    /// The recorded response of claim `claim`, if its row folds to one.
    fn recorded(&self, claim: usize) -> Option<StoredResponse> {
        fold(&self.rows[claim].as_ref()?.events)?
            .response()
            .cloned()
    }

    /// `action`, taken from this state, in a few words.
    pub fn describe(&self, action: &Action) -> String {
        let head = |h: &LogHead| format!("gen {} at {}", h.generation, h.next);
        match action {
            Action::Send { key, node } => format!("client sends key {key} to node {node}"),
            Action::Deliver { msg, ok } => match self.net.get(*msg) {
                Some(Msg::Request {
                    node, claim, port, ..
                }) => match port {
                    Port::Client { key } => {
                        format!("node {node} takes key {key}'s request (claim {claim})")
                    }
                    Port::Offer { claim: from, .. } => {
                        format!("node {node}'s claim {from} offers its decision to claim {claim}")
                    }
                },
                Some(Msg::Commit {
                    at, claim, unit, ..
                }) => {
                    let node = at.node;
                    let write = match unit.claim_write() {
                        Some(ClaimWrite::Start(_, events)) => match events.first() {
                            Some(ClaimEvent::Claimed(c)) if events.len() == 3 => {
                                format!("start gen {} with its recovery point", c.claimed_at_ms)
                            }
                            Some(ClaimEvent::Claimed(c)) => {
                                format!("start gen {}", c.claimed_at_ms)
                            }
                            _ => "start".into(),
                        },
                        Some(ClaimWrite::Append(h, _)) => {
                            format!("append the recovery point to {}", head(h))
                        }
                        Some(ClaimWrite::TakeOver(h)) => format!("take over {}", head(h)),
                        None => "deliveries".into(),
                    };
                    format!("store gets node {node}'s write for claim {claim}: {write}")
                }
                Some(Msg::Complete { claim, head: h }) => {
                    format!("store gets claim {claim}'s completion of {}", head(h))
                }
                Some(Msg::Committed {
                    at, claim, written, ..
                }) => {
                    let node = at.node;
                    let written = match written {
                        Written::Claimed(h, _) => format!("claimed {}", head(h)),
                        Written::Appended(h, _) => format!("appended, now {}", head(h)),
                        Written::Held(log) => format!("held by {}", head(&log.head)),
                        Written::TakenOver(h) => format!("taken over as {}", head(h)),
                        Written::Fenced => "fenced".into(),
                        Written::Nothing => "nothing".into(),
                    };
                    format!("node {node} hears for claim {claim}: {written}")
                }
                Some(Msg::Callback { delivery, .. }) => format!("receiver gets {delivery}"),
                Some(Msg::ActionsDone { at, claim, .. }) => format!(
                    "node {}'s actions for claim {claim} ran ({})",
                    at.node,
                    if *ok {
                        "delivered"
                    } else {
                        "receiver down: queued"
                    }
                ),
                Some(Msg::Offered {
                    at, claim, answer, ..
                }) => format!(
                    "node {}'s claim {claim} hears its subject's {answer:?}",
                    at.node
                ),
                Some(Msg::WaitOver { at, claim, .. }) => format!(
                    "a waiter's deadline passes at node {}'s claim {claim}",
                    at.node
                ),
                Some(Msg::Asked { node, claim }) => {
                    format!("node {node} is asked for claim {claim}")
                }
                Some(Msg::Answered { node, claim }) => {
                    format!("node {node} hears claim {claim} answered")
                }
                Some(Msg::Reread { at, claim }) => {
                    format!("node {} reads claim {claim} again", at.node)
                }
                None => "nothing".into(),
            },
            Action::Retry(n) => match self.deliveries.get(*n) {
                Some(d) => format!("the retry worker makes {}", d.id),
                None => "nothing".into(),
            },
            Action::Crash(n) => format!("node {n} crashes"),
            Action::Stall(n) => format!("node {n} stalls past its heartbeat"),
            Action::Wake(n) => format!("node {n} wakes"),
            Action::TimeOut => "in_flight_timeout passes".into(),
        }
    }
}

/// A fixed order for values without one (the hasher's keys are fixed).
fn hash_of<T: Hash>(value: &T) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

fn fold(events: &[ClaimEvent]) -> Option<Phase> {
    events
        .iter()
        .cloned()
        .try_fold(Phase::Free, |phase, event| phase.apply(event))
        .ok()
}

fn head_of(id: &ClaimId, row: &Row) -> LogHead {
    LogHead {
        id: id.clone(),
        generation: row.current.generation,
        expires_at_ms: row.current.expires_at_ms,
        next: row.current.writes,
    }
}

/// The decision a claim of key `key` makes at `generation`: its id and its callback's id and
/// bytes.
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
            key: None,
            token: None,
        }],
        trace: None,
    }
}

/// The decision id a response's bytes name.
fn decision_of(body: &[u8]) -> Option<&[u8]> {
    let at = body.windows(4).position(|w| w == b"dec_")?;
    let end = body[at..].iter().position(|&b| b == b'"')?;
    Some(&body[at..at + end])
}

impl ClaimModel {
    /// `scenario` as it runs, within `bounds`; `sabotage` breaks one rule.
    pub fn new(scenario: Scenario, bounds: Bounds, sabotage: Option<Sabotage>) -> Self {
        let mut settings = Settings::default();
        settings.idempotency.key_ttl = match scenario {
            Scenario::Expiring => EXPIRES_AT_ONCE,
            _ => WINDOW,
        };
        settings.idempotency.in_flight_timeout = IN_FLIGHT_TIMEOUT;
        let playbook = Playbook {
            decision: Verdict::Deny,
            actions: vec![Callback::callback("lock_account", "http://receiver/lock")],
            once_per_subject: (scenario == Scenario::Subject).then_some(WINDOW),
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
                Scenario::Queued => By::Event {
                    source: "okta",
                    id: &name,
                },
                Scenario::Waiting => By::Request {
                    key: Some(&name),
                    body: &body,
                    wait: Some(WAIT),
                },
                Scenario::Inline | Scenario::Subject | Scenario::Expiring => By::Request {
                    key: Some(&name),
                    body: &body,
                    wait: None,
                },
            };
            let chosen = claimed(&digester, &settings, "acme", &signal, &playbook, &by)
                .unwrap_or_else(|| unreachable!("every signal of the model is claimed"));
            claims.push(chosen.id);
            signals.push(Claimed {
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

    /// What node `node`'s cores read.
    fn context(&self, s: &State, node: usize) -> Context {
        Context {
            settings: self.settings.clone(),
            holder: s.nodes[node].epoch,
            sabotage: match self.sabotage {
                Some(Sabotage::AnswerBeforeRecoveryPoint) => {
                    Some(CoreSabotage::AnswerBeforeRecoveryPoint)
                }
                Some(Sabotage::ReplaceOnExpiry) => Some(CoreSabotage::ReplaceOnExpiry),
                _ => None,
            },
        }
    }

    fn fencing(&self) -> Fencing {
        match self.sabotage {
            Some(Sabotage::NoFencing) => Fencing::Off,
            _ => Fencing::On,
        }
    }

    /// The actor of claim `claim` on `node`, started from the store if the node has none (as
    /// the claim actor's `pre_start` does); `None` if its log does not fold.
    fn start(&self, s: &mut State, node: usize, claim: usize) -> Option<At> {
        let n = &mut s.nodes[node];
        if n.claims[claim].is_none() {
            let log = s.rows[claim].as_ref().map(|row| ClaimLog {
                events: row.events.clone(),
                head: head_of(&self.claims[claim], row),
            });
            let core = Core::new(self.claims[claim].clone(), log).ok()?;
            n.lives += 1;
            n.claims[claim] = Some(Live {
                life: n.lives,
                core,
            });
        }
        let life = n.claims[claim].as_ref()?.life;
        Some(At {
            node,
            epoch: n.epoch,
            life,
        })
    }

    /// Whether `at` is the actor of claim `claim` now: a message for an actor that stopped, or
    /// for an incarnation that crashed, is lost.
    fn alive(s: &State, at: At, claim: usize) -> bool {
        let n = &s.nodes[at.node];
        n.epoch == at.epoch && n.claims[claim].as_ref().is_some_and(|l| l.life == at.life)
    }

    /// Hands `input` to the actor `at` of claim `claim` and carries out its effects.
    fn drive(
        &self,
        s: &mut State,
        at: At,
        claim: usize,
        input: impl FnOnce(&mut Core<Port>, &Context, u64, &mut Effects<Port>),
    ) {
        let (cx, now) = (self.context(s, at.node), s.now());
        let mut out = Vec::new();
        let Some(live) = s.nodes[at.node].claims[claim].as_mut() else {
            return;
        };
        input(&mut live.core, &cx, now, &mut out);
        self.carry_out(s, at, claim, out);
    }

    /// Carries out a core's effects as the claim actor does.
    fn carry_out(&self, s: &mut State, at: At, claim: usize, out: Effects<Port>) {
        let mut stop = false;
        for effect in out {
            match effect {
                Effect::Commit { generation, unit } => {
                    if matches!(unit.claim_write(), Some(ClaimWrite::Start(..))) {
                        s.claims_made += 1;
                    }
                    s.net.push(Msg::Commit {
                        at,
                        claim,
                        generation,
                        unit,
                    })
                }
                Effect::Complete(head) => s.net.push(Msg::Complete { claim, head }),
                Effect::RunActions {
                    generation,
                    decision,
                    taken_over,
                } => {
                    for d in &decision.deliveries {
                        s.net.push(Msg::Callback {
                            delivery: d.id.clone(),
                            body: d.body.clone(),
                        });
                    }
                    s.net.push(Msg::ActionsDone {
                        at,
                        claim,
                        generation,
                        taken_over,
                    });
                }
                Effect::Offer { generation, offer } => {
                    if let Some(to) = self.claims.iter().position(|c| *c == offer.to) {
                        s.net.push(Msg::Request {
                            node: at.node,
                            claim: to,
                            port: Port::Offer {
                                at,
                                claim,
                                generation,
                            },
                            request: offer.request,
                            offered: Some(offer.decision),
                        });
                    }
                }
                Effect::Reply(Port::Client { key }, reply) => s.answer(key, Answer::of(&reply)),
                Effect::Reply(
                    Port::Offer {
                        at,
                        claim,
                        generation,
                    },
                    reply,
                ) => s.net.push(Msg::Offered {
                    at,
                    claim,
                    generation,
                    answer: Answer::of(&reply),
                }),
                Effect::StartTimer { waiter, wait } => {
                    let after = (wait >= IN_FLIGHT_TIMEOUT).then_some(s.timeouts);
                    s.net.push(Msg::WaitOver {
                        at,
                        claim,
                        waiter,
                        after,
                    })
                }
                Effect::AskHolder(holder) => {
                    if let Some(node) = s.nodes.iter().position(|n| n.epoch == holder) {
                        s.net.push(Msg::Asked { node, claim });
                    }
                }
                Effect::AnnounceAnswer => announce(s, at.node, claim),
                Effect::Reread => s.net.push(Msg::Reread { at, claim }),
                // The retry worker is always ready (see `Action::Retry`); counts, logs and
                // failpoints change nothing here.
                // Made within the request's step (see `Msg::Request`).
                Effect::Decide { .. }
                | Effect::WakeRetries
                | Effect::Count(_)
                | Effect::TookOver
                | Effect::Failpoint(_) => {}
                Effect::Stop(_) => stop = true,
            }
        }
        // The actor stops: its memory goes, the next request starts another from the store.
        if stop && Self::alive(s, at, claim) {
            s.nodes[at.node].claims[claim] = None;
        }
    }

    /// News of a claim reaches `node`: its actor there hears it, or, with none running, what
    /// the core says the news leads to is carried out.
    fn hear(&self, s: &mut State, node: usize, claim: usize, heard: Heard) {
        match self.running(s, node, claim) {
            Some(at) => self.drive(s, at, claim, |core, _, _, out| core.hear(heard, out)),
            None => {
                if let Some(Effect::<Port>::AnnounceAnswer) = heard.without_actor() {
                    announce(s, node, claim);
                }
            }
        }
    }

    /// A unit reaches the store, which decides it by `store::rule`; what it came to.
    fn store(&self, s: &mut State, epoch: u64, claim: usize, unit: &Unit) -> Written {
        let fencing = self.fencing();
        let current = s.rows[claim].as_ref().map(|r| r.current);
        let id = &self.claims[claim];
        let held = |s: &State| match &s.rows[claim] {
            Some(row) => Written::Held(ClaimLog {
                events: row.events.clone(),
                head: head_of(id, row),
            }),
            None => Written::Fenced,
        };
        let written = match unit.claim_write() {
            None => Written::Nothing,
            Some(ClaimWrite::Start(_, events)) => {
                let Some(ClaimEvent::Claimed(c)) = events.first() else {
                    return Written::Fenced;
                };
                let in_flight_timeout_ms = match self.sabotage {
                    Some(Sabotage::ReplaceOnExpiry) => 0,
                    _ => IN_FLIGHT_TIMEOUT.as_millis() as u64,
                };
                match rule::may_start(
                    current.as_ref(),
                    c.claimed_at_ms,
                    in_flight_timeout_ms,
                    fencing,
                ) {
                    true => {
                        let row = Row {
                            current: Current {
                                generation: c.claimed_at_ms,
                                expires_at_ms: c.expires_at_ms,
                                writes: 1,
                                completed: false,
                                claimed_at_ms: c.claimed_at_ms,
                            },
                            holder: c.holder,
                            timed_out: false,
                            events: events.clone(),
                        };
                        let head = head_of(id, &row);
                        s.rows[claim] = Some(row);
                        Written::Claimed(head, events.clone())
                    }
                    false => held(s),
                }
            }
            Some(ClaimWrite::Append(head, events)) => {
                let granted = rule::may_append(current.as_ref(), head, fencing);
                match s.rows[claim].as_mut() {
                    Some(row) if granted => {
                        row.events.extend(events.iter().cloned());
                        row.current.writes += 1;
                        let next = LogHead {
                            next: head.next + 1,
                            ..head.clone()
                        };
                        Written::Appended(next, events.clone())
                    }
                    _ => Written::Fenced,
                }
            }
            Some(ClaimWrite::TakeOver(head)) => {
                let gone = s.rows[claim].as_ref().is_some_and(|row| s.holder_gone(row));
                let granted = rule::may_take_over(current.as_ref(), head, gone, fencing);
                match s.rows[claim].as_mut() {
                    Some(row) if granted => {
                        row.current.generation += 1;
                        row.holder = epoch;
                        row.timed_out = false;
                        Written::TakenOver(LogHead {
                            generation: row.current.generation,
                            ..head.clone()
                        })
                    }
                    _ => held(s),
                }
            }
        };
        if !rule::writes_with(&written) && !unit.delivery_writes().is_empty() {
            s.refused_deliveries = true;
        }
        if rule::writes_with(&written) {
            for write in unit.delivery_writes() {
                // A new delivery that exists is left as it is (a take-over meeting an earlier
                // holder's), as both stores do.
                if write.first_seq != 0 || s.deliveries.iter().any(|d| d.id == write.id) {
                    continue;
                }
                if let Some(DeliveryEvent::Created(record)) = write.events.first() {
                    s.deliveries.push(Stored {
                        id: record.id.clone(),
                        decision: record.decision_id.clone(),
                        body: record.body.clone(),
                        due: write.to.status == DeliveryStatus::Queued,
                    });
                }
            }
        }
        written
    }

    /// The key a claim's client is, if the claim is a key's.
    fn key_of(&self, claim: usize) -> Option<usize> {
        self.signals.iter().position(|signal| signal.claim == claim)
    }

    fn deliver(&self, s: &mut State, msg: Msg, ok: bool) {
        match msg {
            Msg::Request {
                node,
                claim,
                port,
                request,
                offered,
            } => {
                // An offer from an actor that is gone went with it (a call inside the process).
                if let Port::Offer {
                    at, claim: from, ..
                } = port
                {
                    if !Self::alive(s, at, from) {
                        return;
                    }
                }
                let key = self.key_of(claim).unwrap_or(claim);
                let Some(at) = self.start(s, node, claim) else {
                    // A log that does not fold: the actor cannot start, and the request fails.
                    let failed = Reply::Failed(Arc::new(ClaimError::Subject("no log".into())));
                    let out = vec![Effect::Reply(port, failed)];
                    let nobody = At {
                        node,
                        epoch: s.nodes[node].epoch,
                        life: 0,
                    };
                    return self.carry_out(s, nobody, claim, out);
                };
                self.drive(s, at, claim, |core, cx, now, out| {
                    core.submit(cx, &request, port, now, out);
                    // The decision is made at once, as the claim actor makes one that reads no
                    // streams: the offered one, or the key's for the generation it claims.
                    if let Some(Effect::Decide { generation }) = out.last() {
                        let generation = *generation;
                        out.pop();
                        let decision = offered.unwrap_or_else(|| decision(key, generation));
                        core.decided(cx, generation, Ok(decision), out);
                    }
                });
            }
            Msg::Commit {
                at,
                claim,
                generation,
                unit,
            } => {
                let written = self.store(s, at.epoch, claim, &unit);
                s.net.push(Msg::Committed {
                    at,
                    claim,
                    generation,
                    written,
                });
            }
            Msg::Complete { claim, head } => {
                if let Some(row) = s.rows[claim].as_mut() {
                    if row.current.generation == head.generation {
                        row.current.completed = true;
                    }
                }
            }
            Msg::Committed {
                at,
                claim,
                generation,
                written,
            } if Self::alive(s, at, claim) => self.drive(s, at, claim, |core, cx, now, out| {
                core.committed(cx, generation, Ok(written), now, out)
            }),
            Msg::ActionsDone {
                at,
                claim,
                generation,
                taken_over,
            } if Self::alive(s, at, claim) => {
                let decision = s.nodes[at.node].claims[claim]
                    .as_ref()
                    .and_then(|l| l.core.phase().claim().map(|c| c.decision.clone()));
                let outcomes = decision.map_or_else(Vec::new, |d| outcomes(&d, generation, ok));
                self.drive(s, at, claim, |core, cx, _, out| {
                    core.dispatched(cx, generation, outcomes, taken_over, out)
                })
            }
            Msg::Offered {
                at,
                claim,
                generation,
                answer,
            } if Self::alive(s, at, claim) => self.drive(s, at, claim, |core, cx, _, out| {
                core.offered(cx, generation, Ok(answer.reply()), out)
            }),
            Msg::WaitOver {
                at, claim, waiter, ..
            } if Self::alive(s, at, claim) => {
                self.drive(s, at, claim, |core, _, _, out| core.wait_over(waiter, out))
            }
            Msg::Reread { at, claim } if Self::alive(s, at, claim) => {
                let Some(row) = s.rows[claim].as_ref() else {
                    return;
                };
                let log = ClaimLog {
                    events: row.events.clone(),
                    head: head_of(&self.claims[claim], row),
                };
                self.drive(s, at, claim, |core, _, _, out| core.reread(log, out))
            }
            // News of a claim goes to its actor on the node, if it has one.
            Msg::Asked { node, claim } => self.hear(s, node, claim, Heard::Asked),
            Msg::Answered { node, claim } => self.hear(s, node, claim, Heard::Answered),
            // For an actor that is gone.
            Msg::Committed { .. }
            | Msg::ActionsDone { .. }
            | Msg::Offered { .. }
            | Msg::WaitOver { .. }
            | Msg::Reread { .. } => {}
            Msg::Callback { delivery, body } => s.callbacks.push((delivery, body)),
        }
    }

    /// The actor of claim `claim` running on `node`, if there is one.
    fn running(&self, s: &State, node: usize, claim: usize) -> Option<At> {
        let n = &s.nodes[node];
        n.claims[claim].as_ref().map(|l| At {
            node,
            epoch: n.epoch,
            life: l.life,
        })
    }
}

/// Tells the nodes other than `node` that claim `claim` has a durable answer.
fn announce(s: &mut State, node: usize, claim: usize) {
    for other in (0..s.nodes.len()).filter(|&n| n != node) {
        s.net.push(Msg::Answered { node: other, claim });
    }
}

/// What `decision`'s callbacks gave, made at `generation`: delivered, or queued after a
/// refused connection.
fn outcomes(decision: &Decision, generation: u64, ok: bool) -> Vec<ActionOutcome> {
    decision
        .deliveries
        .iter()
        .map(|d| ActionOutcome {
            delivery_id: d.id.clone(),
            status: match ok {
                true => ActionStatus::Delivered,
                false => ActionStatus::Queued,
            },
            attempt: AttemptRecord {
                at_ms: generation,
                code: ok.then_some(200),
                error: (!ok).then(|| "connection refused".into()),
                latency_ms: 1,
                retry_after_ms: None,
            },
        })
        .collect()
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

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        for key in 0..self.bounds.keys {
            if s.copies_left[key] > 0 || s.wants_final_retry(key) {
                for node in 0..self.bounds.nodes {
                    actions.push(Action::Send { key, node });
                }
            }
        }
        for (n, msg) in s.net.iter().enumerate() {
            if msg.to_node().is_some_and(|node| s.nodes[node].stalled) {
                continue;
            }
            if matches!(msg, Msg::WaitOver { after: Some(t), .. } if s.timeouts <= *t) {
                continue;
            }
            actions.push(Action::Deliver { msg: n, ok: true });
            if matches!(msg, Msg::ActionsDone { .. }) {
                actions.push(Action::Deliver { msg: n, ok: false });
            }
        }
        // The retry worker attempts what is queued in the store (the delivery model checks its
        // leases; here, that it only ever sends what the store holds).
        // A queued inline attempt's retries are the delivery model's to check.
        for (n, delivery) in s.deliveries.iter().enumerate() {
            if delivery.due && self.scenario == Scenario::Queued {
                actions.push(Action::Retry(n));
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
        // whenever nothing else can happen but what waits for time (a deadline of
        // `in_flight_timeout`) while a claim is stuck in flight (fairness: time always moves
        // on).
        let waits_for_time = |m: &Msg| matches!(m, Msg::WaitOver { after: Some(_), .. });
        let stuck = s.net.iter().all(waits_for_time)
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
                let signal = &self.signals[key];
                s.net.push(Msg::Request {
                    node,
                    claim: signal.claim,
                    port: Port::Client { key },
                    request: signal.request.clone(),
                    offered: None,
                });
            }
            Action::Deliver { msg, ok } => {
                let msg = s.net.remove(msg);
                self.deliver(&mut s, msg, ok);
            }
            Action::Retry(n) => {
                let delivery = &mut s.deliveries[n];
                delivery.due = false;
                let callback = (delivery.id.clone(), delivery.body.clone());
                s.callbacks.push(callback);
            }
            Action::Crash(n) => {
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
                        Port::Client { key } => Some(*key),
                        Port::Offer { .. } => None,
                    })
                    .collect();
                node.claims = vec![None; node.claims.len()];
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
        // Keys decided again once expired: the properties of one decision per key do not hold
        // there, and the scenario has its own.
        if self.scenario == Scenario::Expiring {
            return expiring_properties();
        }
        let mut properties = vec![
            Property::always(
                "one decision per key, every answer its recorded bytes",
                |m: &ClaimModel, s: &State| {
                    (0..s.answers.len()).all(|key| {
                        let mut bodies = s.answers[key].iter().filter_map(Answer::body);
                        let Some(first) = bodies.next() else {
                            return true;
                        };
                        // An answer's bytes are the recovery point's, durable before it left.
                        let recorded = s.recorded(m.signals[key].claim);
                        recorded.is_some_and(|r| &r.body == first) && bodies.all(|b| b == first)
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
                "every callback carries its claim's one decision, the one its key answers with",
                |m: &ClaimModel, s: &State| {
                    s.callbacks.iter().all(|(delivery, body)| {
                        s.rows.iter().enumerate().any(|(claim, row)| {
                            let Some(d) = row
                                .as_ref()
                                .and_then(|row| fold(&row.events))
                                .and_then(|p| p.claim().map(|c| c.decision.clone()))
                            else {
                                return false;
                            };
                            let planned = d
                                .deliveries
                                .iter()
                                .any(|p| &p.id == delivery && &p.body == body);
                            // The subject's claim answers no client: its scenario's own
                            // property checks what the keys were answered.
                            let answered_with = m.key_of(claim).is_none_or(|key| {
                                s.answers[key]
                                    .iter()
                                    .filter_map(Answer::body)
                                    .all(|b| decision_of(b) == Some(d.id.as_bytes()))
                            });
                            planned && answered_with
                        })
                    })
                },
            ),
            // Once nothing is left to happen, every key's response is recorded, so the client's
            // next retry is answered with it (a 409 or a 500 before then is retried).
            Property::eventually(
                "every key is decided and its response recorded",
                |m: &ClaimModel, s: &State| {
                    m.signals
                        .iter()
                        .all(|signal| s.recorded(signal.claim).is_some())
                },
            ),
        ];
        // A claim in flight (inline callbacks, or an offer to the subject's claim) is what a
        // crash or a stall leaves to be taken over, and its old holder to be fenced.
        if self.scenario != Scenario::Queued {
            properties.extend(vec![
                Property::sometimes("a claim is taken over", |_, s: &State| {
                    s.rows.iter().flatten().any(|row| match row.events.first() {
                        Some(ClaimEvent::Claimed(c)) => c.claimed_at_ms != row.current.generation,
                        _ => false,
                    })
                }),
                Property::sometimes("a stale holder is fenced out", |_, s: &State| {
                    s.answers.iter().flatten().any(|a| *a == Answer::Error)
                        && s.rows.iter().flatten().any(|row| row.current.completed)
                }),
            ]);
        }
        properties.extend(match self.scenario {
            Scenario::Inline | Scenario::Expiring => vec![],
            Scenario::Waiting => vec![Property::sometimes(
                "a waiter is answered with the first request's bytes",
                |_, s: &State| {
                    s.answers
                        .iter()
                        .flatten()
                        .any(|a| matches!(a, Answer::Awaited(_)))
                },
            )],
            Scenario::Subject => vec![
                Property::always(
                    "one decision per subject: every key answered with the subject's",
                    |m: &ClaimModel, s: &State| {
                        let subject = m.claims.len() - 1;
                        let decision = s.rows[subject]
                            .as_ref()
                            .and_then(|row| fold(&row.events))
                            .and_then(|p| p.claim().map(|c| c.decision.id.clone()));
                        let is_it = |named: Option<&[u8]>| {
                            decision
                                .as_ref()
                                .is_some_and(|d| named == Some(d.as_bytes()))
                        };
                        s.answers
                            .iter()
                            .flatten()
                            .filter_map(Answer::body)
                            .all(|b| is_it(decision_of(b)))
                            && s.callbacks.iter().all(|(_, body)| is_it(Some(body)))
                    },
                ),
                Property::sometimes(
                    "a key is answered with another key's decision",
                    |_, s: &State| {
                        s.answers
                            .iter()
                            .flatten()
                            .any(|a| matches!(a, Answer::Deduplicated(_)))
                    },
                ),
            ],
            Scenario::Queued => vec![
                Property::always(
                    "a queued delivery is stored only with its durable decision",
                    |_, s: &State| {
                        s.deliveries.iter().all(|d| {
                            s.rows.iter().flatten().any(|row| {
                                matches!(
                                    fold(&row.events),
                                    Some(Phase::Completed(c, _)) if c.decision.id == d.decision
                                )
                            })
                        })
                    },
                ),
                Property::sometimes(
                    "the retry worker makes a queued callback",
                    |_, s: &State| !s.callbacks.is_empty(),
                ),
                Property::sometimes(
                    "a start that loses to the claim holding its key writes none of its deliveries",
                    |_, s: &State| s.refused_deliveries && s.deliveries.len() == 1,
                ),
            ],
        });
        properties
    }
}

/// The properties of [`Scenario::Expiring`], whose keys expire while their decisions run.
fn expiring_properties() -> Vec<Property<ClaimModel>> {
    vec![
        // With no crash or stall, only `in_flight_timeout` passing lets a running decision be
        // replaced, and its writes fenced: before that, no request fails.
        Property::always(
            "an expired claim still running keeps its key: nothing fails before in_flight_timeout",
            |_, s: &State| {
                s.timeouts > 0 || s.answers.iter().flatten().all(|a| *a != Answer::Error)
            },
        ),
        Property::always(
            "no write of a fenced-out holder is visible",
            |_, s: &State| {
                s.rows
                    .iter()
                    .flatten()
                    .all(|row| fold(&row.events).is_some())
            },
        ),
        Property::sometimes(
            "a copy meets its key's expired claim still running, and gets 409",
            |_, s: &State| {
                s.timeouts == 0
                    && s.rows.iter().flatten().all(|row| !row.current.completed)
                    && s.answers.iter().flatten().any(|a| *a == Answer::Conflict)
            },
        ),
        Property::sometimes(
            "an expired claim that completed is replaced by a new decision",
            |_, s: &State| {
                s.timeouts == 0
                    && s.rows
                        .iter()
                        .flatten()
                        .any(|row| row.current.generation > T0)
                    && s.answers
                        .iter()
                        .flatten()
                        .filter(|a| matches!(a, Answer::First(_)))
                        .count()
                        == 2
            },
        ),
    ]
}
