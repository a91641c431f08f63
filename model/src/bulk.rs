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

use std::hash::{Hash, Hasher};
use std::time::Duration;

use idem_actors::claim::phase::{Holder, Invariant};
use idem_actors::delivery::state::{DeliveryState, Redelivery};
use idem_actors::record::{self, Decided};
pub use idem_actors::signals::bulk::BulkSabotage;
use idem_actors::signals::bulk::{self, BulkReply, Held, Matches, Plan, RedeliverFilter};
use idem_actors::store::rule::{self, Current, Fencing};
use idem_actors::store::ClaimWrite;
use idem_actors::store::{ClaimId, ClaimLog, LogHead};
use idem_actors::Settings;
use idem_schemas::{
    AttemptRecord, ClaimEvent, DeliveryEvent, DeliveryRecord, DeliveryStatus, NextStep, Redelivered,
};
use stateright::{Model, Property};

/// The store's clock at the start (unix milliseconds); it moves with each claim and redelivery.
const T0: u64 = 1_000_000;
/// `key_ttl`: longer than any run of the model.
const KEY_TTL: Duration = Duration::from_secs(86_400);
/// `in_flight_timeout`: it passes only when a holder stalls ([`BulkAction::Stall`]).
const IN_FLIGHT_TIMEOUT: Duration = Duration::from_secs(30);
const TENANT: &str = "acme";
/// The deliveries: id, playbook action, and whether a series of attempts is still running.
/// `msg_b` was redelivered once before the request, and failed again.
const DELIVERIES: [(&str, &str, bool); 4] = [
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

/// The bulk claim's row in the store.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Row {
    current: Current,
    holder: u64,
    /// Since when its holder holds it (the claim, or the last take-over).
    held_since: u64,
    events: Vec<ClaimEvent>,
}

/// A copy of the request, handled by a node.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Run {
    node: usize,
    /// The node's epoch when the copy arrived: the holder of the claim it makes or takes over.
    epoch: u64,
    stage: Stage,
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
pub enum Answer {
    First(Vec<u8>),
    Replayed(Vec<u8>),
    /// 409.
    InFlight,
    /// 422.
    Mismatch,
    /// The connection broke (its node crashed): retried.
    Error,
}

impl Answer {
    fn of(reply: BulkReply) -> Answer {
        match reply {
            BulkReply::First(r) => Answer::First(r.body),
            BulkReply::Replayed(r) => Answer::Replayed(r.body),
            BulkReply::InFlight => Answer::InFlight,
            BulkReply::Mismatch => Answer::Mismatch,
        }
    }

    /// It, in a few words.
    fn name(&self) -> String {
        let count = |body: &Vec<u8>| count(body).map_or("?".into(), |n| n.to_string());
        match self {
            Answer::First(body) => format!("202 (redelivered {})", count(body)),
            Answer::Replayed(body) => format!("a replay of 202 (redelivered {})", count(body)),
            Answer::InFlight => "409".into(),
            Answer::Mismatch => "422".into(),
            Answer::Error => "an error".into(),
        }
    }

    /// The count its bytes say, if it carries them.
    fn count(&self) -> Option<u64> {
        match self {
            Answer::First(body) | Answer::Replayed(body) => count(body),
            Answer::InFlight | Answer::Mismatch | Answer::Error => None,
        }
    }
}

/// The count a response's bytes say (none if they do not parse: never equal to a size).
fn count(body: &[u8]) -> Option<u64> {
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
    pub row: Option<Row>,
    /// Each node's epoch (a crash starts another).
    pub epochs: Vec<u64>,
    /// The copies being handled.
    pub runs: Vec<Run>,
    /// What the client was answered (a set).
    pub answers: Vec<Answer>,
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

/// A fixed order for values without one.
fn hash_of<T: Hash>(value: &T) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

fn fold(log: &[DeliveryEvent]) -> Option<DeliveryState> {
    DeliveryState::fold(log.to_vec()).ok()
}

fn attempt(at_ms: u64, code: u16) -> AttemptRecord {
    AttemptRecord {
        at_ms,
        code: Some(code),
        error: None,
        latency_ms: 1,
        retry_after_ms: None,
    }
}

fn head_of(id: &ClaimId, row: &Row) -> LogHead {
    LogHead {
        id: id.clone(),
        generation: row.current.generation,
        expires_at_ms: row.current.expires_at_ms,
        next: row.current.writes,
    }
}

impl Row {
    /// The deliveries its claim fixed.
    fn fixed(&self) -> Vec<String> {
        match bulk::plan(&self.events, Held::Claimed, None) {
            Ok(Plan {
                matches: Matches::Fixed(ids),
                ..
            }) => ids,
            _ => Vec::new(),
        }
    }

    /// The answer it records, once it has one.
    fn response(&self) -> Option<&[u8]> {
        self.events.iter().find_map(|e| match e {
            ClaimEvent::Dispatched { response, .. } => Some(&response.body[..]),
            _ => None,
        })
    }

    fn taken_over(&self) -> bool {
        self.current.generation != self.current.claimed_at_ms
    }
}

impl BulkState {
    fn status(&self, delivery: usize) -> Option<DeliveryStatus> {
        fold(&self.deliveries[delivery]).map(|d| d.placement.status)
    }

    fn index(delivery: &str) -> Option<usize> {
        DELIVERIES.iter().position(|(id, _, _)| *id == delivery)
    }

    fn normalize(&mut self) {
        self.runs.sort_by_cached_key(hash_of);
        self.answers.sort_by_cached_key(hash_of);
        self.answers.dedup();
    }
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

    /// Node `node`'s copy at `run`, in words.
    fn who(s: &BulkState, run: usize) -> String {
        format!("node {}'s copy", s.runs[run].node)
    }

    /// The copy at `run` is answered, and is done; what happened.
    fn finish(s: &mut BulkState, run: usize, answer: Answer) -> String {
        let said = format!("{} is answered {}", Self::who(s, run), answer.name());
        s.runs.remove(run);
        s.answers.push(answer);
        said
    }

    /// The copy at `run` holds the claim at `head`, and redelivers what `plan` says; what.
    fn hold(
        &self,
        s: &mut BulkState,
        run: usize,
        head: LogHead,
        plan: Result<Plan, Invariant>,
    ) -> String {
        let Ok(Plan { matches, since_ms }) = plan else {
            return Self::finish(s, run, Answer::Error);
        };
        let left = match matches {
            Matches::Fixed(ids) => ids,
            Matches::Rescan => self.matching(s),
        };
        let said = format!("to redeliver {left:?}");
        s.runs[run].stage = Stage::Holding {
            head,
            left,
            since_ms,
            done: 0,
            counted: 0,
        };
        said
    }

    /// The copy at `run` arrived: as `Engine::redeliver_bulk`, it reads the claim (and is
    /// answered from it unless its holder looks gone), scans and starts a claim of what it
    /// matched. The scan and the start are one step: what a scan finds before the start is what
    /// the start fixes either way.
    fn claim(&self, s: &mut BulkState, run: usize) -> String {
        if let Some(reply) = self.answer(s, run) {
            return Self::finish(s, run, Answer::of(reply));
        }
        let ids = self.matching(s);
        let epoch = s.runs[run].epoch;
        let now = s.now + 1;
        let claim = bulk::claim(TENANT, &ids, self.fingerprint, epoch, now, KEY_TTL);
        let current = s.row.as_ref().map(|r| r.current);
        let ift = IN_FLIGHT_TIMEOUT.as_millis() as u64;
        if rule::may_start(current.as_ref(), now, ift, Fencing::On) {
            s.now = now;
            let row = Row {
                current: Current {
                    generation: now,
                    expires_at_ms: claim.expires_at_ms,
                    writes: 1,
                    completed: false,
                    claimed_at_ms: now,
                },
                holder: epoch,
                held_since: now,
                events: vec![ClaimEvent::Claimed(claim)],
            };
            let head = head_of(&self.id, &row);
            let plan = bulk::plan(&row.events, Held::Claimed, self.sabotage);
            s.row = Some(row);
            self.hold(s, run, head, plan);
            return format!("{} claims the request, fixing {ids:?}", Self::who(s, run));
        }
        // Held: answered from the claim, or it takes the claim over.
        let Some(row) = s.row.as_ref() else {
            return "nothing".into();
        };
        let log = ClaimLog {
            events: row.events.clone(),
            head: head_of(&self.id, row),
        };
        match self.answer(s, run) {
            Some(reply) => Self::finish(s, run, Answer::of(reply)),
            None => {
                s.runs[run].stage = Stage::TakingOver(log);
                let who = Self::who(s, run);
                format!("{who} finds the claim held by another holder, which may be gone")
            }
        }
    }

    /// The copy at `run` takes the claim over from the log it read; the store grants it once
    /// the holder is gone (no node runs its epoch) or has held it for `in_flight_timeout`.
    fn take_over(&self, s: &mut BulkState, run: usize) -> String {
        let Stage::TakingOver(log) = s.runs[run].stage.clone() else {
            return "nothing".into();
        };
        let epoch = s.runs[run].epoch;
        let ift = IN_FLIGHT_TIMEOUT.as_millis() as u64;
        let gone = s
            .row
            .as_ref()
            .is_some_and(|r| !s.epochs.contains(&r.holder) || s.now >= r.held_since + ift);
        let current = s.row.as_ref().map(|r| r.current);
        match s.row.as_mut() {
            Some(row) if rule::may_take_over(current.as_ref(), &log.head, gone, Fencing::On) => {
                row.current.generation += 1;
                row.holder = epoch;
                row.held_since = s.now;
                let running = |r: &Run| matches!(r.stage, Stage::Holding { .. });
                s.taken_from_running |= s.runs.iter().any(running);
                let head = LogHead {
                    generation: row.current.generation,
                    ..log.head.clone()
                };
                let plan = bulk::plan(&log.events, Held::TakenOver, self.sabotage);
                let held = self.hold(s, run, head, plan);
                format!("{} takes the claim over, {held}", Self::who(s, run))
            }
            _ => {
                let reply = self.answer(s, run).unwrap_or(BulkReply::InFlight);
                let answered = Self::finish(s, run, Answer::of(reply));
                format!("{answered}: its take-over is refused")
            }
        }
    }

    /// The copy at `run` asks `delivery`'s redelivery with the claim's time, and its actor does
    /// what `DeliveryState::redelivery` says, in one step (the actor's write is fenced by
    /// whatever was written since it read the log): one redelivered since the claim counts, one
    /// failed or dead is redelivered and counts, any other is refused and does not.
    fn redeliver(&self, s: &mut BulkState, run: usize, delivery: &str) -> String {
        let who = Self::who(s, run);
        let Stage::Holding {
            left,
            since_ms,
            done,
            counted,
            ..
        } = &mut s.runs[run].stage
        else {
            return "nothing".into();
        };
        left.retain(|id| id != delivery);
        *done += 1;
        let Some(n) = BulkState::index(delivery) else {
            return format!("{who} finds no {delivery}");
        };
        let Some(state) = fold(&s.deliveries[n]) else {
            return format!("{who} finds {delivery}'s log malformed");
        };
        match state.redelivery(*since_ms, s.now + 1) {
            Redelivery::Done => {
                *counted += 1;
                format!("{who} counts {delivery}, redelivered since the claim")
            }
            Redelivery::Record(event, _) => {
                *counted += 1;
                if let DeliveryEvent::Redelivered { at_ms } = event {
                    s.now = at_ms;
                }
                s.deliveries[n].push(event);
                s.redelivered[n] += 1;
                format!("{who} redelivers {delivery}")
            }
            Redelivery::NotFinal(status) => {
                format!("{who} is refused {delivery}'s redelivery: {status:?}")
            }
            Redelivery::Erased => format!("{who} is refused {delivery}'s redelivery: erased"),
        }
    }

    /// The copy at `run` records its answer in the claim: its first answer once appended, as
    /// `Engine::redeliver_bulk` answers.
    fn record(&self, s: &mut BulkState, run: usize) -> String {
        let Stage::Holding { head, counted, .. } = s.runs[run].stage.clone() else {
            return "nothing".into();
        };
        let Ok(response) = record::redelivered(counted) else {
            return Self::finish(s, run, Answer::Error);
        };
        let decided = Decided::Redelivered {
            head: head.clone(),
            response: response.clone(),
        };
        let Ok(writes) = record::writes(decided, &self.settings) else {
            return Self::finish(s, run, Answer::Error);
        };
        let current = s.row.as_ref().map(|r| r.current);
        match s.row.as_mut() {
            Some(row) if rule::may_append(current.as_ref(), &head, Fencing::On) => {
                if let Some(ClaimWrite::Append(_, events)) = writes.unit.claim_write() {
                    row.events.extend(events.iter().cloned());
                }
                row.current.writes += 1;
                row.current.completed = row.events.last() == Some(&ClaimEvent::Completed);
                let answered = Self::finish(s, run, Answer::First(response.body));
                format!("{answered}, recorded")
            }
            _ => {
                let theirs = self
                    .answer(s, run)
                    .filter(|reply| *reply != BulkReply::InFlight)
                    .unwrap_or(BulkReply::First(response));
                let answered = Self::finish(s, run, Answer::of(theirs));
                format!("{answered}: its record is fenced")
            }
        }
    }

    /// Takes `action` in `s`; what happened, in a few words.
    fn apply(&self, s: &mut BulkState, action: &BulkAction) -> String {
        match *action {
            BulkAction::Send(node) => {
                s.copies_left -= 1;
                s.runs.push(Run {
                    node,
                    epoch: s.epochs[node],
                    stage: Stage::Arrived,
                });
                format!("the client sends the request to node {node}")
            }
            BulkAction::Claim(run) => self.claim(s, run),
            BulkAction::TakeOver(run) => self.take_over(s, run),
            BulkAction::Redeliver { run, ref delivery } => self.redeliver(s, run, delivery),
            BulkAction::Record(run) => self.record(s, run),
            BulkAction::Fail(n) => {
                s.deliveries[n].push(DeliveryEvent::Answered {
                    attempt: attempt(s.now, 410),
                    next: NextStep::Failed,
                });
                format!("{}'s series of attempts ends failed", DELIVERIES[n].0)
            }
            BulkAction::Stall => {
                s.stalls_left -= 1;
                s.now += IN_FLIGHT_TIMEOUT.as_millis() as u64;
                "the claim's holder stalls past in_flight_timeout".into()
            }
            BulkAction::Crash(node) => {
                s.crashes_left -= 1;
                s.epochs[node] += 100;
                let (lost, kept): (Vec<Run>, Vec<Run>) =
                    s.runs.drain(..).partition(|r| r.node == node);
                s.runs = kept;
                let mut part_way = false;
                for run in lost {
                    if let Stage::Holding { left, done, .. } = &run.stage {
                        part_way |= *done > 0 && !left.is_empty();
                    }
                    // The client's connection breaks, and it retries.
                    s.answers.push(Answer::Error);
                    s.copies_left += 1;
                }
                s.crashed_part_way |= part_way;
                match part_way {
                    true => format!("node {node} crashes part-way through its redeliveries"),
                    false => format!("node {node} crashes"),
                }
            }
        }
    }

    /// `action`, taken from `s`, and what it led to, in a few words.
    pub fn describe(&self, s: &BulkState, action: &BulkAction) -> String {
        self.apply(&mut s.clone(), action)
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
        let mut properties = vec![
            Property::always(
                "each delivery the claim matched is redelivered at most once by the request",
                |_, s: &BulkState| s.redelivered.iter().all(|&n| n <= 1),
            ),
            Property::always(
                "the request redelivers only what its claim matched, never one failed after it",
                |_, s: &BulkState| {
                    let fixed = s.row.as_ref().map(Row::fixed).unwrap_or_default();
                    (0..s.redelivered.len()).all(|n| {
                        s.redelivered[n] == 0 || fixed.iter().any(|id| id == DELIVERIES[n].0)
                    })
                },
            ),
            Property::always(
                "once the answer is recorded, each delivery the claim matched was redelivered since",
                |_, s: &BulkState| {
                    let Some(row) = s.row.as_ref().filter(|r| r.current.completed) else {
                        return true;
                    };
                    let since = row.current.claimed_at_ms;
                    row.fixed().iter().all(|id| {
                        BulkState::index(id).is_some_and(|n| {
                            fold(&s.deliveries[n])
                                .is_some_and(|d| d.redelivered_at_ms >= Some(since))
                        })
                    })
                },
            ),
            Property::always(
                "every answer counts what the claim matched",
                |_, s: &BulkState| {
                    let Some(row) = s.row.as_ref() else {
                        return s.answers.iter().all(|a| a.count().is_none());
                    };
                    let matched = Some(row.fixed().len() as u64);
                    row.response().is_none_or(|body| count(body) == matched)
                        && s.answers
                            .iter()
                            .filter(|a| matches!(a, Answer::First(_) | Answer::Replayed(_)))
                            .all(|a| a.count() == matched)
                },
            ),
            Property::eventually(
                "the client is answered with the count",
                |_, s: &BulkState| s.answers.iter().any(|a| a.count().is_some()),
            ),
            Property::sometimes(
                "a retry is answered with the recorded count",
                |_, s: &BulkState| s.answers.iter().any(|a| matches!(a, Answer::Replayed(_))),
            ),
            Property::sometimes(
                "a delivery fails after the claim while the request runs",
                |m: &BulkModel, s: &BulkState| {
                    s.row.as_ref().is_some_and(|row| {
                        let fixed = row.fixed();
                        !row.current.completed && m.matching(s).iter().any(|id| !fixed.contains(id))
                    })
                },
            ),
        ];
        // What each kind of take-over its bounds allow must reach.
        if self.bounds.crashes > 0 {
            properties.push(Property::sometimes(
                "a take-over after a part-way crash completes",
                |_, s: &BulkState| {
                    s.crashed_part_way
                        && s.row
                            .as_ref()
                            .is_some_and(|r| r.taken_over() && r.current.completed)
                },
            ));
        }
        if self.bounds.stalls > 0 {
            properties.push(Property::sometimes(
                "a claim taken over from a holder that still runs is completed",
                |_, s: &BulkState| {
                    s.taken_from_running && s.row.as_ref().is_some_and(|r| r.current.completed)
                },
            ));
        }
        properties
    }
}
