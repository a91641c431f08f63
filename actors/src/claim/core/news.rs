//! What is heard while a claim waits: a waiter's deadline, and news from another node sharing
//! the store (a node asking to be told when a claim held here is answered, or telling that one
//! held there is), with the claim read again for the waiters here.

use std::sync::Arc;

use super::Core;
use crate::claim::effect::{Effect, Effects};
use crate::store::{ClaimId, ClaimLog, ClaimNews};

/// News from another node sharing the store, as the node it concerns hears it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Heard {
    /// Another node has requests waiting for a claim this node holds.
    Asked,
    /// A claim held on another node has a durable answer.
    Answered,
}

impl Heard {
    /// `news` as the node of `epoch` hears it: the claim it is about and what it says, or
    /// nothing (a question for the node of another epoch).
    pub fn of(news: ClaimNews, epoch: u64) -> Option<(ClaimId, Heard)> {
        match news {
            ClaimNews::Asked { id, holder } if holder == epoch => Some((id, Heard::Asked)),
            ClaimNews::Asked { .. } => None,
            ClaimNews::Answered { id } => Some((id, Heard::Answered)),
        }
    }

    /// What the news leads to on a node where no actor of its claim runs: nothing of the claim
    /// is in flight there, so a question is answered at once (the answer is in the store), and
    /// an answer has no one to tell.
    pub fn without_actor<P>(self) -> Option<Effect<P>> {
        match self {
            Heard::Asked => Some(Effect::AnnounceAnswer),
            Heard::Answered => None,
        }
    }
}

impl<P> Core<P> {
    /// Waiter `waiter`'s wait is over: 409, if it still waits.
    pub fn wait_over(&mut self, waiter: u64, out: &mut Effects<P>) {
        self.waiters.over(waiter, out);
    }

    /// News from another node about this claim.
    pub fn hear(&mut self, heard: Heard, out: &mut Effects<P>) {
        match heard {
            Heard::Asked => self.asked(out),
            Heard::Answered => self.answered(out),
        }
    }

    /// Another node has requests waiting for this claim, which this node holds.
    fn asked(&mut self, out: &mut Effects<P>) {
        // Still working: tell the asking node once the answer is durable. Answered already (or
        // never held here): it may read what is stored now.
        match self.busy() {
            true => self.waiters.remote = true,
            false => out.push(Effect::AnnounceAnswer),
        }
    }

    /// The claim, held on another node, has a durable answer: the waiters here may have it once
    /// it is read from the store.
    fn answered(&mut self, out: &mut Effects<P>) {
        if !self.waiters.is_empty() && !self.busy() {
            out.push(Effect::Reread);
        }
    }

    /// The claim as read from the store after another node answered it: the waiters get its
    /// response, if it has one.
    pub fn reread(&mut self, log: ClaimLog, out: &mut Effects<P>) {
        if self.waiters.is_empty() || self.busy() {
            return;
        }
        if let Err(e) = self.adopt(log) {
            return self.fail(Arc::new(e), out);
        }
        if let Some(response) = self.phase.response().cloned() {
            let answer = self.answer_of(response);
            self.release_waiters(&answer, out);
        }
    }
}
