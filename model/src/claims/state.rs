//! The claim model's state and messages: each node's claim actors ([`IdemNode`],
//! [`LiveActor`]), the store's rows and deliveries ([`ClaimRow`], [`StoredDelivery`]), the
//! messages on their way between the nodes, the store and the receiver
//! ([`Message`], addressed to an actor's life [`At`] or to where a reply goes, [`ReplyTo`]),
//! the responses as they travel ([`Response`]), the whole system ([`State`]) and the steps the
//! checker takes from it ([`ClaimAction`]), with the bookkeeping of clients' answers and
//! retries.

use std::sync::Arc;

use idem_actors::claim::core::Core;
use idem_actors::claim::{self, ClaimError, Reply, Request};
use idem_actors::store::rule::Current;
use idem_actors::store::{LogHead, Unit, Written};
use idem_schemas::{ClaimEvent, Decision, StoredResponse};

use super::scenario::{IN_FLIGHT_TIMEOUT, T0};
use crate::hash_of;

/// Where an answer goes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ReplyTo {
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
    pub(super) node: usize,
    pub(super) epoch: u64,
    pub(super) life: u32,
}

/// A claim's actor: its life and its core.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LiveActor {
    pub(super) life: u32,
    pub(super) core: Core<ReplyTo>,
}

/// A response to a client's copy or to a claim's offer, as it travels.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Response {
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

impl Response {
    pub(super) fn of(reply: &Reply) -> Response {
        match reply {
            Reply::First(a) => Response::First(a.response.body.clone()),
            Reply::Replayed(a) => Response::Replay(a.response.body.clone()),
            Reply::Awaited(a) => Response::Awaited(a.response.body.clone()),
            Reply::Deduplicated(a) => Response::Deduplicated(a.response.body.clone()),
            Reply::InFlight => Response::Conflict,
            Reply::Mismatch => Response::Mismatch,
            Reply::Failed(_) => Response::Error,
        }
    }

    /// The reply it was (for the subject's answer, fed back to the offering claim): a subject's
    /// claim answers with the decision it holds.
    pub(super) fn reply(&self) -> Reply {
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
            Response::First(b) => Reply::First(response(b)),
            Response::Replay(b) => Reply::Replayed(response(b)),
            Response::Awaited(b) => Reply::Awaited(response(b)),
            Response::Deduplicated(b) => Reply::Deduplicated(response(b)),
            Response::Conflict => Reply::InFlight,
            Response::Mismatch => Reply::Mismatch,
            Response::Error => Reply::Failed(Arc::new(ClaimError::Subject("failed".into()))),
        }
    }

    /// The response's bytes, if it carries one.
    pub(super) fn body(&self) -> Option<&Vec<u8>> {
        match self {
            Response::First(b)
            | Response::Replay(b)
            | Response::Awaited(b)
            | Response::Deduplicated(b) => Some(b),
            Response::Conflict | Response::Mismatch | Response::Error => None,
        }
    }
}

/// An idem node.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdemNode {
    /// This incarnation's epoch (the holder of the claims it makes).
    pub(super) epoch: u64,
    /// Stopped (SIGSTOP): its heartbeat has expired, and nothing it holds moves.
    pub(super) stalled: bool,
    /// Its claims' actors, by claim: its memory, lost in a crash.
    pub(super) claims: Vec<Option<LiveActor>>,
    /// Actors started on it so far.
    pub(super) lives: u32,
}

/// A claim's row in the store: its current generation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClaimRow {
    pub(super) current: Current,
    pub(super) holder: u64,
    /// Its holder has held it for `in_flight_timeout`, by the store's clock.
    pub(super) timed_out: bool,
    pub(super) events: Vec<ClaimEvent>,
}

/// A delivery in the store.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StoredDelivery {
    pub(super) id: String,
    pub(super) decision: String,
    pub(super) body: Vec<u8>,
    /// Queued for the retry worker, and not attempted by it yet.
    pub(super) due: bool,
}

/// A message on its way.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Message {
    /// A request to a node's claim: a client's copy, or a claim's offer to its subject's.
    Request {
        node: usize,
        claim: usize,
        port: ReplyTo,
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
        answer: Response,
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

impl Message {
    /// The node it is for, if it is for one (a stalled node takes none).
    pub(super) fn to_node(&self) -> Option<usize> {
        match self {
            Message::Request { node, .. }
            | Message::Asked { node, .. }
            | Message::Answered { node, .. } => Some(*node),
            Message::Committed { at, .. }
            | Message::ActionsDone { at, .. }
            | Message::Offered { at, .. }
            | Message::WaitOver { at, .. }
            | Message::Reread { at, .. } => Some(at.node),
            Message::Commit { .. } | Message::Complete { .. } | Message::Callback { .. } => None,
        }
    }
}

/// The whole system.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    pub nodes: Vec<IdemNode>,
    /// The store's claims, by claim.
    pub rows: Vec<Option<ClaimRow>>,
    /// The store's deliveries.
    pub deliveries: Vec<StoredDelivery>,
    pub net: Vec<Message>,
    /// What each key's client was answered.
    pub answers: Vec<Vec<Response>>,
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
pub enum ClaimAction {
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
    pub(super) fn now(&self) -> u64 {
        T0 + self.claims_made + self.timeouts as u64 * IN_FLIGHT_TIMEOUT.as_millis() as u64
    }

    /// One form for states that differ only in order: messages in flight are a multiset, and
    /// what clients and the receiver saw are sets (which copy saw it does not matter).
    pub(super) fn normalize(&mut self) {
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
    pub(super) fn wants_final_retry(&self, key: usize) -> bool {
        let answered = self.answers[key].iter().any(|a| a.body().is_some());
        let client = ReplyTo::Client { key };
        let on_its_way = self
            .net
            .iter()
            .any(|m| matches!(m, Message::Request { port, .. } if *port == client));
        let waiting = self
            .nodes
            .iter()
            .flat_map(|n| n.claims.iter().flatten())
            .any(|l| l.core.waiting().any(|p| *p == client));
        self.final_retries[key] > 0 && !answered && !on_its_way && !waiting
    }

    pub(super) fn answer(&mut self, key: usize, answer: Response) {
        if answer == Response::Error {
            // The client retries an error.
            self.copies_left[key] += 1;
        }
        self.answers[key].push(answer);
    }
}

/// The decision id a response's bytes name.
pub(super) fn decision_of(body: &[u8]) -> Option<&[u8]> {
    let at = body.windows(4).position(|w| w == b"dec_")?;
    let end = body[at..].iter().position(|&b| b == b'"')?;
    Some(&body[at..at + end])
}

/// The rule a response's bytes name, if they name one.
pub(super) fn rule_of(body: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    value.get("rule")?.as_str().map(str::to_string)
}
