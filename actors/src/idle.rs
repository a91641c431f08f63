//! Passivation: an actor stops once it has had nothing to do for its idle timeout, and the next
//! message for its name starts it again from its log, so memory follows the keys in use. Each
//! actor keeps its own one-shot timer, armed when it is active and at most one at a time, so the
//! checks are spread over time as the actors' own activity is. (A family-wide ticker nudging every
//! live actor at once made bursts of thousands of messages that requests queued behind.)

use std::time::{Duration, Instant};

use ractor::{ActorRef, Message};

/// One actor's idle timer.
pub struct IdleTimer {
    timeout: Duration,
    last_active: Instant,
    armed: bool,
}

impl IdleTimer {
    /// A timer for an actor that stops after `timeout` without activity.
    pub fn new(timeout: Duration) -> Self {
        IdleTimer {
            timeout,
            last_active: Instant::now(),
            armed: false,
        }
    }

    /// Notes that the actor just handled something, and makes sure a `check` message is due.
    pub fn touch<M: Message>(&mut self, myself: &ActorRef<M>, check: fn() -> M) {
        self.last_active = Instant::now();
        if !self.armed {
            self.arm(myself, self.timeout, check);
        }
    }

    /// Handles a `check` message: true when the actor has been idle for the whole timeout and
    /// is not `busy` (waiting on work of its own), so it may stop; otherwise the next check is
    /// armed for when the timeout could have passed.
    pub fn expired<M: Message>(
        &mut self,
        myself: &ActorRef<M>,
        busy: bool,
        check: fn() -> M,
    ) -> bool {
        self.armed = false;
        let idle = self.last_active.elapsed();
        if !busy && idle >= self.timeout {
            return true;
        }
        let wait = match busy {
            true => self.timeout,
            false => self.timeout - idle,
        };
        self.arm(myself, wait, check);
        false
    }

    fn arm<M: Message>(&mut self, myself: &ActorRef<M>, wait: Duration, check: fn() -> M) {
        // The timer task holds only a handle: if the actor has stopped when it fires, the
        // message is dropped.
        myself.send_after(wait, check);
        self.armed = true;
    }
}
