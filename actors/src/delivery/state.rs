//! A delivery's state machine and retry policy, with no actor or store in it: `DeliveryState`
//! is the fold of a delivery's log (created with its envelope bytes, then each attempt answered
//! with what follows, any wait for its endpoint, and any redelivery), `DeliveryState::hold` what
//! a wait for its endpoint does (bounded by `max_hold`), `DeliverySettings::next_step`
//! what follows an attempt (the schedule's next step, with jitter), and `new_logs` the logs a
//! decision's inline attempts start, with what to count for them.

use idem_schemas::stored::stream_of;
use idem_schemas::timefmt::rfc3339_millis;
use idem_schemas::{
    ActionOutcome, ActionStatus, AttemptRecord, AttemptView, DeadReason, Decision, DeliveryEvent,
    DeliveryRecord, DeliveryStatus, DeliveryView, NextStep, PlannedDelivery, TraceContext,
};
use std::collections::VecDeque;
use std::time::Duration;

use crate::metrics::Metric;
use crate::settings::{DeliverySettings, Settings};
use crate::store::{DeliveryWrite, Placement};
use crate::stream_event::about_the_stream;

/// How many attempts a delivery's state keeps (the most recent; the total is counted).
pub const KEPT_ATTEMPTS: usize = 100;

/// The retry policy.
impl DeliverySettings {
    /// What follows an attempt of delivery `id` classified `status`, the `series_attempts`-th
    /// of its series, ended at `now`. Each wait is its step of the schedule stretched by up to
    /// a tenth, by an amount fixed by the delivery and attempt, so the retries of deliveries
    /// that failed together spread out. A `Retry-After` asking for longer is honoured up to the
    /// schedule's longest step.
    pub fn next_step(
        &self,
        id: &str,
        status: ActionStatus,
        series_attempts: u32,
        attempt: &AttemptRecord,
        now: u64,
    ) -> NextStep {
        match status {
            ActionStatus::Delivered => NextStep::Delivered,
            ActionStatus::Failed => NextStep::Failed,
            ActionStatus::Dropped => NextStep::Dropped,
            ActionStatus::Queued => {
                let Some(step) = self.schedule.get(series_attempts as usize - 1) else {
                    return NextStep::Dead;
                };
                let step = step.as_millis() as u64;
                let wait = step + step * jitter(id, series_attempts) / 1000;
                let longest = self.longest_step().as_millis() as u64;
                let asked = attempt.retry_after_ms.unwrap_or(0).min(longest);
                NextStep::RetryAt(now + wait.max(asked))
            }
        }
    }
}

/// Thousandths (0 to 99) to stretch attempt `n` of delivery `id`'s wait by: FNV-1a of both,
/// the same on every node and after a restart.
fn jitter(id: &str, n: u32) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in id.bytes().chain(n.to_be_bytes()) {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    hash % 100
}

pub fn outcome_label(next: NextStep) -> &'static str {
    match next {
        NextStep::RetryAt(_) => "retry",
        NextStep::Delivered => "delivered",
        NextStep::Failed => "failed",
        NextStep::Dead => "dead",
        NextStep::Dropped => "dropped",
    }
}

pub fn placement(next: NextStep) -> Placement {
    Placement {
        status: next.status(),
        due_ms: next.due_ms(),
    }
}

/// The index of an attempt (or a hold, an attempt put off) recorded after the delivery's final
/// one with no redelivery between: a record that only a writer whose lease was fenced out could
/// have made, which the fold refuses.
pub fn attempt_after_final(events: &[DeliveryEvent]) -> Option<usize> {
    let mut settled = false;
    for (n, event) in events.iter().enumerate() {
        match event {
            DeliveryEvent::Answered { .. }
            | DeliveryEvent::Held { .. }
            | DeliveryEvent::HeldTooLong { .. }
                if settled =>
            {
                return Some(n)
            }
            DeliveryEvent::Answered { next, .. } => {
                settled = next.status() != DeliveryStatus::Queued
            }
            DeliveryEvent::HeldTooLong { .. } => settled = true,
            DeliveryEvent::Redelivered { .. } => settled = false,
            DeliveryEvent::Created(_) | DeliveryEvent::Held { .. } => {}
        }
    }
    None
}

/// A delivery log that does not start with `Created`, or has it twice.
#[derive(Debug, thiserror::Error)]
#[error("delivery log is malformed: {0}")]
pub struct InvalidDeliveryLog(&'static str);

/// The fold of a delivery's log.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryState {
    /// What it sends, where.
    pub record: DeliveryRecord,
    /// Status and due time.
    pub placement: Placement,
    /// The most recent attempts, at most [`KEPT_ATTEMPTS`].
    pub attempts: VecDeque<AttemptRecord>,
    /// Every attempt ever made.
    pub attempts_total: u32,
    /// Attempts in the current series (the first series starts with the inline attempt).
    pub series_attempts: u32,
    /// When the current series was started by a redelivery, if one started it.
    pub redelivered_at_ms: Option<u64>,
    /// While its last records are holds (it waits for its endpoint): since when, the time it
    /// was due when the first of them held it.
    pub held_since_ms: Option<u64>,
    /// Why it is dead, when it is.
    pub dead_reason: Option<DeadReason>,
    /// The next record's sequence number.
    pub next_seq: u32,
}

/// What a delivery does when its endpoint holds it back until `until_ms`.
#[derive(Debug, Clone, PartialEq)]
pub enum Hold {
    /// The first hold of a run of holds: recorded, which moves it in the retry queue.
    Record(DeliveryEvent, Placement),
    /// Held again: only its place in the retry queue moves, to this time (no record per
    /// cooldown, however long the endpoint stays open).
    Move(u64),
    /// Held for `max_hold` since its first hold: dead, with no attempt made.
    GiveUp(DeliveryEvent, Placement),
}

/// What a redelivery asked of a delivery comes to.
// Made and taken apart once per redelivery, never kept: boxing the record would cost an
// allocation per redelivery to save bytes on the stack.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Redelivery {
    /// Redelivered since the bulk claim asking (by an earlier holder of it that stopped
    /// part-way): it counts as redelivered, and nothing is written.
    Done,
    /// Failed or dead: this record starts a new series, due at once.
    Record(DeliveryEvent, Placement),
    /// Neither failed nor dead: refused.
    NotFinal(DeliveryStatus),
    /// A SET's whose delivery ended: its bytes are erased, so there is nothing to send.
    Erased,
}

impl DeliveryState {
    /// What a redelivery at `now_ms` does, asked with `since_ms` by a bulk redelivery (the time
    /// of its claim): a delivery redelivered since then is done, so that the claim's holders
    /// redeliver it once between them. A new series is never dated before the claim asking, so
    /// a clock that stepped back cannot make it look older.
    pub fn redelivery(&self, since_ms: Option<u64>, now_ms: u64) -> Redelivery {
        let done = since_ms.is_some_and(|since| self.redelivered_at_ms >= Some(since));
        match self.placement.status {
            _ if done => Redelivery::Done,
            DeliveryStatus::Failed | DeliveryStatus::Dead
                if stream_of(&self.record.url).is_some() =>
            {
                Redelivery::Erased
            }
            DeliveryStatus::Failed | DeliveryStatus::Dead => {
                let at_ms = now_ms.max(since_ms.unwrap_or(0));
                let to = Placement {
                    status: DeliveryStatus::Queued,
                    due_ms: Some(at_ms),
                };
                Redelivery::Record(DeliveryEvent::Redelivered { at_ms }, to)
            }
            status => Redelivery::NotFinal(status),
        }
    }

    /// Folds a whole log.
    pub fn fold(events: Vec<DeliveryEvent>) -> Result<Self, InvalidDeliveryLog> {
        let mut events = events.into_iter();
        let Some(DeliveryEvent::Created(record)) = events.next() else {
            return Err(InvalidDeliveryLog("the first event is not Created"));
        };
        let mut state = DeliveryState {
            placement: Placement {
                status: DeliveryStatus::Queued,
                due_ms: Some(record.created_at_ms),
            },
            attempts: VecDeque::new(),
            attempts_total: 0,
            series_attempts: 0,
            redelivered_at_ms: None,
            held_since_ms: None,
            dead_reason: None,
            next_seq: 1,
            record,
        };
        for event in events {
            state.apply(event)?;
        }
        Ok(state)
    }

    /// The one transition function of the delivery state machine.
    pub fn apply(&mut self, event: DeliveryEvent) -> Result<(), InvalidDeliveryLog> {
        match event {
            DeliveryEvent::Created(_) => return Err(InvalidDeliveryLog("Created twice")),
            // A final delivery moves only by a redelivery: an attempt or a hold recorded after
            // it came from a writer that was fenced out, and would send it again.
            DeliveryEvent::Answered { .. }
            | DeliveryEvent::Held { .. }
            | DeliveryEvent::HeldTooLong { .. }
                if self.placement.due_ms.is_none() =>
            {
                return Err(InvalidDeliveryLog(
                    "an attempt recorded after its final one, with no redelivery between",
                ))
            }
            DeliveryEvent::Answered { attempt, next } => {
                if self.attempts.len() == KEPT_ATTEMPTS {
                    self.attempts.pop_front();
                }
                self.attempts.push_back(attempt);
                self.attempts_total += 1;
                self.series_attempts += 1;
                self.placement = placement(next);
                self.held_since_ms = None;
                self.dead_reason =
                    (next == NextStep::Dead).then_some(DeadReason::AttemptsExhausted);
            }
            DeliveryEvent::Held { until_ms } => {
                if self.held_since_ms.is_none() {
                    self.held_since_ms = self.placement.due_ms;
                }
                self.placement = Placement {
                    status: DeliveryStatus::Queued,
                    due_ms: Some(until_ms),
                };
            }
            DeliveryEvent::HeldTooLong { .. } => {
                self.placement = Placement {
                    status: DeliveryStatus::Dead,
                    due_ms: None,
                };
                self.held_since_ms = None;
                self.dead_reason = Some(DeadReason::EndpointOpen);
            }
            DeliveryEvent::Redelivered { at_ms } => {
                self.series_attempts = 0;
                self.redelivered_at_ms = Some(at_ms);
                self.placement = Placement {
                    status: DeliveryStatus::Queued,
                    due_ms: Some(at_ms),
                };
                self.held_since_ms = None;
                self.dead_reason = None;
            }
        }
        self.next_seq += 1;
        Ok(())
    }

    /// Whether a retry-queue entry due at `due_ms` is this delivery's: the time its log says,
    /// or, while it is held, a later one its holds moved it to since.
    pub fn queued_at(&self, due_ms: u64) -> bool {
        self.placement
            .due_ms
            .is_some_and(|due| due == due_ms || (self.held_since_ms.is_some() && due_ms > due))
    }

    /// What it does at `now_ms` when its endpoint holds it back until `until_ms`, given
    /// `max_hold`: the first hold is recorded (and waits no longer than `max_hold`), later ones
    /// only move it, and one `max_hold` after the first it is dead.
    pub fn hold(&self, until_ms: u64, now_ms: u64, max_hold: Duration) -> Hold {
        let max_hold = max_hold.as_millis() as u64;
        let Some(since) = self.held_since_ms else {
            let until_ms = until_ms.min(now_ms.saturating_add(max_hold));
            let queued = Placement {
                status: DeliveryStatus::Queued,
                due_ms: Some(until_ms),
            };
            return Hold::Record(DeliveryEvent::Held { until_ms }, queued);
        };
        let deadline = since.saturating_add(max_hold);
        if now_ms >= deadline {
            let dead = Placement {
                status: DeliveryStatus::Dead,
                due_ms: None,
            };
            return Hold::GiveUp(DeliveryEvent::HeldTooLong { at_ms: now_ms }, dead);
        }
        Hold::Move(until_ms.min(deadline))
    }

    /// Whether it is queued and waits for the first attempt of its series (held since it was
    /// made, or made while its endpoint or stream held it back).
    pub fn unsent(&self) -> bool {
        self.placement.status == DeliveryStatus::Queued && self.series_attempts == 0
    }

    /// What releasing this delivery, held while its stream was paused or disabled, does: made
    /// due at `at_ms` (a hold until then, recorded), if it is held until later; none otherwise.
    pub fn released(&self, at_ms: u64) -> Option<(DeliveryEvent, Placement)> {
        let due = self.placement.due_ms?;
        if self.placement.status != DeliveryStatus::Queued
            || self.held_since_ms.is_none()
            || due <= at_ms
        {
            return None;
        }
        let queued = Placement {
            status: DeliveryStatus::Queued,
            due_ms: Some(at_ms),
        };
        Some((DeliveryEvent::Held { until_ms: at_ms }, queued))
    }

    /// What `answer` does at `now_ms` to this SET waiting in a poll stream (RFC 8936). Only a
    /// queued SET to `url`, the stream polled, is answered (any other `jti` is nothing), and a
    /// stream's own events are never dropped.
    pub fn polled(
        &self,
        url: &str,
        answer: PollAnswer,
        now_ms: u64,
    ) -> Option<(DeliveryEvent, Placement)> {
        if self.record.url != url || self.placement.status != DeliveryStatus::Queued {
            return None;
        }
        let (next, error) = match answer {
            PollAnswer::Acknowledged => (NextStep::Delivered, None),
            PollAnswer::Refused(error) => (NextStep::Failed, Some(error)),
            PollAnswer::Dropped if about_the_stream(&self.record.action) => return None,
            PollAnswer::Dropped => (NextStep::Dropped, Some("the stream is disabled".into())),
        };
        let attempt = AttemptRecord {
            at_ms: now_ms,
            code: None,
            error,
            latency_ms: 0,
            retry_after_ms: None,
        };
        Some((DeliveryEvent::Answered { attempt, next }, placement(next)))
    }

    /// As the tenant API shows it.
    pub fn view(&self) -> DeliveryView {
        DeliveryView {
            id: self.record.id.clone(),
            decision_id: self.record.decision_id.clone(),
            action: self.record.action.clone(),
            url: self.record.url.clone(),
            status: self.placement.status,
            next_attempt_at: self.placement.due_ms.map(rfc3339_millis),
            dead_reason: self.dead_reason,
            created_at: rfc3339_millis(self.record.created_at_ms),
            attempts_total: self.attempts_total,
            attempts: self
                .attempts
                .iter()
                .enumerate()
                .map(|(n, a)| AttemptView {
                    attempt: self.attempts_total - self.attempts.len() as u32 + n as u32 + 1,
                    at: rfc3339_millis(a.at_ms),
                    status_code: a.code,
                    error: a.error.clone(),
                    latency_ms: a.latency_ms,
                })
                .collect(),
        }
    }
}

/// The logs of every callback of `decision`, whose inline attempts gave `outcomes`, and what to
/// count for them.
pub struct NewLogs {
    /// Each callback's log: created, then answered with what follows (queued ones enter the
    /// retry queue).
    pub writes: Vec<DeliveryWrite>,
    /// First attempts by outcome, and deliveries by status.
    pub counts: Vec<Metric>,
}

/// The new logs of `decision`'s callbacks, whose inline attempts gave `outcomes`. A callback
/// without an outcome was held back (its endpoint open, or busy, or its callbacks queued): it is
/// created queued, due at once, with no attempt.
pub fn new_logs(decision: &Decision, outcomes: &[ActionOutcome], settings: &Settings) -> NewLogs {
    let mut logs = NewLogs {
        writes: Vec::with_capacity(decision.deliveries.len()),
        counts: Vec::with_capacity(2 * decision.deliveries.len()),
    };
    for planned in &decision.deliveries {
        let (tenant, made_at) = (&decision.tenant, decision.created_at_ms);
        let of = (decision.id.as_str(), decision.trace);
        let record = record_of(tenant, of, planned, made_at, settings);
        let Some(outcome) = outcomes.iter().find(|o| o.delivery_id == planned.id) else {
            logs.counts.push(Metric::Moved {
                from: None,
                to: Some(DeliveryStatus::Queued),
            });
            logs.writes.push(queued_log(record));
            continue;
        };
        let next = settings.delivery.next_step(
            &planned.id,
            outcome.status,
            1,
            &outcome.attempt,
            outcome.attempt.at_ms + outcome.attempt.latency_ms,
        );
        logs.counts.push(Metric::Attempt {
            number: 1,
            outcome: outcome_label(next),
        });
        let answered = DeliveryEvent::Answered {
            attempt: outcome.attempt.clone(),
            next,
        };
        let events = vec![DeliveryEvent::Created(record), answered];
        let to = placement(next);
        logs.counts.push(Metric::Moved {
            from: None,
            to: Some(to.status),
        });
        logs.writes.push(DeliveryWrite {
            tenant: decision.tenant.clone(),
            id: planned.id.clone(),
            url: planned.url.clone(),
            lease: None,
            first_seq: 0,
            events,
            from: None,
            to,
        });
    }
    logs
}

/// What becomes of a SET waiting in a poll stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PollAnswer {
    /// Its receiver acknowledged it: delivered.
    Acknowledged,
    /// Its receiver reported it in `setErrs`: failed with this `err: description`.
    Refused(String),
    /// Its stream was disabled: dropped.
    Dropped,
}

/// The record of `tenant`'s delivery `planned`, of the decision `decision_id` (empty: of
/// none) made in `trace`, made at `made_at_ms` and kept for the delivery retention.
pub fn record_of(
    tenant: &str,
    (decision_id, trace): (&str, Option<TraceContext>),
    planned: &PlannedDelivery,
    made_at_ms: u64,
    settings: &Settings,
) -> DeliveryRecord {
    let retention = settings.delivery_retention().as_millis() as u64;
    DeliveryRecord {
        id: planned.id.clone(),
        tenant: tenant.to_string(),
        decision_id: decision_id.to_string(),
        action: planned.action.clone(),
        url: planned.url.clone(),
        body: planned.body.clone(),
        created_at_ms: made_at_ms,
        expires_at_ms: made_at_ms + retention,
        trace,
    }
}

/// A new log of `record`, queued, due when it was made, with no attempt: a delivery held back
/// from its inline attempt, or one made with none.
pub fn queued_log(record: DeliveryRecord) -> DeliveryWrite {
    DeliveryWrite {
        tenant: record.tenant.clone(),
        id: record.id.clone(),
        url: record.url.clone(),
        lease: None,
        first_seq: 0,
        from: None,
        to: Placement {
            status: DeliveryStatus::Queued,
            due_ms: Some(record.created_at_ms),
        },
        events: vec![DeliveryEvent::Created(record)],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_schemas::{PlannedDelivery, Verdict};
    use std::time::Duration;

    const T: u64 = 1_000_000;

    fn settings() -> Settings {
        let mut settings = Settings::default();
        settings.delivery.schedule = vec![Duration::from_secs(5), Duration::from_secs(50)];
        settings.idempotency.key_ttl = Duration::from_secs(3_600);
        settings.decisions.retention = Duration::from_secs(3_600);
        settings
    }

    fn record() -> DeliveryRecord {
        DeliveryRecord {
            id: "msg_1".into(),
            tenant: "acme".into(),
            decision_id: "dec_1".into(),
            action: "lock".into(),
            url: "http://127.0.0.1:9/".into(),
            body: vec![],
            created_at_ms: T,
            expires_at_ms: T + 1,
            trace: None,
        }
    }

    fn attempt(code: Option<u16>, retry_after_ms: Option<u64>) -> AttemptRecord {
        AttemptRecord {
            at_ms: T,
            code,
            error: code.is_none().then(|| "connection refused".into()),
            latency_ms: 10,
            retry_after_ms,
        }
    }

    #[test]
    fn an_attempt_after_a_final_one_is_found_unless_a_redelivery_came_between() {
        let answered = |next| DeliveryEvent::Answered {
            attempt: attempt(None, None),
            next,
        };
        let retry = answered(NextStep::RetryAt(T));
        let dead = answered(NextStep::Dead);
        let redelivered = DeliveryEvent::Redelivered { at_ms: T };
        assert_eq!(attempt_after_final(&[retry.clone(), dead.clone()]), None);
        assert_eq!(
            attempt_after_final(&[retry.clone(), dead.clone(), retry.clone()]),
            Some(2)
        );
        assert_eq!(
            attempt_after_final(&[
                dead.clone(),
                redelivered.clone(),
                retry.clone(),
                dead.clone()
            ]),
            None
        );
        let held = DeliveryEvent::Held { until_ms: T };
        assert_eq!(
            attempt_after_final(&[held.clone(), dead.clone(), held.clone()]),
            Some(2)
        );
        // The fold refuses what the checker finds, with an error rather than a panic.
        let fold = |events: &[DeliveryEvent]| {
            let mut log = vec![DeliveryEvent::Created(record())];
            log.extend_from_slice(events);
            DeliveryState::fold(log)
        };
        assert!(fold(&[retry.clone(), dead.clone(), retry.clone()]).is_err());
        assert!(fold(&[dead.clone(), held]).is_err());
        let again = fold(&[dead.clone(), redelivered, retry]).expect("a redelivery between");
        assert_eq!(again.attempts_total, 2);
        assert_eq!(again.placement.status, DeliveryStatus::Queued);
    }

    /// The wait of a `RetryAt(T + wait)`.
    fn wait(next: NextStep) -> u64 {
        match next {
            NextStep::RetryAt(at) => at - T,
            other => panic!("{other:?} is no retry"),
        }
    }

    #[test]
    fn what_follows_an_attempt() {
        let s = settings().delivery;
        let next = |id: &str, status, n, retry_after| {
            s.next_step(id, status, n, &attempt(None, retry_after), T)
        };
        let queued = |n, retry_after| next("msg_1", ActionStatus::Queued, n, retry_after);
        assert_eq!(
            next("msg_1", ActionStatus::Delivered, 1, None),
            NextStep::Delivered
        );
        assert_eq!(
            next("msg_1", ActionStatus::Failed, 1, None),
            NextStep::Failed
        );
        // Each retry waits its step, stretched by less than a tenth.
        assert!((5_000..5_500).contains(&wait(queued(1, None))));
        assert!((50_000..55_000).contains(&wait(queued(2, None))));
        // The first attempt and one more per step: the last one's failure is dead.
        assert_eq!(queued(3, None), NextStep::Dead);
        // The stretch is the same for the same delivery and attempt, and spreads deliveries.
        assert_eq!(queued(1, None), queued(1, None));
        let waits: std::collections::HashSet<u64> = (0..50)
            .map(|n| wait(next(&format!("msg_{n}"), ActionStatus::Queued, 1, None)))
            .collect();
        assert!(waits.len() > 10, "{waits:?}");
        // A longer Retry-After is honoured up to the longest step; a shorter one changes
        // nothing.
        assert_eq!(wait(queued(1, Some(20_000))), 20_000);
        assert_eq!(wait(queued(1, Some(3_600_000))), 50_000);
        assert_eq!(queued(1, Some(10)), queued(1, None));
    }

    #[test]
    fn the_log_keeps_the_most_recent_attempts_and_counts_them_all() {
        let mut state = DeliveryState::fold(vec![DeliveryEvent::Created(record())]).expect("fold");
        for n in 0..(KEPT_ATTEMPTS as u64 + 20) {
            let mut a = attempt(Some(503), None);
            a.at_ms = T + n;
            let answered = DeliveryEvent::Answered {
                attempt: a,
                next: NextStep::Dead,
            };
            state.apply(answered).expect("apply");
            state
                .apply(DeliveryEvent::Redelivered { at_ms: T + n })
                .expect("apply");
        }
        let view = state.view();
        assert_eq!(view.attempts_total, KEPT_ATTEMPTS as u32 + 20);
        assert_eq!(view.attempts.len(), KEPT_ATTEMPTS);
        assert_eq!(view.attempts[0].attempt, 21);
        assert_eq!(
            view.attempts.last().map(|a| a.attempt),
            Some(KEPT_ATTEMPTS as u32 + 20)
        );
        // A wait for the endpoint moves the due time and uses up no attempt.
        state
            .apply(DeliveryEvent::Held { until_ms: T + 99 })
            .expect("apply");
        assert_eq!(state.series_attempts, 0);
        assert_eq!(state.placement.due_ms, Some(T + 99));
    }

    #[test]
    fn a_hold_is_recorded_once_then_moves_the_queue_only_and_ends_dead_past_max_hold() {
        let max_hold = Duration::from_millis(1_000);
        let mut state = DeliveryState::fold(vec![DeliveryEvent::Created(record())]).expect("fold");
        let failed = DeliveryEvent::Answered {
            attempt: attempt(Some(503), None),
            next: NextStep::RetryAt(T + 100),
        };
        state.apply(failed).expect("apply");

        // The first hold is recorded; later ones move the queue entry only.
        let Hold::Record(held, to) = state.hold(T + 300, T + 100, max_hold) else {
            panic!("the first hold is recorded");
        };
        assert_eq!(held, DeliveryEvent::Held { until_ms: T + 300 });
        assert_eq!(to.due_ms, Some(T + 300));
        state.apply(held).expect("apply");
        assert_eq!(state.held_since_ms, Some(T + 100), "held since it was due");
        assert_eq!(state.hold(T + 600, T + 300, max_hold), Hold::Move(T + 600));
        // Its own entries: the recorded time, and a later one a move put it at; not an earlier.
        assert!(state.queued_at(T + 300) && state.queued_at(T + 600));
        assert!(!state.queued_at(T + 299));
        // Never moved past the deadline, and dead at it, with no attempt made.
        assert_eq!(
            state.hold(T + 5_000, T + 600, max_hold),
            Hold::Move(T + 1_100)
        );
        let Hold::GiveUp(gave_up, dead) = state.hold(T + 5_000, T + 1_100, max_hold) else {
            panic!("held past max_hold");
        };
        assert_eq!(dead.due_ms, None);
        state.apply(gave_up).expect("apply");
        assert_eq!(state.placement.status, DeliveryStatus::Dead);
        assert_eq!(state.view().dead_reason, Some(DeadReason::EndpointOpen));
        assert_eq!(state.attempts_total, 1);
        assert!(!state.queued_at(T + 600), "a final delivery has no entry");

        // A redelivery starts it moving again; its retries used up, the reason says so.
        state
            .apply(DeliveryEvent::Redelivered { at_ms: T + 2_000 })
            .expect("apply");
        assert_eq!(state.view().dead_reason, None);
        assert!(matches!(
            state.hold(T + 2_100, T + 2_050, max_hold),
            Hold::Record(..)
        ));
        // The first hold waits no longer than max_hold, however late its endpoint's probe.
        let Hold::Record(first, _) = state.hold(T + 99_000, T + 2_050, max_hold) else {
            panic!("the first hold is recorded");
        };
        assert_eq!(
            first,
            DeliveryEvent::Held {
                until_ms: T + 3_050
            }
        );
        let dead = DeliveryEvent::Answered {
            attempt: attempt(None, None),
            next: NextStep::Dead,
        };
        state.apply(dead).expect("apply");
        assert_eq!(
            state.view().dead_reason,
            Some(DeadReason::AttemptsExhausted)
        );
    }

    /// Decision `dec_1` of tenant acme, made at `T`, with `deliveries`.
    fn decision(deliveries: Vec<PlannedDelivery>) -> Decision {
        Decision {
            id: "dec_1".into(),
            tenant: "acme".into(),
            signal_type: "sim_swap".into(),
            source: None,
            verdict: Verdict::Deny,
            subject_hash: "ab".into(),
            created_at_ms: T,
            deliveries,
            trace: None,
            rule: None,
            rule_errors: Vec::new(),
        }
    }

    #[test]
    fn a_held_back_callback_is_created_queued_with_no_attempt() {
        let decision = decision(vec![PlannedDelivery {
            id: "msg_1".into(),
            action: "lock".into(),
            url: "http://127.0.0.1:9/".into(),
            body: vec![1],
            key: None,
            token: None,
        }]);
        let logs = new_logs(&decision, &[], &settings());
        assert_eq!(
            logs.counts,
            vec![Metric::Moved {
                from: None,
                to: Some(DeliveryStatus::Queued)
            }]
        );
        let logs = logs.writes;
        assert_eq!(logs.len(), 1);
        let state = DeliveryState::fold(logs[0].events.clone()).expect("fold");
        assert_eq!(state.attempts_total, 0);
        assert_eq!(state.placement, logs[0].to);
        assert_eq!(state.placement.due_ms, Some(T));
    }

    #[test]
    fn a_decisions_logs_fold_to_what_their_inline_attempts_gave() {
        let planned = |n: u8| PlannedDelivery {
            id: format!("msg_{n}"),
            action: format!("action_{n}"),
            url: "http://127.0.0.1:9/".into(),
            body: vec![n],
            key: None,
            token: None,
        };
        let decision = decision(vec![planned(1), planned(2)]);
        let outcomes = vec![
            ActionOutcome {
                delivery_id: "msg_1".into(),
                status: ActionStatus::Delivered,
                attempt: attempt(Some(200), None),
            },
            ActionOutcome {
                delivery_id: "msg_2".into(),
                status: ActionStatus::Queued,
                attempt: attempt(None, None),
            },
        ];
        let logs = new_logs(&decision, &outcomes, &settings());
        let attempt_counted = |outcome| Metric::Attempt { number: 1, outcome };
        let moved = |to| Metric::Moved {
            from: None,
            to: Some(to),
        };
        assert_eq!(
            logs.counts,
            vec![
                attempt_counted("delivered"),
                moved(DeliveryStatus::Delivered),
                attempt_counted("retry"),
                moved(DeliveryStatus::Queued),
            ]
        );
        let logs = logs.writes;
        assert_eq!(logs.len(), 2);
        let placements: Vec<Placement> = logs.iter().map(|l| l.to).collect();
        assert_eq!(
            placements,
            vec![
                Placement {
                    status: DeliveryStatus::Delivered,
                    due_ms: None
                },
                Placement {
                    status: DeliveryStatus::Queued,
                    due_ms: match settings().delivery.next_step(
                        "msg_2",
                        ActionStatus::Queued,
                        1,
                        &attempt(None, None),
                        T + 10
                    ) {
                        NextStep::RetryAt(at) => Some(at),
                        _ => None,
                    }
                },
            ]
        );
        // The first retry waits its step from the end of the inline attempt.
        assert!(placements[1].due_ms.is_some_and(|at| at >= T + 10 + 5_000));
        for log in logs {
            let state = DeliveryState::fold(log.events).expect("fold");
            assert_eq!(state.placement, log.to);
            assert_eq!(state.attempts.len(), 1);
            assert_eq!(state.series_attempts, 1);
            assert_eq!(state.next_seq, 2);
            assert_eq!(state.record.expires_at_ms, T + 3_600_000);
        }
    }

    #[test]
    fn a_redelivery_starts_a_new_series_and_created_comes_once() {
        let logs = vec![
            DeliveryEvent::Created(record()),
            DeliveryEvent::Answered {
                attempt: attempt(None, None),
                next: NextStep::Dead,
            },
            DeliveryEvent::Redelivered { at_ms: T + 9 },
        ];
        let state = DeliveryState::fold(logs.clone()).expect("fold");
        assert_eq!(state.series_attempts, 0);
        assert_eq!(state.attempts.len(), 1);
        assert_eq!(
            state.placement,
            Placement {
                status: DeliveryStatus::Queued,
                due_ms: Some(T + 9)
            }
        );
        let mut twice = logs.clone();
        twice.push(logs[0].clone());
        assert!(DeliveryState::fold(twice).is_err());
        assert!(DeliveryState::fold(logs[1..].to_vec()).is_err());
    }

    #[test]
    fn a_redelivery_asked_by_a_bulk_claim_is_made_once_since_the_claim() {
        let dead = DeliveryEvent::Answered {
            attempt: attempt(None, None),
            next: NextStep::Dead,
        };
        let redelivered = |at_ms| DeliveryEvent::Redelivered { at_ms };
        let fold = |events: &[DeliveryEvent]| {
            let mut log = vec![DeliveryEvent::Created(record())];
            log.extend_from_slice(events);
            DeliveryState::fold(log).expect("fold")
        };
        let queued_at = |at_ms| Placement {
            status: DeliveryStatus::Queued,
            due_ms: Some(at_ms),
        };
        let claim = T + 100;

        // Dead: redelivered, with or without a claim's time.
        let once = fold(std::slice::from_ref(&dead));
        let made = Redelivery::Record(redelivered(claim + 5), queued_at(claim + 5));
        assert_eq!(once.redelivery(None, claim + 5), made);
        assert_eq!(once.redelivery(Some(claim), claim + 5), made);
        // A clock behind the claim's dates the new series at the claim, not before it.
        let behind = Redelivery::Record(redelivered(claim), queued_at(claim));
        assert_eq!(once.redelivery(Some(claim), claim - 50), behind);

        // Redelivered before the claim and dead again: redelivered.
        let earlier = fold(&[dead.clone(), redelivered(claim - 1), dead.clone()]);
        assert!(matches!(
            earlier.redelivery(Some(claim), claim + 5),
            Redelivery::Record(..)
        ));
        // Redelivered since the claim, whether dead again or still queued: done.
        let since = fold(&[dead.clone(), redelivered(claim), dead]);
        assert_eq!(since.redelivery(Some(claim), claim + 5), Redelivery::Done);
        let running = fold(&[
            DeliveryEvent::Answered {
                attempt: attempt(None, None),
                next: NextStep::Dead,
            },
            redelivered(claim + 1),
        ]);
        assert_eq!(running.redelivery(Some(claim), claim + 5), Redelivery::Done);
        // Asked without a claim's time, a queued one is refused.
        assert_eq!(
            running.redelivery(None, claim + 5),
            Redelivery::NotFinal(DeliveryStatus::Queued)
        );
        assert_eq!(
            since.redelivery(None, claim + 5),
            Redelivery::Record(redelivered(claim + 5), queued_at(claim + 5))
        );
    }

    #[test]
    fn a_held_delivery_is_released_to_an_earlier_time_and_nothing_else_is() {
        let fold = |events: &[DeliveryEvent]| {
            let mut log = vec![DeliveryEvent::Created(record())];
            log.extend_from_slice(events);
            DeliveryState::fold(log).expect("fold")
        };
        let held = fold(&[DeliveryEvent::Held {
            until_ms: T + 60_000,
        }]);
        let (event, to) = held.released(T + 10).expect("released");
        assert_eq!(event, DeliveryEvent::Held { until_ms: T + 10 });
        assert_eq!(to.due_ms, Some(T + 10));
        let mut moved = held.clone();
        moved.apply(event).expect("applies");
        assert_eq!(moved.placement, to);
        assert!(moved.queued_at(T + 10), "its entry is its own");
        assert_eq!(moved.released(T + 10), None, "released once");
        // Not held (due anyway), or held until sooner: nothing.
        assert_eq!(fold(&[]).released(T + 10), None);
        assert_eq!(held.released(T + 60_000), None);
        let ended = fold(&[DeliveryEvent::Answered {
            attempt: attempt(None, None),
            next: NextStep::Dead,
        }]);
        assert_eq!(ended.released(T + 10), None);
    }

    #[test]
    fn a_set_whose_delivery_ended_is_not_redelivered_its_bytes_being_erased() {
        let set = DeliveryRecord {
            url: "ssf:st_1".into(),
            ..record()
        };
        for next in [NextStep::Dead, NextStep::Failed] {
            let ended = DeliveryEvent::Answered {
                attempt: attempt(Some(400), None),
                next,
            };
            let state = DeliveryState::fold(vec![DeliveryEvent::Created(set.clone()), ended])
                .expect("fold");
            assert_eq!(state.redelivery(None, T + 5), Redelivery::Erased);
        }
    }
}
