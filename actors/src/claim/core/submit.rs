//! A request for the key, and the decision it makes if it wins the claim: what the phase says
//! it gets (a replay, 409, 422, the claim, a take-over, the recovery point finished), then, once
//! its decision is made, the claim's first write.

use std::sync::Arc;

use idem_schemas::{Claim, Decision};

use super::{Context, Core, Deciding, First};
use crate::claim::effect::{Effect, Effects};
use crate::claim::phase::{self, Invariant, Step};
use crate::claim::{ClaimError, Reply, Request};
use crate::record::{self, Decided};
use crate::store::Unit;

impl<P> Core<P> {
    /// A request for the key, made at `now_ms`, answered on `port`. If it wins the claim, the
    /// core asks for its decision ([`Effect::Decide`]) and goes on once it is [`Core::decided`]:
    /// a duplicate, a replay or a refused payload never pays for one.
    pub fn submit(
        &mut self,
        cx: &Context,
        request: &Request,
        port: P,
        now_ms: u64,
        out: &mut Effects<P>,
    ) {
        let waiting = self.first.as_ref().map(|f| &f.fingerprint);
        let step = phase::step(
            &self.phase,
            waiting,
            &request.fingerprint,
            now_ms,
            cx.holder(),
        );
        let done = match step {
            Step::Replay(response) => {
                let answer = self.answer_of(response);
                out.push(Effect::Reply(port, Reply::Replayed(answer)));
                Ok(())
            }
            Step::InFlight => {
                self.wait_or_refuse(cx, port, request.wait, !request.from_a_claim, out);
                Ok(())
            }
            Step::Mismatch => {
                out.push(Effect::Reply(port, Reply::Mismatch));
                Ok(())
            }
            Step::Expiring => {
                out.push(Effect::Reply(port, Reply::InFlight));
                Ok(())
            }
            Step::Claim => {
                // A generation is the claim time, strictly increasing per key.
                let generation = now_ms.max(self.generation + 1);
                self.first = Some(First::of(request, port));
                self.deciding = Some(Deciding {
                    generation,
                    request: request.clone(),
                });
                out.push(Effect::Decide { generation });
                Ok(())
            }
            // The holder looks gone from here; the store has the last word (on a shared store,
            // the holder may be another node that lives).
            Step::TakeOver => match self.head.clone() {
                Some(head) => {
                    self.queued = request.queued;
                    self.first = Some(First::of(request, port));
                    out.push(Effect::Commit {
                        generation: self.generation,
                        unit: Unit::new().take_over_claim(head),
                    });
                    Ok(())
                }
                None => {
                    let e = Arc::new(ClaimError::from(Invariant::NoClaim("take over")));
                    out.push(Effect::Reply(port, Reply::Failed(e.clone())));
                    Err(e)
                }
            },
            // The recovery point is durable, and with it the delivery logs (written before it,
            // in the same unit): complete with the recorded response. It was stored before this
            // request came: the answer is a replay.
            Step::Finish => match self.complete(out) {
                Ok(response) => {
                    let answer = self.answer_of(response);
                    self.release_waiters(&answer, out);
                    out.push(Effect::Reply(port, Reply::Replayed(answer)));
                    Ok(())
                }
                Err(e) => {
                    let e = Arc::new(e);
                    out.push(Effect::Reply(port, Reply::Failed(e.clone())));
                    Err(e)
                }
            },
        };
        if let Err(e) = done {
            self.fail(e, out);
        }
    }

    /// The decision the first request asked for at `generation` ([`Effect::Decide`]): the claim
    /// of a new generation with it, or, if it could not be made, nothing claimed (the key stays
    /// as it was) and the first request failed.
    pub fn decided(
        &mut self,
        cx: &Context,
        generation: u64,
        decision: Result<Decision, ClaimError>,
        out: &mut Effects<P>,
    ) {
        let Some(Deciding {
            request,
            generation: _,
        }) = self.deciding.take_if(|d| d.generation == generation)
        else {
            return;
        };
        let decision = match decision {
            Ok(decision) => decision,
            Err(e) => {
                self.answer(Reply::Failed(Arc::new(e)), out);
                self.waiters.answer_all(Reply::InFlight, out);
                return;
            }
        };
        if let Err(e) = self.claim(cx, &request, generation, decision, out) {
            self.fail(Arc::new(e), out);
        }
    }

    /// Claims the key for `request`: generation `generation`, with its `decision`.
    fn claim(
        &mut self,
        cx: &Context,
        request: &Request,
        generation: u64,
        decision: Decision,
        out: &mut Effects<P>,
    ) -> Result<(), ClaimError> {
        self.generation = generation;
        self.deduplicated = false;
        self.may_have_run = request.may_have_run;
        self.queued = request.queued;
        self.offered = None;
        let lasts = request.lasts.unwrap_or(cx.settings.idempotency.key_ttl);
        let inline = !decision.deliveries.is_empty() && !request.queued;
        let claim = Claim {
            fingerprint: request.fingerprint,
            holder: cx.holder,
            claimed_at_ms: generation,
            expires_at_ms: generation + lasts.as_millis() as u64,
            decision,
            subject: request.subject,
        };
        // Claimed, recorded and completed at once when nothing runs in between (no callbacks,
        // or queued ones) and no subject's claim is to be asked first.
        let at_once = !inline && claim.subject.is_none();
        let writes = record::writes(
            Decided::Claimed {
                id: self.id.clone(),
                claim,
                at_once,
                may_have_run: request.may_have_run,
            },
            &cx.settings,
        )?;
        out.extend(writes.counts.into_iter().map(Effect::Count));
        out.push(Effect::Commit {
            generation,
            unit: writes.unit,
        });
        Ok(())
    }
}
