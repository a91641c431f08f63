//! Once the claim is durable: its actions run, or its decision is offered to the subject's
//! claim (for a playbook decided once per subject); what they gave is the recovery point.

use std::sync::Arc;
use std::time::Duration;

use idem_schemas::{ActionOutcome, Decision, StoredResponse, SubjectLink};

use super::{ClaimSabotage, Context, Core, Offered};
use crate::claim::effect::{Effect, Effects, Offer};
use crate::claim::phase::{Invariant, Phase};
use crate::claim::{ClaimError, Reply, Request, ANY_PAYLOAD};
use crate::record::{self, Decided};
use crate::store::ClaimId;

impl<P> Core<P> {
    /// Runs the claim's actions, or offers its decision to the subject's claim; the first
    /// request stays waiting.
    pub(super) fn start_dispatch(
        &mut self,
        taken_over: bool,
        out: &mut Effects<P>,
    ) -> Result<(), ClaimError> {
        let claim = self.phase.claim().ok_or(Invariant::NoClaim("dispatch"))?;
        let decision = claim.decision.clone();
        match claim.subject {
            Some(link) => {
                self.offered = Some(Offered {
                    taken_over,
                    waited: false,
                });
                let offer = self.offer(link, decision, taken_over, None);
                out.push(Effect::Offer {
                    generation: self.generation,
                    offer: Box::new(offer),
                });
            }
            None => out.push(Effect::RunActions {
                generation: self.generation,
                decision: Box::new(decision),
                taken_over,
            }),
        }
        Ok(())
    }

    /// The offer of `decision` to the subject's claim `link`, which waits up to `wait` if that
    /// claim is in flight.
    fn offer(
        &self,
        link: SubjectLink,
        decision: Decision,
        taken_over: bool,
        wait: Option<Duration>,
    ) -> Offer {
        Offer {
            to: ClaimId {
                tenant: decision.tenant.clone(),
                digest: link.digest,
            },
            request: Request {
                fingerprint: ANY_PAYLOAD,
                wait,
                lasts: Some(Duration::from_millis(link.window_ms)),
                subject: None,
                from_a_claim: true,
                may_have_run: taken_over,
                queued: self.queued,
            },
            decision,
        }
    }

    /// The actions of `generation` ran and gave `outcomes`: the recovery point.
    pub fn dispatched(
        &mut self,
        cx: &Context,
        generation: u64,
        outcomes: Vec<ActionOutcome>,
        taken_over: bool,
        out: &mut Effects<P>,
    ) {
        if let Err(e) =
            self.record_recovery_point(cx, generation, Ran::Actions(outcomes), taken_over, out)
        {
            self.fail(Arc::new(e), out);
        }
    }

    /// What the subject's claim answered `generation`'s offer (or why it could not).
    pub fn offered(
        &mut self,
        cx: &Context,
        generation: u64,
        answer: Result<Reply, String>,
        out: &mut Effects<P>,
    ) {
        let running = generation == self.generation
            && matches!(self.phase, Phase::InFlight(_))
            && self.busy();
        let (true, Some(offered), Some(claim)) =
            (running, self.offered.clone(), self.phase.claim())
        else {
            return;
        };
        let error = match answer {
            // Another decision's response, or this one's (made before a crash, or just now):
            // either is this key's recovery point.
            Ok(Reply::First(answer) | Reply::Replayed(answer) | Reply::Awaited(answer)) => {
                let another = answer.decision_id != claim.decision.id;
                let ran = Ran::Subject(answer.response, another);
                match self.record_recovery_point(cx, generation, ran, offered.taken_over, out) {
                    Ok(()) => return,
                    Err(e) => e,
                }
            }
            // Another request holds the subject's claim: the first request is answered as a
            // duplicate of an in-flight key (or waits, if it asked to), and the offer is made
            // again, waiting up to `in_flight_timeout` at a time (a subject's claim in flight
            // is answered within an attempt's deadline, or taken over after that).
            Ok(Reply::InFlight) => {
                let (Some(link), decision) = (claim.subject, claim.decision.clone()) else {
                    return;
                };
                if !offered.waited {
                    if let Some(first) = self.first.take() {
                        self.awaiting_subject = true;
                        self.wait_or_refuse(cx, first.port, first.wait, first.capped, out);
                    }
                }
                self.offered = Some(Offered {
                    waited: true,
                    ..offered
                });
                let wait = Some(cx.settings.idempotency.in_flight_timeout);
                let offer = self.offer(link, decision, offered.taken_over, wait);
                out.push(Effect::Offer {
                    generation,
                    offer: Box::new(offer),
                });
                return;
            }
            // The key's first request fails, and its claim stays in flight for a take-over.
            Ok(other) => ClaimError::Subject(format!("{other:?}")),
            Err(e) => ClaimError::Subject(e),
        };
        self.fail(Arc::new(error), out);
    }

    /// Records the recovery point of `generation`: what ran for it.
    fn record_recovery_point(
        &mut self,
        cx: &Context,
        generation: u64,
        ran: Ran,
        taken_over: bool,
        out: &mut Effects<P>,
    ) -> Result<(), ClaimError> {
        let running = generation == self.generation
            && matches!(self.phase, Phase::InFlight(_))
            && self.busy();
        if !running {
            return Ok(());
        }
        out.push(Effect::Failpoint("dispatch.before_recovery_point"));
        let (Some(claim), Some(head)) = (self.phase.claim(), &self.head) else {
            return Err(Invariant::NoClaim("record the recovery point").into());
        };
        self.offered = None;
        let (head, decision) = (head.clone(), &claim.decision);
        let decided = match ran {
            // Through the subject's claim, the actions ran there (or another decision's did):
            // this key records the subject's response, and no delivery of its own.
            Ran::Subject(response, another) => {
                self.deduplicated = another;
                Decided::Subject {
                    head,
                    decision,
                    response,
                    another,
                }
            }
            // The first request is answered only once the recovery point is durable.
            Ran::Actions(outcomes) => Decided::RecoveryPoint {
                head,
                decision,
                outcomes,
                taken_over,
            },
        };
        let writes = record::writes(decided, &cx.settings)?;
        if cx.sabotage == Some(ClaimSabotage::AnswerBeforeRecoveryPoint) {
            if let Some(response) = writes.response().cloned() {
                let answer = self.answer_of(response);
                self.answer(Reply::First(answer), out);
            }
        }
        out.extend(writes.counts.into_iter().map(Effect::Count));
        out.push(Effect::Commit {
            generation,
            unit: writes.unit,
        });
        Ok(())
    }
}

/// What ran for a claim's decision.
enum Ran {
    /// Its actions, which gave these outcomes.
    Actions(Vec<ActionOutcome>),
    /// The subject's claim, which answered this response (another decision's, or not).
    Subject(StoredResponse, bool),
}
