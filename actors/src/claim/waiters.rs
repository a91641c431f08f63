//! The requests that wait for a key's answer instead of a 409 (`Prefer: wait`). A waiter is an
//! answer's destination kept in the claim's state and a timer that tells the claim when its wait
//! is over: it holds no thread and no lock. Waiters are answered all at once, the moment the
//! key's response is durable; one whose wait runs out first gets 409. On a store shared by
//! several nodes, the same bookkeeping says whether a holder on another node has been asked to
//! tell this one, and whether another node waits on this one's answer.

use std::time::Duration;

use super::effect::{Effect, Effects};
use super::{Answer, Reply};

/// A key's waiters, each answered on its `P`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Waiters<P> {
    /// In arrival order, each with its id.
    waiting: Vec<(u64, P)>,
    /// The id of the next waiter.
    next: u64,
    /// Another node has requests waiting for this key's answer: tell it once it is durable.
    pub remote: bool,
    /// The key's holder on another node has been asked to say when it is answered.
    pub asked_holder: bool,
}

impl<P> Default for Waiters<P> {
    fn default() -> Self {
        Waiters {
            waiting: Vec::new(),
            next: 0,
            remote: false,
            asked_holder: false,
        }
    }
}

impl<P> Waiters<P> {
    /// Whether no request waits here.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Where the waiters are to be answered, in arrival order.
    pub fn ports(&self) -> impl Iterator<Item = &P> {
        self.waiting.iter().map(|(_, port)| port)
    }

    /// Keeps `port` waiting for up to `wait`, if fewer than `max` wait; answers it 409 if not.
    pub fn keep(&mut self, port: P, wait: Duration, max: usize, out: &mut Effects<P>) {
        if self.waiting.len() >= max {
            return out.push(Effect::Reply(port, Reply::InFlight));
        }
        let waiter = self.next;
        self.next += 1;
        self.waiting.push((waiter, port));
        out.push(Effect::StartTimer { waiter, wait });
    }

    /// Waiter `id`'s wait is over: 409, if it still waits.
    pub fn over(&mut self, id: u64, out: &mut Effects<P>) {
        if let Some(at) = self.waiting.iter().position(|(w, _)| *w == id) {
            let (_, port) = self.waiting.remove(at);
            out.push(Effect::Reply(port, Reply::InFlight));
        }
        // With no one left waiting, a later waiter asks the holder afresh.
        if self.waiting.is_empty() {
            self.asked_holder = false;
        }
    }

    /// Answers every waiter with the key's durable `answer`; whether another node waits for it
    /// too (and is to be told).
    pub fn release(&mut self, answer: &Answer, out: &mut Effects<P>) -> bool {
        for (_, port) in self.waiting.drain(..) {
            out.push(Effect::Reply(port, Reply::Awaited(answer.clone())));
        }
        self.asked_holder = false;
        std::mem::take(&mut self.remote)
    }

    /// Answers every waiter with `reply`: 409 when the key has no answer to give them, 422 when
    /// the key turned out to hold another payload.
    pub fn answer_all(&mut self, reply: Reply, out: &mut Effects<P>) {
        for (_, port) in self.waiting.drain(..) {
            out.push(Effect::Reply(port, reply.clone()));
        }
        self.asked_holder = false;
    }
}
