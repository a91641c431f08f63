//! A delivery's state machine and retry policy, with no actor or store in it: `DeliveryState`
//! is the fold of a delivery's log (created with its envelope bytes, then each attempt answered
//! with what follows, and any redelivery), `DeliverySettings::next_step` what follows an
//! attempt, and `new_logs` the logs a decision's inline attempts start.

use idem_schemas::timefmt::rfc3339_millis;
use idem_schemas::{
    ActionOutcome, ActionStatus, AttemptRecord, AttemptView, Decision, DeliveryEvent,
    DeliveryRecord, DeliveryStatus, DeliveryView, NextStep,
};
use std::time::Duration;

use crate::store::{DeliveryWrite, Placement};

/// The retry policy.
#[derive(Debug, Clone)]
pub struct DeliverySettings {
    /// Attempts after the first of a series.
    pub max_retries: u32,
    /// Time between attempts.
    pub retry_interval: Duration,
    /// Deadline of each attempt.
    pub attempt_timeout: Duration,
    /// A delivery actor with nothing to do for this long stops.
    pub idle_timeout: Duration,
    /// How long after its creation a final delivery is kept (the claims' `key_ttl`).
    pub retention: Duration,
}

impl DeliverySettings {
    /// What follows an attempt classified `status`, the `series_attempts`-th of its series.
    pub fn next_step(
        &self,
        status: ActionStatus,
        series_attempts: u32,
        attempt: &AttemptRecord,
        now: u64,
    ) -> NextStep {
        match status {
            ActionStatus::Delivered => NextStep::Delivered,
            ActionStatus::Failed => NextStep::Failed,
            ActionStatus::Queued if series_attempts > self.max_retries => NextStep::Dead,
            ActionStatus::Queued => {
                let wait = (self.retry_interval.as_millis() as u64)
                    .max(attempt.retry_after_ms.unwrap_or(0));
                NextStep::RetryAt(now + wait)
            }
        }
    }
}

pub fn outcome_label(next: NextStep) -> &'static str {
    match next {
        NextStep::RetryAt(_) => "retry",
        NextStep::Delivered => "delivered",
        NextStep::Failed => "failed",
        NextStep::Dead => "dead",
    }
}

pub fn placement(next: NextStep) -> Placement {
    Placement {
        status: next.status(),
        due_ms: next.due_ms(),
    }
}

/// The index of an attempt recorded after the delivery's final one with no redelivery
/// between: a record that only a writer whose lease was fenced out could have made.
pub fn attempt_after_final(events: &[DeliveryEvent]) -> Option<usize> {
    let mut settled = false;
    for (n, event) in events.iter().enumerate() {
        match event {
            DeliveryEvent::Answered { .. } if settled => return Some(n),
            DeliveryEvent::Answered { next, .. } => {
                settled = next.status() != DeliveryStatus::Queued
            }
            DeliveryEvent::Redelivered { .. } => settled = false,
            DeliveryEvent::Created(_) => {}
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
    /// Every attempt so far.
    pub attempts: Vec<AttemptRecord>,
    /// Attempts in the current series (the first series starts with the inline attempt).
    pub series_attempts: u32,
    /// The next record's sequence number.
    pub next_seq: u32,
}

impl DeliveryState {
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
            record,
            attempts: Vec::new(),
            series_attempts: 0,
            next_seq: 1,
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
            DeliveryEvent::Answered { attempt, next } => {
                self.attempts.push(attempt);
                self.series_attempts += 1;
                self.placement = placement(next);
            }
            DeliveryEvent::Redelivered { at_ms } => {
                self.series_attempts = 0;
                self.placement = Placement {
                    status: DeliveryStatus::Queued,
                    due_ms: Some(at_ms),
                };
            }
        }
        self.next_seq += 1;
        Ok(())
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
            created_at: rfc3339_millis(self.record.created_at_ms),
            attempts: self
                .attempts
                .iter()
                .enumerate()
                .map(|(n, a)| AttemptView {
                    attempt: n as u32 + 1,
                    at: rfc3339_millis(a.at_ms),
                    status_code: a.code,
                    error: a.error.clone(),
                    latency_ms: a.latency_ms,
                })
                .collect(),
        }
    }
}

/// The logs of every callback of `decision` whose inline attempt gave `outcomes`: created, then
/// answered with what follows (queued ones enter the retry queue), counted in the metrics as
/// first attempts and as deliveries by status.
pub fn new_logs(
    decision: &Decision,
    outcomes: &[ActionOutcome],
    settings: &DeliverySettings,
) -> Vec<DeliveryWrite> {
    let mut logs = Vec::with_capacity(decision.deliveries.len());
    for planned in &decision.deliveries {
        let Some(outcome) = outcomes.iter().find(|o| o.delivery_id == planned.id) else {
            continue;
        };
        let next = settings.next_step(
            outcome.status,
            1,
            &outcome.attempt,
            outcome.attempt.at_ms + outcome.attempt.latency_ms,
        );
        let record = DeliveryRecord {
            id: planned.id.clone(),
            tenant: decision.tenant.clone(),
            decision_id: decision.id.clone(),
            action: planned.action.clone(),
            url: planned.url.clone(),
            body: planned.body.clone(),
            created_at_ms: decision.created_at_ms,
            expires_at_ms: decision.created_at_ms + settings.retention.as_millis() as u64,
        };
        crate::metrics::DELIVERY_ATTEMPTS
            .with_label_values(&["1", outcome_label(next)])
            .inc();
        crate::metrics::delivery_moved(None, Some(next.status()));
        logs.push(DeliveryWrite {
            tenant: decision.tenant.clone(),
            id: planned.id.clone(),
            lease: None,
            first_seq: 0,
            events: vec![
                DeliveryEvent::Created(record),
                DeliveryEvent::Answered {
                    attempt: outcome.attempt.clone(),
                    next,
                },
            ],
            from: None,
            to: placement(next),
        });
    }
    logs
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_schemas::{PlannedDelivery, Verdict};

    const T: u64 = 1_000_000;

    fn settings() -> DeliverySettings {
        DeliverySettings {
            max_retries: 2,
            retry_interval: Duration::from_secs(5),
            attempt_timeout: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(60),
            retention: Duration::from_secs(3_600),
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
            attempt_after_final(&[dead.clone(), redelivered, retry.clone(), dead]),
            None
        );
    }

    #[test]
    fn what_follows_an_attempt() {
        let s = settings();
        let next = |status, n, retry_after| s.next_step(status, n, &attempt(None, retry_after), T);
        assert_eq!(next(ActionStatus::Delivered, 1, None), NextStep::Delivered);
        assert_eq!(next(ActionStatus::Failed, 1, None), NextStep::Failed);
        assert_eq!(
            next(ActionStatus::Queued, 1, None),
            NextStep::RetryAt(T + 5_000)
        );
        // A later Retry-After wins; an earlier one does not shorten the interval.
        assert_eq!(
            next(ActionStatus::Queued, 1, Some(60_000)),
            NextStep::RetryAt(T + 60_000)
        );
        assert_eq!(
            next(ActionStatus::Queued, 1, Some(10)),
            NextStep::RetryAt(T + 5_000)
        );
        // The first attempt and `max_retries` more: the last one's failure is dead.
        assert_eq!(
            next(ActionStatus::Queued, 2, None),
            NextStep::RetryAt(T + 5_000)
        );
        assert_eq!(next(ActionStatus::Queued, 3, None), NextStep::Dead);
    }

    #[test]
    fn a_decisions_logs_fold_to_what_their_inline_attempts_gave() {
        let planned = |n: u8| PlannedDelivery {
            id: format!("msg_{n}"),
            action: format!("action_{n}"),
            url: "http://127.0.0.1:9/".into(),
            body: vec![n],
        };
        let decision = Decision {
            id: "dec_1".into(),
            tenant: "acme".into(),
            signal_type: "sim_swap".into(),
            verdict: Verdict::Deny,
            subject_hash: "ab".into(),
            created_at_ms: T,
            deliveries: vec![planned(1), planned(2)],
        };
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
                    due_ms: Some(T + 10 + 5_000)
                },
            ]
        );
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
            DeliveryEvent::Created(DeliveryRecord {
                id: "msg_1".into(),
                tenant: "acme".into(),
                decision_id: "dec_1".into(),
                action: "lock".into(),
                url: "http://127.0.0.1:9/".into(),
                body: vec![],
                created_at_ms: T,
                expires_at_ms: T + 1,
            }),
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
}
