//! The claim state machine, with no actor, store or clock in it: `Phase::apply` folds a claim's
//! log (`in_flight → dispatched → completed`, and a new generation after expiry), `step` says
//! what a request for the key leads to in a phase, and `Phase::after_commit` what follows once
//! a phase is durable. The claim actor runs exactly these functions, so their tests are the
//! protocol's.

use idem_schemas::{ActionOutcome, Claim, ClaimEvent, StoredResponse};

use crate::store::rule;

/// Where a claim stands: the fold of its log.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Never claimed (or swept).
    Free,
    /// Claimed; the actions may be running.
    InFlight(Claim),
    /// The actions ran; their outcomes and the response are recorded (the recovery point).
    Dispatched(Claim, Vec<ActionOutcome>, StoredResponse),
    /// The response was handed out.
    Completed(Claim, StoredResponse),
}

/// A log whose events do not follow `in_flight → dispatched → completed`.
#[derive(Debug, PartialEq, thiserror::Error)]
#[error("claim log out of order: {event} after {phase}")]
pub struct InvalidTransition {
    phase: &'static str,
    event: &'static str,
}

/// A claim actor asked to do what its phase does not allow: a bug, never input.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum Invariant {
    /// `completed` recorded before the recovery point.
    #[error("complete before the recovery point")]
    CompleteBeforeRecoveryPoint,
    /// Actions run, or a commit reported, for a claim that does not exist.
    #[error("no claim to {0}")]
    NoClaim(&'static str),
    /// A submission asked to decide twice.
    #[error("the submission has decided already")]
    DecidedTwice,
}

impl Phase {
    /// The one transition function of the claim state machine.
    pub fn apply(self, event: ClaimEvent) -> Result<Phase, InvalidTransition> {
        match (self, event) {
            // A new generation (after expiry) starts the machine again from any phase.
            (_, ClaimEvent::Claimed(claim)) => Ok(Phase::InFlight(claim)),
            (Phase::InFlight(claim), ClaimEvent::Dispatched { outcomes, response }) => {
                Ok(Phase::Dispatched(claim, outcomes, response))
            }
            (Phase::Dispatched(claim, _, response), ClaimEvent::Completed) => {
                Ok(Phase::Completed(claim, response))
            }
            (phase, event) => Err(InvalidTransition {
                phase: phase.name(),
                event: event.name(),
            }),
        }
    }

    /// The phase's name, as the contract says it.
    pub fn name(&self) -> &'static str {
        match self {
            Phase::Free => "free",
            Phase::InFlight(_) => "in_flight",
            Phase::Dispatched(..) => "dispatched",
            Phase::Completed(..) => "completed",
        }
    }

    /// The claim, once there is one.
    pub fn claim(&self) -> Option<&Claim> {
        match self {
            Phase::Free => None,
            Phase::InFlight(c) | Phase::Dispatched(c, ..) | Phase::Completed(c, _) => Some(c),
        }
    }

    /// The response recorded for the claim, once there is one (the recovery point's).
    pub fn response(&self) -> Option<&StoredResponse> {
        match self {
            Phase::Dispatched(_, _, response) | Phase::Completed(_, response) => Some(response),
            Phase::Free | Phase::InFlight(_) => None,
        }
    }

    /// What follows once this phase is durable, for the request waiting on it.
    pub fn after_commit(&self) -> Result<AfterCommit, Invariant> {
        match self {
            // The claim is durable: the actions may run.
            Phase::InFlight(_) => Ok(AfterCommit::RunActions),
            // The recovery point is durable: complete, and answer with its response.
            Phase::Dispatched(..) => Ok(AfterCommit::Complete),
            // One write (no actions, or queued ones): claim, recovery point and completion are durable.
            Phase::Completed(_, response) => Ok(AfterCommit::Answer(response.clone())),
            Phase::Free => Err(Invariant::NoClaim("commit")),
        }
    }
}

/// What follows a durable phase.
#[derive(Debug, Clone, PartialEq)]
pub enum AfterCommit {
    /// Run the claim's actions.
    RunActions,
    /// Mark the claim completed and answer with the recovery point's response.
    Complete,
    /// Answer with this response.
    Answer(StoredResponse),
}

/// What a request for the key leads to.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Claim the key (free, or its claim expired).
    Claim,
    /// Run the stored decision's actions again: the claim's holder is gone.
    TakeOver,
    /// Finish from the recovery point, and answer with its response as a replay.
    Finish,
    /// Answer with the stored response, as a replay.
    Replay(StoredResponse),
    /// Another request holds the key right now (409).
    InFlight,
    /// The key's claim has expired but its decision is still running, and this request has
    /// another payload: 409 at once, never a wait (what it would wait for is not its answer).
    /// The key is free once that decision completes, or has been in flight too long.
    Expiring,
    /// The key was used with another payload (422).
    Mismatch,
}

/// Who may take over an `in_flight` claim: not its holder while it lives.
#[derive(Debug, Clone, Copy)]
pub struct Holder {
    /// This process's epoch, the holder of the claims it makes.
    pub epoch: u64,
    /// After this long in flight, a claim may be taken over even from a live holder.
    pub in_flight_timeout_ms: u64,
    /// How long an expired claim still running keeps its key ([`rule::replaceable`]):
    /// `in_flight_timeout`, except in a sabotaged run.
    pub expired_kept_ms: u64,
}

impl Holder {
    /// The holder of the process of `epoch`, under `idempotency`.
    pub fn of(epoch: u64, idempotency: &crate::settings::IdempotencySettings) -> Holder {
        let in_flight_timeout_ms = idempotency.in_flight_timeout_ms();
        Holder {
            epoch,
            in_flight_timeout_ms,
            expired_kept_ms: in_flight_timeout_ms,
        }
    }
}

/// What a request whose body has `fingerprint` leads to at `now_ms`, in `phase`. `waiting` is
/// the fingerprint of the key's first request while it waits for its answer: until then,
/// nothing in the phase is a durable result to replay or a claim to take over.
pub fn step(
    phase: &Phase,
    waiting: Option<&[u8; 32]>,
    fingerprint: &[u8; 32],
    now_ms: u64,
    holder: Holder,
) -> Step {
    let same = |other: &[u8; 32]| other == fingerprint;
    if let Some(first) = waiting {
        return match same(first) {
            true => Step::InFlight,
            false => Step::Mismatch,
        };
    }
    let Some(claim) = phase.claim() else {
        return Step::Claim;
    };
    let current = rule::Current {
        generation: claim.claimed_at_ms,
        expires_at_ms: claim.expires_at_ms,
        writes: 0,
        completed: matches!(phase, Phase::Completed(..)),
        claimed_at_ms: claim.claimed_at_ms,
    };
    if rule::replaceable(&current, now_ms, holder.expired_kept_ms) {
        return Step::Claim;
    }
    if !same(&claim.fingerprint) {
        return match now_ms >= claim.expires_at_ms {
            true => Step::Expiring,
            false => Step::Mismatch,
        };
    }
    match phase {
        Phase::Completed(_, response) => Step::Replay(response.clone()),
        Phase::Dispatched(..) => Step::Finish,
        Phase::InFlight(claim) => {
            let holder_gone = claim.holder != holder.epoch
                || now_ms.saturating_sub(claim.claimed_at_ms) >= holder.in_flight_timeout_ms;
            match holder_gone {
                true => Step::TakeOver,
                false => Step::InFlight,
            }
        }
        Phase::Free => Step::Claim,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_schemas::{ActionStatus, AttemptRecord, Decision, Verdict};

    const EPOCH: u64 = 7;
    const T: u64 = 1_000_000;
    const TTL: u64 = 60_000;
    const HOLDER: Holder = Holder {
        epoch: EPOCH,
        in_flight_timeout_ms: 30_000,
        expired_kept_ms: 30_000,
    };

    fn claim(fingerprint: u8) -> Claim {
        Claim {
            fingerprint: [fingerprint; 32],
            holder: EPOCH,
            claimed_at_ms: T,
            expires_at_ms: T + TTL,
            decision: Decision {
                id: "dec_1".into(),
                tenant: "acme".into(),
                signal_type: "sim_swap".into(),
                source: None,
                verdict: Verdict::Deny,
                subject_hash: "ab".into(),
                created_at_ms: T,
                deliveries: vec![],
                trace: None,
                rule: None,
                rule_errors: Vec::new(),
            },
            subject: None,
        }
    }

    fn response() -> StoredResponse {
        StoredResponse {
            status: 201,
            body: b"{\"decision\":\"deny\"}".to_vec(),
            trace: None,
        }
    }

    fn outcomes() -> Vec<ActionOutcome> {
        vec![ActionOutcome {
            delivery_id: "msg_1".into(),
            status: ActionStatus::Delivered,
            attempt: AttemptRecord {
                at_ms: T,
                code: Some(200),
                error: None,
                latency_ms: 3,
                retry_after_ms: None,
            },
        }]
    }

    fn phases() -> [Phase; 4] {
        [
            Phase::Free,
            Phase::InFlight(claim(1)),
            Phase::Dispatched(claim(1), outcomes(), response()),
            Phase::Completed(claim(1), response()),
        ]
    }

    fn events() -> [ClaimEvent; 3] {
        [
            ClaimEvent::Claimed(claim(2)),
            ClaimEvent::Dispatched {
                outcomes: outcomes(),
                response: response(),
            },
            ClaimEvent::Completed,
        ]
    }

    /// Every (phase, event) pair: what `apply` makes of it, and what follows its commit.
    #[test]
    fn every_phase_and_event() {
        use AfterCommit::*;
        // Rows are phases (free, in_flight, dispatched, completed); columns are events
        // (claimed, dispatched, completed). `None` is a refused transition.
        let table: [[Option<(&str, AfterCommit)>; 3]; 4] = [
            [Some(("in_flight", RunActions)), None, None],
            [
                Some(("in_flight", RunActions)),
                Some(("dispatched", Complete)),
                None,
            ],
            [
                Some(("in_flight", RunActions)),
                None,
                Some(("completed", Answer(response()))),
            ],
            [Some(("in_flight", RunActions)), None, None],
        ];
        for (phase, row) in phases().into_iter().zip(table) {
            for (event, expected) in events().into_iter().zip(row) {
                let (from, name) = (phase.name(), event.name());
                let after = phase.clone().apply(event.clone());
                match (after, expected) {
                    (Ok(next), Some((to, follows))) => {
                        assert_eq!(next.name(), to, "{from} + {name}");
                        assert_eq!(next.after_commit(), Ok(follows), "{from} + {name}");
                        // A new generation carries the new claim, never the old one.
                        if let ClaimEvent::Claimed(new) = event {
                            assert_eq!(next.claim(), Some(&new), "{from} + {name}");
                        }
                    }
                    (Err(refused), None) => {
                        assert_eq!(
                            refused.to_string(),
                            format!("claim log out of order: {name} after {from}")
                        );
                    }
                    (got, want) => panic!("{from} + {name}: got {got:?}, want {want:?}"),
                }
            }
        }
        assert_eq!(
            Phase::Free.after_commit(),
            Err(Invariant::NoClaim("commit"))
        );
    }

    /// The dispatched phase keeps the recovery point's outcomes and response; completion keeps
    /// the response, the bytes every later answer carries.
    #[test]
    fn the_recovery_point_carries_the_response() {
        let [_, dispatched, completed] = events();
        let phase = Phase::InFlight(claim(1))
            .apply(dispatched)
            .expect("dispatched");
        assert_eq!(phase, Phase::Dispatched(claim(1), outcomes(), response()));
        let phase = phase.apply(completed).expect("completed");
        assert_eq!(phase, Phase::Completed(claim(1), response()));
    }

    /// What a request leads to, in every phase, for the same and another payload.
    #[test]
    fn steps() {
        let now = T + 10;
        let same = [1; 32];
        let other = [9; 32];
        let expected = [
            (Step::Claim, Step::Claim),
            (Step::InFlight, Step::Mismatch),
            (Step::Finish, Step::Mismatch),
            (Step::Replay(response()), Step::Mismatch),
        ];
        for (phase, (with_same, with_other)) in phases().iter().zip(expected) {
            assert_eq!(
                step(phase, None, &same, now, HOLDER),
                with_same,
                "{phase:?}"
            );
            assert_eq!(
                step(phase, None, &other, now, HOLDER),
                with_other,
                "{phase:?}"
            );
            // While the first request waits, every other request is in flight or refused.
            assert_eq!(step(phase, Some(&same), &same, now, HOLDER), Step::InFlight);
            assert_eq!(
                step(phase, Some(&same), &other, now, HOLDER),
                Step::Mismatch
            );
            // After expiry the key is free again, whatever the payload.
            if phase.claim().is_some() {
                assert_eq!(step(phase, None, &other, T + TTL, HOLDER), Step::Claim);
            }
        }
    }

    /// A claim whose window is shorter than `in_flight_timeout` holds its key past expiry
    /// until it completes, or has been in flight that long: the same payload waits for its
    /// answer, another is refused at once, and neither makes a second decision meanwhile.
    #[test]
    fn an_expired_claim_still_running_holds_its_key() {
        let short = Claim {
            expires_at_ms: T + 1_000,
            ..claim(1)
        };
        let (same, other) = ([1; 32], [9; 32]);
        let expired = T + 1_000;
        let running = [
            (Phase::InFlight(short.clone()), Step::InFlight),
            (
                Phase::Dispatched(short.clone(), outcomes(), response()),
                Step::Finish,
            ),
        ];
        for (phase, with_same) in running {
            assert_eq!(step(&phase, None, &same, expired, HOLDER), with_same);
            assert_eq!(step(&phase, None, &other, expired, HOLDER), Step::Expiring);
            assert_eq!(
                step(&phase, None, &other, expired - 1, HOLDER),
                Step::Mismatch
            );
            let late = T + HOLDER.in_flight_timeout_ms;
            assert_eq!(step(&phase, None, &other, late - 1, HOLDER), Step::Expiring);
            assert_eq!(step(&phase, None, &other, late, HOLDER), Step::Claim);
        }
        // Completed, it is free once expired.
        let done = Phase::Completed(short, response());
        assert_eq!(step(&done, None, &other, expired, HOLDER), Step::Claim);
        assert_eq!(step(&done, None, &same, expired, HOLDER), Step::Claim);
    }

    /// An in-flight claim is taken over when its holder is another process, or when it has
    /// been in flight for `in_flight_timeout`; not before.
    #[test]
    fn take_over_only_when_the_holder_is_gone() {
        let phase = Phase::InFlight(claim(1));
        let fp = [1; 32];
        let late = T + HOLDER.in_flight_timeout_ms;
        assert_eq!(step(&phase, None, &fp, late - 1, HOLDER), Step::InFlight);
        assert_eq!(step(&phase, None, &fp, late, HOLDER), Step::TakeOver);
        let restarted = Holder {
            epoch: EPOCH + 1,
            ..HOLDER
        };
        assert_eq!(step(&phase, None, &fp, T + 1, restarted), Step::TakeOver);
    }
}
