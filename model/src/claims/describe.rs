//! A step of the claim model in words, as a counterexample prints it: who takes which message,
//! what the store is asked to write and what it answers.

use idem_actors::store::{ClaimWrite, LogHead, Written};
use idem_schemas::ClaimEvent;

use super::state::{ClaimAction, Message, ReplyTo, State};

impl State {
    /// `action`, taken from this state, in a few words.
    pub fn describe(&self, action: &ClaimAction) -> String {
        let head = |h: &LogHead| format!("gen {} at {}", h.generation, h.next);
        match action {
            ClaimAction::Send { key, node } => format!("client sends key {key} to node {node}"),
            ClaimAction::Deliver { msg, ok } => match self.net.get(*msg) {
                Some(Message::Request {
                    node, claim, port, ..
                }) => match port {
                    ReplyTo::Client { key } => {
                        format!("node {node} takes key {key}'s request (claim {claim})")
                    }
                    ReplyTo::Offer { claim: from, .. } => {
                        format!("node {node}'s claim {from} offers its decision to claim {claim}")
                    }
                },
                Some(Message::Commit {
                    at, claim, unit, ..
                }) => {
                    let node = at.node;
                    let write = match unit.claim_write() {
                        Some(ClaimWrite::Start(_, events)) => match events.first() {
                            Some(ClaimEvent::Claimed(c)) if events.len() == 3 => {
                                format!("start gen {} with its recovery point", c.claimed_at_ms)
                            }
                            Some(ClaimEvent::Claimed(c)) => {
                                format!("start gen {}", c.claimed_at_ms)
                            }
                            _ => "start".into(),
                        },
                        Some(ClaimWrite::Append(h, _)) => {
                            format!("append the recovery point to {}", head(h))
                        }
                        Some(ClaimWrite::TakeOver(h)) => format!("take over {}", head(h)),
                        None => "deliveries".into(),
                    };
                    format!("store gets node {node}'s write for claim {claim}: {write}")
                }
                Some(Message::Complete { claim, head: h }) => {
                    format!("store gets claim {claim}'s completion of {}", head(h))
                }
                Some(Message::Committed {
                    at, claim, written, ..
                }) => {
                    let node = at.node;
                    let written = match written {
                        Written::Claimed(h, _) => format!("claimed {}", head(h)),
                        Written::Appended(h, _) => format!("appended, now {}", head(h)),
                        Written::Held(log) => format!("held by {}", head(&log.head)),
                        Written::TakenOver(h) => format!("taken over as {}", head(h)),
                        Written::Fenced => "fenced".into(),
                        Written::Nothing => "nothing".into(),
                    };
                    format!("node {node} hears for claim {claim}: {written}")
                }
                Some(Message::Callback { delivery, .. }) => format!("receiver gets {delivery}"),
                Some(Message::ActionsDone { at, claim, .. }) => format!(
                    "node {}'s actions for claim {claim} ran ({})",
                    at.node,
                    if *ok {
                        "delivered"
                    } else {
                        "receiver down: queued"
                    }
                ),
                Some(Message::Offered {
                    at, claim, answer, ..
                }) => format!(
                    "node {}'s claim {claim} hears its subject's {answer:?}",
                    at.node
                ),
                Some(Message::WaitOver { at, claim, .. }) => format!(
                    "a waiter's deadline passes at node {}'s claim {claim}",
                    at.node
                ),
                Some(Message::Asked { node, claim }) => {
                    format!("node {node} is asked for claim {claim}")
                }
                Some(Message::Answered { node, claim }) => {
                    format!("node {node} hears claim {claim} answered")
                }
                Some(Message::Reread { at, claim }) => {
                    format!("node {} reads claim {claim} again", at.node)
                }
                None => "nothing".into(),
            },
            ClaimAction::Retry(n) => match self.deliveries.get(*n) {
                Some(d) => format!("the retry worker makes {}", d.id),
                None => "nothing".into(),
            },
            ClaimAction::Crash(n) => format!("node {n} crashes"),
            ClaimAction::Stall(n) => format!("node {n} stalls past its heartbeat"),
            ClaimAction::Wake(n) => format!("node {n} wakes"),
            ClaimAction::TimeOut => "in_flight_timeout passes".into(),
        }
    }
}
