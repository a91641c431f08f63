//! How a node carries out the claim core's effects, as the claim actor does: a request starts
//! the claim's actor from the store if the node has none, every input the actor feeds its core
//! is fed here, and each effect becomes a message (a unit to the store, a callback to the
//! receiver, an answer to a client, an offer to the subject's claim, news to the other nodes) or
//! stops the actor. A message for an actor that stopped, or for an incarnation that crashed, is
//! lost with it.

use std::sync::Arc;

use idem_actors::claim::core::{ClaimSabotage, Context, Core, Heard};
use idem_actors::claim::effect::{Effect, Effects};
use idem_actors::claim::{ClaimError, Reply};
use idem_actors::store::{ClaimLog, ClaimWrite};
use idem_schemas::{
    ActionOutcome, ActionStatus, AttemptRecord, ClaimEvent, Decision, PlannedDelivery, Verdict,
};

use super::scenario::{Sabotage, IN_FLIGHT_TIMEOUT};
use super::state::{At, LiveActor, Message, ReplyTo, Response, State};
use super::ClaimModel;
use crate::head_of;

impl ClaimModel {
    /// What node `node`'s cores read.
    fn context(&self, s: &State, node: usize) -> Context {
        Context {
            settings: self.settings.clone(),
            holder: s.nodes[node].epoch,
            sabotage: match self.sabotage {
                Some(Sabotage::AnswerBeforeRecoveryPoint) => {
                    Some(ClaimSabotage::AnswerBeforeRecoveryPoint)
                }
                Some(Sabotage::ReplaceOnExpiry) => Some(ClaimSabotage::ReplaceOnExpiry),
                _ => None,
            },
        }
    }

    /// The actor of claim `claim` on `node`, started from the store if the node has none (as
    /// the claim actor's `pre_start` does); `None` if its log does not fold.
    fn start(&self, s: &mut State, node: usize, claim: usize) -> Option<At> {
        let n = &mut s.nodes[node];
        if n.claims[claim].is_none() {
            let log = s.rows[claim].as_ref().map(|row| ClaimLog {
                events: match self.sabotage {
                    Some(Sabotage::DecideAgainOnRecovery) => decided_again(&row.events, n.epoch),
                    _ => row.events.clone(),
                },
                head: head_of(&self.claims[claim], &row.current),
            });
            let core = Core::new(self.claims[claim].clone(), log).ok()?;
            n.lives += 1;
            n.claims[claim] = Some(LiveActor {
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
        input: impl FnOnce(&mut Core<ReplyTo>, &Context, u64, &mut Effects<ReplyTo>),
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
    fn carry_out(&self, s: &mut State, at: At, claim: usize, out: Effects<ReplyTo>) {
        let mut stop = false;
        for effect in out {
            match effect {
                Effect::Commit { generation, unit } => {
                    if matches!(unit.claim_write(), Some(ClaimWrite::Start(..))) {
                        s.claims_made += 1;
                    }
                    s.net.push(Message::Commit {
                        at,
                        claim,
                        generation,
                        unit,
                    })
                }
                Effect::Complete(head) => s.net.push(Message::Complete { claim, head }),
                Effect::RunActions {
                    generation,
                    decision,
                    taken_over,
                } => {
                    for d in &decision.deliveries {
                        s.net.push(Message::Callback {
                            delivery: d.id.clone(),
                            body: d.body.clone(),
                        });
                    }
                    s.net.push(Message::ActionsDone {
                        at,
                        claim,
                        generation,
                        taken_over,
                    });
                }
                Effect::Offer { generation, offer } => {
                    if let Some(to) = self.claims.iter().position(|c| *c == offer.to) {
                        s.net.push(Message::Request {
                            node: at.node,
                            claim: to,
                            port: ReplyTo::Offer {
                                at,
                                claim,
                                generation,
                            },
                            request: offer.request,
                            offered: Some(offer.decision),
                        });
                    }
                }
                Effect::Reply(ReplyTo::Client { key }, reply) => {
                    s.answer(key, Response::of(&reply))
                }
                Effect::Reply(
                    ReplyTo::Offer {
                        at,
                        claim,
                        generation,
                    },
                    reply,
                ) => s.net.push(Message::Offered {
                    at,
                    claim,
                    generation,
                    answer: Response::of(&reply),
                }),
                Effect::StartTimer { waiter, wait } => {
                    let after = (wait >= IN_FLIGHT_TIMEOUT).then_some(s.timeouts);
                    s.net.push(Message::WaitOver {
                        at,
                        claim,
                        waiter,
                        after,
                    })
                }
                Effect::AskHolder(holder) => {
                    if let Some(node) = s.nodes.iter().position(|n| n.epoch == holder) {
                        s.net.push(Message::Asked { node, claim });
                    }
                }
                Effect::AnnounceAnswer => announce(s, at.node, claim),
                Effect::Reread => s.net.push(Message::Reread { at, claim }),
                // The retry worker, and the delivery actors a queued decision starts, are always
                // ready (see `ClaimAction::Retry`); counts, logs and failpoints change nothing
                // here.
                // Made within the request's step (see `Message::Request`).
                Effect::Decide { .. }
                | Effect::WakeRetries
                | Effect::StartQueued
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
                if let Some(Effect::<ReplyTo>::AnnounceAnswer) = heard.without_actor() {
                    announce(s, node, claim);
                }
            }
        }
    }

    pub(super) fn deliver(&self, s: &mut State, msg: Message, ok: bool) {
        match msg {
            Message::Request {
                node,
                claim,
                port,
                request,
                offered,
            } => {
                // An offer from an actor that is gone went with it (a call inside the process).
                if let ReplyTo::Offer {
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
            Message::Commit {
                at,
                claim,
                generation,
                unit,
            } => {
                let written = self.store(s, at.epoch, claim, &unit);
                s.net.push(Message::Committed {
                    at,
                    claim,
                    generation,
                    written,
                });
            }
            Message::Complete { claim, head } => {
                if let Some(row) = s.rows[claim].as_mut() {
                    if row.current.generation == head.generation {
                        row.current.completed = true;
                    }
                }
            }
            Message::Committed {
                at,
                claim,
                generation,
                written,
            } if Self::alive(s, at, claim) => self.drive(s, at, claim, |core, cx, now, out| {
                core.committed(cx, generation, Ok(written), now, out)
            }),
            Message::ActionsDone {
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
            Message::Offered {
                at,
                claim,
                generation,
                answer,
            } if Self::alive(s, at, claim) => self.drive(s, at, claim, |core, cx, _, out| {
                core.offered(cx, generation, Ok(answer.reply()), out)
            }),
            Message::WaitOver {
                at, claim, waiter, ..
            } if Self::alive(s, at, claim) => {
                self.drive(s, at, claim, |core, _, _, out| core.wait_over(waiter, out))
            }
            Message::Reread { at, claim } if Self::alive(s, at, claim) => {
                let Some(row) = s.rows[claim].as_ref() else {
                    return;
                };
                let log = ClaimLog {
                    events: row.events.clone(),
                    head: head_of(&self.claims[claim], &row.current),
                };
                self.drive(s, at, claim, |core, _, _, out| core.reread(log, out))
            }
            // News of a claim goes to its actor on the node, if it has one.
            Message::Asked { node, claim } => self.hear(s, node, claim, Heard::Asked),
            Message::Answered { node, claim } => self.hear(s, node, claim, Heard::Answered),
            // For an actor that is gone.
            Message::Committed { .. }
            | Message::ActionsDone { .. }
            | Message::Offered { .. }
            | Message::WaitOver { .. }
            | Message::Reread { .. } => {}
            Message::Callback { delivery, body } => s.callbacks.push((delivery, body)),
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

/// The decision a claim of key `key` makes at `generation`: its id, its callback's id and
/// bytes, and the rule that made it, which names the generation: the rules are evaluated when
/// a generation decides, and may have changed (a reload) since an earlier one.
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
        rule: Some(format!("rule_{generation}")),
        rule_errors: Vec::new(),
    }
}

/// `events` with their claim's decision evaluated again by a node of epoch `epoch` (the
/// [`Sabotage::DecideAgainOnRecovery`] sabotage): the same id and callbacks, another verdict
/// and the rule in force there, as after a reload that changed the rule.
fn decided_again(events: &[ClaimEvent], epoch: u64) -> Vec<ClaimEvent> {
    events
        .iter()
        .cloned()
        .map(|event| match event {
            ClaimEvent::Claimed(mut claim) => {
                claim.decision.verdict = Verdict::Review;
                claim.decision.rule = Some(format!("rule_reloaded_on_{epoch}"));
                ClaimEvent::Claimed(claim)
            }
            other => other,
        })
        .collect()
}

/// Tells the nodes other than `node` that claim `claim` has a durable answer.
fn announce(s: &mut State, node: usize, claim: usize) {
    for other in (0..s.nodes.len()).filter(|&n| n != node) {
        s.net.push(Message::Answered { node: other, claim });
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
