//! What a copy of the bulk request does at each step, as `Engine::redeliver_bulk` does it: it
//! reads the claim and is answered from it, or scans and claims what it matched; takes over a
//! claim whose holder looks gone; redelivers its deliveries one a step, as each delivery's actor
//! would; and records its answer. A node's crash loses the copies it handled, a stall lets
//! `in_flight_timeout` pass under a holder that runs on. Each step says what it did, for a
//! counterexample.

use idem_actors::claim::phase::Invariant;
use idem_actors::delivery::state::Redelivery;
use idem_actors::record::{self, Decided};
use idem_actors::signals::bulk::{self, BulkReply, Held, Matches, Plan};
use idem_actors::store::rule::{self, Current, Fencing};
use idem_actors::store::{ClaimLog, ClaimWrite, LogHead};
use idem_schemas::{ClaimEvent, DeliveryEvent, NextStep};

use super::state::{attempt, fold, BulkAction, BulkAnswer, BulkRow, BulkState, HandledCopy, Stage};
use super::{BulkModel, DELIVERIES, IN_FLIGHT_TIMEOUT, KEY_TTL, TENANT};
use crate::head_of;

impl BulkModel {
    /// Node `node`'s copy at `run`, in words.
    fn who(s: &BulkState, run: usize) -> String {
        format!("node {}'s copy", s.runs[run].node)
    }

    /// The copy at `run` is answered, and is done; what happened.
    fn finish(s: &mut BulkState, run: usize, answer: BulkAnswer) -> String {
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
            return Self::finish(s, run, BulkAnswer::Error);
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
            return Self::finish(s, run, BulkAnswer::of(reply));
        }
        let ids = self.matching(s);
        let epoch = s.runs[run].epoch;
        let now = s.now + 1;
        let claim = bulk::claim(TENANT, &ids, self.fingerprint, epoch, now, KEY_TTL);
        let current = s.row.as_ref().map(|r| r.current);
        let ift = IN_FLIGHT_TIMEOUT.as_millis() as u64;
        if rule::may_start(current.as_ref(), now, ift, Fencing::On) {
            s.now = now;
            let row = BulkRow {
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
            let head = head_of(&self.id, &row.current);
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
            head: head_of(&self.id, &row.current),
        };
        match self.answer(s, run) {
            Some(reply) => Self::finish(s, run, BulkAnswer::of(reply)),
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
                let running = |r: &HandledCopy| matches!(r.stage, Stage::Holding { .. });
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
                let answered = Self::finish(s, run, BulkAnswer::of(reply));
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
            return Self::finish(s, run, BulkAnswer::Error);
        };
        let decided = Decided::Redelivered {
            head: head.clone(),
            response: response.clone(),
        };
        let Ok(writes) = record::writes(decided, &self.settings) else {
            return Self::finish(s, run, BulkAnswer::Error);
        };
        let current = s.row.as_ref().map(|r| r.current);
        match s.row.as_mut() {
            Some(row) if rule::may_append(current.as_ref(), &head, Fencing::On) => {
                if let Some(ClaimWrite::Append(_, events)) = writes.unit.claim_write() {
                    row.events.extend(events.iter().cloned());
                }
                row.current.writes += 1;
                row.current.completed = row.events.last() == Some(&ClaimEvent::Completed);
                let answered = Self::finish(s, run, BulkAnswer::First(response.body));
                format!("{answered}, recorded")
            }
            _ => {
                let theirs = self
                    .answer(s, run)
                    .filter(|reply| *reply != BulkReply::InFlight)
                    .unwrap_or(BulkReply::First(response));
                let answered = Self::finish(s, run, BulkAnswer::of(theirs));
                format!("{answered}: its record is fenced")
            }
        }
    }

    /// Takes `action` in `s`; what happened, in a few words.
    pub(super) fn apply(&self, s: &mut BulkState, action: &BulkAction) -> String {
        match *action {
            BulkAction::Send(node) => {
                s.copies_left -= 1;
                s.runs.push(HandledCopy {
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
                let (lost, kept): (Vec<HandledCopy>, Vec<HandledCopy>) =
                    s.runs.drain(..).partition(|r| r.node == node);
                s.runs = kept;
                let mut part_way = false;
                for run in lost {
                    if let Stage::Holding { left, done, .. } = &run.stage {
                        part_way |= *done > 0 && !left.is_empty();
                    }
                    // The client's connection breaks, and it retries.
                    s.answers.push(BulkAnswer::Error);
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
}
