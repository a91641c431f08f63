//! The requests that wait for a key's answer instead of a 409 (`Prefer: wait`). A waiter is a
//! reply port kept in its claim actor's state and a timer that tells the actor when its wait is
//! over: it holds no thread and no lock. Waiters are answered all at once, the moment the key's
//! response is durable; one whose wait runs out first gets 409. On a store shared by several
//! nodes, the same bookkeeping says whether a holder on another node has been asked to tell this
//! one, and whether another node waits on this one's answer.

use std::time::Duration;

use idem_schemas::StoredResponse;
use ractor::{ActorRef, RpcReplyPort};

use super::{ClaimMsg, Reply};

/// One waiting request.
struct Waiter {
    id: u64,
    reply: RpcReplyPort<Reply>,
}

/// A key's waiters.
#[derive(Default)]
pub(super) struct Waiters {
    /// In arrival order.
    waiting: Vec<Waiter>,
    /// The id of the next waiter.
    next: u64,
    /// Another node has requests waiting for this key's answer: tell it once it is durable.
    pub remote: bool,
    /// The key's holder on another node has been asked to say when it is answered.
    pub asked_holder: bool,
}

impl Waiters {
    /// Whether no request waits here.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Keeps `reply` waiting for up to `wait`, if fewer than `max` wait; gives it back if not.
    pub fn keep(
        &mut self,
        myself: &ActorRef<ClaimMsg>,
        reply: RpcReplyPort<Reply>,
        wait: Duration,
        max: usize,
    ) -> Option<RpcReplyPort<Reply>> {
        if self.waiting.len() >= max {
            return Some(reply);
        }
        let id = self.next;
        self.next += 1;
        self.waiting.push(Waiter { id, reply });
        myself.send_after(wait, move || ClaimMsg::WaitOver(id));
        None
    }

    /// Waiter `id`'s wait is over: 409, if it still waits.
    pub fn over(&mut self, id: u64) {
        if let Some(at) = self.waiting.iter().position(|w| w.id == id) {
            let _ = self.waiting.remove(at).reply.send(Reply::InFlight);
        }
        // With no one left waiting, a later waiter asks the holder afresh.
        if self.waiting.is_empty() {
            self.asked_holder = false;
        }
    }

    /// Answers every waiter with the key's durable `response`; whether another node waits for
    /// it too (and is to be told).
    pub fn release(&mut self, response: &StoredResponse) -> bool {
        for waiter in self.waiting.drain(..) {
            let _ = waiter.reply.send(Reply::Awaited(response.clone()));
        }
        self.asked_holder = false;
        std::mem::take(&mut self.remote)
    }

    /// Answers every waiter with `reply`: 409 when the key has no answer to give them, 422 when
    /// the key turned out to hold another payload.
    pub fn answer_all(&mut self, reply: Reply) {
        for waiter in self.waiting.drain(..) {
            let _ = waiter.reply.send(reply.clone());
        }
        self.asked_holder = false;
    }
}
