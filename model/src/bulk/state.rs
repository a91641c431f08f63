//! What the bulk model's system is: the store's delivery logs and the bulk claim's row
//! ([`BulkRow`]), the copies of the request being handled and how far each has got
//! ([`HandledCopy`], [`Stage`]), what the client was answered ([`BulkAnswer`]), the whole
//! ([`BulkState`]) and the steps the checker takes from it ([`BulkAction`]).

use idem_actors::delivery::state::DeliveryState;
use idem_actors::signals::bulk::{self, BulkReply, Held, Matches, Plan};
use idem_actors::store::rule::Current;
use idem_actors::store::{ClaimLog, LogHead};
use idem_schemas::{AttemptRecord, ClaimEvent, DeliveryEvent, DeliveryStatus, Redelivered};

use super::DELIVERIES;
use crate::hash_of;

/// The bulk claim's row in the store.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BulkRow {
    pub(super) current: Current,
    pub(super) holder: u64,
    /// Since when its holder holds it (the claim, or the last take-over).
    pub(super) held_since: u64,
    pub(super) events: Vec<ClaimEvent>,
}

/// A copy of the request, handled by a node.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HandledCopy {
    pub(super) node: usize,
    /// The node's epoch when the copy arrived: the holder of the claim it makes or takes over.
    pub(super) epoch: u64,
    pub(super) stage: Stage,
}

/// How far a copy has got.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Stage {
    /// It has arrived: next, it reads the claim, scans and claims.
    Arrived,
    /// Its start found the claim held by a holder that looks gone: next, it takes it over, from
    /// the log it read.
    TakingOver(ClaimLog),
    /// It holds the claim at `head`: the deliveries it has yet to redeliver, the claim's time,
    /// how many it has done and how many count.
    Holding {
        head: LogHead,
        left: Vec<String>,
        since_ms: Option<u64>,
        done: u8,
        counted: u64,
    },
}

/// What the client was answered.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum BulkAnswer {
    First(Vec<u8>),
    Replayed(Vec<u8>),
    /// 409.
    InFlight,
    /// 422.
    Mismatch,
    /// The connection broke (its node crashed): retried.
    Error,
}

impl BulkAnswer {
    pub(super) fn of(reply: BulkReply) -> BulkAnswer {
        match reply {
            BulkReply::First(r) => BulkAnswer::First(r.body),
            BulkReply::Replayed(r) => BulkAnswer::Replayed(r.body),
            BulkReply::InFlight => BulkAnswer::InFlight,
            BulkReply::Mismatch => BulkAnswer::Mismatch,
        }
    }

    /// It, in a few words.
    pub(super) fn name(&self) -> String {
        let count = |body: &Vec<u8>| count(body).map_or("?".into(), |n| n.to_string());
        match self {
            BulkAnswer::First(body) => format!("202 (redelivered {})", count(body)),
            BulkAnswer::Replayed(body) => format!("a replay of 202 (redelivered {})", count(body)),
            BulkAnswer::InFlight => "409".into(),
            BulkAnswer::Mismatch => "422".into(),
            BulkAnswer::Error => "an error".into(),
        }
    }

    /// The count its bytes say, if it carries them.
    pub(super) fn count(&self) -> Option<u64> {
        match self {
            BulkAnswer::First(body) | BulkAnswer::Replayed(body) => count(body),
            BulkAnswer::InFlight | BulkAnswer::Mismatch | BulkAnswer::Error => None,
        }
    }
}

/// The count a response's bytes say (none if they do not parse: never equal to a size).
pub(super) fn count(body: &[u8]) -> Option<u64> {
    serde_json::from_slice::<Redelivered>(body)
        .ok()
        .map(|r| r.redelivered)
}

/// The whole system.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BulkState {
    /// The store's delivery logs, as [`DELIVERIES`].
    pub deliveries: Vec<Vec<DeliveryEvent>>,
    /// The store's row of the request's claim.
    pub row: Option<BulkRow>,
    /// Each node's epoch (a crash starts another).
    pub epochs: Vec<u64>,
    /// The copies being handled.
    pub runs: Vec<HandledCopy>,
    /// What the client was answered (a set).
    pub answers: Vec<BulkAnswer>,
    pub copies_left: u8,
    pub crashes_left: u8,
    pub stalls_left: u8,
    /// The store's clock.
    pub now: u64,
    /// How many times the request redelivered each delivery.
    pub redelivered: Vec<u8>,
    /// A node crashed while it held the request with some of its deliveries done, some not.
    pub crashed_part_way: bool,
    /// The claim was taken over from a holder that still ran.
    pub taken_from_running: bool,
}

/// A step.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum BulkAction {
    /// The client sends a copy to the node.
    Send(usize),
    /// The copy at this place reads the claim, and scans and claims unless the claim answers it.
    Claim(usize),
    /// The copy at this place takes the claim over.
    TakeOver(usize),
    /// The copy at this place redelivers one of its deliveries, or counts it.
    Redeliver {
        run: usize,
        delivery: String,
    },
    /// The copy at this place, with all its deliveries done, records its answer.
    Record(usize),
    /// The series of attempts of the queued delivery at this place ends failed.
    Fail(usize),
    Crash(usize),
    /// `in_flight_timeout` passes while the claim's holder still runs: its claim may be taken
    /// over, and it runs on.
    Stall,
}

pub(super) fn fold(log: &[DeliveryEvent]) -> Option<DeliveryState> {
    DeliveryState::fold(log.to_vec()).ok()
}

pub(super) fn attempt(at_ms: u64, code: u16) -> AttemptRecord {
    AttemptRecord {
        at_ms,
        code: Some(code),
        error: None,
        latency_ms: 1,
        retry_after_ms: None,
    }
}

impl BulkRow {
    /// The deliveries its claim fixed.
    pub(super) fn fixed(&self) -> Vec<String> {
        match bulk::plan(&self.events, Held::Claimed, None) {
            Ok(Plan {
                matches: Matches::Fixed(ids),
                ..
            }) => ids,
            _ => Vec::new(),
        }
    }

    /// The answer it records, once it has one.
    pub(super) fn response(&self) -> Option<&[u8]> {
        self.events.iter().find_map(|e| match e {
            ClaimEvent::Dispatched { response, .. } => Some(&response.body[..]),
            _ => None,
        })
    }

    pub(super) fn taken_over(&self) -> bool {
        self.current.generation != self.current.claimed_at_ms
    }
}

impl BulkState {
    pub(super) fn status(&self, delivery: usize) -> Option<DeliveryStatus> {
        fold(&self.deliveries[delivery]).map(|d| d.placement.status)
    }

    pub(super) fn index(delivery: &str) -> Option<usize> {
        DELIVERIES.iter().position(|(id, _, _)| *id == delivery)
    }

    pub(super) fn normalize(&mut self) {
        self.runs.sort_by_cached_key(hash_of);
        self.answers.sort_by_cached_key(hash_of);
        self.answers.dedup();
    }
}
